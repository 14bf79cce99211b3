"""A territory's resource limits in cgroups, on cgroup-v1 and cgroup-v2 hosts.

One group per territory ``aoe-territories/<machine>`` (``machine``: ``aoe-<hash>``, the name
of the territory's other groups, see :func:`aoe_tui.runtime.container.territory_cgroups`):

* **cgroup v1** (per-controller hierarchies ``<v1 root>/<controller>``): one group in each of
  the ``cpu``, ``cpuset``, ``memory``, ``pids`` and ``cpuacct`` (accounting only) hierarchies,
  below this process's own group in that hierarchy (``/proc/self/cgroup``: a runner started
  in a memory-limited group keeps its territories inside that limit). Files: ``cpu.shares``
  (1024, equal for every territory), ``cpu.cfs_quota_us`` (vcpus x ``cpu.cfs_period_us``),
  ``cpuset.cpus``/``cpuset.mems`` (v1 cpuset children start empty: the parent
  ``aoe-territories`` is initialised from its own parent), ``memory.limit_in_bytes`` and
  ``memory.memsw.limit_in_bytes`` (memory plus swap: no swap beyond the limit; where the
  kernel has no swap accounting, ``memory.swappiness`` 0), ``pids.max``.
* **cgroup v2** (one unified hierarchy at ``<v2 root>``): one group
  ``<v2 root>/aoe-territories/<machine>`` with ``cpu.max`` (``vcpus*period period``),
  ``cpu.weight`` 100, ``cpuset.cpus``, ``memory.max``, ``memory.swap.max`` 0 and ``pids.max``;
  ``+cpu +cpuset +memory +pids`` (those the kernel offers) are enabled in
  ``cgroup.subtree_control`` of the root and of ``aoe-territories``; one that cannot be
  (``EBUSY`` where the root holds processes: a runner in a container's cgroup namespace) is
  not enforced, with a note, never a failed provisioning. nspawn started in that
  group (``--keep-unit --register=no``) makes its ``supervisor`` and ``payload`` children
  under it, so the limits cover the whole container.

Each controller is taken from v1 when its v1 hierarchy is mounted, else from v2 when the
unified hierarchy offers it, else that limit is not enforced (:func:`plan`). The roots are
injectable (:class:`CgroupHost`) so the v2 path can be tested against a folder tree.

A territory's CPUs (``vcpus`` of them, what ``nproc`` shows inside: affinity follows the
cpuset and root in the guest cannot widen it) are the host CPUs least used by the live
territories' cpusets (every ``aoe-territories/*`` group). The seats of one heat are placed
together, in an order rotated by a number derived from the heat id (:func:`heat_order`,
:func:`pick_in_heat`), whatever order their threads take the lock in: with three 1-vCPU seats
on 2 CPUs the seat that gets a CPU alone changes from heat to heat (each seat position 1/3
of the heats), never by seat index. Where the seats share CPUs, :func:`share_note` says so.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import re
import signal
import threading
import time
from collections import deque
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from aoe_tui.runtime.provider import DEFAULT_TASKS_MAX, ProvisionError, TerritoryResources

#: the parent group of every territory's group (same name in every hierarchy)
PARENT = "aoe-territories"
#: the limit controllers, in the order :func:`setup` writes them
CONTROLLERS = ("cpu", "cpuset", "memory", "pids")
#: v1 hierarchies that only account (CPU time used: :func:`cpu_usage_s`)
V1_ACCOUNTING = ("cpuacct",)
#: the limit each controller enforces (for ``limits()["enforced"]``)
LIMIT_OF = {"cpu": "cpu", "cpuset": "cpu", "memory": "memory", "pids": "tasks"}
#: equal CPU shares of every territory's group (v1 ``cpu.shares``; v2 ``cpu.weight`` 100)
CPU_SHARES = 1024
MIB = 1024 * 1024
#: the lock file (in the runtime folder of :mod:`netalloc`) that serialises CPU picks of
#: every runner on the host
CPU_PICK_LOCK = "cpu-pick.lock"
_pick_lock = threading.Lock()


#: the child of a territory's v1 limit group its processes live in (the root of its
#: cgroup namespace: what root in the guest can see and write), see :func:`setup`
GUEST_CHILD = "guest"


#: v1 limit files copied from a limit group into its :data:`GUEST_CHILD`, in order (a cpuset
#: child starts empty; memsw may not be set below the memory limit)
_GUEST_COPIES: dict[str, tuple[str, ...]] = {
    "cpuset": ("cpuset.mems", "cpuset.cpus"),
    "cpu": ("cpu.cfs_period_us", "cpu.cfs_quota_us"),
    "memory": ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes", "memory.swappiness"),
    "pids": ("pids.max",),
}


class LimitError(ProvisionError):
    """A limit file could not be written on a host that offers its controller; the message
    is one line naming the territory, the file and the error."""


@dataclass(frozen=True)
class CgroupHost:
    """Where this host's cgroup hierarchies are (injectable for tests).

    Attributes:
        v1_root: folder of the per-controller v1 hierarchies (``<v1_root>/memory``...).
        v2_root: mount point of the unified (v2) hierarchy, or None.
        self_cgroup: this process's ``/proc/self/cgroup`` (its own v1 groups).
    """

    v1_root: Path = Path("/sys/fs/cgroup")
    v2_root: Path | None = None
    self_cgroup: Path = Path("/proc/self/cgroup")

    def v1_mounted(self, controller: str) -> bool:
        return (self.v1_root / controller / "cgroup.procs").is_file()

    def v2_offers(self, controller: str) -> bool:
        if self.v2_root is None:
            return False
        try:
            return controller in (self.v2_root / "cgroup.controllers").read_text().split()
        except OSError:
            return False

    def own_v1_path(self, controller: str) -> str:
        """This process's group in the v1 hierarchy of ``controller`` (``/`` when unknown)."""
        with contextlib.suppress(OSError):
            for line in self.self_cgroup.read_text().splitlines():
                parts = line.split(":", 2)
                if len(parts) == 3 and controller in parts[1].split(","):
                    return parts[2] or "/"
        return "/"

    def v1_parent(self, controller: str) -> Path:
        """``<v1 root>/<controller><own group>/aoe-territories``."""
        return self.v1_root / controller / self.own_v1_path(controller).lstrip("/") / PARENT


