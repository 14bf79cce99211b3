"""Per-heat network resources on one host: address blocks and TCP port blocks.

Several heats may run at once on one machine (two ``aoe`` processes, a season and a
demo...). Each heat asks this registry for what it needs and gets a block nobody else
holds:

* a ``/24`` IPv4 subnet for container territories (the arena's ``network.cidr`` when free,
  spec §1/§6.2; otherwise the next free ``/24``), skipping subnets that overlap a route
  already on the host;
* a block of consecutive TCP ports on 127.0.0.1 for QEMU port forwards (spec §6.2
  ``base_port + 2i`` / ``+ 2i + 1``), skipping ports that are in use.

The registry is a JSON file ``netalloc.json`` in a runtime folder (``/run/aoe-tui`` for
root, else ``platformdirs.user_runtime_dir("aoe-tui")``), guarded by an ``fcntl`` lock
file. Entries whose owner process is gone are dropped on every allocation, so a killed
runner never keeps its block forever. Writes are atomic (tmp + rename).
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from aoe_tui.fsio import write_atomic
from aoe_tui.runtime.provider import ProviderError


class AllocationError(ProviderError):
    """No free address or port block could be found (one line naming what was asked)."""


def runtime_dir() -> Path:
    """Folder of the registry: ``$AOE_RUNTIME_DIR``, else ``/run/aoe-tui`` (root), else the user runtime dir."""
    env = os.environ.get("AOE_RUNTIME_DIR")
    if env:
        return Path(env)
    if os.geteuid() == 0:
        return Path("/run/aoe-tui")
    import platformdirs

    return Path(platformdirs.user_runtime_dir("aoe-tui"))


def process_start_ticks(pid: int) -> int | None:
    """When process ``pid`` started: field 22 of ``/proc/PID/stat`` (clock ticks since
    boot). With the pid it names one process: a pid reused (after a reboot, or after
    wrapping) has another start. None when there is no such process or no ``/proc``."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def pid_alive(pid: int, start_ticks: int | None = None) -> bool:
    """True if a process with ``pid`` exists (zombies count as dead) and, when
    ``start_ticks`` is given (:func:`process_start_ticks` when it was recorded), it is the
    same process: one started at another time reuses the pid and counts as dead."""
    if pid <= 0:
        return False
    if start_ticks is not None:
        now = process_start_ticks(pid)
        if now is not None and now != start_ticks:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def host_routes() -> list[ipaddress.IPv4Network]:
    """IPv4 destinations of the host's routes and addresses (``ip -4 -j route/addr``); [] if unknown."""
    nets: list[ipaddress.IPv4Network] = []
    try:
        out = subprocess.run(["ip", "-4", "-j", "route", "show", "table", "all"], capture_output=True, text=True, timeout=5)
        for r in json.loads(out.stdout or "[]"):
            dst = r.get("dst", "")
            if dst and dst not in ("default",) and r.get("type", "unicast") in ("unicast", "local"):
                with contextlib.suppress(ValueError):
                    nets.append(ipaddress.ip_network(dst if "/" in dst else dst + "/32", strict=False))
    except (OSError, ValueError, subprocess.SubprocessError):
        pass
    return [n for n in nets if not n.is_loopback]


@dataclass(frozen=True)
class Lease:
    """One block held by one heat.

    Attributes:
        owner: heat id (free text, unique per heat).
        pid: process that holds it (the block is freed when that process is gone).
        kind: ``"subnet"`` or ``"ports"``.
        value: the CIDR (``"10.78.0.0/24"``) or the port range ``"26000-26005"``.
    """

    owner: str
    pid: int
    kind: str
    value: str

    @property
    def network(self) -> ipaddress.IPv4Network:
        """The leased subnet (only for ``kind == "subnet"``)."""
        return ipaddress.IPv4Network(self.value)

    @property
    def ports(self) -> range:
        """The leased ports (only for ``kind == "ports"``), e.g. ``range(26000, 26006)``."""
        lo, hi = self.value.split("-")
        return range(int(lo), int(hi) + 1)


