"""The referee's thread outranks the race it judges (issue 7: tick lateness).

The engine thread (the one whose asyncio loop runs every territory's referee tick)
shares the machine with everything the race starts at normal priority: territories'
init systems and agents, verifier scripts, image tools. When that work queues on a
CPU, a woken referee waits its turn behind it, and a tick starts late.

Twenty SSH spectators make this worse even at ``SCHED_IDLE`` on a CPU of their own
(:mod:`aoe_tui.serve.placement`): the kernel places waking tasks by CPU utilisation,
which counts idle-priority work too, so the race's processes crowd onto the other
CPU, and the referee with them. Measured with ``perf`` and
``benchmarks/ssh_spectators.py`` (2 CPUs, demo season): the woken referee waited
16 ms on a run queue of container and verifier processes while the spectators' CPU
ran only idle-priority work. With the engine thread real-time (season folder on
tmpfs), tick lateness p99 with 20 spectators fell from 15–32 ms to 9–12 ms (7 ms
without); what remained was the loop waiting for new children and threads to be
scheduled, which :mod:`aoe_tui.runtime.procs` removes. Both together, on ext4 and
three runs each: p99 3 ms without spectators and 3 ms with 20 (before: 14 and 34 ms).

:func:`engine_priority` therefore runs the calling thread as ``SCHED_RR`` priority 1
(the lowest real-time priority) with ``SCHED_RESET_ON_FORK``: every process and
thread it starts (verifiers, agents, territories, worker threads) begins at normal
priority, so only the referee loop itself is real-time. Its CPU use is small (about
1 % of a CPU for a demo season) and the kernel's real-time throttling
(``kernel.sched_rt_runtime_us``, 95 % by default) bounds it even if it were not.
Without the privilege (not root, no ``CAP_SYS_NICE``, ``RLIMIT_RTPRIO`` 0, or a
container that forbids it) the thread stays as it is, and the description says so.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

__all__ = ["ENGINE_PRIORITIES", "engine_priority"]

#: ``realtime`` = SCHED_RR 1 for the engine thread when permitted; ``normal`` = unchanged
ENGINE_PRIORITIES = ("realtime", "normal")
#: the real-time priority used (1 = lowest: any real-time service of the host outranks it)
RT_PRIORITY = 1


@contextlib.contextmanager
def engine_priority(mode: str = "realtime") -> Iterator[str]:
    """Run the calling thread at the engine priority ``mode`` while the block runs.

    ``mode`` is one of :data:`ENGINE_PRIORITIES`. Yields a one-line description of the
    outcome, e.g. ``"referee thread: real-time (SCHED_RR 1)"`` or ``"referee thread:
    normal priority (real-time not permitted: Operation not permitted)"``. On exit
    the thread's previous policy and priority are restored (so a test process or a
    long-lived caller is not left real-time). Never raises for a missing privilege;
    raises ``ValueError`` for an unknown ``mode``.
    """
    if mode not in ENGINE_PRIORITIES:
        raise ValueError(f"engine priority must be one of {', '.join(ENGINE_PRIORITIES)}, not {mode!r}")
    if mode == "normal" or not hasattr(os, "SCHED_RR"):
        yield "referee thread: normal priority"
        return
    try:
        before = os.sched_getscheduler(0)
        before_param = os.sched_getparam(0)
        os.sched_setscheduler(0, os.SCHED_RR | os.SCHED_RESET_ON_FORK, os.sched_param(RT_PRIORITY))
    except OSError as err:
        yield f"referee thread: normal priority (real-time not permitted: {err.strerror or err})"
        return
    try:
        yield f"referee thread: real-time (SCHED_RR {RT_PRIORITY}; what it starts runs at normal priority)"
    finally:
        with contextlib.suppress(OSError):
            os.sched_setscheduler(0, before, before_param)
