"""The build-race rules (spec §3) without processes or clocks.

:class:`~aoe_tui.referee.rules.BuildRaceRules` is driven here as the heat supervisor
drives it: every returned event is appended (sequence, ms) and folded into the world
with :func:`~aoe_tui.replay.reducer.apply_event` before the next question; the match
clock is whatever ms the test says. Each test checks the events and the world, and
the world always equals :func:`~aoe_tui.replay.reducer.reduce_match` of the records.
The arena is ``arenas/first-build`` (service-up → write-read → service-restart →
host-reboot, 10/20/30/40 points; completion host-reboot; three seats).
"""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

import pytest

from aoe_tui.domain.arena import load_manifest
from aoe_tui.domain.events import EventRecord
from aoe_tui.domain.world import WorldState, world_json
from aoe_tui.referee import rules as rules_module
from aoe_tui.referee.rules import REASONS, AgentResult, BuildRaceRules, Completion
from aoe_tui.replay.reducer import apply_event, reduce_match

MANIFEST = load_manifest(Path(__file__).resolve().parent.parent / "arenas" / "first-build" / "arena.toml").manifest
T1, T2, T3 = "builder-one", "builder-two", "builder-three"
SEATS = [T1, T2, T3]
MILESTONES = ["service-up", "write-read", "service-restart", "host-reboot"]


def agent(tid: str) -> str:
    return f"{tid}-agent"


class Heat:
    """A heat's rules and world, with the log kept as a list of records."""

    def __init__(self, *, stop_on_first_durable: bool = True, drain_ms: int = 30_000, milestones=None) -> None:
        build = MANIFEST.build.model_copy(update={"stop_on_first_durable": stop_on_first_durable})
        if milestones is not None:
            build = build.model_copy(update={"milestones": milestones, "completion_milestone": milestones[-1].id})
        self.world = WorldState()
        self.rules = BuildRaceRules(MANIFEST.model_copy(update={"build": build}), self.world, drain_ms=drain_ms)
        self.records: list[EventRecord] = []
        self.emit(self.rules.start())

    def emit(self, stamped) -> list:
        """Append + reduce; return the events."""
        for s in stamped:
            rec = EventRecord.model_construct(schema_version=1, sequence=len(self.records), elapsed_ms=s.at_ms,
                                              event=s.event)
            apply_event(self.world, rec)
            self.records.append(rec)
        return [s.event for s in stamped]

    def check(self, tid: str, mid: str, start_ms: int, end_ms: int, *, passed: bool = True, detail: str = "",
              reboot_failed: bool = False) -> Completion:
        """Start an evaluation at ``start_ms`` and hand its completion at ``end_ms`` to the rules."""
        self.emit(self.rules.evaluation_started(tid, mid, start_ms))
        done = Completion(tid, mid, end_ms, passed=passed, detail=detail, evidence={"m": mid} if passed else None,
                          reboot_failed=reboot_failed)
        self.rules.complete(done)
        return done

    def settle(self, now_ms: int) -> list:
        """Apply every completion whose millisecond is over at ``now_ms``, in the rules' order."""
        out = []
        for done in self.rules.due(now_ms):
            out += self.emit(self.rules.apply(done))
        return out

    def pass_all(self, tid: str, upto: str, start_ms: int, step_ms: int = 100) -> int:
        """Pass ``tid``'s milestones in order up to ``upto``; returns the clock after."""
        t = start_ms
        for mid in MILESTONES[: MILESTONES.index(upto) + 1]:
            assert self.rules.next_milestone(tid) is not None and self.rules.next_milestone(tid).id == mid
            self.check(tid, mid, t, t + step_ms)
            t += step_ms + 1
            self.settle(t)
        return t

    def result(self, tid: str, now_ms: int, *, source: str = "player", success: bool = True, usage=None,
               interrupted: bool = False, detail: str = "done") -> list:
        return self.emit(self.rules.agent_result(
            AgentResult(agent(tid), source, success, detail, usage, interrupted), now_ms))

    def kinds(self, since: int = 0) -> list[str]:
        return [r.event.kind for r in self.records[since:]]

    def reduced(self) -> None:
        """The world equals the reduction of the log; the clock never went back."""
        assert world_json(self.world) == world_json(reduce_match(self.records))
        ms = [r.elapsed_ms for r in self.records]
        assert ms == sorted(ms)


