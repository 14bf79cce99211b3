#!/usr/bin/env python3
"""Benchmark: scheduler + season reducer + standings cost for a big league, no territories.

Simulates a 300-entrant league (``heats_per_entrant`` 5, heats of 3) entirely in memory:
the format schedules each round, every heat gets a random finishing order and stats,
the events go through the real ``season.jsonl`` models, then the pure reducer and the
standings (with OpenSkill ratings) run over the whole log. Prints the time of each
part (target: scheduling + standings under 1 s).

Usage: ``.venv/bin/python benchmarks/season_scale.py [--entrants 300] [--heats 5] [--format league|knockout]``
"""

from __future__ import annotations

import argparse
import random
import time

from aoe_tui.domain import season_events as se
from aoe_tui.replay.season_reducer import reduce_season
from aoe_tui.season.formats import HeatResult, Knockout, League
from aoe_tui.season.season_standings import season_standings


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--entrants", type=int, default=300)
    ap.add_argument("--heats", type=int, default=5, help="league heats per entrant")
    ap.add_argument("--format", choices=["league", "knockout"], default="league")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    entrants = [f"entrant-{i:04d}" for i in range(args.entrants)]
    fmt = League(args.heats, 3, 2) if args.format == "league" else Knockout(2, 3, 2)
    rng = random.Random(args.seed)
    seq = 0
    records: list[se.SeasonRecord] = []

    def log(ev) -> None:
        nonlocal seq
        records.append(se.SeasonRecord(sequence=seq, time_unix_ms=seq, event=ev))
        seq += 1

    log(se.SeasonStarted(season="bench", label="w1", arena_id="first-build", format={"kind": args.format},
                         entrants=entrants, seed=args.seed, heat_size=3, min_heat_size=2, max_attempts=2,
                         season_sha256="0" * 64, milestones=["service-up", "write-read", "service-restart", "host-reboot"]))
    results: list[HeatResult] = []
    t_sched = 0.0
    rounds = heats = 0
    while True:
        t0 = time.perf_counter()
        plan = fmt.next_round(entrants, results, args.seed)
        t_sched += time.perf_counter() - t0
        if plan is None:
            break
        rounds += 1
        log(se.RoundScheduled(round=plan.round, heats=[se.HeatSeats(heat=h.heat, seats=list(h.seats)) for h in plan.heats],
                              byes=list(plan.byes), final=plan.final))
        for h in plan.heats:
            heats += 1
            es = list(h.entrants)
            rng.shuffle(es)
            ranks = {e: i + 1 for i, e in enumerate(es)}
            stats = {e: se.EntrantHeatStats(territory=f"builder-{i}", rank=ranks[e], points=100 - 10 * ranks[e],
                                            passed=4 - ranks[e], durable_at_ms=5000 * ranks[e] if ranks[e] == 1 else None,
                                            milestones={"service-up": 1000 * ranks[e]}, usage_recorded=True,
                                            input_tokens=1000, output_tokens=100, cost_microusd=1500)
                     for i, e in enumerate(es)}
            log(se.AttemptStarted(round=h.round, heat=h.heat, attempt=1, folder=f"round-{h.round}/heat-{h.heat}/attempt-1"))
            log(se.AttemptFinished(round=h.round, heat=h.heat, attempt=1, outcome="counted", winner=es[0],
                                   ranks=ranks, stats=stats))
            log(se.HeatFinished(round=h.round, heat=h.heat, attempt=1, ranks=ranks, winner=es[0]))
            results.append(HeatResult(h.round, h.heat, h.seats, ranks))
        log(se.RoundFinished(round=plan.round))
    log(se.SeasonFinished(champions=[], rounds=rounds))
    t0 = time.perf_counter()
    state = reduce_season(records)
    t_reduce = time.perf_counter() - t0
    t0 = time.perf_counter()
    rows = season_standings(state)
    t_stand = time.perf_counter() - t0
    total = t_sched + t_reduce + t_stand
    print(f"{args.format}: {len(entrants)} entrants, {rounds} rounds, {heats} heats, {len(records)} season events")
    print(f"scheduling (format.next_round, all rounds): {t_sched * 1000:8.1f} ms")
    print(f"season reducer (reduce_season):             {t_reduce * 1000:8.1f} ms")
    print(f"standings + OpenSkill ratings:              {t_stand * 1000:8.1f} ms")
    print(f"total:                                      {total * 1000:8.1f} ms  (target < 1000 ms) "
          f"{'OK' if total < 1 else 'OVER'}")
    print(f"leader: {rows[0].entrant} ordinal {rows[0].ordinal:.2f}")


if __name__ == "__main__":
    main()
