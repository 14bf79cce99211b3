"""The contexts of ``home.html`` (a season: :func:`home_context`; ``aoe site --match``:
:func:`matches_context`) and ``leaderboard.html`` (:func:`leaderboard_context`).

Tables that are wider than a phone are *folding tables* (:class:`Table`, the template
macro ``fold_table`` in ``_tables.html``): every column has a tier — 0 always shown,
1 hidden below 1100 px, 2 hidden below 1500 px (site.css) — and each row carries a
"more" row listing the hidden columns' values, opened by the row's ``<details>`` toggle.

The standings columns are the standings page's (:mod:`aoe_tui.export.standings_files`,
``aoe standings --format html``); figures come from
:func:`aoe_tui.season.season_standings.season_standings` (seasons) and, for the
leaderboard and ``--match`` homes, from each :class:`HeatPage`'s reduced world only.
Values are plain text (autoescaped and made visible by the templates) or
:class:`markupsafe.Markup` built here from escaped parts (:func:`svg.esc`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from markupsafe import Markup

from aoe_tui.domain.display import fmt_clock, fmt_cost, fmt_tokens
import aoe_tui.export.site.svg as svg
from aoe_tui.export.site.heat import HeatPage
from aoe_tui.export.standings_files import BREAKDOWN_HEADS, COST_BY, breakdown_rows, cache_cell, spend_cell
from aoe_tui.season.season_standings import median_ms, waiting_heats, waiting_label

__all__ = ["CATEGORY_FALLBACK", "Column", "ConfigRow", "Table", "arena_category", "home_context",
           "leaderboard_context", "leaderboard_rows", "matches_context", "treemap_tiles"]

#: categories (§1.3) of the built-in arenas, for arena.json files without ``arena.category``
#: (upstream's older matches; its report keeps the same fallback map, §9.1)
CATEGORY_FALLBACK = {
    "first-build": "service-delivery",
    "zero-downtime-rollout": "service-delivery",
    "durable-job-queue": "stateful-recovery",
    "primary-failover": "stateful-recovery",
    "traffic-surge": "traffic-and-saturation",
    "first-contact": "adversarial-systems",
}
#: treemap measures, in the order of ``select#treemap-measure`` (the first is shown without JS)
MEASURES = (("spend", "spend"), ("tokens", "tokens"), ("runs", "runs"), ("durable", "durable deployments"))


def _clock(ms: int | None) -> str:
    return fmt_clock(ms, "m:ss.d", none="—")


def _usd(micro: int | None) -> str:
    return fmt_cost(micro, none="—")


# ---- folding tables ------------------------------------------------------------------

@dataclass
class Column:
    """``key``; ``label`` (header); ``tier`` (0: always shown, 1, 2: folded at narrow
    widths); ``num`` (right-aligned figures); ``short`` (the header at phone width)."""

    key: str
    label: str
    tier: int = 0
    num: bool = False
    short: str = ""


@dataclass
class Table:
    """A folding table: ``id``, ``columns``, ``rows`` (each a dict key → cell: text or
    Markup; ``_class`` the row's class, ``_name`` how its "more" row names it)."""

    id: str
    columns: list[Column]
    rows: list[dict[str, Any]] = field(default_factory=list)
    caption: str = ""

    @property
    def folded(self) -> list[Column]:
        return [c for c in self.columns if c.tier > 0]

    @property
    def max_tier(self) -> int:
        return max((c.tier for c in self.columns), default=0)


# ---- the season's home ---------------------------------------------------------------

STANDINGS_COLUMNS = [
    Column("rank", "#", 0, True), Column("entrant", "entrant"), Column("model", "model"),
    Column("heats", "heats", 1, True), Column("wins", "wins", 0, True, "W"), Column("durable", "durable", 0, True, "dur."),
    Column("points", "points", 0, True, "pts"), Column("coverage", "coverage", 1, True),
    Column("median", "median durable", 0, True, "median"), Column("mu", "μ", 2, True), Column("sigma", "σ", 2, True),
    Column("ordinal", "ordinal", 2, True), Column("tin", "tokens in", 1, True), Column("tout", "tokens out", 1, True),
    Column("cache", "cache read/write", 2, True), Column("cost", "cost", 0, True),
    Column("cost_by", "cost by", 2), Column("cpd", "cost/durable", 1, True), Column("infra", "infra failures", 2, True),
    Column("byes", "byes", 2, True),
]


def _entrant_cell(r: Any) -> Markup:
    out = svg.esc(r.entrant)
    if r.champion:
        out += ' <span class="trophy" title="champion">★</span>'
    if r.waiting:
        out += f' <span class="muted waiting">({svg.esc(r.waiting)})</span>'
    return Markup(out)


def standings_table(rows: Sequence[Any]) -> Table:
    """``table#standings``: the standings page's columns (one row per entrant)."""
    t = Table("standings", STANDINGS_COLUMNS)
    for r in rows:
        t.rows.append({
            "_class": "champion" if r.champion else "", "_name": r.entrant,
            "rank": r.rank, "entrant": _entrant_cell(r), "model": r.model or "—", "heats": r.heats, "wins": r.wins,
            "durable": r.durable, "points": r.points, "coverage": f"{r.coverage:.0%}",
            "median": _clock(r.median_durable_ms), "mu": f"{r.mu:.2f}", "sigma": f"{r.sigma:.2f}",
            "ordinal": f"{r.ordinal:.2f}", "tin": "—" if r.input_tokens is None else r.input_tokens,
            "tout": "—" if r.output_tokens is None else r.output_tokens, "cache": cache_cell(r), "cost": spend_cell(r),
            "cost_by": COST_BY.get(r.cost_source, r.cost_source), "cpd": _usd(r.cost_per_durable_microusd),
            "infra": r.infra_failures, "byes": r.byes,
        })
    return t


_BREAKDOWN_TIERS = {"entrant": 0, "arena": 0, "heats": 1, "wins": 0, "durable": 0, "points": 0, "milestones": 1,
                    "coverage": 1, "median durable": 0, "tokens in/out": 1, "cost": 0, "cost/durable": 1}


def breakdown_table(state: Any, rows: Sequence[Any]) -> Table:
    """``table#arena-breakdown``: one row per entrant and arena (the standings page's)."""
    cols = [Column(f"b{i}", h, _BREAKDOWN_TIERS.get(h, 1), i >= 2) for i, h in enumerate(BREAKDOWN_HEADS)]
    t = Table("arena-breakdown", cols)
    for cells in breakdown_rows(state, list(rows)):
        row: dict[str, Any] = {f"b{i}": c for i, c in enumerate(cells)}
        row["_name"] = f"{cells[0]} · {cells[1]}"
        t.rows.append(row)
    return t


def _status(state: Any) -> dict[str, str]:
    """``{"state": running|finished|stopped|waiting|empty, "text"}``."""
    if state.info is None:
        return {"state": "empty", "text": "no season started yet"}
    if state.finished is not None:
        return {"state": "finished", "text": f"finished after {state.finished.rounds} rounds"}
    waiting = waiting_heats(state)
    if waiting:
        return {"state": "waiting",
                "text": "; ".join(f"{waiting_label(h)}: {', '.join(h.entrants)} neither advanced nor eliminated "
                                  "(aoe run SEASON_FILE --retry-void re-runs it)" for h in waiting)}
    if state.stopped is not None:
        s = state.stopped
        detail = f": {s.detail}" if s.detail else ""
        return {"state": "stopped", "text": f"stopped ({s.reason}){detail}; the same aoe run resumes it"}
    cur = state.current_round
    return {"state": "running", "text": f"running{f' · round {cur.round}' if cur else ''}"}


def _format_text(info: Any) -> str:
    fmt = dict(info.format or {})
    kind = str(fmt.pop("kind", "?"))
    extra = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in fmt.items())
    return f"{kind}{f' ({extra})' if extra else ''}"


