"""Starting and awaiting processes off the referee loop (aoe_tui.runtime.procs, issue 7).

Real threads, real child processes, real pidfds.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from aoe_tui.referee import verifier as verifier_mod
from aoe_tui.runtime.procs import ForkedCallError, Starter, call_forked_idle, use_pidfd_child_watcher, wait_exited
from aoe_tui.runtime.realtime import engine_priority


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


async def test_starter_runs_blocking_calls_while_the_loop_keeps_ticking():
    starter = Starter(2, name="t-start")
    beats: list[float] = []

    async def heartbeat() -> None:
        while True:
            beats.append(time.monotonic())
            await asyncio.sleep(0.01)

    hb = asyncio.create_task(heartbeat())
    threads_before = threading.active_count()
    t0 = time.monotonic()
    name = await starter.run(lambda: (time.sleep(0.3), threading.current_thread().name)[1])
    hb.cancel()
    assert name.startswith("t-start-")
    assert threading.active_count() == threads_before  # no thread was started for the call
    during = [b for b in beats if t0 <= b <= t0 + 0.3]
    assert len(during) >= 10, f"the loop stalled: {len(during)} beats in 0.3 s"
    with pytest.raises(ZeroDivisionError):
        await starter.run(lambda: 1 / 0)


async def test_cancelled_call_hands_its_result_to_abandon():
    starter = Starter(1, name="t-abandon")
    abandoned: list[subprocess.Popen] = []
    done = threading.Event()

    def start() -> subprocess.Popen:
        time.sleep(0.2)
        return subprocess.Popen(["sleep", "60"])

    def abandon(proc: subprocess.Popen) -> None:
        proc.kill()
        proc.wait()
        abandoned.append(proc)
        done.set()

    task = asyncio.create_task(starter.run(start, abandon=abandon))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await asyncio.to_thread(done.wait, 10), "abandon was never called"
    assert abandoned[0].returncode == -signal.SIGKILL and not _alive(abandoned[0].pid)


async def test_wait_exited_reaps_without_a_thread():
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(3)"])
    threads_before = threading.active_count()
    assert await wait_exited(proc) == 3
    assert threading.active_count() == threads_before
    assert not _alive(proc.pid)
    proc = subprocess.Popen(["sleep", "60"])
    waiting = asyncio.create_task(wait_exited(proc))
    await asyncio.sleep(0.1)
    assert not waiting.done()
    os.kill(proc.pid, signal.SIGTERM)
    assert await asyncio.wait_for(waiting, 10) == -signal.SIGTERM
    # already exited before the wait began
    proc = subprocess.Popen(["true"])
    while _alive(proc.pid):
        await asyncio.sleep(0.01)
    assert await wait_exited(proc) == 0


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="3.12+ awaits children through pidfds already")
def test_asyncio_subprocesses_start_no_waiter_thread_on_any_loop():
    """3.11's default watcher starts a ``waitpid-N`` thread per child and the loop waits
    for it; after use_pidfd_child_watcher no such thread appears, on two loops in two threads."""
    assert use_pidfd_child_watcher() is True
    assert use_pidfd_child_watcher() is True  # idempotent
    names: list[str] = []
    codes: list[int] = []

    async def child(code: int) -> None:
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", f"import time, sys; time.sleep(0.3); sys.exit({code})")
        await asyncio.sleep(0.1)
        names.extend(t.name for t in threading.enumerate())
        codes.append(await proc.wait())

    threads = [threading.Thread(target=asyncio.run, args=(child(c),)) for c in (4, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(codes) == [4, 5]
    assert not [n for n in names if n.startswith("waitpid")], names


@pytest.mark.skipif(os.geteuid() != 0, reason="real-time priority needs root")
async def test_starter_threads_take_the_policy_of_their_creator():
    with engine_priority("realtime"):
        starter = Starter(1, name="t-rt")
    policy = await starter.run(os.sched_getscheduler, 0)
    assert policy & ~os.SCHED_RESET_ON_FORK == os.SCHED_RR
    # what it starts runs at normal priority
    out = await starter.run(subprocess.check_output, [sys.executable, "-c", "import os; print(os.sched_getscheduler(0))"])
    assert int(out) == os.SCHED_OTHER


async def test_verifier_starts_on_a_starter_thread_and_cancel_kills_its_group(tmp_path):
    """run_verifier does its blocking start (previous.json, fork/exec) on a starter thread;
    cancelling it kills the verifier's whole process group and reaps it."""
    pids = tmp_path / "pids"
    script = tmp_path / "verify.sh"
    script.write_text(f"#!/bin/sh\nsleep 60 &\necho $$ $! > {pids}\nwait\n")
    script.chmod(0o755)
    started_on: list[str] = []
    real_start = verifier_mod._start

    def start(*args):
        started_on.append(threading.current_thread().name)
        return real_start(*args)

    verifier_mod._start = start
    try:
        task = asyncio.create_task(verifier_mod.run_verifier(
            script, territory_id="t1", milestone_id="m1", host="127.0.0.1", ssh_port=22, service_port=8080,
            credential_file=tmp_path / "cred", evidence_dir=tmp_path / "ev", previous={}, timeout_s=60))
        for _ in range(200):
            if pids.exists() and pids.read_text().strip():
                break
            await asyncio.sleep(0.02)
        shell, child = (int(p) for p in pids.read_text().split())
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    finally:
        verifier_mod._start = real_start
    assert started_on and started_on[0].startswith("aoe-verifier-start-")
    assert (tmp_path / "ev" / "previous.json").read_text().strip() == "{}"
    for _ in range(100):
        if not _alive(shell) and not _alive(child):
            break
        await asyncio.sleep(0.05)
    assert not _alive(shell) and not _alive(child)


