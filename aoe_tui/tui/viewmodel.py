"""View-models for the TUI: pure Python, no Textual, no I/O.

The screens render **reduced state only**. A :class:`HeatModel` owns one
:class:`~aoe_tui.domain.world.WorldState` and advances it one record at a time
with :func:`aoe_tui.replay.reducer.apply_event` (upstream §2.4) — never by
re-reducing from scratch per frame. Next to the upstream-shaped world it keeps a
few display-only facts that the world does not hold and must not hold:

* per-milestone first-pass times (``elapsed_ms`` of the ``milestone_passed``
  record, ms), failure counts and whether a non-null usage value was ever seen
  (so tokens/cost show ``n/a`` instead of a misleading zero);
* the event feed: one line per meaningful event (§8.2 style summaries), healthy
  conquest ticks and verifier starts dropped, and repeated identical
  ``milestone_failed`` lines collapsed into ``failed ×N: detail``.

:func:`panel_view` turns the model into a :class:`PanelView` per territory; the
widgets only format those.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from aoe_tui.domain.display import fmt_clock, sanitize_line, short_line, summarize_event
from aoe_tui.domain.events import EventRecord
from aoe_tui.domain.world import WorldState
from aoe_tui.replay.reducer import apply_event
from aoe_tui.replay.standings import compute_standings, winner_of

#: ``activity(agent_id) -> lines`` (newest last). Live: the referee seat's
#: ``AgentRun.activity`` deque; replay of a folder without ``activity.jsonl``:
#: ``agents/<id>/activity.log``. (``aoe watch`` and replays of a folder with an
#: ``activity.jsonl`` feed :meth:`HeatModel.apply_activity` instead.)
ActivitySource = Callable[[str], Sequence[str]]

#: activity lines a :class:`HeatModel` keeps per agent (the panels show the last few)
ACTIVITY_KEEP = 50

FEED_LIMIT = 400
#: a live heat clock runs on at most this long past the last event received (ms)
LIVE_CLOCK_CAP_MS = 15 * 60 * 1000
#: once a view has joined, records are read within moments of their write (the tailer polls
#: every 0.25 s); a later batch whose wall-clock age (now minus its write time) is negative or
#: above this (s) was read across a wall-clock step: it counts from its arrival instead
LATE_READ_MAX_S = 5.0


def read_age_s(age_s: float, joined: bool) -> float:
    """The age (s) a live view counts a batch of records from: the wall-clock ``age_s``
    (now minus the batch's write time) as is when the view joins (``joined`` False; never
    below 0); after that only within ``[0, LATE_READ_MAX_S]``, else 0 (a wall-clock step
    between the write and the read neither jumps nor freezes a running clock)."""
    if not joined:
        return max(0.0, age_s)
    return age_s if 0.0 <= age_s <= LATE_READ_MAX_S else 0.0


# --------------------------------------------------------------------------- arena


@dataclass(frozen=True)
class AgentMeta:
    """Manifest facts about one agent (§1.11): ids, adapter, model, reasoning effort, and its
    ``budget.max_cost_microusd`` (µUSD; the live cost limit of issue 27, ``None``: no limit)."""

    id: str
    territory: str | None = None
    adapter: str | None = None
    model: str | None = None
    reasoning_effort: str | None = None
    max_cost_microusd: int | None = None


@dataclass(frozen=True)
class MilestoneMeta:
    """One ``[[build.milestones]]`` entry (§1.6): id, display name, points."""

    id: str
    display_name: str | None = None
    points: int | None = None


@dataclass(frozen=True)
class ArenaView:
    """What the panels need from ``arena.json`` (§1, §2.7); every field optional.

    Built by :meth:`from_arena` from the manifest dict (``LoadedMatch.arena``);
    ``ArenaView()`` (no manifest) makes the ladder list only evaluated milestones.
    """

    name: str | None = None
    mode: str | None = None
    duration_s: int | None = None
    milestones: tuple[MilestoneMeta, ...] = ()
    completion: str | None = None
    agents: Mapping[str, AgentMeta] = field(default_factory=dict)
    territories: tuple[str, ...] = ()

    @classmethod
    def from_arena(cls, arena: Mapping[str, Any] | None) -> ArenaView:
        """Parse leniently (older files miss keys); never raises on odd shapes."""
        if not isinstance(arena, Mapping):
            return cls()
        head = arena.get("arena") if isinstance(arena.get("arena"), Mapping) else {}
        build = arena.get("build") if isinstance(arena.get("build"), Mapping) else {}
        rules = arena.get("rules") if isinstance(arena.get("rules"), Mapping) else {}
        ms = []
        for m in build.get("milestones") or []:
            if isinstance(m, Mapping) and isinstance(m.get("id"), str):
                ms.append(MilestoneMeta(m["id"], m.get("display_name"), m.get("points")))
        agents = {}
        for a in arena.get("agents") or []:
            if isinstance(a, Mapping) and isinstance(a.get("id"), str):
                budget = a.get("budget") if isinstance(a.get("budget"), Mapping) else {}
                limit = budget.get("max_cost_microusd")
                agents[a["id"]] = AgentMeta(
                    a["id"], a.get("territory"), a.get("adapter"), a.get("model"), a.get("reasoning_effort"),
                    limit if isinstance(limit, int) and not isinstance(limit, bool) else None,
                )
        terrs = tuple(
            t["id"] for t in arena.get("territories") or [] if isinstance(t, Mapping) and isinstance(t.get("id"), str)
        )
        return cls(
            name=head.get("display_name") or head.get("id"),
            mode=head.get("mode"),
            duration_s=rules.get("duration_seconds"),
            milestones=tuple(ms),
            completion=build.get("completion_milestone"),
            agents=agents,
            territories=terrs,
        )


# --------------------------------------------------------------------------- feed


@dataclass
class FeedEntry:
    """One feed line: clock (ms) and sequence of its **latest** occurrence, text, count."""

    elapsed_ms: int
    sequence: int
    text: str
    count: int = 1
    style: str = ""
    key: tuple | None = None
    territory: str | None = None

    def render_text(self) -> str:
        """``MM:SS  #seq text`` with ``×N`` folded into repeated failures."""
        return f"{fmt_clock(self.elapsed_ms)}  #{self.sequence:<4} {self.text}"