def plan(host: CgroupHost) -> dict[str, str]:
    """Which cgroup version enforces each controller of :data:`CONTROLLERS`: ``"v1"``,
    ``"v2"`` or absent (not enforceable on this host). Reads a few files; never raises."""
    out: dict[str, str] = {}
    for c in CONTROLLERS:
        if host.v1_mounted(c):
            out[c] = "v1"
        elif host.v2_offers(c):
            out[c] = "v2"
    return out


def parse_cpus(text: str) -> list[int]:
    """``"0-2,5"`` -> ``[0, 1, 2, 5]`` (a cgroup cpu list); ``[]`` for empty or bad text."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        try:
            lo, _, hi = part.partition("-")
            cpus.update(range(int(lo), int(hi or lo) + 1))
        except ValueError:
            return []
    return sorted(cpus)


def format_cpus(cpus: Iterable[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2,5"``."""
    out: list[str] = []
    run: list[int] = []
    for c in sorted(set(cpus)):
        if run and c == run[-1] + 1:
            run.append(c)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [c]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def pick_cpus(available: Sequence[int], used: Sequence[int], vcpus: int, index: int) -> list[int]:
    """The ``vcpus`` CPUs of ``available`` least used by live territories (``used``: one
    entry per territory per CPU of its cpuset), ties spread by ``index`` (the CPU
    ``index mod n`` first, then the next ones; :func:`pick_in_heat` passes the seat's
    position in the heat's rotated order): three 1-vCPU seats on 2 CPUs go 2/1. All of
    ``available`` when ``vcpus`` is not smaller."""
    avail = sorted(set(available))
    if vcpus >= len(avail):
        return avail
    n = len(avail)
    load = {c: 0 for c in avail}
    for c in used:
        if c in load:
            load[c] += 1
    order = sorted(range(n), key=lambda i: (load[avail[i]], (i - index) % n))
    return sorted(avail[i] for i in order[:vcpus])


def heat_order(heat_id: str, seats: Sequence[tuple[str, int]]) -> list[tuple[str, int]]:
    """``seats`` (machine, vcpus), in seat order, rotated by ``sha1(heat_id) mod len(seats)``:
    the order in which :func:`pick_in_heat` places a heat's seats (so the seat that gets the
    least shared CPUs changes from heat to heat, equally often per seat position in
    expectation)."""
    if not seats:
        return []
    r = int(hashlib.sha1(heat_id.encode()).hexdigest()[:8], 16) % len(seats)
    return [*seats[r:], *seats[:r]]


def pick_in_heat(available: Sequence[int], others: Sequence[int], peers: Sequence[tuple[str, int]],
                 machine: str) -> list[int]:
    """The CPUs of ``machine``, one of the heat's ``peers`` (:func:`heat_order`): the peers
    are placed in that order, each with :func:`pick_cpus` against ``others`` (the CPUs of
    other heats' live territories) plus the peers placed before it, ties by its position. The
    answer does not depend on which seat asks first. ``[]`` when ``machine`` is no peer."""
    used = list(others)
    for pos, (m, vcpus) in enumerate(peers):
        got = pick_cpus(available, used, vcpus, pos)
        if m == machine:
            return got
        used += got
    return []