def _attempt_links(heats: Iterable[HeatPage]) -> dict[tuple[int, int, int], str]:
    return {(h.season["round"], h.season["heat"], h.season["attempt"]): f"heats/{h.slug}/index.html"
            for h in heats if h.season}


def _bracket(state: Any, heats: Sequence[HeatPage]) -> list[dict[str, Any]]:
    """Rounds → heats → seats and attempts, for the bracket."""
    links = _attempt_links(heats)
    models = state.info.models if state.info else {}
    waiting = {h.key for h in waiting_heats(state)}
    out = []
    for rnd in state.rounds.values():
        hs = []
        for h in rnd.heats.values():
            res = h.result
            counted = h.counted
            stats = counted.finished.stats if counted and counted.finished else {}
            seats = []
            for e in h.entrants:
                rank = res.ranks.get(e) if res and not res.void else None
                st = stats.get(e)
                seats.append({"entrant": e, "model": models.get(e) or "", "rank": rank,
                              "winner": bool(res and res.winner == e), "points": st.points if st else None,
                              "durable": _clock(st.durable_at_ms) if st and st.durable_at_ms is not None else None})
            seats.sort(key=lambda s: (s["rank"] if s["rank"] is not None else 99, s["entrant"]))
            attempts = []
            # an interrupted attempt's folder was renamed (``interrupted_as``) and its number
            # re-run: the page of that number is the re-run's, so only the last one links it
            last = {a.attempt: i for i, a in enumerate(h.attempts)}
            for i, a in enumerate(h.attempts):
                f = a.finished
                attempts.append({"attempt": a.attempt, "status": a.shown_status,
                                 "outcome": f.outcome if f else None,
                                 "failure_source": f.failure_source if f else None,
                                 "detail": f.detail if f else "",
                                 "href": links.get((h.round, h.heat, a.attempt)) if last[a.attempt] == i else None,
                                 "interrupted_as": list(a.interrupted_as)})
            status = h.status + (" · void" if res and res.void else "")
            hs.append({"heat": h.heat, "arena": h.arena, "status": status, "state": "void" if res and res.void
                       else h.status, "waiting": waiting_label(h) if h.key in waiting else "",
                       "seats": seats, "attempts": attempts})
        out.append({"round": rnd.round, "final": rnd.final, "arena": rnd.arena if state.multi_arena else "",
                    "heats": hs, "byes": [{"entrant": e, "model": models.get(e) or ""} for e in rnd.byes]})
    return out