# --------------------------------------------------------------------------- model


@dataclass
class _UsageSeen:
    tokens: bool = False
    cost: bool = False


class HeatModel:
    """Incrementally reduced state of one heat plus display-only derived facts.

    ``apply(record)`` is O(1) per record (the reducer plus a few dict updates);
    ``version`` increases with every applied record so views can skip redraws.
    Records must arrive in sequence order (0, 1, 2, …).

    Live clock: a heat the engine is running (``live`` True, set by the app for heats
    that arrive through a feed) keeps ``received_at`` — the *monotonic* time in seconds
    (``time.monotonic()``, supplied by the caller; this module reads no clock) at which
    its last record was applied. :meth:`clock_ms` then extrapolates between events.
    """

    def __init__(self, arena: ArenaView | None = None, *, title: str | None = None,
                 activity: ActivitySource | None = None, season_arena: str | None = None) -> None:
        self.arena = arena or ArenaView()
        self.title = title
        self.activity = activity
        #: the season arena id this heat races, named in the header in a cup across
        #: arenas (None: not in a season, or a season of one arena)
        self.season_arena = season_arena
        self.world = WorldState()
        self.version = 0
        self.applied = 0
        self.pass_ms: dict[tuple[str, str], int] = {}
        self.fail_count: dict[tuple[str, str], int] = {}
        self.order: dict[str, list[str]] = {}
        self.usage_seen: dict[str, _UsageSeen] = {}
        self.feed: deque[FeedEntry] = deque(maxlen=FEED_LIMIT)
        #: (territory, milestone) → elapsed_ms of its latest ``milestone_evaluation_started``
        self.eval_ms: dict[tuple[str, str], int] = {}
        #: True while the engine runs this heat (the clock ticks between events)
        self.live = False
        #: monotonic seconds when the last record was applied (live heats; None = never)
        self.received_at: float | None = None
        #: the wall-clock age of the records was read (:meth:`set_written_age`: once, at the join)
        self._aged = False
        #: agent id → its latest activity lines from ``activity.jsonl`` records
        #: (:meth:`apply_activity`; newest last, at most :data:`ACTIVITY_KEEP`)
        self.activity_lines: dict[str, deque[str]] = {}
        #: True once this model shows activity from records (then the source is not read)
        self.timed_activity = False
        #: grows with every :meth:`apply_activity` (the heat screen redraws its panels;
        #: ``version`` does not move, so views of the events alone skip the redraw)
        self.activity_version = 0

    def reset(self) -> None:
        """Back to the empty world (used when scrubbing backwards)."""
        timed = self.timed_activity
        self.__init__(self.arena, title=self.title, activity=self.activity,  # type: ignore[misc]
                      season_arena=self.season_arena)
        self.timed_activity = timed

    def apply_activity(self, record: Any) -> None:
        """Take one ``activity.jsonl`` record (:class:`aoe_tui.replay.activity.ActivityRecord`:
        ``agent``, ``line``; any order of agents, each agent's lines in order): the agent's
        panel shows it from the next redraw (``activity_version`` grows)."""
        lines = self.activity_lines.get(record.agent)
        if lines is None:
            lines = self.activity_lines[record.agent] = deque(maxlen=ACTIVITY_KEEP)
        lines.append(record.line)
        self.timed_activity = True
        self.activity_version += 1

    def set_written_age(self, age_s: float, now_mono: float) -> None:
        """The last applied record was written ``age_s`` seconds before ``now_mono`` (monotonic
        s): the ticking clock counts from then, not from when this view received it (a view
        that joins a heat mid-way shows the referee's clock at once).

        ``age_s`` is a wall-clock difference (now minus the log's mtime): used as is when the
        view joins, after that only when plausible (:func:`read_age_s`), so a wall-clock step
        between a write and the read neither jumps nor stops the clock."""
        if self.received_at is not None:
            self.received_at = now_mono - read_age_s(age_s, self._aged)
            self._aged = True

    def ticking(self) -> bool:
        """True when :meth:`clock_ms` runs on between events: a live heat whose match is running."""
        return self.live and self.received_at is not None and self.world.match_state.value == "running"

    def clock_ms(self, now_mono: float | None = None) -> int:
        """The heat clock in **ms**.

        Replays, finished heats and heats not (yet) running show the ``elapsed_ms`` of the
        last applied record. A :meth:`ticking` heat shows that plus the monotonic time since the
        record was received (``now_mono - received_at``, monotonic **seconds**), at most
        :data:`LIVE_CLOCK_CAP_MS` more — so the clock keeps moving while the referee is busy
        (e.g. during a host reboot) and stops at the next event's exact value.
        """
        base = int(self.world.elapsed_ms)
        if now_mono is None or not self.ticking():
            return base
        extra = max(0.0, (now_mono - (self.received_at or now_mono)) * 1000)
        return base + int(min(extra, LIVE_CLOCK_CAP_MS))

    def apply(self, record: EventRecord) -> None:
        """Apply one record (sequence order) to the world and the derived facts."""
        apply_event(self.world, record)
        self.applied += 1
        self.version += 1
        e = record.event
        k = e.kind
        if k in ("milestone_evaluation_started", "milestone_passed", "milestone_failed", "milestone_revoked"):
            seen = self.order.setdefault(e.territory, [])
            if e.milestone not in seen:
                seen.append(e.milestone)
            key = (e.territory, e.milestone)
            if k == "milestone_evaluation_started":
                self.eval_ms[key] = record.elapsed_ms
            elif k == "milestone_passed":
                self.pass_ms.setdefault(key, record.elapsed_ms)
            elif k == "milestone_failed":
                self.fail_count[key] = self.fail_count.get(key, 0) + 1
            elif k == "milestone_revoked":
                self.pass_ms.pop(key, None)
        elif k == "usage_charged":
            seen_u = self.usage_seen.setdefault(e.agent, _UsageSeen())
            if e.input_tokens is not None or e.output_tokens is not None:
                seen_u.tokens = True
            if e.cost_microusd is not None:
                seen_u.cost = True
        elif k == "agent_started":
            self.usage_seen[e.agent] = _UsageSeen()
        summary = summarize_event(record.event)
        if summary is None:
            return
        text, style, key, terr = summary.text, summary.tone, summary.key, summary.territory
        if key is not None:
            for i in range(len(self.feed) - 1, max(-1, len(self.feed) - 12), -1):
                prev = self.feed[i]
                if prev.key == key:
                    del self.feed[i]
                    prev.count += 1
                    prev.elapsed_ms = record.elapsed_ms
                    prev.sequence = record.sequence
                    if key[0] == "failed":
                        prev.text = f"{e.territory} failed {e.milestone} ×{prev.count}: {key[4]}"
                    else:
                        prev.text = f"{text} ×{prev.count}"
                    self.feed.append(prev)
                    return
                if terr is not None and prev.territory == terr and prev.key != key:
                    break
        self.feed.append(FeedEntry(record.elapsed_ms, record.sequence, text, 1, style, key, terr))

    def extend(self, records: Iterable[EventRecord]) -> None:
        """Apply many records in order."""
        for rec in records:
            self.apply(rec)

    # ------------------------------------------------------------------ views

    def territory_ids(self) -> list[str]:
        """Territories in manifest order when known, else registration/world order."""
        ids = [t for t in self.arena.territories if t in self.world.territories]
        ids += [t for t in self.world.territories if t not in ids]
        return ids

    def winner_line(self) -> str | None:
        """Banner text once the match is finished/aborted, else None.

        ``WINNER <territory> (<agent>) · <points> points[ at <durable clock>] · <reason>``;
        a finished build race without a winner because the top rows tie (§3.6, e.g. a timer
        finish) says ``NO WINNER (tie) · <tied territories> · <points> points · <reason>``;
        any other finish without a winner (an abort) ``NO WINNER · <reason>``."""
        w = self.world
        if w.match_state.value not in ("finished", "aborted") or w.finish_reason is None:
            return None
        if w.winner is None:
            tied = self._tied_leaders()
            if tied:
                pts = tied[0].points
                return f"NO WINNER (tie) · {', '.join(r.territory for r in tied)} · {pts} points · {short_line(w.finish_reason)}"
            return f"NO WINNER · {short_line(w.finish_reason)}"
        terr = w.territories.get(w.winner)
        agent = terr.agent if terr else None
        pts = terr.milestone_points if terr else 0
        who = f"{w.winner} ({agent})" if agent else w.winner
        at = f" at {fmt_clock(terr.durable_at_ms)}" if terr and terr.durable_at_ms is not None else ""
        return f"WINNER {who} · {pts} points{at} · {short_line(w.finish_reason)}"

    def _tied_leaders(self) -> list:
        """The §3.6 rows tied for first of a finished build race (two or more), else []."""
        w = self.world
        if w.match_state.value != "finished" or self.arena.mode != "build_race":
            return []
        rows = compute_standings(w)
        top = [r for r in rows if r.rank == 1]
        return top if len(top) > 1 else []

    def panel(self, territory: str) -> PanelView:
        """The :class:`PanelView` of one territory (see :func:`panel_view`)."""
        return panel_view(self, territory)

    def standings(self):
        """§3.6 standings of the current world (list of ``Standing``)."""
        return compute_standings(self.world)

    def leader(self) -> str | None:
        """Current §3.6 leader territory id (None on a tie)."""
        return winner_of(self.world)


