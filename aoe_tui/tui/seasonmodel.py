"""Season view-models: pure Python, no Textual. The season and standings screens
render these; both live (``aoe run``) and watched (``aoe watch``) seasons feed them the
same ``season.jsonl`` records (:mod:`aoe_tui.domain.season_events`), applied one at a
time with :func:`aoe_tui.replay.season_reducer.apply_season_record`.

Attempt states shown in the bracket (derived, never stored):

==============  ===================================================================
``scheduled``   the heat has no attempt yet
``provisioning``an attempt started; its event log has no record yet (territories booting)
``racing``      its event log is open and the match is not finished
``finishing``   the match finished; drain, teardown and artifacts are in progress
``finished``    the attempt counted (its result is the heat's result)
``retried``     spoiled by the infrastructure; the heat is re-run as attempt N+1
``void``        spoiled with no attempts left; the heat counts for nobody
``interrupted`` its runner stopped (``season_stopped``) or was killed while it ran
                (:attr:`~aoe_tui.replay.season_reducer.AttemptState.cut_off`); the
                resume renames its folder ``*.interrupted-K`` and re-runs it
==============  ===================================================================

A season waiting on a void heat (a knockout decides nothing from it:
:func:`aoe_tui.season.season_standings.waiting_heats`) shows that heat's winner as
``waiting``, its entrants' standings rows ``(waiting)`` and, once the runner logged it
(``season_stopped`` reason ``void_heat``), ``WAITING on heat r1h2 (void)`` and ``aoe run
--retry-void re-runs it`` in the status line.

A stopped season (``SeasonState.stopped``: a ``season_stopped`` not yet followed by a
``season_resumed``) runs nothing: its clock stands still at the stop, the status line says
``STOPPED`` and how to resume, and the attempts the stop cut off show ``interrupted``, not
running (no ▶). A resume (``season_resumed``) starts the clock again from where it stood.

Cups across arenas (``SeasonState.multi_arena``): the title names the arenas
(:meth:`SeasonModel.header` shortens it to a width), each round row of the bracket names
the arena its heats race, :meth:`SeasonModel.heat_arena` gives a heat's arena for the heat
screen's header, and :func:`arena_rows` lays out the standings' per-arena breakdown. A
season of one arena shows none of these (its screens are what they were).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from aoe_tui.domain import season_events as se
from aoe_tui.replay.season_log import SeasonClock
from aoe_tui.replay.season_reducer import AttemptState, HeatState, SeasonState, apply_season_record
from aoe_tui.season.season_standings import ArenaBreakdown, SeasonStanding, season_standings, waiting_heats
from aoe_tui.domain.display import fmt_clock, fmt_cost, fmt_tokens, short_line, summarize_season_event
from aoe_tui.tui.viewmodel import HeatModel, read_age_s

LOG_LIMIT = 200
#: below this terminal width the season screen uses its compact forms
NARROW_WIDTH = 100

#: ``clock(folder, model) -> ms``: the clock shown for a running heat (the app's ticking clock)
HeatClock = Callable[[str, HeatModel], int]


@dataclass(frozen=True)
class BracketRow:
    """One bracket table row.

    ``key`` is unique and stable (``r1``, ``r1h2``, ``r1h2a1#0``); ``folder`` is the attempt
    folder (relative to the season folder) that ``enter`` opens — for a heat row its
    counted attempt, else its latest one; ``running`` marks rows to highlight.
    """

    key: str
    kind: str
    label: str
    state: str
    entrants: str
    winner: str
    time: str
    folder: str | None = None
    running: bool = False


def attempt_state(att: AttemptState, heats: Mapping[str, HeatModel]) -> str:
    """The display state of one attempt (see the module table): an open attempt a stop
    or a killed runner cut off is ``interrupted``, whatever its event log says."""
    if att.shown_status == "interrupted":
        return "interrupted"
    if att.status == "finished":
        outcome = att.finished.outcome if att.finished else "counted"
        return {"counted": "finished", "retry": "retried", "void": "void"}.get(outcome, outcome)
    model = heats.get(att.folder)
    if model is None or model.applied == 0:
        return "provisioning"
    if model.world.match_state.value in ("finished", "aborted"):
        return "finishing"
    return "racing"


def stopped_label(reason: str, stop: se.SeasonStopped | None = None) -> str:
    """How the status line names a stop by its ``season_stopped.reason``: ``STOPPED by
    SIGINT`` (a signal), ``STOPPED from the TUI`` (``quit``: its stop choice), ``STOPPED:
    disk full``, ``WAITING on heat r1h2 (void)`` (``void_heat``, the heat from ``stop``),
    else ``STOPPED (reason)``."""
    if reason == "void_heat":
        at = f" on heat r{stop.round}h{stop.heat}" if stop is not None and stop.round is not None else ""
        return f"WAITING{at} (void)"
    if reason.startswith("SIG"):
        return f"STOPPED by {reason}"
    return {"quit": "STOPPED from the TUI", "disk_full": "STOPPED: disk full"}.get(reason, f"STOPPED ({reason})")


def _attempt_folder(att: AttemptState) -> str | None:
    """The folder holding attempt ``att`` now: an interrupted one's ``*.interrupted-K``, None
    when it was interrupted before it had a folder (``renamed_to`` null: ``att.folder`` is
    then the re-run's, not its own)."""
    if att.status != "interrupted":
        return att.folder
    return att.interrupted_as[-1] if att.interrupted_as else None


class SeasonModel:
    """Incrementally reduced season (``state``) plus a short log of what happened.

    ``apply(record)`` is O(1) for most records; ``version`` grows with each record.
    ``first_ms`` / ``last_ms`` are the Unix ms of the first / latest record. ``log`` holds
    the last :data:`LOG_LIMIT` season events as lines stamped with the season clock at
    their record (so a resume's line carries its stop's time, not the stopped gap).

    The season clock counts running time only (so ``aoe run``'s TUI, ``aoe watch`` and SSH
    spectators show the same clock): a run session starts at ``season_started`` or
    ``season_resumed`` and ends at the last record written before the next
    ``season_resumed`` — for a stopped session that is its ``season_stopped`` — so the time
    between a stop and the resume is not counted. At a record the clock is the record's own
    (``season_clock_ms``, which the runner measures on the monotonic clock;
    :class:`~aoe_tui.replay.season_log.SeasonClock`, with the wall-clock rule for older
    logs). Between records a running clock moves on the **monotonic** clock from when the
    record was seen (:meth:`seen`): a wall-clock step neither freezes nor jumps it; only
    the age of the latest record when the view joins (a spectator joining late) is read
    from the wall clock as is (never below 0); later, only an age in
    ``[0, LATE_READ_MAX_S]`` counts (a larger or negative one is a wall-clock step). While the season is stopped (or finished) the clock stands
    at its last record; after a resume it goes on from there, never back. (A runner killed
    without ``season_stopped`` writes nothing: its session is seen to end only when the
    resume comes, and the clock, which ran on meanwhile, then steps back to that session's
    last record.) ``at_ms`` is the season clock at the latest record.
    """

    def __init__(self) -> None:
        self.state = SeasonState()
        self.version = 0
        self.first_ms: int | None = None
        self.last_ms: int | None = None
        self._clock = SeasonClock()
        #: the season clock (ms) at the latest record
        self.at_ms = 0
        #: monotonic time (s) at which the latest record was written, as seen (None: not seen)
        self._anchor_mono: float | None = None
        #: the wall-clock age of a record was read (:meth:`seen`: once, when the view joins)
        self._joined = False
        self.log: deque[str] = deque(maxlen=LOG_LIMIT)
        self._standings: tuple[int, list[SeasonStanding]] | None = None
        self._waiting: tuple[int, set[tuple[int, int]]] | None = None

    def apply(self, record: se.SeasonRecord) -> None:
        """Apply one record (sequence order); raises ``SeasonStateError`` on an inconsistent log."""
        apply_season_record(self.state, record)
        self.version += 1
        t = record.time_unix_ms
        if self.first_ms is None:
            self.first_ms = t
        self.last_ms = t
        self.at_ms = self._clock.fold(record)
        self._anchor_mono = None
        line = summarize_season_event(record.event, multi_arena=self.state.multi_arena)
        if line:  # stamped with the season clock at the record, as the status line shows it
            self.log.append(f"{fmt_clock(self.at_ms)}  {line}")

    def seen(self, now_ms: int, now_mono: float) -> None:
        """Note that the records applied so far were seen at wall time ``now_ms`` (Unix ms)
        and monotonic time ``now_mono`` (s): from then the running clock moves on the
        monotonic clock. The latest record's age (``now_ms`` minus its ``time_unix_ms``,
        never below 0) is taken as is at the first call with records (the view joining),
        after that only when plausible (:func:`~aoe_tui.tui.viewmodel.read_age_s`: within
        ``[0, LATE_READ_MAX_S]``, else 0), so a wall-clock step between a write and the read
        neither jumps nor freezes the clock. Call it after each batch of :meth:`apply`."""
        if self.last_ms is not None and self._anchor_mono is None:
            age_s = read_age_s((int(now_ms) - self.last_ms) / 1000, self._joined)
            self._joined = True
            self._anchor_mono = now_mono - age_s

    # ------------------------------------------------------------------ views

    @property
    def title(self) -> str:
        """``season · label · format · arena · entrants`` (a cup across arenas: ``N arenas:
        id, id, …``) or a placeholder before ``season_started``."""
        return self.header()

    def header(self, width: int | None = None) -> str:
        """:attr:`title` fitted to ``width`` characters (None = unlimited). A cup across
        arenas drops the ``season`` word, then lists fewer arena ids (``first-build, +4``),
        then only their count, then the format and entrants; a one-arena title is never
        shortened (the screen cuts it)."""
        info = self.state.info
        if info is None:
            return "waiting for season.jsonl…"
        fmt = info.format.get("kind", "?") if isinstance(info.format, dict) else "?"
        entrants = f"{len(info.entrants)} entrants"
        if not self.state.multi_arena:
            return f"season {info.season} · {info.label} · {fmt} · arena {info.arena_id} · {entrants}"
        ids = [a.id for a in self.state.arenas]
        lead = f"{info.season} · {info.label} · {fmt} · {len(ids)} arenas"
        lines = [f"season {lead}: {', '.join(ids)} · {entrants}", f"{lead}: {', '.join(ids)} · {entrants}"]
        lines += [f"{lead}: {', '.join(ids[:k])}, +{len(ids) - k} · {entrants}" for k in range(len(ids) - 1, 0, -1)]
        lines += [f"{lead} · {entrants}", f"{info.season} · {info.label} · {len(ids)} arenas"]
        return next((line for line in lines if width is None or len(line) <= width), lines[-1])

    def heat_arena(self, folder: str) -> str | None:
        """The arena id the heat of attempt ``folder`` races, in a cup across arenas (None
        for a one-arena season or a folder of no scheduled round)."""
        key = folder_key(folder)
        rnd = self.state.rounds.get(key[0]) if key else None
        return rnd.arena if rnd is not None and self.state.multi_arena else None

    @property
    def clock_frozen(self) -> bool:
        """True when the season clock stands still: the season finished or is stopped."""
        return self.state.finished is not None or self.state.stopped is not None

    def clock_ms(self, now_ms: int, now_mono: float | None = None) -> int:
        """Season clock (ms): the running time of all run sessions (see the class docstring).
        Finished or stopped (:attr:`clock_frozen`): the clock at the last record. Else that
        plus the monotonic time since the record was written, as :meth:`seen` at ``now_mono``
        (s); without ``now_mono`` or before :meth:`seen`, the wall time since it (``now_ms``,
        Unix ms; never below 0)."""
        if self.last_ms is None:
            return 0
        if self.clock_frozen:
            return self.at_ms
        if now_mono is not None and self._anchor_mono is not None:
            return self.at_ms + max(0, int((now_mono - self._anchor_mono) * 1000))
        return self.at_ms + max(0, int(now_ms) - self.last_ms)

    def progress(self) -> tuple[int, int]:
        """(heats finished, heats scheduled so far)."""
        heats = self.state.heats()
        return sum(1 for h in heats if h.result is not None), len(heats)

    def running_folders(self) -> list[str]:
        """Attempt folders currently running (started, not finished, not cut off by a stop
        or a killed runner: :meth:`SeasonState.running_attempts`)."""
        return [a.folder for _, a in self.state.running_attempts()]

    def status_line(self, now_ms: int, heats: Mapping[str, HeatModel], width: int | None = None,
                    now_mono: float | None = None) -> str:
        """``clock · [FINISHED · champion X ·] round · heats done/total · running states``;
        a stopped season: ``clock · STOPPED by SIGINT · round · heats done/total · the same
        aoe run resumes it`` (:func:`stopped_label`; no running states: nothing runs).

        ``width`` (characters available; None = unlimited): when the line does not fit,
        labels are shortened first (``r2``, ``2/4 heats``, ``1 prov``), then the least
        important parts dropped (running states, then the round; a stopped season: the
        round, then the resume hint); the clock and the champion or ``STOPPED`` always
        come first.
        """
        done, total = self.progress()
        st = self.state
        running = st.running_attempts()
        states = [attempt_state(a, heats) for _, a in running]
        counts = [(x, states.count(x)) for x in ("provisioning", "racing", "finishing") if states.count(x)]
        cur = st.current_round
        champ = None
        if st.finished is not None:
            champ = "FINISHED · champion " + (", ".join(st.finished.champions) or "none")
        short_names = {"provisioning": "prov", "racing": "racing", "finishing": "fin"}
        stop = st.stopped
        disk = stop is not None and stop.reason == "disk_full"
        void = stop is not None and stop.reason == "void_heat"

        def build(level: int) -> str:
            compact = level >= 1
            parts = [f"{'' if compact else 'clock '}{fmt_clock(self.clock_ms(now_ms, now_mono))}"]
            if champ:
                parts.append(champ if not compact else "FINISHED · ★ " + champ.split("champion ", 1)[1])
            if stop is not None:
                parts.append(stopped_label(stop.reason, stop))
            if cur is not None and level < (2 if stop is not None else 3):
                final = (" final" if compact else " (final)") if cur.final else ""
                parts.append(f"r{cur.round}{final}" if compact else f"round {cur.round}{final}")
            parts.append(f"{done}/{total} heats" if compact else f"heats {done}/{total} finished")
            if counts and level < 2:
                parts.append(", ".join(f"{n} {short_names[x] if compact else x}" for x, n in counts))
            if stop is not None and level < 3:
                hint = "the same aoe run resumes it" if not compact else "same aoe run resumes"
                if void:
                    hint = "aoe run --retry-void re-runs it" if not compact else "--retry-void re-runs it"
                parts.append(f"free space, then {hint}" if disk and not compact else hint)
            return " · ".join(parts)

        line = build(0)
        for level in range(1, 4):
            if width is None or len(line) <= width:
                break
            line = build(level)
        return line

    def rows(self, heats: Mapping[str, HeatModel], clock: HeatClock | None = None,
             narrow: bool = False) -> list[BracketRow]:
        """The bracket: per round a header row, its heats, each heat's attempts, then byes.
        A round row's state is ``finished``, ``closing`` (every heat done), ``racing``, or
        ``stopped`` while the season is stopped.

        ``clock`` gives a running heat's time (default: its last ``elapsed_ms``);
        ``narrow`` shows a leader as ``▲name`` instead of ``(name leads)`` and, in a cup
        across arenas, a round's arena as ``id`` instead of ``arena id``.
        """
        out: list[BracketRow] = []
        multi = self.state.multi_arena
        for r in self.state.rounds.values():
            done = sum(1 for h in r.heats.values() if h.result is not None)
            label = f"Round {r.round}" + (" · final" if r.final else "")
            state = "finished" if r.finished is not None else ("closing" if done == len(r.heats) else
                                                                 "stopped" if self.state.stopped else "racing")
            extra = ""
            if r.finished is not None and (r.finished.advanced or r.finished.eliminated):
                extra = "advanced: " + ", ".join(r.finished.advanced)
            if multi:  # a cup across arenas: the round row names the arena of its heats
                extra = " · ".join(x for x in (r.arena if narrow else f"arena {r.arena}", extra) if x)
            out.append(BracketRow(f"r{r.round}", "round", label, state, extra, "", f"{done}/{len(r.heats)}"))
            for h in r.heats.values():
                out.extend(self._heat_rows(h, heats, clock, narrow))
            if r.byes:
                out.append(BracketRow(f"r{r.round}bye", "bye", "  byes", "bye", ", ".join(r.byes), "", ""))
        return out

    def _heat_rows(self, h: HeatState, heats: Mapping[str, HeatModel], clock: HeatClock | None = None,
                   narrow: bool = False) -> list[BracketRow]:
        rows = []
        att_states = [attempt_state(a, heats) for a in h.attempts]
        running = h.result is None and any(a.live for a in h.attempts)
        if h.result is not None:
            state = "void" if h.result.void else "finished"
            winner = "—" if h.result.void else (h.result.winner or "tie")
            if h.result.void and h.key in self.waiting():  # nobody goes on or out from it yet
                winner = "waiting"
            counted = h.counted
            time = fmt_clock(counted.finished.elapsed_ms) if counted and counted.finished else ""
            folder = counted.folder if counted else (h.attempts[-1].folder if h.attempts else None)
        elif running:
            i = max(i for i, a in enumerate(h.attempts) if a.live)
            state = att_states[i]
            model = heats.get(h.attempts[i].folder)
            leader = model.leader() if model is not None and model.applied else None
            who = model.world.territories[leader].agent if leader and leader in model.world.territories else None
            if leader:
                winner = f"▲{who or leader}" if narrow else f"({who or leader} leads)"
            else:
                winner = ""
            if model is not None and model.applied:
                ms = clock(h.attempts[i].folder, model) if clock is not None else model.world.elapsed_ms
                time = fmt_clock(ms)
            else:
                time = ""
            folder = h.attempts[i].folder
        else:
            state = "scheduled" if not h.attempts else att_states[-1]
            winner, time = "", ""
            folder = _attempt_folder(h.attempts[-1]) if h.attempts else None
        rows.append(BracketRow(f"r{h.round}h{h.heat}", "heat", f"  heat {h.heat}", state,
                               " vs ".join(h.entrants), winner, time, folder, running))
        if h.attempts:
            for i, (a, s) in enumerate(zip(h.attempts, att_states)):
                detail = ""
                if a.finished is not None and a.finished.outcome != "counted":
                    detail = f"{a.finished.failure_source or '?'}: {short_line(a.finished.detail.splitlines()[0]) if a.finished.detail else ''}"
                elif a.status == "interrupted":
                    kept = _attempt_folder(a)
                    detail = f"kept as {kept}" if kept else "it had no folder yet"
                elif a.cut_off:  # not renamed yet: the resume does that, then re-runs it
                    detail = "cut off by the stop; the resume re-runs it" if self.state.stopped else "cut off"
                t = fmt_clock(a.finished.elapsed_ms) if a.finished is not None and a.finished.elapsed_ms else ""
                w = (a.finished.winner or "") if a.finished is not None and a.finished.outcome == "counted" else ""
                if a.node:  # the worker node of a heat on a cluster, in the wide detail column (the
                    # 13-column Heat column cut "attempt 1 @NODE" to "attempt 1 ")
                    detail = f"on {a.node}" + (f" · {detail}" if detail else "")
                rows.append(BracketRow(f"r{h.round}h{h.heat}a{a.attempt}#{i}", "attempt", f"    attempt {a.attempt}", s,
                                       detail, w, t, _attempt_folder(a), a.live))
        return rows

    def waiting(self) -> set[tuple[int, int]]:
        """``(round, heat)`` of the void heats the season waits on
        (:func:`aoe_tui.season.season_standings.waiting_heats`), cached per version."""
        if self._waiting is None or self._waiting[0] != self.version:
            self._waiting = (self.version, {h.key for h in waiting_heats(self.state)})
        return self._waiting[1]

    def standings(self) -> list[SeasonStanding]:
        """Season standings (:func:`aoe_tui.season.season_standings.season_standings`), cached per version."""
        if self._standings is None or self._standings[0] != self.version:
            self._standings = (self.version, season_standings(self.state) if self.state.info else [])
        return self._standings[1]


# --------------------------------------------------------------------------- standings

#: sort key name → (column label, key function, descending by default)
SORTS: dict[str, tuple[str, object, bool]] = {
    "rank": ("#", lambda r: r.rank, False),
    "points": ("Points", lambda r: r.points, True),
    "wins": ("Wins", lambda r: r.wins, True),
    "durable": ("Durable", lambda r: r.durable, True),
    "median": ("Median", lambda r: (r.median_durable_ms is None, r.median_durable_ms or 0), False),
    "tokens": ("Tokens", lambda r: (r.input_tokens is None, -((r.input_tokens or 0) + (r.output_tokens or 0))), False),
    "cost": ("Cost", lambda r: (r.cost_microusd is None, r.cost_microusd or 0), False),
    "rating": ("Rating", lambda r: r.ordinal, True),
}

STANDINGS_COLUMNS = ("#", "Entrant", "Points", "Wins", "Durable", "Rating μ±σ", "Median", "Tokens in/out",
                     "Cache r/w", "Cost", "Cost by", "Heats", "Infra", "Byes")

#: how the ``Cost by`` column names :attr:`SeasonStanding.cost_source`
COST_BY = {"price table": "table", "adapter": "adapter", "mixed": "mixed", None: "—"}


def sort_standings(rows: list[SeasonStanding], key: str, reverse: bool = False) -> list[SeasonStanding]:
    """Rows sorted by ``key`` (a :data:`SORTS` name); ties keep the official rank order.
    ``reverse`` flips the key's natural direction. Unknown values (None) always sort last."""
    _label, fn, desc = SORTS[key]
    base = sorted(rows, key=lambda r: (r.rank, r.entrant))
    if key in ("median", "tokens", "cost"):
        known = [r for r in base if fn(r)[0] is False]  # type: ignore[operator,index]
        unknown = [r for r in base if fn(r)[0] is True]  # type: ignore[operator,index]
        known.sort(key=fn, reverse=reverse)  # type: ignore[arg-type]
        return known + unknown
    return sorted(base, key=fn, reverse=desc != reverse)  # type: ignore[arg-type]


def standings_cells(r: SeasonStanding) -> tuple[str, ...]:
    """Display cells of one standings row, in :data:`STANDINGS_COLUMNS` order (n/a = unknown):
    tokens in/out and cache read/write (tokens), cost (from µUSD; "spent / limit" when the season
    has a cost limit per entrant), who computed it
    (:data:`COST_BY`), heats and infrastructure-spoiled attempts; an entrant of a void heat the
    season waits on is marked ``(waiting)``."""
    tokens = "n/a" if r.input_tokens is None else f"{fmt_tokens(r.input_tokens)}/{fmt_tokens(r.output_tokens)}"
    cache = ("n/a" if r.cache_read_tokens is None or r.cache_write_tokens is None
             else f"{fmt_tokens(r.cache_read_tokens)}/{fmt_tokens(r.cache_write_tokens)}")
    return (str(r.rank), r.entrant + (" ★" if r.champion else "") + (" (waiting)" if r.waiting else ""), str(r.points), str(r.wins), str(r.durable),
            f"{r.mu:.1f}±{r.sigma:.1f}", fmt_clock(r.median_durable_ms) if r.median_durable_ms is not None else "—",
            tokens, cache,
            fmt_cost(r.cost_microusd) + (f" / {fmt_cost(r.cost_limit_microusd)}" if r.cost_limit_microusd else ""),
            COST_BY.get(r.cost_source, str(r.cost_source)), str(r.heats),
            str(r.infra_failures), str(r.byes))


#: per-arena breakdown columns of the standings screen (``a``), one row per entrant and arena
ARENA_COLUMNS = ("#", "Entrant", "Arena", "Heats", "Wins", "Durable", "Coverage", "Median", "Tokens in/out", "Cost",
                 "Cost/durable")
#: the same below :data:`ARENA_FULL_WIDTH` columns: rank, tokens and cost per durable left
#: out, so that an 80-column terminal shows the cost
ARENA_COLUMNS_NARROW = ("Entrant", "Arena", "Heats", "Wins", "Durable", "Coverage", "Median", "Cost")
#: terminal width from which the breakdown shows all of :data:`ARENA_COLUMNS` (they need
#: about 115 columns with the longest arena ids)
ARENA_FULL_WIDTH = 120


def arena_cells(r: SeasonStanding, b: ArenaBreakdown, first: bool) -> tuple[str, ...]:
    """Display cells of entrant ``r`` on one arena (:data:`ARENA_COLUMNS` order): rank and
    entrant only on the entrant's ``first`` row; ``—`` where the entrant raced no heat
    there, ``n/a`` where usage was not reported in every heat there."""
    who = (str(r.rank), r.entrant + (" ★" if r.champion else "")) if first else ("", "")
    if b.heats == 0:
        return who + (b.arena, "0", "0", "0", "—", "—", "—", "—", "—")
    tokens = "n/a" if b.input_tokens is None else f"{fmt_tokens(b.input_tokens)}/{fmt_tokens(b.output_tokens)}"
    return who + (b.arena, str(b.heats), str(b.wins), str(b.durable), f"{b.coverage:.0%}",
                  fmt_clock(b.median_durable_ms) if b.median_durable_ms is not None else "—", tokens,
                  fmt_cost(b.cost_microusd), fmt_cost(b.cost_per_durable_microusd) if b.durable else "—")


def arena_rows(rows: list[SeasonStanding], arena_ids: list[str], columns: tuple[str, ...] = ARENA_COLUMNS,
               ) -> list[tuple[str, SeasonStanding, tuple[str, ...]]]:
    """The per-arena breakdown: for each standings row (in the given order) one
    ``(key, row, cells)`` per arena of ``arena_ids`` (season order), cells of ``columns``
    (:data:`ARENA_COLUMNS` or a subset); ``key`` is ``entrant/arena``."""
    out = []
    for r in rows:
        shown = [a for a in arena_ids if a in r.arenas]
        for i, a in enumerate(shown):
            cells = dict(zip(ARENA_COLUMNS, arena_cells(r, r.arenas[a], first=i == 0)))
            out.append((f"{r.entrant}/{a}", r, tuple(cells[c] for c in columns)))
    return out


def folder_key(folder: str) -> tuple[int, int, int] | None:
    """``(round, heat, attempt)`` of an attempt folder ``round-R/heat-H/attempt-A[.interrupted-K]``
    (None for another name)."""
    try:
        r, h, a = (int(p.split("-")[1].split(".")[0]) for p in folder.split("/")[:3])
    except (ValueError, IndexError):
        return None
    return r, h, a


def attempt_title(info: se.SeasonStarted | None, folder: str) -> str:
    """``season · label · round R heat H · attempt A`` for an attempt folder (as the runner names heats)."""
    key = folder_key(folder)
    where = f"round {key[0]} heat {key[1]} · attempt {key[2]}" if key else folder
    if ".interrupted-" in folder:
        where += " (interrupted)"
    return f"{info.season} · {info.label} · {where}" if info else where
