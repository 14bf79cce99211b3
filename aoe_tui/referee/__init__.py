"""aoe_tui.referee layer (see DEVELOPERS.md architecture)."""