@dataclass(frozen=True)
class LadderRow:
    """One milestone in a panel: ``status`` pending|evaluating|passed|failed|killed.

    ``killed``: the heat ended (finished or aborted) while the milestone's verifier was
    still running; it was killed and its check earned nothing (the world keeps
    ``evaluating: true``, as upstream does, but nothing is evaluating any more)."""

    id: str
    label: str
    status: str
    points: int | None
    passed_ms: int | None = None
    failures: int = 0
    detail: str | None = None
    #: how long an ``evaluating`` milestone has been evaluating (ms; None = unknown)
    evaluating_ms: int | None = None


@dataclass(frozen=True)
class PanelView:
    """Everything one territory panel shows; equality lets widgets skip redraws."""

    territory: str
    agent: str | None
    adapter: str | None
    model: str | None
    effort: str | None
    competitor_state: str | None
    territory_state: str
    marker: str
    points: int
    ladder: tuple[LadderRow, ...]
    tokens_in: int | None
    tokens_out: int | None
    cost_microusd: int | None
    agent_state: str
    durable_at_ms: int | None
    winner: bool
    activity: tuple[str, ...]
    has_activity_source: bool
    health: str | None = None
    resources: int | None = None
    #: the seat's cost limit (µUSD, its manifest ``budget.max_cost_microusd``), shown as "spent / limit"
    cost_limit_microusd: int | None = None


