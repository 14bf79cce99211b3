"""Season standings: one row per entrant, from a reduced :class:`SeasonState`.

Figures per entrant (only **counted**, non-void heats; a void heat's entrants are not
charged with it):

* ``heats`` raced, ``wins`` (heats whose §3.6 winner is this entrant; a tied top has no
  winner), ``durable`` deployments (``durable_at_ms`` present, winner or not),
  ``points`` (sum of passed milestone points), ``coverage`` = passed milestones ÷
  (heats × arena milestones), ``median_durable_ms`` (the upper median, element
  ``len // 2`` of the sorted times, as upstream's series, §7.1), ``mean_rank``;
* ``input_tokens``, ``output_tokens``, ``cost_microusd``: sums, **null unless usage was
  recorded in every heat** (usage is "unavailable", never zero — §7.1);
  ``cost_per_durable_microusd`` = cost ÷ durable when both are known and durable > 0;
* rating ``mu``, ``sigma``, ``ordinal`` (OpenSkill Plackett–Luce, :mod:`.ratings`);
* ``milestone_ms``: milestone id → median ms (upper median) to pass it, over heats where
  it passed (for the time-to-milestone chart);
* knockout: ``round_reached`` (last round raced) and ``champion``.

Tie-break order (documented; first difference decides):

1. knockout only: champion first, then the later ``round_reached``;
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

from aoe_tui.replay.season_reducer import SeasonState
from aoe_tui.season.ratings import rate_heats

__all__ = ["SeasonStanding", "season_standings", "upper_median"]


def upper_median(values: list[int]) -> int | None:
    """Element ``len // 2`` of the sorted values, or None (upstream series rule, §7.1)."""
    if not values:
        return None
    return sorted(values)[len(values) // 2]


@dataclass
class SeasonStanding:
    """One standings row (see the module docstring for every field; times in ms)."""

    rank: int
    entrant: str
    model: str | None
    heats: int
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

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return asdict(self)


def season_standings(state: SeasonState) -> list[SeasonStanding]:
    """Standings of every entrant of ``state``, best first (order in the module docstring)."""
    info = state.info
    if info is None:
        return []
    entrants = list(info.entrants)
    n_ms = len(info.milestones)
    acc: dict[str, dict[str, Any]] = {
        e: {"heats": 0, "wins": 0, "durable": 0, "points": 0, "passed": 0, "durable_ms": [], "ranks": [],
            "usage": 0, "in": 0, "out": 0, "cost": 0, "ms": {}, "round": 0}
        for e in entrants
    }
    rated = []
    # Rate in bracket order, not in the order concurrent heats happened to finish: heats of
    # one round are independent, so (round, heat) is canonical and the same seed gives the
    # same ratings however the heats were interleaved.
    finished = sorted(state.heats_in_finish_order(), key=lambda h: h.key)
    for heat in state.heats():
        for e in heat.entrants:
            if e in acc:
                acc[e]["round"] = max(acc[e]["round"], heat.round)
    for heat in finished:
        res = heat.result
        if res is None or res.void:
            continue
        att = heat.counted
        stats = att.finished.stats if att and att.finished else {}
        rated.append(dict(res.ranks))
        for e in heat.entrants:
            a = acc.get(e)
            if a is None:
                continue
            a["heats"] += 1
            if res.winner == e:
                a["wins"] += 1
            if e in res.ranks:
                a["ranks"].append(res.ranks[e])
            s = stats.get(e)
            if s is None:
                continue
            a["points"] += s.points
            a["passed"] += s.passed
            if s.durable_at_ms is not None:
                a["durable"] += 1
                a["durable_ms"].append(s.durable_at_ms)
            if s.usage_recorded:
                a["usage"] += 1
            a["in"] += s.input_tokens
            a["out"] += s.output_tokens
            a["cost"] += s.cost_microusd
            for mid, ms in s.milestones.items():
                a["ms"].setdefault(mid, []).append(ms)
    ratings = rate_heats(entrants, rated)
    champions = set(state.finished.champions) if state.finished and info.format.get("kind") == "knockout" else set()
    rows = []
    for e in entrants:
        a = acc[e]
        complete = a["heats"] > 0 and a["usage"] == a["heats"]
        cost = a["cost"] if complete else None
        rating = ratings[e]
        rows.append(SeasonStanding(
            rank=0,
            entrant=e,
            model=info.models.get(e),
            heats=a["heats"],
            wins=a["wins"],
            durable=a["durable"],
            points=a["points"],
            coverage=round(a["passed"] / (a["heats"] * n_ms), 4) if a["heats"] and n_ms else 0.0,
            median_durable_ms=upper_median(a["durable_ms"]),
            mean_rank=round(statistics.fmean(a["ranks"]), 3) if a["ranks"] else None,
            usage_recorded=a["usage"],
            input_tokens=a["in"] if complete else None,
            output_tokens=a["out"] if complete else None,
            cost_microusd=cost,
            cost_per_durable_microusd=(cost // a["durable"]) if cost is not None and a["durable"] else None,
            mu=round(rating.mu, 4),
            sigma=round(rating.sigma, 4),
            ordinal=round(rating.ordinal, 4),
            round_reached=a["round"],
            champion=e in champions,
            milestone_ms={k: upper_median(v) for k, v in sorted(a["ms"].items())},  # type: ignore[misc]
        ))
    knockout = info.format.get("kind") == "knockout"

    def key(r: SeasonStanding) -> tuple:
        ko = (not r.champion, -r.round_reached) if knockout else ()
        return ko + (
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
