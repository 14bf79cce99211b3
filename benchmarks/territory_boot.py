#!/usr/bin/env python3
"""Time to SSH-ready for N concurrent territories, and their memory, per provider.

    .venv/bin/python benchmarks/territory_boot.py [--provider container|qemu] [--count 3] [--rounds 3]

For each round it provisions ``--count`` territories at once (readiness = a real root SSH
login that runs a command), prints the seconds until all are ready, the summed RSS of
every process the provider started (all descendants of this process: nspawn + container
processes, or qemu) and the drop in the host's MemAvailable, then tears them down and
prints the teardown time. Target (issue 3): ``container`` <= 3 s for three.

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


async def one_round(provider_name: str, image: GuestImage, count: int, base: Path, rnd: int) -> dict[str, float]:
    import os

    workdir = base / f"round-{rnd}"
    provider = PROVIDERS[provider_name](workdir, image)
    specs = [TerritorySpec(id=f"bench-{i + 1}", password=f"bench-{i + 1}-race", index=i) for i in range(count)]
    avail0 = _mem_available_mib()
    t0 = time.monotonic()
    try:
        await provider.provision(specs)
        ready = time.monotonic() - t0
        await asyncio.sleep(2.0)  # let boot-time jobs settle before sampling memory
        rss = _rss_mib(_descendants(os.getpid()))
        used = avail0 - _mem_available_mib()
    finally:
        t1 = time.monotonic()
        await provider.teardown()
        down = time.monotonic() - t1
    return {"ready_s": ready, "rss_mib": rss, "host_used_mib": used, "teardown_s": down}


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--provider", choices=sorted(PROVIDERS), default="container")
    ap.add_argument("--count", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    image = ensure_image(progress=lambda label, frac: print(f"  image: {label} {frac:.0%}", file=sys.stderr))
    print(f"provider={args.provider} territories={args.count} rounds={args.rounds} image={image.key}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="aoe-bench-") as tmp:
        for r in range(args.rounds):
            try:
                row = await one_round(args.provider, image, args.count, Path(tmp), r)
            except AoeError as exc:
                print(f"round {r + 1}: error: {exc}")
                return 1
            rows.append(row)
            print(f"round {r + 1}: all {args.count} ssh-ready after {row['ready_s']:.2f} s; "
                  f"RSS of started processes {row['rss_mib']:.0f} MiB; host MemAvailable drop "
                  f"{row['host_used_mib']:.0f} MiB; teardown {row['teardown_s']:.2f} s")
    med = statistics.median(r["ready_s"] for r in rows)
    print(f"median time to ssh-ready for {args.count} concurrent {args.provider} territories: {med:.2f} s "
          f"(best {min(r['ready_s'] for r in rows):.2f} s, worst {max(r['ready_s'] for r in rows):.2f} s); "
          f"median RSS {statistics.median(r['rss_mib'] for r in rows):.0f} MiB")
    if args.provider == "container":
        print(f"target <= 3 s: {'met' if med <= 3.0 else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
