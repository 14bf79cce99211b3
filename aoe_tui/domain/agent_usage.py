"""Cumulative usage of one agent (spec §5.3 ``usage``), shared by adapters, the referee
and the adapter files (:mod:`aoe_tui.domain.adapter_io`)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Usage"]


@dataclass
class Usage:
    """Cumulative usage (spec §5.3 ``usage``): ``None`` means unknown, never zero.

    ``cost_microusd`` is in micro-USD (1e-6 USD); ``resource_units`` defaults to 0.
    """

    rounds: int | None = None
    tool_calls: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost_microusd: int | None = None
    resource_units: int = 0
