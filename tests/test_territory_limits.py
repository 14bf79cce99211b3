"""Issue 26 items 1-2 (container provider): each territory gets exactly its class's resources.

Real containers (one set of three 1-vCPU / 256 MiB / 512 MiB disk / 256 tasks territories,
shared by the module): what each seat sees from inside (``nproc``, its cgroup files,
``df -m /``), a seat that passes each limit (memory, tasks, disk, CPU) fails or slows alone
and ``exhaustion()`` names that limit, nothing is left on the host after the teardown. The
cgroup-v2 path runs against a fake cgroupfs folder tree (this host is cgroup v1).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import pytest_asyncio
from hypothesis import given, settings
from hypothesis import strategies as st

from aoe_tui.runtime import cgroups, ssh, territory_disk
from aoe_tui.runtime.container import ContainerProvider
from aoe_tui.runtime.provider import ProvisionError, Territory, TerritoryResources, TerritorySpec

amod = pytest.mark.asyncio(loop_scope="module")
CLASS = TerritoryResources(vcpus=1, memory_mib=256, disk_mib=512, tasks=256)
NAMES = ("builder-one", "builder-two", "builder-three")
MIB = 1 << 20


def _need_container_host() -> None:
    from shutil import which

    if os.geteuid() != 0:
        pytest.skip("container provider tests need root")
    if which("systemd-nspawn") is None:
        pytest.skip("systemd-nspawn not installed (apt-get install systemd-container)")


def _live_cpusets() -> list[str]:
    host = ContainerProvider._cgroup_host()
    if cgroups.plan(host).get("cpuset") != "v1":
        return []
    parent = host.v1_parent("cpuset")
    return [p.name for p in parent.iterdir() if p.is_dir()] if parent.is_dir() else []


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def seats(guest_image, tmp_path_factory):
    """(provider, territories, workdir, other live cpusets before): three territories of CLASS."""
    _need_container_host()
    workdir = tmp_path_factory.mktemp("limits")
    before = _live_cpusets()
    provider = ContainerProvider(workdir, image=guest_image, heat_id=f"test-limits-{os.getpid()}")
    try:
        territories = await provider.provision(
            [TerritorySpec(id=n, password=f"{n}-race", index=i, resources=CLASS) for i, n in enumerate(NAMES)])
        yield provider, territories, workdir, before
    finally:
        await provider.teardown()


async def sh(t: Territory, command: str, timeout_s: float = 60) -> ssh.CommandResult:
    return await ssh.run(t.host, t.ssh_port, t.password, command, timeout_s=timeout_s)


async def _others_unharmed(provider, territories, seat: int, own: dict[str, str]) -> None:
    """Every other seat still logs in and runs a command; its exhaustion is empty or only its own limit."""
    for i, t in enumerate(territories):
        if i == seat:
            continue
        res = await sh(t, "echo alive")
        assert res.exit_status == 0 and res.stdout.strip() == "alive"
        assert provider.exhaustion(t.id) in ([], [own[t.id]] if t.id in own else []), (t.id, provider.exhaustion(t.id))


PHRASES = {NAMES[0]: "out of memory in the territory (256 MiB)", NAMES[1]: "out of tasks in the territory (256)",
           NAMES[2]: "disk full in the territory (512 MiB)"}


@amod
async def test_each_seat_sees_its_class(seats):
    provider, territories, _workdir, before = seats
    cpus = []
    for t in territories:
        res = await sh(t, "nproc; df -m / | tail -1; cat /sys/fs/cgroup/memory/memory.limit_in_bytes "
                          "/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes /sys/fs/cgroup/pids/pids.max "
                          "/sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/cpu/cpu.cfs_period_us "
                          "/sys/fs/cgroup/cpu/cpu.shares")
        assert res.exit_status == 0, res.stderr
        out = res.stdout.split("\n")
        assert out[0] == str(CLASS.vcpus)  # nproc
        size_mib = int(out[1].split()[1])  # df -m /: the territory's own disk
        assert abs(size_mib - CLASS.disk_mib) <= CLASS.disk_mib // 100 + 2, out[1]
        mem, memsw, pids, quota, period, shares = (int(x) for x in out[2:8])
        assert mem == memsw == CLASS.memory_mib * MIB  # no swap beyond the limit
        assert pids == CLASS.tasks
        assert quota == CLASS.vcpus * period and shares == 1024
        lim = provider.limits(t.id)
        assert {k: lim[k] for k in ("vcpus", "memory_mib", "disk_mib", "tasks")} == {
            "vcpus": 1, "memory_mib": 256, "disk_mib": 512, "tasks": 256}
        assert lim["enforced"] == ["cpu", "memory", "tasks", "disk"] and "not_enforced" not in lim
        cpus.append(lim["cpus"])
        assert provider.exhaustion(t.id) == []
    ncpu = len(os.sched_getaffinity(0))
    shares = [n for n in provider.notes if " share CPU" in n]
    assert [n for n in provider.notes if n not in shares] == []
    if not before and ncpu >= 2:  # no other live territory: the three seats spread (2/1 on 2 CPUs)
        assert len(set(cpus)) == min(3, ncpu), cpus
        if ncpu == 2:  # one note names the two seats that share a CPU
            lone = next(n for n, c in zip(NAMES, cpus) if cpus.count(c) == 1)
            pair = [n for n in NAMES if n != lone]
            assert shares == [f"3 seats x 1 vCPU on 2 host CPUs: {pair[0]} and {pair[1]} share CPU "
                              f"{cpus[NAMES.index(pair[0])]}"], provider.notes
        elif ncpu >= 3:
            assert shares == []


@amod
async def test_root_in_the_guest_cannot_raise_its_limits(seats):
    _provider, territories, _workdir, _ = seats
    res = await sh(territories[0], "echo -1 > /sys/fs/cgroup/memory/memory.limit_in_bytes; "
                                   "taskset -p -c 0-63 $$ >/dev/null 2>&1; nproc")
    assert res.exit_status == 0 and res.stdout.strip() == "1"
    assert "Read-only file system" in res.stderr
    again = await sh(territories[0], "cat /sys/fs/cgroup/memory/memory.limit_in_bytes")
    assert int(again.stdout) == CLASS.memory_mib * MIB


@amod
async def test_a_memory_hog_is_killed_alone(seats):
    provider, territories, _workdir, _ = seats
    t = territories[0]
    res = await sh(t, "python3 -c \"b = b'x' * (400 << 20); print('survived')\"; echo rc=$?")
    assert "survived" not in res.stdout and "rc=137" in res.stdout, (res.stdout, res.stderr)
    assert provider.exhaustion(t.id) == [PHRASES[t.id]]
    assert (await sh(t, "echo alive")).stdout.strip() == "alive"  # the seat itself goes on
    await _others_unharmed(provider, territories, 0, PHRASES)


FORK_LOOP = r"""
import os, sys
pids = []
err = None
while len(pids) < 1000:
    try:
        pid = os.fork()
    except OSError as e:
        err = e.errno
        break
    if pid == 0:
        os.execv("/bin/sleep", ["sleep", "60"])
    pids.append(pid)
