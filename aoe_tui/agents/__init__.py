"""aoe_tui.agents layer (see docs/architecture.md)."""
