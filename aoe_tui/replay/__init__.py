"""aoe_tui.replay layer (see DEVELOPERS.md architecture)."""
