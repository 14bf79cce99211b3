"""Many heats on one machine (issue 16 item 4): admission of booting territories across
heats (``season/runner.BootGate``) and CPU weights by phase (``run_heat(cpu_weights=True)``,
``ContainerProvider.set_cpu_weight`` on a real container)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from aoe_tui.domain.arena import load_manifest
from aoe_tui.domain.season_file import load_season
from aoe_tui.season.runner import BOOT_SLOTS, BootGate, SeasonRunner, boot_slots
from aoe_tui.errors import AoeError

REPO = Path(__file__).resolve().parent.parent


async def test_boot_gate_admits_at_most_its_slots_in_order():
    gate = BootGate(3)
    order: list[str] = []
    release = {k: asyncio.Event() for k in "abcd"}

    async def heat(k: str, n: int) -> None:
        async with gate.admit(n):
            order.append(k)
            assert gate.booting <= 3 or gate.booting == n
            await release[k].wait()

    tasks = [asyncio.ensure_future(heat(k, n)) for k, n in (("a", 2), ("b", 2), ("c", 1), ("d", 5))]
    await asyncio.sleep(0.01)
    assert order == ["a"] and gate.booting == 2  # b (2) does not fit beside a; c waits behind b
    release["a"].set()
    await asyncio.sleep(0.01)
    assert order == ["a", "b", "c"] and gate.booting == 3
    release["b"].set()
    release["c"].set()
    await asyncio.sleep(0.01)
    assert order == ["a", "b", "c", "d"] and gate.booting == 5  # larger than the slots: boots alone
    release["d"].set()
    await asyncio.gather(*tasks)
    assert gate.booting == 0 and gate.most == 5


async def test_boot_gate_a_cancelled_wait_takes_no_slot():
    gate = BootGate(1)
    hold = asyncio.Event()

    async def heat() -> None:
        async with gate.admit(1):
            await hold.wait()

    first = asyncio.ensure_future(heat())
    second = asyncio.ensure_future(heat())
    await asyncio.sleep(0.01)
    second.cancel()
    await asyncio.gather(second, return_exceptions=True)
    hold.set()
    await first
    assert gate.booting == 0
    async with gate.admit(1):  # the slot is free again
        assert gate.booting == 1


async def test_boot_gate_a_cancelled_waiter_lets_those_behind_it_in():
    """A heat that waits at the head of the queue and is cancelled no longer holds back the
    ones queued behind it that fit now (arrival order kept them waiting)."""
    gate = BootGate(3)
    hold = asyncio.Event()
    order: list[str] = []

    async def heat(k: str, n: int) -> None:
        async with gate.admit(n):
            order.append(k)
            await hold.wait()

    a = asyncio.ensure_future(heat("a", 2))
    await asyncio.sleep(0)
    b = asyncio.ensure_future(heat("b", 3))  # does not fit beside a
    await asyncio.sleep(0)
    c = asyncio.ensure_future(heat("c", 1))  # fits, but waits behind b
    await asyncio.sleep(0.01)
    assert order == ["a"]
    b.cancel()
    await asyncio.gather(b, return_exceptions=True)
    await asyncio.sleep(0.01)
    assert order == ["a", "c"] and gate.booting == 3
    hold.set()
    await asyncio.gather(a, c)
    assert gate.booting == 0


def test_boot_slots_from_the_environment(monkeypatch):
    monkeypatch.delenv("AOE_BOOT_SLOTS", raising=False)
    assert boot_slots() == BOOT_SLOTS
    monkeypatch.setenv("AOE_BOOT_SLOTS", "0")
    assert boot_slots() == 0
    monkeypatch.setenv("AOE_BOOT_SLOTS", "two")
    with pytest.raises(AoeError, match="AOE_BOOT_SLOTS must be a whole number >= 0, got 'two'"):
        boot_slots()


async def test_season_boots_one_heat_at_a_time_while_all_heats_run(tmp_path, monkeypatch):
    """Four heats at once (``concurrent_heats = 4``, 12 entrants): all four attempts start, but
    the runner's gate lets only ``BOOT_SLOTS`` territories provision at once across them."""
    from aoe_tui.testing.heats import write_timed_out_heat

    monkeypatch.delenv("AOE_BOOT_SLOTS", raising=False)
    monkeypatch.setenv("AOE_CPU_WEIGHTS", "1")  # on by default too; the heats are given the switch
    f = tmp_path / "s.toml"
    f.write_text('id = "fair"\nlabel = "k4"\n' f'arena = "{REPO}/arenas/first-build"\nconcurrent_heats = 4\n'
                 '[format]\nkind = "league"\nheats_per_entrant = 1\n'
                 + "".join(f'[[entrants]]\nid = "e{i}"\nadapter = "oracle"\nmodel = "m"\n' for i in range(12)))
    running = {"heats": 0, "most_heats": 0, "most_booting": 0}
    gates: list[BootGate] = []

    async def stand_in_run_heat(loaded, provider, adapters, folder, *, provision_gate, cpu_weights, **_kw):
        assert cpu_weights is True
        running["heats"] += 1
        running["most_heats"] = max(running["most_heats"], running["heats"])
        async with provision_gate(len(loaded.manifest.territories)):  # as run_heat provisions
            running["most_booting"] = max(running["most_booting"], gates[0].booting)
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.05)  # the race
        world = write_timed_out_heat(folder)
        running["heats"] -= 1
        return world

    runner = SeasonRunner(load_season(f), tmp_path / "out", run_heat=stand_in_run_heat,
                          provider_factory=lambda workdir, heat_id: None)
    gates.append(runner.boot_gate)
    state = await runner.run()
    assert len(state.rounds[1].heats) == 4 and all(h.result is not None for h in state.rounds[1].heats.values())
    assert running["most_heats"] == 4  # every heat was admitted to the season at once
    assert running["most_booting"] == 3 == BOOT_SLOTS and runner.boot_gate.most == 3


