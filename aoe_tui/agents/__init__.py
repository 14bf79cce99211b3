"""aoe_tui.agents layer (see DEVELOPERS.md architecture)."""
