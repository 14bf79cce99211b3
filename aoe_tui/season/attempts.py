"""Attempts: was an attempt spoiled by the infrastructure, and what did each entrant do.

Retry rule (design "failure sources decide retries", spec §3.9): an attempt is re-run as
attempt N+1 on fresh territories (up to ``max_attempts``) when

* running it raised (provisioning/teardown error from the provider → source
  ``provider``; a failed model preflight — an entrant's model or credentials did not answer
  before the territories were provisioned, :class:`aoe_tui.agents.base.PreflightError` → its
  ``failure_source``, ``provider``; any other crash of our harness → ``harness``);
* its log has an ``infrastructure_failure`` (a territory that could not be provisioned,
  a host reboot that failed, …) → that event's source (``arena``/``provider``/…);
* the match ended ``aborted`` for another reason than an operator interrupt → ``harness``;
* an agent ended with failure source ``provider`` or ``harness`` (adapter unavailable or
  harness error, §3.9) → that source.

A guest leak (the fog audit found a forbidden string, :mod:`aoe_tui.referee.audit`) spoils
the attempt but is **not retried**: the heat goes void at once.

An agent interrupted with source ``arena`` alone is **not** a retry: that is the
referee's own host reboot cutting the agent off by design (§3.4, Appendix B). A player's
failure (source ``player``) never retries.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from aoe_tui.domain.events import EventRecord, FailureSource, MatchState
from aoe_tui.domain.season_events import EntrantHeatStats
from aoe_tui.domain.world import WorldState
from aoe_tui.replay.standings import compute_standings, winner_of

__all__ = ["AttemptVerdict", "INFRA_SOURCES", "adapter_failures", "attempt_stats", "judge_attempt", "usage_mismatches"]

INFRA_SOURCES = frozenset({FailureSource.arena.value, FailureSource.provider.value, FailureSource.harness.value})
OPERATOR_INTERRUPT = "operator interrupt"


@dataclass(frozen=True)
class AttemptVerdict:
    """``spoiled``: the infrastructure spoiled the attempt; ``source`` and one-line ``detail``;
    ``retryable`` False when a new attempt would fail the same way (a guest leak: the arena
    package itself leaks), so the heat goes void at once."""

    spoiled: bool
    source: str | None = None
    detail: str = ""
    retryable: bool = True


def judge_attempt(world: WorldState | None, records: Sequence[EventRecord], error: BaseException | None = None) -> AttemptVerdict:
    """Decide whether an attempt counts (see the module docstring). Never raises."""
    if error is not None:
        from aoe_tui.runtime.provider import ProviderError

        source = getattr(error, "failure_source", None)  # a failed model preflight says whose it is
        if source not in INFRA_SOURCES:
            source = "provider" if isinstance(error, ProviderError) else "harness"
        return AttemptVerdict(True, source, f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}".strip())
    for rec in records:
        if rec.event.kind == "infrastructure_failure":
            from aoe_tui.referee.audit import LEAK_COMPONENT

            src = str(rec.event.source)
            return AttemptVerdict(True, src if src in INFRA_SOURCES else "arena",
                                  f"{rec.event.component}: {rec.event.detail}".splitlines()[0],
                                  retryable=rec.event.component != LEAK_COMPONENT)
    if world is None:
        return AttemptVerdict(True, "harness", "no world state")
    if world.match_state == MatchState.aborted and world.finish_reason != OPERATOR_INTERRUPT:
        return AttemptVerdict(True, "harness", f"match aborted: {world.finish_reason}")
    if world.match_state not in (MatchState.finished, MatchState.aborted):
        return AttemptVerdict(True, "harness", f"match ended in state {world.match_state}")
    for aid, agent in sorted(world.agents.items()):
        src = agent.failure_source.value if agent.failure_source else None
        if src in ("provider", "harness"):
            return AttemptVerdict(True, src, f"agent {aid}: {agent.terminal_detail or src}".splitlines()[0])
    return AttemptVerdict(False)


def adapter_failures(world: WorldState | None, entrant_of: Mapping[str, str]) -> dict[str, str]:
    """Entrant → ``provider``/``harness``: the entrants whose own agent ended with an
    infrastructure failure source in ``world`` (its adapter failed; §3.9). ``entrant_of``
    maps territory id → entrant id."""
    if world is None:
        return {}
    out = {}
    for t, e in entrant_of.items():
        terr = world.territories.get(t)
        agent = world.agents.get(terr.agent or e) if terr is not None else world.agents.get(e)
        src = agent.failure_source.value if agent is not None and agent.failure_source else None
        if src in ("provider", "harness"):
            out[e] = src
    return dict(sorted(out.items()))


def usage_mismatches(usage_extra: Mapping[str, Mapping]) -> dict[str, str]:
    """Agent id → one line, for agents whose credential proxy counted other token totals
    than their adapter's events (``aoe-extra.json`` ``agents[id].usage``: tokens)."""
    out = {}
    for aid, u in sorted(usage_extra.items()):
        if not isinstance(u, Mapping) or "proxy_input_tokens" not in u:
            continue
        ev = (u.get("events_input_tokens"), u.get("events_output_tokens"))
        px = (u.get("proxy_input_tokens"), u.get("proxy_output_tokens"))
        if ev != px:
            out[aid] = f"proxy {px[0]} in / {px[1]} out, events {ev[0]} in / {ev[1]} out (tokens)"
    return out


