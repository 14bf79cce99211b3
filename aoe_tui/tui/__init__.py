"""aoe_tui.tui layer (see DEVELOPERS.md architecture)."""
