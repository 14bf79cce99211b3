"""The referee thread's real-time priority (aoe_tui.runtime.realtime, issue 7).

Real threads and processes; the kernel reports the policies (``/proc/.../stat``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from aoe_tui.runtime.realtime import engine_priority
from procfs import this_thread_policy

REPO = Path(__file__).resolve().parent.parent
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="real-time priority needs root (CAP_SYS_NICE)")


@needs_root
def test_realtime_for_the_block_only_and_never_for_what_it_starts():
    assert this_thread_policy() == os.SCHED_OTHER
    with engine_priority("realtime") as note:
        assert note.startswith("referee thread: real-time (SCHED_RR 1")
        assert this_thread_policy() == os.SCHED_RR
        assert os.sched_getparam(0).sched_priority == 1
        # a process it starts (verifier, agent, territory) runs at normal priority
        child = subprocess.run([sys.executable, "-c", "import os; print(os.sched_getscheduler(0))"],
                               capture_output=True, text=True, check=True)
        assert int(child.stdout) == os.SCHED_OTHER
        # so does a thread it starts (asyncio.to_thread workers, child watchers)
        seen: list[int] = []
        t = threading.Thread(target=lambda: seen.append(this_thread_policy()))
        t.start()
        t.join()
        assert seen == [os.SCHED_OTHER]
    assert this_thread_policy() == os.SCHED_OTHER  # restored: the caller is not left real-time
    assert os.sched_getparam(0).sched_priority == 0


@needs_root
def test_restored_when_the_block_raises():
    with pytest.raises(RuntimeError), engine_priority("realtime"):
        assert this_thread_policy() == os.SCHED_RR
        raise RuntimeError("engine failed")
    assert this_thread_policy() == os.SCHED_OTHER


def test_normal_leaves_the_thread_alone():
    before = this_thread_policy()
    with engine_priority("normal") as note:
        assert note == "referee thread: normal priority"
        assert this_thread_policy() == before


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="realtime, normal"), engine_priority("turbo"):
        pass


@needs_root
def test_without_the_privilege_it_says_so_and_runs_on():
    """Root without CAP_SYS_NICE and with RLIMIT_RTPRIO 0 (like an unprivileged user or a
    locked-down container): no error, the thread stays normal, and the note says why."""
    code = ("import os\n"
            "from aoe_tui.runtime.realtime import engine_priority\n"
            "with engine_priority('realtime') as note:\n"
            "    print(note)\n"
            "    print(os.sched_getscheduler(0))\n")
    res = subprocess.run(["setpriv", "--inh-caps=-sys_nice", "--bounding-set=-sys_nice",
                          "prlimit", "--rtprio=0", sys.executable, "-c", code],
                         capture_output=True, text=True, cwd=REPO, timeout=60)
    assert res.returncode == 0, res.stderr
    note, policy = res.stdout.splitlines()
    assert note == "referee thread: normal priority (real-time not permitted: Operation not permitted)"
    assert int(policy) == os.SCHED_OTHER
