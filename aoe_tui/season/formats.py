"""Season formats: pure functions from (entrants, results so far, seed) to the next round.

Nothing here does I/O, reads clocks or uses global randomness: every draw comes from
``random.Random(f"{seed}/{kind}/{round}/...")`` (string seeds hash with SHA-512, so the
schedule is identical for the same seed on every machine and Python run).

Terms: a **round** is a set of heats run in parallel where every active entrant races at
most once; a **heat** seats up to ``heat_size`` entrants (the arena's territory count) on
the arena's territories (**seats**, by territory index); entrants of a round who are not
seated have a **bye**.

Heat sizes and byes (:func:`heat_sizes`): ``n`` entrants are split into
``ceil(n / heat_size)`` heats whose sizes differ by at most one (7 → 3+2+2, 10 → 3+3+2+2).
A heat needs at least ``min_heat_size`` entrants (>= 2; the arena's
``rules.minimum_territories`` unless the season overrides it). When ``n`` cannot be split
that way, the fewest entrants possible get a bye (with ``min_heat_size == heat_size == 3``:
7 → 3+3 and one bye). An unfillable seat is left **empty** — the heat's manifest then has
fewer territories; it is never filled with a fake player.

Seat rotation. A league's draw reads only who raced, so at round 1 it knows every heat of
the season and seats them all at once (:func:`_season_seats`): a proper edge colouring
(:func:`_colour_seats`, Kőnig) of the bipartite multigraph heats × entrant **cycles** (runs
of ``heat_size`` consecutive heats of one entrant), seats as colours. So, always (2–40
entrants × 1–6 heats each are checked exhaustively): every entrant sits on each seat at most
once per cycle, and an entrant with ``T`` heats on ``s`` seats ends with ``T mod s`` seats
``ceil(T / s)`` times and the others ``floor(T / s)`` times (counts within one at every
point). An entrant keeps the seat of its previous heat only from one cycle to the next, and
only when neither Kempe-chain swaps, other colourings nor the cycle search
(:func:`_plan_seats`, budget :data:`SEASON_BUDGET`) removed it (measured, heats of 3 at one
seed: 73 of the 468 leagues of 2–40 entrants × 1–6 heats, min 2 or 3, have such a repeat;
heats of 4: none; heats of 2: 152 of 234, where only strictly alternating seats avoid it).
Each later round recomputes that plan (pure, cached) and follows it; a season folder an older version started (its heats seated otherwise) goes on
as that version did: the rest is planned from its history (:func:`_plan_seats`: cycle plan,
then one that only *ends* balanced, then the next two rounds, then this round alone).
Failing those, and always in a knockout (whose heats depend on results), each heat is
seated on its own (:func:`assign_seats`) minimising, in order: (1) entrants who keep the
seat of their previous heat, (2) entrants whose seat counts would differ by more than one,
(3) pairs of entrants left lacking the same single seat of their cycle, (4) the sum of how
often each entrant already sat on its new seat, (5) the lexicographic seat tuple. When an
entrant must keep its seat (e.g. all three last sat on seat 1), (1) is the minimum
possible, never more.

Byes. In both formats an entrant who had a bye in the previous round gets another only when
the round's byes outnumber the entrants who raced the previous round (no other choice of
byes exists then); standings count each entrant's byes.

Formats:

* :class:`Knockout` — round 1 seats everyone; the top ``advance`` of each heat go on (a
  heat of ``k`` entrants advances at most ``k - 1``, so every heat eliminates someone),
  byes go on too. Ties at the cut are broken by seed order (entrant order in the season
  file). If fewer than ``min_heat_size`` (but more than one) would go on, the best
  eliminated entrants (rank in their heat, then seed order) return as **lucky losers**.
  When the active entrants fit in one heat, that heat is the **final**; its rank 1 is the
  champion (tied rank 1 → co-champions). Byes go to entrants without a bye in the previous
  round, then with the fewest byes so far, then by draw. Heats are dealt snake-wise by the
  previous round's rank (then draw), so previous heat winners meet late.
  A **void** heat (every attempt spoiled by the infrastructure) decides nothing: while the
  last round has one (:meth:`Format.waiting_on`), no round outcome, next round or champion
  is computed (:class:`VoidHeatPending`); the season waits on it until ``aoe run
  --retry-void`` re-runs it (its entrants are neither eliminated nor advanced by seed order).
* :class:`League` — every entrant races ``heats_per_entrant`` heats. Each round seats the
  entrants that still need heats; byes go to those who raced the previous round, then those
  furthest ahead, then fewest byes, then draw. Opponents rotate: heats are filled greedily
  from a seeded order, each slot taking (from a window of the next 16 candidates) the one who has met the heat's members least
  often; then members are swapped between heats while that lowers repeat meetings
  (the greedy fill can be left with forced repeats in its last heats), until the round is
  **swap-stable**: no exchange of two entrants between two of its heats lowers its number
  of repeat meetings (pairs in one heat who met in an earlier round). That is the whole
  rotation guarantee; it is not a global optimum, and some repeats are forced (6 entrants
  in heats of 3: any round-2 heat holds two who met in round 1). If fewer than
  ``min_heat_size`` entrants still need a heat, the fewest-raced
  others fill it (they race one heat more than the quota). A **void** heat (every attempt
  spoiled by the infrastructure) counts as raced, so a league always ends.

Registry: :data:`FORMATS` maps each ``[format] kind`` to its :class:`Format` subclass; it is
the one list of formats. A class is added with :func:`register_format`; its
``config_model`` is the ``[format]`` table's model, installed into the season file's
validation (:func:`aoe_tui.domain.season_file.install_kinds`) when this module is imported. What
differs between formats outside the draw — a round's outcome, the champions, the
standings' sort — is asked of the class (:meth:`Format.round_outcome`,
:meth:`Format.champions`, :meth:`Format.standings_key`),
so no other module tests for a format's kind.
"""

