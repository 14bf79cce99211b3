"""Season standings: one row per entrant, from a reduced :class:`SeasonState`.

Figures per entrant (only **counted**, non-void heats; a void heat's entrants are not
charged with it):

* ``heats`` raced, ``byes`` (rounds the entrant was scheduled a bye: seated in no heat of a
  round that listed it as a bye), ``wins`` (heats whose §3.6 winner is this entrant; a tied top has no
  winner), ``durable`` deployments (``durable_at_ms`` present, winner or not),
  ``points`` (sum of passed milestone points), ``coverage`` = passed milestones ÷
  milestones available (each heat counts its own arena's milestones, so a cup across
  arenas weighs a 6-milestone arena as 6), ``median_durable_ms`` (the median: the middle
  time, or for an even count the mean of the two middle times rounded down to a whole ms —
  not upstream's series' upper median, §7.1), ``mean_rank``;
* ``input_tokens``, ``output_tokens``, ``cost_microusd``: sums, **null unless usage was
  recorded in every heat** (usage is "unavailable", never zero — §7.1);
  ``cost_per_durable_microusd`` = cost ÷ durable (integer division) when both are known
  and durable > 0;
* ``cache_read_tokens``, ``cache_write_tokens``: how many of the input tokens the
  provider read from / wrote to its prompt cache (sums, included in ``input_tokens``;
  null unless every heat's adapter reported them);
* ``cost_source``: who computed ``cost_microusd`` — ``"price table"`` (the season's
  ``[prices]``), ``"adapter"`` (the adapter's own figure, e.g. opencode's, which has no
  cache term), ``"mixed"`` (both, in different heats) or null (no cost);
* ``infra_failures``: attempts of the entrant's heats that the infrastructure spoiled
  (outcome ``retry`` or ``void``; void heats included);
* rating ``mu``, ``sigma``, ``ordinal`` (OpenSkill Plackett–Luce, :mod:`.ratings`): one
  rating per entrant over every heat of every arena;
* ``milestone_ms``: milestone id → median ms (as ``median_durable_ms``) to pass it, over heats where
  it passed (for the time-to-milestone chart). Only for a season of one arena; ``{}`` in
  a cup across arenas, whose arenas share milestone ids (``host-reboot``, …) that are not
  the same milestone — each arena's breakdown has its own;
* knockout: ``round_reached`` (last round raced) and ``champion``;
* ``waiting``: ``"waiting on heat r1h2 (void)"`` for an entrant seated in a void heat the
  season waits on (:func:`waiting_heats`: a knockout decides nobody's elimination or
  advancement from a heat that did not race; ``aoe run --retry-void`` re-runs it), else
  null;
* ``arenas``: arena id → :class:`ArenaBreakdown`, one per season arena in season order
  (also arenas the entrant never raced: ``heats == 0``), the §7.2 per-arena summary:
  ``heats`` (§7.2 ``appearances``), ``wins``, ``durable`` (``durable_deployments``),
  ``points``, ``durable_times_ms`` (ms, match clock, in (round, heat) order),
  ``median_durable_ms`` (the median, as above), ``milestone_passes``, ``milestones_available``
  (heats × that arena's milestones), ``coverage`` (passes ÷ available, 4 decimals),
  ``usage_recorded`` (heats with usage), ``input_tokens``/``output_tokens``/
  ``cost_microusd`` (micro-USD; null unless usage was recorded in every heat of that
  arena), ``cost_per_durable_microusd`` and ``milestone_ms`` (that arena's milestones).

All times are in **ms**, all costs in **micro-USD** (10⁻⁶ USD).

Tie-break order (documented; first difference decides):

1. the format's own key (:meth:`aoe_tui.season.formats.Format.standings_key`; knockout:
   champion first, then the later ``round_reached``; league: none);
2. more ``wins``;
3. more ``durable`` deployments;
4. more ``points``;
5. lower ``median_durable_ms`` (no durable deployment sorts last — unlike upstream's
   series, where Rust puts null first, §7.1);
6. higher rating ``ordinal``;
7. lower ``cost_microusd`` (unknown sorts last);
8. entrant id ascending (rows equal on 1–7 share a ``rank``).
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

from aoe_tui.domain.season_events import EntrantHeatStats
from aoe_tui.replay.season_reducer import HeatState, SeasonState
from aoe_tui.season.formats import HeatResult, format_class
from aoe_tui.season.ratings import rate_heats

__all__ = ["ArenaBreakdown", "SeasonStanding", "median_ms", "season_standings", "waiting_heats", "waiting_label"]


def waiting_heats(state: SeasonState) -> list[HeatState]:
    """The void heats an unfinished season waits on, in (round, heat) order: those its format
    would decide an elimination, an advancement, the next draw or the champions from
    (:meth:`aoe_tui.season.formats.Format.waiting_on`; a knockout's void heats of its last
    finished round). ``[]`` for a finished season or a format that waits on nothing (league)."""
    if state.info is None or state.finished is not None:
        return []
    fmt = format_class(state.info.format.get("kind"))
    results = [HeatResult(h.round, h.heat, h.seats, dict(h.result.ranks), h.result.void)
               for h in state.finished_heats() if h.result is not None]
    keys = {(r.round, r.heat) for r in fmt.waiting_on(results)}
    return [h for h in state.heats() if h.key in keys]


def waiting_label(heat: HeatState) -> str:
    """``waiting on heat r1h2 (void)``: how views and exports name a heat the season waits on."""
    return f"waiting on heat r{heat.round}h{heat.heat} (void)"


def median_ms(values: list[int]) -> int | None:
    """The median of ``values`` (ms), or None when empty: the middle value of an odd count,
    the mean of the two middle values of an even count, rounded down to a whole ms
    (``[1000, 2001]`` → 1500). Not upstream's series rule (the upper median, §7.1)."""
    if not values:
        return None
    s = sorted(values)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) // 2