def _points_per_round(state: Any, rows: Sequence[Any]) -> tuple[list[str], list[tuple[str, list[int | None]]]]:
    """x labels ``R1``…, and per entrant (standings order) its points in each round's
    counted heats (None: it raced no counted heat that round)."""
    rounds = list(state.rounds.values())
    per: dict[str, list[int | None]] = {r.entrant: [None] * len(rounds) for r in rows}
    for i, rnd in enumerate(rounds):
        for h in rnd.heats.values():
            att = h.counted
            if att is None or att.finished is None or (h.result and h.result.void):
                continue
            for e, st in att.finished.stats.items():
                if e in per:
                    per[e][i] = (per[e][i] or 0) + st.points
    return [f"R{r.round}" for r in rounds], [(e, v) for e, v in per.items()]


def _season_charts(state: Any, rows: Sequence[Any]) -> list[dict[str, Any]]:
    """The home page's charts. Each entrant has one colour in all of them: its place in the
    season's entrant list (:func:`svg.entrant_colors`), not its standings rank."""
    charts = []
    colors = svg.entrant_colors([*state.entrants, *(r.entrant for r in rows)])
    sec = lambda v: f"{v / 1000:.0f}s"  # noqa: E731
    if state.multi_arena:
        for a in state.arenas:
            per = [(r.entrant, [r.arenas[a.id].milestone_ms.get(m) for m in a.milestones])
                   for r in rows if a.id in r.arenas]
            charts.append({"title": f"Time to each milestone · {a.id} (median)", "id": f"milestone-chart-{a.id}",
                           "svg": Markup(svg.line_chart(f"milestone-chart-{a.id}", list(a.milestones), per,
                                                        label=f"median time to each milestone of {a.id} per entrant",
                                                        y_fmt=sec, empty="No milestone passed yet.",
                                                        colors=colors))})
    else:
        ms_ids = list(state.info.milestones) if state.info else []
        per = [(r.entrant, [r.milestone_ms.get(m) for m in ms_ids]) for r in rows]
        charts.append({"title": "Time to each milestone (median)", "id": "milestone-chart",
                       "svg": Markup(svg.line_chart("milestone-chart", ms_ids, per,
                                                    label="median time to each milestone per entrant", y_fmt=sec,
                                                    empty="No milestone passed yet.", colors=colors))})
    labels, series = _points_per_round(state, rows)
    charts.append({"title": "Points per round", "id": "points-chart",
                   "svg": Markup(svg.line_chart("points-chart", labels, series, label="points per round per entrant",
                                                y_fmt=lambda v: f"{v:.0f}", empty="No heat counted yet.",
                                                colors=colors))})
    spend = [(r.entrant, r.cost_microusd, fmt_cost(r.cost_microusd)) for r in rows]
    charts.append({"title": "Spend per entrant", "id": "spend-chart",
                   "svg": Markup(svg.bar_chart("spend-chart", spend, label="spend per entrant (USD)",
                                               empty="No entrants.", colors=colors))})
    return charts


