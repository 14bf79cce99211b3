"""The build-race rules (spec §3), pure: facts and the match clock go in, events come out.

:class:`BuildRaceRules` reads the world the caller keeps (the reduction of the heat's own
log) and returns the events to append next, each stamped with its match-clock time
(:class:`Stamped`, ms). It starts no process, reads no file and never looks at a
clock: every method that stamps events takes ``now_ms`` (ms since agent launch).
The caller (:class:`~aoe_tui.referee.supervisor.HeatSupervisor`, or a test) appends
the returned events in order and folds each into the same world with
:func:`~aoe_tui.replay.reducer.apply_event` before asking the rules anything else.

Phases (the supervisor drives them; see :meth:`HeatSupervisor.run`):

1. **Start** (elapsed 0, §2.2 canonical order, :meth:`BuildRaceRules.start`):
   ``match_state_changed`` preparing→running; ``competitor_state_changed``
   preparing→building "SSH preflight passed" for every territory sorted by id;
   ``territory_registered`` in manifest order; ``agent_started`` in manifest agent
   order. Then the adapters start and the match clock (monotonic, ms) starts.
2. **Build** — beyond upstream's one sequential loop: every territory runs its
   own tick loop (period ``tick_ms``, first check at ``tick_ms``). In a tick it
   evaluates its eligible milestones (:meth:`BuildRaceRules.next_milestone`:
   ``depends_on`` all passed, not passed, not evaluating) in manifest order; after a
   pass the newly eligible milestone runs in the same tick; a failed one is retried
   next tick. Verifier processes run under one bounded global pool
   (``verifier_concurrency``), so a slow or hung verifier on one seat never delays
   another. Results are handed to the rules with their completion time
   (:meth:`BuildRaceRules.complete`) and applied in order of completion time once that
   millisecond is over (:meth:`BuildRaceRules.due`); two completions in the same
   millisecond are ordered by seat (manifest territory order) — the only place seat
   order breaks a tie. ``host_reboot`` milestones first write
   ``agents/<agent>/referee-reboot`` (content: milestone id) and call
   ``provider.reboot`` (SSH down/up), then run the verifier with its own timeout. A
   failed reboot is an ``infrastructure_failure`` (component ``territory:<id>``,
   source ``arena``) and the competitor becomes ``unavailable`` (no further checks).
3. **Finish**: the first completion-milestone pass emits ``milestone_passed``,
   verifying→durable "completion milestone passed", ``durable_deployment_completed``,
   and with ``stop_on_first_durable`` running→finished + ``match_finished``
   (winner territory, "first durable deployment"); in-flight results are then
   discarded. At ``duration_seconds`` (the deadline, ``duration_seconds * 1000`` ms)
   the match finishes at once, unlike upstream, which waits for in-flight verifiers
   and so overruns: no new evaluation starts (:meth:`BuildRaceRules.close`), the checks
   that completed in a millisecond before the finish are applied (:meth:`due` /
   :meth:`apply`), then "match timer expired" with the §3.6 standings winner (null on a
   tie, :meth:`BuildRaceRules.timer_expired`), stamped at the clock given (the
   supervisor passes the clock when its deadline timer fires: the deadline plus a few
   ms, well under one tick unless the event loop is starved). **Killed at the finish**
   (the same rule for a first durable finish and the timer): a check still in flight when the match finishes —
   its verifier running, its ``host_reboot`` under way, or its completion not yet in a
   millisecond before the finish — earns nothing: no ``milestone_passed`` or
   ``milestone_failed`` is written for it, its evidence is not credited, and its
   milestone keeps ``evaluating: true`` in the final world (as upstream's discarded
   same-batch results do; displays show it as killed once the match ended). The supervisor kills its verifier's process group, reaps it
   and removes the evidence file it may have written (:func:`~aoe_tui.referee.verifier.run_verifier`
   on cancellation). See ``docs/formats.md`` §3.6.
4. **Drain** at the frozen clock (§3.7, Appendix B; :meth:`BuildRaceRules.start_drain`,
   :meth:`BuildRaceRules.finish_drain`): ``post_match_drain_started``; agents of
   territories beaten to a durable winner that are still running are stopped at once and
   get ``agent_outraced`` (an agent whose run had already ended — finished, failed or
   interrupted — keeps its own terminal event); the others have ``drain_seconds`` to return a result;
   final usage checkpoints; still-running agents are stopped with
   ``agent_terminated`` "post-match drain deadline expired"; every non-durable
   competitor ends ``incomplete`` (player) or ``unavailable`` (its agent failed
   with source provider/harness, or its territory failed); ``post_match_drain_finished``.

Agent results (our choice, unlike upstream which queues them until the drain):
an agent's result is recorded **when it arrives** (:meth:`BuildRaceRules.agent_result`:
``agent_finished`` / ``agent_interrupted`` + its ``usage_charged`` delta at the real
clock), so timelines show when agents really stopped; ``pending_agents`` counts only
agents still running at the drain. An agent the referee stops itself
(:meth:`BuildRaceRules.silence`) gets no terminal event from its result, only its usage.

Live usage: every ``tick_ms`` each agent's ``usage.json`` is read and turned into
``usage_charged`` deltas (§5.5, :meth:`BuildRaceRules.usage_checkpoint`,
:class:`~aoe_tui.referee.usage.UsageTracker`).

Abort (:meth:`BuildRaceRules.abort`): ``match_state_changed`` running→aborted and
``match_finished`` (winner null, "operator interrupt"); agents still running after
they are stopped get ``agent_terminated`` "match aborted by operator"
(:meth:`BuildRaceRules.terminated`).

Times: the event stamps are the clock given, except that an event is never earlier
than the world's last one and every event after ``match_finished`` is stamped at the
frozen finish time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aoe_tui.domain import events as ev
from aoe_tui.domain.events import CompetitorState, MatchState
from aoe_tui.domain.world import WorldState
from aoe_tui.referee.usage import UsageTracker
from aoe_tui.replay.standings import winner_of

if TYPE_CHECKING:  # pragma: no cover
    from aoe_tui.domain.arena import ArenaManifest, MilestoneDef
    from aoe_tui.domain.events import Event, FailureSource

__all__ = ["AgentResult", "BuildRaceRules", "Completion", "DrainPlan", "REASONS", "Stamped"]

#: Reason / detail strings used in events (upstream's where upstream has one).
REASONS = {
    "preflight": "SSH preflight passed",
    "verifying": "milestone verification began",
    "durable": "completion milestone passed",
    "first_durable": "first durable deployment",
    "timer": "match timer expired",
    "interrupt": "operator interrupt",
    "drain_deadline": "post-match drain deadline expired",
    "aborted_agent": "match aborted by operator",
    "disk_full": "infrastructure failure: no space left on device",
}

_ENDED = (CompetitorState.durable, CompetitorState.unavailable, CompetitorState.incomplete)


@dataclass(frozen=True)
class Stamped:
    """One event the rules decided, with its match-clock time ``at_ms`` (ms)."""

    event: Event
    at_ms: int


@dataclass
class Completion:
    """A finished check of one milestone on one territory, handed to :meth:`BuildRaceRules.complete`.

    ``at_ms``: when it completed (match clock, ms). Either a verifier outcome
    (``passed``; ``detail`` = the verifier's one-line error; ``evidence`` = its JSON) or,
    with ``reboot_failed``, a failed ``host_reboot`` before the verifier (§3.4; ``detail``
    says why). ``accepted`` is set when the rules take it: True = applied, False =
    discarded (the match had already finished).
    """

    territory: str
    milestone: str
    at_ms: int
    passed: bool = False
    detail: str = ""
    evidence: Any = None
    reboot_failed: bool = False
    accepted: bool | None = None


@dataclass(frozen=True)
class AgentResult:
    """An adapter's final result (§5.4), in domain terms.

    ``interrupted``: emitted as ``agent_interrupted`` (adapter status ``interrupted``);
    ``source``: the §3.9 attribution; ``success``: status ``completed``; ``detail``: its
    summary; ``usage``: its cumulative usage (anything with ``Usage``'s attributes).
    """

    agent: str
    source: FailureSource
    success: bool
    detail: str
    usage: Any = None
    interrupted: bool = False


@dataclass
class DrainPlan:
    """What :meth:`BuildRaceRules.start_drain` decided (agent ids in manifest seat order).

    ``outraced``: agents still running when a rival reached durable (§3.7); ``stop_now``:
    the same agents, to stop at once (already silenced); ``wait_for``: the other agents still
    running, which get ``drain_seconds`` to return a result.
    """

    events: list[Stamped]
    outraced: list[str] = field(default_factory=list)
    stop_now: list[str] = field(default_factory=list)
    wait_for: list[str] = field(default_factory=list)


class BuildRaceRules:
    """The build-race rules over ``world`` (the caller folds every returned event into it).

    Args:
        manifest: the validated build-race manifest (``aoe_tui.domain.arena.ArenaManifest``).
        world: the heat's reduced world; read, never written, by the rules.
        drain_ms: the post-match drain window (ms; upstream 30000).
    """

    def __init__(self, manifest: ArenaManifest, world: WorldState, *, drain_ms: int = 30_000) -> None:
        if manifest.build is None:
            raise ValueError("not a build race (no [build] table)")
        self.manifest = manifest
        self.world = world
        self.drain_ms = int(drain_ms)
        self.milestones: list[MilestoneDef] = list(manifest.build.milestones)
        self.completion = manifest.build.completion_milestone
        self.stop_on_first_durable = manifest.build.stop_on_first_durable
        #: territory id → seat index (manifest territory order)
        self.seat = {t.id: i for i, t in enumerate(manifest.territories)}
        #: territory id → agent id, in seat order
        self.agent_of: dict[str, str] = {}
        for t in manifest.territories:
            agent = manifest.agent_for(t.id)
            if agent is None:
                raise ValueError(f"no agent seated on territory {t.id!r}")
            self.agent_of[t.id] = agent.id
        self.usage = UsageTracker()
        self.closed = False
        self.in_drain = False
        self.captured = 0
        self.terminated_count = 0
        self._silenced: set[str] = set()
        self._pending: list[Completion] = []
        #: territory id → the limits of its own resources it ran into during the race (the
        #: supervisor's :meth:`note_limits`), named in the reasons its seat ends with
        self.limits: dict[str, list[str]] = {}

    # ------------------------------------------------------------------ clock

    def stamp(self, now_ms: int) -> int:
        """The time an event decided at ``now_ms`` gets: never before the world's last
        event, and the frozen finish time once the match has finished or aborted."""
        if self.world.match_state in (MatchState.finished, MatchState.aborted):
            return self.world.elapsed_ms
        return max(int(now_ms), self.world.elapsed_ms)

    def _out(self, at_ms: int, *events: Event) -> list[Stamped]:
        return [Stamped(e, at_ms) for e in events]

    # ------------------------------------------------------------------ start

    def start(self) -> list[Stamped]:
        """The start events at 0 (§2.2 canonical order)."""
        m = self.manifest
        events: list[Event] = [ev.MatchStateChanged(from_=MatchState.preparing, to=MatchState.running)]
        for tid in sorted(self.seat):
            events.append(
                ev.CompetitorStateChanged(
                    territory=tid, from_=CompetitorState.preparing, to=CompetitorState.building,
                    reason=REASONS["preflight"],
                )
            )
        for t in m.territories:
            events.append(ev.TerritoryRegistered(territory=t.id, class_=t.class_, agent=self.agent_of[t.id]))
        territory_of = {a: t for t, a in self.agent_of.items()}
        for a in m.agents:
            events.append(ev.AgentStarted(agent=a.id, territory=territory_of[a.id], model=a.model))
        return self._out(0, *events)

    # ------------------------------------------------------------------ build: eligibility

    def running(self) -> bool:
        """True while the match is running (not yet finished or aborted)."""
        return self.world.match_state == MatchState.running

    def close(self) -> None:
        """The timer expired (``duration_seconds``): no new evaluation may start (§3.6); the
        caller then applies :meth:`due` and calls :meth:`timer_expired` at the same ms."""
        self.closed = True

    def accepting(self) -> bool:
        """True while new evaluations may start: the match runs and the timer has not expired."""
        return self.running() and not self.closed

    def can_progress(self, territory: str) -> bool:
        """True while ``territory``'s competitor has not ended (durable/unavailable/incomplete)."""
        view = self.world.territories.get(territory)
        return view is not None and view.competitor_state not in _ENDED

    def next_milestone(self, territory: str, skip: set[str] | frozenset[str] = frozenset()) -> MilestoneDef | None:
        """The first eligible milestone of ``territory`` in manifest order (§3.3): not in
        ``skip`` (already tried this tick), neither passed nor evaluating, and every
        ``depends_on`` milestone passed. None when there is none."""
        ms = self.world.territories[territory].milestones
        for m in self.milestones:
            if m.id in skip:
                continue
            cur = ms.get(m.id)
            if cur is not None and (cur.passed or cur.evaluating):
                continue
            if all(ms.get(d) is not None and ms[d].passed for d in m.depends_on):
                return m
        return None

    def evaluation_started(self, territory: str, milestone: str, now_ms: int) -> list[Stamped]:
        """``milestone_evaluation_started``, preceded by building→verifying on the
        territory's first evaluation (§3.2)."""
        out: list[Event] = []
        if self.world.territories[territory].competitor_state == CompetitorState.building:
            out.append(
                ev.CompetitorStateChanged(
                    territory=territory, from_=CompetitorState.building, to=CompetitorState.verifying,
                    reason=REASONS["verifying"],
                )
            )
        out.append(ev.MilestoneEvaluationStarted(territory=territory, milestone=milestone))
        return self._out(self.stamp(now_ms), *out)

    # ------------------------------------------------------------------ build: results

    def complete(self, completion: Completion) -> None:
        """Hand over a finished check; it is applied once its millisecond is over (:meth:`due`)."""
        self._pending.append(completion)

    def due(self, now_ms: int) -> list[Completion]:
        """Take the handed-over completions of milliseconds before ``now_ms``, ordered by
        (completion ms, seat): a later millisecond never goes first, and completions in the
        same millisecond go in manifest territory order. Apply each with :meth:`apply`."""
        ready = sorted((c for c in self._pending if c.at_ms < now_ms), key=lambda c: (c.at_ms, self.seat[c.territory]))
        for c in ready:
            self._pending.remove(c)
        return ready

    def discard(self, completion: Completion) -> None:
        """Drop a completion without applying it (the heat is being aborted)."""
        if completion in self._pending:
            self._pending.remove(completion)
        completion.accepted = False

    def apply(self, c: Completion) -> list[Stamped]:
        """The events of one completion at its ``at_ms``; sets ``c.accepted``.

        Discarded (no events, ``accepted`` False) once the match is no longer running.
        A failed verifier: ``milestone_failed`` ``verification_failed``, retryable. A pass:
        ``milestone_passed`` (ignored if already passed, §3.5); the completion milestone
        then also makes the competitor durable (``durable_deployment_completed``) and, with
        ``stop_on_first_durable``, finishes the match ("first durable deployment"). A
        failed reboot: ``infrastructure_failure`` (``territory:<id>``, source arena),
        ``milestone_failed`` ``infrastructure_failure`` (not retryable) and the competitor
        → ``unavailable``.
        """
        if not self.running():
            c.accepted = False
            return []
        c.accepted = True
        if c.reboot_failed:
            return self._reboot_failure(c)
        tid, at = c.territory, self.stamp(c.at_ms)
        if not c.passed:
            return self._out(
                at,
                ev.MilestoneFailed(
                    territory=tid, milestone=c.milestone, category="verification_failed", detail=c.detail or "",
                    retryable=True,
                ),
            )
        view = self.world.territories[tid]
        cur = view.milestones.get(c.milestone)
        if cur is not None and cur.passed:
            return []  # pass_milestone ignores an already-passed milestone (§3.5)
        points = next(m.points for m in self.milestones if m.id == c.milestone)
        out: list[Event] = [ev.MilestonePassed(territory=tid, milestone=c.milestone, points=points, evidence=c.evidence)]
        if c.milestone == self.completion:
            prev = view.competitor_state or CompetitorState.verifying
            out.append(
                ev.CompetitorStateChanged(territory=tid, from_=prev, to=CompetitorState.durable, reason=REASONS["durable"])
            )
            out.append(ev.DurableDeploymentCompleted(territory=tid, elapsed_ms=at))
            if self.stop_on_first_durable:
                out += _finish_events(tid, REASONS["first_durable"])
        return self._out(at, *out)

    def _reboot_failure(self, c: Completion) -> list[Stamped]:
        tid, detail = c.territory, c.detail
        prev = self.world.territories[tid].competitor_state or CompetitorState.verifying
        return self._out(
            self.stamp(c.at_ms),
            ev.InfrastructureFailure(component=f"territory:{tid}", source="arena", detail=detail),
            ev.MilestoneFailed(
                territory=tid, milestone=c.milestone, category="infrastructure_failure", detail=detail, retryable=False
            ),
            ev.CompetitorStateChanged(
                territory=tid, from_=prev, to=CompetitorState.unavailable, reason=f"territory failed: {detail}"
            ),
        )

    def timer_expired(self, now_ms: int) -> list[Stamped]:
        """Finish at the timer (§3.6): "match timer expired", winner by standings (null on a
        tie), stamped ``now_ms`` (ms; never before the world's last event). Nothing if the
        match already finished.

        Call it after :meth:`close` and after applying :meth:`due` ``(now_ms)``: every
        completion still handed over (its ms not before ``now_ms``) is discarded
        (``accepted`` False), and so is any later one (:meth:`apply` of a finished match).
        A check in flight at the finish earns nothing (module docstring, phase 3)."""
        if not self.running():
            return []
        for c in self._pending:
            c.accepted = False
        self._pending.clear()
        return self._out(self.stamp(now_ms), *_finish_events(winner_of(self.world), REASONS["timer"]))

    # ------------------------------------------------------------------ agents + usage

    def note_limits(self, territory: str, limits: Sequence[str]) -> None:
        """``territory`` has run into ``limits`` of its own resources since the clock started
        (phrases such as ``out of memory in the territory (768 MiB)``). No event (the log
        format has none for it): the reasons its seat later ends with name them
        (:meth:`outraced`, :meth:`terminated`, :meth:`finish_drain`), so the log and a
        replay tell why a seat stalled."""
        known = self.limits.setdefault(territory, [])
        known.extend(x for x in limits if x not in known)

    def _with_limits(self, territory: str | None, reason: str) -> str:
        limits = self.limits.get(territory or "")
        return f"{reason}; {'; '.join(limits)}" if limits else reason

    def silence(self, agents: Sequence[str]) -> None:
        """The referee is stopping ``agents``: their results then bring only usage, no terminal event."""
        self._silenced.update(agents)

    def running_agents(self) -> list[str]:
        """Agents whose view is still running, in manifest seat order."""
        return [a for a in self.agent_of.values() if self._running(a)]

    def _running(self, agent: str) -> bool:
        view = self.world.agents.get(agent)
        return bool(view and view.running)

    def agent_result(self, result: AgentResult, now_ms: int) -> list[Stamped]:
        """An adapter's result (§5.4): ``agent_interrupted`` or ``agent_finished`` (unless the
        agent was silenced or already ended), then its ``usage_charged`` delta (§5.5)."""
        aid = result.agent
        out: list[Event] = []
        if aid not in self._silenced and self._running(aid):
            if result.interrupted:
                out.append(ev.AgentInterrupted(agent=aid, source=result.source, detail=result.detail))
            else:
                out.append(ev.AgentFinished(agent=aid, source=result.source, success=result.success, detail=result.detail))
            if self.in_drain:
                self.captured += 1
        delta = self.usage.charge(aid, result.usage)
        if delta is not None:
            out.append(delta)
        return self._out(self.stamp(now_ms), *out)

    def usage_checkpoint(self, agent: str, usage: Any, now_ms: int) -> list[Stamped]:
        """A live cumulative usage checkpoint (§5.5) → its ``usage_charged`` delta, if any."""
        delta = self.usage.charge(agent, usage)
        return [] if delta is None else self._out(self.stamp(now_ms), delta)

    # ------------------------------------------------------------------ drain (§3.7)

    def durable_winner(self) -> str | None:
        """The winner if it reached durable (outraces the others), else None."""
        w = self.world.winner
        view = self.world.territories.get(w) if w else None
        return w if view is not None and view.durable_at_ms is not None else None

    def start_drain(self, now_ms: int) -> DrainPlan:
        """``post_match_drain_started`` (``pending_agents`` = agents still running) and the
        plan: agents still racing when a rival won durable are outraced (stopped at once);
        an agent whose run had already ended (finished, failed, interrupted — whatever the
        result) is not outraced and keeps its own terminal event and attribution."""
        self.in_drain = True
        pending = self.running_agents()
        at = self.stamp(now_ms)
        started = ev.PostMatchDrainStarted(timeout_ms=self.drain_ms, pending_agents=len(pending))
        winner = self.durable_winner()
        outraced = [a for t, a in self.agent_of.items() if winner is not None and t != winner and a in pending]
        stop_now = list(outraced)
        self.silence(stop_now)
        self.terminated_count += len(stop_now)
        return DrainPlan(self._out(at, started), outraced, stop_now, [a for a in pending if a not in stop_now])

    def outraced(self, plan: DrainPlan, now_ms: int) -> list[Stamped]:
        """``agent_outraced`` for every agent of ``plan.outraced`` (after ``stop_now`` stopped);
        the reason names the limits its territory ran into (:meth:`note_limits`)."""
        winner = self.durable_winner()
        reason = f"{winner} reached durable first; build ended at the frozen clock"
        territory_of = {a: t for t, a in self.agent_of.items()}
        return self._out(self.stamp(now_ms), *(ev.AgentOutraced(agent=a, reason=self._with_limits(territory_of.get(a), reason))
                                               for a in plan.outraced))

    def drain_deadline(self) -> list[str]:
        """The drain window is over: the agents still running, to stop (now silenced)."""
        still = self.running_agents()
        self.silence(still)
        return still

    def terminated(self, agents: Sequence[str], reason: str, now_ms: int) -> list[Stamped]:
        """``agent_terminated`` (``reason``, then the limits its territory ran into) for those
        of ``agents`` still running after being stopped."""
        ended = [a for a in agents if self._running(a)]
        territory_of = {a: t for t, a in self.agent_of.items()}
        return self._out(self.stamp(now_ms), *(ev.AgentTerminated(agent=a, reason=self._with_limits(territory_of.get(a), reason))
                                               for a in ended))

    def finish_drain(self, stopped: Sequence[str], now_ms: int) -> list[Stamped]:
        """After the drain deadline's ``stopped`` agents were stopped: their
        ``agent_terminated``, every competitor's end state (``incomplete`` for a player;
        ``unavailable`` if its agent failed with source provider/harness; durable and failed
        territories keep theirs) and ``post_match_drain_finished``."""
        out = self.terminated(stopped, REASONS["drain_deadline"], now_ms)
        self.terminated_count += len(out)
        at = self.stamp(now_ms)
        winner = self.durable_winner()
        for tid, aid in self.agent_of.items():
            cs = self.world.territories[tid].competitor_state
            if cs in _ENDED or cs is None:
                continue
            agent = self.world.agents.get(aid)
            source = agent.failure_source if agent is not None else None
            if agent is not None and not agent.running and source in ("provider", "harness"):
                to, reason = CompetitorState.unavailable, f"agent ended with a {source} failure"
            elif winner is not None:
                to, reason = CompetitorState.incomplete, f"{winner} reached durable first"
            else:
                to, reason = CompetitorState.incomplete, "no durable deployment by the end of the match"
            reason = self._with_limits(tid, reason)
            out.append(Stamped(ev.CompetitorStateChanged(territory=tid, from_=cs, to=to, reason=reason), at))
        out.append(
            Stamped(
                ev.PostMatchDrainFinished(captured_agents=self.captured, terminated_agents=self.terminated_count), at
            )
        )
        return out

    # ------------------------------------------------------------------ abort (§3.11)

    def abort(self, now_ms: int, failure: ev.InfrastructureFailure | None = None,
              reason: str = REASONS["interrupt"]) -> list[Stamped]:
        """Abort: ``match_state_changed`` →aborted and ``match_finished`` (winner null,
        ``reason``: "operator interrupt" by default) unless the match already ended; an
        infrastructure abort (a full disk) gives its ``failure`` event first (always).
        Every agent is silenced (the supervisor stops them all; see :meth:`terminated` with
        ``REASONS["aborted_agent"]`` for those still running after)."""
        self.silence(list(self.agent_of.values()))
        for c in self._pending:
            c.accepted = False  # never applied: the match is over
        self._pending.clear()
        state = self.world.match_state
        first = [failure] if failure is not None else []
        if state not in (MatchState.running, MatchState.preparing):
            return self._out(self.stamp(now_ms), *first) if first else []
        return self._out(
            self.stamp(now_ms),
            *first,
            ev.MatchStateChanged(from_=state, to=MatchState.aborted),
            ev.MatchFinished(winner=None, reason=reason),
        )


def _finish_events(winner: str | None, reason: str) -> list[Event]:
    return [
        ev.MatchStateChanged(from_=MatchState.running, to=MatchState.finished),
        ev.MatchFinished(winner=winner, reason=reason),
    ]
