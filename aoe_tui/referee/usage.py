"""Live usage accounting: cumulative checkpoints → ``usage_charged`` deltas (spec §5.5).

Adapters report **cumulative** usage (``usage.json`` checkpoints and the final
``result.json`` usage). The referee keeps, per agent, the highest value seen per
field and emits only the increase:

* per field the new cumulative value is ``max(previous, current)`` — a stale, lower
  reading yields a delta of 0;
* a ``None`` current value yields a ``None`` delta for that field (cumulative kept);
* a delta whose fields are all 0 or ``None`` is not emitted.

The final result's usage goes through the same logic, so nothing is double-counted.
``rounds`` and ``tool_calls`` are tracked but never reach events (upstream).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from aoe_tui.domain.events import UsageCharged

__all__ = ["UsageTracker"]

_OPTIONAL = ("input_tokens", "output_tokens", "cost_microusd")


@dataclass
class _Cumulative:
    resource_units: int = 0
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost_microusd: int | None = None
    rounds: int | None = None
    tool_calls: int | None = None


@dataclass
class UsageTracker:
    """Per-agent cumulative usage seen so far; :meth:`charge` returns the event to emit."""

    _seen: dict[str, _Cumulative] = field(default_factory=dict)

    def charge(self, agent: str, usage: object) -> UsageCharged | None:
        """Merge cumulative ``usage`` (an ``agents.base.Usage`` or anything with the same
        attributes) for ``agent``; return the ``usage_charged`` delta event, or None if empty."""
        prev = self._seen.setdefault(agent, _Cumulative())
        deltas: dict[str, int | None] = {}
        cur_ru = int(getattr(usage, "resource_units", 0) or 0)
        merged_ru = max(prev.resource_units, cur_ru)
        deltas["resource_units"] = merged_ru - prev.resource_units
        prev.resource_units = merged_ru
        for name in _OPTIONAL:
            cur = getattr(usage, name, None)
            if cur is None:
                deltas[name] = None
                continue
            before = getattr(prev, name)
            merged = max(before or 0, int(cur))
            deltas[name] = merged - (before or 0)
            setattr(prev, name, merged)
        for name in ("rounds", "tool_calls"):
            cur = getattr(usage, name, None)
            if cur is not None:
                setattr(prev, name, max(getattr(prev, name) or 0, int(cur)))
        if not any(v for v in deltas.values()):
            return None
        return UsageCharged(agent=agent, **deltas)

    def totals(self, agent: str) -> dict[str, int | None]:
        """The merged cumulative usage of ``agent`` (all six fields; None = never reported)."""
        c = self._seen.get(agent, _Cumulative())
        return {
            "resource_units": c.resource_units,
            "input_tokens": c.input_tokens,
            "output_tokens": c.output_tokens,
            "cost_microusd": c.cost_microusd,
            "rounds": c.rounds,
            "tool_calls": c.tool_calls,
        }