class NetAllocator:
    """File-locked registry of per-heat address and port blocks (see module docstring).

    Args:
        directory: registry folder (default :func:`runtime_dir`).
    """

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory or runtime_dir()

    @property
    def path(self) -> Path:
        """The registry file ``<directory>/netalloc.json``."""
        return self.directory / "netalloc.json"

    @contextlib.contextmanager
    def _locked(self) -> Iterator[list[Lease]]:
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.directory / "netalloc.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            leases = self._read()
            live = [le for le in leases if pid_alive(le.pid)]
            before = list(live)
            yield live
            if live != leases or live != before:
                self._write(live)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def _read(self) -> list[Lease]:
        try:
            data = json.loads(self.path.read_text())
            return [Lease(**d) for d in data.get("leases", [])]
        except FileNotFoundError:
            return []
        except (ValueError, TypeError, KeyError):
            return []  # a torn or foreign file: start over (live heats re-register on next use)

    def _write(self, leases: list[Lease]) -> None:
        write_atomic(self.path, json.dumps({"leases": [le.__dict__ for le in leases]}, indent=1) + "\n", fsync=False)

    def leases(self) -> list[Lease]:
        """All live leases (stale ones from dead pids are dropped and the file rewritten)."""
        with self._locked() as live:
            return list(live)

    def allocate_subnet(self, owner: str, preferred: str = "10.78.0.0/24", *, pid: int | None = None) -> ipaddress.IPv4Network:
        """Lease a ``/24`` for ``owner``: ``preferred`` if free, else the next free ``/24`` after it.

        A subnet is free when no live lease holds it and no host route overlaps it. If
        ``owner`` already holds a subnet, that one is returned. Candidates are tried in
        the preferred ``/16`` first (third octet upwards, wrapping), then in 10.x.0.0/16
        blocks.

        Raises:
            AllocationError: ``preferred`` is not a ``/24`` network, or nothing is free.
        """
        try:
            pref = ipaddress.IPv4Network(preferred, strict=True)
        except ValueError as exc:
            raise AllocationError(f"network.cidr {preferred!r} is not an IPv4 network ({exc})") from None
        if pref.prefixlen != 24:
            raise AllocationError(f"network.cidr {preferred!r} must be a /24 (e.g. 10.78.0.0/24)")
        pid = os.getpid() if pid is None else pid
        routes = host_routes()
        with self._locked() as live:
            for le in live:
                if le.owner == owner and le.kind == "subnet":
                    return le.network
            taken = [le.network for le in live if le.kind == "subnet"]
            for cand in self._subnet_candidates(pref):
                if any(cand.overlaps(t) for t in taken):
                    continue
                if any(cand.overlaps(r) for r in routes):
                    continue
                live.append(Lease(owner, pid, "subnet", str(cand)))
                return cand
        raise AllocationError(f"no free /24 subnet near {preferred} for heat {owner}")

    @staticmethod
    def _subnet_candidates(pref: ipaddress.IPv4Network) -> Iterator[ipaddress.IPv4Network]:
        base = int(pref.network_address)
        b16 = base & 0xFFFF0000
        third = (base >> 8) & 0xFF
        for k in range(256):
            yield ipaddress.IPv4Network(((b16 | (((third + k) & 0xFF) << 8)), 24))
        second = (base >> 16) & 0xFF
        for k in range(1, 64):
            s = (second + k) & 0xFF
            for t in range(256):
                yield ipaddress.IPv4Network(((10 << 24) | (s << 16) | (t << 8), 24))

    def allocate_ports(
        self, owner: str, count: int, *, base: int = 26000, pid: int | None = None, host: str = "127.0.0.1"
    ) -> range:
        """Lease ``count`` consecutive TCP ports for ``owner``, starting at ``base`` when free.

        Ports are free when no live lease holds them and each can be bound on ``host``
        right now. Blocks are tried at ``base``, ``base + count``, ... up to 65535.

        Raises:
            AllocationError: ``count``/``base`` out of range or no free block.
        """
        if count <= 0 or not (1024 <= base <= 65535):
            raise AllocationError(f"bad port block request: {count} ports from {base}")
        pid = os.getpid() if pid is None else pid
        with self._locked() as live:
            held = set()
            for le in live:
                if le.kind == "ports":
                    held.update(le.ports)
            start = base
            while start + count - 1 <= 65535:
                block = range(start, start + count)
                if not held.intersection(block) and all(_port_free(host, p) for p in block):
                    live.append(Lease(owner, pid, "ports", f"{block.start}-{block.stop - 1}"))
                    return block
                start += count
        raise AllocationError(f"no {count} free consecutive TCP ports on {host} from {base} for heat {owner}")

    def ports_leased(self, ports: range) -> bool:
        """True when a live lease (a running heat) holds any of ``ports``."""
        with self._locked() as live:
            return any(le.kind == "ports" and set(le.ports).intersection(ports) for le in live)

    def release(self, owner: str, kind: str | None = None) -> None:
        """Drop every lease of ``owner`` (or only those of ``kind``). No error if none."""
        with self._locked() as live:
            live[:] = [le for le in live if not (le.owner == owner and (kind is None or le.kind == kind))]

    def release_value(self, kind: str, value: str) -> None:
        """Drop the lease of ``kind`` with exactly ``value`` (used by stale cleanup)."""
        with self._locked() as live:
            live[:] = [le for le in live if not (le.kind == kind and le.value == value)]


def _port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def new_heat_id() -> str:
    """A fresh heat id for a provider that was given none (``heat-<pid>-<ms>``)."""
    return f"heat-{os.getpid()}-{int(time.time() * 1000) % 10**9}"
