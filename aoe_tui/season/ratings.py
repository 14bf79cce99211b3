"""OpenSkill Plackett–Luce ratings from heat finishing orders, with ties averaged.

Every finished, non-void heat updates its entrants' ratings once, in the order the heats
finished in ``season.jsonl``. Ranks come from the heat's §3.6 standings (tied entrants
share a rank). Entrants start at OpenSkill's defaults (μ = 25, σ = 25/3); ``ordinal`` =
μ − 3σ (a conservative skill estimate, the figure standings sort by). One OpenSkill
rating per entrant.

**Ties.** openskill 6.2's ``PlackettLuce.rate`` mishandles equal ranks in heats of more
than two (openskill.py #155, #201): with ranks ``1, 1, 3, 4`` the third gains as much as
the co-winners, with ``1, 1, 3, 4, 5`` it ends *above* them, and tied entrants get
different σ. So we never hand the library a tie: a heat whose ranks hold ties is rated as
every strict finishing order that breaks them (each tie group in every order, the
product of their factorials: 2 for one pair, at most 6! for a heat of six), and each
entrant's new μ and σ are the means over those orders (``math.fsum``, so the result does
not depend on the order the entrants were seated in). A tie therefore counts as "each
order equally likely"; a heat without ties is exactly one library call, as before.

Why not the library's other models: BradleyTerryFull and ThurstoneMostellerFull treat
ties as pairwise draws correctly, but they would re-rate every untied heat too (other μ
and σ for the same results), and Plackett–Luce is the model the standings were published
with. Averaging keeps every untied heat's numbers and gives, as the tests check
(``tests/test_season_pure.py``: the golden tie table, 2–5 seats, and property tests):

* a co-winner never ends below (μ or ordinal) an entrant it beat from the same prior;
* entrants with equal ranks and equal priors get equal updates, whatever the seat order.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from openskill.models import PlackettLuce

__all__ = ["Rating", "rate_heats"]


@dataclass(frozen=True)
class Rating:
    """``mu`` (mean skill), ``sigma`` (uncertainty), ``ordinal`` = mu − 3·sigma, and
    ``heats`` = rated heats."""

    mu: float
    sigma: float
    ordinal: float
    heats: int


def _strict_orders(members: Sequence[str], ranks: Mapping[str, int]) -> list[list[str]]:
    """Every finishing order of ``members`` (best first) that breaks their ties: the tie
    groups in rank order, each group in every order."""
    groups: dict[int, list[str]] = {}
    for e in sorted(members, key=lambda e: ranks[e]):
        groups.setdefault(ranks[e], []).append(e)
    per_group = [list(itertools.permutations(g)) for g in groups.values()]
    return [[e for part in combo for e in part] for combo in itertools.product(*per_group)]


def rate_heats(entrants: Sequence[str], heats: Iterable[Mapping[str, int]]) -> dict[str, Rating]:
    """Ratings of ``entrants`` after the heats (each: entrant → 1-based rank), in order.

    Heats with fewer than two entrants are skipped; entrants of a heat not in
    ``entrants`` are ignored. Tied ranks are averaged over their strict orders (see the
    module docstring). Returns one :class:`Rating` per entrant.
    """
    model = PlackettLuce()
    cur = {e: model.rating(name=e) for e in entrants}
    count = {e: 0 for e in entrants}
    for ranks in heats:
        members = [e for e in ranks if e in cur]
        if len(members) < 2:
            continue
        mus: dict[str, list[float]] = {e: [] for e in members}
        sigmas: dict[str, list[float]] = {e: [] for e in members}
        for order in _strict_orders(members, ranks):
            new = model.rate([[cur[e]] for e in order], ranks=list(range(1, len(order) + 1)))
            for e, team in zip(order, new):
                mus[e].append(team[0].mu)
                sigmas[e].append(team[0].sigma)
        for e in members:
            k = len(mus[e])
            cur[e] = model.rating(mu=math.fsum(mus[e]) / k, sigma=math.fsum(sigmas[e]) / k, name=e)
            count[e] += 1
    return {e: Rating(r.mu, r.sigma, r.ordinal(), count[e]) for e, r in cur.items()}
