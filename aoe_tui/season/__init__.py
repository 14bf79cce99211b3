"""aoe_tui.season layer (see DEVELOPERS.md architecture)."""