from __future__ import annotations

import functools
import itertools
import math
import random
import sys
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import ValidationError

from aoe_tui.domain.season_file import KnockoutFormat, LeagueFormat, SectionConfig, install_kinds
from aoe_tui.domain.tomlfile import schema_problems
from aoe_tui.errors import AoeError

__all__ = [
    "FORMATS",
    "Format",
    "FormatConfigError",
    "VoidHeatPending",
    "HeatPlan",
    "HeatResult",
    "Knockout",
    "League",
    "RoundPlan",
    "assign_seats",
    "format_class",
    "heat_sizes",
    "make_format",
    "register_format",
]


@dataclass(frozen=True)
class HeatPlan:
    """One scheduled heat: ``round`` and ``heat`` are 1-based; ``seats[i]`` is the entrant on
    the arena's territory ``i`` (manifest order) or ``None`` for an empty seat."""

    round: int
    heat: int
    seats: tuple[str | None, ...]

    @property
    def entrants(self) -> tuple[str, ...]:
        """The seated entrants, in seat order."""
        return tuple(e for e in self.seats if e is not None)

    def to_json(self) -> dict:
        """``{"round", "heat", "seats"}`` (seats as a list with nulls)."""
        return {"round": self.round, "heat": self.heat, "seats": list(self.seats)}


@dataclass(frozen=True)
class RoundPlan:
    """The heats of one round, the entrants with a ``byes`` this round, and whether it is
    the knockout ``final``."""

    round: int
    heats: tuple[HeatPlan, ...]
    byes: tuple[str, ...] = ()
    final: bool = False

    def to_json(self) -> dict:
        """JSON-ready dict (used by ``round_scheduled`` in ``season.jsonl``)."""
        return {
            "round": self.round,
            "heats": [h.to_json() for h in self.heats],
            "byes": list(self.byes),
            "final": self.final,
        }

    @staticmethod
    def from_json(data: Mapping) -> RoundPlan:
        """Inverse of :meth:`to_json`."""
        return RoundPlan(
            round=int(data["round"]),
            heats=tuple(HeatPlan(int(h["round"]), int(h["heat"]), tuple(h["seats"])) for h in data["heats"]),
            byes=tuple(data.get("byes", ())),
            final=bool(data.get("final", False)),
        )


@dataclass(frozen=True)
class HeatResult:
    """The counted outcome of one heat: ``ranks`` maps each seated entrant to its 1-based
    finishing rank (tied entrants share a rank, §3.6). ``void`` is True when every attempt
    was spoiled by the infrastructure (then ``ranks`` is all 1s and carries no order)."""

    round: int
    heat: int
    seats: tuple[str | None, ...]
    ranks: Mapping[str, int] = field(default_factory=dict)
    void: bool = False

    @property
    def entrants(self) -> tuple[str, ...]:
        return tuple(e for e in self.seats if e is not None)


def heat_sizes(n: int, heat_size: int, min_heat_size: int = 2) -> tuple[list[int], int]:
    """Split ``n`` entrants into heats: returns ``(sizes, byes)`` with ``sum(sizes) + byes == n``.

    Sizes are in ``[min_heat_size, heat_size]``, as even as possible, largest first; ``byes``
    is the smallest count that makes that possible (``([], n)`` when no heat can be formed).
    """
    if heat_size < 1 or min_heat_size < 1:
        raise ValueError("heat sizes must be positive")
    min_heat_size = min(min_heat_size, heat_size)
    for byes in range(n + 1):
        m = n - byes
        if m < min_heat_size:
            break
        k = math.ceil(m / heat_size)
        if m // k >= min_heat_size:
            base, extra = divmod(m, k)
            return [base + 1] * extra + [base] * (k - extra), byes
    return [], n


def _rng(seed: int, *parts: object) -> random.Random:
    return random.Random("/".join(str(p) for p in (seed, *parts)))


def _seat_history(results: Sequence[HeatResult]) -> tuple[dict[str, int], dict[str, Counter]]:
    last: dict[str, int] = {}
    used: dict[str, Counter] = defaultdict(Counter)
    for r in sorted(results, key=lambda r: (r.round, r.heat)):
        for i, e in enumerate(r.seats):
            if e is not None:
                last[e] = i
                used[e][i] += 1
    return last, used


