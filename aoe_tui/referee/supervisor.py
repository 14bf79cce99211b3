"""The heat supervisor: runs the processes of one build race and logs what the rules decide.

:class:`HeatSupervisor` owns everything with a side effect: the adapters (start,
``instruction.md``, watchers, stop), the per-territory tick loops and the bounded
verifier pool (tasks and verifier processes), ``host_reboot`` (marker file +
``provider.reboot``; not again while a lockout it met stands: :meth:`HeatSupervisor._still_refused`), live usage polling (``usage.json``), the agents' activity
(``activity.jsonl`` as it happens, ``agents/<id>/activity.log`` at the end), the
match clock (monotonic, ms since agent launch) and our ``aoe-extra.json`` facts.
Every decision is made by :class:`~aoe_tui.referee.rules.BuildRaceRules` (spec §3; the
phases are described there): the supervisor hands it facts with their match-clock
time and appends the events it returns through
:class:`~aoe_tui.replay.log.EventLogWriter`, folding each into
:attr:`HeatSupervisor.world` with :func:`~aoe_tui.replay.reducer.apply_event` and
calling ``on_event``. Process handles (agent runs, verifier processes, tasks) are
resources, not state.

Staging (before the clock, ours; issue 26): :meth:`HeatSupervisor.run` first writes every
seat's ``instruction.md`` and stages all seats at once (:meth:`Adapter.stage`: uploads,
configuration, a harness started warm), each timed in ``timings.staging_s`` (s per agent);
the clock starts (``match_started``) only when all are done, and each run gets what its seat
staged through ``AgentContext.staged``. A seat whose staging failed is its harness failure at
clock 0 (``agent_finished`` "adapter NAME failed to stage: …"); an abort during staging ends
the heat aborted before any clock, releasing what was staged.

Result ordering: a finished check is handed to the rules stamped with its completion
ms (:meth:`BuildRaceRules.complete`); the task that ran it sleeps once, to the end of that
millisecond, and then applies every handed-over result of earlier milliseconds in the
order the rules give ((ms, seat), :meth:`BuildRaceRules.due`).

Finish (first durable deployment or the deadline, ``duration_s``): the match finishes at
once — at the deadline the rules get the clock when the deadline timer fires, so
``match_finished`` is a few ms (well under one tick unless the loop is starved) after
``duration_s * 1000`` ms. The tick loops are then cancelled: a verifier still running is
killed with its whole process group and reaped, its evidence file is removed, and its
check earns nothing (the rules write no ``milestone_passed`` / ``milestone_failed``
for it; see :mod:`aoe_tui.referee.rules`, phase 3). The drain starts after that, at
the frozen clock.

Full disk: when the match folder's file system has less than ``min_free_bytes`` free
(checked every tick) or a write of the heat fails with ``ENOSPC``/``EDQUOT`` (the event
log, a verifier start), :attr:`HeatSupervisor.disk_full` is set to ``"No space left on
device: <path>"`` and the heat aborts: an ``infrastructure_failure`` (component ``disk``,
source ``harness``) then aborted (:data:`~aoe_tui.referee.rules.REASONS` ``disk_full``).
Once the full disk refuses an event, the log ends there: no later event is appended or
folded into the world (the log stays a whole prefix, no half line, as after a kill).

A territory's own limits (its class's resources, enforced by the provider): a seat that
runs out of memory, tasks or disk in its territory fails or slows alone. Every tick the
supervisor asks ``provider.exhaustion`` which limits each territory has hit
(:attr:`HeatSupervisor.exhausted`); each new one is an activity line of that seat. Of those
hit since the clock started (not during the boot or staging): an agent that then ends
without success has the limit named first in its result's detail and, where its adapter
blamed the harness (or, after running out of memory or tasks, its lost SSH session), is the
player's failure (``failed``), and a ``host_reboot`` such a territory does not come back
from (an error or the reboot timeout) fails that seat's milestone (no infrastructure
failure, the heat is not voided). ``aoe-extra.json`` lists them under
``territories[id].exhausted``. The host's own full disk (below) is another matter.

Activity (ours): each adapter's :attr:`~aoe_tui.agents.base.AgentRun.activity` is listened
to from the moment the run starts; every line is stamped with the heat clock (:attr:`clock_ms`)
and buffered in an :class:`~aoe_tui.replay.activity.ActivityWriter`, which a background task
flushes to ``activity.jsonl`` every :data:`ACTIVITY_FLUSH_S` from a worker thread (one write, no
fsync), so a burst of output costs the tick loops one list append per line. A write that fails stops the file (one
line on stderr); a full disk is handled as above.

Abort (:meth:`HeatSupervisor.abort`, or cancellation of :meth:`HeatSupervisor.run`):
in-flight verifiers are killed, the rules' abort events are written, agents are
stopped (``agent_terminated`` "match aborted by operator" for those still running).
``run`` then returns (after ``abort()``) or re-raises ``CancelledError`` (after
cancellation).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aoe_tui.domain.events import EventRecord, InfrastructureFailure, MatchState
from aoe_tui.domain.world import WorldState
from aoe_tui.errors import AoeError
from aoe_tui.fsio import fmt_bytes, free_bytes, is_no_space, write_atomic
from aoe_tui.referee.rules import REASONS, AgentResult, BuildRaceRules, Completion, Stamped
from aoe_tui.referee.verifier import VerifierOutcome, run_verifier, verifier_starter
from aoe_tui.replay.activity import ACTIVITY_FILE, ActivityWriter
from aoe_tui.replay.reducer import apply_event
from aoe_tui.runtime.procs import use_pidfd_child_watcher
from aoe_tui.runtime.provider import TerritoryRefusedError

if TYPE_CHECKING:  # pragma: no cover
    from aoe_tui.agents.base import Adapter, AgentContext, AgentOutcome, AgentRun, Staged
    from aoe_tui.domain.arena import AgentDef, LoadedManifest, MilestoneDef
    from aoe_tui.replay.log import EventLogWriter
    from aoe_tui.runtime.provider import Territory, TerritoryProvider

__all__ = ["ACTIVITY_FLUSH_S", "DISK_COMPONENT", "DISK_RESERVE_BYTES", "HeatSupervisor", "OnEvent"]

#: ``on_event(record, world)``: called after every event is appended and reduced.
OnEvent = Callable[[EventRecord, WorldState], None]

#: ``infrastructure_failure.component`` of a heat the full disk ended
DISK_COMPONENT = "disk"
#: free bytes a running heat keeps on its match folder's file system (below: disk full)
DISK_RESERVE_BYTES = 1 << 20

#: seconds between two appends of buffered activity lines to ``activity.jsonl``
ACTIVITY_FLUSH_S = 0.2

_DEFAULT_DRAIN_S = 30.0
#: backstop on one seat's staging (s) for an adapter that gives none
#: (:meth:`Adapter.stage_timeout_s`): past it the seat is a harness failure at clock 0. An
#: adapter's staging holds every seat's clock, so it should bound its own steps (opencode does,
#: per step, and gives their sum); 900 s (15 min) is for one that does not: a slow upload of a
#: large harness, not a wedged territory.
STAGE_TIMEOUT_S = 900.0
_STOP_TIMEOUT_S = 15.0
#: past the end of a millisecond, so the clock read after the sleep is surely in the next one
_EPSILON_MS = 0.001


@dataclass
class _Seat:
    """One territory + its agent (resources only; state lives in the world)."""

    territory: Territory
    agent: AgentDef
    adapter: Adapter
    agent_dir: Path
    run: AgentRun | None = None
    watcher: asyncio.Task | None = None
    #: the seat's context, built when it is staged (instruction.md written)
    ctx: AgentContext | None = None
    #: what the adapter staged before the clock, until :meth:`Adapter.start` takes it over
    staged: Staged | None = None
    #: one line when staging failed (the seat's harness failure at clock 0)
    stage_error: str | None = None
    #: what staging reported (:meth:`Staged.detail`), for ``aoe-extra.json``
    stage_detail: dict[str, Any] = field(default_factory=dict)
    verifier_ms: dict[str, list[int]] = field(default_factory=dict)
    #: the one-line detail of this seat's last ``host_reboot`` that the territory came back
    #: from refusing the referee; None once a root login works again (:meth:`HeatSupervisor._evaluate`)
    refused: str | None = None


class HeatSupervisor:
    """Runs one build race on already-provisioned territories (the rules: :class:`BuildRaceRules`).

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
        min_free_bytes: free bytes (on ``output_dir``'s file system) below which the heat
            ends as a full disk (checked every tick); 0 = only real ``ENOSPC`` errors.
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
        min_free_bytes: int = DISK_RESERVE_BYTES,
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
        by_id = {t.id: t for t in territories}
        self.seats: list[_Seat] = []
        for tdef in m.territories:
            if tdef.id not in by_id:
                raise ValueError(f"no provisioned territory for {tdef.id!r}")
            agent = m.agent_for(tdef.id)
            if agent is None:
                raise ValueError(f"no agent seated on territory {tdef.id!r}")
            if agent.id not in adapters:
                raise ValueError(f"no adapter for agent {agent.id!r}")
            self.seats.append(
                _Seat(by_id[tdef.id], agent, adapters[agent.id], self.output_dir / "agents" / agent.id)
            )
        self.rules = BuildRaceRules(m, self.world, drain_ms=int(round(self.drain_seconds * 1000)))
        self._sem = asyncio.Semaphore(max(1, verifier_concurrency))
        self._t0: float | None = None
        self._finished_evt = asyncio.Event()
        self._abort_evt = asyncio.Event()
        self._timer_evt = asyncio.Event()  # expire_timer(): the deadline now
        self._tasks: list[asyncio.Task] = []
        #: wall-clock facts for our own ``aoe-extra.json`` (not upstream files)
        self.timings: dict[str, Any] = {}
        self.min_free_bytes = int(min_free_bytes)
        #: ``"No space left on device: <path>"`` once the disk filled (the heat then aborts)
        self.disk_full: str | None = None
        self._log_full = False  # an append failed for a full disk: nothing more is logged
        #: ``activity.jsonl``'s writer while the heat runs (None before, after, or once it failed)
        self.activity_log: ActivityWriter | None = None
        self._activity_task: asyncio.Task | None = None
        self._activity_pool: concurrent.futures.ThreadPoolExecutor | None = None
        #: territory id → the limits of its own resources it has run into, in the order seen
        #: (``provider.exhaustion``: ``out of memory in the territory (768 MiB)``); the
        #: player's doing, charged to that seat alone (see :meth:`_check_exhaustion`)
        self.exhausted: dict[str, list[str]] = {}
        #: territory id → the limits it had already run into when the clock started (during
        #: its boot or an adapter's staging: not the player's doing, never charged)
        self._exhausted_before_clock: dict[str, set[str]] = {}

    # ------------------------------------------------------------------ clock + emit

    def _now_ms(self) -> int:
        if self._t0 is None:
            return 0
        return int((time.monotonic() - self._t0) * 1000)

    def _emit_all(self, stamped: Sequence[Stamped]) -> None:
        """Append the rules' events in order, folding each into :attr:`world` before the next."""
        for item in stamped:
            if self._log_full:
                return
            try:
                rec = self.log.append(item.event, item.at_ms)
            except OSError as err:
                if not is_no_space(err):
                    raise
                # the log cannot take it: it ends here (a whole prefix, as after a kill), the heat aborts
                self._log_full = True
                self.note_disk_full(self.log.path)
                return
            apply_event(self.world, rec)
            if self.on_event is not None:
                try:
                    self.on_event(rec, self.world)
                except Exception as err:  # a broken live view must not stop the match
                    print(f"aoe: live view error: {err}", file=sys.stderr)
            if item.event.kind == "match_finished" and self.world.match_state == MatchState.finished:
                self.timings["finished_unix"] = time.time()
                self._finished_evt.set()

    def _stopping(self) -> bool:
        return self._abort_evt.is_set() or not self.rules.accepting()

    # ------------------------------------------------------------------ public

    def abort(self) -> None:
        """Request an operator abort (safe from a signal handler via ``loop.add_signal_handler``)."""
        self._abort_evt.set()

    def expire_timer(self) -> None:
        """End the build phase now exactly as the match timer does at its deadline ("match
        timer expired" at the current clock, the §3.6 winner, then the drain); nothing if
        the match already finished. For callers that wait for a state rather than a clock
        (tests: a heat nothing can win, ended once what they assert has happened). Call it
        on the heat's loop (e.g. from ``on_event``)."""
        self._timer_evt.set()

    def note_disk_full(self, path: Path | str, detail: str = "") -> None:
        """The disk holding ``path`` is full: set :attr:`disk_full` (the first one stays) and
        abort the heat as an infrastructure failure (see the module docstring)."""
        if self.disk_full is None:
            self.disk_full = f"No space left on device: {path}" + (f" ({detail})" if detail else "")
        self._abort_evt.set()

    def check_disk(self) -> bool:
        """True when ``output_dir``'s file system has at least ``min_free_bytes`` free;
        else :meth:`note_disk_full` and False."""
        if self.min_free_bytes <= 0:
            return True
        try:
            free = free_bytes(self.output_dir)
        except OSError:
            return True
        if free >= self.min_free_bytes:
            return True
        self.note_disk_full(self.output_dir, f"{fmt_bytes(free)} free, under the {fmt_bytes(self.min_free_bytes)} "
                                             "a running heat keeps in reserve")
        return False

    @property
    def clock_ms(self) -> int:
        """The match clock now (ms since agent launch; frozen after finish)."""
        if self.world.match_state in (MatchState.finished, MatchState.aborted):
            return self.world.elapsed_ms
        return self._now_ms()

    async def run(self) -> WorldState:
        """Run the whole match (start → build → finish → drain) and return the final world.

        Returns the world after a normal finish or an :meth:`abort`. On cancellation the
        abort events are written, agents stopped, then ``CancelledError`` is re-raised.
        """
        # before the clock starts: no tick ever waits for a thread to start
        use_pidfd_child_watcher()
        verifier_starter()
        self._open_activity()
        try:
            await self._stage_seats()
            if self._abort_evt.is_set():  # stopped (or the disk filled) before the clock started
                await self._abort()
                return self.world
            self._check_exhaustion()  # what boot and staging used up is not the player's
            self._exhausted_before_clock = {tid: set(v) for tid, v in self.exhausted.items()}
            self._emit_all(self.rules.start())
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
            self._check_exhaustion()  # the territories are still up: their last counters
            await self._release_staged()
            await self._close_activity()
            self._write_activity()

    # ------------------------------------------------------------------ start

    def _instruction(self, territory_id: str) -> str:
        builder = self.instruction_builder
        if builder is None:
            from aoe_tui.agents.instruction import build_instruction

            builder = build_instruction
        return builder(self.loaded, territory_id)

    def _context(self, seat: _Seat) -> AgentContext:
        """Write ``instruction.md`` (deterministic, so before the clock) and build the seat's context."""
        from aoe_tui.agents.base import AgentContext

        seat.agent_dir.mkdir(parents=True, exist_ok=True)
        instruction_file = seat.agent_dir / "instruction.md"
        write_atomic(instruction_file, self._instruction(seat.territory.id), fsync=False)
        return AgentContext(
            agent=seat.agent,
            territory=seat.territory,
            agent_dir=seat.agent_dir,
            instruction_file=instruction_file,
            deadline_s=self.duration_s,
            arena_dir=self.loaded.arena_dir,
        )

    async def _stage_seats(self) -> None:
        """The staging phase, before the clock: every seat's ``instruction.md`` and
        :meth:`Adapter.stage`, all seats at once. Each seat's seconds go to
        ``timings.staging_s[agent]``, the whole phase's to ``timings.staging_wall_s``. A seat
        whose staging fails (an exception, or its adapter's ``stage_timeout_s()``, default
        :data:`STAGE_TIMEOUT_S`) keeps
        :attr:`_Seat.stage_error`: its harness failure at clock 0 (:meth:`_start_agents`).
        An abort ends the phase at once (the stagings are cancelled, what they staged is
        closed by :meth:`run`)."""
        per_seat: dict[str, float] = {}

        async def stage(seat: _Seat) -> None:
            t = time.monotonic()
            try:
                seat.ctx = self._context(seat)
                hook = getattr(seat.adapter, "stage", None)  # an adapter without the hook stages nothing
                if hook is not None:
                    limit = _stage_limit(seat.adapter)
                    seat.staged = await asyncio.wait_for(hook(seat.ctx), limit)
                if seat.staged is not None:
                    with contextlib.suppress(Exception):
                        seat.stage_detail = dict(seat.staged.detail())
            except asyncio.TimeoutError:
                seat.stage_error = f"staging did not finish within {_stage_limit(seat.adapter):g} s"
            except asyncio.CancelledError:
                raise
            except Exception as err:  # noqa: BLE001 - the seat's harness failure, never a crash
                if is_no_space(err):
                    self.note_disk_full(getattr(err, "filename", None) or seat.agent_dir)
                seat.stage_error = _one_line(err)
            finally:
                per_seat[seat.agent.id] = round(time.monotonic() - t, 3)

        t0 = time.monotonic()
        staging = asyncio.gather(*(stage(s) for s in self.seats))
        aborted = asyncio.ensure_future(self._abort_evt.wait())
        try:
            await asyncio.wait({staging, aborted}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            aborted.cancel()
            if not staging.done():
                staging.cancel()
                with contextlib.suppress(BaseException):
                    await staging
        self.timings["staging_s"] = per_seat
        self.timings["staging_wall_s"] = round(time.monotonic() - t0, 3)

    async def _release_staged(self) -> None:
        """Close what was staged for seats that never started (bounded, never raises)."""
        for seat in self.seats:
            staged, seat.staged = seat.staged, None
            if staged is not None:
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(staged.close(), _STOP_TIMEOUT_S)

    async def _start_agents(self) -> None:
        """At the clock: start every staged seat's agent; a seat whose staging or start
        failed is its harness failure now (clock ~0), the others race."""
        from aoe_tui.agents.base import AdapterStatus, AgentOutcome

        async def start(seat: _Seat) -> None:
            name = seat.adapter.name or seat.agent.adapter
            if seat.stage_error is not None or seat.ctx is None:
                detail = f"adapter {name} failed to stage: {seat.stage_error or 'not staged'}"
                self._record_outcome(seat, AgentOutcome(AdapterStatus.HARNESS_ERROR, detail), charge_limits=False)
                return
            try:
                seat.ctx.staged, seat.ctx.clock_started = seat.staged, self._t0
                seat.run = await seat.adapter.start(seat.ctx)
                seat.staged = None  # the run owns it now
                self._listen_activity(seat)
            except Exception as err:  # adapter could not start: a harness failure
                if is_no_space(err):
                    self.note_disk_full(getattr(err, "filename", None) or seat.agent_dir)
                detail = f"adapter {name} failed to start: {_one_line(err)}"
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

    def _record_outcome(self, seat: _Seat, outcome: AgentOutcome, *, charge_limits: bool = True) -> None:
        """Hand an adapter's result to the rules (§5.4) at the clock now.

        With ``charge_limits`` (not for a seat whose staging failed: that was before its
        clock), a run that ended without success in a territory that ran into its own limits
        since the clock started (:meth:`_charged_limits`) has them named first in its detail;
        a harness failure there is the player's (``failed``), and so is an ``unavailable``
        after running out of memory or tasks (a lost SSH session whose sshd was OOM-killed
        or could not fork), not after a full disk (which leaves a model outage the provider's).
        """
        from aoe_tui.agents.base import AdapterStatus

        status = AdapterStatus(outcome.status)
        detail = outcome.summary
        limits = self._charged_limits(seat) if charge_limits else []
        if limits and status != AdapterStatus.COMPLETED:
            # the territory ran out of its own resources: that is what ended the run (an agent
            # OOM-killed, a harness that could not fork, a session lost with its sshd), the
            # player's doing, never the infrastructure's (§3.9)
            detail = f"{'; '.join(limits)}: {detail}"
            starved = any(p.startswith("out of ") for p in limits)
            if status == AdapterStatus.HARNESS_ERROR or (status == AdapterStatus.UNAVAILABLE and starved):
                status = AdapterStatus.FAILED
        result = AgentResult(
            agent=seat.agent.id,
            source=status.failure_source,
            success=status == AdapterStatus.COMPLETED,
            detail=detail,
            usage=outcome.usage,
            interrupted=status == AdapterStatus.INTERRUPTED,
        )
        self._emit_all(self.rules.agent_result(result, self._now_ms()))

    # ------------------------------------------------------------------ build phase

    async def _build_phase(self) -> None:
        deadline = asyncio.create_task(asyncio.sleep(max(0.0, self.duration_s - self._now_ms() / 1000)))
        expired = asyncio.create_task(self._timer_evt.wait())  # expire_timer(): as the deadline
        finished = asyncio.create_task(self._finished_evt.wait())
        aborted = asyncio.create_task(self._abort_evt.wait())
        try:
            await asyncio.wait({deadline, expired, finished, aborted}, return_when=asyncio.FIRST_COMPLETED)
            if finished.done() or aborted.done():
                return
            # Deadline (§3.6, ours): finish now, no overrun. Checks completed in an earlier
            # millisecond count; the rest are discarded, and run() kills their verifiers
            # (cancelling the tick loops) before the drain. No await until the finish.
            now = self._now_ms()
            self.rules.close()
            self._flush(now)
            if self.rules.running():
                self._checkpoint_usage(now)
                self._emit_all(self.rules.timer_expired(now))
        finally:
            for t in (deadline, expired, finished, aborted):
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
            if self._stopping() or not self.rules.can_progress(seat.territory.id):
                return
            await self._territory_tick(seat)
            k = max(k + 1, int(self._now_ms() // tick_ms) + 1)

    async def _territory_tick(self, seat: _Seat) -> None:
        tid = seat.territory.id
        attempted: set[str] = set()
        while not self._stopping() and self.rules.can_progress(tid):
            m = self.rules.next_milestone(tid, attempted)
            if m is None:
                return
            attempted.add(m.id)
            if not await self._evaluate(seat, m):
                if not self.rules.can_progress(tid):
                    return

    def _emit_evaluation_started(self, seat: _Seat, m: MilestoneDef) -> None:
        self._emit_all(self.rules.evaluation_started(seat.territory.id, m.id, self._now_ms()))

    async def _evaluate(self, seat: _Seat, m: MilestoneDef) -> bool:
        """One verifier attempt (with the reboot first for ``host_reboot``); True iff it passed."""
        tid = seat.territory.id
        if m.operation == "host_reboot":
            if self._stopping():
                return False
            self._emit_evaluation_started(seat, m)
            still = await self._still_refused(seat)
            if still is not None:  # the lockout stands: fail again without another reboot
                await self._commit(Completion(tid, m.id, self._now_ms(), passed=False, detail=still))
                return False
            err, refused = await self._reboot(seat, m)
            if refused:  # booted but locked the referee out: the player's failure, not the infrastructure's
                seat.refused = err or "refused the referee"
                await self._commit(Completion(tid, m.id, self._now_ms(), passed=False, detail=err or ""))
                return False
            if err is not None:
                await self._commit(Completion(tid, m.id, self._now_ms(), detail=err, reboot_failed=True))
                return False
            async with self._sem:
                if not self.rules.running() or self._abort_evt.is_set():
                    return False  # finished meanwhile: result would be discarded anyway
                outcome = await self._run_verifier(seat, m)
        else:
            async with self._sem:
                if self._stopping():
                    return False
                self._emit_evaluation_started(seat, m)
                outcome = await self._run_verifier(seat, m)
        seat.verifier_ms.setdefault(m.id, []).append(outcome.duration_ms)
        done = Completion(
            tid, m.id, self._now_ms(), passed=outcome.passed, detail=outcome.detail or "", evidence=outcome.evidence
        )
        accepted = await self._commit(done)
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
        except Exception as err:  # the runner itself failed: record, don't crash
            if is_no_space(err):
                self.note_disk_full(getattr(err, "filename", None) or self.output_dir / "evidence" / t.id)
            return VerifierOutcome(passed=False, detail=f"verifier runner error: {_one_line(err)}")

    async def _still_refused(self, seat: _Seat) -> str | None:
        """After a ``host_reboot`` the territory came back from refusing the referee
        (``seat.refused``): one root SSH login to it (:func:`aoe_tui.runtime.ssh.probe`, 5 s
        connect timeout). A line saying the lockout stands when it still fails, so the milestone
        fails again without another reboot (a territory that locks the referee out cannot be
        asked to reboot; waiting ``reboot_timeout_s`` for one that never happens would turn the
        player's lockout into an infrastructure failure); None (and ``seat.refused`` cleared)
        when the login works again or there was no lockout: reboot as usual."""
        from aoe_tui.runtime.ssh import probe

        if seat.refused is None:
            return None
        t = seat.territory
        if await probe(t.host, t.ssh_port, t.password, connect_timeout_s=5.0):
            seat.refused = None
            return None
        return (f"territory {t.id} still has no root SSH login for the referee on {t.host}:{t.ssh_port}, "
                f"so it was not rebooted again; the last reboot: {seat.refused}")

    async def _reboot(self, seat: _Seat, m: MilestoneDef) -> tuple[str | None, bool]:
        """Marker + ``provider.reboot`` (§3.4). Returns ``(None, False)`` on success, else a
        one-line detail and whether the territory came back but refused the referee
        (:class:`~aoe_tui.runtime.provider.TerritoryRefusedError`: the milestone fails as a
        verification, charged to that seat alone; any other error is an infrastructure
        failure)."""
        try:
            seat.agent_dir.mkdir(parents=True, exist_ok=True)
            write_atomic(seat.agent_dir / "referee-reboot", m.id, fsync=False)
        except OSError as err:
            return f"cannot write referee-reboot marker: {_one_line(err)}", False
        try:
            if self.reboot_timeout_s is None:
                await self.provider.reboot(seat.territory)
            else:
                await asyncio.wait_for(self.provider.reboot(seat.territory), self.reboot_timeout_s)
        except asyncio.CancelledError:
            raise
        except TerritoryRefusedError as err:
            return _one_line(err), True
        except (asyncio.TimeoutError, Exception) as err:
            why = (f"host reboot did not complete within {self.reboot_timeout_s:.0f} s"
                   if isinstance(err, asyncio.TimeoutError) else f"host reboot failed: {_one_line(err)}")
            limits = self._charged_limits(seat)
            if limits:  # a territory that exhausted its own resources did not come back: its own doing
                return f"{'; '.join(limits)}: {why}", True
            return why, False
        return None, False

    # ------------------------------------------------------------------ commit (ordering)

    async def _commit(self, done: Completion) -> bool:
        """Hand ``done`` (stamped with its completion ms) to the rules, sleep to the end of
        that millisecond, then apply every result of earlier milliseconds in the rules'
        (ms, seat) order. Returns False when the match finished first (result discarded)."""
        self.rules.complete(done)
        try:
            while done.accepted is None:
                await self._sleep_until_ms(done.at_ms + 1 + _EPSILON_MS)
                self._flush()
        except asyncio.CancelledError:
            self.rules.discard(done)
            raise
        return bool(done.accepted)

    def _flush(self, now_ms: int | None = None) -> None:
        """Apply the handed-over results of milliseconds before ``now_ms`` (ms; default now)."""
        for done in self.rules.due(self._now_ms() if now_ms is None else now_ms):
            if self._abort_evt.is_set():
                self.rules.discard(done)
            else:
                self._emit_all(self.rules.apply(done))

    # ------------------------------------------------------------------ usage

    def _checkpoint_usage(self, now_ms: int | None = None) -> None:
        """Read every ``usage.json`` and log the deltas at ``now_ms`` (ms; default now)."""
        from aoe_tui.domain.adapter_io import read_usage_checkpoint

        for seat in self.seats:
            usage = read_usage_checkpoint(seat.agent_dir / "usage.json", seat.agent.id, seat.territory.id)
            if usage is None:
                continue
            at = self._now_ms() if now_ms is None else now_ms
            self._emit_all(self.rules.usage_checkpoint(seat.agent.id, usage, at))

    async def _usage_loop(self) -> None:
        tick_ms = self.tick_s * 1000.0
        k = 1
        while self.rules.running():
            await self._sleep_until_ms(k * tick_ms + tick_ms / 2)  # between territory checks
            if not self.rules.running() or not self.check_disk():
                return
            self._check_exhaustion()
            self._checkpoint_usage()
            k = max(k + 1, int(self._now_ms() // tick_ms) + 1)

    def _charged_limits(self, seat: _Seat) -> list[str]:
        """The limits ``seat``'s territory has run into since the clock started, asked of the
        provider now (:meth:`_check_exhaustion`); those already hit before the clock (its
        boot, an adapter's staging) are not the player's and are left out."""
        self._check_exhaustion()
        tid = seat.territory.id
        before = self._exhausted_before_clock.get(tid, set())
        return [p for p in self.exhausted.get(tid, []) if p not in before]

    def _check_exhaustion(self) -> None:
        """Ask the provider which limits each territory has run into
        (:meth:`~aoe_tui.runtime.provider.TerritoryProvider.exhaustion`: cgroup counters and a
        statvfs, no process) and add the new ones to :attr:`exhausted`; each new one is also
        an activity line of that seat (``territory: out of memory in the territory (768
        MiB)``). Called just before the clock starts, every tick (the usage loop), when an
        agent's result comes in, when a reboot fails and once before the territories are torn
        down. Never raises."""
        for seat in self.seats:
            tid = seat.territory.id
            try:
                hit = list(self.provider.exhaustion(tid))
            except Exception:  # noqa: BLE001 - a provider that cannot tell says nothing
                continue
            known = self.exhausted.setdefault(tid, [])
            for phrase in hit:
                if phrase in known:
                    continue
                known.append(phrase)
                if self._t0 is not None and phrase not in self._exhausted_before_clock.get(tid, set()):
                    self.rules.note_limits(tid, [phrase])  # named in the reason its seat ends with
                line = f"territory: {phrase}"
                lines = getattr(seat.run, "activity", None)
                if lines is not None and getattr(lines, "listen", None) is not None:
                    lines.append(line)  # stamped into activity.jsonl by its listener
                elif self.activity_log is not None:
                    self.activity_log.add(self.clock_ms, seat.agent.id, line)

    # ------------------------------------------------------------------ drain

    async def _stop_seats(self, seats: Sequence[_Seat]) -> None:
        """Stop agents (bounded) and let their watchers record usage (silenced first)."""
        self.rules.silence([s.agent.id for s in seats])

        async def stop(seat: _Seat) -> None:
            if seat.run is not None:
                with contextlib.suppress(Exception, asyncio.TimeoutError):
                    await asyncio.wait_for(seat.run.stop(), _STOP_TIMEOUT_S)
            if seat.watcher is not None and not seat.watcher.done():
                try:
                    await asyncio.wait_for(asyncio.shield(seat.watcher), _STOP_TIMEOUT_S)
                except (asyncio.TimeoutError, Exception):
                    seat.watcher.cancel()

        await asyncio.gather(*(stop(s) for s in seats))

    def _seats_of(self, agents: Sequence[str]) -> list[_Seat]:
        return [s for s in self.seats if s.agent.id in agents]

    async def _drain(self) -> None:
        """§3.7 at the frozen clock: the rules decide, the supervisor stops and waits."""
        plan = self.rules.start_drain(self._now_ms())
        self._emit_all(plan.events)
        outraced = self._seats_of(plan.stop_now)
        await self._stop_seats(outraced)
        self._emit_all(self.rules.outraced(plan, self._now_ms()))
        waiting = [
            s.watcher for s in self._seats_of(plan.wait_for) if s.watcher is not None and not s.watcher.done()
        ]
        if waiting:
            await self._wait_drain(waiting)
        self._checkpoint_usage()
        still = self.rules.drain_deadline()
        await self._stop_seats(self._seats_of(still))
        self._emit_all(self.rules.finish_drain(still, self._now_ms()))
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

    # ------------------------------------------------------------------ abort

    async def _abort(self) -> None:
        await self._cancel_tasks()
        if self.disk_full is not None:
            failure = InfrastructureFailure(component=DISK_COMPONENT, source="harness", detail=self.disk_full)
            self._emit_all(self.rules.abort(self._now_ms(), failure, REASONS["disk_full"]))
        else:
            self._emit_all(self.rules.abort(self._now_ms()))
        running = self.rules.running_agents()
        await self._stop_seats(self.seats)
        why = REASONS["disk_full"] if self.disk_full is not None else REASONS["aborted_agent"]
        self._emit_all(self.rules.terminated(running, why, self._now_ms()))

    async def _cancel_tasks(self) -> None:
        tasks = [t for t in self._tasks if not t.done()]
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    # ------------------------------------------------------------------ extras

    def _open_activity(self) -> None:
        """Open ``activity.jsonl`` and start its flush task (a failure: no file, one line)."""
        try:
            self.activity_log = ActivityWriter(self.output_dir / ACTIVITY_FILE)
        except (OSError, AoeError) as err:
            print(f"aoe: no live activity file: {_one_line(err)}", file=sys.stderr)
            return
        # its own thread, started before the clock: no tick waits for a thread to start
        self._activity_pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="aoe-activity")
        self._activity_pool.submit(lambda: None).result()
        self._activity_task = asyncio.create_task(self._activity_loop())

    def _listen_activity(self, seat: _Seat) -> None:
        """Stamp each activity line of ``seat``'s run with the heat clock and buffer it."""
        lines = getattr(seat.run, "activity", None)
        listen = getattr(lines, "listen", None)
        if listen is None or self.activity_log is None:
            return
        writer, agent = self.activity_log, seat.agent.id
        listen(lambda line: writer.add(self.clock_ms, agent, line))

    def _activity_failed(self, writer: ActivityWriter, err: OSError) -> None:
        """A write of ``activity.jsonl`` failed: no more activity is written (one line), a
        full disk ends the heat as any full disk does."""
        if self.activity_log is writer:
            self.activity_log = None
        writer.close()
        if is_no_space(err):
            self.note_disk_full(writer.path)
        else:
            print(f"aoe: live activity file stopped: {writer.path}: {err.strerror or err}", file=sys.stderr)

    async def _activity_loop(self) -> None:
        """Every :data:`ACTIVITY_FLUSH_S`: encode and append the queued lines in a worker
        thread, so even a burst of thousands of lines leaves the tick loops their loop."""
        while self.activity_log is not None:
            await asyncio.sleep(ACTIVITY_FLUSH_S)
            writer = self.activity_log
            if writer is None:
                return
            try:
                await asyncio.get_running_loop().run_in_executor(self._activity_pool, writer.flush)
            except OSError as err:
                self._activity_failed(writer, err)

    async def _close_activity(self) -> None:
        """Stop listening, flush the rest and close ``activity.jsonl``."""
        for seat in self.seats:
            listen = getattr(getattr(seat.run, "activity", None), "listen", None)
            if listen is not None:
                listen(None)
        if self._activity_task is not None:
            self._activity_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._activity_task
            self._activity_task = None
        writer, self.activity_log = self.activity_log, None
        if writer is not None:
            try:
                writer.flush()  # waits for a flush the cancelled task left running in its thread
            except OSError as err:
                self._activity_failed(writer, err)
            writer.close()
        if self._activity_pool is not None:
            self._activity_pool.shutdown(wait=False)
            self._activity_pool = None

    def _write_activity(self) -> None:
        """``agents/<id>/activity.log`` (ours): the adapter's last activity lines."""
        for seat in self.seats:
            if seat.run is None or not getattr(seat.run, "activity", None):
                continue
            with contextlib.suppress(OSError):
                write_atomic(seat.agent_dir / "activity.log", "\n".join(seat.run.activity) + "\n", fsync=False)

    def extra(self) -> dict[str, Any]:
        """Our own per-match facts for ``aoe-extra.json`` (never in upstream files).

        ``agents[id].usage`` (when the run reports one): what §5.5 cannot hold — cache
        tokens, who computed the cost, the proxy's and the events' counts
        (:meth:`aoe_tui.agents.base.AgentRun.usage_detail`; tokens and µUSD).
        ``agents[id].staging``: the seat's staging before the clock — ``seconds`` (s, also in
        ``timings.staging_s``), what the adapter reported (:meth:`Staged.detail`) and
        ``error`` (one line) when it failed. ``agents[id].first_model_request_ms`` /
        ``first_tool_call_ms`` (match-clock ms) when the run reports them
        (:meth:`aoe_tui.agents.base.AgentRun.start_detail`).
        (:attr:`exhausted` goes to ``territories[id].exhausted``, written by ``run_heat``.)"""
        agents: dict[str, Any] = {}
        for s in self.seats:
            entry: dict[str, Any] = {"adapter": s.adapter.name or s.agent.adapter, "territory": s.territory.id}
            detail = None
            if s.run is not None:
                with contextlib.suppress(Exception):
                    detail = s.run.usage_detail()
            if detail:
                entry["usage"] = dict(detail)
            if s.agent.id in self.timings.get("staging_s", {}):
                entry["staging"] = {"seconds": self.timings["staging_s"][s.agent.id], **s.stage_detail}
                if s.stage_error is not None:
                    entry["staging"]["error"] = s.stage_error
            if s.run is not None:
                with contextlib.suppress(Exception):
                    entry.update(s.run.start_detail() or {})
            agents[s.agent.id] = entry
        return {
            "timings": dict(self.timings),
            "verifier_durations_ms": {s.territory.id: s.verifier_ms for s in self.seats},
            "agents": agents,
        }


def _stage_limit(adapter: object) -> float:
    """The backstop on ``adapter``'s staging (s): its ``stage_timeout_s()`` when it gives a
    positive number, else :data:`STAGE_TIMEOUT_S`."""
    with contextlib.suppress(Exception):
        limit = adapter.stage_timeout_s()  # type: ignore[attr-defined]
        if isinstance(limit, (int, float)) and limit > 0:
            return float(limit)
    return STAGE_TIMEOUT_S


def _one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


