#!/usr/bin/env python3
"""Benchmark: the oracle's time to durable on the match clock, and the heat's wall time.

Runs ``aoe match run arenas/first-build --provider container --agent oracle`` (the
oracle on every seat) as a real subprocess, ``--runs`` times, and prints per run:

* ``durable``: the winner's ``durable_at_ms`` on the match clock (target <= 6 s;
  upstream's eight published oracle runs of the same arena: 17.1-19.9 s, median 17.6 s);
* ``wall``: wall time from command start to the end of teardown (the process exit);
* ``provision`` / ``teardown``: from our ``aoe-extra.json``.

Usage: ``.venv/bin/python benchmarks/heat_oracle.py [--runs 3] [--provider container] [--keep]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def one_run(provider: str, out: Path) -> dict:
    started = time.monotonic()
    res = subprocess.run(
        [sys.executable, "-m", "aoe_tui.cli", "match", "run", str(REPO / "arenas" / "first-build"),
         "--provider", provider, "--agent", "oracle", "--output", str(out), "--quiet"],
        capture_output=True, text=True, cwd=REPO,
    )
    wall = time.monotonic() - started
    if res.returncode != 0:
        raise SystemExit(f"heat failed (exit {res.returncode}): {res.stderr.strip()[-500:]}")
    world = json.loads((out / "world.json").read_text())
    extra = json.loads((out / "aoe-extra.json").read_text())
    winner = world["winner"]
    return {
        "winner": winner,
        "durable_s": world["territories"][winner]["durable_at_ms"] / 1000 if winner else None,
        "wall_s": wall,
        "provision_s": extra["timings"].get("provision_s"),
        "teardown_s": extra["timings"].get("teardown_s"),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--provider", default="container")
    ap.add_argument("--keep", action="store_true", help="keep the match folders")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="aoe-bench-heat-"))
    rows = []
    for i in range(args.runs):
        row = one_run(args.provider, tmp / f"run-{i + 1}")
        rows.append(row)
        print(
            f"run {i + 1}: winner={row['winner']} durable={row['durable_s']:.2f} s (match clock)  "
            f"wall={row['wall_s']:.2f} s (command start -> teardown)  "
            f"provision={row['provision_s']:.2f} s  teardown={row['teardown_s']:.2f} s",
            flush=True,
        )
    durable = [r["durable_s"] for r in rows if r["durable_s"] is not None]
    walls = [r["wall_s"] for r in rows]
    print(
        f"oracle time to durable ({args.provider}): median {statistics.median(durable):.2f} s, "
        f"min {min(durable):.2f} s, max {max(durable):.2f} s  (target <= 6 s; upstream median 17.6 s)"
    )
    print(f"wall time command start -> teardown: median {statistics.median(walls):.2f} s, max {max(walls):.2f} s")
    if not args.keep:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    else:
        print(f"match folders kept in {tmp}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