def _seat_key(members: Sequence[str], perm: Sequence[int], heat_size: int, last_seat: Mapping[str, int],
              seat_use: Mapping[str, Counter]) -> tuple:
    """The order of preference of seating ``members`` on seats ``perm`` (smaller is better):
    ``(keep, over, clash, use)`` — members keeping their previous seat; members whose seat
    counts would then differ by more than one; pairs of members left needing the same one
    seat next (each then lacks exactly one seat of its current cycle of ``heat_size``
    heats, the same one); the summed earlier uses of the chosen seats."""
    keep = over = use = 0
    need: list[int] = []
    for e, s in zip(members, perm):
        used = seat_use.get(e) or Counter()
        keep += last_seat.get(e) == s
        use += used[s]
        counts = [used[j] + (j == s) for j in range(heat_size)]
        low = min(counts)
        over += max(counts) - low > 1
        lacking = [j for j, c in enumerate(counts) if c == low]
        if len(lacking) == 1:
            need.append(lacking[0])
    clash = len(need) - len(set(need))
    return (keep, over, clash, use)


def assign_seats(
    members: Sequence[str], heat_size: int, last_seat: Mapping[str, int], seat_use: Mapping[str, Counter]
) -> tuple[str | None, ...]:
    """Seat ``members`` on ``heat_size`` seats (see the module docstring for the order of
    preference); returns the seats tuple with ``None`` for empty seats. ``last_seat``:
    entrant → seat of its previous heat; ``seat_use``: entrant → Counter of seat → heats.

    Exhaustive for heats up to 6 seats, greedy beyond.
    """
    k = len(members)
    if k > heat_size:
        raise ValueError(f"{k} entrants do not fit {heat_size} seats")
    if heat_size <= 6:
        perm = min(itertools.permutations(range(heat_size), k),
                   key=lambda p: (_seat_key(members, p, heat_size, last_seat, seat_use), p))
    else:
        free = set(range(heat_size))
        chosen = []
        for e in members:
            s = min(free, key=lambda s: (last_seat.get(e) == s, seat_use.get(e, Counter())[s], s))
            free.discard(s)
            chosen.append(s)
        perm = tuple(chosen)
    seats: list[str | None] = [None] * heat_size
    for e, s in zip(members, perm):
        seats[s] = e
    return tuple(seats)


class Format:
    """Base of season formats. ``heat_size`` = the arena's territory count; ``min_heat_size``
    >= 2 (see :func:`heat_sizes`).

    :meth:`next_round` is pure: the same ``(entrants, results, seed)`` always give the same
    plan. ``results`` must hold a :class:`HeatResult` for every heat of every earlier round.

    A subclass sets ``kind`` and ``config_model`` (its ``[format]`` model, a
    :class:`~aoe_tui.domain.season_file.SectionConfig`), implements :meth:`from_config` and
    :meth:`next_round`, overrides what differs of :meth:`round_outcome`,
    :meth:`champions` and :meth:`standings_key` (the defaults are a
    league's: nobody advances or is out, the standings decide the champion), and is added to
    :data:`FORMATS` with :func:`register_format`.
    """

    kind: ClassVar[str] = "format"
    config_model: ClassVar[type[SectionConfig]] = SectionConfig
    #: True when a round's draw depends on earlier heats' ranks (knockout: who advanced);
    #: ``aoe run --retry-void`` then re-runs only void heats of the last round (a season
    #: waits on those, :meth:`waiting_on`; in a folder an older version ran, later rounds
    #: may have been drawn on earlier void results, which then stand).
    draws_on_ranks: ClassVar[bool] = False

    @classmethod
    def waiting_on(cls, results: Sequence[HeatResult]) -> list[HeatResult]:
        """The void heats of ``results`` that a later draw, a round's outcome or the
        champions would be decided from (in (round, heat) order): until they are re-run
        (``aoe run --retry-void``) the season waits on them. ``[]`` for a format where a
        void heat decides nothing (a league: it counts as raced, for nobody)."""
        return []

    def __init__(self, heat_size: int = 3, min_heat_size: int = 2) -> None:
        if heat_size < 2:
            raise ValueError("a heat needs at least 2 seats")
        self.heat_size = heat_size
        self.min_heat_size = max(2, min(min_heat_size, heat_size))

    def next_round(self, entrants: Sequence[str], results: Sequence[HeatResult], seed: int) -> RoundPlan | None:
        """The next round's plan, or ``None`` when the season is over."""
        raise NotImplementedError

    @classmethod
    def from_config(cls, config: Any, heat_size: int, min_heat_size: int) -> Format:
        """The format for a validated ``config_model`` instance."""
        raise NotImplementedError

    def round_outcome(self, entrants: Sequence[str], results: Sequence[HeatResult], racing: Sequence[str],
                      final: bool) -> tuple[list[str], list[str]]:
        """``(advanced, eliminated)`` among ``racing`` (the round's seated entrants, then its
        byes) once every heat of the round is in ``results``; ``final``: the round was the
        final. For ``round_finished``; both empty when rounds eliminate nobody."""
        return [], []

    def champions(self, entrants: Sequence[str], results: Sequence[HeatResult]) -> list[str] | None:
        """The champions once :meth:`next_round` returned None; None = the standings decide
        (their rank 1)."""
        return None

    @classmethod
    def standings_key(cls, row: Any) -> tuple:
        """The first part of the standings' sort key of ``row`` (a
        :class:`aoe_tui.season.season_standings.SeasonStanding`; ascending, before wins, points,
        ...); ``()`` = the common order alone."""
        return ()

    def next_heats(self, entrants: Sequence[str], results: Sequence[HeatResult], seed: int) -> list[HeatPlan]:
        """The next round's heats (``[]`` when the season is over)."""
        plan = self.next_round(entrants, results, seed)
        return list(plan.heats) if plan else []

    def _build(self, rnd: int, groups: list[list[str]], byes: list[str], results: Sequence[HeatResult],
               final: bool = False) -> RoundPlan:
        last, used = _seat_history(results)
        heats = tuple(
            HeatPlan(rnd, i + 1, assign_seats(g, self.heat_size, last, used)) for i, g in enumerate(groups)
        )
        return RoundPlan(rnd, heats, tuple(byes), final)


