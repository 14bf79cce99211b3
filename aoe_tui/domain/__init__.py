"""aoe_tui.domain layer (see docs/architecture.md)."""
