"""aoe_tui.serve layer (see DEVELOPERS.md architecture)."""