def _rounds(results: Sequence[HeatResult]) -> dict[int, list[HeatResult]]:
    by: dict[int, list[HeatResult]] = defaultdict(list)
    for r in results:
        by[r.round].append(r)
    for v in by.values():
        v.sort(key=lambda r: r.heat)
    return dict(sorted(by.items()))


FORMATS: dict[str, type[Format]] = {}


def register_format(cls: type[Format]) -> type[Format]:
    """Add ``cls`` to :data:`FORMATS` under ``cls.kind`` (a class decorator; returns ``cls``).

    Raises ValueError: another class has that kind, or ``config_model`` is the base model.
    """
    if FORMATS.get(cls.kind, cls) is not cls:
        raise ValueError(f"format {cls.kind!r} is already registered")
    if cls.config_model is SectionConfig:
        raise ValueError(f"format {cls.kind!r}: set config_model to its [format] model")
    FORMATS[cls.kind] = cls
    return cls


def format_class(kind: object) -> type[Format]:
    """The class of ``kind``; :class:`Format` (a league's outcome and order) for a kind no
    longer registered, so an old season folder still shows standings."""
    return FORMATS.get(kind, Format) if isinstance(kind, str) else Format


install_kinds("format", lambda: {k: c.config_model for k, c in FORMATS.items()})


@register_format
class Knockout(Format):
    """Knockout (see the module docstring). ``advance`` = entrants going on per heat."""

    kind = "knockout"
    config_model = KnockoutFormat
    draws_on_ranks = True

    def __init__(self, advance: int = 2, heat_size: int = 3, min_heat_size: int = 2) -> None:
        super().__init__(heat_size, min_heat_size)
        if advance < 1:
            raise ValueError("advance must be at least 1")
        self.advance = advance

    @classmethod
    def from_config(cls, config: Any, heat_size: int, min_heat_size: int) -> Knockout:
        return cls(config.advance, heat_size, min_heat_size)

    def round_outcome(self, entrants: Sequence[str], results: Sequence[HeatResult], racing: Sequence[str],
                      final: bool) -> tuple[list[str], list[str]]:
        """Who of the round's racers and byes goes on (nobody after the final)."""
        if final:
            return [], []
        active, _, _, _, _ = self.walk(entrants, results)
        return [e for e in racing if e in active], [e for e in racing if e not in active]

    @classmethod
    def standings_key(cls, row: Any) -> tuple:
        """Champions first, then the later round reached."""
        return (not row.champion, -row.round_reached)

    @classmethod
    def waiting_on(cls, results: Sequence[HeatResult]) -> list[HeatResult]:
        """The void heats of the last round in ``results``: who goes on from them (and the
        next round's draw, or the champion of a void final) is unknown until they race.
        Void heats of earlier rounds are not waited on: a season folder an older version
        ran drew its later rounds from them (by seed order, :meth:`_order`), and those
        rounds stand."""
        rounds = _rounds(results)
        return [h for h in rounds[max(rounds)] if h.void] if rounds else []

    def _order(self, heat: HeatResult, seed_index: Mapping[str, int]) -> list[str]:
        if heat.void:  # only an earlier round of an older season folder (see waiting_on)
            return sorted(heat.entrants, key=lambda e: seed_index[e])
        return sorted(heat.entrants, key=lambda e: (heat.ranks.get(e, 10**6), seed_index[e]))

    def walk(self, entrants: Sequence[str], results: Sequence[HeatResult]) -> tuple[list[str], int, bool, Counter, dict[str, int]]:
        """Replay the bracket: ``(active entrants for the next round, next round number,
        finished, bye counts, previous-round rank of each active entrant)``.

        Raises :class:`VoidHeatPending` when the last round of ``results`` has a void heat
        (:meth:`waiting_on`): nobody goes on or is out from a heat that did not race."""
        blocked = self.waiting_on(results)
        if blocked:
            raise VoidHeatPending(blocked)
        seed_index = {e: i for i, e in enumerate(entrants)}
        active = list(entrants)
        byes: Counter = Counter()
        prev_rank: dict[str, int] = {}
        rnd = 1
        for rnd_no, heats in _rounds(results).items():
            seated = [e for h in heats for e in h.entrants]
            final = len(active) <= self.heat_size and len(heats) == 1
            for e in active:
                if e not in seated:
                    byes[e] += 1
            if final:
                return [], rnd_no + 1, True, byes, prev_rank
            going: list[str] = []
            out: list[tuple[int, int, str]] = []
            prev_rank = {}
            for h in heats:
                order = self._order(h, seed_index)
                k = min(self.advance, len(order) - 1)
                going += order[:k]
                for e in order[:k]:
                    prev_rank[e] = 1 if h.void else h.ranks.get(e, 1)
                out += [(1 if h.void else h.ranks.get(e, 1), seed_index[e], e) for e in order[k:]]
            for e in active:
                if e not in seated:
                    going.append(e)
                    prev_rank[e] = 1
            if 1 < len(going) < self.min_heat_size:
                out.sort()
                for rank, _, e in out[: self.min_heat_size - len(going)]:
                    going.append(e)
                    prev_rank[e] = rank
            active = sorted(going, key=lambda e: seed_index[e])
            rnd = rnd_no + 1
        return active, rnd, len(active) <= 1, byes, prev_rank

    def next_round(self, entrants: Sequence[str], results: Sequence[HeatResult], seed: int) -> RoundPlan | None:
        active, rnd, finished, byes, prev_rank = self.walk(entrants, results)
        if finished or len(active) < 2:
            return None
        rng = _rng(seed, self.kind, rnd)
        draw = {e: rng.random() for e in active}
        if len(active) <= self.heat_size:
            return self._build(rnd, [sorted(active, key=lambda e: draw[e])], [], results, final=True)
        sizes, nbyes = heat_sizes(len(active), self.heat_size, self.min_heat_size)
        rounds = _rounds(results)
        seated_last = {e for h in rounds[max(rounds)] for e in h.entrants} if rounds else set(active)
        bye_list = sorted(active, key=lambda e: (e not in seated_last, byes[e], draw[e]))[:nbyes]
        racing = sorted((e for e in active if e not in bye_list), key=lambda e: (prev_rank.get(e, 1), draw[e]))
        groups: list[list[str]] = [[] for _ in sizes]
        # snake deal: heat order 0..k-1, k-1..0, ... skipping full heats
        order = list(range(len(sizes)))
        idx = 0
        forward = True
        for e in racing:
            while True:
                seq = order if forward else order[::-1]
                h = seq[idx]
                idx += 1
                if idx == len(seq):
                    idx, forward = 0, not forward
                if len(groups[h]) < sizes[h]:
                    groups[h].append(e)
                    break
        return self._build(rnd, groups, sorted(bye_list, key=list(entrants).index), results)

    def champions(self, entrants: Sequence[str], results: Sequence[HeatResult]) -> list[str]:
        """Rank-1 entrants of the final (empty until the final is in ``results``); a lone
        survivor is the champion."""
        active, _, finished, _, _ = self.walk(entrants, results)
        if not finished:
            return []
        if active:
            return list(active)
        last = _rounds(results)
        heat = last[max(last)][0]
        if heat.void:
            return []
        return sorted(e for e in heat.entrants if heat.ranks.get(e) == 1)


