"""Fault handling of a real heat on container territories (real verifiers, adapters, SSH).

* a verifier that hangs is killed at its timeout and leaves no process; the other seats
  race on to a durable pass (that they are not delayed is asserted as an order of events
  in ``tests/test_referee.py``);
* an adapter that crashes is a ``harness`` failure and its competitor ends ``unavailable``;
* a territory whose reboot never returns is an ``infrastructure_failure`` (source ``arena``);
* SIGINT mid-match (``aoe match run`` in a subprocess) leaves a loadable log, a
  ``world.json`` with ``match_state`` aborted, and no territory left running.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from aoe_tui.agents.registry import resolve_adapter
from aoe_tui.domain.arena import load_manifest
from aoe_tui.domain.world import world_json
from aoe_tui.referee.heat import run_heat
from aoe_tui.referee.verifier import STARTER_THREADS
from aoe_tui.replay.log import read_events
from aoe_tui.replay.reducer import reduce_match
from aoe_tui.runtime.container import ContainerProvider
from aoe_tui.runtime.provider import RebootError, Territory
from procfs import descendants, thread_policies

pytestmark = [pytest.mark.container]

REPO = Path(__file__).resolve().parent.parent
TINY = REPO / "tests" / "adapters" / "tiny-adapter.sh"


def need_container_host() -> None:
    if os.geteuid() != 0:
        pytest.skip("container heats need root")
    if shutil.which("systemd-nspawn") is None:
        pytest.skip("systemd-nspawn not installed (apt-get install systemd-container)")


def make_arena(dest: Path, *, edits: dict[str, str] | None = None) -> Path:
    shutil.copytree(REPO / "arenas" / "first-build", dest)
    manifest = dest / "arena.toml"
    text = manifest.read_text().replace("duration_seconds = 600", "duration_seconds = 120")
    for old, new in (edits or {}).items():
        assert old in text, old
        text = text.replace(old, new, 1)
    manifest.write_text(text)
    return manifest


def _pid_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def _nspawn_procs_under(path: Path) -> list[int]:
    out = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "systemd-nspawn" in cmd and str(path) in cmd:
            out.append(int(proc.name))
    return out


async def _heat(tmp_path, manifest, agents, *, provider=None, duration_s=None, drain=3.0):
    loaded = load_manifest(manifest)
    out = tmp_path / "match"
    provider = provider or ContainerProvider(out / "territories", cidr=loaded.manifest.network.cidr)
    seats = [loaded.manifest.agent_for(t.id) for t in loaded.manifest.territories]
    adapters = {a.id: resolve_adapter(spec) for a, spec in zip(seats, agents)}
    world = await run_heat(loaded, provider, adapters, out, drain_seconds=drain, duration_s=duration_s)
    records = read_events(out / "events.jsonl")
    assert (out / "world.json").read_text() == world_json(reduce_match(records)) == world_json(world)
    assert not _nspawn_procs_under(out)
    return world, records, out


async def test_hung_verifier_is_killed_and_does_not_delay_others(tmp_path, guest_image):
    need_container_host()
    manifest = make_arena(
        tmp_path / "first-build",
        edits={"timeout_seconds = 5": "timeout_seconds = 1"},  # service-up
    )
    verify = manifest.parent / "verify"
    shutil.move(verify / "service-up.sh", verify / "service-up-real.sh")
    pids = tmp_path / "hang.pids"
    hang = verify / "service-up.sh"
    hang.write_text(
        "#!/bin/sh\n"
        'if [ "$AOE_TERRITORY_ID" = builder-two ]; then\n'
        f"  sleep 300 & echo $! >> {pids}\n"
        f"  echo $$ >> {pids}\n"
        "  sleep 301\n"
        "fi\n"
        'exec "$(dirname "$0")/service-up-real.sh"\n'
    )
    hang.chmod(0o755)
    world, records, _ = await _heat(tmp_path, manifest, ["oracle", "oracle", "oracle"])
    two = [r.event for r in records if getattr(r.event, "territory", None) == "builder-two" and r.event.kind == "milestone_failed"]
    assert two and all(e.detail == "verifier timed out" for e in two)
    # the other seats raced on to a durable pass. That the hung checks did not delay them is
    # an order of events, asserted where it is deterministic: test_referee.py's
    # test_hung_verifier_does_not_delay_other_seats (the same supervisor and verifier runner,
    # a hang held the whole heat). A wall-clock bound on a real race (boots, reboots, the
    # agents' work) only measured the machine's load.
    assert world.winner in ("builder-one", "builder-three") and world.finish_reason == "first durable deployment"
    listed = [int(p) for p in pids.read_text().split()]
    assert len(listed) >= 2
    # each shell was killed with its group at its timeout and reaped before its failure was
    # logged; the orphaned sleeps die once the kernel runs them and init reaps them in its
    # own time (seconds on a loaded host): wait for that, generously
    deadline = time.monotonic() + 60
    while [p for p in listed if _pid_alive(p)] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in listed if _pid_alive(p)], "a hung verifier process was left behind"


async def test_crashing_adapter_is_harness_failure(tmp_path, guest_image, monkeypatch):
    need_container_host()
    if shutil.which("sshpass") is None or shutil.which("jq") is None:
        pytest.skip("tiny-adapter.sh needs sshpass and jq")
    monkeypatch.setenv("TINY_ADAPTER_MODE", "crash")
    manifest = make_arena(tmp_path / "first-build")
    world, records, _ = await _heat(tmp_path, manifest, [f"command:{TINY}", "scripted:memory", "oracle"])
    agent = world.agents["builder-one-agent"]
    assert agent.failure_source == "harness" and agent.terminal_state == "failed" and agent.successful is False
    assert "exit status: 3" in agent.terminal_detail
    # its first usage checkpoint still reached the log before the crash
    assert agent.input_tokens == 1200 and agent.output_tokens == 80
    ends = {r.event.territory: r.event.to for r in records if r.event.kind == "competitor_state_changed" and r.event.to in ("unavailable", "incomplete")}
    assert ends == {"builder-one": "unavailable", "builder-two": "incomplete"}
    assert world.winner == "builder-three"


class NeverRebootsProvider(ContainerProvider):
    """A real container provider whose reboot of one territory never comes back."""

    async def reboot(self, territory: Territory) -> None:
        if territory.id == "builder-one":
            await asyncio.sleep(0.5)
            raise RebootError(f"{territory.id}: SSH unavailable after reboot")
        await super().reboot(territory)


async def test_reboot_that_never_returns_is_infrastructure_failure(tmp_path, guest_image):
    need_container_host()
    manifest = make_arena(tmp_path / "first-build")
    loaded = load_manifest(manifest)
    provider = NeverRebootsProvider(tmp_path / "match" / "territories", cidr=loaded.manifest.network.cidr)
    world, records, out = await _heat(
        tmp_path, manifest, ["oracle", "scripted:memory", "scripted:memory"], provider=provider, duration_s=15
    )
    infra = [r.event for r in records if r.event.kind == "infrastructure_failure"]
    assert len(infra) == 1
    assert infra[0].component == "territory:builder-one" and infra[0].source == "arena"
    assert "SSH unavailable after reboot" in infra[0].detail
    assert world.infrastructure_failures == 1
    t1 = world.territories["builder-one"]
    assert t1.competitor_state == "unavailable" and not t1.milestones["host-reboot"].passed
    assert world.finish_reason == "match timer expired" and world.match_state == "finished"
    assert (out / "agents" / "builder-one-agent" / "referee-reboot").read_text() == "host-reboot"


def spawn_match(tmp_path: Path, agent: str, *extra: str, stdout=subprocess.PIPE,
                env: dict[str, str] | None = None) -> tuple[subprocess.Popen, Path]:
    """``aoe match run`` of a fresh first-build copy on containers as a child process
    (text pipes); returns it and its match folder."""
    need_container_host()
    manifest = make_arena(tmp_path / "first-build")
    out = tmp_path / "match"
    proc = subprocess.Popen(
        [sys.executable, "-m", "aoe_tui.cli", "match", "run", str(manifest), "--provider", "container",
         "--agent", agent, *extra, "--output", str(out)],
        stdout=stdout, stderr=subprocess.PIPE, text=True, cwd=REPO, env=env,
    )
    return proc, out


def test_sigint_mid_match(tmp_path, guest_image):
    proc, out = spawn_match(tmp_path, "scripted:memory")
    # wait until the match clock runs and verifiers have started
    deadline = time.monotonic() + 60
    log = out / "events.jsonl"
    while time.monotonic() < deadline:
        if log.exists() and b"milestone_evaluation_started" in log.read_bytes():
            break
        time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail("match never started: " + proc.stderr.read())
    time.sleep(1.0)
    # the referee's loop (this runner's main thread) and its verifier starter threads are
    # real-time; no other thread, and no process it started (territories, agents, verifiers)
    policies = {pid: thread_policies(pid) for pid in [proc.pid, *descendants(proc.pid)]}
    runner = policies.pop(proc.pid)
    assert runner[proc.pid] == os.SCHED_RR, runner
    assert sum(p == os.SCHED_RR for p in runner.values()) == 1 + STARTER_THREADS, runner
    others = {(pid, tid): p for pid, tids in policies.items() for tid, p in tids.items()}
    assert len(policies) > 3 and not {os.SCHED_FIFO, os.SCHED_RR} & set(others.values()), others
    assert "referee thread: real-time" in proc.stdout.readline()
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=90)
    assert proc.returncode == 130, stderr
    records = read_events(log)
    world = json.loads((out / "world.json").read_text())
    assert world["match_state"] == "aborted" and world["winner"] is None
    assert world["finish_reason"] == "operator interrupt"
    assert (out / "world.json").read_text() == world_json(reduce_match(records))
    assert not any(a["running"] for a in world["agents"].values())
    assert not _nspawn_procs_under(out), "territories left running after SIGINT"
    assert "Traceback" not in stderr


def test_reader_of_stdout_going_away_does_not_break_the_heat(tmp_path, guest_image):
    """`aoe match run ... | head -1`: the heat still finishes normally and tears down."""
    proc, out = spawn_match(tmp_path, "oracle", "--drain-seconds", "2")
    assert proc.stdout.readline()  # the reader takes one line and leaves
    proc.stdout.close()
    stderr = proc.stderr.read()
    assert proc.wait(timeout=120) == 0, stderr
    world = json.loads((out / "world.json").read_text())
    assert world["match_state"] == "finished" and world["winner"] is not None
    agents = world["agents"].values()
    assert not any(a["failure_source"] == "harness" for a in agents), world["agents"]
    assert not _nspawn_procs_under(out), "territories left running after the reader went away"
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr


def test_cleanup_removes_what_a_killed_runner_left_and_spares_a_live_one(tmp_path, guest_image):
    """`aoe cleanup` on a live heat touches nothing; after SIGKILL it removes every territory."""
    proc, out = spawn_match(tmp_path, "scripted:slow", stdout=subprocess.DEVNULL,
                            env={**os.environ, "AOE_SCRIPTED_SLOW_DELAY_S": "300"})
    try:
        deadline = time.monotonic() + 60
        while not (out / "events.jsonl").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert (out / "events.jsonl").exists(), proc.stderr.read() if proc.poll() is not None else "no log"
        live = _nspawn_procs_under(out)
        assert len(live) == 3
        spared = subprocess.run([sys.executable, "-m", "aoe_tui.cli", "cleanup", str(out)],
                                capture_output=True, text=True, cwd=REPO)
        assert spared.returncode == 0 and "0 stale territories removed" in spared.stdout, spared
        assert all(_pid_alive(p) for p in live)
    finally:
        proc.kill()
        proc.wait()
    assert _nspawn_procs_under(out), "SIGKILL of the runner should leave its territories (what cleanup is for)"
    res = subprocess.run([sys.executable, "-m", "aoe_tui.cli", "cleanup", str(tmp_path)],
                         capture_output=True, text=True, cwd=REPO)
    assert res.returncode == 0 and "3 stale territories removed" in res.stdout, res
    assert not _nspawn_procs_under(out)
    assert not list((out / "territories").glob("*/state.json")), "state files left behind"
    assert not [m for m in Path("/proc/mounts").read_text().splitlines() if str(out) in m], "mounts left behind"
