"""Starting and awaiting processes without stalling the referee's event loop (issue 7).

Recorded with ``perf`` (kernel stacks of the referee thread's context switches)
during a demo season with 20 SSH spectators (2 CPUs, ext4 mounted with ``discard``;
times include the tracer's overhead), the loop thread was blocked, not busy, when
ticks ran late:

* ``vfork`` — ``subprocess`` waits until the new child has run up to its ``exec``;
  on a CPU crowded with the race's own processes that took 6 ms typically and up
  to 90 ms;
* thread starts — Python 3.11's asyncio starts one waiter thread per child
  (``ThreadedChildWatcher``) and waits until it runs: up to 57 ms;
* ``rename`` over the previous ``previous.json`` — ext4 frees the old file's
  blocks with a synchronous discard: up to 36 ms.

So the blocking part of starting a verifier runs on :class:`Starter` threads
(started once, before the first tick), a child's exit is awaited through a pidfd
(:func:`wait_exited`; no thread), and :func:`use_pidfd_child_watcher` makes
asyncio's own subprocesses (agents, territories) on Python 3.11 do the same
(3.12 and later already do).

A starter thread runs at the scheduling policy of the thread that created it:
with a real-time referee (:mod:`aoe_tui.runtime.realtime`) it is real-time too,
so it never holds the interpreter lock while preempted by the race's processes;
what it starts begins at normal priority (``SCHED_RESET_ON_FORK``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["Starter", "use_pidfd_child_watcher", "wait_exited"]

log = logging.getLogger(__name__)
T = TypeVar("T")
#: poll interval (s) when the kernel has no pidfd (Linux < 5.3)
POLL_S = 0.05


class Starter:
    """``threads`` pre-started daemon threads that run blocking calls for a loop.

    ``await starter.run(fn, *args)`` runs ``fn(*args)`` on one of the threads and
    returns its result (or raises its exception) on the awaiting loop. Submitting
    never starts a thread. If the awaiting task is cancelled, ``fn`` still runs to
    its end and its result goes to ``abandon(result)`` (e.g. to kill a process it
    started), called on the starter thread. :meth:`submit` queues a call whose
    result nobody awaits (e.g. reaping a killed child). The threads run at the
    scheduling policy of the thread that creates the starter.
    """

    def __init__(self, threads: int = 4, name: str = "aoe-starter") -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        try:
            self._policy = (os.sched_getscheduler(0), os.sched_getparam(0))
        except (AttributeError, OSError):  # pragma: no cover - non-Linux
            self._policy = None
        for i in range(threads):
            threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True).start()

    def _work(self) -> None:
        if self._policy is not None:
            with contextlib.suppress(OSError):
                os.sched_setscheduler(0, *self._policy)
        while True:
            loop, fut, fn, args, abandon = self._jobs.get()
            try:
                result, error = fn(*args), None
            except BaseException as err:  # handed to the awaiting task
                result, error = None, err
            if loop is None:
                continue
            try:
                loop.call_soon_threadsafe(self._settle, fut, result, error, abandon)
            except RuntimeError:  # the loop is closed: nobody will take the result
                if error is None and abandon is not None:
                    abandon(result)

    async def run(self, fn: Callable[..., T], *args: Any, abandon: Callable[[T], None] | None = None) -> T:
        """Run ``fn(*args)`` on a starter thread; see the class docstring."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._jobs.put((loop, fut, fn, args, abandon))
        return await fut

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on a starter thread; its result and errors are dropped."""
        self._jobs.put((None, None, fn, args, None))

    def _settle(self, fut: asyncio.Future, result: Any, error: BaseException | None, abandon) -> None:
        if fut.cancelled():
            if error is None and abandon is not None:
                self.submit(abandon, result)
            return
        if error is not None:
            fut.set_exception(error)
        else:
            fut.set_result(result)


async def wait_exited(proc: subprocess.Popen) -> int:
    """Wait until ``proc`` exits, then reap it; returns its return code (negative = signal).

    Uses a pidfd watched by the running loop (no thread, no ``SIGCHLD`` handler);
    falls back to polling every :data:`POLL_S` seconds where ``pidfd_open`` is
    missing. Cancelling the wait leaves the process running (the caller kills it).
    """
    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        while proc.poll() is None:
            await asyncio.sleep(POLL_S)
        return proc.returncode
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    loop.add_reader(fd, lambda: done.done() or done.set_result(None))
    try:
        await done
    finally:
        loop.remove_reader(fd)
        os.close(fd)
    return proc.wait()  # it has exited: returns at once


def _loop_pidfd_child_watcher():
    """Python 3.12's child watcher, for 3.11: a pidfd on the loop that started the child
    (3.11's ``PidfdChildWatcher`` is bound to one loop; the season engine and the TUI
    each have their own). Defined on demand: ``AbstractChildWatcher`` is deprecated in
    3.12 and gone in 3.14."""

    class LoopPidfdChildWatcher(asyncio.AbstractChildWatcher):
        def is_active(self) -> bool:
            return True

        def close(self) -> None:
            pass

        def attach_loop(self, loop) -> None:
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc) -> None:
            pass

        def add_child_handler(self, pid, callback, *args) -> None:
            loop = asyncio.get_running_loop()
            fd = os.pidfd_open(pid)
            loop._add_reader(fd, self._do_wait, pid, fd, callback, args)

        def _do_wait(self, pid, fd, callback, args) -> None:
            asyncio.get_running_loop()._remove_reader(fd)
            try:
                _, status = os.waitpid(pid, 0)
            except ChildProcessError:  # reaped elsewhere
                code = 255
                log.warning("child process %d exit status already read: reporting 255", pid)
            else:
                code = os.waitstatus_to_exitcode(status)
            os.close(fd)
            callback(pid, code, *args)

        def remove_child_handler(self, pid) -> bool:
            return True

    return LoopPidfdChildWatcher()


def use_pidfd_child_watcher() -> bool:
    """On Python 3.11 with pidfd support, make asyncio await its subprocesses through a
    pidfd on the starting loop instead of one new thread per child (which the starting
    loop waits for). Idempotent; process-wide. Returns True when the watcher is (now)
    pidfd-based, False where it cannot be (no ``pidfd_open``) or need not be (3.12+,
    which does this already)."""
    if sys.version_info >= (3, 12):
        return False
    try:
        os.close(os.pidfd_open(os.getpid()))
    except (AttributeError, OSError):
        return False
    global _installed
    with _install_lock:
        if _installed is None or asyncio.get_child_watcher() is not _installed:
            _installed = _loop_pidfd_child_watcher()
            asyncio.set_child_watcher(_installed)
    return True


_installed = None
_install_lock = threading.Lock()