@register_format
class League(Format):
    """League (see the module docstring). ``heats_per_entrant`` >= 1."""

    kind = "league"
    config_model = LeagueFormat
    WINDOW = 16

    def __init__(self, heats_per_entrant: int = 3, heat_size: int = 3, min_heat_size: int = 2) -> None:
        super().__init__(heat_size, min_heat_size)
        if heats_per_entrant < 1:
            raise ValueError("heats_per_entrant must be at least 1")
        self.heats_per_entrant = heats_per_entrant

    @classmethod
    def from_config(cls, config: Any, heat_size: int, min_heat_size: int) -> League:
        return cls(config.heats_per_entrant, heat_size, min_heat_size)

    def next_round(self, entrants: Sequence[str], results: Sequence[HeatResult], seed: int) -> RoundPlan | None:
        rounds = _rounds(results)
        rnd = (max(rounds) + 1) if rounds else 1
        history = [[h.entrants for h in heats] for heats in rounds.values()]
        drawn = self._draw(entrants, history, seed, rnd)
        if drawn is None:
            return None
        groups, bye_list = drawn
        # The rest of the season's heats: a league's draw reads only who raced, so the
        # future rounds are known now (unless the recorded heats differ from the draw).
        future: list[list[list[str]]] = []
        sim = history + [[tuple(g) for g in groups]]
        for _ in range(2 * self.heats_per_entrant + 4):
            nxt = self._draw(entrants, sim, seed, rnd + len(sim) - len(history))
            if nxt is None:
                break
            future.append(nxt[0])
            sim.append([tuple(g) for g in nxt[0]])
        # The season's seats (:func:`_season_seats`), used when the heats already run sat as
        # it says (always, for a season this code started); else (a season folder an older
        # version started) the rest is planned as that version did, below.
        index = {e: i for i, e in enumerate(entrants)}
        done = [r for _, heats in rounds.items() for r in heats]
        season = [g for r in history for g in r] + [list(g) for g in groups] + [g for r in future for g in r]
        whole = _season_seats(tuple(tuple(sorted(g, key=index.__getitem__)) for g in season), self.heat_size)
        if [r.seats for r in done] == list(whole[:len(done)]):
            mine = whole[len(done):len(done) + len(groups)]
            plan = tuple(HeatPlan(rnd, i + 1, mine[i]) for i in range(len(groups)))
            return RoundPlan(rnd, plan, tuple(e for e in entrants if e in bye_list))
        last, used = _seat_history(results)
        # The whole rest of the season if the search finds it, else the next rounds only.
        for ahead in sorted({len(future), 2, 1, 0}, reverse=True):
            if ahead > len(future):
                continue
            heats = [list(g) for g in groups] + [g for r in future[:ahead] for g in r]
            planned = _plan_seats(heats, self.heat_size, last, used)
            if planned is None and ahead == len(future):
                planned = _plan_seats(heats, self.heat_size, last, used, cycles=False)
            if planned is not None:
                plan = tuple(HeatPlan(rnd, i + 1, planned[i]) for i in range(len(groups)))
                return RoundPlan(rnd, plan, tuple(e for e in entrants if e in bye_list))
        return self._build(rnd, groups, [e for e in entrants if e in bye_list], results)

    def _draw(self, entrants: Sequence[str], history: Sequence[Sequence[Sequence[str]]], seed: int,
              rnd: int) -> tuple[list[list[str]], set[str]] | None:
        """Round ``rnd``'s heats (members, unseated) and byes after the rounds ``history``
        (each: its heats' entrants), or None when the league is over."""
        count: Counter = Counter()
        met: dict[str, Counter] = defaultdict(Counter)
        byes: Counter = Counter()
        last_byes: set[str] = set()
        for heats in history:
            seated = set()
            for es in heats:
                seated.update(es)
                for e in es:
                    count[e] += 1
                    for o in es:
                        if o != e:
                            met[e][o] += 1
            last_byes = set()
            for e in entrants:
                if e not in seated and count[e] < self.heats_per_entrant:
                    byes[e] += 1
                    last_byes.add(e)
        need = [e for e in entrants if count[e] < self.heats_per_entrant]
        if not need or len(entrants) < self.min_heat_size:
            return None
        rng = _rng(seed, self.kind, rnd)
        draw = {e: rng.random() for e in entrants}
        pool = list(need)
        if len(pool) < self.min_heat_size:
            others = sorted((e for e in entrants if e not in need), key=lambda e: (count[e], draw[e]))
            pool += others[: self.min_heat_size - len(pool)]
        sizes, nbyes = heat_sizes(len(pool), self.heat_size, self.min_heat_size)
        bye_list = set(sorted(pool, key=lambda e: (e in last_byes, -count[e], byes[e], draw[e]))[:nbyes])
        order = sorted((e for e in pool if e not in bye_list), key=lambda e: draw[e])
        groups: list[list[str]] = []
        for size in sizes:
            g = [order.pop(0)]
            while len(g) < size:
                window = order[: self.WINDOW]
                best = min(range(len(window)), key=lambda i: (sum(met[window[i]][m] for m in g), i))
                g.append(order.pop(best))
            groups.append(g)
        _improve(groups, met)
        return groups, bye_list