async def test_run_heat_weighs_its_territories_by_phase(tmp_path, monkeypatch):
    """``run_heat(cpu_weights=True)``: low weight while the territories boot (swept until they
    are ready), high from the clock's start (before the first event), low again from
    ``match_finished``, the groups removed after the teardown."""
    from aoe_tui.referee.heat import BOOT_CPU_WEIGHT, DONE_CPU_WEIGHT, RACE_CPU_WEIGHT, run_heat
    from tests.test_referee import ALL, FakeAdapter, FakeProvider, write_arena

    class WeighedProvider(FakeProvider):
        def __init__(self, state: Path) -> None:
            super().__init__(state)
            self.weights: list[tuple[int | None, str | None]] = []
            self.torn_down = False
            self.swept_twice = asyncio.Event()
            self.loop = asyncio.get_running_loop()

        async def provision(self, specs):
            await self.swept_twice.wait()  # a boot lasts until the heat has swept its processes twice
            return await super().provision(specs)

        def set_cpu_weight(self, weight):  # called in a thread
            self.weights.append((weight, "after teardown" if self.torn_down else None))
            if len(self.weights) == 2:
                self.loop.call_soon_threadsafe(self.swept_twice.set)
            return 3

        async def teardown(self) -> None:
            self.torn_down = True

    state = tmp_path / "state"
    state.mkdir()
    monkeypatch.setenv("FAKE_STATE", str(state))
    monkeypatch.setattr("aoe_tui.agents.instruction.build_instruction", lambda _l, tid: f"build on {tid}")
    loaded = load_manifest(write_arena(tmp_path / "arena"))
    adapters = {a.id: FakeAdapter({"state": state, "steps": ALL}) for a in loaded.manifest.agents}
    provider = WeighedProvider(state)
    weights_at: list[list] = []
    world = await run_heat(loaded, provider, adapters, tmp_path / "match", drain_seconds=0.5, cpu_weights=True,
                           provision_gate=BootGate(3).admit,
                           on_event=lambda r, w: weights_at.append([x for x, _ in provider.weights]))
    assert world.match_state == "finished"
    ws = [w for w, _ in provider.weights]
    boots = ws[:ws.index(RACE_CPU_WEIGHT)]
    assert len(boots) >= 2 and set(boots) == {BOOT_CPU_WEIGHT}  # swept again while booting
    assert weights_at[0][-1] == RACE_CPU_WEIGHT  # raised before the clock's first event
    assert DONE_CPU_WEIGHT in ws[ws.index(RACE_CPU_WEIGHT):]
    assert provider.weights[-1] == (None, "after teardown")
    import json

    timings = json.loads((tmp_path / "match" / "aoe-extra.json").read_text())["timings"]
    assert timings["admission_wait_s"] < timings["provision_s"]


