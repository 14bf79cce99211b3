"""The one pure reducer from events to world state (upstream §2.4, Appendix B).

Used by the live view, replay, resume and standings. ``apply_event`` mutates the
given :class:`WorldState` in place; ``reduce_match`` folds a whole log into a
fresh world.
"""

from __future__ import annotations

from collections.abc import Iterable

from aoe_tui.domain import events as ev
from aoe_tui.domain.events import (
    AgentTerminalState,
    CompetitorState,
    EventRecord,
    FailureSource,
    MatchState,
    TerritoryState,
)
from aoe_tui.domain.world import (
    AgentView,
    HealthView,
    MilestoneView,
    TerritoryView,
    WorldState,
)

_U64_MAX = 2**64 - 1


def _territory(world: WorldState, tid: str) -> TerritoryView:
    view = world.territories.get(tid)
    if view is None:
        view = world.territories[tid] = TerritoryView()
    return view


def _agent(world: WorldState, aid: str) -> AgentView:
    view = world.agents.get(aid)
    if view is None:
        view = world.agents[aid] = AgentView(territory="", model="")
    return view


def _milestone(world: WorldState, tid: str, mid: str) -> MilestoneView:
    terr = _territory(world, tid)
    view = terr.milestones.get(mid)
    if view is None:
        view = terr.milestones[mid] = MilestoneView()
    return view


def _sat_add(a: int, b: int | None) -> int:
    return min(_U64_MAX, a + (b or 0))


def _end_agent(world: WorldState, aid: str, successful: bool | None, source: FailureSource,
               state: AgentTerminalState, detail: str) -> None:
    """An agent's terminal event (§2.4): it stops running, with its outcome and attribution."""
    a = _agent(world, aid)
    a.running = False
    a.successful = successful
    a.failure_source = source
    a.terminal_state = state
    a.terminal_detail = detail


def apply_event(world: WorldState, record: EventRecord) -> None:
    """Apply one record to ``world`` in place (§2.4 rules, plus ``agent_outraced``)."""
    world.last_sequence = record.sequence
    world.elapsed_ms = record.elapsed_ms
    e = record.event
    kind = e.kind
    if kind == "milestone_failed":
        m = _milestone(world, e.territory, e.milestone)
        m.evaluating = False
        m.failure_category = e.category
        m.failure_detail = e.detail
    elif kind == "milestone_evaluation_started":
        _milestone(world, e.territory, e.milestone).evaluating = True
    elif kind == "milestone_passed":
        terr = _territory(world, e.territory)
        m = _milestone(world, e.territory, e.milestone)
        if not m.passed:
            terr.milestone_points = _sat_add(terr.milestone_points, e.points)
        m.evaluating = False
        m.passed = True
        m.points = e.points
        m.evidence = e.evidence
        m.failure_category = None
        m.failure_detail = None
    elif kind == "health_observed":
        _territory(world, e.territory).last_health = HealthView(
            healthy=e.healthy, status=e.status, latency_ms=e.latency_ms, detail=e.detail
        )
    elif kind == "resources_changed":
        _territory(world, e.territory).resources = e.remaining
    elif kind == "usage_charged":
        a = _agent(world, e.agent)
        a.resource_units_used = _sat_add(a.resource_units_used, e.resource_units)
        a.input_tokens = _sat_add(a.input_tokens, e.input_tokens)
        a.output_tokens = _sat_add(a.output_tokens, e.output_tokens)
        a.cost_microusd = _sat_add(a.cost_microusd, e.cost_microusd)
    elif kind == "territory_registered":
        terr = _territory(world, e.territory)
        terr.class_ = e.class_
        terr.agent = e.agent
    elif kind == "match_state_changed":
        world.match_state = MatchState(e.to)
    elif kind == "territory_state_changed":
        _territory(world, e.territory).state = TerritoryState(e.to)
    elif kind == "agent_started":
        world.agents[e.agent] = AgentView(territory=e.territory, model=e.model, running=True)
    elif kind == "agent_finished":
        _end_agent(world, e.agent, e.success, FailureSource(e.source),
                   AgentTerminalState.completed if e.success else AgentTerminalState.failed, e.detail)
    elif kind == "agent_interrupted":
        _end_agent(world, e.agent, None, FailureSource(e.source), AgentTerminalState.interrupted, e.detail)
    elif kind == "agent_terminated":
        _end_agent(world, e.agent, None, FailureSource.controller, AgentTerminalState.terminated, e.reason)
    elif kind == "agent_outraced":  # Appendix B: overrides an earlier agent_finished
        _end_agent(world, e.agent, False, FailureSource.player, AgentTerminalState.incomplete, e.reason)
    elif kind == "competitor_state_changed":
        _territory(world, e.territory).competitor_state = CompetitorState(e.to)
    elif kind == "milestone_revoked":
        terr = _territory(world, e.territory)
        m = _milestone(world, e.territory, e.milestone)
        if m.passed:
            terr.milestone_points = max(0, terr.milestone_points - m.points)
        m.evaluating = False
        m.passed = False
        m.evidence = None
    elif kind == "durable_deployment_completed":
        terr = _territory(world, e.territory)
        terr.competitor_state = CompetitorState.durable
        terr.durable_at_ms = e.elapsed_ms
    elif kind == "territory_eliminated":
        terr = _territory(world, e.territory)
        terr.state = TerritoryState.eliminated
        terr.elimination_source = FailureSource(e.source)
        terr.elimination_detail = e.detail
    elif kind == "infrastructure_failure":
        world.infrastructure_failures += 1
    elif kind == "match_finished":
        if world.match_state != MatchState.aborted:
            world.match_state = MatchState.finished
        world.winner = e.winner
        world.finish_reason = e.reason
    # post_match_drain_started / post_match_drain_finished: no state change


def reduce_match(records: Iterable[EventRecord]) -> WorldState:
    """Fold ``records`` (in sequence order) into a fresh :class:`WorldState`."""
    world = WorldState()
    for rec in records:
        apply_event(world, rec)
    return world


__all__ = ["apply_event", "reduce_match", "ev"]