def _arena_table(state: Any, rows: Sequence[Any]) -> Table:
    """``table#arenas``: one row per season arena (its category, milestones, heats raced,
    durable deployments, best durable time, spend)."""
    cols = [Column("arena", "arena"), Column("name", "name", 1), Column("category", "category", 1),
            Column("milestones", "milestones", 0, True, "ms"), Column("heats", "heats", 0, True),
            Column("durable", "durable", 0, True, "dur."), Column("best", "best durable", 0, True, "best"),
            Column("cost", "spend", 1, True)]
    t = Table("arenas", cols)
    finished = [h for h in state.finished_heats() if h.result and not h.result.void]
    for a in state.arenas:
        bd = [r.arenas[a.id] for r in rows if a.id in r.arenas]
        times = [ms for b in bd for ms in b.durable_times_ms]
        costs = [b.cost_microusd for b in bd if b.heats]
        t.rows.append({"_name": a.id, "arena": a.id, "name": a.display_name or a.id,
                       "category": a.category or CATEGORY_FALLBACK.get(a.id, "—"), "milestones": len(a.milestones),
                       "heats": sum(1 for h in finished if h.arena == a.id), "durable": len(times),
                       "best": _clock(min(times) if times else None),
                       "cost": fmt_cost(sum(costs)) if costs and None not in costs else "n/a"})
    return t


def home_context(state: Any, rows: list[Any], heats: list[HeatPage]) -> dict[str, Any]:
    """A season's home page: ``state`` (:class:`SeasonState`), ``rows`` (season standings),
    ``heats`` (every heat attempt's page)."""
    info = state.info
    title = f"{info.season} · {info.label}" if info else "season"
    models = info.models if info else {}
    champions = [{"entrant": e, "model": models.get(e) or ""} for e in (state.finished.champions if state.finished
                                                                         else [])]
    return {"kind": "season", "title": title, "status": _status(state), "champions": champions,
            "arenas": [{"id": a.id, "name": a.display_name or a.id, "milestones": len(a.milestones),
                        "category": a.category or CATEGORY_FALLBACK.get(a.id, "")} for a in state.arenas],
            "format": _format_text(info) if info else "", "entrants": len(info.entrants) if info else 0,
            "rules_changed": [{"resume": n, "changed": "; ".join(c)} for n, c in state.rules_changed],
            "bracket": _bracket(state, heats), "standings": standings_table(rows),
            "arena_table": _arena_table(state, rows),
            "breakdown": breakdown_table(state, rows) if state.multi_arena else None,
            "charts": _season_charts(state, rows), "cards": []}


# ---- per heat page: what its world says ------------------------------------------------

@dataclass
class _Seat:
    """One territory of one heat page: its agent's configuration and figures."""

    territory: str
    agent: str | None
    model: str
    adapter: str | None
    reasoning: str | None
    won: bool
    points: int
    passed: int
    available: int
    durable_ms: int | None
    usage: bool
    tokens_in: int
    tokens_out: int
    cost: int
    cost_known: bool
    failure_source: str | None


def _usage_of(page: HeatPage) -> tuple[set[str], set[str]]:
    """Agents with a ``usage_charged`` that has tokens or cost, and those with a cost."""
    usage, cost = set(), set()
    for rec in page.loaded.records:
        ev = rec.event
        if ev.kind == "usage_charged":
            if ev.input_tokens is not None or ev.output_tokens is not None or ev.cost_microusd is not None:
                usage.add(ev.agent)
            if ev.cost_microusd is not None:
                cost.add(ev.agent)
    return usage, cost