async def test_call_forked_idle_runs_on_the_forks_state_at_idle_priority_and_reports_failures(tmp_path):
    """The child sees the state as it was at the fork (the parent's later change does not reach
    it), runs at SCHED_IDLE, finishes despite a SIGTERM, and the loop keeps ticking while it
    works; a failure comes back as one line, and so does a child killed outright."""
    state = {"round": 1}
    out = tmp_path / "out"
    pids = tmp_path / "pid"

    def work(folder: Path, st: dict) -> None:
        (folder / "pid").write_text(str(os.getpid()))
        time.sleep(0.6)  # the SIGTERM comes meanwhile
        (folder / "out").write_text(f"{st['round']} {os.sched_getscheduler(0)}")

    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.02)
            ticks += 1

    t = asyncio.create_task(ticker())
    call = asyncio.create_task(call_forked_idle(work, tmp_path, state))
    await asyncio.sleep(0)
    state["round"] = 2  # after the fork: the child must not see it
    while not pids.exists() or not pids.read_text():
        await asyncio.sleep(0.01)
    child = int(pids.read_text())
    assert child != os.getpid()
    os.kill(child, signal.SIGTERM)
    await asyncio.wait_for(call, 30)
    t.cancel()
    assert out.read_text() == f"1 {os.SCHED_IDLE}"
    assert ticks >= 10, f"the loop ticked {ticks} times while the child worked 0.6 s"

    def fail(_: object) -> None:
        raise ValueError("standings.md: disk on fire\nsecond line")

    with pytest.raises(ForkedCallError, match=r"^ValueError: standings.md: disk on fire second line$"):
        await call_forked_idle(fail, None)

    def die(_: object) -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    with pytest.raises(ForkedCallError, match="killed by signal 9"):
        await call_forked_idle(die, None)


async def test_call_forked_idle_child_keeps_no_inherited_fd(tmp_path):
    """The forked child closes what it inherited: a pipe another thread made for its own
    subprocess (its EOF must not wait for the idle child) and an flock (it dies with the
    parent, e.g. the season folder's lock of a SIGKILLed runner)."""
    import fcntl

    r, w = os.pipe()
    lock = os.open(tmp_path / "lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(lock, fcntl.LOCK_EX)
    started = tmp_path / "started"

    def work() -> None:
        started.write_text("x")
        time.sleep(3)

    call = asyncio.create_task(call_forked_idle(work))
    try:
        while not started.exists():
            await asyncio.sleep(0.01)
        os.close(w)
        os.close(lock)  # the parent's last copy: the lock is free unless the child kept one
        t0 = time.monotonic()
        assert await asyncio.to_thread(os.read, r, 1) == b""
        assert time.monotonic() - t0 < 1.0, "the pipe's EOF waited for the child"
        other = os.open(tmp_path / "lock", os.O_RDWR)
        try:
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(other)
    finally:
        os.close(r)
        await asyncio.wait_for(call, 30)


async def test_call_forked_idle_cancelled_leaves_no_zombie(tmp_path):
    """Cancelling the wait (the season stopped, the loop shutting down) lets the child finish
    its writing, and it is reaped then: no zombie for the rest of the process's life (``aoe
    run``'s TUI stays up after a stop)."""
    started = tmp_path / "pid"

    def work() -> None:
        started.write_text(str(os.getpid()))
        time.sleep(0.5)
        (tmp_path / "done").write_text("x")

    call = asyncio.create_task(call_forked_idle(work))
    while not started.exists() or not started.read_text():
        await asyncio.sleep(0.01)
    child = int(started.read_text())
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call

    def state() -> str:
        try:
            return open(f"/proc/{child}/stat").read().rsplit(")", 1)[1].split()[0]
        except OSError:
            return "gone"

    end = time.monotonic() + 10
    while state() != "gone":
        assert time.monotonic() < end, f"the cancelled call's child is {state()!r}, not reaped"
        await asyncio.sleep(0.05)
    assert (tmp_path / "done").exists()