_MARKERS = {
    "durable": "[+]", "verifying": "[~]", "incomplete": "[x]", "unavailable": "[?]",
    "preparing": "[>]", "building": "[>]",
}
_CONQUEST_MARKERS = {"healthy": "[+]", "recovering": "[~]", "eliminated": "[x]", "provisioning": "[?]", "degraded": "[!]"}


def panel_view(model: HeatModel, tid: str, activity_lines: int = 6, clock_ms: int | None = None) -> PanelView:
    """Build the :class:`PanelView` of territory ``tid`` from ``model`` (pure).

    ``clock_ms``: the heat clock to measure evaluating milestones against (ms; default
    the last record's ``elapsed_ms``, i.e. :meth:`HeatModel.clock_ms` of a replay).
    Activity lines pass through :func:`sanitize_line`.
    """
    now_ms = int(model.world.elapsed_ms) if clock_ms is None else clock_ms
    w = model.world
    terr = w.territories.get(tid)
    agent_id = terr.agent if terr else None
    if agent_id is None:
        agent_id = next((a for a, v in w.agents.items() if v.territory == tid), None)
    meta = model.arena.agents.get(agent_id) if agent_id else None
    if meta is None:
        meta = next((m for m in model.arena.agents.values() if m.territory == tid), None)
    av = w.agents.get(agent_id) if agent_id else None
    seen = model.usage_seen.get(agent_id or "", _UsageSeen())

    ladder: list[LadderRow] = []
    known = [m.id for m in model.arena.milestones]
    ids = known + [m for m in model.order.get(tid, []) if m not in known]
    metas = {m.id: m for m in model.arena.milestones}
    ended = w.match_state.value in ("finished", "aborted")
    for mid in ids:
        mv = terr.milestones.get(mid) if terr else None
        mm = metas.get(mid)
        label = mid
        if mv is None:
            status, pts, detail = "pending", (mm.points if mm else None), None
        elif mv.passed:
            status, pts, detail = "passed", mv.points, None
        elif mv.evaluating and ended:
            status, pts, detail = "killed", (mm.points if mm else None), None
        elif mv.evaluating:
            status, pts, detail = "evaluating", (mm.points if mm else None), mv.failure_detail
        elif mv.failure_detail is not None or mv.failure_category is not None:
            status, pts, detail = "failed", (mm.points if mm else None), mv.failure_detail or mv.failure_category
        else:
            status, pts, detail = "pending", (mm.points if mm else None), None
        since = model.eval_ms.get((tid, mid)) if status == "evaluating" else None
        ladder.append(LadderRow(mid, label, status, pts, model.pass_ms.get((tid, mid)),
                                model.fail_count.get((tid, mid), 0), short_line(detail, 200) or None,
                                None if since is None else max(0, now_ms - since)))

    if av is None:
        agent_state = "not started"
    elif av.running:
        agent_state = "running"
    else:
        agent_state = av.terminal_state.value if av.terminal_state else "stopped"
        if av.failure_source is not None and agent_state != "completed":
            agent_state += f" ({av.failure_source.value})"

    cs = terr.competitor_state.value if terr and terr.competitor_state else None
    ts = terr.state.value if terr else "provisioning"
    marker = _MARKERS.get(cs or "", "") if cs else _CONQUEST_MARKERS.get(ts, "")
    acts: tuple[str, ...] = ()
    if model.timed_activity and agent_id:
        acts = tuple(sanitize_line(x) for x in list(model.activity_lines.get(agent_id, ()))[-activity_lines:])
    elif model.activity is not None and agent_id:
        try:
            acts = tuple(sanitize_line(x) for x in list(model.activity(agent_id))[-activity_lines:])
        except Exception:  # a broken activity source must not break the view
            acts = ()
    health = None
    if terr and terr.last_health is not None:
        h = terr.last_health
        health = f"up {h.status}" if h.healthy else f"down {h.status if h.status is not None else 'error'}"
    conquest = cs is None and terr is not None and (terr.last_health is not None or terr.resources)
    return PanelView(
        territory=tid,
        agent=agent_id,
        adapter=meta.adapter if meta else None,
        model=short_line(av.model if av and av.model else (meta.model if meta else None), 120) or None,
        effort=meta.reasoning_effort if meta else None,
        competitor_state=cs,
        territory_state=ts,
        marker=marker,
        points=terr.milestone_points if terr else 0,
        ladder=tuple(ladder),
        tokens_in=av.input_tokens if av and seen.tokens else None,
        tokens_out=av.output_tokens if av and seen.tokens else None,
        cost_microusd=av.cost_microusd if av and seen.cost else None,
        agent_state=agent_state,
        durable_at_ms=terr.durable_at_ms if terr else None,
        winner=w.winner == tid and w.match_state.value in ("finished", "aborted"),
        activity=acts,
        has_activity_source=model.activity is not None or model.timed_activity,
        health=health,
        resources=terr.resources if conquest and terr else None,
        cost_limit_microusd=meta.max_cost_microusd if meta else None,
    )