@pytest.mark.container
def _escaped_session_sshd(pid: int) -> bool:
    """An SSH session's own ``sshd`` that sits in the root of every v1 hierarchy while its
    session opens (seen now and then; the session's shell and everything it starts stay in
    the territory's groups): docs/territories.md, "container limits"."""
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return False
    v1 = [ln for ln in lines if not ln.startswith("0::")]
    return comm == "sshd" and bool(v1) and all(ln.endswith(":/") for ln in v1)


async def test_cpu_weight_of_a_real_container(guest_image, tmp_path):
    """A booted territory's processes (its init included) move into their own ``cpu`` group
    whose shares follow the weight; the group goes with ``None`` after the teardown."""
    from aoe_tui.runtime.container import ContainerProvider
    from aoe_tui.runtime.provider import TerritorySpec

    if os.geteuid() != 0:
        pytest.skip("container provider tests need root")
    cpu = Path("/sys/fs/cgroup/cpu")
    if not (cpu / "cgroup.procs").is_file() or not Path("/sys/fs/cgroup/systemd/cgroup.procs").is_file():
        pytest.skip("not a cgroup-v1 host with a cpu hierarchy (no per-territory cpu group)")
    provider = ContainerProvider(tmp_path / "t", image=guest_image, heat_id=f"test-fair-{os.getpid()}")
    try:
        [t] = await provider.provision([TerritorySpec(id="builder-one", password="builder-one-race", index=0)])
        assert await asyncio.to_thread(provider.set_cpu_weight, 10) == 1
        group = cpu / "aoe-territories" / f"aoe-{t.extra['host_veth'][3:]}"
        assert (group / "cpu.shares").read_text().split() == ["102"]
        # the territory's processes live in the group's guest child (issue 26: the root of the
        # guest's cgroup namespace, below the limits), so the shares of the group weigh them all
        procs = set((group / "guest" / "cgroup.procs").read_text().split())
        assert str(t.extra["leader_pid"]) in procs and str(t.extra["nspawn_pid"]) in procs
        assert not (group / "cgroup.procs").read_text().split()  # none moved out of the guest child
        leader_cg = Path(f"/proc/{t.extra['leader_pid']}/cgroup").read_text()
        assert f":cpu:/aoe-territories/{group.name}/guest\n" in leader_cg
        assert await asyncio.to_thread(provider.set_cpu_weight, 1000) == 1
        assert (group / "cpu.shares").read_text().split() == ["10240"]
        # the territory still works from inside its group: a root login and a process it starts
        from aoe_tui.runtime import ssh

        res = await ssh.run(t.host, t.ssh_port, t.password, "cat /proc/self/cgroup", timeout_s=30)
        # the territory enters its cpu group at launch (its cpu limit, issue 26), so the guest's
        # cgroup namespace is rooted there and shows it as "/"; either way the group holds it
        assert res.exit_status == 0 and (f"cpu:/aoe-territories/{group.name}\n" in res.stdout
                                         or "\n1:cpu:/\n" in res.stdout), res.stdout
        from aoe_tui.runtime.container import _cgroup_pids

        box = provider._boxes[t.id]
        for pid in _cgroup_pids([str(p) for p in box.cgroups]):  # every process of the territory
            try:
                if _escaped_session_sshd(pid):
                    continue  # a known gap (docs/territories.md, "container limits"): not the player's processes
                assert f":cpu:/aoe-territories/{group.name}/guest\n" in Path(f"/proc/{pid}/cgroup").read_text(), pid
            except FileNotFoundError:
                pass  # exited meanwhile
    finally:
        await provider.teardown()
    assert await asyncio.to_thread(provider.set_cpu_weight, None) == 1
    assert not group.exists()
    assert not group.parent.exists() or [p for p in group.parent.iterdir() if p.is_dir()], \
        "an empty aoe-territories group was left behind"


