"""aoe_tui.runtime layer (see docs/architecture.md)."""