def arena_of(page: HeatPage) -> str:
    """The arena id a page raced: its season's, its arena.json's or provenance's, else the longest
    built-in arena id its folder name starts with (upstream's older folders), else ``?``."""
    aid = (page.season or {}).get("arena") or page.payload["match"].get("arena")
    if aid:
        return str(aid)
    src = page.loaded.source
    name = (src.parent.name if src.is_file() else src.name) or page.slug
    known = [k for k in CATEGORY_FALLBACK if name.startswith(k)]
    return max(known, key=len) if known else "?"


def arena_category(page: HeatPage, arena_id: str) -> str:
    """arena.json's ``arena.category``, else :data:`CATEGORY_FALLBACK` (longest built-in
    id ``arena_id`` starts with: ``first-build-real`` → ``service-delivery``), else
    ``uncategorized``."""
    cat = ((page.loaded.arena or {}).get("arena") or {}).get("category")
    if cat:
        return str(cat)
    known = [k for k in CATEGORY_FALLBACK if arena_id == k or arena_id.startswith(k + "-")]
    return CATEGORY_FALLBACK[max(known, key=len)] if known else "uncategorized"


def _arena_name(page: HeatPage, arena_id: str) -> str:
    return str(((page.loaded.arena or {}).get("arena") or {}).get("display_name") or arena_id)


def seats_of(page: HeatPage) -> list[_Seat]:
    """Every territory of ``page``'s final world with its agent's configuration
    (arena.json ``agents``; the world's model where arena.json is missing)."""
    world = page.loaded.world
    specs = {a.get("territory"): a for a in (page.loaded.arena or {}).get("agents") or []}
    usage, cost = _usage_of(page)
    n_ms = len(page.payload.get("milestones") or [])
    out = []
    for tid, t in world.territories.items():
        spec = specs.get(tid, {})
        aid = t.agent or spec.get("id")
        agent = world.agents.get(aid or "")
        passed = sum(1 for m in t.milestones.values() if m.passed)
        out.append(_Seat(
            territory=tid, agent=aid, model=str((agent.model if agent else None) or spec.get("model") or "?"),
            adapter=spec.get("adapter"), reasoning=spec.get("reasoning_effort"), won=world.winner == tid,
            points=t.milestone_points, passed=passed, available=max(n_ms, len(t.milestones)),
            durable_ms=t.durable_at_ms, usage=aid in usage,
            tokens_in=agent.input_tokens if agent else 0, tokens_out=agent.output_tokens if agent else 0,
            cost=agent.cost_microusd if agent else 0, cost_known=aid in cost,
            failure_source=agent.failure_source.value if agent and agent.failure_source else None))
    return out


def _counts(page: HeatPage) -> bool:
    """Whether ``page`` is a race whose figures count: a season's counted attempt (not a
    retried, void or still running one); every page of ``aoe site --match``."""
    return bool(page.season.get("counted")) if page.season else True


def _spoiled(page: HeatPage) -> bool:
    """A season attempt the infrastructure spoiled (retry or void): its agents' failures count."""
    return bool(page.season) and page.season.get("outcome") in ("retry", "void")


# ---- leaderboard ---------------------------------------------------------------------

@dataclass
class ConfigRow:
    """One model configuration's figures across every counted race (see
    :func:`leaderboard_rows`); times ms, costs µUSD."""

    model: str
    adapter: str | None
    reasoning: str | None
    appearances: int = 0
    wins: int = 0
    durable_ms: list[int] = field(default_factory=list)
    passed: int = 0
    available: int = 0
    usage: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    arenas: list[str] = field(default_factory=list)

    @property
    def key(self) -> tuple[str, str | None, str | None]:
        return (self.model, self.adapter, self.reasoning)

    @property
    def label(self) -> str:
        return " · ".join(x for x in (self.model, self.adapter, self.reasoning) if x)

    @property
    def durable(self) -> int:
        return len(self.durable_ms)

    @property
    def median_durable_ms(self) -> int | None:
        return median_ms(self.durable_ms)

    @property
    def complete(self) -> bool:
        """Usage recorded in every appearance (tokens and cost are unknown otherwise, §7.1)."""
        return self.appearances > 0 and self.usage == self.appearances

    @property
    def tokens(self) -> int | None:
        return self.tokens_in + self.tokens_out if self.complete else None

    @property
    def cost_microusd(self) -> int | None:
        return self.cost if self.complete else None

    @property
    def cost_per_durable_microusd(self) -> int | None:
        c = self.cost_microusd
        return c // self.durable if c is not None and self.durable else None

    @property
    def coverage(self) -> float:
        return self.passed / self.available if self.available else 0.0