def share_note(seats: Sequence[tuple[str, int, str]]) -> str | None:
    """One line when a heat's seats (territory id, vcpus, its cpuset e.g. ``"0"``) share host
    CPUs among themselves, e.g. ``3 seats x 1 vCPU on 2 host CPUs: builder-one and
    builder-three share CPU 0``; None when none does (or no cpuset). Never raises."""
    placed = [(t, v, parse_cpus(c)) for t, v, c in seats if parse_cpus(c)]
    union = sorted({c for _t, _v, cpus in placed for c in cpus})
    if len(placed) < 2:
        return None
    by_cpu: dict[int, list[str]] = {}
    for t, _v, cpus in placed:
        for c in cpus:
            by_cpu.setdefault(c, []).append(t)
    groups: dict[tuple[str, ...], list[int]] = {}
    for c, ts in sorted(by_cpu.items()):
        if len(ts) > 1:
            groups.setdefault(tuple(ts), []).append(c)
    if not groups:
        return None
    vcpus = {v for _t, v, _c in placed}
    each = min(vcpus)
    head = (f"{len(placed)} seats x {each} vCPU{'s' if each > 1 else ''}" if len(vcpus) == 1
            else f"{len(placed)} seats, {sum(v for _t, v, _c in placed)} vCPUs")

    def names(ts: tuple[str, ...]) -> str:
        return " and ".join(ts) if len(ts) < 3 else ", ".join(ts[:-1]) + " and " + ts[-1]

    parts = [f"{names(ts)} share CPU{'s' if len(cs) > 1 else ''} {format_cpus(cs)}" for ts, cs in groups.items()]
    return f"{head} on {len(union)} host CPU{'s' if len(union) > 1 else ''}: " + "; ".join(parts)


def _make_group(path: Path) -> None:
    """``mkdir -p`` of a cgroup (the kernel fills in its files); a test's fake cgroupfs
    replaces this to do the same."""
    path.mkdir(parents=True, exist_ok=True)


def make_group(path: Path, tries: int = 5) -> None:
    """Create the cgroup ``path`` and its parents (:func:`_make_group`). Another runner's
    cleanup may remove an empty parent (``aoe-territories``) between the ``mkdir`` of the
    parent and of the group: the creation is then retried, ``tries`` times in all.

    Raises:
        OSError: it could not be made.
    """
    for i in range(tries):
        try:
            _make_group(path)
            return
        except FileNotFoundError:
            if i == tries - 1:
                raise


def _write_file(path: Path, value: str) -> None:
    """Write ``value`` to the cgroup file ``path`` (every cgroupfs write goes through here; a
    test's fake cgroupfs replaces it to answer as the kernel would, errors included).

    Raises:
        OSError: the kernel refused the write (e.g. ``EBUSY``, ``EINVAL``).
    """
    path.write_text(value)


def _write(path: Path, value: str, territory: str) -> None:
    try:
        _write_file(path, value)
    except OSError as exc:
        raise LimitError(f"territory {territory}: cannot set {path} to {value.strip()!r}: "
                         f"{exc.strerror or exc}") from None


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


@dataclass
class TerritoryGroups:
    """A territory's limit groups and what they enforce (recorded in ``state.json``).

    Attributes:
        groups: controller -> group folder (v1: one per hierarchy, ``cpuacct`` included;
            v2: the same unified group for each).
        versions: controller -> ``"v1"``/``"v2"`` for the limit controllers set.
        cpus: the territory's CPUs (cgroup list, e.g. ``"0"``), ``""`` when no cpuset.
        why: controller -> why it is not enforced although the host offers it (a v2
            controller that could not be enabled, see :func:`setup`).
    """

    groups: dict[str, str] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    cpus: str = ""
    why: dict[str, str] = field(default_factory=dict)
    #: controller -> the group the territory's processes enter: on v1 the child
    #: :data:`GUEST_CHILD` of the limit group (see :func:`setup`), absent on v2
    entries: dict[str, str] = field(default_factory=dict)

    def paths(self) -> list[Path]:
        """Every distinct limit group folder (what the teardown removes, with its children)."""
        return [Path(p) for p in dict.fromkeys(self.groups.values())]

    def entry_paths(self) -> list[Path]:
        """Every distinct group the territory's processes enter (the nspawn wrapper's
        ``cgroup.procs`` targets): a v1 limit group's :data:`GUEST_CHILD`, a v2 group itself."""
        return [Path(p) for p in dict.fromkeys(self.entries.get(c, g) for c, g in self.groups.items())]

    def enforced(self) -> list[str]:
        """The limits enforced by cgroups (``cpu``, ``memory``, ``tasks``), in that order."""
        got = {LIMIT_OF[c] for c in self.versions}
        return [x for x in ("cpu", "memory", "tasks") if x in got]

    def to_json(self) -> dict[str, object]:
        return {"groups": dict(self.groups), "versions": dict(self.versions), "cpus": self.cpus,
                "why": dict(self.why), "entries": dict(self.entries)}

    @classmethod
    def from_json(cls, data: object) -> TerritoryGroups:
        if not isinstance(data, dict):
            return cls()
        return cls({str(k): str(v) for k, v in (data.get("groups") or {}).items()},
                   {str(k): str(v) for k, v in (data.get("versions") or {}).items()}, str(data.get("cpus") or ""),
                   {str(k): str(v) for k, v in (data.get("why") or {}).items()},
                   {str(k): str(v) for k, v in (data.get("entries") or {}).items()})


