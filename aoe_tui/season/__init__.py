"""aoe_tui.season layer (see docs/architecture.md)."""