@dataclass
class ArenaBreakdown:
    """One entrant's figures on one arena of the season (see the module docstring;
    times in ms, costs in micro-USD)."""

    arena: str
    heats: int
    wins: int
    durable: int
    points: int
    durable_times_ms: list[int]
    median_durable_ms: int | None
    milestone_passes: int
    milestones_available: int
    coverage: float
    usage_recorded: int
    input_tokens: int | None
    output_tokens: int | None
    cost_microusd: int | None
    cost_per_durable_microusd: int | None
    milestone_ms: dict[str, int] = field(default_factory=dict)
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    cost_source: str | None = None


@dataclass
class SeasonStanding:
    """One standings row (see the module docstring for every field; times in ms, costs
    in micro-USD)."""

    rank: int
    entrant: str
    model: str | None
    heats: int
    byes: int
    wins: int
    durable: int
    points: int
    coverage: float
    median_durable_ms: int | None
    mean_rank: float | None
    usage_recorded: int
    input_tokens: int | None
    output_tokens: int | None
    cost_microusd: int | None
    cost_per_durable_microusd: int | None
    mu: float
    sigma: float
    ordinal: float
    round_reached: int
    champion: bool
    milestone_ms: dict[str, int] = field(default_factory=dict)
    arenas: dict[str, ArenaBreakdown] = field(default_factory=dict)
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    cost_source: str | None = None
    infra_failures: int = 0
    #: the entrant's cost limit over the season (µUSD, ``[budget] season_max_cost_microusd``), or None
    cost_limit_microusd: int | None = None
    #: ``waiting on heat rRhH (void)`` while the season waits on a void heat of this entrant
    #: (:func:`waiting_heats`), else None
    waiting: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (``arenas`` as nested dicts; ``cost_limit_microusd`` only when set)."""
        d = asdict(self)
        if d["cost_limit_microusd"] is None:
            del d["cost_limit_microusd"]
        return d


@dataclass
class _Tally:
    """Running sums of one entrant's counted heats (overall, or on one arena)."""

    heats: int = 0
    wins: int = 0
    points: int = 0
    passed: int = 0
    available: int = 0
    durable_ms: list[int] = field(default_factory=list)
    ranks: list[int] = field(default_factory=list)
    usage: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost: int = 0
    ms: dict[str, list[int]] = field(default_factory=dict)
    cache_known: int = 0
    cache_read: int = 0
    cache_write: int = 0
    cost_sources: set[str] = field(default_factory=set)

    def add(self, won: bool, rank: int | None, s: EntrantHeatStats | None, n_milestones: int) -> None:
        """Count one heat: won or not, its rank, the entrant's stats (None: none
        recorded) and how many milestones the heat's arena has."""
        self.heats += 1
        self.wins += won
        self.available += n_milestones
        if rank is not None:
            self.ranks.append(rank)
        if s is None:
            return
        self.points += s.points
        self.passed += s.passed
        if s.durable_at_ms is not None:
            self.durable_ms.append(s.durable_at_ms)
        self.usage += s.usage_recorded
        self.tokens_in += s.input_tokens
        self.tokens_out += s.output_tokens
        self.cost += s.cost_microusd
        if s.cache_read_tokens is not None and s.cache_write_tokens is not None:
            self.cache_known += 1
            self.cache_read += s.cache_read_tokens
            self.cache_write += s.cache_write_tokens
        source = s.cost_source or ("adapter" if s.usage_recorded else None)  # logs before [prices]: the adapter's
        if source is not None:
            self.cost_sources.add(source)
        for mid, ms in s.milestones.items():
            self.ms.setdefault(mid, []).append(ms)

    def figures(self) -> dict[str, Any]:
        """The figures both a standings row and an arena breakdown report."""
        complete = self.heats > 0 and self.usage == self.heats
        cost = self.cost if complete else None
        durable = len(self.durable_ms)
        return {
            "heats": self.heats,
            "wins": self.wins,
            "durable": durable,
            "points": self.points,
            "coverage": round(self.passed / self.available, 4) if self.heats and self.available else 0.0,
            "median_durable_ms": median_ms(self.durable_ms),
            "usage_recorded": self.usage,
            "input_tokens": self.tokens_in if complete else None,
            "output_tokens": self.tokens_out if complete else None,
            "cost_microusd": cost,
            "cost_per_durable_microusd": (cost // durable) if cost is not None and durable else None,
            "cache_read_tokens": self.cache_read if self.heats and self.cache_known == self.heats else None,
            "cache_write_tokens": self.cache_write if self.heats and self.cache_known == self.heats else None,
            # who computed the cost shown: none when no cost is shown (a heat without usage)
            "cost_source": (None if cost is None else next(iter(self.cost_sources)) if len(self.cost_sources) == 1
                            else "mixed" if self.cost_sources else None),
        }

    def milestone_medians(self) -> dict[str, int]:
        return {k: median_ms(v) for k, v in sorted(self.ms.items())}  # type: ignore[misc]

    def breakdown(self, arena: str) -> ArenaBreakdown:
        return ArenaBreakdown(arena=arena, durable_times_ms=list(self.durable_ms), milestone_passes=self.passed,
                              milestones_available=self.available, milestone_ms=self.milestone_medians(),
                              **self.figures())


def season_standings(state: SeasonState) -> list[SeasonStanding]:
    """Standings of every entrant of ``state``, best first (order in the module docstring)."""
    info = state.info
    if info is None:
        return []
    entrants = list(info.entrants)
    arena_ids = [a.id for a in state.arenas]
    n_ms = {a.id: len(a.milestones) for a in state.arenas}
    total = {e: _Tally() for e in entrants}
    by_arena = {e: {a: _Tally() for a in arena_ids} for e in entrants}
    reached = dict.fromkeys(entrants, 0)
    byes = dict.fromkeys(entrants, 0)
    for rnd in state.rounds.values():
        for e in rnd.byes:
            if e in byes:
                byes[e] += 1
    rated = []
    # Rate in bracket order, not in the order concurrent heats happened to finish: heats of
    # one round are independent, so (round, heat) is canonical and the same seed gives the
    # same ratings however the heats were interleaved.
    finished = sorted(state.heats_in_finish_order(), key=lambda h: h.key)
    spoiled = dict.fromkeys(entrants, 0)
    for heat in state.heats():
        n = sum(1 for a in heat.attempts if a.finished is not None and a.finished.outcome in ("retry", "void"))
        for e in heat.entrants:
            if e in reached:
                reached[e] = max(reached[e], heat.round)
                spoiled[e] += n
    for heat in finished:
        res = heat.result
        if res is None or res.void:
            continue
        att = heat.counted
        stats = att.finished.stats if att and att.finished else {}
        rated.append(dict(res.ranks))
        for e in heat.entrants:
            if e not in total:
                continue
            args = (res.winner == e, res.ranks.get(e), stats.get(e), n_ms.get(heat.arena, 0))
            total[e].add(*args)
            by_arena[e].setdefault(heat.arena, _Tally()).add(*args)
    ratings = rate_heats(entrants, rated)
    fmt = format_class(info.format.get("kind"))
    # every format's champions are the season_finished record's (a league's: its rank 1 when
    # the season finished); whether they head the standings is the format's standings_key
    champions = set(state.finished.champions) if state.finished else set()
    waiting = {e: waiting_label(h) for h in waiting_heats(state) for e in h.entrants}
    rows = []
    for e in entrants:
        t = total[e]
        rating = ratings[e]
        rows.append(SeasonStanding(
            rank=0,
            entrant=e,
            model=info.models.get(e),
            byes=byes[e],
            mean_rank=round(statistics.fmean(t.ranks), 3) if t.ranks else None,
            mu=round(rating.mu, 4),
            sigma=round(rating.sigma, 4),
            ordinal=round(rating.ordinal, 4),
            round_reached=reached[e],
            champion=e in champions,
            milestone_ms={} if state.multi_arena else t.milestone_medians(),
            arenas={a: tally.breakdown(a) for a, tally in by_arena[e].items()},
            infra_failures=spoiled[e],
            cost_limit_microusd=info.cost_limit_microusd,
            waiting=waiting.get(e),
            **t.figures(),
        ))
    def key(r: SeasonStanding) -> tuple:
        return fmt.standings_key(r) + (
            -r.wins,
            -r.durable,
            -r.points,
            r.median_durable_ms is None,
            r.median_durable_ms or 0,
            -r.ordinal,
            r.cost_microusd is None,
            r.cost_microusd or 0,
        )

    rows.sort(key=lambda r: key(r) + (r.entrant,))
    for i, r in enumerate(rows):
        r.rank = rows[i - 1].rank if i and key(rows[i - 1]) == key(r) else i + 1
    return rows