def _live_cpus(parent: Path, exclude: Collection[str]) -> list[int]:
    """The CPUs of every territory group under ``parent`` but those named in ``exclude`` (one
    entry each)."""
    used: list[int] = []
    with contextlib.suppress(OSError):
        for g in parent.iterdir():
            if g.is_dir() and g.name not in exclude:
                used.extend(parse_cpus(_read(g / "cpuset.cpus")))
    return used


@contextlib.contextmanager
def _cpu_pick_lock(lock_file: Path | None):
    with _pick_lock:
        fd = None
        if lock_file is not None:
            with contextlib.suppress(OSError):
                lock_file.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o644)
                fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            if fd is not None:
                os.close(fd)


def _v2_enable(d: Path, wanted: Sequence[str]) -> dict[str, str]:
    """Enable each of the ``wanted`` controllers in ``d``'s ``cgroup.subtree_control`` (one
    write each). Returns controller -> why it is not enabled there (not offered, or the write
    failed: ``EBUSY`` when ``d`` holds processes, e.g. the root of a cgroup namespace a
    runner in a container sees). Never raises."""
    offered = _read(d / "cgroup.controllers").split()
    on = _read(d / "cgroup.subtree_control").split()
    failed: dict[str, str] = {}
    for c in wanted:
        if c in on:
            continue
        if c not in offered:
            failed[c] = f"cgroup v2 {c} controller not offered in {d}"
            continue
        try:
            _write_file(d / "cgroup.subtree_control", f"+{c}")
        except OSError as exc:
            why = exc.strerror or str(exc)
            if exc.errno == errno.EBUSY:
                why += " (that group holds processes: a runner inside a container's cgroup namespace?)"
            failed[c] = f"cgroup v2 {c} controller cannot be enabled in {d / 'cgroup.subtree_control'}: {why}"
    return failed


def setup(host: CgroupHost, machine: str, territory: str, resources: TerritoryResources, index: int,
          *, lock_file: Path | None = None, peers: Sequence[tuple[str, int]] = ()) -> TerritoryGroups:
    """Create territory ``machine``'s limit groups and write ``resources`` into them.

    ``territory``: the territory id (for messages); ``peers``: the heat's territories
    (machine, vcpus) in :func:`heat_order`, ``machine`` among them: its CPUs are
    :func:`pick_in_heat`'s; without them, :func:`pick_cpus` with ties by ``index``.
    CPU: quota of ``vcpus`` CPUs and a cpuset of ``vcpus`` CPUs (:func:`pick_cpus`, under
    the host-wide ``lock_file``, e.g. ``netalloc.runtime_dir() / CPU_PICK_LOCK``, so concurrent
    heats see each other's picks; None: this process's lock only); memory ``memory_mib`` MiB with
    no swap; ``tasks`` tasks. Controllers the host lacks are skipped (see :func:`plan`).
    Blocking; returns the groups (to record, and for :func:`exhaustion`).

    On cgroup v2 a controller that cannot be enabled in ``cgroup.subtree_control`` (of the
    root, or of ``aoe-territories``) is not enforced: it leaves ``versions`` and its reason
    goes in ``why`` (the provider's note), never an error.

    Raises:
        LimitError: a group or a limit file could not be made or written (one line naming
            the territory and the file); groups already made are removed first.
    """
    versions = plan(host)
    tg = TerritoryGroups(versions=versions)
    try:
        _setup(host, machine, territory, resources, index, tg, lock_file, peers)
    except LimitError:
        remove(tg)
        raise
    except OSError as exc:
        remove(tg)
        raise LimitError(f"territory {territory}: cannot make its cgroup: "
                         f"{getattr(exc, 'filename', '') or ''} {exc.strerror or exc}".replace("  ", " ")) from None
    return tg


def _mkgroup(path: Path, territory: str) -> None:
    try:
        make_group(path)
    except OSError as exc:
        raise LimitError(f"territory {territory}: cannot make cgroup {path}: {exc.strerror or exc}") from None


