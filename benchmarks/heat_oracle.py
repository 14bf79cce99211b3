#!/usr/bin/env python3
"""Benchmark: each arena's oracle, time to durable on the match clock, against upstream's.

For every arena asked for (``--arena NAME``, repeatable; ``--arena all`` = the five build
races), runs ``aoe match run arenas/NAME --provider container --agent oracle`` (the
oracle on every seat) as a real subprocess, ``--runs`` times, and prints:

* ``durable``: the winner's ``durable_at_ms`` on the match clock, per run and the median;
* upstream's figure for the same arena: the winner's ``durable_at_ms`` in the published
  upstream oracle runs of that arena (``tests/fixtures/upstream/matches/*``; median when
  there are several), and the ratio ours / upstream (below 1: we are faster);
* ``wall``: the subprocess's wall time, exec to exit, and ``wall - durable``; ``provision`` /
  ``teardown`` from our ``aoe-extra.json``, and the rest of the wall time by phase (s):
  ``start-up`` (exec to ``command_start_unix``: interpreter, imports, manifest, adapters,
  arena.json/match.json), ``ready`` (end of provisioning to the match clock's start),
  ``race`` (the match clock's start to ``finished_unix``), ``end`` (``finished_unix`` to the
  teardown: drain, world.json, leftover verifiers), ``exit`` (after the teardown:
  aoe-extra.json, the bundle, the process's exit). Unix times are compared across the two
  processes (one clock);
* for arenas with a territory recipe, the image layer's build time **cold** (rebuilt with
  ``force``, base image already built) and **cached** (an unchanged recipe: a hash check),
  and for ``--qemu-layer`` also the cold build of its qcow2 form.

Usage: ``.venv/bin/python benchmarks/heat_oracle.py [--arena all] [--runs 3] [--keep]``
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
MATCHES = REPO / "tests" / "fixtures" / "upstream" / "matches"
ARENAS = ("first-build", "durable-job-queue", "primary-failover", "traffic-surge", "zero-downtime-rollout")


def upstream_oracle_ms(arena: str) -> tuple[float | None, list[str]]:
    """Median winner ``durable_at_ms`` of the published upstream oracle runs of ``arena``."""
    times, names = [], []
    for d in sorted(MATCHES.iterdir()):
        arena_json, world_json = d / "arena.json", d / "world.json"
        if not world_json.is_file():
            continue
        world = json.loads(world_json.read_text())
        manifest_id = json.loads(arena_json.read_text())["arena"]["id"] if arena_json.is_file() else None
        is_arena = manifest_id == arena or (manifest_id is None and d.name.startswith(arena))
        if arena == "first-build" and d.name.startswith("oracle-smoke"):
            is_arena = True  # upstream's first-build oracle smoke series
        if not is_arena or "oracle" not in d.name or not world.get("winner"):
            continue
        times.append(world["territories"][world["winner"]]["durable_at_ms"])
        names.append(d.name)
    return (statistics.median(times) if times else None), names


def one_run(arena: str, provider: str, out: Path) -> dict:
    started, started_unix = time.monotonic(), time.time()
    res = subprocess.run(
        [sys.executable, "-m", "aoe_tui.cli", "match", "run", str(REPO / "arenas" / arena),
         "--provider", provider, "--agent", "oracle", "--output", str(out), "--quiet", "--drain-seconds", "3"],
        capture_output=True, text=True, cwd=REPO,
    )
    wall = time.monotonic() - started
    ended_unix = started_unix + wall
    if res.returncode != 0:
        raise SystemExit(f"{arena}: heat failed (exit {res.returncode}): {res.stderr.strip()[-500:]}")
    world = json.loads((out / "world.json").read_text())
    extra = json.loads((out / "aoe-extra.json").read_text())
    winner = world["winner"]
    t = extra["timings"]
    phases = {}
    if {"command_start_unix", "clock_started_unix", "finished_unix", "wall_s"} <= t.keys():
        cmd, clock, fin = t["command_start_unix"], t["clock_started_unix"], t["finished_unix"]
        down_end = cmd + t["wall_s"]
        phases = {
            "start-up": cmd - started_unix,
            "ready": clock - cmd - t["provision_s"],
            "race": fin - clock,
            "end": down_end - t["teardown_s"] - fin,
            "exit": ended_unix - down_end,
        }
    return {
        "winner": winner,
        "durable_ms": world["territories"][winner]["durable_at_ms"] if winner else None,
        "wall_s": wall,
        "provision_s": t.get("provision_s"),
        "teardown_s": t.get("teardown_s"),
        "phases": phases,
    }


def layer_times(arena: str, qemu: bool) -> str:
    """``cold X s, cached Y ms`` for the arena's layer (empty without a recipe)."""
    from aoe_tui.domain.recipe import find_recipe
    from aoe_tui.runtime.layers import ensure_layer, ensure_layer_qcow2

    pkg = REPO / "arenas" / arena
    if find_recipe(pkg) is None:
        return "no territory recipe (plain guest)"
    t0 = time.monotonic()
    layer = ensure_layer(pkg, force=True)
    cold = time.monotonic() - t0
    t0 = time.monotonic()
    ensure_layer(pkg)
    cached = time.monotonic() - t0
    text = f"layer build cold {cold * 1000:.0f} ms, cached {cached * 1000:.1f} ms (base image already built)"
    if qemu and layer is not None:
        t0 = time.monotonic()
        ensure_layer_qcow2(layer)
        text += f", qcow2 form cold {time.monotonic() - t0:.1f} s"
    return text


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arena", action="append", default=[], metavar="NAME",
                    help=f"arena folder under arenas/ ({', '.join(ARENAS)}) or 'all' (default first-build)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--provider", default="container")
    ap.add_argument("--qemu-layer", action="store_true", help="also time the layers' qcow2 form (QEMU)")
    ap.add_argument("--keep", action="store_true", help="keep the match folders")
    args = ap.parse_args()
    arenas = list(ARENAS) if "all" in args.arena else (args.arena or ["first-build"])
    tmp = Path(tempfile.mkdtemp(prefix="aoe-bench-heat-"))
    summary = []
    for arena in arenas:
        if not (REPO / "arenas" / arena / "arena.toml").is_file():
            raise SystemExit(f"no arena package arenas/{arena}")
        print(f"== {arena}: {layer_times(arena, args.qemu_layer)}", flush=True)
        rows = []
        for i in range(args.runs):
            row = one_run(arena, args.provider, tmp / f"{arena}-run-{i + 1}")
            rows.append(row)
            durable = f"{row['durable_ms'] / 1000:.2f} s" if row["durable_ms"] is not None else "never"
            over = f" (wall - durable {row['wall_s'] - row['durable_ms'] / 1000:+.2f} s)" if row["durable_ms"] else ""
            print(f"   run {i + 1}: winner={row['winner']} durable={durable} (match clock)  wall={row['wall_s']:.2f} s{over}  "
                  f"provision={row['provision_s']:.2f} s  teardown={row['teardown_s']:.2f} s", flush=True)
            if row["phases"]:
                print("          " + "  ".join(f"{k}={v:.2f}" for k, v in row["phases"].items()), flush=True)
        durable = [r["durable_ms"] for r in rows if r["durable_ms"] is not None]
        ours = statistics.median(durable) if durable else None
        theirs, names = upstream_oracle_ms(arena)
        ratio = f"{ours / theirs:.2f}" if ours is not None and theirs else "n/a"
        summary.append((arena, ours, theirs, ratio, len(names)))
        walls = [r["wall_s"] for r in rows]
        overs = [r["wall_s"] - r["durable_ms"] / 1000 for r in rows if r["durable_ms"] is not None]
        print(f"   oracle time to durable: ours median {ours / 1000 if ours is not None else float('nan'):.2f} s; "
              f"upstream {theirs / 1000 if theirs else float('nan'):.2f} s ({len(names)} published oracle run(s)); "
              f"ratio {ratio}; wall median {statistics.median(walls):.2f} s"
              + (f"; wall - durable median {statistics.median(overs):+.2f} s" if overs else ""), flush=True)
    print("\narena                   ours (s)  upstream (s)  ratio")
    for arena, ours, theirs, ratio, n in summary:
        o = f"{ours / 1000:8.2f}" if ours is not None else "     n/a"
        t = f"{theirs / 1000:12.2f}" if theirs else "         n/a"
        print(f"{arena:<22}  {o}  {t}  {ratio:>5}")
    if not args.keep:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    else:
        print(f"match folders kept in {tmp}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