async def test_a_boot_sweep_in_flight_never_lands_after_the_race_weight(tmp_path, monkeypatch):
    """Provisioning ends while a boot sweep's thread is still writing: the heat waits for that
    thread before it raises the territories to the race weight, so the race never runs at the
    boot weight."""
    import threading
    import time

    from aoe_tui.referee.heat import BOOT_CPU_WEIGHT, RACE_CPU_WEIGHT, run_heat
    from tests.test_referee import ALL, FakeAdapter, FakeProvider, write_arena

    class SlowSweepProvider(FakeProvider):
        def __init__(self, state: Path) -> None:
            super().__init__(state)
            self.written: list[int | None] = []
            self.sweeping = threading.Event()

        async def provision(self, specs):
            await asyncio.to_thread(self.sweeping.wait, 10)  # ready while the first sweep still writes
            return await super().provision(specs)

        def set_cpu_weight(self, weight):  # called in a thread
            if weight == BOOT_CPU_WEIGHT and not self.sweeping.is_set():
                self.sweeping.set()
                time.sleep(0.3)  # a slow sweep (a loaded host): its write lands late
            self.written.append(weight)
            return 3

    state = tmp_path / "state"
    state.mkdir()
    monkeypatch.setenv("FAKE_STATE", str(state))
    monkeypatch.setattr("aoe_tui.agents.instruction.build_instruction", lambda _l, tid: f"build on {tid}")
    loaded = load_manifest(write_arena(tmp_path / "arena"))
    adapters = {a.id: FakeAdapter({"state": state, "steps": ALL}) for a in loaded.manifest.agents}
    provider = SlowSweepProvider(state)
    at_first_event: list[list] = []
    await run_heat(loaded, provider, adapters, tmp_path / "match", drain_seconds=0.2, cpu_weights=True,
                   on_event=lambda r, w: at_first_event.append(list(provider.written)))
    before_race = at_first_event[0]
    assert before_race[-1] == RACE_CPU_WEIGHT and BOOT_CPU_WEIGHT in before_race, before_race


# ------------------------------------------------------------ the settings, checked early

LEAGUE_OF_ONE_AT_A_TIME = ('id = "fair"\nlabel = "one"\n' f'arena = "{REPO}/arenas/first-build"\nconcurrent_heats = 1\n'
                           '[format]\nkind = "league"\nheats_per_entrant = 1\n'
                           + "".join(f'[[entrants]]\nid = "e{i}"\nadapter = "oracle"\nmodel = "m"\n' for i in range(3)))


@pytest.mark.parametrize("value, on", [("1", True), ("true", True), ("YES", True), (" On ", True), ("True", True),
                                       ("0", False), ("false", False), ("No", False), ("OFF", False), ("", True),
                                       (None, True)])
def test_cpu_weights_switch_values(monkeypatch, value, on):
    from aoe_tui.season.runner import cpu_weights_on

    if value is None:
        monkeypatch.delenv("AOE_CPU_WEIGHTS", raising=False)
    else:
        monkeypatch.setenv("AOE_CPU_WEIGHTS", value)
    assert cpu_weights_on() is on


@pytest.mark.parametrize("value", ["2", "y", "enabled", "1 0"])
def test_cpu_weights_switch_rejects_other_values(monkeypatch, value):
    from aoe_tui.season.runner import cpu_weights_on

    monkeypatch.setenv("AOE_CPU_WEIGHTS", value)
    with pytest.raises(AoeError, match=f"^AOE_CPU_WEIGHTS must be one of 1/true/yes/on or 0/false/no/off "
                                       f"\\(or empty\\), got {value!r}$"):
        cpu_weights_on()


def test_the_runner_takes_yes_as_weights_on(tmp_path, monkeypatch):
    """``AOE_CPU_WEIGHTS=yes`` with heats at once gives the heats the switch (it was ignored)."""
    monkeypatch.setenv("AOE_CPU_WEIGHTS", "yes")
    f = tmp_path / "s.toml"
    f.write_text(LEAGUE_OF_ONE_AT_A_TIME.replace("concurrent_heats = 1", "concurrent_heats = 2"))
    runner = SeasonRunner(load_season(f), tmp_path / "out", provider_factory=lambda workdir, heat_id: None)
    assert runner.cpu_weights is True


