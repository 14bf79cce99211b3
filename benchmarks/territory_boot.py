#!/usr/bin/env python3
"""Time to SSH-ready for N concurrent territories, and their memory, per provider.

    .venv/bin/python benchmarks/territory_boot.py [--provider container|qemu] [--count 3] [--rounds 3] [--reboot]

For each round it provisions ``--count`` territories at once (readiness = a real root SSH
login that runs a command), prints the seconds until all are ready, the summed RSS of
every process the provider started (all descendants of this process: nspawn + container
processes, or qemu) and the drop in the host's MemAvailable, then tears them down and
prints the teardown time. Target (issue 3): ``container`` <= 3 s for three. With
``--reboot`` it also reboots all of them at once through ``provider.reboot`` (the referee's
``host_reboot``, §3.4) and prints the seconds until all answer SSH again (each with a new
``boot_id``).

CPU: the benchmark moves itself into a cgroup of its own in the cgroup-v1 ``cpuacct``
hierarchy when the host has one (``/sys/fs/cgroup/cpuacct``); everything it starts (the
runner's SSH logins, nspawn, every process of the guests) is counted there, so the CPU
seconds of provisioning and of the reboot are printed whatever else loads the machine
(``n/a`` on other hosts). The load average is printed with every round.

Adding a provider: put a factory in ``PROVIDERS`` (name -> callable(workdir, image) ->
TerritoryProvider); everything else is shared.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aoe_tui.errors import AoeError  # noqa: E402
from aoe_tui.runtime.image import GuestImage, ensure_image  # noqa: E402
from aoe_tui.runtime.provider import TerritoryProvider, TerritorySpec  # noqa: E402


def _container(workdir: Path, image: GuestImage) -> TerritoryProvider:
    from aoe_tui.runtime.container import ContainerProvider

    return ContainerProvider(workdir, image=image, heat_id=f"bench-{time.time_ns()}")


def _qemu(workdir: Path, image: GuestImage) -> TerritoryProvider:
    # Hook for the qemu provider (issue 3): adjust the constructor call when it lands.
    try:
        from aoe_tui.runtime.qemu import QemuProvider  # type: ignore[import-not-found]
    except ImportError:
        raise SystemExit("qemu provider not available yet (aoe_tui/runtime/qemu.py missing)") from None
    return QemuProvider(workdir, image=image)  # type: ignore[call-arg]


PROVIDERS: dict[str, Callable[[Path, GuestImage], TerritoryProvider]] = {
    "container": _container,
    "qemu": _qemu,
}


def _descendants(pid: int) -> list[int]:
    out: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            kids = [int(x) for x in Path(f"/proc/{p}/task/{p}/children").read_text().split()]
        except (OSError, ValueError):
            kids = []
        out.extend(kids)
        todo.extend(kids)
    return out


def _rss_mib(pids: list[int]) -> float:
    total_kib = 0
    for p in pids:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total_kib += int(line.split()[1])
        except OSError:
            pass
    return total_kib / 1024


def _mem_available_mib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    return 0.0


CPUACCT = Path("/sys/fs/cgroup/cpuacct")


class CpuMeter:
    """CPU seconds of this process and everything it starts, from a ``cpuacct`` cgroup of
    its own (cgroup v1); ``read()`` is None where there is none."""

    def __init__(self) -> None:
        import os

        self.group: Path | None = None
        if (CPUACCT / "cgroup.procs").is_file():
            group = CPUACCT / f"aoe-territory-boot-{os.getpid()}"
            try:
                group.mkdir()
                (group / "cgroup.procs").write_text(str(os.getpid()))
                self.group = group
            except OSError:
                pass

    def read(self) -> float | None:
        """Seconds of CPU used so far in the group (None without one)."""
        if self.group is None:
            return None
        return int((self.group / "cpuacct.usage").read_text()) / 1e9

    def close(self) -> None:
        import os

        if self.group is not None:
            (CPUACCT / "cgroup.procs").write_text(str(os.getpid()))
            for _ in range(50):  # the group empties once the last guest process is reaped
                try:
                    self.group.rmdir()
                    return
                except OSError:
                    time.sleep(0.1)


def _delta(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else b - a


def _fmt(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f}"


async def _boot_ids(territories: list) -> list[str]:
    from aoe_tui.runtime import ssh

    res = await asyncio.gather(*(ssh.run(t.host, t.ssh_port, t.password, "cat /proc/sys/kernel/random/boot_id")
                                 for t in territories))
    return [r.stdout.strip() for r in res]


async def one_round(provider_name: str, image: GuestImage, count: int, base: Path, rnd: int,
                    meter: CpuMeter, reboot: bool) -> dict[str, float | None]:
    import os

    workdir = base / f"round-{rnd}"
    provider = PROVIDERS[provider_name](workdir, image)
    specs = [TerritorySpec(id=f"bench-{i + 1}", password=f"bench-{i + 1}-race", index=i) for i in range(count)]
    avail0 = _mem_available_mib()
    row: dict[str, float | None] = {"load": os.getloadavg()[0]}
    c0 = meter.read()
    t0 = time.monotonic()
    try:
        territories = await provider.provision(specs)
        row["ready_s"] = time.monotonic() - t0
        row["ready_cpu_s"] = _delta(c0, meter.read())
        await asyncio.sleep(2.0)  # let boot-time jobs settle before sampling memory
        row["rss_mib"] = _rss_mib(_descendants(os.getpid()))
        row["host_used_mib"] = avail0 - _mem_available_mib()
        if reboot:
            before = await _boot_ids(territories)
            c1, t1 = meter.read(), time.monotonic()
            await asyncio.gather(*(provider.reboot(t) for t in territories))
            row["reboot_s"] = time.monotonic() - t1
            row["reboot_cpu_s"] = _delta(c1, meter.read())
            after = await _boot_ids(territories)
            if any(a == b for a, b in zip(before, after)):
                raise SystemExit("a territory answered with the same boot_id after its reboot")
    finally:
        t2 = time.monotonic()
        await provider.teardown()
        row["teardown_s"] = time.monotonic() - t2
    return row


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--provider", choices=sorted(PROVIDERS), default="container")
    ap.add_argument("--count", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reboot", action="store_true", help="also reboot all territories at once (provider.reboot)")
    args = ap.parse_args()
    image = ensure_image(progress=lambda label, frac: print(f"  image: {label} {frac:.0%}", file=sys.stderr))
    print(f"provider={args.provider} territories={args.count} rounds={args.rounds} image={image.key}")
    rows = []
    meter = CpuMeter()
    try:
        with tempfile.TemporaryDirectory(prefix="aoe-bench-") as tmp:
            for r in range(args.rounds):
                try:
                    row = await one_round(args.provider, image, args.count, Path(tmp), r, meter, args.reboot)
                except AoeError as exc:
                    print(f"round {r + 1}: error: {exc}")
                    return 1
                rows.append(row)
                rb = (f"; all rebooted (new boot_id) and ssh-ready after {row['reboot_s']:.2f} s, "
                      f"CPU {_fmt(row['reboot_cpu_s'])} s" if args.reboot else "")
                print(f"round {r + 1} (load {row['load']:.2f}): all {args.count} ssh-ready after {row['ready_s']:.2f} s, "
                      f"CPU {_fmt(row['ready_cpu_s'])} s; RSS of started processes {row['rss_mib']:.0f} MiB; "
                      f"host MemAvailable drop {row['host_used_mib']:.0f} MiB{rb}; teardown {row['teardown_s']:.2f} s")
    finally:
        meter.close()
    med = statistics.median(r["ready_s"] for r in rows)  # type: ignore[type-var]
    print(f"median time to ssh-ready for {args.count} concurrent {args.provider} territories: {med:.2f} s "
          f"(best {min(r['ready_s'] for r in rows):.2f} s, worst {max(r['ready_s'] for r in rows):.2f} s); "
          f"median RSS {statistics.median(r['rss_mib'] for r in rows):.0f} MiB")
    cpus = [r["ready_cpu_s"] for r in rows if r["ready_cpu_s"] is not None]
    if cpus:
        print(f"median CPU of provisioning {statistics.median(cpus):.2f} s")
    if args.reboot:
        print(f"median reboot {statistics.median(r['reboot_s'] for r in rows):.2f} s"  # type: ignore[type-var]
              + (f", CPU {statistics.median(r['reboot_cpu_s'] for r in rows):.2f} s"  # type: ignore[type-var]
                 if all(r["reboot_cpu_s"] is not None for r in rows) else ""))
    if args.provider == "container":
        print(f"target <= 3 s: {'met' if med <= 3.0 else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
