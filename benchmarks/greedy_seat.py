#!/usr/bin/env python3
"""Benchmark: what a greedy seat costs its rivals, and what it can take (issue 26 item 5).

Two parts, for each provider asked for (``--provider``, repeatable; default ``container``):

1. **Rivals beside a greedy seat.** Runs what a user runs, ``aoe match run
   arenas/first-build`` with seat 1 played by ``benchmarks/greedy-adapter.sh`` (an upstream
   command adapter, spec §5) and two oracles on the other seats, ``--runs`` times in each
   mode, alternating: ``calm`` (seat 1 does nothing) and ``greedy`` (seat 1 starts one busy
   loop per CPU its territory shows, ``nproc``, at the clock's start and keeps them running;
   with ``--greed fork`` a fork bomb instead, which only the territory's limits stop).
   Prints the winning oracle's time to durable (match clock, ``durable_at_ms``) per run, the
   medians and the ratio greedy / calm (target: within +10 %), and the referee's tick
   lateness p50/p99 (:func:`aoe_tui.testing.lateness.log_tick_lateness`) in both modes.
2. **What a greedy seat can take.** Provisions one territory of first-build's class with the
   provider's own API and, over root SSH, measures from inside: ``nproc``; the CPU its busy
   loops get (CPU seconds per wall second over 3 s, from ``/proc/<pid>/stat``); the most
   memory one process could hold (1 MiB pages touched, up to twice the class's memory); the
   most tasks it could hold at once (sleeping children of one process, up to twice the tasks limit); the
   most it could write to ``/var/tmp`` (up to the class's disk + 1 GiB); then what
   ``provider.exhaustion`` says of it. Each probe is bounded: a host without a limit shows
   the probe's cap, not the host's size.

Figures are wall-clock on a shared 2-core host: run it on a quiet machine and compare
within one run (ratios). Usage: ``.venv/bin/python benchmarks/greedy_seat.py [--runs 3]
[--provider container] [--greed cpu|fork] [--skip-race] [--skip-take]``. Needs root and the guest image.
"""

from __future__ import annotations

import argparse
import asyncio
import json
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

from aoe_tui.testing.lateness import log_tick_lateness, pct  # noqa: E402

ADAPTER = REPO / "benchmarks" / "greedy-adapter.sh"
ARENA = REPO / "arenas" / "first-build"


def race(provider: str, mode: str, out: Path) -> dict:
    """One first-build heat: seat 1 greedy (or calm), two oracles. Returns the winner's
    durable ms and the heat's tick lateness samples (ms)."""
    env = {**os.environ, "GREEDY_MODE": mode}
    res = subprocess.run(
        [sys.executable, "-m", "aoe_tui.cli", "match", "run", str(ARENA), "--provider", provider,
         "--agent", f"command:{ADAPTER}", "--agent", "oracle", "--agent", "oracle",
         "--output", str(out), "--quiet", "--drain-seconds", "3"],
        capture_output=True, text=True, cwd=REPO, env=env,
    )
    if res.returncode != 0:
        raise SystemExit(f"{provider}/{mode}: heat failed (exit {res.returncode}): {res.stderr.strip()[-500:]}")
    world = json.loads((out / "world.json").read_text())
    winner = world.get("winner")
    durable = world["territories"][winner]["durable_at_ms"] if winner else None
    return {"winner": winner, "durable_ms": durable, "lateness": log_tick_lateness(out / "events.jsonl")}


def part_race(provider: str, runs: int, tmp: Path, greed: str = "cpu") -> None:
    print(f"== {provider}: rivals beside a calm / a greedy seat ({greed}; first-build, 2 oracles), {runs} run(s) each",
          flush=True)
    rows: dict[str, list[dict]] = {"calm": [], "greedy": []}
    for i in range(runs):
        for mode, gm in (("calm", "calm"), ("greedy", greed)):
            row = race(provider, gm, tmp / f"{provider}-{mode}-{i + 1}")
            rows[mode].append(row)
            d = f"{row['durable_ms'] / 1000:.2f} s" if row["durable_ms"] is not None else "never"
            print(f"   run {i + 1} {mode:<6}: winner {row['winner']} durable {d}; "
                  f"tick lateness p99 {pct(row['lateness'], 99):.0f} ms", flush=True)
    med = {}
    for mode, rs in rows.items():
        ds = [r["durable_ms"] for r in rs if r["durable_ms"] is not None]
        med[mode] = statistics.median(ds) if ds else None
        lat = [x for r in rs for x in r["lateness"]]
        print(f"   {mode:<6}: oracle durable median {med[mode] / 1000 if med[mode] else float('nan'):.2f} s "
              f"({', '.join(f'{d / 1000:.2f}' for d in ds)}); tick lateness p50/p99 {pct(lat, 50):.0f}/{pct(lat, 99):.0f} ms",
              flush=True)
    if med["calm"] and med["greedy"]:
        print(f"   greedy / calm: {med['greedy'] / med['calm']:.3f} ({(med['greedy'] / med['calm'] - 1) * 100:+.1f} %; "
              "target within +10 %)", flush=True)