@pytest.mark.parametrize("name, value", [("AOE_BOOT_SLOTS", "two"), ("AOE_CPU_WEIGHTS", "maybe")])
def test_a_bad_setting_is_refused_with_one_heat_at_a_time(tmp_path, monkeypatch, name, value):
    """``concurrent_heats = 1`` uses neither setting, but a typo is still refused (not left
    for the day someone raises the concurrency), before the runner writes anything."""
    monkeypatch.delenv("AOE_BOOT_SLOTS", raising=False)
    monkeypatch.delenv("AOE_CPU_WEIGHTS", raising=False)
    monkeypatch.setenv(name, value)
    f = tmp_path / "s.toml"
    f.write_text(LEAGUE_OF_ONE_AT_A_TIME)
    with pytest.raises(AoeError, match=f"^{name} must .*, got {value!r}$"):
        SeasonRunner(load_season(f), tmp_path / "out", provider_factory=lambda workdir, heat_id: None)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name, value", [("AOE_BOOT_SLOTS", "-1"), ("AOE_CPU_WEIGHTS", "enable")])
def test_aoe_run_refuses_a_bad_setting_before_anything_is_written(tmp_path, monkeypatch, capsys, name, value):
    """``aoe run`` with a bad setting: one line on stderr, no season
    folder, no image prepared and no territory booted (the check comes first): exit 1."""
    from aoe_tui import cli

    def no_images(*_a, **_kw):
        raise AssertionError("images prepared before the settings were checked")

    monkeypatch.setattr("aoe_tui.commands.image.prepare_provider_images", no_images)
    monkeypatch.delenv("AOE_BOOT_SLOTS", raising=False)
    monkeypatch.delenv("AOE_CPU_WEIGHTS", raising=False)
    monkeypatch.setenv(name, value)
    f = tmp_path / "s.toml"
    f.write_text(LEAGUE_OF_ONE_AT_A_TIME)
    out = tmp_path / "out"
    rc = cli.main(["run", str(f), "--headless", "-o", str(out)])
    err = capsys.readouterr().err
    assert rc == AoeError("x").exit_code != 0
    [line] = err.splitlines()
    assert line.startswith(f"aoe: error: {name} must ") and line.endswith(f", got {value!r}"), line
    assert not out.exists()


