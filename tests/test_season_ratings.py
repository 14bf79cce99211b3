"""Ratings with ties (issue #18 item 2): the golden tie table for 2–5 seats and the two
tie properties, against openskill 6.2 Plackett–Luce's tie defects (openskill.py #155,
#201): with ranks 1,1,3,4,5 the library alone puts the third above the co-winners."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aoe_tui.season.ratings import rate_heats

# ranks by seat -> (mu, sigma) by seat, from the default prior (mu 25, sigma 25/3), 4 decimals.
GOLDEN = {
    (1, 1): [(25.0, 8.0659), (25.0, 8.0659)],
    (1, 2): [(27.6354, 8.0659), (22.3646, 8.0659)],
    (1, 1, 3): [(26.7932, 8.1317), (26.7932, 8.1317), (21.4137, 8.0582)],
    (1, 2, 2): [(27.869, 8.2052), (23.5655, 8.0582), (23.5655, 8.0582)],
    (1, 2, 1): [(26.7932, 8.1317), (21.4137, 8.0582), (26.7932, 8.1317)],
    (1, 1, 1): [(25.0, 8.1072), (25.0, 8.1072), (25.0, 8.1072)],
    (1, 1, 3, 4): [(27.1741, 8.2216), (27.1741, 8.2216), (24.6894, 8.0841), (20.9624, 8.0841)],
    (1, 2, 2, 4): [(27.7953, 8.2636), (25.6212, 8.1319), (25.6212, 8.1319), (20.9624, 8.0841)],
    (1, 2, 3, 3): [(27.7953, 8.2636), (26.5529, 8.1796), (22.8259, 8.0841), (22.8259, 8.0841)],
    (1, 1, 1, 4): [(26.3459, 8.1758), (26.3459, 8.1758), (26.3459, 8.1758), (20.9624, 8.0841)],
    (1, 1, 3, 3): [(27.1741, 8.2216), (27.1741, 8.2216), (22.8259, 8.0841), (22.8259, 8.0841)],
    (1, 1, 1, 1): [(25.0, 8.1529)] * 4,
    (1, 1, 3, 4, 5): [(27.2501, 8.2658), (27.2501, 8.2658), (25.7223, 8.1804), (24.0555, 8.1122),
                      (20.722, 8.1122)],
    (1, 2, 2, 2, 5): [(27.6668, 8.291), (25.5371, 8.1777), (25.5371, 8.1777), (25.5371, 8.1777),
                      (20.722, 8.1122)],
    (1, 2, 3, 4, 4): [(27.6668, 8.291), (26.8334, 8.2406), (25.7223, 8.1804), (22.3887, 8.1122),
                      (22.3887, 8.1122)],
    (1, 1, 3, 3, 5): [(27.2501, 8.2658), (27.2501, 8.2658), (24.8889, 8.1463), (24.8889, 8.1463),
                      (20.722, 8.1122)],
    (1, 1, 1, 1, 1): [(25.0, 8.1873)] * 5,
    (1, 2, 3, 4, 5): [(27.6668, 8.291), (26.8334, 8.2406), (25.7223, 8.1804), (24.0555, 8.1122),
                      (20.722, 8.1122)],
}


@pytest.mark.parametrize("ranks", list(GOLDEN), ids=lambda r: "-".join(map(str, r)))
def test_golden_tie_table(ranks):
    seats = [f"s{i}" for i in range(len(ranks))]
    r = rate_heats(seats, [dict(zip(seats, ranks))])
    assert [(round(r[e].mu, 4), round(r[e].sigma, 4)) for e in seats] == GOLDEN[ranks]
    assert all(r[e].heats == 1 for e in seats)


def test_issue_tie_cases():
    """The library's defects, fixed: the third of 1,1,3,4 gains less than the co-winners
    (the library gives all three 25.9318), the third of 1,1,3,4,5 ends below them (the
    library: 26.5556 over 26.0001), and tied entrants get one σ."""
    for ranks in ((1, 1, 3, 4), (1, 1, 3, 4, 5), (1, 1, 1, 4)):
        seats = [f"s{i}" for i in range(len(ranks))]
        r = rate_heats(seats, [dict(zip(seats, ranks))])
        winners = [e for e, k in zip(seats, ranks) if k == 1]
        beaten = [e for e, k in zip(seats, ranks) if k > 1]
        assert len({(r[e].mu, r[e].sigma) for e in winners}) == 1
        assert all(r[w].mu > r[b].mu and r[w].ordinal > r[b].ordinal for w in winners for b in beaten)


def test_untied_heats_are_the_library_call():
    from openskill.models import PlackettLuce

    m = PlackettLuce()
    new = m.rate([[m.rating()] for _ in range(4)], ranks=[2, 4, 1, 3])
    r = rate_heats("abcd", [{"a": 2, "b": 4, "c": 1, "d": 3}])
    assert [(r[e].mu, r[e].sigma) for e in "abcd"] == [(t[0].mu, t[0].sigma) for t in new]


@st.composite
def seasons(draw):
    """A few entrants, some heats of 2–5 with ties, then one last heat."""
    n = draw(st.integers(2, 7))
    entrants = [f"e{i}" for i in range(n)]
    rng = random.Random(draw(st.integers(0, 2**16)))
    heats = []
    for _ in range(draw(st.integers(0, 4))):
        es = rng.sample(entrants, rng.randint(2, min(5, n)))
        heats.append({e: rng.randint(1, len(es)) for e in es})
    last = rng.sample(entrants, rng.randint(2, min(5, n)))
    return entrants, heats, {e: rng.randint(1, len(last)) for e in last}


@settings(max_examples=150, deadline=None)
@given(seasons(), st.randoms(use_true_random=False))
def test_tie_properties(season, rnd):
    """Exactly what holds for the heat ``last`` after any earlier heats: (1) two entrants of
    it with the same prior (μ, σ) and the same rank end with the same rating, whatever the
    seat order; (2) of two with the same prior, the better-ranked ends no lower (μ and
    ordinal)."""
    entrants, heats, last = season
    before = rate_heats(entrants, heats)
    after = rate_heats(entrants, heats + [last])
    shuffled = list(last.items())
    rnd.shuffle(shuffled)
    again = rate_heats(entrants, heats + [dict(shuffled)])
    for a, b in itertools.permutations(last, 2):
        if (before[a].mu, before[a].sigma) != (before[b].mu, before[b].sigma):
            continue
        if last[a] == last[b]:
            assert (after[a].mu, after[a].sigma) == (after[b].mu, after[b].sigma)
        elif last[a] < last[b]:
            assert after[a].mu > after[b].mu and after[a].ordinal >= after[b].ordinal
    assert all((after[e].mu, after[e].sigma) == (again[e].mu, again[e].sigma) for e in entrants)
