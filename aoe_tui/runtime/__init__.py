"""aoe_tui.runtime layer (see DEVELOPERS.md architecture)."""