for p in pids:
    os.kill(p, 9)
for p in pids:
    os.waitpid(p, 0)
print(len(pids), err)
"""


@amod
async def test_root_in_the_guest_cannot_raise_its_limits_through_its_own_cgroupfs(seats):
    """Issue 26, from a new user's trial: root in the guest mounts the cgroup hierarchies itself
    (its cgroup namespace's root) and writes larger limits there. The limits hold: the group it
    can reach is a child of the limit group, so the memory and tasks limits still bite, and its
    cpuset cannot be widened (nproc stays the class's)."""
    provider, territories, _workdir, _ = seats
    t = territories[0]  # the memory seat: the hog below is its own limit again
    res = await sh(t, "set -x; for c in memory pids cpu cpuset; do mkdir -p /mnt/cg-$c; mount -t cgroup -o $c none /mnt/cg-$c; done; "
                      "echo 4294967296 > /mnt/cg-memory/memory.memsw.limit_in_bytes; "
                      "echo 4294967296 > /mnt/cg-memory/memory.limit_in_bytes; "
                      "echo max > /mnt/cg-pids/pids.max; echo -1 > /mnt/cg-cpu/cpu.cfs_quota_us; "
                      "echo 0-63 > /mnt/cg-cpuset/cpuset.cpus; "
                      f"cat /proc/self/cgroup; nproc; taskset -p -c 0-63 $$ >/dev/null 2>&1; nproc")
    assert res.stdout.strip().split("\n")[-2:] == [str(CLASS.vcpus)] * 2, (res.stdout, res.stderr)
    # what it wrote reached only its own child group: the limit group above still holds the class
    machine = Path(provider._boxes[t.id].limits.groups["memory"])
    assert int((machine / "memory.limit_in_bytes").read_text()) == CLASS.memory_mib * MIB
    assert (Path(provider._boxes[t.id].limits.groups["pids"]) / "pids.max").read_text().strip() == str(CLASS.tasks)
    hog = await sh(t, f"python3 -c 'b = bytearray({2 * CLASS.memory_mib} << 20); print(len(b))'; echo rc=$?")
    assert "rc=0" not in hog.stdout, hog.stdout  # killed at the class's memory, not the 4 GiB it wrote
    await sh(t, "for c in memory pids cpu cpuset; do umount /mnt/cg-$c; done", timeout_s=30)


@amod
async def test_a_fork_loop_stops_at_the_tasks_limit(seats):
    provider, territories, _workdir, _ = seats
    t = territories[1]
    res = await sh(t, f"python3 -c '{FORK_LOOP}'")
    assert res.exit_status == 0, res.stderr
    started, err = res.stdout.split()
    assert err == "11" and 100 < int(started) < CLASS.tasks  # EAGAIN at pids.max
    assert provider.exhaustion(t.id) == [PHRASES[t.id]]
    assert (await sh(t, "echo alive")).stdout.strip() == "alive"
    await _others_unharmed(provider, territories, 1, PHRASES)


@amod
async def test_filling_the_disk_fills_only_the_territory(seats):
    provider, territories, workdir, _ = seats
    t = territories[2]
    host_free = territory_disk.os.statvfs(workdir)
    res = await sh(t, f"dd if=/dev/zero of=/var/tmp/fill bs=1M count={CLASS.disk_mib + 64} 2>&1; echo rc=$?; df -m / | tail -1", timeout_s=120)
    assert "No space left on device" in res.stdout and "rc=1" in res.stdout, res.stdout
    written = int(res.stdout.split(" bytes")[0].split()[-1]) // MIB
    assert CLASS.disk_mib - 20 <= written <= CLASS.disk_mib, res.stdout
    assert provider.exhaustion(t.id) == [PHRASES[t.id]]
    image = workdir / t.id / "disk.img"
    # the image's space was reserved when it was made: the guest's writes take no more (an
    # extent block or two of the host's file system aside)
    assert image.stat().st_blocks * 512 <= (territory_disk.image_mib(CLASS.disk_mib) + 1) * MIB
    assert (await sh(t, "rm /var/tmp/fill && echo freed")).stdout.strip() == "freed"
    assert provider.exhaustion(t.id) == [PHRASES[t.id]]  # latched for the heat
    after = territory_disk.os.statvfs(workdir)
    assert abs(after.f_bavail - host_free.f_bavail) * after.f_frsize < 2 * CLASS.disk_mib * MIB  # bounded
    await _others_unharmed(provider, territories, 2, PHRASES)


@amod
async def test_the_limits_survive_a_reboot(seats):
    """The referee's reboot relaunches nspawn on the same root: it enters the same groups."""
    provider, territories, _workdir, _ = seats
    t = territories[1]
    box = provider._boxes[t.id]
    launches = box.launches
    await provider.reboot(t)
    assert box.launches == launches + 1
    res = await sh(t, "nproc; cat /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/pids/pids.max; "
                      "df -m / | tail -1")
    out = res.stdout.split("\n")
    assert out[0] == "1" and int(out[1]) == CLASS.memory_mib * MIB and int(out[2]) == CLASS.tasks, res.stdout
    assert abs(int(out[3].split()[1]) - CLASS.disk_mib) <= CLASS.disk_mib // 100 + 2
    for group in box.limits.entry_paths():  # the relaunched container's init is in every limit group's guest child
        assert str(box.leader_pid) in (group / "cgroup.procs").read_text().split(), group
        assert group.parent in box.limits.paths() or group in box.limits.paths()


@amod
async def test_a_busy_seat_uses_at_most_its_vcpus(seats):
    provider, territories, _workdir, _ = seats
    t = territories[0]
    box = provider._boxes[t.id]
    u0, w0 = cgroups.cpu_usage_s(box.limits), time.monotonic()
    assert u0 is not None
    # twice as many busy loops as the CPUs it sees: a greedy seat
    res = await sh(t, "for i in $(seq $((2 * $(nproc)))); do timeout 3 sh -c 'while :; do :; done' & done; wait; "
                      "echo done")
    u1, w1 = cgroups.cpu_usage_s(box.limits), time.monotonic()
    assert res.stdout.strip() == "done"
    share = (u1 - u0) / (w1 - w0)
    assert share <= CLASS.vcpus * 1.15, f"{share:.2f} CPUs used"
    assert share > 0.05  # it did run
    await _others_unharmed(provider, territories, 0, PHRASES)


async def _poll(what, want, timeout_s: float) -> list:
    """Read ``what()`` every 0.2 s until it equals ``want`` or ``timeout_s`` passes; the values seen."""
    seen = [what()]
    deadline = time.monotonic() + timeout_s
    while seen[-1] != want and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
        seen.append(what())
    return seen


@amod
async def test_a_seat_busy_on_all_its_vcpus_yields_the_cpu_and_comes_back(seats):
    provider, territories, _workdir, _ = seats
    t = territories[1]

    def shares(i: int) -> int:
        return int(Path(provider._boxes[territories[i].id].limits.groups["cpu"], "cpu.shares").read_text())

    # an earlier test's busy seat is back to an equal weight within the window
    settled = await _poll(lambda: [shares(i) for i in range(3)], [1024] * 3, cgroups.YIELD_WINDOW_S + 3)
    assert settled[-1] == [1024] * 3, settled
    calm_before = [provider.limits(territories[i].id)["cpu_yielded_s"] for i in (0, 2)]
    busy_before = provider.limits(t.id)["cpu_yielded_s"]
    # busy on every CPU it sees for 8 s, in the background: after the yield window its weight is divided
    res = await sh(t, "for i in $(seq $(nproc)); do setsid timeout 8 sh -c 'while :; do :; done' >/dev/null 2>&1 & done; echo go")
    assert res.stdout.strip() == "go"
    low = (100 // cgroups.YIELD_FACTOR) * 1024 // 100  # cpu.shares of weight 12 (of 100)
    seen = await _poll(lambda: shares(1), low, cgroups.YIELD_WINDOW_S + 4)
    assert seen[-1] == low, seen
    assert shares(0) == shares(2) == 1024  # the calm seats keep their weight
    # once the loops end it comes back to an equal weight within the window
    back = await _poll(lambda: shares(1), 1024, 8 + cgroups.YIELD_WINDOW_S + 3)
    assert back[-1] == 1024, back
    assert provider.limits(t.id)["cpu_yielded_s"] - busy_before > 2
    assert [provider.limits(territories[i].id)["cpu_yielded_s"] for i in (0, 2)] == calm_before
    await _others_unharmed(provider, territories, 1, PHRASES)


def _disk_leftovers(workdir: Path) -> list[str]:
    found = []
    losetup = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    found += [ln for ln in losetup.splitlines() if str(workdir) in ln]
    mounts = Path("/proc/self/mountinfo").read_text()
    found += [ln.split()[4] for ln in mounts.splitlines() if ln.split()[4].startswith(str(workdir))]
    found += [str(p) for p in workdir.glob("*/disk.img")] + [str(p) for p in workdir.glob("*/disk")]
    return found


def _group_leftovers(machines: list[str], recorded: list[str]) -> list[str]:
    found = [p for p in recorded if Path(p).exists()]
    for m in machines:
        found += [str(p) for p in Path("/sys/fs/cgroup").glob(f"*/{cgroups.PARENT}/{m}")]
        found += [str(p) for p in Path("/sys/fs/cgroup").glob(f"*/**/{cgroups.PARENT}/{m}")]
    return found


@amod
async def test_teardown_leaves_no_disk_mount_loop_or_group(guest_image, tmp_path):
    """Its own provider (one territory of CLASS): independent of the shared seats and of the
    order the tests run in."""
    _need_container_host()
    workdir = tmp_path / "w"
    provider = ContainerProvider(workdir, image=guest_image, heat_id=f"test-teardown-{os.getpid()}")
    try:
        (t,) = await provider.provision([TerritorySpec(id=NAMES[0], password="p-race", resources=CLASS)])
        machines = [f"aoe-{str(t.extra['host_veth'])[3:]}"]
        recorded = [str(p) for p in provider._boxes[t.id].limits.paths()]
        assert len(recorded) >= 4 and _disk_leftovers(workdir) and _group_leftovers(machines, recorded)
        res = await sh(t, "python3 -c \"b = b'x' * (400 << 20)\"; echo rc=$?")
        assert "rc=137" in res.stdout, (res.stdout, res.stderr)
        assert provider.exhaustion(t.id) == [PHRASES[NAMES[0]]]
    finally:
        await provider.teardown()
    assert _disk_leftovers(workdir) == []
    assert _group_leftovers(machines, recorded) == []
    # the latched exhaustion still answers after the teardown (the heat polls once more)
    assert provider.exhaustion(NAMES[0]) == [PHRASES[NAMES[0]]]


@amod
async def test_a_relative_workdir_leaves_nothing_either(guest_image, tmp_path, monkeypatch):
    """``aoe demo`` writes its season under a relative ``seasons-out/``: the territory's disk
    (2 GiB reserved per seat) must go with the teardown all the same (it stayed, with its
    ``state.json``, when the recorded paths were relative)."""
    _need_container_host()
    monkeypatch.chdir(tmp_path)
    provider = ContainerProvider(Path("rel") / "territories", image=guest_image, heat_id=f"test-rel-{os.getpid()}")
    try:
        (t,) = await provider.provision([TerritorySpec(id=NAMES[0], password="p-race", resources=CLASS)])
        assert json.loads((tmp_path / "rel/territories" / t.id / "state.json").read_text())["root"].startswith("/")
    finally:
        await provider.teardown()
    workdir = tmp_path / "rel" / "territories"
    assert _disk_leftovers(workdir) == []
    assert not (workdir / NAMES[0] / "state.json").exists()


@amod
async def test_a_later_container_does_not_keep_a_torn_down_territorys_disk(guest_image, tmp_path):
    """Every container launched later copies the host's mounts into its own namespace (nspawn:
    a slave copy; here ``unshare -m --propagation slave``, the same): the territory's teardown
    still unmounts its disk and root everywhere, so its loop device and disk.img go at once."""
    _need_container_host()
    provider = ContainerProvider(tmp_path / "w", image=guest_image, heat_id=f"test-later-{os.getpid()}")
    later = None
    try:
        (t,) = await provider.provision([TerritorySpec(id="builder-one", password="p-race", resources=CLASS)])
        later = subprocess.Popen(["unshare", "-m", "--propagation", "slave", "sleep", "120"])
        mine = os.readlink("/proc/self/ns/mnt")
        deadline = time.monotonic() + 10
        while True:  # until unshare has entered its own mount namespace (else the test proves nothing)
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{later.pid}/ns/mnt") != mine:
                    break
            assert time.monotonic() < deadline, "unshare did not enter a new mount namespace"
            await asyncio.sleep(0.01)
        copies = Path(f"/proc/{later.pid}/mountinfo").read_text()
        assert str(tmp_path / "w" / "builder-one" / "disk") in copies  # it holds a copy of the disk mount
        await provider.teardown()
        assert _disk_leftovers(tmp_path / "w") == []
        assert str(tmp_path / "w") not in Path(f"/proc/{later.pid}/mountinfo").read_text()
    finally:
        if later is not None:
            later.kill()
            later.wait()
        await provider.teardown()


@amod
async def test_a_host_without_loop_devices_or_memory_controller_runs_and_says_so(guest_image, tmp_path,
                                                                                 monkeypatch):
    _need_container_host()
    monkeypatch.setattr(territory_disk, "LOOP_CONTROL", tmp_path / "no-loop-control")
    real_plan = cgroups.plan
    monkeypatch.setattr(cgroups, "plan", lambda host: {k: v for k, v in real_plan(host).items() if k != "memory"})
    provider = ContainerProvider(tmp_path / "w", image=guest_image, heat_id=f"test-noloop-{os.getpid()}")
    try:
        (t,) = await provider.provision([TerritorySpec(id="builder-one", password="p-race", resources=CLASS)])
        assert (await sh(t, "echo alive")).stdout.strip() == "alive"
        lim = provider.limits(t.id)
        assert lim["enforced"] == ["cpu", "tasks"]
        no_loop = f"no loop devices on this host ({tmp_path}/no-loop-control missing)"
        assert lim["not_enforced"] == {"memory": "no cgroup memory controller on this host", "disk": no_loop}
        assert provider.notes == [f"disk limit not enforced: {no_loop}; a territory may fill the host's disk",
                                  "memory limit not enforced: no cgroup memory controller on this host"]
        assert not (tmp_path / "w" / "builder-one" / "disk.img").exists()
        assert provider.exhaustion(t.id) == []
    finally:
        await provider.teardown()
    assert _disk_leftovers(tmp_path / "w") == []


# ------------------------------------------------------------------ cgroup v2 (a fake cgroupfs)

#: interface files of every v2 group, and those of each controller: a group has a controller's
#: files only while its parent's ``cgroup.subtree_control`` enables it (as the kernel does)
V2_CORE = {"cgroup.procs": "", "cgroup.subtree_control": "", "cgroup.events": "populated 0\n",
           "cpu.stat": "usage_usec 0\n"}
V2_CONTROLLER_FILES = {
    "cpu": {"cpu.max": "max 100000\n", "cpu.weight": "100\n"},
    "cpuset": {"cpuset.cpus": "", "cpuset.cpus.effective": ""},
    "memory": {"memory.max": "max\n", "memory.swap.max": "max\n",
               "memory.events": "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n"},
    "pids": {"pids.max": "max\n", "pids.events": "max 0\n"},
}


class FakeCgroupfs:
    """The kernel's side of a cgroupfs folder tree, for :func:`cgroups._make_group` and
    :func:`cgroups._write_file`: a new group gets the core files and those of the
    controllers its parent enables (``cgroup.controllers`` = the parent's
    ``cgroup.subtree_control``), enabling or disabling one in ``cgroup.subtree_control``
    adds or removes its files in the children; writing a file that does not exist fails
    (ENOENT: no controller, no file), ``+c`` for a controller the group is not offered fails
    (ENOENT), and any write to ``cgroup.subtree_control`` of a group holding processes
    fails with EBUSY ("no internal processes": the root of a cgroup namespace is no
    exception). v1 cpuset (``v1_cpuset``): a child's ``cpuset.cpus``/``cpuset.mems`` must be
    within its parent's (EINVAL otherwise)."""

    def __init__(self, root: Path, v1_cpuset: bool = False) -> None:
        self.root = root
        self.v1_cpuset = v1_cpuset
        self.writes: list[tuple[Path, str]] = []

    def sync(self, group: Path) -> None:
        on = (group / "cgroup.subtree_control").read_text().split()
        for child in (p for p in group.iterdir() if p.is_dir()):
            (child / "cgroup.controllers").write_text(" ".join(on) + "\n")
            for c, files in V2_CONTROLLER_FILES.items():
                for name, text in files.items():
                    if c in on and not (child / name).exists():
                        (child / name).write_text(text)
                    elif c not in on and (child / name).is_file():
                        (child / name).unlink()
            self.sync(child)

    def make_group(self, path: Path) -> None:
        if path.is_dir():
            return
        if not path.parent.is_dir():
            self.make_group(path.parent)
        path.mkdir()
        if self.v1_cpuset:
            for name in ("cgroup.procs", "cpuset.cpus", "cpuset.mems"):
                (path / name).write_text("")
            return
        for name, text in V2_CORE.items():
            (path / name).write_text(text)
        self.sync(path.parent)

    def write_file(self, path: Path, value: str) -> None:
        self.writes.append((path, value))
        if not path.is_file() and not path.is_dir():
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(path))
        if self.v1_cpuset and path.name in ("cpuset.cpus", "cpuset.mems") and path.parent != self.root:
            mine = set(cgroups.parse_cpus(value))
            theirs = set(cgroups.parse_cpus((path.parent.parent / path.name).read_text()))
            if not mine <= theirs:
                raise OSError(errno.EINVAL, os.strerror(errno.EINVAL), str(path))
        if path.name == "cgroup.subtree_control":
            group = path.parent
            if (group / "cgroup.procs").read_text().split():
                raise OSError(errno.EBUSY, os.strerror(errno.EBUSY), str(path))
            offered = (group / "cgroup.controllers").read_text().split()
            on = set(path.read_text().split())
            for w in value.split():
                if w[1:] not in offered:
                    raise OSError(errno.ENOENT, os.strerror(errno.ENOENT), str(path))
                (on.add if w[0] == "+" else on.discard)(w[1:])
            path.write_text(" ".join(sorted(on)) + "\n")
            self.sync(group)
            return
        if path.name == "cgroup.procs":
            path.write_text(path.read_text() + value.strip() + "\n")
            return
        path.write_text(value)


@pytest.fixture
def fake_fs(tmp_path, monkeypatch):
    """The unified root of a fake cgroup-v2 host (:class:`FakeCgroupfs`): it offers cpuset
    cpu io memory hugetlb pids on 4 CPUs, holds no process (the host's real root, exempt from
    the no-internal-process rule) and enables nothing yet."""
    root = tmp_path / "unified"
    root.mkdir()
    for name, text in V2_CORE.items():
        (root / name).write_text(text)
    (root / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids\n")
    (root / "cpuset.cpus.effective").write_text("0-3\n")
    fs = FakeCgroupfs(root)
    monkeypatch.setattr(cgroups, "_make_group", fs.make_group)
    monkeypatch.setattr(cgroups, "_write_file", fs.write_file)
    return fs


@pytest.fixture
def fake_v2(fake_fs, tmp_path):
    """A cgroup-v2 host (:func:`fake_fs`) as a :class:`cgroups.CgroupHost`; no v1 hierarchy."""
    return cgroups.CgroupHost(v1_root=tmp_path / "no-v1", v2_root=fake_fs.root, self_cgroup=tmp_path / "no-cgroup")


def test_v2_limits_in_one_unified_group(fake_v2):
    host = fake_v2
    assert cgroups.plan(host) == {"cpu": "v2", "cpuset": "v2", "memory": "v2", "pids": "v2"}
    r = TerritoryResources(vcpus=2, memory_mib=768, disk_mib=2048, tasks=2048)
    a = cgroups.setup(host, "aoe-aaaa", "builder-one", r, 0, lock_file=None)
    g = host.v2_root / "aoe-territories" / "aoe-aaaa"
    assert a.paths() == [g] and a.versions == cgroups.plan(host)
    read = lambda name: (g / name).read_text().strip()  # noqa: E731
    assert read("cpu.max") == "200000 100000"
    assert read("memory.max") == str(768 * MIB) and read("memory.swap.max") == "0"
    assert read("pids.max") == "2048" and read("cpu.weight") == "100"
    assert a.cpus == "0-1" and read("cpuset.cpus") == "0-1"
    for d in (host.v2_root, host.v2_root / "aoe-territories"):
        assert (d / "cgroup.subtree_control").read_text().split() == ["cpu", "cpuset", "memory", "pids"]
    b = cgroups.setup(host, "aoe-bbbb", "builder-two", r, 1, lock_file=None)
    assert b.cpus == "2-3"  # the CPUs the first territory leaves
    assert a.enforced() == ["cpu", "memory", "tasks"]
    assert cgroups.exhaustion(a) == set()
    (g / "memory.events").write_text("low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\n")  # hierarchical
    assert cgroups.exhaustion(a) == {"memory"}
    # nspawn's payload leaves: before Linux 6.13 a failed fork counts only in the forking
    # task's own cgroup, so the group's own pids.events stays 0
    leaf = g / "payload" / "system.slice" / "ssh.service"
    cgroups._make_group(leaf)
    for d in (g, g / "payload", g / "payload" / "system.slice"):
        cgroups._write_file(d / "cgroup.subtree_control", "+pids")
    (leaf / "pids.events").write_text("max 3\n")
    assert (g / "pids.events").read_text() == "max 0\n"
    assert cgroups.exhaustion(a) == {"memory", "tasks"} and cgroups.exhaustion(b) == set()
    (g / "cpu.stat").write_text("usage_usec 2500000\nuser_usec 2000000\n")
    assert cgroups.cpu_usage_s(a) == 2.5
    again = cgroups.TerritoryGroups.from_json(json.loads(json.dumps(a.to_json())))
    assert again == a  # recorded in state.json as is


def test_v2_a_limit_file_that_cannot_be_written_is_one_line(fake_v2, monkeypatch):
    host = fake_v2
    real = cgroups._make_group

    def broken(path: Path) -> None:
        real(path)
        if path.name == "aoe-cccc" and (path / "memory.max").is_file():
            (path / "memory.max").unlink()
            (path / "memory.max").mkdir()  # writing it fails (EISDIR), as a refusing kernel would

    monkeypatch.setattr(cgroups, "_make_group", broken)
    with pytest.raises(cgroups.LimitError) as info:
        cgroups.setup(host, "aoe-cccc", "builder-three", CLASS, 2, lock_file=None)
    msg = str(info.value)
    assert msg.startswith(f"territory builder-three: cannot set {host.v2_root}/aoe-territories/aoe-cccc/memory.max "
                          f"to '{256 * MIB}': ") and "\n" not in msg


def test_v1_children_and_doctor_lines_on_a_host_without_controllers(tmp_path):
    host = cgroups.CgroupHost(v1_root=tmp_path / "v1", v2_root=None, self_cgroup=tmp_path / "none")
    assert cgroups.plan(host) == {}
    tg = cgroups.setup(host, "aoe-dddd", "builder-one", CLASS, 0, lock_file=None)
    assert tg.paths() == [] and tg.enforced() == [] and cgroups.exhaustion(tg) == set()
    said = cgroups.describe(host)
    assert said["memory"] == (False, "not enforced (no cgroup memory controller): a territory may use the host's "
                                     "whole memory")
    assert not said["cpu"][0] and not said["tasks"][0]


@pytest.mark.parametrize("available, used, vcpus, index, want", [
    ([0, 1], [], 1, 0, [0]),
    ([0, 1], [0], 1, 1, [1]),
    ([0, 1], [0, 1], 1, 2, [0]),       # a tie: spread by index
    ([0, 1], [0, 1], 1, 3, [1]),
    ([0, 1, 2, 3], [0, 1], 2, 0, [2, 3]),
    ([0, 1], [0, 0, 1], 4, 0, [0, 1]),  # more vcpus than CPUs: all of them
])
def test_pick_cpus(available, used, vcpus, index, want):
    assert cgroups.pick_cpus(available, used, vcpus, index) == want


def test_three_one_vcpu_seats_on_two_cpus_spread_two_one():
    used: list[int] = []
    for i in range(3):
        used += cgroups.pick_cpus([0, 1], used, 1, i)
    assert sorted(used.count(c) for c in (0, 1)) == [1, 2]


def test_cpu_lists():
    assert cgroups.parse_cpus("0-2,5\n") == [0, 1, 2, 5] and cgroups.parse_cpus("") == []
    assert cgroups.format_cpus([5, 0, 1, 2]) == "0-2,5" and cgroups.format_cpus([3]) == "3"


def test_doctor_says_which_limits_this_host_enforces():
    from aoe_tui.runtime.container import doctor_checks

    checks = {c.name: c for c in doctor_checks()}
    for name in ("cpu limit", "memory limit", "tasks limit", "disk limit"):
        assert name in checks, sorted(checks)
    plan = cgroups.plan(ContainerProvider._cgroup_host())
    mem = checks["memory limit"]
    if "memory" in plan:
        assert mem.detail.startswith(f"enforced: cgroup {plan['memory']} memory controller")
    else:
        assert "may use the host's whole memory" in mem.detail
    disk = checks["disk limit"]
    if territory_disk.disk_problem() is None:
        assert disk.detail.startswith("enforced: ")
    else:
        assert "not enforced" in disk.detail


def test_on_a_v2_host_the_territory_runs_in_its_one_unified_group(fake_v2, monkeypatch, tmp_path):
    """A pure cgroup-v2 host (no v1 ``name=systemd``): nspawn's wrapper enters
    ``<v2>/aoe-territories/<machine>``, the same group the limits are written to."""
    from aoe_tui.runtime import container

    monkeypatch.setattr(container, "CGROUP_V1_SYSTEMD", tmp_path / "no-v1-systemd")
    monkeypatch.setattr(container, "CGROUP_V1_ROOT", fake_v2.v2_root)
    monkeypatch.setattr(container, "_cgroup2_mount", lambda mount=True: fake_v2.v2_root)
    monkeypatch.setattr(container, "make_cpu_group", cgroups._make_group)
    [group] = container.territory_cgroups("aoe-eeee")
    assert group == fake_v2.v2_root / "aoe-territories" / "aoe-eeee" and group.is_dir()
    host = ContainerProvider._cgroup_host()
    assert host.v2_root == fake_v2.v2_root and cgroups.plan(host)["memory"] == "v2"
    tg = cgroups.setup(host, "aoe-eeee", "builder-one", CLASS, 0, lock_file=None)
    assert tg.paths() == [group] and (group / "memory.max").read_text() == str(256 * MIB)


# ------------------------------------------------------------------ teardown of a disk record (no root needed)


def test_a_disk_record_without_a_mount_never_removes_the_current_folder(tmp_path, monkeypatch):
    from aoe_tui.runtime.container import destroy_from_state

    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / "keep.txt").write_text("mine\n")
    monkeypatch.chdir(cwd)
    image = tmp_path / "t" / "disk.img"
    image.parent.mkdir()
    image.write_bytes(b"")
    monkeypatch.setattr(territory_disk, "loops_of", lambda image: [])
    assert destroy_from_state({"disk": {"image": str(image)}}) == []
    assert (cwd / "keep.txt").read_text() == "mine\n"
    # remove_disk itself never rmtrees a relative folder either
    assert territory_disk.remove_disk(image, Path(""), timeout_s=0.1) == []
    assert (cwd / "keep.txt").is_file() and not image.exists()


def test_a_losetup_that_times_out_is_reported_not_raised(tmp_path, monkeypatch):
    import subprocess as sp

    calls: list[list[str]] = []

    def run(argv, *a, **kw):
        calls.append(argv)
        raise sp.TimeoutExpired(argv, kw.get("timeout", 10))

    monkeypatch.setattr(territory_disk, "loops_of", lambda image: ["/dev/loop7"])
    monkeypatch.setattr(territory_disk.subprocess, "run", run)
    monkeypatch.setattr(territory_disk, "LOOP_CLEAR_S", 0.0)
    image = tmp_path / "disk.img"
    image.write_bytes(b"")
    left = territory_disk.remove_disk(image, tmp_path / "disk", timeout_s=0.1)
    assert left == ["loop /dev/loop7"] and ["losetup", "-d", "/dev/loop7"] in calls


# ------------------------------------------------------------------ the disk's space is reserved on the host


def _need_disk_host() -> None:
    why = territory_disk.disk_problem()
    if why is not None:
        pytest.skip(f"no territory disks here: {why}")


def _free_mib(folder: Path) -> float:
    st = os.statvfs(folder)
    return st.f_bavail * st.f_frsize / MIB


def test_a_territory_disk_takes_its_space_on_the_host_while_it_lives(tmp_path):
    _need_disk_host()
    image, mount = tmp_path / "disk.img", tmp_path / "disk"
    before = _free_mib(tmp_path)
    try:
        _took, note = territory_disk.make_disk(image, mount, 512, "builder-one")
        assert note is None
        taken = before - _free_mib(tmp_path)
        # about disk_mib (the image is 1.9 % larger); generous: other work shares this disk
        assert 512 * 0.8 <= taken <= territory_disk.image_mib(512) + 200, taken
        assert image.stat().st_blocks * 512 >= 512 * MIB
    finally:
        left = territory_disk.remove_disk(image, mount)
    assert left == []
    assert abs(_free_mib(tmp_path) - before) < 200


def test_where_space_cannot_be_reserved_the_disk_is_sparse_and_noted(tmp_path, monkeypatch):
    import errno

    _need_disk_host()

    def unsupported(fd, offset, length):
        raise OSError(errno.EOPNOTSUPP, "Operation not supported")

    monkeypatch.setattr(territory_disk.os, "posix_fallocate", unsupported)
    image, mount = tmp_path / "disk.img", tmp_path / "disk"
    try:
        _took, note = territory_disk.make_disk(image, mount, 512, "builder-one")
        assert note is not None and "sparse" in note and "Operation not supported" in note and "\n" not in note
        assert image.stat().st_blocks * 512 < 64 * MIB
    finally:
        left = territory_disk.remove_disk(image, mount)
    assert left == []


@amod
async def test_a_class_disk_bigger_than_the_host_free_space_fails_in_one_line(guest_image, tmp_path):
    _need_container_host()
    _need_disk_host()
    workdir = tmp_path / "w"
    workdir.mkdir()
    huge = int(_free_mib(workdir)) + 4096
    big = TerritoryResources(vcpus=1, memory_mib=256, disk_mib=huge, tasks=256)
    provider = ContainerProvider(workdir, image=guest_image, heat_id=f"test-bigdisk-{os.getpid()}")
    try:
        with pytest.raises(ProvisionError) as info:
            await provider.provision([TerritorySpec(id="builder-one", password="p-race", resources=big)])
        msg = str(info.value)
        assert msg.startswith(f"territory builder-one: its {huge} MiB disk needs "
                              f"{territory_disk.image_mib(huge)} MiB on the host's file system at ") and "\n" not in msg
        assert "MiB free" in msg
    finally:
        await provider.teardown()
    assert _disk_leftovers(workdir) == []
    assert not list(workdir.glob("*/disk.img")) and not list(workdir.glob("*/state.json"))


# ------------------------------------------------------------------ cgroup v2 inside a cgroup namespace


def test_v2_in_a_cgroup_namespace_limits_are_not_enforced_never_a_failed_heat(fake_fs, fake_v2):
    """The runner in Docker/Podman/k8s: the root it sees holds its own processes, so enabling
    a controller there fails with EBUSY; the territory still provisions, the limits say why."""
    from aoe_tui.runtime.container import ContainerProvider as CP

    (fake_fs.root / "cgroup.procs").write_text("1\n7\n")
    tg = cgroups.setup(fake_v2, "aoe-ffff", "builder-one", CLASS, 0, lock_file=None)
    assert tg.versions == {} and tg.enforced() == [] and tg.paths() == []
    assert set(tg.why) == {"cpu", "cpuset", "memory", "pids"}
    why = tg.why["memory"]
    assert why.startswith(f"cgroup v2 memory controller cannot be enabled in {fake_fs.root}/cgroup.subtree_control: "
                          "Device or resource busy") and "\n" not in why

    class Box:
        limits = tg

    not_enforced = CP._not_enforced_cgroups(Box())
    assert not_enforced["memory"] == why and set(not_enforced) == {"cpu", "memory", "tasks"}
    assert cgroups.exhaustion(tg) == set()
    again = cgroups.TerritoryGroups.from_json(json.loads(json.dumps(tg.to_json())))
    assert again == tg


def test_v2_controllers_already_enabled_in_a_busy_root_are_kept(fake_fs, fake_v2):
    """A namespace whose root already enables cpu, memory and pids (delegated) but not
    cpuset: those three are enforced, the cpuset alone is not."""
    fake_fs.write_file(fake_fs.root / "cgroup.subtree_control", "+cpu +memory +pids")
    (fake_fs.root / "cgroup.procs").write_text("1\n")
    tg = cgroups.setup(fake_v2, "aoe-gggg", "builder-two", CLASS, 1, lock_file=None)
    assert tg.versions == {"cpu": "v2", "memory": "v2", "pids": "v2"} and set(tg.why) == {"cpuset"}
    g = fake_fs.root / "aoe-territories" / "aoe-gggg"
    assert (g / "memory.max").read_text() == str(256 * MIB) and (g / "pids.max").read_text() == "256"
    assert tg.cpus == "" and not (g / "cpuset.cpus").exists()


# ------------------------------------------------------------------ cgroup v1 cpuset: a parent removed meanwhile


def test_v1_cpuset_survives_a_parent_removed_by_another_runner_meanwhile(tmp_path, monkeypatch):
    """Another runner's teardown removes the empty ``aoe-territories`` while this one makes
    its group: ``mkdir -p`` makes the parent again, with no CPUs; the group still gets its CPU."""
    v1 = tmp_path / "v1"
    top = v1 / "cpuset"
    top.mkdir(parents=True)
    for name, text in (("cgroup.procs", "1\n"), ("cpuset.cpus", "0-1\n"), ("cpuset.mems", "0\n")):
        (top / name).write_text(text)
    fs = FakeCgroupfs(top, v1_cpuset=True)
    monkeypatch.setattr(cgroups, "_write_file", fs.write_file)
    host = cgroups.CgroupHost(v1_root=v1, v2_root=None, self_cgroup=tmp_path / "no-cgroup")
    assert cgroups.plan(host) == {"cpuset": "v1"}
    parent = top / cgroups.PARENT

    def racing(path: Path) -> None:
        if path.name == "aoe-hhhh" and not path.exists() and parent.is_dir():  # the other runner's rmdir
            for f in parent.iterdir():
                f.unlink()
            parent.rmdir()
        fs.make_group(path)

    # the parent exists (set up by an earlier territory, now gone) when this one starts
    fs.make_group(parent)
    fs.write_file(parent / "cpuset.cpus", "0-1")
    fs.write_file(parent / "cpuset.mems", "0")
    monkeypatch.setattr(cgroups, "_make_group", racing)
    tg = cgroups.setup(host, "aoe-hhhh", "builder-one", CLASS, 0, lock_file=None)
    assert tg.cpus in ("0", "1") and (parent / "aoe-hhhh" / "cpuset.cpus").read_text() == tg.cpus
    assert (parent / "cpuset.cpus").read_text() == "0-1" and (parent / "aoe-hhhh" / "cpuset.mems").read_text() == "0"


# ------------------------------------------------------------------ CPU placement: no seat favoured by its index


def test_the_lone_cpu_rotates_over_seat_positions_across_heats():
    """Three 1-vCPU seats on 2 CPUs: which seat gets a CPU alone depends on the heat, not on
    the seat index; over 300 heats each seat gets it about a third of the time."""
    seats = [("m0", 1), ("m1", 1), ("m2", 1)]
    lone = {m: 0 for m, _v in seats}
    for h in range(300):
        peers = cgroups.heat_order(f"heat-{h:04d}-{h * 7919:x}", seats)
        got = {m: cgroups.pick_in_heat([0, 1], [], peers, m)[0] for m, _v in seats}
        (alone,) = [m for m, c in got.items() if list(got.values()).count(c) == 1]
        lone[alone] += 1
    assert all(70 <= n <= 130 for n in lone.values()), lone


def test_a_heats_placement_does_not_depend_on_which_seat_asks_first(fake_fs, fake_v2):
    (fake_fs.root / "cpuset.cpus.effective").write_text("0-1\n")
    peers = cgroups.heat_order("heat-order", [("aoe-s0", 1), ("aoe-s1", 1), ("aoe-s2", 1)])
    first = {m: cgroups.setup(fake_v2, m, m, CLASS, int(m[-1]), lock_file=None, peers=peers).cpus
             for m in ("aoe-s0", "aoe-s1", "aoe-s2")}
    for m in first:  # (a fake group holds files: rmtree, not rmdir)
        shutil.rmtree(fake_fs.root / "aoe-territories" / m)
    second = {m: cgroups.setup(fake_v2, m, m, CLASS, int(m[-1]), lock_file=None, peers=peers).cpus
              for m in ("aoe-s2", "aoe-s1", "aoe-s0")}
    assert first == second and sorted(first.values()) in (["0", "0", "1"], ["0", "1", "1"])


@pytest.mark.parametrize("seats, want", [
    ([("builder-one", 1, "0"), ("builder-two", 1, "1"), ("builder-three", 1, "0")],
     "3 seats x 1 vCPU on 2 host CPUs: builder-one and builder-three share CPU 0"),
    ([("a", 2, "0-1"), ("b", 2, "0-1"), ("c", 2, "0-1")], "3 seats x 2 vCPUs on 2 host CPUs: a, b and c share CPUs 0-1"),
    ([("a", 1, "0"), ("b", 1, "1"), ("c", 1, "2")], None),
    ([("a", 1, ""), ("b", 1, "")], None),  # no cpuset
])
def test_share_note(seats, want):
    assert cgroups.share_note(seats) == want


@pytest.mark.asyncio(loop_scope="function")
async def test_a_class_with_more_vcpus_than_the_host_runs_with_a_note(guest_image, tmp_path):
    """A class asking more vCPUs than the host has (a new user's trial: vcpus = 4 on 2 CPUs):
    the seat runs on every CPU there is, and the heat says so in one note."""
    _need_container_host()
    ncpu = len(os.sched_getaffinity(0))
    big = TerritoryResources(vcpus=ncpu + 2, memory_mib=256, disk_mib=512, tasks=256)
    provider = ContainerProvider(tmp_path / "t", image=guest_image, heat_id=f"test-bigcpu-{os.getpid()}")
    try:
        [t] = await provider.provision([TerritorySpec(id="builder-one", password="builder-one-race", resources=big)])
        res = await sh(t, "nproc")
        assert res.stdout.strip() == str(ncpu)
        assert (f"territory builder-one: its class asks {ncpu + 2} vCPUs; this host has {ncpu} for it, "
                f"so it sees and gets {ncpu} (nproc {ncpu})") in provider.notes, provider.notes
    finally:
        await provider.teardown()


def _feed(y: cgroups.CpuYield, shares: list[float], dt: float = cgroups.YIELD_SAMPLE_S,
          t0: float = 100.0, used0: float = 0.0) -> list[bool]:
    """Feed ``y`` samples ``dt`` apart using ``shares[i]`` of its vcpus in each step; its state after each."""
    t, used, out = t0, used0, []
    y.sample(t, used)
    for sh_ in shares:
        t += dt
        used += sh_ * y.vcpus * dt
        y.sample(t, used)
        out.append(y.yielding)
    return out


def test_cpu_yield_after_a_busy_window_and_back_after_a_calm_one():
    y = cgroups.CpuYield(vcpus=2)
    n = round(cgroups.YIELD_WINDOW_S / cgroups.YIELD_SAMPLE_S)
    states = _feed(y, [1.0] * (2 * n))
    assert not any(states[: n - 2]) and states[-1]  # not before the window is seen, then yields
    assert y.weight(100) == 100 // cgroups.YIELD_FACTOR and y.weight(10) == 1
    t_busy_end = 100.0 + 2 * n * cgroups.YIELD_SAMPLE_S
    calm = cgroups.CpuYield(vcpus=2, yielding=y.yielding, yielded_s=y.yielded_s, since_s=y.since_s, samples=y.samples)
    after = _feed(calm, [0.0] * (2 * n), t0=t_busy_end, used0=y.samples[-1][1])
    assert after[-1] is False and calm.weight(100) == 100
    spell = calm.yielded_s
    assert 0 < spell <= 2 * n * cgroups.YIELD_SAMPLE_S
    assert calm.yielded_total(10_000.0) == spell  # no spell open: the total does not grow


def test_cpu_yield_with_no_accounting_never_decides():
    y = cgroups.CpuYield(vcpus=1)
    assert all(y.sample(float(t), None) is None for t in range(20)) and not y.yielding


@settings(deadline=None)
@given(st.lists(st.tuples(st.floats(0.05, 1.5), st.floats(0.0, cgroups.YIELD_BUSY * 0.99)), min_size=1, max_size=60),
       st.integers(1, 8))
def test_cpu_yield_a_seat_that_never_keeps_its_vcpus_busy_never_yields(steps, vcpus):
    y = cgroups.CpuYield(vcpus=vcpus)
    t, used = 0.0, 0.0
    y.sample(t, used)
    for dt, share in steps:
        t += dt
        used += share * vcpus * dt
        y.sample(t, used)
        assert not y.yielding
    assert y.yielded_total(t) == 0


@settings(deadline=None)
@given(st.lists(st.tuples(st.floats(0.05, 1.5), st.floats(0.0, 1.0)), min_size=1, max_size=60))
def test_cpu_yield_total_grows_with_time_and_never_exceeds_it(steps):
    y = cgroups.CpuYield(vcpus=1)
    t, used, last = 0.0, 0.0, 0.0
    y.sample(t, used)
    for dt, share in steps:
        t += dt
        used += share * dt
        y.sample(t, used)
        total = y.yielded_total(t)
        assert last - 1e-9 <= total <= t + 1e-9
        last = total
    y.end(t + 1)
    assert not y.yielding and y.yielded_total(t + 100) == pytest.approx(y.yielded_s)


@pytest.mark.parametrize("version,name,weight,want", [
    ("v1", "cpu.shares", 100, "1024"), ("v1", "cpu.shares", 12, "122"), ("v1", "cpu.shares", 0, "2"),
    ("v2", "cpu.weight", 100, "100"), ("v2", "cpu.weight", 12, "12"), ("v2", "cpu.weight", 0, "1"),
])
def test_write_cpu_weight(tmp_path, version, name, weight, want):
    tg = cgroups.TerritoryGroups(versions={"cpu": version}, groups={"cpu": str(tmp_path)})
    assert cgroups.write_cpu_weight(tg, weight)
    assert (tmp_path / name).read_text() == want
    assert not cgroups.write_cpu_weight(cgroups.TerritoryGroups(versions={"cpu": version}, groups={"cpu": str(tmp_path / "gone")}), 100)
    assert not cgroups.write_cpu_weight(cgroups.TerritoryGroups(), 100)
