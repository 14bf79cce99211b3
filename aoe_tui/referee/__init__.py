"""aoe_tui.referee layer (see docs/architecture.md)."""
