#!/usr/bin/env python3
"""Benchmark: CPU-seconds of the referee's verifier runs, per milestone and per heat.

For every arena asked for (``--arena NAME``, repeatable; ``--arena all`` = the five build
races), runs ``aoe match run <copy of arenas/NAME> --provider container --agent oracle``
(the oracle on every seat, real container territories) ``--runs`` times. The copy of the
arena package (same folder name, so the same image layer) has each ``verify/X.sh`` wrapped:
the wrapper runs the real verifier (``X.real.sh`` beside it, same ``lib.sh``) and appends
one line to a log with bash's ``times`` for its children, i.e. the user + system CPU of the
whole verifier process tree that was waited for (the verifier's bash, its jq/curl/sed...
forks, the host-side entry into the container and the guest programs run through it). Not
counted: work the verifier causes in long-lived processes (the guest's systemd, sshd,
nspawn) and a monitor a verifier leaves running.

Prints, per arena: each milestone's verifier CPU-s per run (median of the passing runs over
all heats and seats, and how many runs), and the verifier CPU-s per heat (all runs of all
seats, median over the heats). Load averages are printed before and after each arena.

Usage: ``.venv/bin/python benchmarks/verifier_cpu.py [--arena all] [--runs 3] [--keep]``
(root, the guest image built: ``aoe image build``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ARENAS = ("first-build", "durable-job-queue", "primary-failover", "traffic-surge", "zero-downtime-rollout")

#: the wrapper put in place of each verifier: run the real one, log the children's CPU
#: (bash ``times``, run in the wrapper's own shell: second line = children's user and system time, e.g. ``0m0.052s 0m0.031s``)
WRAPPER = """#!/bin/bash
"${0%.sh}.real.sh" "$@"
rc=$?
times > "$BENCH_VERIFIER_CPU_LOG.$$"
mapfile -t t < "$BENCH_VERIFIER_CPU_LOG.$$"
rm -f "$BENCH_VERIFIER_CPU_LOG.$$"
printf '%s %s %s %s\\n' "${0##*/}" "$rc" "$AOE_TERRITORY_ID" "${t[1]}" >> "$BENCH_VERIFIER_CPU_LOG"
exit $rc
"""


def _seconds(text: str) -> float:
    """``1m2.345s`` -> 62.345."""
    m, s = text.rstrip("s").split("m")
    return int(m) * 60 + float(s)


def wrapped_arena(arena: str, dest: Path) -> Path:
    """A copy of ``arenas/<arena>`` at ``dest/<arena>`` whose verifiers log their CPU."""
    pkg = dest / arena
    shutil.copytree(REPO / "arenas" / arena, pkg, symlinks=True)
    for script in sorted((pkg / "verify").glob("*.sh")):
        if script.name == "lib.sh":
            continue
        script.rename(script.with_name(script.stem + ".real.sh"))
        script.write_text(WRAPPER)
        script.chmod(0o755)
    return pkg


def one_heat(pkg: Path, out: Path, log: Path) -> list[tuple[str, int, str, float]]:
    """Run one oracle heat of ``pkg``; return (milestone, exit status, territory, CPU-s) per verifier run."""
    log.write_text("")
    env = dict(os.environ, BENCH_VERIFIER_CPU_LOG=str(log), PYTHONPATH=str(REPO))
    res = subprocess.run(
        [sys.executable, "-m", "aoe_tui.cli", "match", "run", str(pkg), "--provider", "container", "--agent", "oracle",
         "--output", str(out), "--quiet", "--drain-seconds", "3"],
        capture_output=True, text=True, cwd=REPO, env=env,
    )
    if res.returncode != 0:
        raise SystemExit(f"{pkg.name}: heat failed (exit {res.returncode}): {res.stderr.strip()[-500:]}")
    rows = []
    for line in log.read_text().splitlines():
        parts = line.split()
        if len(parts) != 5:
            continue
        name, rc, territory, user, system = parts
        rows.append((name.removesuffix(".sh"), int(rc), territory, _seconds(user) + _seconds(system)))
    return rows


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arena", action="append", default=[], metavar="NAME",
                    help=f"arena folder under arenas/ ({', '.join(ARENAS)}) or 'all' (default all)")
    ap.add_argument("--runs", type=int, default=3, help="heats per arena (default 3)")
    ap.add_argument("--keep", action="store_true", help="keep the match folders and logs")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("verifier_cpu.py: container territories need root", file=sys.stderr)
        return 2
    arenas = list(ARENAS) if not args.arena or "all" in args.arena else args.arena
    for arena in arenas:
        if not (REPO / "arenas" / arena / "arena.toml").is_file():
            print(f"verifier_cpu.py: no arena package arenas/{arena}", file=sys.stderr)
            return 2
    tmp = Path(tempfile.mkdtemp(prefix="aoe-bench-vercpu-"))
    summary = []
    try:
        for arena in arenas:
            pkg = wrapped_arena(arena, tmp / "arenas")
            print(f"== {arena} (load average before: {loadavg()})", flush=True)
            passing: dict[str, list[float]] = defaultdict(list)
            counts: dict[str, int] = defaultdict(int)
            per_heat = []
            for i in range(args.runs):
                rows = one_heat(pkg, tmp / f"{arena}-run-{i + 1}", tmp / f"{arena}-run-{i + 1}.cpu.log")
                for name, rc, _territory, cpu in rows:
                    counts[name] += 1
                    if rc == 0:
                        passing[name].append(cpu)
                total = sum(r[3] for r in rows)
                per_heat.append(total)
                print(f"   heat {i + 1}: {len(rows)} verifier runs, {total:.2f} CPU-s (load {loadavg()})", flush=True)
            for name in sorted(counts, key=lambda n: (-len(passing[n]), n)):
                cpus = passing[name]
                med = f"{statistics.median(cpus) * 1000:7.0f} ms" if cpus else "    n/a   "
                print(f"   {name:<24} {med} CPU per passing run (median of {len(cpus)}; {counts[name]} runs in all)")
            med_heat = statistics.median(per_heat)
            print(f"   per heat: {med_heat:.2f} CPU-s of verifier runs (median of {len(per_heat)} heats)", flush=True)
            summary.append((arena, med_heat))
        print("\narena                   verifier CPU-s per heat (median)")
        for arena, cpu in summary:
            print(f"{arena:<22}  {cpu:6.2f}")
        print(f"load average at the end: {loadavg()}")
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
