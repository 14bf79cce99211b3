"""OpenSkill Plackett–Luce ratings from heat finishing orders.

Every finished, non-void heat updates its entrants' ratings once, in the order the heats
finished in ``season.jsonl``. Ranks come from the heat's §3.6 standings (tied entrants
share a rank; OpenSkill treats equal ranks as a draw between them). Entrants start at
OpenSkill's defaults (μ = 25, σ = 25/3); ``ordinal`` = μ − 3σ (a conservative skill
estimate, the figure standings sort by).
"""

from __future__ import annotations

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


def rate_heats(entrants: Sequence[str], heats: Iterable[Mapping[str, int]]) -> dict[str, Rating]:
    """Ratings of ``entrants`` after the heats (each: entrant → 1-based rank), in order.

    Heats with fewer than two entrants are skipped. Returns one :class:`Rating` per entrant.
    """
    model = PlackettLuce()
    cur = {e: model.rating(name=e) for e in entrants}
    count = {e: 0 for e in entrants}
    for ranks in heats:
        members = [e for e in ranks if e in cur]
        if len(members) < 2:
            continue
        new = model.rate([[cur[e]] for e in members], ranks=[ranks[e] for e in members])
        for e, team in zip(members, new):
            cur[e] = team[0]
            count[e] += 1
    return {e: Rating(r.mu, r.sigma, r.ordinal(), count[e]) for e, r in cur.items()}
