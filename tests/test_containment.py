"""Containment (issue #17): when an agent's time ends or it is outraced (stopped), what it
started inside its territory stops too, not only its adapter process on the host; the
service it deployed under systemd keeps running. Processes are counted in ``/proc`` on
the host: the container's processes are those in its PID namespace.

One real container territory (systemd-nspawn, real SSH) serves both scenarios, each run
by ``tests/adapters/stray-adapter.sh`` (a §5 command adapter): it deploys
``builder-app.service`` and leaves a ``setsid nohup sleep 601`` and a ``nohup`` shell
loop running from its SSH sessions, then works on until stopped."""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from pathlib import Path

import pytest
import pytest_asyncio

from aoe_tui.agents.base import AdapterStatus, AgentContext
from aoe_tui.agents.command import CommandAdapter
from aoe_tui.domain.arena import AgentDef, Budget

pytestmark = [pytest.mark.container]
amod = pytest.mark.asyncio(loop_scope="module")

REPO = Path(__file__).resolve().parent.parent
STRAY = REPO / "tests" / "adapters" / "stray-adapter.sh"


def guest_processes(leader_pid: int) -> dict[int, str]:
    """pid → command line of every process in the PID namespace of ``leader_pid`` (the
    container's init), read from the host's ``/proc``."""
    ns = os.readlink(f"/proc/{leader_pid}/ns/pid")
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.readlink(f"/proc/{pid}/ns/pid") != ns:
                continue
            found[int(pid)] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        except OSError:
            continue
    return found


def count(procs: dict[int, str]) -> dict[str, int]:
    """How many strays and deployed-service processes ``procs`` holds."""
    return {"sleep": sum(c == "sleep 601" for c in procs.values()),
            "loop": sum(c.startswith("bash -c while") for c in procs.values()),
            "service": sum(c == "/usr/bin/python3 /opt/builder/app.py" for c in procs.values())}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def territory(guest_image, tmp_path_factory):
    if os.geteuid() != 0 or shutil.which("systemd-nspawn") is None:
        pytest.skip("container territories need root and systemd-nspawn")
    if shutil.which("sshpass") is None:
        pytest.skip("stray-adapter.sh needs sshpass")
    from aoe_tui.runtime.container import ContainerProvider
    from aoe_tui.runtime.provider import TerritorySpec

    workdir = tmp_path_factory.mktemp("contain")
    provider = ContainerProvider(workdir, image=guest_image, heat_id=f"contain-{os.getpid()}")
    try:
        [t] = await provider.provision([TerritorySpec(id="builder-one", password="builder-one-race")])
        yield t, workdir
    finally:
        await provider.teardown()


def context(t, workdir: Path, name: str, deadline_s: float) -> AgentContext:
    agent = AgentDef(id=f"{name}-agent", territory=t.id, adapter="stray", model="test/model",
                     budget=Budget(resource_units=5))
    agent_dir = workdir / name / "agents" / agent.id
    agent_dir.mkdir(parents=True)
    (agent_dir / "instruction.md").write_text("build it\n")
    return AgentContext(agent=agent, territory=t, agent_dir=agent_dir, instruction_file=agent_dir / "instruction.md",
                        deadline_s=deadline_s, arena_dir=REPO / "arenas" / "first-build")


async def strays_running(t, run, timeout_s: float = 30) -> dict[str, int]:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        seen = count(guest_processes(t.extra["leader_pid"]))
        if seen["sleep"] and seen["loop"] and seen["service"]:
            return seen
        assert not run._task.done(), (run.ctx.stderr_file.read_text(), run.ctx.stdout_file.read_text())
        await asyncio.sleep(0.2)
    raise AssertionError(f"the adapter's strays never ran: {seen}; {run.ctx.stderr_file.read_text()}")


@amod
async def test_time_ends_strays_stop_deployed_service_stays(territory):
    t, workdir = territory
    run = await CommandAdapter("stray", STRAY, kill_grace_s=0.5).start(context(t, workdir, "timeout", deadline_s=10))
    before = await strays_running(t, run)
    assert before == {"sleep": 1, "loop": 1, "service": 1}
    outcome = await asyncio.wait_for(run.wait(), 40)
    assert outcome.status == AdapterStatus.TIMED_OUT
    after = count(guest_processes(t.extra["leader_pid"]))
    assert after == {"sleep": 0, "loop": 0, "service": 1}, after
    assert any("login session(s) left in builder-one" in line for line in run.activity), list(run.activity)


@amod
async def test_outraced_strays_stop_deployed_service_stays(territory):
    t, workdir = territory
    run = await CommandAdapter("stray", STRAY, kill_grace_s=0.5).start(context(t, workdir, "outraced", deadline_s=120))
    before = await strays_running(t, run)
    assert before["sleep"] == 1 and before["loop"] == 1 and before["service"] == 1
    started = time.monotonic()
    await run.stop()  # what the referee does to an outraced agent
    stop_s = time.monotonic() - started
    outcome = await run.wait()
    assert outcome.status == AdapterStatus.INTERRUPTED
    after = count(guest_processes(t.extra["leader_pid"]))
    assert after == {"sleep": 0, "loop": 0, "service": 1}, after
    assert stop_s < 5, stop_s  # the adapter's process group and the guest's sessions, promptly


@amod
async def test_builtin_builder_stopped_its_strays_stop(territory):
    """The built-in builders (oracle, scripted, package builders: ``BuilderRun``) contain
    what they started the same way."""
    from aoe_tui.agents.oracle import BuilderAdapter, BuilderRun

    class StrayRun(BuilderRun):
        async def body(self):
            conn = await self.connect()
            await self.sh(conn, "setsid nohup sleep 601 >/dev/null 2>&1 </dev/null & echo started")
            await asyncio.sleep(1000)

    class StrayBuilder(BuilderAdapter):
        name = "stray-builder"
        run_class = StrayRun

    t, workdir = territory
    run = await StrayBuilder().start(context(t, workdir, "builder", deadline_s=120))
    end = time.monotonic() + 30
    while count(guest_processes(t.extra["leader_pid"]))["sleep"] != 1:
        assert time.monotonic() < end and not run._task.done(), list(run.activity)
        await asyncio.sleep(0.2)
    await run.stop()
    assert (await run.wait()).status == AdapterStatus.INTERRUPTED
    assert count(guest_processes(t.extra["leader_pid"])) == {"sleep": 0, "loop": 0, "service": 1}