#: Search budget of :func:`_plan_seats` (heats tried); beyond it the round is seated greedily.
PLAN_BUDGET = 10_000
#: Variants of :func:`_colour_seats` :func:`_season_seats` tries (it keeps the first with the
#: fewest repeats).
COLOURINGS = 6
#: Search budget of :func:`_season_seats` when the colouring leaves repeats (heats tried).
SEASON_BUDGET = 300


@functools.lru_cache(maxsize=16)
def _season_seats(heats: tuple[tuple[str, ...], ...], heat_size: int) -> tuple[tuple[str | None, ...], ...]:
    """The seats of a league's whole season, ``heats`` = every heat's members (each heat's
    in entrant order) in race order, from its first round: the proper colouring of
    :func:`_colour_seats` (seat counts always balanced: floor/ceil of ``T / heat_size``;
    of its first :data:`COLOURINGS` variants, the first with the fewest repeats), unless it leaves an entrant on the seat of its previous heat and :func:`_plan_seats`
    (cycles, within :data:`SEASON_BUDGET`) finds a plan where nobody does. A pure function
    of its arguments (cached: every round of a season asks it again)."""
    coloured, repeats = _colour_seats(heats, heat_size)
    for variant in range(1, COLOURINGS):
        if not repeats:
            break
        other, fewer = _colour_seats(heats, heat_size, variant)
        if fewer < repeats:
            coloured, repeats = other, fewer
    if repeats and heat_size <= 6:
        found = _plan_seats(heats, heat_size, {}, {}, budget=SEASON_BUDGET)
        if found is not None:
            return tuple(found)
    return tuple(coloured)