def test_run_help_names_the_settings_of_heats_at_once(capsys):
    """``aoe run --help`` names ``concurrent_heats``, ``AOE_BOOT_SLOTS`` and ``AOE_CPU_WEIGHTS``
    with the defaults the code has, and where they are explained."""
    import re

    from aoe_tui import cli
    from aoe_tui.domain.season_file import SeasonFile

    with pytest.raises(SystemExit) as done:
        cli.main(["run", "--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    default_heats = SeasonFile.model_fields["concurrent_heats"].default
    assert f"concurrent_heats in the season file (default {default_heats})" in text
    assert re.search(rf"AOE_BOOT_SLOTS=N .*\(default {BOOT_SLOTS}, 0 = no limit; a heat of more than N boots alone\)",
                     text)
    assert "on by default, AOE_CPU_WEIGHTS=0 or false/no/off turns it off" in text
    assert 'docs/territories.md, "Fair shares between heats"' in text
    assert "**Fair shares between heats" in (REPO / "docs" / "territories.md").read_text()


# ------------------------------------------------------------------- the cpu groups

def test_a_cpu_group_goes_with_its_parent_once_the_parent_is_empty(tmp_path):
    """``remove_cpu_group``: the territory's group, then ``aoe-territories`` when no other
    group is in it; a parent still holding another runner's group stays, silently."""
    from aoe_tui.runtime.container import cpu_group, make_cpu_group, remove_cpu_group

    mine, theirs = cpu_group("aoe-mine", tmp_path), cpu_group("aoe-theirs", tmp_path)
    assert mine == tmp_path / "aoe-territories" / "aoe-mine"
    make_cpu_group(mine)
    make_cpu_group(theirs)
    assert remove_cpu_group(mine) is True
    assert not mine.exists() and theirs.is_dir()  # ENOTEMPTY on the parent: no error
    assert remove_cpu_group(theirs) is True
    assert not (tmp_path / "aoe-territories").exists()
    assert remove_cpu_group(mine) is True  # already gone


def test_making_a_cpu_group_survives_its_parent_removed_meanwhile(tmp_path, monkeypatch):
    """Another runner's cleanup removes the empty parent between our ``mkdir`` of the parent
    and of the group: the group is still made."""
    from aoe_tui.runtime.container import cpu_group, make_cpu_group

    group = cpu_group("aoe-mine", tmp_path)
    real_mkdir = os.mkdir
    raced: list[str] = []

    def mkdir(path, mode=0o777, **kw):
        real_mkdir(path, mode, **kw)
        if Path(path) == group.parent and not raced:  # the other runner's rmdir lands now
            raced.append("parent removed")
            os.rmdir(path)

    monkeypatch.setattr(os, "mkdir", mkdir)
    make_cpu_group(group)
    assert raced and group.is_dir()


def test_state_writes_read_the_owner_start_once(tmp_path, monkeypatch):
    """``_save_state`` records the owner (pid, start ticks); the start comes from ``/proc``
    once per provider, not at every write."""
    import json

    from aoe_tui.runtime import netalloc
    from aoe_tui.runtime.container import ContainerProvider, _Box
    from aoe_tui.runtime.provider import TerritorySpec

    reads: list[int] = []
    real = netalloc.process_start_ticks

    def counted(pid):
        reads.append(pid)
        return real(pid)

    monkeypatch.setattr(netalloc, "process_start_ticks", counted)
    provider = ContainerProvider(tmp_path, heat_id="owner-once")
    boxes = [_Box(spec=TerritorySpec(id=f"builder-{i}", password="x-race", index=i), dir=tmp_path / f"builder-{i}",
                  address=f"10.0.0.{10 + i}", host_address="10.0.0.1", netns="aoe-x", host_veth="aoex",
                  subnet="10.0.0.0/24") for i in range(2)]
    for b in boxes * 3:
        provider._save_state(b)
    assert reads == [os.getpid()]
    state = json.loads((tmp_path / "builder-1" / "state.json").read_text())
    assert state["owner_pid"] == os.getpid() and state["owner_start"] == real(os.getpid()) is not None


KILLED_WEIGHED_RUNNER = """
import asyncio, os, sys
from pathlib import Path
from aoe_tui.runtime.container import ContainerProvider
from aoe_tui.runtime.provider import TerritorySpec
async def main():
    p = ContainerProvider(Path(sys.argv[1]), heat_id="killed-weighed-%d" % os.getpid())
    (t,) = await p.provision([TerritorySpec(id="builder-one", password="builder-one-race")])
    assert p.set_cpu_weight(10) == 1
    print(t.extra["host_veth"], flush=True)
    os.kill(os.getpid(), 9)
asyncio.run(main())
"""


@pytest.mark.container
async def test_cleanup_stale_removes_a_killed_runners_cpu_groups(guest_image, tmp_path):
    """A runner with CPU weights on is SIGKILLed mid-heat: its territory's ``cpu`` group (with
    the territory's processes in it) stays behind; ``cleanup_stale`` removes it with the rest,
    and the parent ``aoe-territories`` too unless another runner's group is in it."""
    import subprocess
    import sys

    from aoe_tui.runtime.container import cleanup_stale

    if os.geteuid() != 0:
        pytest.skip("container provider tests need root")
    cpu = Path("/sys/fs/cgroup/cpu")
    if not (cpu / "cgroup.procs").is_file() or not Path("/sys/fs/cgroup/systemd/cgroup.procs").is_file():
        pytest.skip("not a cgroup-v1 host with a cpu hierarchy (no per-territory cpu group)")
    proc = await asyncio.to_thread(subprocess.run, [sys.executable, "-c", KILLED_WEIGHED_RUNNER, str(tmp_path)],
                                   capture_output=True, text=True, timeout=120, cwd=REPO)
    try:
        assert proc.returncode == -9, proc.stderr
        group = cpu / "aoe-territories" / f"aoe-{proc.stdout.split()[0][3:]}"
        assert (group / "cpu.shares").read_text().split() == ["102"]
        assert (group / "guest" / "cgroup.procs").read_text().split()  # the orphaned territory still runs in it
    finally:
        cleaned = cleanup_stale(tmp_path)
    assert cleaned == ["builder-one"]
    assert not group.exists()
    parent = group.parent
    assert not parent.exists() or [p for p in parent.iterdir() if p.is_dir()], \
        "an empty aoe-territories group was left behind"


# ------------------------------------------------------------ weights that cannot take effect

def _cgroup_roots(monkeypatch, tmp_path: Path, *, systemd: bool, cpu: bool) -> None:
    """Point the container provider at cgroup-v1 roots under ``tmp_path``: the ``name=systemd``
    one and the ``cpu`` one exist (hold ``cgroup.procs``) as asked."""
    from aoe_tui.runtime import container

    for name, present in (("systemd", systemd), ("cpu", cpu)):
        root = tmp_path / "cgroup" / name
        root.mkdir(parents=True)
        if present:
            (root / "cgroup.procs").write_text("")
    monkeypatch.setattr(container, "CGROUP_V1_SYSTEMD", tmp_path / "cgroup" / "systemd")
    monkeypatch.setattr(container, "CGROUP_V1_CPU", tmp_path / "cgroup" / "cpu")


@pytest.mark.parametrize("systemd, cpu, problem", [
    (True, True, None),
    (False, False, "this host is not on cgroup v1 (no {systemd}); the weights need the v1 cpu hierarchy, "
                   "cgroup v2 is not supported"),
    (False, True, "this host is not on cgroup v1 (no {systemd}); the weights need the v1 cpu hierarchy, "
                  "cgroup v2 is not supported"),
    (True, False, "this host has no cgroup-v1 cpu hierarchy ({cpu})"),
])
def test_cpu_weight_problem_names_the_missing_hierarchy(tmp_path, monkeypatch, systemd, cpu, problem):
    from aoe_tui.runtime.container import cpu_weight_problem

    _cgroup_roots(monkeypatch, tmp_path, systemd=systemd, cpu=cpu)
    want = problem and problem.format(systemd=tmp_path / "cgroup" / "systemd", cpu=tmp_path / "cgroup" / "cpu")
    assert cpu_weight_problem() == want


@pytest.mark.parametrize("heats, kind, cluster, why", [
    (1, "container", False, "heats run one at a time (concurrent_heats = 1); the weights are for heats at once"),
    (2, "qemu", False, "the qemu provider does not weigh CPU (only the container provider does)"),
    (2, "container", True, "heats run on the Ray cluster's nodes, which do not weigh CPU"),
    (2, "container", False, None),  # a cgroup-v1 host with both hierarchies: the weights work
])
def test_cpu_weights_note_says_why_the_switch_does_nothing(tmp_path, monkeypatch, heats, kind, cluster, why):
    from aoe_tui.season.runner import cpu_weights_note

    _cgroup_roots(monkeypatch, tmp_path, systemd=True, cpu=True)
    monkeypatch.setenv("AOE_CPU_WEIGHTS", " On ")
    assert cpu_weights_note(heats, kind, cluster) == (why and f"warning: AOE_CPU_WEIGHTS=On has no effect: {why}")
    monkeypatch.setenv("AOE_CPU_WEIGHTS", "0")
    assert cpu_weights_note(heats, kind, cluster) is None


@pytest.mark.parametrize("weights", ["1", None])
async def test_a_season_on_a_cgroup_v2_host_says_once_that_the_weights_do_nothing(tmp_path, monkeypatch, weights):
    """``AOE_CPU_WEIGHTS=1`` with heats at once on a host without the cgroup-v1 hierarchies
    (a cgroup-v2 host): the run says so in one line as it starts, before any heat, and not
    again for each of its heats; with the switch off it says nothing about it."""
    from aoe_tui.testing.heats import write_timed_out_heat

    _cgroup_roots(monkeypatch, tmp_path, systemd=False, cpu=False)
    monkeypatch.delenv("AOE_BOOT_SLOTS", raising=False)
    if weights is None:
        monkeypatch.delenv("AOE_CPU_WEIGHTS", raising=False)
    else:
        monkeypatch.setenv("AOE_CPU_WEIGHTS", weights)
    f = tmp_path / "s.toml"
    f.write_text(LEAGUE_OF_ONE_AT_A_TIME.replace("concurrent_heats = 1", "concurrent_heats = 2")
                 .replace("heats_per_entrant = 1", "heats_per_entrant = 2")
                 + "".join(f'[[entrants]]\nid = "x{i}"\nadapter = "oracle"\nmodel = "m"\n' for i in range(3)))

    async def stand_in_run_heat(loaded, provider, adapters, folder, **_kw):
        world = write_timed_out_heat(folder)
        return world

    said: list[str] = []
    runner = SeasonRunner(load_season(f), tmp_path / "out", run_heat=stand_in_run_heat, say=said.append,
                          provider_factory=lambda workdir, heat_id: None)
    state = await runner.run()
    heats = sum(len(r.heats) for r in state.rounds.values())
    notes = [i for i, line in enumerate(said) if "AOE_CPU_WEIGHTS" in line]
    started = [i for i, line in enumerate(said) if ": started: " in line]
    assert heats >= 4 and len(started) == heats, said
    if weights is None:
        assert notes == []
        return
    assert [said[i] for i in notes] == [
        f"warning: AOE_CPU_WEIGHTS=1 has no effect: this host is not on cgroup v1 (no {tmp_path}/cgroup/systemd); "
        "the weights need the v1 cpu hierarchy, cgroup v2 is not supported"], said
    assert notes[0] < started[0]


@pytest.mark.parametrize("heats,cpus,said_note", [(4, 2, True), (4, 12, False), (1, 2, False)])
async def test_a_season_whose_heats_outnumber_the_host_cpus_says_so_once(tmp_path, monkeypatch, heats, cpus, said_note):
    """``concurrent_heats`` heats of three 1-vCPU seats on a host with fewer CPUs than their
    vCPUs: one line before the first heat, naming the figures; nothing when they fit or heats
    run one at a time."""
    from aoe_tui.season import runner as runner_mod
    from aoe_tui.testing.heats import write_timed_out_heat

    monkeypatch.setattr(runner_mod.os, "sched_getaffinity", lambda _pid: set(range(cpus)))
    f = tmp_path / "s.toml"
    f.write_text(LEAGUE_OF_ONE_AT_A_TIME.replace("concurrent_heats = 1", f"concurrent_heats = {heats}")
                 + "".join(f'[[entrants]]\nid = "x{i}"\nadapter = "oracle"\nmodel = "m"\n' for i in range(3)))

    async def stand_in_run_heat(loaded, provider, adapters, folder, **_kw):
        return write_timed_out_heat(folder)

    said: list[str] = []
    runner = SeasonRunner(load_season(f), tmp_path / "out", run_heat=stand_in_run_heat, say=said.append,
                          provider_factory=lambda workdir, heat_id: None)
    await runner.run()
    notes = [i for i, line in enumerate(said) if "host CPUs" in line]
    started = [i for i, line in enumerate(said) if ": started: " in line]
    if not said_note:
        assert notes == [], said
        return
    assert [said[i] for i in notes] == [
        f"note: concurrent_heats 4 x 3 vCPUs a heat = 12 vCPUs of territories on {cpus} host CPUs: when more seats "
        "are busy than there are CPUs each gets less than its class, and a seat that keeps its vCPUs busy yields "
        "to the others (docs/territories.md, \"Fair shares between heats\")"], said
    assert notes[0] < started[0]


def test_heat_vcpus_sums_the_seats_classes():
    from aoe_tui.domain.arena import load_manifest
    from aoe_tui.season.runner import heat_vcpus

    arena = load_manifest(Path(__file__).resolve().parent.parent / "arenas" / "first-build" / "arena.toml")
    assert heat_vcpus(arena) == 3


async def test_a_provider_note_is_said_once_per_run_not_once_per_heat(tmp_path, monkeypatch):
    """Issue #30 item 3: a provider's note (the copy fallback, said by every heat's provider)
    reaches the operator once per run; other phase lines of every heat still do."""
    from aoe_tui.testing.heats import write_timed_out_heat

    monkeypatch.delenv("AOE_BOOT_SLOTS", raising=False)
    monkeypatch.delenv("AOE_CPU_WEIGHTS", raising=False)
    f = tmp_path / "s.toml"
    f.write_text(LEAGUE_OF_ONE_AT_A_TIME.replace("heats_per_entrant = 1", "heats_per_entrant = 2")
                 + "".join(f'[[entrants]]\nid = "x{i}"\nadapter = "oracle"\nmodel = "m"\n' for i in range(3)))
    note = "note: overlayfs unusable (x): each territory's root is a full copy of the image"

    async def stand_in_run_heat(loaded, provider, adapters, folder, *, on_phase, **_kw):
        on_phase("territories ready in 1.0 s")
        on_phase(note)
        return write_timed_out_heat(folder)

    said: list[str] = []
    runner = SeasonRunner(load_season(f), tmp_path / "out", run_heat=stand_in_run_heat, say=said.append,
                          provider_factory=lambda workdir, heat_id: None)
    state = await runner.run()
    heats = sum(len(r.heats) for r in state.rounds.values())
    assert heats >= 2
    assert len([line for line in said if line.endswith(": territories ready in 1.0 s")]) == heats, said
    assert len([line for line in said if line.endswith(note)]) == 1, said
