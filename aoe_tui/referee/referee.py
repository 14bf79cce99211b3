"""The build-race referee (spec §3): decides everything, and every decision is an event.

The referee's view of the match is the reduction of its own log: each event is
appended through :class:`~aoe_tui.replay.log.EventLogWriter` and immediately
folded into :attr:`BuildReferee.world` with :func:`~aoe_tui.replay.reducer.apply_event`.
Eligibility, finish, durable and agent-running decisions read only that world.
Process handles (agent runs, verifier processes, tasks) are resources, not state.

Phases (see :meth:`BuildReferee.run`):

1. **Start** (elapsed 0, §2.2 canonical order): ``match_state_changed``
   preparing→running; ``competitor_state_changed`` preparing→building "SSH
   preflight passed" for every territory sorted by id; ``territory_registered``
   in manifest order; ``agent_started`` in manifest agent order. Then the
   adapters start and the match clock (monotonic, ms) starts.
2. **Build** — beyond upstream's one sequential loop: every territory runs its
   own tick loop (period ``tick_ms``, first check at ``tick_ms``). In a tick it
   evaluates its eligible milestones (``depends_on`` all passed, not passed, not
   evaluating) in manifest order; after a pass the newly eligible milestone runs
   in the same tick; a failed one is retried next tick. Verifier processes run
   under one bounded global pool (``verifier_concurrency``), so a slow or hung
   verifier on one seat never delays another. Results are committed in order of
   completion time; two completions in the same millisecond are ordered by seat
   (manifest territory order) — the only place seat order breaks a tie.
   ``host_reboot`` milestones first write ``agents/<agent>/referee-reboot``
   (content: milestone id) and call ``provider.reboot`` (SSH down/up), then run
   the verifier with its own timeout. A failed reboot is an
   ``infrastructure_failure`` (component ``territory:<id>``, source ``arena``) and
   the competitor becomes ``unavailable`` (no further checks).
3. **Finish**: the first completion-milestone pass emits ``milestone_passed``,
   verifying→durable "completion milestone passed", ``durable_deployment_completed``,
   and with ``stop_on_first_durable`` running→finished + ``match_finished``
   (winner territory, "first durable deployment"); in-flight results are then
   discarded. At ``duration_seconds`` no new evaluations start; in-flight ones
   complete (the match may overrun, as upstream), then "match timer expired" with
   the §3.6 standings winner (null on a tie).
4. **Drain** at the frozen clock (§3.7, Appendix B): ``post_match_drain_started``;
   agents of territories beaten to a durable winner are stopped at once and get
   ``agent_outraced`` (unless they already ended with a provider/harness failure,
   whose attribution is kept); the others have ``drain_seconds`` to return a result;
   final usage checkpoints; still-running agents are stopped with
   ``agent_terminated`` "post-match drain deadline expired"; every non-durable
   competitor ends ``incomplete`` (player) or ``unavailable`` (its agent failed
   with source provider/harness, or its territory failed); ``post_match_drain_finished``.

Agent results (our choice, unlike upstream which queues them until the drain):
an agent's result is recorded **when it arrives** (``agent_finished`` /
``agent_interrupted`` + its ``usage_charged`` delta at the real clock), so
timelines show when agents really stopped; ``pending_agents`` counts only agents
still running at the drain.

Live usage: every ``tick_ms`` each agent's ``usage.json`` is read and turned
into ``usage_charged`` deltas (§5.5, :class:`~aoe_tui.referee.usage.UsageTracker`).

Abort (:meth:`BuildReferee.abort`, or cancellation of :meth:`run`): in-flight
verifiers are killed, ``match_state_changed`` running→aborted and
``match_finished`` (winner null, "operator interrupt") are emitted, agents are
stopped (``agent_terminated`` "match aborted by operator"). ``run`` then returns
(after ``abort()``) or re-raises ``CancelledError`` (after cancellation).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aoe_tui.domain import events as ev
from aoe_tui.domain.events import CompetitorState, EventRecord, MatchState
from aoe_tui.domain.world import WorldState
from aoe_tui.referee.usage import UsageTracker
from aoe_tui.referee.verifier import VerifierOutcome, run_verifier, verifier_starter
from aoe_tui.replay.reducer import apply_event
from aoe_tui.runtime.procs import use_pidfd_child_watcher

if TYPE_CHECKING:  # pragma: no cover
    from aoe_tui.agents.base import Adapter, AgentOutcome, AgentRun
    from aoe_tui.domain.arena import AgentDef, LoadedManifest, MilestoneDef
    from aoe_tui.replay.log import EventLogWriter
    from aoe_tui.runtime.provider import Territory, TerritoryProvider

__all__ = ["BuildReferee", "OnEvent", "REASONS"]

#: ``on_event(record, world)``: called after every event is appended and reduced.
OnEvent = Callable[[EventRecord, WorldState], None]

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
}

_DEFAULT_DRAIN_S = 30.0
_STOP_TIMEOUT_S = 15.0


@dataclass
class _Seat:
    """One territory + its agent (resources only; state lives in the world)."""

    index: int
    territory: Territory
    agent: AgentDef
    adapter: Adapter
    agent_dir: Path
    run: AgentRun | None = None
    watcher: asyncio.Task | None = None
    #: set when the referee itself ends the agent: its outcome is then not a terminal event
    silenced: bool = False
    verifier_ms: dict[str, list[int]] = field(default_factory=dict)


@dataclass
class _Pending:
    ms: int
    seat: int
    apply: Callable[[int], None]
    accepted: bool | None = None


class BuildReferee:
    """Runs one build race on already-provisioned territories.

    Args:
        loaded: the validated manifest (``aoe_tui.domain.arena.LoadedManifest``); must be
            a build race.
        territories: SSH-ready territories, one per manifest territory (any order; matched by id).
        provider: the provider that made them (used for ``host_reboot``).
        adapters: agent id → :class:`~aoe_tui.agents.base.Adapter` for every manifest agent.
        output_dir: the match folder (``agents/``, ``evidence/`` are created beneath it).
        log: an open :class:`~aoe_tui.replay.log.EventLogWriter` on ``output_dir/events.jsonl``.
        drain_seconds: post-match drain window in seconds (upstream 30).
        verifier_concurrency: size of the global verifier pool (processes at once).
        reboot_timeout_s: backstop on ``provider.reboot`` in seconds (the provider has its
            own, tighter timeouts); None = no backstop.
        on_event: ``on_event(record, world)`` after each event (exceptions are swallowed).
        instruction_builder: ``(loaded, territory_id) -> str`` for ``instruction.md``; default
            ``aoe_tui.agents.instruction.build_instruction``.
        duration_s: override of ``rules.duration_seconds`` (seconds), for tests.
    """

    def __init__(
        self,
        loaded: LoadedManifest,
        territories: Sequence[Territory],
        provider: TerritoryProvider,
        adapters: Mapping[str, Adapter],
        output_dir: Path,
        log: EventLogWriter,
        *,
        drain_seconds: float = _DEFAULT_DRAIN_S,
        verifier_concurrency: int = 4,
        reboot_timeout_s: float | None = 900.0,
        on_event: OnEvent | None = None,
        instruction_builder: Callable[[Any, str], str] | None = None,
        duration_s: float | None = None,
    ) -> None:
        m = loaded.manifest
        if m.build is None:
            raise ValueError(f"{loaded.path}: not a build race (no [build] table)")
        self.loaded = loaded
        self.manifest = m
        self.provider = provider
        self.output_dir = Path(output_dir)
        self.log = log
        self.drain_seconds = float(drain_seconds)
        self.reboot_timeout_s = reboot_timeout_s
        self.on_event = on_event
        self.instruction_builder = instruction_builder
        self.duration_s = float(m.rules.duration_seconds if duration_s is None else duration_s)
        self.tick_s = max(1, m.rules.tick_ms) / 1000.0
        self.world = WorldState()
        self.usage = UsageTracker()
        self.milestones: list[MilestoneDef] = list(m.build.milestones)
        self.completion = m.build.completion_milestone
        self.stop_on_first_durable = m.build.stop_on_first_durable
        by_id = {t.id: t for t in territories}
        self.seats: list[_Seat] = []
        for i, tdef in enumerate(m.territories):
            if tdef.id not in by_id:
                raise ValueError(f"no provisioned territory for {tdef.id!r}")
            agent = m.agent_for(tdef.id)
            if agent is None:
                raise ValueError(f"no agent seated on territory {tdef.id!r}")
            if agent.id not in adapters:
                raise ValueError(f"no adapter for agent {agent.id!r}")
            self.seats.append(
                _Seat(i, by_id[tdef.id], agent, adapters[agent.id], self.output_dir / "agents" / agent.id)
            )
        self._sem = asyncio.Semaphore(max(1, verifier_concurrency))
        self._t0: float | None = None
        self._frozen_ms: int | None = None
        self._pending: list[_Pending] = []
        self._closing = False
        self._finished_evt = asyncio.Event()
        self._abort_evt = asyncio.Event()
        self._tasks: list[asyncio.Task] = []
        self._in_drain = False
        self._captured = 0
        #: wall-clock facts for our own ``aoe-extra.json`` (not upstream files)
        self.timings: dict[str, Any] = {}

    # ------------------------------------------------------------------ clock + emit

    def _now_ms(self) -> int:
        if self._t0 is None:
            return 0
        return int((time.monotonic() - self._t0) * 1000)

    def _clamp(self, ms: int) -> int:
        if self._frozen_ms is not None:
            return self._frozen_ms
        return max(int(ms), self.log.last_elapsed_ms)

    def _emit(self, event: Any, ms: int | None = None) -> EventRecord:
        at = self._clamp(self._now_ms() if ms is None else ms)
        rec = self.log.append(event, at)
        apply_event(self.world, rec)
        if self.on_event is not None:
            try:
                self.on_event(rec, self.world)
            except Exception as err:  # a broken live view must not stop the match
                print(f"aoe: live view error: {err}", file=sys.stderr)
        return rec

    def _match_running(self) -> bool:
        return self.world.match_state == MatchState.running

    def _stopping(self) -> bool:
        return self._closing or not self._match_running() or self._abort_evt.is_set()

    # ------------------------------------------------------------------ public

    def abort(self) -> None:
        """Request an operator abort (safe from a signal handler via ``loop.add_signal_handler``)."""
        self._abort_evt.set()

    @property
    def clock_ms(self) -> int:
        """The match clock now (ms since agent launch; frozen after finish)."""
        return self._frozen_ms if self._frozen_ms is not None else self._now_ms()

    async def run(self) -> WorldState:
        """Run the whole match (start → build → finish → drain) and return the final world.

        Returns the world after a normal finish or an :meth:`abort`. On cancellation the
        abort events are written, agents stopped, then ``CancelledError`` is re-raised.
        """
        # before the clock starts: no tick ever waits for a thread to start
        use_pidfd_child_watcher()
        verifier_starter()
        try:
            self._emit_start()
            self._t0 = time.monotonic()
            self.timings["clock_started_unix"] = time.time()
            await self._start_agents()
            self._tasks = [asyncio.create_task(self._territory_loop(s)) for s in self.seats]
            self._tasks.append(asyncio.create_task(self._usage_loop()))
            await self._build_phase()
            if self._abort_evt.is_set() and self.world.match_state != MatchState.finished:
                await self._abort()
                return self.world
            await self._cancel_tasks()
            self._checkpoint_usage()
            await self._drain()
            return self.world
        except asyncio.CancelledError:
            await self._abort()
            raise
        finally:
            await self._cancel_tasks()
            for seat in self.seats:
                if seat.watcher is not None and not seat.watcher.done():
                    seat.watcher.cancel()
            self._write_activity()

    # ------------------------------------------------------------------ start

    def _emit_start(self) -> None:
        self._emit(ev.MatchStateChanged(from_=MatchState.preparing, to=MatchState.running), 0)
        for seat in sorted(self.seats, key=lambda s: s.territory.id):
            self._emit(
                ev.CompetitorStateChanged(
                    territory=seat.territory.id,
                    from_=CompetitorState.preparing,
                    to=CompetitorState.building,
                    reason=REASONS["preflight"],
                ),
                0,
            )
        for tdef in self.manifest.territories:
            agent = self.manifest.agent_for(tdef.id)
            self._emit(ev.TerritoryRegistered(territory=tdef.id, class_=tdef.class_, agent=agent.id), 0)
        seat_of = {s.agent.id: s for s in self.seats}
        for agent in self.manifest.agents:
            seat = seat_of[agent.id]
            self._emit(ev.AgentStarted(agent=agent.id, territory=seat.territory.id, model=agent.model), 0)

    def _instruction(self, territory_id: str) -> str:
        builder = self.instruction_builder
        if builder is None:
            from aoe_tui.agents.instruction import build_instruction

            builder = build_instruction
        return builder(self.loaded, territory_id)

    async def _start_agents(self) -> None:
        from aoe_tui.agents.base import AdapterStatus, AgentContext, AgentOutcome

        async def start(seat: _Seat) -> None:
            seat.agent_dir.mkdir(parents=True, exist_ok=True)
            instruction_file = seat.agent_dir / "instruction.md"
            try:
                _write_text(instruction_file, self._instruction(seat.territory.id))
                ctx = AgentContext(
                    agent=seat.agent,
                    territory=seat.territory,
                    agent_dir=seat.agent_dir,
                    instruction_file=instruction_file,
                    deadline_s=self.duration_s,
                    arena_dir=self.loaded.arena_dir,
                )
                seat.run = await seat.adapter.start(ctx)
            except Exception as err:  # adapter could not start: a harness failure
                detail = f"adapter {seat.adapter.name or seat.agent.adapter} failed to start: {_one_line(err)}"
                self._record_outcome(seat, AgentOutcome(AdapterStatus.HARNESS_ERROR, detail))
                return
            seat.watcher = asyncio.create_task(self._watch_agent(seat))

        await asyncio.gather(*(start(s) for s in self.seats))

    async def _watch_agent(self, seat: _Seat) -> None:
        from aoe_tui.agents.base import AdapterStatus, AgentOutcome

        assert seat.run is not None
        try:
            outcome = await seat.run.wait()
        except asyncio.CancelledError:
            raise
        except Exception as err:
            outcome = AgentOutcome(AdapterStatus.HARNESS_ERROR, f"adapter error: {_one_line(err)}")
        self._record_outcome(seat, outcome)

    def _record_outcome(self, seat: _Seat, outcome: AgentOutcome) -> None:
        """Terminal event (unless the referee ended the agent itself) + usage delta (§5.4)."""
        from aoe_tui.agents.base import AdapterStatus

        aid = seat.agent.id
        view = self.world.agents.get(aid)
        if not seat.silenced and view is not None and view.running:
            status = AdapterStatus(outcome.status)
            if status == AdapterStatus.INTERRUPTED:
                self._emit(ev.AgentInterrupted(agent=aid, source=status.failure_source, detail=outcome.summary))
            else:
                self._emit(
                    ev.AgentFinished(
                        agent=aid,
                        source=status.failure_source,
                        success=status == AdapterStatus.COMPLETED,
                        detail=outcome.summary,
                    )
                )
            if self._in_drain:
                self._captured += 1
        delta = self.usage.charge(aid, outcome.usage)
        if delta is not None:
            self._emit(delta)

    # ------------------------------------------------------------------ build phase

    async def _build_phase(self) -> None:
        deadline = asyncio.create_task(asyncio.sleep(max(0.0, self.duration_s - self._now_ms() / 1000)))
        finished = asyncio.create_task(self._finished_evt.wait())
        aborted = asyncio.create_task(self._abort_evt.wait())
        try:
            await asyncio.wait({deadline, finished, aborted}, return_when=asyncio.FIRST_COMPLETED)
            if finished.done() or aborted.done():
                return
            # Deadline: no new evaluations; in-flight ones complete (overrun, as upstream).
            self._closing = True
            loops = [t for t in self._tasks[: len(self.seats)]]
            waiter = asyncio.gather(*loops, return_exceptions=True)
            await asyncio.wait({waiter, aborted, finished}, return_when=asyncio.FIRST_COMPLETED)
            if aborted.done() and not finished.done():
                return
            if self._match_running():
                self._checkpoint_usage()
                from aoe_tui.replay.standings import winner_of

                self._finish(winner_of(self.world), REASONS["timer"])
        finally:
            for t in (deadline, finished, aborted):
                t.cancel()

    async def _sleep_until_ms(self, ms: float) -> None:
        assert self._t0 is not None
        delay = self._t0 + ms / 1000.0 - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)

    async def _territory_loop(self, seat: _Seat) -> None:
        tick_ms = self.tick_s * 1000.0
        k = 1
        while True:
            await self._sleep_until_ms(k * tick_ms)
            if self._stopping() or not self._can_progress(seat):
                return
            await self._territory_tick(seat)
            k = max(k + 1, int(self._now_ms() // tick_ms) + 1)

    def _can_progress(self, seat: _Seat) -> bool:
        view = self.world.territories.get(seat.territory.id)
        return view is not None and view.competitor_state not in (
            CompetitorState.durable,
            CompetitorState.unavailable,
            CompetitorState.incomplete,
        )

    def _eligible(self, seat: _Seat, skip: set[str]) -> MilestoneDef | None:
        view = self.world.territories[seat.territory.id]
        ms = view.milestones
        for m in self.milestones:
            if m.id in skip:
                continue
            cur = ms.get(m.id)
            if cur is not None and (cur.passed or cur.evaluating):
                continue
            if all(ms.get(d) is not None and ms[d].passed for d in m.depends_on):
                return m
        return None

    async def _territory_tick(self, seat: _Seat) -> None:
        attempted: set[str] = set()
        while not self._stopping() and self._can_progress(seat):
            m = self._eligible(seat, attempted)
            if m is None:
                return
            attempted.add(m.id)
            if not await self._evaluate(seat, m):
                if not self._can_progress(seat):
                    return

    def _emit_evaluation_started(self, seat: _Seat, m: MilestoneDef) -> None:
        tid = seat.territory.id
        if self.world.territories[tid].competitor_state == CompetitorState.building:
            self._emit(
                ev.CompetitorStateChanged(
                    territory=tid,
                    from_=CompetitorState.building,
                    to=CompetitorState.verifying,
                    reason=REASONS["verifying"],
                )
            )
        self._emit(ev.MilestoneEvaluationStarted(territory=tid, milestone=m.id))

    async def _evaluate(self, seat: _Seat, m: MilestoneDef) -> bool:
        """One verifier attempt (with the reboot first for ``host_reboot``); True iff it passed."""
        tid = seat.territory.id
        if m.operation == "host_reboot":
            if self._stopping():
                return False
            self._emit_evaluation_started(seat, m)
            err = await self._reboot(seat, m)
            if err is not None:
                await self._commit(seat, lambda ms: self._apply_reboot_failure(seat, m, err, ms))
                return False
            async with self._sem:
                if not self._match_running() or self._abort_evt.is_set():
                    return False  # finished meanwhile: result would be discarded anyway
                outcome = await self._run_verifier(seat, m)
        else:
            async with self._sem:
                if self._stopping():
                    return False
                self._emit_evaluation_started(seat, m)
                outcome = await self._run_verifier(seat, m)
        seat.verifier_ms.setdefault(m.id, []).append(outcome.duration_ms)
        accepted = await self._commit(seat, lambda ms: self._apply_verifier(seat, m, outcome, ms))
        return bool(accepted and outcome.passed and self.world.territories[tid].milestones[m.id].passed)

    async def _run_verifier(self, seat: _Seat, m: MilestoneDef) -> VerifierOutcome:
        t = seat.territory
        previous = dict(self.world.territories[t.id].milestones)
        try:
            return await run_verifier(
                self.loaded.verifier_path(m),
                territory_id=t.id,
                milestone_id=m.id,
                host=t.host,
                ssh_port=t.ssh_port,
                service_port=t.service_port,
                credential_file=t.credential_file,
                evidence_dir=self.output_dir / "evidence" / t.id,
                previous=previous,
                timeout_s=float(m.timeout_seconds),
            )
        except asyncio.CancelledError:
            raise
        except Exception as err:  # the runner itself failed (disk full, ...): record, don't crash
            return VerifierOutcome(passed=False, detail=f"verifier runner error: {_one_line(err)}")

    async def _reboot(self, seat: _Seat, m: MilestoneDef) -> str | None:
        """Marker + ``provider.reboot`` (§3.4). Returns None on success, else a one-line detail."""
        try:
            seat.agent_dir.mkdir(parents=True, exist_ok=True)
            _write_text(seat.agent_dir / "referee-reboot", m.id)
        except OSError as err:
            return f"cannot write referee-reboot marker: {_one_line(err)}"
        try:
            if self.reboot_timeout_s is None:
                await self.provider.reboot(seat.territory)
            else:
                await asyncio.wait_for(self.provider.reboot(seat.territory), self.reboot_timeout_s)
        except asyncio.TimeoutError:
            return f"host reboot did not complete within {self.reboot_timeout_s:.0f} s"
        except asyncio.CancelledError:
            raise
        except Exception as err:
            return f"host reboot failed: {_one_line(err)}"
        return None

    # ------------------------------------------------------------------ commit (ordering)

    async def _commit(self, seat: _Seat, apply: Callable[[int], None]) -> bool:
        """Stamp a result with the clock, then apply all results of earlier milliseconds in
        (ms, seat) order. Returns False when the match finished first (result discarded)."""
        item = _Pending(self._now_ms(), seat.index, apply)
        self._pending.append(item)
        try:
            while self._now_ms() <= item.ms:
                await asyncio.sleep(0.0005)
            self._flush()
        finally:
            if item in self._pending:
                self._pending.remove(item)
        return bool(item.accepted)

    def _flush(self) -> None:
        now = self._now_ms()
        ready = sorted((p for p in self._pending if p.ms < now), key=lambda p: (p.ms, p.seat))
        for p in ready:
            self._pending.remove(p)
            if not self._match_running() or self._abort_evt.is_set():
                p.accepted = False
                continue
            p.apply(p.ms)
            p.accepted = True

    def _apply_verifier(self, seat: _Seat, m: MilestoneDef, outcome: VerifierOutcome, ms: int) -> None:
        tid = seat.territory.id
        if not outcome.passed:
            self._emit(
                ev.MilestoneFailed(
                    territory=tid,
                    milestone=m.id,
                    category="verification_failed",
                    detail=outcome.detail or "",
                    retryable=True,
                ),
                ms,
            )
            return
        if self.world.territories[tid].milestones.get(m.id) and self.world.territories[tid].milestones[m.id].passed:
            return  # pass_milestone ignores an already-passed milestone (§3.5)
        at = self._clamp(ms)
        self._emit(ev.MilestonePassed(territory=tid, milestone=m.id, points=m.points, evidence=outcome.evidence), at)
        if m.id != self.completion:
            return
        prev = self.world.territories[tid].competitor_state or CompetitorState.verifying
        self._emit(
            ev.CompetitorStateChanged(territory=tid, from_=prev, to=CompetitorState.durable, reason=REASONS["durable"]),
            at,
        )
        self._emit(ev.DurableDeploymentCompleted(territory=tid, elapsed_ms=at), at)
        if self.stop_on_first_durable:
            self._finish(tid, REASONS["first_durable"], at)

    def _apply_reboot_failure(self, seat: _Seat, m: MilestoneDef, detail: str, ms: int) -> None:
        tid = seat.territory.id
        self._emit(ev.InfrastructureFailure(component=f"territory:{tid}", source="arena", detail=detail), ms)
        self._emit(
            ev.MilestoneFailed(
                territory=tid, milestone=m.id, category="infrastructure_failure", detail=detail, retryable=False
            ),
            ms,
        )
        prev = self.world.territories[tid].competitor_state or CompetitorState.verifying
        self._emit(
            ev.CompetitorStateChanged(
                territory=tid, from_=prev, to=CompetitorState.unavailable, reason=f"territory failed: {detail}"
            ),
            ms,
        )

    def _finish(self, winner: str | None, reason: str, ms: int | None = None) -> None:
        if not self._match_running():
            return
        self._emit(ev.MatchStateChanged(from_=MatchState.running, to=MatchState.finished), ms)
        rec = self._emit(ev.MatchFinished(winner=winner, reason=reason), ms)
        self._frozen_ms = rec.elapsed_ms
        self.timings["finished_unix"] = time.time()
        self._finished_evt.set()

    # ------------------------------------------------------------------ usage

    def _checkpoint_usage(self) -> None:
        from aoe_tui.domain.adapter_io import read_usage_checkpoint

        for seat in self.seats:
            usage = read_usage_checkpoint(seat.agent_dir / "usage.json", seat.agent.id, seat.territory.id)
            if usage is None:
                continue
            delta = self.usage.charge(seat.agent.id, usage)
            if delta is not None:
                self._emit(delta)

    async def _usage_loop(self) -> None:
        tick_ms = self.tick_s * 1000.0
        k = 1
        while self._match_running():
            await self._sleep_until_ms(k * tick_ms + tick_ms / 2)  # between territory checks
            if not self._match_running():
                return
            self._checkpoint_usage()
            k = max(k + 1, int(self._now_ms() // tick_ms) + 1)

    # ------------------------------------------------------------------ drain

    async def _stop_seats(self, seats: Sequence[_Seat]) -> None:
        """Stop agents (bounded) and let their watchers record usage (silenced first)."""

        async def stop(seat: _Seat) -> None:
            seat.silenced = True
            if seat.run is not None:
                with contextlib.suppress(Exception, asyncio.TimeoutError):
                    await asyncio.wait_for(seat.run.stop(), _STOP_TIMEOUT_S)
            if seat.watcher is not None and not seat.watcher.done():
                try:
                    await asyncio.wait_for(asyncio.shield(seat.watcher), _STOP_TIMEOUT_S)
                except (asyncio.TimeoutError, Exception):
                    seat.watcher.cancel()

        await asyncio.gather(*(stop(s) for s in seats))

    def _non_player_failure(self, seat: _Seat) -> bool:
        view = self.world.agents.get(seat.agent.id)
        return bool(view and not view.running and view.failure_source in ("provider", "harness"))

    def _running(self, seat: _Seat) -> bool:
        view = self.world.agents.get(seat.agent.id)
        return bool(view and view.running)

    async def _drain(self) -> None:
        self._in_drain = True
        winner = self.world.winner
        wview = self.world.territories.get(winner) if winner else None
        durable_winner = winner if wview is not None and wview.durable_at_ms is not None else None
        pending = [s for s in self.seats if self._running(s)]
        self._emit(
            ev.PostMatchDrainStarted(timeout_ms=int(round(self.drain_seconds * 1000)), pending_agents=len(pending))
        )
        terminated = 0
        # Agents beaten to durable are outraced — except those that already ended with a
        # provider/harness failure: that attribution is kept (their competitor ends unavailable).
        losers = [
            s
            for s in self.seats
            if durable_winner is not None
            and s.territory.id != durable_winner
            and not self._non_player_failure(s)
        ]
        running_losers = [s for s in losers if self._running(s)]
        await self._stop_seats(running_losers)
        for seat in losers:
            self._emit(
                ev.AgentOutraced(
                    agent=seat.agent.id,
                    reason=f"{durable_winner} reached durable first; build ended at the frozen clock",
                )
            )
        terminated += len(running_losers)
        waiting = [s.watcher for s in pending if s not in running_losers and s.watcher is not None and not s.watcher.done()]
        if waiting:
            await self._wait_drain(waiting)
        self._checkpoint_usage()
        still = [s for s in self.seats if self._running(s)]
        await self._stop_seats(still)
        for seat in still:
            if self._running(seat):
                self._emit(ev.AgentTerminated(agent=seat.agent.id, reason=REASONS["drain_deadline"]))
                terminated += 1
        self._emit_competitor_end_states(durable_winner)
        self._emit(ev.PostMatchDrainFinished(captured_agents=self._captured, terminated_agents=terminated))
        await self._stop_seats(self.seats)  # idempotent cleanup of guest-side processes

    async def _wait_drain(self, waiting: list[asyncio.Task]) -> None:
        """Wait for ``waiting`` watchers up to ``drain_seconds``; an abort cuts the wait short."""
        aborted = asyncio.create_task(self._abort_evt.wait())
        all_done = asyncio.gather(*(asyncio.shield(w) for w in waiting), return_exceptions=True)
        try:
            await asyncio.wait({aborted, all_done}, timeout=self.drain_seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            aborted.cancel()
            all_done.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await all_done

    def _emit_competitor_end_states(self, durable_winner: str | None) -> None:
        for seat in self.seats:
            tid = seat.territory.id
            cs = self.world.territories[tid].competitor_state
            if cs in (CompetitorState.durable, CompetitorState.unavailable, CompetitorState.incomplete, None):
                continue
            agent = self.world.agents.get(seat.agent.id)
            source = agent.failure_source if agent is not None else None
            if agent is not None and not agent.running and source in ("provider", "harness"):
                to, reason = CompetitorState.unavailable, f"agent ended with a {source} failure"
            elif durable_winner is not None:
                to, reason = CompetitorState.incomplete, f"{durable_winner} reached durable first"
            else:
                to, reason = CompetitorState.incomplete, "no durable deployment by the end of the match"
            self._emit(ev.CompetitorStateChanged(territory=tid, from_=cs, to=to, reason=reason))

    # ------------------------------------------------------------------ abort

    async def _abort(self) -> None:
        await self._cancel_tasks()
        if self.world.match_state in (MatchState.running, MatchState.preparing):
            self._emit(ev.MatchStateChanged(from_=self.world.match_state, to=MatchState.aborted))
            rec = self._emit(ev.MatchFinished(winner=None, reason=REASONS["interrupt"]))
            self._frozen_ms = rec.elapsed_ms
        running = [s for s in self.seats if self._running(s)]
        await self._stop_seats(self.seats)
        for seat in running:
            if self._running(seat):
                self._emit(ev.AgentTerminated(agent=seat.agent.id, reason=REASONS["aborted_agent"]))

    async def _cancel_tasks(self) -> None:
        tasks = [t for t in self._tasks if not t.done()]
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    # ------------------------------------------------------------------ extras

    def _write_activity(self) -> None:
        """``agents/<id>/activity.log`` (ours): the adapter's last activity lines."""
        for seat in self.seats:
            if seat.run is None or not getattr(seat.run, "activity", None):
                continue
            with contextlib.suppress(OSError):
                _write_text(seat.agent_dir / "activity.log", "\n".join(seat.run.activity) + "\n")

    def extra(self) -> dict[str, Any]:
        """Our own per-match facts for ``aoe-extra.json`` (never in upstream files)."""
        return {
            "timings": dict(self.timings),
            "verifier_durations_ms": {s.territory.id: s.verifier_ms for s in self.seats},
            "agents": {
                s.agent.id: {"adapter": s.adapter.name or s.agent.adapter, "territory": s.territory.id}
                for s in self.seats
            },
        }


def _one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