def leaderboard_rows(heats: Sequence[HeatPage]) -> list[ConfigRow]:
    """Per model configuration (model, adapter = harness, reasoning effort), best first
    (upstream's benchmark order, §7.2: wins, durable deployments, milestone coverage,
    median durable time — none last —, cost — unknown last —, then the configuration).

    A configuration's appearances, wins, durable deployments, milestones, usage, tokens
    and cost come from counted races (:func:`_counts`); its ``failures`` tally each
    agent's ``failure_source`` (player, arena, provider, harness, controller) over those
    races *and* the attempts the infrastructure spoiled (successes are tagged ``player``,
    as upstream's benchmark tallies them)."""
    rows: dict[tuple[str, str | None, str | None], ConfigRow] = {}
    for page in heats:
        counts, spoiled = _counts(page), _spoiled(page)
        if not counts and not spoiled:
            continue
        arena = arena_of(page)
        for s in seats_of(page):
            key = (s.model, s.adapter, s.reasoning)
            row = rows.setdefault(key, ConfigRow(*key))
            if s.failure_source:
                row.failures[s.failure_source] = row.failures.get(s.failure_source, 0) + 1
            if not counts:
                continue
            row.appearances += 1
            row.wins += s.won
            if s.durable_ms is not None:
                row.durable_ms.append(s.durable_ms)
            row.passed += s.passed
            row.available += s.available
            row.usage += s.usage
            row.tokens_in += s.tokens_in
            row.tokens_out += s.tokens_out
            row.cost += s.cost
            if arena not in row.arenas:
                row.arenas.append(arena)
    out = [r for r in rows.values()]
    out.sort(key=lambda r: (-r.wins, -r.durable, -r.coverage, r.median_durable_ms is None,
                            r.median_durable_ms or 0, r.cost_microusd is None, r.cost_microusd or 0,
                            r.model, r.adapter or "", r.reasoning or ""))
    return out


LEADERBOARD_COLUMNS = [
    Column("rank", "#", 0, True), Column("model", "model"), Column("adapter", "harness", 1),
    Column("reasoning", "reasoning", 1), Column("appearances", "appearances", 1, True),
    Column("wins", "wins", 0, True, "W"), Column("durable", "durable", 0, True, "dur."),
    Column("milestones", "milestones", 1, True), Column("median", "median durable", 0, True, "median"),
    Column("tokens", "tokens", 1, True), Column("cost", "cost", 0, True), Column("cpd", "cost/durable", 1, True),
    Column("failures", "failures by source", 1), Column("usage", "usage recorded", 2, True),
]


def _failures_text(f: dict[str, int]) -> str:
    return " · ".join(f"{k} {v}" for k, v in sorted(f.items(), key=lambda kv: (-kv[1], kv[0]))) or "—"


def leaderboard_table(rows: Sequence[ConfigRow]) -> Table:
    t = Table("leaderboard", LEADERBOARD_COLUMNS)
    for i, r in enumerate(rows):
        tokens = r.tokens
        t.rows.append({
            "_name": r.label, "rank": i + 1,
            "model": Markup(svg.esc(r.model) + (f'<span class="cfg-sub muted"> · {svg.esc(r.adapter or "—")} · '
                                                f'{svg.esc(r.reasoning or "—")}</span>'
                                                if r.adapter or r.reasoning else "")),
            "adapter": r.adapter or "—",
            "reasoning": r.reasoning or "—", "appearances": r.appearances, "wins": r.wins,
            "durable": f"{r.durable}/{r.appearances}", "milestones": f"{r.passed}/{r.available}",
            "median": _clock(r.median_durable_ms),
            "tokens": Markup(f'<span title="{svg.esc(f"in {r.tokens_in} / out {r.tokens_out}")}">'
                             f'{svg.esc(fmt_tokens(tokens))}</span>') if tokens is not None else "n/a",
            "cost": fmt_cost(r.cost_microusd), "cpd": fmt_cost(r.cost_per_durable_microusd),
            "failures": _failures_text(r.failures), "usage": f"{r.usage}/{r.appearances}",
        })
    return t