@dataclass
class HeatFrame:
    """One redraw of the heat screen, the input of every heat-screen panel
    (:class:`aoe_tui.tui.widgets.HeatPanel`).

    Attributes:
        model: the heat shown.
        clock_ms: the clock to show (ms; a live running heat's ticking clock).
        heat: the key of the heat in ``app.heats`` (a new key = another heat).
    """

    model: HeatModel
    clock_ms: int
    heat: str | None = None

    @cached_property
    def views(self) -> list[PanelView]:
        """One :class:`PanelView` per territory, in territory order (built once per frame)."""
        return [panel_view(self.model, tid, clock_ms=self.clock_ms) for tid in self.model.territory_ids()]


# --------------------------------------------------------------------------- activity


def folder_activity(match_dir: Path) -> ActivitySource | None:
    """Activity source reading ``agents/<id>/activity.log`` of a match folder, or None.

    Returns None when the folder has no ``agents/*/activity.log`` at all (replays of
    upstream folders), so panels show "no activity" — unless a transcript is damaged: its
    agent's last line then says "transcript unavailable (invalid JSON at byte N)". Reads are cached per agent
    (the caller loads this once for a finished match; call in a worker for I/O).
    """
    from aoe_tui.replay.bundle import damaged_transcripts

    agents = Path(match_dir) / "agents"
    logs = {p.parent.name: p for p in agents.glob("*/activity.log")} if agents.is_dir() else {}
    damaged = damaged_transcripts(Path(match_dir))
    if not logs and not damaged:
        return None
    cache: dict[str, list[str]] = {}
    for aid, p in logs.items():
        try:
            cache[aid] = [ln for ln in p.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()]
        except OSError:
            cache[aid] = []
    for aid, problem in damaged.items():  # said where the analysis would be, not silently missing
        cache.setdefault(aid, []).append(problem)
    return lambda aid: cache.get(aid, ())