def attempt_stats(
    world: WorldState, records: Sequence[EventRecord], entrant_of: Mapping[str, str],
    usage_extra: Mapping[str, Mapping] | None = None,
) -> tuple[dict[str, int], str | None, dict[str, EntrantHeatStats]]:
    """``(ranks, winner, stats)`` of one attempt, keyed by **entrant**.

    ``entrant_of`` maps territory id → entrant id (the heat's seats). Ranks follow §3.6
    (:func:`aoe_tui.replay.standings.compute_standings`; ties share a rank); ``winner`` is
    the winning territory's entrant or None. ``usage_extra`` maps agent id → its
    ``aoe-extra.json`` ``usage`` entry (cache tokens, ``cost_source``); without one an
    entrant's cache tokens are unknown and a recorded cost is the adapter's.
    """
    passed_at: dict[tuple[str, str], int] = {}
    usage: set[str] = set()
    for rec in records:
        ev = rec.event
        if ev.kind == "milestone_passed":
            passed_at[(ev.territory, ev.milestone)] = rec.elapsed_ms
        elif ev.kind == "usage_charged" and (
            ev.input_tokens is not None or ev.output_tokens is not None or ev.cost_microusd is not None
        ):
            usage.add(ev.agent)
    ranks: dict[str, int] = {}
    stats: dict[str, EntrantHeatStats] = {}
    for row in compute_standings(world):
        e = entrant_of.get(row.territory)
        if e is None:
            continue
        ranks[e] = row.rank
        terr = world.territories[row.territory]
        agent_id = terr.agent or e
        agent = world.agents.get(agent_id)
        ms = {
            mid: passed_at.get((row.territory, mid), 0)
            for mid, view in sorted(terr.milestones.items())
            if view.passed
        }
        ux = (usage_extra or {}).get(agent_id) or {}
        cost_known = any(r.event.kind == "usage_charged" and r.event.agent == agent_id
                         and r.event.cost_microusd is not None for r in records)
        stats[e] = EntrantHeatStats(
            territory=row.territory,
            rank=row.rank,
            points=row.points,
            passed=row.passed,
            durable_at_ms=row.durable_at_ms,
            milestones=ms,
            input_tokens=agent.input_tokens if agent else 0,
            output_tokens=agent.output_tokens if agent else 0,
            cost_microusd=agent.cost_microusd if agent else 0,
            usage_recorded=agent_id in usage,
            terminal_state=agent.terminal_state.value if agent and agent.terminal_state else None,
            failure_source=agent.failure_source.value if agent and agent.failure_source else None,
            cache_read_tokens=_count(ux.get("cache_read_tokens")),
            cache_write_tokens=_count(ux.get("cache_write_tokens")),
            cost_source=(ux.get("cost_source") if ux.get("cost_source") in ("price table", "adapter") else "adapter")
            if cost_known else None,
        )
    win_t = winner_of(world)
    return ranks, entrant_of.get(win_t) if win_t else None, stats


def _count(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None
