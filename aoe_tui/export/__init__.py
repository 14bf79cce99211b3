"""aoe_tui.export layer (see DEVELOPERS.md architecture)."""
