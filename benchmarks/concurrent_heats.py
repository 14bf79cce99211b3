#!/usr/bin/env python3
"""Benchmark: K real heats at once on one machine (issue 16 item 4).

For each K (default 1, 2, 4, 6) it runs what a user runs: ``aoe run SEASON --headless``
on a generated one-round league season with ``concurrent_heats = K`` and 3K entrants on
the ``first-build`` arena (container territories): K oracles and 2K scripted builders
(``memory``, ``volatile``, ``slow`` in turn), one oracle per heat (the draw is pure: the
script picks the first seed whose round 1 seats one oracle in each heat). So K heats of
three territories provision, race and tear down together. For each K it prints:

* **tick lateness** p50/p99 (ms) of the referee over every heat's ``events.jsonl``
  (:func:`aoe_tui.testing.lateness.tick_lateness`: the first ``milestone_evaluation_started``
  of a territory in a tick against the tick's scheduled start, idle-entered ticks only);
* the **oracle's time to durable** (the winners' ``durable_at_ms``, match clock): median and
  max over the K heats, and the median against K = 1's;
* **memory per territory**: the PSS (``/proc/PID/smaps_rollup``) of the processes in a
  territory's PID namespace (its init from ``state.json``), summed per territory, its peak
  over the run; median and max over the territories (nspawn and the runner not counted);
* **host CPU**: busy share of all CPUs from ``/proc/stat`` over the season (every process
  on the host, other work included), and the CPU seconds of the runner with everything it
  started and reaped (territories, verifiers, agents: ``wait4`` rusage), and of the runner alone
  (its threads: ``/proc/PID/stat`` of the exited, not yet reaped process);
* the season's wall time and the slowest heat's provisioning and teardown (``aoe-extra.json``);
* each heat's clock start and finish (s after the runner started) and its wait for a boot
  slot (``timings.admission_wait_s``: :data:`aoe_tui.season.runner.BOOT_SLOTS`), so one sees
  which races overlap which boots. ``AOE_BOOT_SLOTS=0`` in the environment gives the old
  schedule (every heat boots at once) for comparison, ``AOE_CPU_WEIGHTS=1`` adds the CPU
  weights by phase (``aoe_tui.season.runner.CPU_WEIGHTS_ENV``).

Targets: K = 4 (12 territories) on 2 cores with tick lateness p99 <= 50 ms and the
oracle's durable time within +25 % of K = 1. The observer (this process) samples memory
every 2 s from a thread at nice 19 (the main thread only waits), so it stays out of the
runner's way.

With ``--greedy`` one seat of every heat is a greedy seat (``benchmarks/greedy-adapter.sh``:
one busy loop per CPU its territory shows, from its clock's start) in place of a scripted
builder (issue 26: K = 4 keeps its figure with one greedy seat in every heat).

Usage: ``.venv/bin/python benchmarks/concurrent_heats.py [--k 1,2,4,6] [--keep]
[--duration 60] [--runs 1] [--greedy]``. With ``--runs N`` the figures pool N seasons per K (wall,
provisioning and teardown: the slowest; CPU: the mean). Needs root, systemd-nspawn and the guest image (``aoe image build``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from aoe_tui.season.formats import League  # noqa: E402
from aoe_tui.testing.lateness import pct, tick_lateness  # noqa: E402

SCRIPTED = ("memory", "volatile", "slow")


#: the greedy seat of ``--greedy`` (an upstream command adapter: one busy loop per CPU its
#: territory shows, from the clock's start; see benchmarks/greedy_seat.py)
GREEDY = REPO / "benchmarks" / "greedy-adapter.sh"


def entrants(k: int, greedy: bool = False) -> list[tuple[str, str]]:
    """``(id, adapter)`` of K oracles and 2K scripted builders, oracles first; with
    ``greedy``, K of the builders are greedy seats (:data:`GREEDY`)."""
    out = [(f"oracle-{i + 1}", "oracle") for i in range(k)]
    if greedy:
        out += [(f"greedy-{i + 1}", f"command:{GREEDY}") for i in range(k)]
    out += [(f"{SCRIPTED[i % 3]}-{i + 1}", f"scripted:{SCRIPTED[i % 3]}") for i in range(k if greedy else 2 * k)]
    return out


def seed_for(ids: list[str]) -> int:
    """The first seed whose round 1 (league, one heat per entrant, heats of 3) seats exactly
    one oracle (and, when there are greedy seats, one greedy seat) in each heat."""
    kinds = ("oracle-", "greedy-") if any(e.startswith("greedy-") for e in ids) else ("oracle-",)
    for seed in range(1, 10_000):
        plan = League(1, 3, 3).next_round(ids, [], seed)
        if plan is not None and all(sum(e.startswith(kind) for e in h.entrants) == 1
                                    for h in plan.heats for kind in kinds):
            return seed
    raise SystemExit("no seed seats one oracle per heat")


def season_file(k: int, folder: Path, duration_s: int, greedy: bool = False) -> Path:
    es = entrants(k, greedy)
    lines = [
        f'id = "bench-k{k}"', 'label = "concurrent-heats"',
        f'arena = "{REPO / "arenas" / "first-build" / "arena.toml"}"',
        f"seed = {seed_for([e for e, _ in es])}", "max_attempts = 1", f"concurrent_heats = {k}",
        "drain_seconds = 3", "", "[provider]", 'kind = "container"', "ready_timeout_s = 180", "",
        "[arena_overrides]", f"duration_seconds = {duration_s}", "", "[format]", 'kind = "league"',
        "heats_per_entrant = 1", "",
    ]
    for eid, adapter in es:
        model = ("oracle" if adapter == "oracle" else "greedy" if adapter.startswith("command:")
                 else f"scripted-{adapter.split(':')[1]}")
        lines += ["[[entrants]]", f'id = "{eid}"', f'adapter = "{adapter}"', f'model = "{model}"', ""]
    path = folder / f"bench-k{k}.toml"
    path.write_text("\n".join(lines))
    return path


def host_cpu() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs from ``/proc/stat``."""
    f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = f[3] + f[4]
    return sum(f) - idle, sum(f)


