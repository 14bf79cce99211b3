"""aoe_tui.replay layer (see docs/architecture.md)."""