def usage(**kw):
    return SimpleNamespace(**{"resource_units": 0, "input_tokens": None, "output_tokens": None,
                              "cost_microusd": None, **kw})


def test_rules_module_is_pure():
    """No processes, no event loop, no clock: the rules import none of them."""
    tree = ast.parse(Path(rules_module.__file__).read_text())
    names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    names += [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    bad = [n for n in names if n.split(".")[0] in ("asyncio", "time", "os", "subprocess")
           or n.startswith(("aoe_tui.runtime", "aoe_tui.agents"))]
    assert not bad


def test_start_events_in_canonical_order():
    h = Heat()
    head = [(r.event.kind, getattr(r.event, "agent" if r.event.kind == "agent_started" else "territory", None))
            for r in h.records]
    assert head == [
        ("match_state_changed", None),
        ("competitor_state_changed", T1),
        ("competitor_state_changed", T3),  # sorted by id
        ("competitor_state_changed", T2),
        ("territory_registered", T1),  # manifest order
        ("territory_registered", T2),
        ("territory_registered", T3),
        ("agent_started", agent(T1)),
        ("agent_started", agent(T2)),
        ("agent_started", agent(T3)),
    ]
    assert all(r.elapsed_ms == 0 for r in h.records)
    assert h.records[1].event.reason == REASONS["preflight"]
    assert h.world.match_state == "running" and h.rules.accepting()
    assert {t.competitor_state for t in h.world.territories.values()} == {"building"}
    assert h.rules.running_agents() == [agent(t) for t in SEATS]
    h.reduced()


def test_eligibility_follows_depends_on_in_manifest_order():
    h = Heat()
    r = h.rules
    assert r.next_milestone(T1).id == "service-up"
    assert r.next_milestone(T1, {"service-up"}) is None  # write-read depends on it
    h.check(T1, "service-up", 100, 150)
    assert r.next_milestone(T1) is None  # evaluating
    h.settle(151)
    assert r.next_milestone(T1).id == "write-read"  # eligible in the same tick
    assert r.next_milestone(T2).id == "service-up"  # other seats unaffected

    # a diamond: b and c need a; d needs b and c — manifest order among the eligible
    ms = MANIFEST.build.milestones
    a, b, c, d = (ms[0], ms[1].model_copy(update={"id": "b", "depends_on": ["service-up"]}),
                  ms[2].model_copy(update={"id": "c", "depends_on": ["service-up"]}),
                  ms[3].model_copy(update={"id": "d", "depends_on": ["b", "c"]}))
    h = Heat(milestones=[a, b, c, d])
    h.pass_all(T1, "service-up", 100)
    assert h.rules.next_milestone(T1).id == "b"
    assert h.rules.next_milestone(T1, {"b"}).id == "c"
    h.check(T1, "b", 300, 310)
    h.settle(311)
    assert h.rules.next_milestone(T1).id == "c"
    assert h.rules.next_milestone(T1, {"c"}) is None  # d still needs c
    h.check(T1, "c", 320, 330)
    h.settle(331)
    assert h.rules.next_milestone(T1).id == "d"
    h.reduced()


def test_pass_fail_and_retry():
    h = Heat()
    n = len(h.records)
    failed = h.check(T1, "service-up", 2000, 2300, passed=False, detail="service-up not ready")
    assert h.kinds(n) == ["competitor_state_changed", "milestone_evaluation_started"]
    assert h.records[n].event.reason == REASONS["verifying"]
    assert h.settle(2300) == []  # its millisecond is not over
    (e,) = h.settle(2301)
    assert (e.kind, e.category, e.detail, e.retryable) == ("milestone_failed", "verification_failed",
                                                            "service-up not ready", True)
    assert failed.accepted is True and h.records[-1].elapsed_ms == 2300
    view = h.world.territories[T1].milestones["service-up"]
    assert (view.evaluating, view.passed, view.failure_detail) == (False, False, "service-up not ready")
    assert h.rules.next_milestone(T1).id == "service-up"  # retried at the next tick

    n = len(h.records)
    h.check(T1, "service-up", 4000, 4100)
    assert h.kinds(n) == ["milestone_evaluation_started"]  # already verifying
    (e,) = h.settle(4101)
    assert (e.kind, e.points, e.evidence) == ("milestone_passed", 10, {"m": "service-up"})
    assert h.world.territories[T1].milestone_points == 10
    # a second pass of a passed milestone is ignored (§3.5)
    again = Completion(T1, "service-up", 4200, passed=True)
    h.rules.complete(again)
    assert h.settle(4201) == [] and again.accepted is True
    h.reduced()


def test_first_durable_finishes_and_discards_later_results():
    h = Heat()
    late = h.check(T2, "service-up", 100, 5000)
    t = h.pass_all(T1, "service-restart", 100)
    n = len(h.records)
    h.check(T1, "host-reboot", t, 4000)
    h.settle(4001)
    assert h.kinds(n + 1) == ["milestone_passed", "competitor_state_changed", "durable_deployment_completed",
                              "match_state_changed", "match_finished"]
    assert all(r.elapsed_ms == 4000 for r in h.records[n + 1:])
    fin = h.records[-1].event
    assert (fin.winner, fin.reason) == (T1, REASONS["first_durable"])
    assert h.records[-3].event.elapsed_ms == 4000
    assert h.world.territories[T1].competitor_state == "durable" and h.world.territories[T1].durable_at_ms == 4000
    assert h.world.match_state == "finished" and not h.rules.accepting()
    assert h.settle(6000) == [] and late.accepted is False  # in flight at the finish: discarded
    assert h.rules.stamp(9000) == 4000  # the clock is frozen
    assert h.rules.timer_expired(9000) == []
    h.reduced()


def test_same_millisecond_completions_go_in_seat_order():
    h = Heat()
    r = h.rules
    for tid in (T3, T2, T1):
        h.check(tid, "service-up", 100, 400)
    early = Completion(T3, "service-up", 399)  # an earlier ms goes first whatever the seat
    r.complete(early)
    r.complete(Completion(T1, "write-read", 10**9))  # not complete yet: stays pending
    assert r.due(400) == [early]
    due = r.due(401)
    assert [(c.territory, c.at_ms) for c in due] == [(T1, 400), (T2, 400), (T3, 400)]
    assert [c.territory for c in r.due(10**9 + 1)] == [T1]

    # two durable passes in one millisecond: the earlier seat wins, the other is discarded
    h = Heat()
    t = max(h.pass_all(tid, "service-restart", 100) for tid in (T3, T1))
    second = h.check(T3, "host-reboot", t, 7000)
    first = h.check(T1, "host-reboot", t, 7000)
    h.settle(7001)
    assert (first.accepted, second.accepted) == (True, False)
    assert h.world.winner == T1 and h.world.territories[T3].durable_at_ms is None
    h.reduced()


def test_timer_tie_has_no_winner():
    h = Heat()
    for tid in (T1, T2):
        h.pass_all(tid, "write-read", 100)
    h.pass_all(T3, "service-up", 100)
    h.rules.close()
    assert not h.rules.accepting() and h.rules.running()
    n = len(h.records)
    h.emit(h.rules.timer_expired(600_000))
    assert h.kinds(n) == ["match_state_changed", "match_finished"]
    assert h.world.winner is None and h.world.finish_reason == REASONS["timer"]  # T1 = T2 on (None, 30, 2)
    assert h.records[-1].elapsed_ms == 600_000
    h.reduced()


def test_timer_standings_winner():
    # more points wins
    h = Heat()
    h.pass_all(T1, "service-up", 100)
    h.pass_all(T2, "service-restart", 100)
    h.emit(h.rules.timer_expired(600_000))
    assert h.world.winner == T2
    # without stop_on_first_durable: durable beats points, and the earlier durable wins
    h = Heat(stop_on_first_durable=False)
    h.pass_all(T2, "host-reboot", 100)
    h.pass_all(T1, "host-reboot", 1000)
    assert h.world.match_state == "running"
    assert h.world.territories[T1].competitor_state == "durable" and not h.rules.can_progress(T1)
    h.pass_all(T3, "service-restart", 100)
    h.emit(h.rules.timer_expired(600_000))
    assert h.world.winner == T2 and h.world.finish_reason == REASONS["timer"]
    h.reduced()


def test_deadline_finishes_at_once_and_in_flight_checks_earn_nothing():
    """A 12 s heat: builder-one's verifier (timeout 12 s) starts at 9 s and sleeps past the
    deadline. The match finishes at the deadline (plus the ms the timer took to fire), not
    when the verifier returns; a check completed just before the finish still counts."""
    h = Heat()
    h.pass_all(T2, "service-up", 100)  # builder-two: 10 points
    slow = h.check(T1, "service-up", 9_000, 21_000)  # would return at 21 s (sleeps)
    just_in = h.check(T3, "service-up", 11_900, 12_001)  # completed before the finish ms
    deadline, fired = 12_000, 12_002
    h.rules.close()
    assert not h.rules.accepting() and h.rules.running()
    n = len(h.records)
    h.settle(fired)  # what completed before the finish millisecond is applied first
    assert just_in.accepted is True and h.world.territories[T3].milestones["service-up"].passed
    h.emit(h.rules.timer_expired(fired))
    assert h.kinds(n) == ["milestone_passed", "match_state_changed", "match_finished"]
    fin = h.records[-1]
    assert deadline <= fin.elapsed_ms <= deadline + MANIFEST.rules.tick_ms
    assert h.world.winner is None  # builder-two and builder-three tie on (None, 10, 1)
    # the sleeping verifier: discarded, never applied, no pass/fail, nothing credited
    assert slow.accepted is False
    assert h.rules.due(10**9) == [] and h.rules.apply(slow) == []
    t1 = h.world.territories[T1].milestones["service-up"]
    assert t1.evaluating and not t1.passed and t1.evidence is None and t1.failure_category is None
    assert not [r for r in h.records if r.event.kind in ("milestone_passed", "milestone_failed")
                and r.event.territory == T1]
    assert h.world.territories[T1].milestone_points == 0
    # the drain starts from the frozen clock
    plan = h.rules.start_drain(25_000)
    h.emit(plan.events)
    h.emit(h.rules.finish_drain(h.rules.drain_deadline(), 55_000))
    assert {r.elapsed_ms for r in h.records[n + 3:]} == {fin.elapsed_ms}
    h.reduced()


def test_reboot_failure_makes_the_competitor_unavailable():
    h = Heat()
    t = h.pass_all(T1, "service-restart", 100)
    n = len(h.records)
    h.check(T1, "host-reboot", t, 20_000, reboot_failed=True, detail="host reboot failed: SSH unavailable after reboot")
    h.settle(20_001)
    assert h.kinds(n + 1) == ["infrastructure_failure", "milestone_failed", "competitor_state_changed"]
    infra, failed, state = (r.event for r in h.records[n + 1:])
    assert (infra.component, infra.source) == (f"territory:{T1}", "arena")
    assert (failed.category, failed.retryable) == ("infrastructure_failure", False)
    assert (state.to, state.reason) == ("unavailable", "territory failed: host reboot failed: SSH unavailable after reboot")
    assert h.world.infrastructure_failures == 1 and not h.rules.can_progress(T1)
    assert not h.world.territories[T1].milestones["host-reboot"].evaluating
    # the drain leaves a failed territory's end state alone
    h.emit(h.rules.timer_expired(600_000))
    assert h.world.winner == T1  # 60 points lead
    h.emit(h.rules.start_drain(600_000).events)
    h.emit(h.rules.finish_drain(h.rules.drain_deadline(), 600_000))
    ends = [(r.event.territory, r.event.to) for r in h.records if r.event.kind == "competitor_state_changed"
            and r.event.to in ("incomplete", "unavailable")]
    assert ends == [(T1, "unavailable"), (T2, "incomplete"), (T3, "incomplete")]
    h.reduced()


def test_agent_results_and_usage():
    h = Heat()
    assert h.emit(h.rules.usage_checkpoint(agent(T1), usage(resource_units=1, input_tokens=10), 500))[0].input_tokens == 10
    assert h.rules.usage_checkpoint(agent(T1), usage(resource_units=1, input_tokens=7), 600) == []  # stale
    events = h.result(T1, 700, usage=usage(resource_units=2, input_tokens=30, output_tokens=5))
    assert [e.kind for e in events] == ["agent_finished", "usage_charged"]
    assert (events[0].source, events[0].success) == ("player", True)
    assert (events[1].resource_units, events[1].input_tokens, events[1].output_tokens) == (1, 20, 5)
    a1 = h.world.agents[agent(T1)]
    assert (a1.running, a1.input_tokens, a1.resource_units_used) == (False, 30, 2)
    events = h.result(T2, 800, source="arena", success=False, interrupted=True, detail="ssh lost")
    assert [e.kind for e in events] == ["agent_interrupted"]
    assert h.world.agents[agent(T2)].failure_source == "arena"
    assert h.result(T2, 900) == []  # an ended agent's second result adds nothing
    h.reduced()


def test_drain_after_a_durable_winner():
    h = Heat(drain_ms=1000)
    h.result(T3, 50, source="harness", success=False, detail="adapter exited with exit status: 1")
    h.pass_all(T1, "host-reboot", 100)
    h.result(T1, 500)  # arrives after the finish, before the drain: recorded at the frozen clock
    frozen = h.world.elapsed_ms
    plan = h.rules.start_drain(9_999)
    (started,) = h.emit(plan.events)
    assert (started.timeout_ms, started.pending_agents) == (1000, 1)
    assert (plan.outraced, plan.stop_now, plan.wait_for) == ([agent(T2)], [agent(T2)], [])  # T3 keeps "harness"
    # the stopped agent's result brings only its usage
    assert [e.kind for e in h.result(T2, 9_999, success=False, usage=usage(resource_units=3))] == ["usage_charged"]
    (outraced,) = h.emit(h.rules.outraced(plan, 9_999))
    assert outraced.reason == f"{T1} reached durable first; build ended at the frozen clock"
    assert h.rules.drain_deadline() == []
    n = len(h.records)
    h.emit(h.rules.finish_drain([], 9_999))
    assert h.kinds(n) == ["competitor_state_changed", "competitor_state_changed", "post_match_drain_finished"]
    two, three, fin = (r.event for r in h.records[n:])
    assert (two.territory, two.to, two.reason) == (T2, "incomplete", f"{T1} reached durable first")
    assert (three.territory, three.to, three.reason) == (T3, "unavailable", "agent ended with a harness failure")
    assert (fin.captured_agents, fin.terminated_agents) == (0, 1)
    assert all(r.elapsed_ms == frozen for r in h.records if r.sequence >= n - 3)
    a2 = h.world.agents[agent(T2)]
    assert (a2.terminal_state, a2.resource_units_used) == ("incomplete", 3)
    h.reduced()


def test_an_agent_that_finished_before_the_durable_win_is_not_outraced():
    """Outraced means still racing when the rival won: an agent whose run had ended before
    (here a successful finish) keeps its ``agent_finished``; only the running one is
    outraced. Its territory still ends ``incomplete`` (it did not reach durable)."""
    h = Heat(drain_ms=1000)
    h.result(T2, 50)  # T2's agent done (success) before T1 wins
    h.pass_all(T1, "host-reboot", 100)
    plan = h.rules.start_drain(9_999)
    h.emit(plan.events)
    assert (plan.outraced, plan.stop_now, plan.wait_for) == ([agent(T3)], [agent(T3)], [agent(T1)])
    assert [e.agent for e in h.emit(h.rules.outraced(plan, 9_999))] == [agent(T3)]
    n = len(h.records)
    h.emit(h.rules.finish_drain(h.rules.drain_deadline(), 9_999))
    ends = {r.event.territory: r.event.to for r in h.records[n:] if r.event.kind == "competitor_state_changed"}
    assert ends == {T2: "incomplete", T3: "incomplete"}
    a2, a3 = h.world.agents[agent(T2)], h.world.agents[agent(T3)]
    assert (a2.terminal_state, a2.successful, a2.failure_source) == ("completed", True, "player")
    assert (a3.terminal_state, a3.successful) == ("incomplete", False)
    h.reduced()


def test_limits_a_territory_ran_into_are_named_where_its_seat_ends():
    """Issue 26: a seat outraced or stopped after its territory ran out of its own resources
    ends with reasons that name the limits (the log has no event of its own for them), so
    the log and a replay tell why it stalled; the other seats' reasons are untouched."""
    h = Heat(drain_ms=1000)
    h.rules.note_limits(T2, ["out of tasks in the territory (2048)"])
    h.rules.note_limits(T2, ["out of tasks in the territory (2048)", "disk full in the territory (2048 MiB)"])
    h.pass_all(T1, "host-reboot", 100)
    plan = h.rules.start_drain(9_999)
    h.emit(plan.events)
    reasons = {e.agent: e.reason for e in h.emit(h.rules.outraced(plan, 9_999))}
    limits = "out of tasks in the territory (2048); disk full in the territory (2048 MiB)"
    assert reasons == {agent(T2): f"{T1} reached durable first; build ended at the frozen clock; {limits}",
                       agent(T3): f"{T1} reached durable first; build ended at the frozen clock"}
    n = len(h.records)
    h.emit(h.rules.finish_drain(h.rules.drain_deadline(), 9_999))
    ends = {r.event.territory: r.event.reason for r in h.records[n:] if r.event.kind == "competitor_state_changed"}
    assert ends == {T2: f"{T1} reached durable first; {limits}", T3: f"{T1} reached durable first"}
    h.reduced()


def test_drain_deadline_after_the_timer():
    h = Heat()
    h.result(T2, 100, source="provider", success=False, detail="model unavailable")
    h.emit(h.rules.timer_expired(600_000))
    plan = h.rules.start_drain(600_000)
    h.emit(plan.events)
    assert plan.events[0].event.pending_agents == 2
    assert (plan.outraced, plan.stop_now, plan.wait_for) == ([], [], [agent(T1), agent(T3)])
    assert [e.kind for e in h.result(T1, 612_000)] == ["agent_finished"]  # captured in the window
    still = h.rules.drain_deadline()
    assert still == [agent(T3)]
    assert h.result(T3, 630_000, success=False, detail="killed") == []  # stopped by the referee: silenced
    n = len(h.records)
    h.emit(h.rules.finish_drain(still, 630_000))
    assert h.kinds(n) == ["agent_terminated", "competitor_state_changed", "competitor_state_changed",
                          "competitor_state_changed", "post_match_drain_finished"]
    assert h.records[n].event.reason == REASONS["drain_deadline"]
    ends = {r.event.territory: (r.event.to, r.event.reason) for r in h.records[n + 1:n + 4]}
    assert ends == {
        T1: ("incomplete", "no durable deployment by the end of the match"),
        T2: ("unavailable", "agent ended with a provider failure"),
        T3: ("incomplete", "no durable deployment by the end of the match"),
    }
    fin = h.records[-1].event
    assert (fin.captured_agents, fin.terminated_agents) == (1, 1)
    assert all(r.elapsed_ms == 600_000 for r in h.records[n:])
    assert h.world.agents[agent(T3)].terminal_state == "terminated"
    h.reduced()


def test_abort():
    h = Heat()
    in_flight = h.check(T1, "service-up", 100, 300)
    n = len(h.records)
    h.emit(h.rules.abort(250))
    assert h.kinds(n) == ["match_state_changed", "match_finished"]
    assert h.world.match_state == "aborted" and h.world.winner is None
    assert h.world.finish_reason == REASONS["interrupt"]
    assert h.rules.due(10_000) == []  # in-flight results are dropped
    running = h.rules.running_agents()
    assert h.result(T2, 400, success=False, detail="killed") == []  # stopped by the referee
    h.emit(h.rules.terminated(running, REASONS["aborted_agent"], 400))
    assert [(r.event.agent, r.elapsed_ms) for r in h.records if r.event.kind == "agent_terminated"] == [
        (agent(t), 250) for t in SEATS
    ]
    assert not any(a.running for a in h.world.agents.values())
    assert h.rules.abort(500) == []  # once
    assert h.rules.apply(in_flight) == [] and in_flight.accepted is False
    h.reduced()


def test_rules_refuse_a_conquest_manifest():
    with pytest.raises(ValueError, match="not a build race"):
        BuildRaceRules(MANIFEST.model_copy(update={"build": None}), WorldState())