def _setup(host: CgroupHost, machine: str, territory: str, r: TerritoryResources, index: int,
           tg: TerritoryGroups, lock_file: Path | None, peers: Sequence[tuple[str, int]]) -> None:
    v = tg.versions
    v2_group = host.v2_root / PARENT / machine if host.v2_root is not None else None
    if "v2" in v.values():
        assert v2_group is not None and host.v2_root is not None
        wanted = [c for c, ver in v.items() if ver == "v2"]
        failed = _v2_enable(host.v2_root, wanted)  # the root's children, then aoe-territories' children
        # the group first, then its parent's subtree_control: a parent removed by another
        # runner's cleanup meanwhile cannot come back without it (mkdir -p would make it bare)
        _mkgroup(v2_group, territory)
        failed.update(_v2_enable(v2_group.parent, [c for c in wanted if c not in failed]))
        for c, why in failed.items():  # not enforced (a note), never a failed provisioning
            del v[c]
            tg.why[c] = why
    # cpuset first: it is the one that needs a lock (and the one a v1 process cannot join empty)
    if "cpuset" in v:
        with _cpu_pick_lock(lock_file):
            if v["cpuset"] == "v1":
                parent = host.v1_parent("cpuset")
                group = parent / machine
                # the group first: once it exists no other runner's cleanup can remove the
                # parent, which mkdir -p would otherwise make again with no CPUs
                _mkgroup(group, territory)
                for f in ("cpuset.cpus", "cpuset.mems"):  # v1 children start empty
                    if not _read(parent / f).strip():
                        _write(parent / f, _read(parent.parent / f).strip() or "0", territory)
                available = parse_cpus(_read(parent / "cpuset.cpus"))
            else:
                assert v2_group is not None
                parent, group = v2_group.parent, v2_group
                available = parse_cpus(_read(parent / "cpuset.cpus.effective")
                                       or _read(host.v2_root / "cpuset.cpus.effective"))  # type: ignore[operator]
            available = available or sorted(os.sched_getaffinity(0))
            mates = {m for m, _v in peers}
            if machine in mates:
                cpus = pick_in_heat(available, _live_cpus(parent, mates), peers, machine)
            else:
                cpus = pick_cpus(available, _live_cpus(parent, {machine}), r.vcpus, index)
            _mkgroup(group, territory)
            tg.groups["cpuset"] = str(group)
            if v["cpuset"] == "v1":
                _write(group / "cpuset.mems", _read(parent / "cpuset.mems").strip() or "0", territory)
            tg.cpus = format_cpus(cpus)
            _write(group / "cpuset.cpus", tg.cpus, territory)
    for c in ("cpu", "memory", "pids"):
        if c not in v:
            continue
        if v[c] == "v1":
            group = host.v1_parent(c) / machine
            _mkgroup(group, territory)
        else:
            assert v2_group is not None
            group = v2_group
        tg.groups[c] = str(group)
        if c == "cpu":
            if v[c] == "v1":
                period = int(_read(group / "cpu.cfs_period_us").strip() or 100000)
                _write(group / "cpu.shares", str(CPU_SHARES), territory)
                _write(group / "cpu.cfs_quota_us", str(r.vcpus * period), territory)
            else:
                _write(group / "cpu.weight", "100", territory)
                _write(group / "cpu.max", f"{r.vcpus * 100000} 100000", territory)
        elif c == "memory":
            limit = str(r.memory_mib * MIB)
            if v[c] == "v1":
                _write(group / "memory.limit_in_bytes", limit, territory)
                if (group / "memory.memsw.limit_in_bytes").exists():
                    _write(group / "memory.memsw.limit_in_bytes", limit, territory)
                elif (group / "memory.swappiness").exists():
                    _write(group / "memory.swappiness", "0", territory)
            else:
                _write(group / "memory.max", limit, territory)
                if (group / "memory.swap.max").exists():
                    _write(group / "memory.swap.max", "0", territory)
        else:
            _write(group / "pids.max", str(r.tasks), territory)
    for c in V1_ACCOUNTING:
        if host.v1_mounted(c):
            group = host.v1_parent(c) / machine
            with contextlib.suppress(LimitError):  # accounting only: never fatal
                _mkgroup(group, territory)
                tg.groups[c] = str(group)
    # v1: the processes go one level down, into GUEST_CHILD, the root of the territory's
    # cgroup namespace. Root in the guest can mount cgroupfs there and write that child's
    # files, never the limit group's above it (the limits are hierarchical; a child's
    # cpuset must lie within its parent's). Without it a player raised its own limits.
    for c, group in list(tg.groups.items()):
        if v.get(c, "v1") != "v1" and c not in V1_ACCOUNTING:
            continue
        child = Path(group) / GUEST_CHILD
        _mkgroup(child, territory)
        # the same limits in the child, so the guest reads its class where it looks (a JVM
        # sizes its heap from memory.limit_in_bytes); raising them there changes nothing
        for f in _GUEST_COPIES.get(c, ()):
            if (Path(group) / f).exists():
                _write(child / f, _read(Path(group) / f).strip(), territory)
        tg.entries[c] = str(child)


