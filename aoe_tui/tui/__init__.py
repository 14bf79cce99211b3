"""aoe_tui.tui layer (see docs/architecture.md)."""
