"""aoe_tui.domain layer (see DEVELOPERS.md architecture)."""