def _counter(text: str, key: str) -> int:
    for line in text.splitlines():
        k, _, val = line.partition(" ")
        if k == key:
            with contextlib.suppress(ValueError):
                return int(val.strip())
    return 0


def _subtree_counter(group: Path, name: str, key: str) -> int:
    """The sum of counter ``key`` of file ``name`` over ``group`` and every group below it."""
    total = 0
    for dirpath, _dirs, files in os.walk(group):
        if name in files:
            total += _counter(_read(Path(dirpath) / name), key)
    return total


def exhaustion(tg: TerritoryGroups) -> set[str]:
    """The cgroup limits the territory has hit (``memory``: the OOM killer killed one of its
    processes; ``tasks``: a fork failed at ``pids.max``). ``memory.events`` (v2) is
    hierarchical: the group's own file counts its whole subtree (not ``.local``); v1's
    ``memory.oom_control`` counts a kill only in the victim's group, so it is summed over the
    subtree (the processes live in :data:`GUEST_CHILD`). Before
    Linux 6.13 ``pids.events`` ``max`` is counted only in the cgroup of the task whose fork
    failed (on v2 nspawn's ``payload/...`` leaves), so it is summed over the group's subtree.
    Reads a few files; never raises."""
    hit: set[str] = set()
    mem = tg.groups.get("memory")
    if mem:
        if tg.versions.get("memory") == "v1":
            # v1 counts an OOM kill in the victim's own group only (its GUEST_CHILD)
            if _subtree_counter(Path(mem), "memory.oom_control", "oom_kill") > 0:
                hit.add("memory")
        else:
            events = _read(Path(mem) / "memory.events")
            if _counter(events, "oom_kill") > 0 or _counter(events, "oom") > 0:
                hit.add("memory")
    pids = tg.groups.get("pids")
    if pids and _subtree_counter(Path(pids), "pids.events", "max") > 0:
        hit.add("tasks")
    return hit


def cpu_usage_s(tg: TerritoryGroups) -> float | None:
    """CPU time used by the territory so far, in seconds (v1 ``cpuacct.usage``, v2
    ``cpu.stat`` ``usage_usec``); None when not accounted. Never raises."""
    acct = tg.groups.get("cpuacct")
    if acct:
        with contextlib.suppress(ValueError):
            return int(_read(Path(acct) / "cpuacct.usage").strip()) / 1e9
    cpu = tg.groups.get("cpu")
    if cpu and tg.versions.get("cpu") == "v2":
        usec = _counter(_read(Path(cpu) / "cpu.stat"), "usage_usec")
        return usec / 1e6
    return None


#: CPU yield (issue 26, "a fair share under load"): a territory that wanted at least
#: :data:`YIELD_BUSY` of its ``vcpus`` over the last :data:`YIELD_WINDOW_S` seconds (CPU time
#: used plus time its tasks waited to run: :class:`CpuDemand`) yields, its CPU weight divided
#: by :data:`YIELD_FACTOR`, until its demand falls under :data:`YIELD_CALM`
YIELD_WINDOW_S = 3.0
YIELD_BUSY = 0.9
YIELD_CALM = 0.6
YIELD_FACTOR = 8
#: seconds between two samples of the territories' CPU demand (the container provider's pacer)
YIELD_SAMPLE_S = 0.5


class CpuDemand:
    """A territory's CPU demand so far, in seconds: the CPU time it used (:func:`cpu_usage_s`)
    plus the time its tasks waited in a run queue (``/proc/<tid>/schedstat`` field 2,
    ``run_delay``, summed over the threads listed in its groups' ``tasks``/``cgroup.threads``;
    a thread counts from its second sample, so a thread that lives less than one sample
    interval adds only its CPU time). Waiting includes being held back by the CFS quota: four
    busy loops on a 1-vCPU class demand 4 CPUs. Never raises; :meth:`read` is None where the
    CPU time is not accounted.

    A greedy seat on a CPU it shares demands all of its vCPUs even when it gets half of one:
    demand, not use, tells it from a rival."""

    def __init__(self) -> None:
        self.waits: dict[str, int] = {}
        self.waited_ns = 0

    def read(self, tg: TerritoryGroups) -> float | None:
        used = cpu_usage_s(tg)
        if used is None:
            return None
        group = tg.groups.get("cpu") or tg.groups.get("cpuacct")
        now: dict[str, int] = {}
        if group:
            for dirpath, _dirs, files in os.walk(group):
                for name in ("tasks", "cgroup.threads"):
                    if name in files:
                        for tid in _read(Path(dirpath) / name).split():
                            fields = _read(Path("/proc") / tid / "schedstat").split()
                            if len(fields) >= 2 and fields[1].isdigit():
                                now[tid] = int(fields[1])
        self.waited_ns += sum(max(0, w - self.waits[t]) for t, w in now.items() if t in self.waits)
        self.waits = now
        return used + self.waited_ns / 1e9