def treemap_tiles(heats: Sequence[HeatPage], measure: str) -> list[svg.TreemapTile]:
    """One tile per arena raced (counted races; first-seen order), its category
    (:func:`arena_category`), the ``measure`` (``spend`` µUSD of recorded costs, ``tokens``
    recorded, ``runs`` = counted races, ``durable`` deployments) and its fleet."""
    acc: dict[str, dict[str, Any]] = {}
    for page in heats:
        if not _counts(page):
            continue
        aid = arena_of(page)
        a = acc.setdefault(aid, {"name": _arena_name(page, aid), "category": arena_category(page, aid),
                                 "spend": 0, "spend_known": False, "tokens": 0, "tokens_known": False,
                                 "runs": 0, "durable": 0, "fleet": []})
        a["runs"] += 1
        for s in seats_of(page):
            label = " · ".join(x for x in (s.model, s.adapter, s.reasoning) if x)
            if label not in a["fleet"]:
                a["fleet"].append(label)
            a["durable"] += s.durable_ms is not None
            if s.cost_known:
                a["spend"] += s.cost
                a["spend_known"] = True
            if s.usage:
                a["tokens"] += s.tokens_in + s.tokens_out
                a["tokens_known"] = True
    tiles = []
    for aid, a in acc.items():
        if measure == "spend":
            value, text = a["spend"], (fmt_cost(a["spend"]) if a["spend_known"] else "spend n/a")
        elif measure == "tokens":
            value, text = a["tokens"], (f"{fmt_tokens(a['tokens'])} tokens" if a["tokens_known"] else "tokens n/a")
        elif measure == "runs":
            value, text = a["runs"], f"{a['runs']} run{'s' if a['runs'] != 1 else ''}"
        elif measure == "durable":
            value, text = a["durable"], f"{a['durable']} durable"
        else:
            raise ValueError(f"unknown treemap measure {measure!r}")
        tiles.append(svg.TreemapTile(arena=aid, name=a["name"], category=a["category"], value=value, text=text,
                                     fleet=sorted(a["fleet"])))
    return tiles


def leaderboard_context(heats: list[HeatPage]) -> dict[str, Any]:
    """The leaderboard across arenas, per model configuration, and the capability treemap
    (one SVG per measure of :data:`MEASURES`, wide and tall)."""
    rows = leaderboard_rows(heats)
    treemaps = []
    for key, label in MEASURES:
        tiles = treemap_tiles(heats, key)
        treemaps.append({"key": key, "label": label, "missing": [t.arena for t in tiles if t.value <= 0],
                         "wide": Markup(svg.treemap_svg(f"treemap-{key}", tiles, measure=label,
                                                        css_class="treemap wide")),
                         "tall": Markup(svg.treemap_svg(f"treemap-{key}-tall", tiles, measure=label, width=400,
                                                        height=640, css_class="treemap tall"))})
    counted = [p for p in heats if _counts(p)]
    arenas = list(dict.fromkeys(arena_of(p) for p in counted))
    spend_tiles = treemap_tiles(heats, "spend")
    known = any(t.text != "spend n/a" for t in spend_tiles)
    usage, appearances = sum(r.usage for r in rows), sum(r.appearances for r in rows)
    spend = fmt_cost(int(sum(t.value for t in spend_tiles))) if known else "n/a"
    if known and usage < appearances:
        spend += f" (usage recorded in {usage}/{appearances} appearances)"
    return {"title": "Leaderboard", "table": leaderboard_table(rows), "treemaps": treemaps,
            "leader": rows[0].label if rows and rows[0].appearances else None, "runs": len(counted),
            "arenas": arenas, "configs": len(rows), "spend": spend}


# ---- aoe site --match ------------------------------------------------------------------