# --------------------------------------------------------------------------- replay


class ReplayCursor:
    """Playback position over a loaded log, driving a :class:`HeatModel` incrementally.

    ``position`` is the number of records applied (0…len). Forward moves apply only
    the new records; moving backwards resets and re-applies up to the target (a
    rare, user-initiated scrub — never per frame).

    ``activity``: the heat's ``activity.jsonl`` records (:class:`aoe_tui.replay.activity.ActivityRecord`,
    file order), or None. Those with ``ms`` up to the playhead are applied with the events
    (:meth:`HeatModel.apply_activity`), so a replay shows each line at its moment; at the end
    of the log every line is shown (drain lines carry the finish time).
    """

    def __init__(self, records: Sequence[EventRecord], model: HeatModel,
                 activity: Sequence[Any] | None = None) -> None:
        self.records = list(records)
        self.model = model
        self.position = 0
        self.playhead_ms = 0.0
        self.activity = sorted(activity or (), key=lambda r: (r.ms, r.sequence))
        self.activity_position = 0
        if activity is not None:
            model.timed_activity = True
        self._catch_up_activity()

    def _catch_up_activity(self) -> None:
        """Apply the activity lines due at the playhead (all of them at the end)."""
        acts, i = self.activity, self.activity_position
        limit = float("inf") if self.at_end else self.playhead_ms
        while i < len(acts) and acts[i].ms <= limit:
            self.model.apply_activity(acts[i])
            i += 1
        self.activity_position = i

    @property
    def total(self) -> int:
        """Number of records in the log."""
        return len(self.records)

    @property
    def at_end(self) -> bool:
        """True when every record has been applied."""
        return self.position >= len(self.records)

    @property
    def last_sequence(self) -> int | None:
        """Sequence of the last applied record (None before the first)."""
        return self.records[self.position - 1].sequence if self.position else None

    def step(self, n: int = 1) -> int:
        """Apply up to ``n`` more records; return how many were applied."""
        end = min(len(self.records), self.position + max(0, n))
        for rec in self.records[self.position:end]:
            self.model.apply(rec)
        done = end - self.position
        self.position = end
        if self.position:
            self.playhead_ms = max(self.playhead_ms, float(self.records[self.position - 1].elapsed_ms))
        self._catch_up_activity()
        return done

    def step_back(self) -> None:
        """Undo the last applied record (re-reduces up to position-1)."""
        self.seek_position(max(0, self.position - 1))

    def seek_position(self, pos: int) -> None:
        """Move so that exactly ``pos`` records are applied (0…total)."""
        pos = max(0, min(len(self.records), pos))
        if pos < self.position or (pos == 0 and self.activity_position):
            self.model.reset()
            self.position = 0
            self.activity_position = 0
            self.playhead_ms = 0.0
        self.step(pos - self.position)
        self.playhead_ms = float(self.records[pos - 1].elapsed_ms) if pos else 0.0
        self._catch_up_activity()

    def seek_sequence(self, sequence: int) -> None:
        """Move so the record with ``sequence`` is the last applied (clamped)."""
        pos = next((i + 1 for i, r in enumerate(self.records) if r.sequence >= sequence), len(self.records))
        if pos and self.records[pos - 1].sequence > sequence:
            pos -= 1
        self.seek_position(pos)

    def advance_time(self, dt_ms: float) -> int:
        """Move the playhead ``dt_ms`` of match time forward; apply due records.

        Gaps longer than 5 s of match time with nothing happening are skipped so
        playback never sits idle for minutes. Returns the number applied.
        """
        if self.at_end:
            return 0
        nxt = self.records[self.position].elapsed_ms
        if nxt - self.playhead_ms > 5000:
            self.playhead_ms = nxt - 5000
        self.playhead_ms += dt_ms
        end = self.position
        while end < len(self.records) and self.records[end].elapsed_ms <= self.playhead_ms:
            end += 1
        return self.step(end - self.position)