PROBE_CPU = r"""
n=$(nproc); pids=""
for i in $(seq "$n"); do (while :; do :; done) & pids="$pids $!"; done
t0=0; for p in $pids; do set -- $(cut -d' ' -f14,15 /proc/$p/stat); t0=$((t0 + $1 + $2)); done
sleep 3
t1=0; for p in $pids; do set -- $(cut -d' ' -f14,15 /proc/$p/stat); t1=$((t1 + $1 + $2)); done
kill $pids; wait 2>/dev/null
echo "$n $(( (t1 - t0) ))"
"""
#: holds memory in 1 MiB pages up to $1 MiB, printing each 16 MiB it holds (the last line
#: printed is what it held when the OOM killer or the cap stopped it)
PROBE_MEM = r"""
python3 -c '
import sys
cap = int(sys.argv[1]); held = []
for i in range(cap):
    b = bytearray(1 << 20)
    for j in range(0, len(b), 4096): b[j] = 1
    held.append(b)
    if (i + 1) % 16 == 0: print(i + 1, flush=True)
' "$1" | tail -n 1
"""
#: forks up to $1 sleeping children at once; prints how many it had when fork failed (a
#: shell dies of its own failed fork, so Python forks)
PROBE_TASKS = r"""
python3 -c '
import os, signal, sys, time
cap = int(sys.argv[1]); kids = []
for _ in range(cap):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    kids.append(pid)
print(len(kids), flush=True)
for pid in kids:
    os.kill(pid, signal.SIGKILL)
for pid in kids:
    os.waitpid(pid, 0)
' "$1"
"""
#: writes up to $1 MiB to /var/tmp/greedy.fill, prints MiB written, removes it
PROBE_DISK = r"""
dd if=/dev/zero of=/var/tmp/greedy.fill bs=1M count="$1" conv=fsync 2>/dev/null
echo $(( $(stat -c %s /var/tmp/greedy.fill) / 1048576 )); rm -f /var/tmp/greedy.fill
"""


async def part_take(provider_name: str, tmp: Path) -> None:
    from aoe_tui.domain.arena import load_manifest
    from aoe_tui.referee.heat import territory_specs
    from aoe_tui.runtime import ssh
    from aoe_tui.runtime.registry import build_provider

    loaded = load_manifest(ARENA / "arena.toml")
    spec = territory_specs(loaded)[0]
    r = spec.resources
    print(f"== {provider_name}: what a greedy seat can take (class: {r.vcpus} vCPU, {r.memory_mib} MiB memory, "
          f"{r.disk_mib} MiB disk, {r.tasks} tasks)", flush=True)
    provider = build_provider(provider_name, None, tmp / f"take-{provider_name}", loaded, cli=True)
    try:
        t0 = time.monotonic()
        (terr,) = await provider.provision([spec])
        print(f"   provisioned in {time.monotonic() - t0:.1f} s; limits: {json.dumps(provider.limits(terr.id), sort_keys=True)}",
              flush=True)
        for note in provider.notes:
            print(f"   note: {note}", flush=True)

        async def guest(script: str, *args: object, timeout: float = 180) -> str:
            cmd = "bash -s -- " + " ".join(str(a) for a in args)
            res = await ssh.run(terr.host, terr.ssh_port, terr.password, cmd, input=script, timeout_s=timeout)
            return str(res.stdout or "").strip()

        n, ticks = (await guest(PROBE_CPU)).split()
        hz = os.sysconf("SC_CLK_TCK")
        print(f"   nproc {n}; {n} busy loop(s) got {int(ticks) / hz / 3:.2f} CPU (CPU s per wall s over 3 s)", flush=True)
        mem = await guest(PROBE_MEM, 2 * r.memory_mib)
        print(f"   memory one process held: {mem or '0'} MiB (probe cap {2 * r.memory_mib} MiB)", flush=True)
        tasks = await guest(PROBE_TASKS, 2 * r.tasks)
        print(f"   tasks started at once: {tasks} (probe cap {2 * r.tasks})", flush=True)
        disk = await guest(PROBE_DISK, r.disk_mib + 1024, timeout=600)
        print(f"   disk written to /var/tmp: {disk} MiB (probe cap {r.disk_mib + 1024} MiB)", flush=True)
        print(f"   provider.exhaustion: {provider.exhaustion(terr.id)}", flush=True)
    finally:
        await provider.teardown()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--provider", action="append", default=[], help="container (default), qemu, ...")
    ap.add_argument("--runs", type=int, default=3, help="heats per mode (calm, greedy), alternating")
    ap.add_argument("--greed", default="cpu", choices=("cpu", "fork"),
                    help="what the greedy seat does: cpu (a busy loop per CPU it sees) or fork (a fork bomb)")
    ap.add_argument("--skip-race", action="store_true", help="only measure what a greedy seat can take")
    ap.add_argument("--skip-take", action="store_true", help="only race")
    ap.add_argument("--keep", action="store_true", help="keep the match folders")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="aoe-bench-greedy-"))
    try:
        for provider in args.provider or ["container"]:
            if not args.skip_race:
                part_race(provider, args.runs, tmp, args.greed)
            if not args.skip_take:
                asyncio.run(part_take(provider, tmp))
    finally:
        if args.keep:
            print(f"match folders kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