@dataclass
class CpuYield:
    """Whether one territory yields the CPU to the others, from samples of its CPU demand
    (:class:`CpuDemand`). Pure: no file, no clock of its own.

    A weight matters only where territories compete for a host CPU (several heats at once,
    or three seats on two CPUs): a territory that has wanted all of its ``vcpus`` for
    :data:`YIELD_WINDOW_S` (a build, a busy loop, a fork bomb, a boot) then gets
    1/:data:`YIELD_FACTOR` of the share of one that has not, so a rival waking up to answer
    the referee or to run its next command is not held behind it. It still gets every CPU
    cycle nobody else wants, up to its class (the CFS quota): when the host has room it
    loses nothing.

    Attributes:
        vcpus: the territory's class (CPUs its quota allows).
        yielding: whether it yields now.
        yielded_s: seconds it yielded before the current spell (see :meth:`yielded_total`).
    """

    vcpus: int
    yielding: bool = False
    yielded_s: float = 0.0
    since_s: float | None = None
    samples: deque[tuple[float, float]] = field(default_factory=deque)

    def sample(self, now_s: float, demand_s: float | None) -> bool | None:
        """Add a sample (``now_s``: monotonic seconds; ``demand_s``: the CPU demand so far,
        :meth:`CpuDemand.read`, None when not accounted) and return the new :attr:`yielding`
        when it changed, else None. Needs samples spanning 90 % of :data:`YIELD_WINDOW_S`
        before it first decides."""
        if demand_s is None:
            return None
        used_s = demand_s
        s = self.samples
        s.append((now_s, used_s))
        while len(s) > 2 and now_s - s[1][0] >= YIELD_WINDOW_S:
            s.popleft()
        t0, u0 = s[0]
        span = now_s - t0
        if span < 0.9 * YIELD_WINDOW_S or self.vcpus <= 0:
            return None
        share = (used_s - u0) / (span * self.vcpus)
        now_yielding = share >= YIELD_CALM if self.yielding else share >= YIELD_BUSY
        if now_yielding == self.yielding:
            return None
        if now_yielding:
            self.since_s = now_s
        else:
            self.yielded_s += now_s - (self.since_s if self.since_s is not None else now_s)
            self.since_s = None
        self.yielding = now_yielding
        return now_yielding

    def end(self, now_s: float) -> None:
        """The territory is gone (teardown): close the current spell at ``now_s``."""
        if self.yielding and self.since_s is not None:
            self.yielded_s += now_s - self.since_s
        self.yielding, self.since_s = False, None

    def yielded_total(self, now_s: float) -> float:
        """Seconds yielded so far, the current spell up to ``now_s`` included."""
        return self.yielded_s + (now_s - self.since_s if self.yielding and self.since_s is not None else 0.0)

    def weight(self, base: int) -> int:
        """The CPU weight to write (``CPUWeight=`` scale, 100 = a normal process) for a
        territory whose weight by phase is ``base``."""
        return max(1, base // YIELD_FACTOR) if self.yielding else base


def write_cpu_weight(tg: TerritoryGroups, weight: int) -> bool:
    """Write ``weight`` (``CPUWeight=`` scale: 1..10000, 100 = :data:`CPU_SHARES`) into the
    territory's ``cpu`` limit group: v1 ``cpu.shares`` = ``weight * 1024 / 100`` (at least 2),
    v2 ``cpu.weight``. False when it has no ``cpu`` group or the write failed (a group gone
    with its territory); never raises."""
    group = tg.groups.get("cpu")
    if not group:
        return False
    if tg.versions.get("cpu") == "v2":
        name, value = "cpu.weight", str(min(10000, max(1, weight)))
    else:
        name, value = "cpu.shares", str(max(2, weight * CPU_SHARES // 100))
    try:
        _write_file(Path(group) / name, value)
    except OSError:
        return False
    return True


def remove_tree(path: Path) -> bool:
    """Remove a cgroup tree bottom-up (``rmdir`` only: cgroup folders hold no files); True
    when it is gone. A group with a process left in it stays."""
    if path.is_dir():
        for dirpath, _dirs, _files in sorted(os.walk(path), key=lambda t: -len(t[0])):
            with contextlib.suppress(OSError):
                os.rmdir(dirpath)
    return not path.exists()


def remove_groups(paths: Iterable[str | Path]) -> list[str]:
    """:func:`remove_tree` of each group, then its parent ``aoe-territories`` when empty
    (race-safe: a parent still holding another territory's group stays, silently).
    Returns the groups that could not be removed (a process still in them)."""
    left: list[str] = []
    for p in dict.fromkeys(str(x) for x in paths):
        path = Path(p)
        if not remove_tree(path):
            left.append(p)
            continue
        if path.parent.name == PARENT:
            with contextlib.suppress(OSError):
                os.rmdir(path.parent)
    return left


def remove(tg: TerritoryGroups) -> list[str]:
    """:func:`remove_groups` of ``tg``'s groups."""
    return remove_groups(tg.paths())


#: the cgroup the guest's systemd gives one logind session (``session-<id>.scope``)
SESSION_SCOPE = re.compile(r"session-([A-Za-z0-9]+)\.scope")


def _session_scopes(trees: Iterable[str | Path]) -> dict[str, list[Path]]:
    """Session id -> its ``session-<id>.scope`` folders below the cgroup ``trees`` (one per
    hierarchy the guest's systemd uses); scopes below a scope are not looked for."""
    found: dict[str, list[Path]] = {}
    for tree in dict.fromkeys(str(t) for t in trees):
        for dirpath, dirs, _files in os.walk(tree):
            for d in list(dirs):
                m = SESSION_SCOPE.fullmatch(d)
                if m:
                    found.setdefault(m.group(1), []).append(Path(dirpath, d))
                    dirs.remove(d)
    return found


def _procs_below(group: Path) -> set[int]:
    """Every pid in ``group`` and its children (``cgroup.procs``); none when it is gone."""
    pids: set[int] = set()
    for dirpath, _dirs, files in os.walk(group):
        if "cgroup.procs" in files:
            with contextlib.suppress(OSError, ValueError):
                pids |= {int(x) for x in Path(dirpath, "cgroup.procs").read_text().split()}
    return pids


def end_sessions(trees: Iterable[str | Path], *, timeout_s: float = 5.0) -> list[str]:
    """End every login session of a territory from the host: SIGKILL each process in each
    ``session-<id>.scope`` the guest's systemd made below the territory's host-side cgroup
    ``trees`` (a container territory's groups, ``Territory.extra["cgroups"]``), whatever its
    root has done to ``loginctl``, logind or the session's processes (``setsid``, ``nohup``,
    a double fork: they stay in their session's scope). Where the kernel offers it (cgroup
    v2, Linux >= 5.14) ``cgroup.kill`` kills the scope at once, forks racing included; the
    pids left are killed until none is (at most ``timeout_s`` seconds, polled every 50 ms).
    Units under ``system.slice`` (a deployed service) are not sessions and keep running; a
    process root moved out of its session scope on purpose is one of those.

    Returns the ids of the sessions that had processes (sorted; ``[]``: none). Never raises:
    a group that is gone, or a process that ended meanwhile, is skipped."""
    scopes = _session_scopes(trees)
    ended = sorted(sid for sid, dirs in scopes.items() if any(_procs_below(d) for d in dirs))
    groups = [d for sid in ended for d in scopes[sid]]
    for g in groups:
        with contextlib.suppress(OSError):
            (g / "cgroup.kill").write_text("1")
    deadline = time.monotonic() + timeout_s
    while True:
        left = set().union(*(_procs_below(g) for g in groups)) - {os.getpid()}
        if not left or time.monotonic() > deadline:
            return ended
        for pid in left:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)


def describe(host: CgroupHost) -> dict[str, tuple[bool, str]]:
    """For ``aoe doctor``: limit (``cpu``, ``memory``, ``tasks``) -> (enforceable, how or why
    not). Never raises."""
    v = plan(host)

    def how(c: str, what: str) -> str:
        return f"cgroup {v[c]} {c} controller ({what})"

    out: dict[str, tuple[bool, str]] = {}
    cpu_parts = [how(c, w) for c, w in (("cpu", "CFS quota of vcpus CPUs"), ("cpuset", "the guest sees vcpus CPUs"))
                 if c in v]
    missing = [c for c in ("cpu", "cpuset") if c not in v]
    if not missing:
        out["cpu"] = (True, "enforced: " + "; ".join(cpu_parts))
    elif cpu_parts:
        out["cpu"] = (True, "partly enforced: " + "; ".join(cpu_parts) + f"; no {missing[0]} controller: "
                      + ("the guest sees every host CPU" if missing[0] == "cpuset"
                         else "a territory may use all of its CPUs' time"))
    else:
        out["cpu"] = (False, "not enforced (no cgroup cpu or cpuset controller): a territory sees and may use "
                      "every host CPU")
    out["memory"] = ((True, "enforced: " + how("memory", "memory_mib, no swap beyond it")) if "memory" in v else
                     (False, "not enforced (no cgroup memory controller): a territory may use the host's whole memory"))
    out["tasks"] = ((True, "enforced: " + how("pids", f"pids.max = {DEFAULT_TASKS_MAX} tasks")) if "pids" in v else
                    (False, "not enforced (no cgroup pids controller): a fork loop in a territory may exhaust "
                     "the host's process table"))
    return out