class MemorySampler(threading.Thread):
    """Every ``interval_s``: PSS (KiB) summed per territory of the season folder ``under``
    (the processes in the PID namespace of the init its ``state.json`` names); keeps each
    territory's peak."""

    def __init__(self, under: Path, interval_s: float = 2.0, runner_pid: int | None = None) -> None:
        super().__init__(daemon=True)
        self.under = under
        #: the runner's own CPU seconds (utime + stime of its threads, children not counted), last sample
        self.runner_pid = runner_pid
        self.runner_own_s = 0.0
        self.interval_s = interval_s
        self.peak_kib: dict[str, int] = {}
        self.most_territories = 0
        self.stop = threading.Event()

    def sample(self) -> None:
        self.runner_exiting()
        ns_of: dict[str, str] = {}  # pid namespace -> territory folder
        for sf in self.under.glob("round-*/heat-*/attempt-*/territories/*/state.json"):
            try:
                leader = json.loads(sf.read_text()).get("leader_pid")
                if leader:
                    ns_of[os.readlink(f"/proc/{leader}/ns/pid")] = str(sf.parent)
            except (OSError, ValueError):
                continue
        per: dict[str, int] = {}
        for pid in os.listdir("/proc") if ns_of else ():
            if not pid.isdigit():
                continue
            try:
                where = ns_of.get(os.readlink(f"/proc/{pid}/ns/pid"))
                if where is None:
                    continue
                for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                    if line.startswith("Pss:"):
                        per[where] = per.get(where, 0) + int(line.split()[1])
                        break
            except (OSError, ValueError):
                continue
        self.most_territories = max(self.most_territories, len(per))
        for where, kib in per.items():
            self.peak_kib[where] = max(self.peak_kib.get(where, 0), kib)

    def run(self) -> None:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)  # this thread only: yield to the runner
        while not self.stop.wait(self.interval_s):
            self.sample()

    def runner_exiting(self) -> None:
        """Read the runner's own CPU (utime + stime from ``/proc/PID/stat``): every sample, and
        once more while it is a zombie (exited, not reaped yet)."""
        if self.runner_pid is not None:
            with contextlib.suppress(OSError, ValueError, IndexError):
                f = Path(f"/proc/{self.runner_pid}/stat").read_text().rsplit(")", 1)[1].split()
                self.runner_own_s = (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def run_k(k: int, tmp: Path, duration_s: int, greedy: bool = False) -> dict:
    """One season of K heats at once in ``tmp``; its figures (see the module docstring)."""
    tmp.mkdir(parents=True, exist_ok=True)
    out = tmp / f"season-k{k}"
    sf = season_file(k, tmp, duration_s, greedy)
    log = open(tmp / f"runner-k{k}.log", "w")
    busy0, total0 = host_cpu()
    t0 = time.monotonic()
    t0_unix = time.time()
    runner = subprocess.Popen([sys.executable, "-m", "aoe_tui.cli", "run", str(sf), "--headless", "--output", str(out)],
                              stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    sampler = MemorySampler(out, runner_pid=runner.pid)
    sampler.start()
    os.waitid(os.P_PID, runner.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped: its stat is still there
    sampler.runner_exiting()
    _, status, rusage = os.wait4(runner.pid, 0)
    runner.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - t0
    busy1, total1 = host_cpu()
    sampler.stop.set()
    sampler.join()
    if runner.returncode != 0:
        raise SystemExit(f"K={k}: aoe run exited {runner.returncode}; see {tmp / f'runner-k{k}.log'}")
    durable: list[float] = []
    heats = 0
    for line in (out / "season.jsonl").read_text().splitlines():
        ev = json.loads(line)
        ev = ev.get("event", ev)
        if ev.get("kind") != "attempt_finished":
            continue
        heats += 1
        for e, st in (ev.get("stats") or {}).items():
            if e.startswith("oracle-") and st.get("durable_at_ms") is not None:
                durable.append(st["durable_at_ms"] / 1000)
    provision, teardown, starts = [], [], []
    for extra in sorted(out.glob("round-*/heat-*/attempt-*/aoe-extra.json")):
        t = json.loads(extra.read_text()).get("timings", {})
        provision.append(t.get("provision_s") or 0.0)
        teardown.append(t.get("teardown_s") or 0.0)
        if t.get("clock_started_unix"):  # (clock start, its durable or finish) s after the runner started
            end = t.get("finished_unix") or t["clock_started_unix"]
            starts.append((t["clock_started_unix"] - t0_unix, end - t0_unix, t.get("admission_wait_s") or 0.0))
    mem = [v / 1024 for v in sampler.peak_kib.values()]
    return {
        "k": k, "heats": heats, "wall_s": wall, "lateness": tick_lateness(out), "durable_s": durable,
        "mem_mib": mem, "territories_seen": sampler.most_territories,
        "host_cpu": (busy1 - busy0) / max(1, total1 - total0),
        "runner_cpu_s": rusage.ru_utime + rusage.ru_stime, "runner_own_s": sampler.runner_own_s,
        "provision_max_s": max(provision, default=float("nan")), "teardown_max_s": max(teardown, default=float("nan")),
        "clocks": sorted(starts),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", default="1,2,4,6", help="comma-separated K values (heats at once)")
    ap.add_argument("--duration", type=int, default=60, help="heat clock cap (s; the oracle ends a heat first)")
    ap.add_argument("--runs", type=int, default=1, help="seasons per K, pooled (more lateness samples)")
    ap.add_argument("--keep", action="store_true", help="keep the season folders")
    ap.add_argument("--greedy", action="store_true",
                    help="one greedy seat in every heat (in place of a scripted builder): issue 26's K = 4 figure")
    args = ap.parse_args()
    ks = [int(x) for x in args.k.split(",") if x.strip()]
    tmp = Path(tempfile.mkdtemp(prefix="aoe-bench-concurrent-"))
    load = os.getloadavg()
    print(f"{os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at start; folders in {tmp}",
          flush=True)
    rows = []
    for k in ks:
        runs = [run_k(k, tmp / f"run-{i + 1}", args.duration, args.greedy) for i in range(max(1, args.runs))]
        r = {**runs[0], "heats": sum(x["heats"] for x in runs), "wall_s": max(x["wall_s"] for x in runs),
             "territories_seen": max(x["territories_seen"] for x in runs),
             "host_cpu": statistics.mean(x["host_cpu"] for x in runs),
             "runner_cpu_s": statistics.mean(x["runner_cpu_s"] for x in runs),
             "runner_own_s": statistics.mean(x["runner_own_s"] for x in runs),
             "provision_max_s": max(x["provision_max_s"] for x in runs),
             "teardown_max_s": max(x["teardown_max_s"] for x in runs)}
        for key in ("lateness", "durable_s", "mem_mib", "clocks"):
            r[key] = [v for x in runs for v in x[key]]
        rows.append(r)
        print(f"K={k}: {len(runs)} season(s), {r['heats']} heats, {3 * k} territories ({r['territories_seen']} seen at once), "
              f"wall {r['wall_s']:.1f} s", flush=True)
    base = next((statistics.median(r["durable_s"]) for r in rows if r["k"] == 1 and r["durable_s"]), None)
    print()
    print(" K  terr  lateness p50/p99 ms (n)   oracle durable med/max s  vs K=1   PSS/territory med/max MiB"
          "  host CPU  runner CPU s  provision/teardown max s  wall s")
    for r in rows:
        lat = r["lateness"]
        d = r["durable_s"]
        med = statistics.median(d) if d else float("nan")
        vs = f"{(med / base - 1) * 100:+5.0f} %" if base and d else "    n/a"
        mem = r["mem_mib"]
        print(f"{r['k']:2d}  {3 * r['k']:4d}  {pct(lat, 50):7.0f} / {pct(lat, 99):4.0f} ({len(lat):4d})  "
              f"{med:12.2f} / {max(d, default=float('nan')):5.2f}  {vs}  "
              f"{statistics.median(mem) if mem else float('nan'):14.1f} / {max(mem, default=float('nan')):5.1f}  "
              f"{r['host_cpu'] * 100:6.0f} %  {r['runner_cpu_s']:12.1f}  "
              f"{r['provision_max_s']:10.2f} / {r['teardown_max_s']:5.2f}  {r['wall_s']:6.1f}")
    print("\nthe runner's own CPU (its threads, not its children), s: "
          + ", ".join(f"K={r['k']} {r['runner_own_s']:.1f}" for r in rows))
    print("\nheats' clocks (s after the runner started: clock start → finish; admission wait), per K:")
    for r in rows:
        print(f"K={r['k']}: " + ", ".join(f"{a:.1f}→{b:.1f} ({w:.1f})" for a, b, w in r["clocks"]))
    for r in rows:
        if r["k"] == 4 and r["durable_s"]:
            p99 = pct(r["lateness"], 99)
            slower = statistics.median(r["durable_s"]) / base - 1 if base else float("nan")
            ok = p99 <= 50 and slower <= 0.25
            print(f"\nK=4 target (p99 <= 50 ms, durable within +25 % of K=1): p99 {p99:.0f} ms, "
                  f"durable {slower * 100:+.0f} %: {'OK' if ok else 'MISSED'}")
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the end")
    if not args.keep:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
