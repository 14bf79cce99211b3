"""Time to load and reduce every fixture event log (target: all together < 0.5 s).

Usage: .venv/bin/python benchmarks/replay_fixtures.py [FIXTURES_DIR]
FIXTURES_DIR (default: the repository's ``tests/fixtures``) holds ``upstream/matches/*/events.jsonl``
and ``seed/*.match.json``.
Prints per-phase figures: parse (read_events), reduce (reduce_match), world.json
serialisation, and the total, best of 5 runs.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from aoe_tui.domain.world import world_json
from aoe_tui.replay.bundle import read_bundle
from aoe_tui.replay.log import read_events
from aoe_tui.replay.reducer import reduce_match


def main() -> int:
    fixtures = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "tests" / "fixtures"
    logs = sorted((fixtures / "upstream/matches").glob("*/events.jsonl"))
    seeds = sorted((fixtures / "seed").glob("*.match.json"))
    if not logs:
        print(f"no fixture logs under {fixtures}", file=sys.stderr)
        return 1
    best = {"parse": 1e9, "reduce": 1e9, "world_json": 1e9, "total": 1e9}
    n_events = 0
    for _ in range(5):
        t0 = time.perf_counter()
        all_records = [read_events(p) for p in logs] + [read_bundle(s).records for s in seeds]
        t1 = time.perf_counter()
        worlds = [reduce_match(r) for r in all_records]
        t2 = time.perf_counter()
        for w in worlds:
            world_json(w)
        t3 = time.perf_counter()
        n_events = sum(len(r) for r in all_records)
        for k, v in (("parse", t1 - t0), ("reduce", t2 - t1), ("world_json", t3 - t2), ("total", t3 - t0)):
            best[k] = min(best[k], v)
    print(f"fixture logs: {len(logs)} + {len(seeds)} bundle(s), {n_events} events (best of 5)")
    for k, v in best.items():
        print(f"  {k:<11} {v * 1000:8.1f} ms")
    print(f"  target: total < 500 ms -> {'OK' if best['total'] < 0.5 else 'SLOW'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