def _match_card(page: HeatPage) -> dict[str, Any]:
    world = page.loaded.world
    seats = seats_of(page)
    win = next((s for s in seats if s.won), None)
    costs = [s.cost for s in seats if s.cost_known]
    return {"title": page.title, "href": f"heats/{page.slug}/index.html", "arena": arena_of(page),
            "winner": f"{win.territory} · {win.model}" if win else "none",
            "durable": _clock(win.durable_ms) if win and win.durable_ms is not None else "—",
            "final": _clock(world.elapsed_ms), "state": str(world.match_state),
            "reason": world.finish_reason or "", "cost": fmt_cost(sum(costs)) if costs else "n/a"}


TERRITORY_COLUMNS = [
    Column("rank", "#", 0, True), Column("territory", "territory"), Column("model", "model"),
    Column("matches", "matches", 1, True), Column("wins", "wins", 0, True, "W"),
    Column("durable", "durable", 0, True, "dur."), Column("points", "points", 0, True, "pts"),
    Column("milestones", "milestones", 1, True), Column("median", "median durable", 0, True, "median"),
    Column("tokens", "tokens in/out", 1, True), Column("cost", "cost", 0, True), Column("cpd", "cost/durable", 1, True),
    Column("usage", "usage recorded", 2, True),
]


def territory_table(heats: Sequence[HeatPage]) -> Table:
    """``table#standings`` of ``aoe site --match``: one row per territory id across the
    matches (territory ids name an arena's seats), ordered as season standings are:
    wins, durable, points, median durable time, cost, territory."""
    acc: dict[str, dict[str, Any]] = {}
    for page in heats:
        for s in seats_of(page):
            a = acc.setdefault(s.territory, {"models": [], "matches": 0, "wins": 0, "durable": [], "points": 0,
                                             "passed": 0, "available": 0, "usage": 0, "tin": 0, "tout": 0,
                                             "cost": 0})
            if s.model not in a["models"]:
                a["models"].append(s.model)
            a["matches"] += 1
            a["wins"] += s.won
            if s.durable_ms is not None:
                a["durable"].append(s.durable_ms)
            a["points"] += s.points
            a["passed"] += s.passed
            a["available"] += s.available
            a["usage"] += s.usage
            a["tin"] += s.tokens_in
            a["tout"] += s.tokens_out
            a["cost"] += s.cost

    def figures(tid: str) -> dict[str, Any]:
        a = acc[tid]
        complete = a["usage"] == a["matches"]
        cost = a["cost"] if complete else None
        return {**a, "median": median_ms(a["durable"]), "cost_v": cost,
                "cpd": cost // len(a["durable"]) if cost is not None and a["durable"] else None, "complete": complete}

    fig = {tid: figures(tid) for tid in acc}
    order = sorted(fig, key=lambda t: (-fig[t]["wins"], -len(fig[t]["durable"]), -fig[t]["points"],
                                       fig[t]["median"] is None, fig[t]["median"] or 0, fig[t]["cost_v"] is None,
                                       fig[t]["cost_v"] or 0, t))
    table = Table("standings", TERRITORY_COLUMNS)
    for i, tid in enumerate(order):
        f = fig[tid]
        table.rows.append({"_name": tid, "rank": i + 1, "territory": tid,
                           "model": Markup('<span class="models">' + "".join(f"<span>{svg.esc(m)}</span>"
                                                                             for m in f["models"]) + "</span>"),
                           "matches": f["matches"], "wins": f["wins"], "durable": len(f["durable"]),
                           "points": f["points"], "milestones": f"{f['passed']}/{f['available']}",
                           "median": _clock(f["median"]),
                           "tokens": f"{f['tin']}/{f['tout']}" if f["complete"] else "—",
                           "cost": _usd(f["cost_v"]), "cpd": _usd(f["cpd"]),
                           "usage": f"{f['usage']}/{f['matches']}"})
    return table


def matches_context(heats: list[HeatPage]) -> dict[str, Any]:
    """The home page of ``aoe site --match``: a card per match and the territories'
    standings across them."""
    return {"kind": "matches", "title": "Matches", "cards": [_match_card(p) for p in heats],
            "standings": territory_table(heats), "status": None, "champions": [], "arenas": [], "format": "",
            "entrants": 0, "rules_changed": [], "bracket": [], "arena_table": None, "breakdown": None, "charts": []}
