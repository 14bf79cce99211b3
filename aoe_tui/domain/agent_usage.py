"""Cumulative usage of one agent (spec §5.3 ``usage``), shared by adapters, the referee
and the adapter files (:mod:`aoe_tui.domain.adapter_io`)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Usage"]


@dataclass
class Usage:
    """Cumulative usage (spec §5.3 ``usage``): ``None`` means unknown, never zero.

    Tokens are counts of tokens; ``cost_microusd`` is in micro-USD (1e-6 USD);
    ``resource_units`` defaults to 0.

    ``cache_read_tokens`` / ``cache_write_tokens`` (ours, not in §5.3): how many of the
    ``input_tokens`` the provider read from / wrote to its prompt cache (they are
    **included** in ``input_tokens``, so the upstream total stays the total). They are never
    written to upstream files (``usage.json``, ``result.json``, events): adapters that know
    them report them through :meth:`aoe_tui.agents.base.AgentRun.usage_detail` into our
    ``aoe-extra.json``.
    """

    rounds: int | None = None
    tool_calls: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost_microusd: int | None = None
    resource_units: int = 0
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