def _plan_seats(heats: Sequence[Sequence[str]], heat_size: int, last_seat: Mapping[str, int],
                seat_use: Mapping[str, Counter], cycles: bool = True,
                budget: int | None = None) -> list[tuple[str | None, ...]] | None:
    """Seat ``heats`` (members, in the order they race) after the history ``last_seat`` /
    ``seat_use`` so that every entrant sits, in each of its cycles of ``heat_size``
    consecutive heats, on each seat at most once and never on the seat of its previous
    heat: each member takes a seat among its least-used ones other than its last. With
    ``cycles=False`` only the end counts: each member takes a seat other than its last whose
    count may still end within one of its others (each seat at most ``ceil(T / heat_size)``
    times, at most ``T mod heat_size`` seats that often, ``T`` = its heats so far and in
    ``heats``). A depth-first search (seatings of a heat in :func:`_seat_key` order); returns the seats
    of every heat, or None when there is none (or beyond :data:`PLAN_BUDGET`)."""
    last = dict(last_seat)
    used = {e: Counter(c) for e, c in seat_use.items()}
    out: list[tuple[str | None, ...]] = []
    budget = [PLAN_BUDGET if budget is None else budget]

    total: Counter = Counter({e: sum(c.values()) for e, c in used.items()})
    for members in heats:
        total.update(members)

    def allowed(e: str) -> set[int]:
        c = used.get(e) or Counter()
        if cycles:
            low = min(c[j] for j in range(heat_size))
            return {j for j in range(heat_size) if c[j] == low and j != last.get(e)}
        q, rem = divmod(total[e], heat_size)
        full = sum(1 for j in range(heat_size) if c[j] > q)
        return {j for j in range(heat_size)
                if j != last.get(e) and (c[j] < q or (c[j] == q and full < rem))}

    # Conflict-directed backjumping: a heat with no seating blames the earlier heats of its
    # members; the search returns to the latest of those, skipping unrelated heats.
    before: list[set[int]] = []
    seen: dict[str, list[int]] = {}
    for i, members in enumerate(heats):
        before.append({j for e in members for j in seen.get(e, ())})
        for e in members:
            seen.setdefault(e, []).append(i)
    SOLVED: set[int] = set()
    OUT_OF_BUDGET: set[int] = {-1}

    def go(i: int) -> set[int]:
        """SOLVED (the empty set, with ``out`` filled) or the conflict set of heat ``i``."""
        if i == len(heats):
            return SOLVED
        budget[0] -= 1
        if budget[0] < 0:
            return OUT_OF_BUDGET
        members = list(heats[i])
        ok = [allowed(e) for e in members]
        perms = [p for p in itertools.permutations(range(heat_size), len(members))
                 if all(s in a for s, a in zip(p, ok))]
        perms.sort(key=lambda p: (_seat_key(members, p, heat_size, last, used), p))
        conflict = set(before[i])
        for p in perms:
            saved = [(e, last.get(e)) for e in members]
            for e, s in zip(members, p):
                last[e] = s
                used.setdefault(e, Counter())[s] += 1
            seats: list[str | None] = [None] * heat_size
            for e, s in zip(members, p):
                seats[s] = e
            out.append(tuple(seats))
            got = go(i + 1)
            if got is SOLVED or got is OUT_OF_BUDGET:
                return got
            out.pop()
            for (e, prev), s in zip(saved, p):
                used[e][s] -= 1
                if prev is None:
                    del last[e]
                else:
                    last[e] = prev
            if i not in got:
                return got
            conflict |= got - {i}
        return conflict

    if heat_size > 6:
        return None
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, len(heats) + 200))
    try:
        return out if go(0) is SOLVED else None
    finally:
        sys.setrecursionlimit(limit)


