"""Pure season reducer: ``season.jsonl`` records (+ optional worlds) → :class:`SeasonState`.

The runner, ``aoe standings``, exports and (later) the TUI all read this state, so a live
run, a resumed run and an export cannot disagree. No I/O here.

Consistency rules (a log breaking them raises :class:`SeasonStateError` naming the
record's sequence): the first event is ``season_started``; rounds are scheduled in order
1, 2, … and once each; no entrant appears twice in a round (heats + byes); only
season entrants are seated; attempts of a heat are numbered 1, 2, … (an interrupted
attempt is re-run with the same number); an attempt finishes at most once and only if
started; a heat finishes once, after its counted attempt.

A stop and a resume: ``season_stopped`` (the runner aborted its running heats, then
ended) and ``season_resumed`` (a new runner; the one before may have been killed without
a ``season_stopped``) end the run session that ran the open attempts. Those attempts stay
open (``status`` ``running``: the resume's ``attempt_interrupted`` closes them, and
:meth:`SeasonState.open_attempts` is what the resume reads) but are marked ``cut_off``:
nothing runs them any more, so views show them interrupted
(:meth:`SeasonState.running_attempts` leaves them out).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aoe_tui.domain import season_events as se
from aoe_tui.domain.world import WorldState
from aoe_tui.errors import AoeError

__all__ = ["AttemptState", "HeatState", "RoundState", "SeasonState", "SeasonStateError", "reduce_season"]


class SeasonStateError(AoeError):
    """``season.jsonl`` is inconsistent (message names the record)."""


@dataclass
class AttemptState:
    """One attempt: ``status`` running | finished | interrupted (``running``: open, started
    and neither finished nor marked interrupted); ``folder`` relative to the season
    folder; ``finished`` is the ``attempt_finished`` event once there."""

    attempt: int
    folder: str
    status: str = "running"
    interrupted_as: list[str] = field(default_factory=list)
    finished: se.AttemptFinished | None = None
    #: the worker node the attempt ran on (``attempt_placed``; None: a local heat)
    node: str | None = None
    #: what that node ran it with (``attempt_placed``: code revision, guest image digest)
    node_code: str | None = None
    node_image: str | None = None
    world: WorldState | None = None
    #: open, but the run session running it ended (``season_stopped``, or a
    #: ``season_resumed`` after a killed runner): nothing runs it; the resume marks it
    #: ``attempt_interrupted`` and re-runs it
    cut_off: bool = False

    @property
    def live(self) -> bool:
        """True while a runner is running it: open and not :attr:`cut_off`."""
        return self.status == "running" and not self.cut_off

    @property
    def shown_status(self) -> str:
        """:attr:`status` as views and exports show it: an open attempt that a stop or a
        killed runner cut off is ``interrupted`` (the resume marks it so and re-runs it)."""
        return "interrupted" if self.cut_off and self.status == "running" else self.status


@dataclass
class HeatState:
    """One heat: ``seats`` (entrant or None per territory index), its attempts, once
    finished the counted ``result`` (``heat_finished``), and the ``arena`` id it races."""

    round: int
    heat: int
    seats: tuple[str | None, ...]
    attempts: list[AttemptState] = field(default_factory=list)
    result: se.HeatFinished | None = None
    arena: str = ""
    #: attempts numbered before the last ``heats_reopened`` (``--retry-void``): the heat's
    #: attempt budget counts from here
    attempt_base: int = 0
    #: how many times ``--retry-void`` reopened this heat
    reopened: int = 0

    @property
    def key(self) -> tuple[int, int]:
        return (self.round, self.heat)

    @property
    def entrants(self) -> tuple[str, ...]:
        return tuple(e for e in self.seats if e is not None)

    @property
    def status(self) -> str:
        """``scheduled`` | ``running`` | ``interrupted`` | ``finished``: ``interrupted``
        while its open attempts were cut off by a stopped or killed runner
        (:attr:`AttemptState.cut_off`) and no resume has re-run them yet."""
        if self.result is not None:
            return "finished"
        if any(a.live for a in self.attempts):
            return "running"
        if any(a.status == "running" for a in self.attempts):
            return "interrupted"
        return "scheduled"

    @property
    def counted(self) -> AttemptState | None:
        """The attempt whose result counts (None while running or when void)."""
        if self.result is None or self.result.attempt is None:
            return None
        return next((a for a in self.attempts if a.attempt == self.result.attempt and a.status == "finished"), None)

    def next_attempt_number(self) -> int:
        """The attempt number to run next (a re-run of an interrupted one keeps its number)."""
        finished = [a.attempt for a in self.attempts if a.status == "finished"]
        return (max(finished) + 1) if finished else 1


@dataclass
class RoundState:
    """One round: its heats by number, byes, final flag, ``round_finished`` once there, and
    the ``arena`` id its heats race."""

    round: int
    heats: dict[int, HeatState]
    byes: tuple[str, ...] = ()
    final: bool = False
    finished: se.RoundFinished | None = None
    arena: str = ""

    @property
    def done(self) -> bool:
        return all(h.result is not None for h in self.heats.values())


@dataclass
class SeasonState:
    """The reduced season. ``info`` is the ``season_started`` event (None for an empty log)."""

    info: se.SeasonStarted | None = None
    rounds: dict[int, RoundState] = field(default_factory=dict)
    finished: se.SeasonFinished | None = None
    resumes: int = 0
    #: the ``season_stopped`` events, oldest first (one per run session stopped early)
    stops: list[se.SeasonStopped] = field(default_factory=list)
    cleaned: list[str] = field(default_factory=list)
    finish_order: list[tuple[int, int]] = field(default_factory=list)
    last_sequence: int | None = None
    #: ``max_attempts`` of the last ``heats_reopened`` (None: the season file's first one)
    max_attempts: int | None = None
    #: the last ``season_stopped`` until the next ``season_resumed``
    stopped: se.SeasonStopped | None = None
    #: ``(resume number, lines)`` of every resume that went on with changed rules
    #: (``season_resumed.rules_changed``, ``aoe run --accept-changed-rules``), oldest first
    rules_changed: list[tuple[int, list[str]]] = field(default_factory=list)

    @property
    def entrants(self) -> list[str]:
        return list(self.info.entrants) if self.info else []

    @property
    def arenas(self) -> list[se.SeasonArena]:
        """Every arena of the season, in order (one built from ``arena_id`` and
        ``milestones`` for logs that predate cups across arenas)."""
        if self.info is None:
            return []
        if self.info.arenas:
            return list(self.info.arenas)
        return [se.SeasonArena(id=self.info.arena_id, milestones=list(self.info.milestones))]

    @property
    def multi_arena(self) -> bool:
        """True when the rounds race more than one arena."""
        return len(self.arenas) > 1

    def arena(self, arena_id: str) -> se.SeasonArena | None:
        """The season arena with this id, or None."""
        return next((a for a in self.arenas if a.id == arena_id), None)

    def milestones_of(self, arena_id: str) -> list[str]:
        """Milestone ids of an arena of the season, in manifest order (``[]`` if unknown)."""
        a = self.arena(arena_id)
        return list(a.milestones) if a else []

    def heats(self) -> list[HeatState]:
        """Every scheduled heat, in (round, heat) order."""
        return [h for r in self.rounds.values() for h in r.heats.values()]

    def finished_heats(self) -> list[HeatState]:
        """Heats with a final result, in (round, heat) order."""
        return [h for h in self.heats() if h.result is not None]

    def heats_in_finish_order(self) -> list[HeatState]:
        """Finished heats in the order their ``heat_finished`` was logged (rating order)."""
        return [self.rounds[r].heats[h] for r, h in self.finish_order]

    def pending_heats(self) -> list[HeatState]:
        """Scheduled heats without a result yet."""
        return [h for h in self.heats() if h.result is None]

    def open_attempts(self) -> list[tuple[HeatState, AttemptState]]:
        """Attempts started but neither finished nor marked interrupted: the running ones
        and those a stopped or killed runner left open (:attr:`AttemptState.cut_off`,
        which the resume marks interrupted)."""
        return [(h, a) for h in self.heats() for a in h.attempts if a.status == "running"]

    def running_attempts(self) -> list[tuple[HeatState, AttemptState]]:
        """The open attempts a runner is running now (:attr:`AttemptState.live`): none
        while the season is :attr:`stopped`."""
        return [(h, a) for h, a in self.open_attempts() if not a.cut_off]

    def _cut_off_open_attempts(self) -> None:
        for _h, a in self.open_attempts():
            a.cut_off = True

    @property
    def current_round(self) -> RoundState | None:
        return self.rounds[max(self.rounds)] if self.rounds else None


def _err(rec: se.SeasonRecord, msg: str) -> SeasonStateError:
    return SeasonStateError(f"season.jsonl record {rec.sequence} ({rec.event.kind}): {msg}")


def apply_season_record(state: SeasonState, rec: se.SeasonRecord) -> None:
    """Apply one record to ``state`` in place (raises :class:`SeasonStateError`)."""
    e: Any = rec.event
    state.last_sequence = rec.sequence
    if state.info is None and e.kind != "season_started":
        raise _err(rec, "the first season event must be season_started")
    if e.kind == "season_started":
        if state.info is not None:
            raise _err(rec, "season already started")
        state.info = e
        return
    if e.kind == "season_resumed":
        state.resumes += 1
        state.stopped = None
        if e.rules_changed:
            state.rules_changed.append((state.resumes, list(e.rules_changed)))
        state._cut_off_open_attempts()  # a runner killed without season_stopped left them
        return
    if e.kind == "season_stopped":
        if state.finished is not None:
            raise _err(rec, "season already finished")
        state.stops.append(e)
        state.stopped = e
        state._cut_off_open_attempts()
        return
    if e.kind == "stale_territories_cleaned":
        state.cleaned += list(e.territories)
        return
    if e.kind == "round_scheduled":
        expected = (max(state.rounds) + 1) if state.rounds else 1
        if e.round != expected:
            raise _err(rec, f"round {e.round} scheduled but round {expected} was expected")
        if state.rounds and not state.rounds[expected - 1].done:
            raise _err(rec, f"round {e.round} scheduled before round {expected - 1} finished")
        placed = [x for h in e.heats for x in h.seats if x is not None] + list(e.byes)
        dup = {x for x in placed if placed.count(x) > 1}
        if dup:
            raise _err(rec, f"entrant {sorted(dup)[0]!r} scheduled twice in round {e.round}")
        unknown = set(placed) - set(state.entrants)
        if unknown:
            raise _err(rec, f"unknown entrant {sorted(unknown)[0]!r}")
        arena = e.arena or state.info.arena_id
        if e.arena is not None and state.arena(e.arena) is None:
            raise _err(rec, f"round {e.round} races arena {e.arena!r}, which is not one of the season's arenas")
        heats = {h.heat: HeatState(e.round, h.heat, tuple(h.seats), arena=arena) for h in e.heats}
        state.rounds[e.round] = RoundState(e.round, heats, tuple(e.byes), e.final, arena=arena)
        return
    if e.kind == "season_finished":
        state.finished = e
        return
    if e.kind == "heats_reopened":
        for r, h in e.heats:
            heat = state.rounds[r].heats.get(h) if r in state.rounds else None
            if heat is None:
                raise _err(rec, f"reopens r{r}h{h}, which was never scheduled")
            if heat.result is None or not heat.result.void:
                raise _err(rec, f"reopens r{r}h{h}, which is not a void heat")
            heat.result = None
            heat.attempt_base = heat.next_attempt_number() - 1
            heat.reopened += 1
            state.finish_order.remove(heat.key)
            state.rounds[r].finished = None
        state.finished = None
        state.max_attempts = e.max_attempts
        return
    rnd = state.rounds.get(e.round)
    if rnd is None:
        raise _err(rec, f"round {e.round} was never scheduled")
    if e.kind == "round_finished":
        if not rnd.done:
            raise _err(rec, f"round {e.round} finished with heats still open")
        rnd.finished = e
        return
    heat = rnd.heats.get(e.heat)
    if heat is None:
        raise _err(rec, f"round {e.round} has no heat {e.heat}")
    if e.kind == "attempt_started":
        if heat.result is not None:
            raise _err(rec, f"heat r{e.round}h{e.heat} is already finished")
        if any(a.status == "running" for a in heat.attempts):
            raise _err(rec, f"heat r{e.round}h{e.heat} already has a running attempt")
        if e.attempt != heat.next_attempt_number():
            raise _err(rec, f"attempt {e.attempt} but attempt {heat.next_attempt_number()} was expected")
        heat.attempts.append(AttemptState(e.attempt, e.folder))
        return
    att = next((a for a in heat.attempts if a.attempt == e.attempt and a.status == "running"), None)
    if e.kind == "attempt_placed":
        if att is None:
            raise _err(rec, f"attempt {e.attempt} of r{e.round}h{e.heat} is not running")
        att.node = e.node
        att.node_code, att.node_image = e.code_revision, e.image_digest
        return
    if e.kind == "attempt_interrupted":
        if att is None:
            raise _err(rec, f"attempt {e.attempt} of r{e.round}h{e.heat} is not running")
        att.status = "interrupted"
        if e.renamed_to is not None:  # None: killed before the attempt had a folder
            att.interrupted_as.append(e.renamed_to)
        return
    if e.kind == "attempt_finished":
        if att is None:
            raise _err(rec, f"attempt {e.attempt} of r{e.round}h{e.heat} is not running")
        att.status = "finished"
        att.finished = e
        return
    if e.kind == "heat_finished":
        if heat.result is not None:
            raise _err(rec, f"heat r{e.round}h{e.heat} finished twice")
        if e.attempt is not None and not any(a.attempt == e.attempt and a.status == "finished" for a in heat.attempts):
            raise _err(rec, f"heat r{e.round}h{e.heat} counts attempt {e.attempt}, which never finished")
        heat.result = e
        state.finish_order.append(heat.key)
        return
    raise _err(rec, f"unhandled kind {e.kind}")  # pragma: no cover


def reduce_season(
    records: Sequence[se.SeasonRecord],
    worlds: Mapping[tuple[int, int, int], WorldState] | None = None,
) -> SeasonState:
    """Fold ``records`` into a :class:`SeasonState`.

    ``worlds`` maps ``(round, heat, attempt)`` to that attempt's final world (from its
    ``world.json``); each is attached to the matching finished attempt (``.world``) for
    views that want more than the season log holds. Raises :class:`SeasonStateError`.
    """
    state = SeasonState()
    for rec in records:
        apply_season_record(state, rec)
    for (r, h, a), world in (worlds or {}).items():
        heat = state.rounds.get(r, RoundState(r, {})).heats.get(h)
        if heat is None:
            continue
        for att in heat.attempts:
            if att.attempt == a and att.status == "finished":
                att.world = world
    return state
