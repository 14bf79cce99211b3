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
import gc
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["ForkedCallError", "Starter", "call_forked_idle", "use_pidfd_child_watcher", "wait_exited"]

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
    if not await _pidfd_exited(proc.pid):
        while proc.poll() is None:
            await asyncio.sleep(POLL_S)
        return proc.returncode
    return proc.wait()  # it has exited: returns at once


async def _pidfd_exited(pid: int) -> bool:
    """Wait on the running loop until child ``pid`` has exited (not reaped); False at once
    where the kernel has no pidfd (the caller polls instead)."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        return False
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    loop.add_reader(fd, lambda: done.done() or done.set_result(None))
    try:
        await done
    finally:
        loop.remove_reader(fd)
        os.close(fd)
    return True


class ForkedCallError(Exception):
    """:func:`call_forked_idle`'s function failed in the child: the message is its one line
    (``Type: message``) or how the child ended."""


#: signals blocked in a :func:`call_forked_idle` child (it finishes its work, then exits)
_FORK_BLOCKED = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2}
#: bytes of a child's error line passed back
_FORK_ERR_MAX = 2000


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def _max_fd() -> int:
    try:
        return max(int(n) for n in os.listdir("/proc/self/fd")) + 1
    except (OSError, ValueError):
        return os.sysconf("SC_OPEN_MAX")


async def call_forked_idle(fn: Callable[..., object], *args: Any) -> None:
    """Run ``fn(*args)`` in a forked child process at idle priority and wait for it to exit
    without blocking the running loop (its pidfd, as :func:`wait_exited`).

    For work that must stay out of the race's way, e.g. rendering the standings after a
    heat: the child runs at ``SCHED_IDLE`` (only when no other task wants a CPU), and, being
    another process, never holds this interpreter's lock (a worker *thread* at idle
    priority would: preempted while holding it, it makes the real-time referee thread wait
    for a task that gets no CPU). The child sees this process's memory as it was at the fork
    (copy-on-write; no snapshot needed), has only the calling thread, runs with the stop
    signals (``SIGINT``, ``SIGTERM``, ``SIGHUP``, ``SIGQUIT``, ``SIGUSR1/2``) blocked so it
    finishes what it writes, and leaves with ``os._exit`` (no ``atexit``, no buffers of the
    parent's flushed twice). The child closes every inherited fd but 0-2 (so ``fn`` must not
    use the parent's files, sockets or event loop; it opens what it writes).

    Raises :class:`ForkedCallError` (the child's ``Type: message`` line, or how it ended)
    and ``OSError`` when no child can be forked. Cancelling the wait leaves the child to
    finish on its own (a daemon thread reaps it)."""
    r, w = os.pipe()
    old = signal.pthread_sigmask(signal.SIG_BLOCK, _FORK_BLOCKED)
    try:
        pid = os.fork()
    except OSError:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
        os.close(r)
        os.close(w)
        raise
    if pid == 0:  # the child: never returns
        code = 0
        try:
            # every fd inherited but stdio and the error pipe: an flock (the season folder's
            # lock must die with a SIGKILLed parent), sockets, and pipes other threads were
            # creating for their subprocesses (an exec-error or output pipe held here would
            # delay their EOF until this idle child ends); no cyclic gc may finalize a file
            # object of a closed fd whose number ``fn`` reuses
            gc.disable()
            with contextlib.suppress(ValueError):  # the loop's signal wakeup socket is closed below
                signal.set_wakeup_fd(-1)
            os.closerange(3, w)
            os.closerange(w + 1, _max_fd())
            with contextlib.suppress(AttributeError, OSError):
                os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
            fn(*args)
        except BaseException as err:  # noqa: BLE001 - reported to the parent, one line
            code = 1
            with contextlib.suppress(BaseException):
                line = f"{type(err).__name__}: {err}".replace("\n", " ")
                os.write(w, line.encode("utf-8", "replace")[:_FORK_ERR_MAX])
        finally:
            os._exit(code)
    signal.pthread_sigmask(signal.SIG_SETMASK, old)
    os.close(w)
    try:
        if await _pidfd_exited(pid):
            status = os.waitpid(pid, 0)[1]
        else:
            while (ended := os.waitpid(pid, os.WNOHANG))[0] == 0:
                await asyncio.sleep(POLL_S)
            status = ended[1]
        err = os.read(r, _FORK_ERR_MAX).decode("utf-8", "replace").strip()
    except asyncio.CancelledError:  # the child finishes on its own: reaped then, not left a zombie
        threading.Thread(target=_reap, args=(pid,), name=f"reap-{pid}", daemon=True).start()
        raise
    finally:
        os.close(r)
    if err:
        raise ForkedCallError(err)
    if status != 0:
        code = os.waitstatus_to_exitcode(status)
        raise ForkedCallError(f"the child ended with status {code}" if code >= 0 else f"the child was killed by signal {-code}")


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