def _colour_seats(heats: Sequence[Sequence[str]], heat_size: int,
                  variant: int = 0) -> tuple[list[tuple[str | None, ...]], int]:
    """Seat ``heats`` (members, in race order, no history) by a proper edge colouring.

    The bipartite multigraph: one node per heat, one per **cycle** of each entrant (its own
    heats ``heat_size * k`` .. ``heat_size * k + heat_size - 1``, in race order); an edge per
    seated member joins its heat and its cycle; colours are seats. Every node has degree at
    most ``heat_size``, so a proper ``heat_size``-edge-colouring exists (Kőnig) and is built
    edge by edge with alternating-path flips. Proper means: a heat's members sit on distinct
    seats, and an entrant sits on each seat at most once per cycle — so every full cycle
    uses each seat once and each entrant's seat counts end (and stay, at every point) within
    one: with ``T`` heats on ``s`` seats, ``T mod s`` seats ``ceil(T / s)`` times and the
    others ``floor(T / s)`` times. That always holds.

    Keeping the previous seat can only happen between two cycles (last heat of one, first of
    the next); those repeats are then lowered by Kempe-chain swaps (swapping two seats along
    an alternating chain keeps the colouring proper), each accepted only when it lowers the
    count, until none does. ``variant`` (>= 0) varies the colouring's choices (which free
    seat an edge takes, which path is flipped); every variant is balanced. Returns ``(seats
    of every heat, repeats left)``; deterministic.
    """
    s = heat_size
    ends: list[tuple[tuple, tuple]] = []  # edge -> (heat node, cycle node)
    who: list[tuple[int, str]] = []
    pos: Counter = Counter()
    prev: dict[int, int] = {}
    last_edge: dict[str, int] = {}
    for i, members in enumerate(heats):
        for e in members:
            j = len(ends)
            ends.append((("h", i), ("c", e, pos[e] // s)))
            who.append((i, e))
            pos[e] += 1
            if e in last_edge:
                prev[j] = last_edge[e]
            last_edge[e] = j
    nxt = {p: j for j, p in prev.items()}
    at: dict[tuple, dict[int, int]] = defaultdict(dict)  # node -> colour -> edge
    col: list[int] = [-1] * len(ends)

    def recolour(edges: Sequence[int], a: int, b: int) -> None:
        for k in edges:
            for node in ends[k]:
                del at[node][col[k]]
        for k in edges:
            col[k] = b if col[k] == a else a
            for node in ends[k]:
                at[node][col[k]] = k

    for j, (u, v) in enumerate(ends):
        free_u = [c for c in range(s) if c not in at[u]]
        free_v = [c for c in range(s) if c not in at[v]]
        common = [c for c in free_u if c in free_v]
        avoid = col[prev[j]] if j in prev else -1
        if common:
            c = min(common, key=lambda c: (c == avoid, (c + variant) % s))
        else:  # flip the a/b path from v (it never reaches u: bipartite), then a is free at both
            a, b = free_u[variant % len(free_u)], free_v[(variant // s) % len(free_v)]
            path, node, want = [], v, a
            while want in at[node]:
                k = at[node][want]
                path.append(k)
                x, y = ends[k]
                node = y if x == node else x
                want = b if want == a else a
            recolour(path, a, b)
            c = a
        col[j] = c
        for node in (u, v):
            at[node][c] = j

    def chain(j: int, c: int, d: int) -> set[int]:
        seen, stack = {j}, list(ends[j])
        while stack:
            node = stack.pop()
            for cc in (c, d):
                k = at[node].get(cc)
                if k is not None and k not in seen:
                    seen.add(k)
                    stack.extend(ends[k])
        return seen

    def repeats_near(edges: set[int]) -> int:
        pairs = {(prev[k], k) for k in edges if k in prev} | {(k, nxt[k]) for k in edges if k in nxt}
        return sum(1 for p, k in pairs if col[p] == col[k])

    improved = True
    while improved:
        improved = False
        for j in range(len(ends)):
            if j not in prev or col[prev[j]] != col[j]:
                continue
            for jj in (j, prev[j]):
                c = col[jj]
                for d in range(s):
                    if d == c:
                        continue
                    edges = chain(jj, c, d)
                    before = repeats_near(edges)
                    recolour(list(edges), c, d)
                    if repeats_near(edges) < before:
                        improved = True
                        break
                    recolour(list(edges), c, d)
                if improved or col[prev[j]] != col[j]:
                    break
    out: list[list[str | None]] = [[None] * s for _ in heats]
    for j, (i, e) in enumerate(who):
        out[i][col[j]] = e
    return [tuple(x) for x in out], sum(1 for j, p in prev.items() if col[p] == col[j])


def _improve(groups: list[list[str]], met: Mapping[str, Counter]) -> None:
    """Swap members between heats while that lowers repeat meetings (the greedy fill can be
    left with forced repeats in its last heats), until no single swap of two entrants between
    two heats lowers the round's total: the round is then **swap-stable**. Each accepted swap
    lowers a non-negative integer total, so this ends. Only heats holding a repeat are
    touched (a swap between two repeat-free heats cannot lower the total)."""

    def cost(g: list[str]) -> int:
        return sum(met[a][b] for a, b in itertools.combinations(g, 2))

    improved = True
    while improved:
        improved = False
        for gi, g in enumerate(groups):
            if cost(g) == 0:
                continue
            for i in range(len(g)):
                base_g = cost(g)
                if base_g == 0:
                    break
                for hj, h in enumerate(groups):
                    if hj == gi:
                        continue
                    base = base_g + cost(h)
                    done = False
                    for j in range(len(h)):
                        g[i], h[j] = h[j], g[i]
                        if cost(g) + cost(h) < base:
                            improved = done = True
                            break
                        g[i], h[j] = h[j], g[i]
                    if done:
                        break


class VoidHeatPending(AoeError):
    """A draw, a round's outcome or the champions would be decided from a void heat
    (:meth:`Format.waiting_on`); ``heats``: those heats' ``(round, heat)``."""

    def __init__(self, heats: Sequence[HeatResult]) -> None:
        self.heats = [(h.round, h.heat) for h in heats]
        super().__init__("waiting on " + ", ".join(f"heat r{r}h{h} (void)" for r, h in self.heats)
                         + ": nobody is eliminated or advanced by a heat that did not race; "
                         "aoe run SEASON_FILE --retry-void re-runs it")


class FormatConfigError(AoeError, ValueError):
    """A season's ``[format]`` table names no registered kind or has options its kind refuses."""


def make_format(config: object, heat_size: int, min_heat_size: int) -> Format:
    """A :class:`Format` from a season file's ``[format]`` model (its kind's
    ``config_model``, or a raw :class:`~aoe_tui.domain.season_file.AnySection`, validated here).

    Raises:
        FormatConfigError: no registered kind, or options its model refuses (one line,
            ``format.<field>: <message>`` per problem).
    """
    cls = format_class(getattr(config, "kind", None))
    if cls is Format:
        raise FormatConfigError(f"format.kind: unknown format {getattr(config, 'kind', None)!r} "
                                f"(known: {', '.join(FORMATS)})")
    if not isinstance(config, cls.config_model):
        try:
            config = cls.config_model.model_validate(config.model_dump())  # type: ignore[attr-defined]
        except ValidationError as err:
            raise FormatConfigError("; ".join(f"format.{p}: {m}" for p, m in schema_problems(err))) from None
    return cls.from_config(config, heat_size, min_heat_size)
