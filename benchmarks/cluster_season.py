#!/usr/bin/env python3
"""Benchmark: a season's heats on Ray worker nodes (issue 15) against a local run.

Starts its own Ray cluster on this machine with the real ``aoe worker start``
(``tests/cluster_support.py``: a head node and a worker node ``w1``, one heat slot each, token
authentication, each with its own folder), then prints two figures:

1. **per-heat overhead of the cluster path**, against the same heats run locally: a small
   season (two heats of two built-in builders, one at a time) runs once locally and once on
   the cluster, in this process (:class:`aoe_tui.season.runner.SeasonRunner`); per attempt
   it measures *scheduling → first event* (``attempt_started`` appended → the first
   ``events.jsonl`` record written on the runner: provisioning included, and on the cluster
   the actor's placement, the arena package and the stream) and *last event → artifacts
   written* (the last record → ``attempt_finished`` appended: drain-free teardown, world,
   bundle, and on the cluster the archive sent and extracted). Printed per heat, as medians
   and as the ratio cluster / local.
2. **the demo season's wall time** (``seasons/demo.toml`` or ``--season``) with
   ``aoe run --cluster``: on one node (the head only: ``w1`` stopped) and on two, and the
   speed-up.

Usage: ``.venv/bin/python benchmarks/cluster_season.py [--season seasons/demo.toml] [--skip-demo] [--keep]``
(root, systemd-nspawn, the guest image built; ``ray`` installed: ``pip install -e '.[cluster]'``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))
ARENA = REPO / "arenas" / "first-build" / "arena.toml"


def small_season(folder: Path) -> Path:
    text = (f'id = "bench"\nlabel = "w1"\narena = "{ARENA}"\nseed = 3\nmax_attempts = 1\nconcurrent_heats = 1\n'
            'drain_seconds = 2\n[provider]\nkind = "container"\nready_timeout_s = 90\n'
            '[arena_overrides]\nduration_seconds = 30\nminimum_territories = 2\n[format]\nkind = "league"\n'
            'heats_per_entrant = 1\n'
            + "".join(f'[[entrants]]\nid = "{i}"\nadapter = "{a}"\nmodel = "{a}"\n' for i, a in
                      (("o1", "oracle"), ("m1", "scripted:memory"), ("o2", "oracle"), ("v1", "scripted:volatile"))))
    f = folder / "bench.toml"
    f.write_text(text)
    return f


def heat_overheads(season: Path, out: Path, cluster: str | None) -> list[tuple[float, float]]:
    """Run ``season`` in this process; per attempt ``(scheduling → first event, last event →
    artifacts written)`` in seconds."""
    from aoe_tui.domain import season_events as se
    from aoe_tui.season.runner import SeasonRunner, load_season_file

    marks: dict[str, dict[str, float]] = {}

    class Timed(SeasonRunner):
        def _append(self, event):  # noqa: ANN001
            if isinstance(event, se.AttemptFinished):
                marks.setdefault(f"r{event.round}h{event.heat}a{event.attempt}", {})["done"] = time.monotonic()
            super()._append(event)
            if isinstance(event, se.AttemptStarted):
                marks.setdefault(f"r{event.round}h{event.heat}a{event.attempt}", {})["start"] = time.monotonic()

        def _on_event(self, tag, heat, rec, rel=None):  # noqa: ANN001
            m = marks.setdefault(tag, {})
            m.setdefault("first", time.monotonic())
            m["last"] = time.monotonic()
            super()._on_event(tag, heat, rec, rel)

    runner = Timed(load_season_file(season), out, say=lambda _m: None, cluster=cluster)
    asyncio.run(runner.run())
    return [(m["first"] - m["start"], m["done"] - m["last"]) for _t, m in sorted(marks.items())]


def run_demo(season: Path, out: Path, address: str, env: dict[str, str]) -> float:
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "aoe_tui.cli", "run", str(season), "--output", str(out), "--headless",
                          "--cluster", address], capture_output=True, text=True, cwd=REPO,
                         env={**env, "PYTHONPATH": str(REPO)})
    if res.returncode != 0:
        raise SystemExit(f"demo season failed ({res.returncode}):\n{res.stdout[-2000:]}{res.stderr[-2000:]}")
    return time.monotonic() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--season", default=str(REPO / "seasons" / "demo.toml"), help="season for the wall-time figure")
    ap.add_argument("--skip-demo", action="store_true", help="only the per-heat overhead")
    ap.add_argument("--keep", action="store_true", help="keep the scratch folder")
    args = ap.parse_args()
    from cluster_support import start_cluster

    root = Path(tempfile.mkdtemp(prefix="aoe-cluster-bench-"))
    try:
        with start_cluster(root / "cluster", workers=("w1",), head_slots=1) as cluster:
            env = cluster.client_env()
            os.environ.update({k: v for k, v in env.items() if k.startswith("RAY_AUTH")})
            season = small_season(root)
            local = heat_overheads(season, root / "local", None)
            remote = heat_overheads(season, root / "on-cluster", cluster.address)
            import ray

            ray.shutdown()
            print("per-heat overhead (s): scheduling → first event | last event → artifacts written")
            for i, ((lf, la), (rf, ra)) in enumerate(zip(local, remote), 1):
                print(f"  heat {i}: local {lf:6.2f} | {la:5.2f}    cluster {rf:6.2f} | {ra:5.2f}")
            med = statistics.median
            lf, la = med([x[0] for x in local]), med([x[1] for x in local])
            rf, ra = med([x[0] for x in remote]), med([x[1] for x in remote])
            print(f"  median: local {lf:.2f} | {la:.2f}, cluster {rf:.2f} | {ra:.2f}; "
                  f"ratio cluster/local: {rf / lf:.2f}x to the first event, {ra / la:.2f}x to the artifacts")
            if not args.skip_demo:
                w1 = cluster.node("w1")
                cluster.stop_node(w1)
                one = run_demo(Path(args.season), root / "demo-1", cluster.address, env)
                cluster.restart_node(w1)
                two = run_demo(Path(args.season), root / "demo-2", cluster.address, env)
                print(f"{Path(args.season).name} wall time: one node {one:.1f} s, two nodes {two:.1f} s "
                      f"(speed-up {one / two:.2f}x)")
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
        else:
            print(f"kept {root}")
    return 0

if __name__ == "__main__":
    raise SystemExit(main())
