"""Run a season engine on its own thread and event loop, beside the TUI.

``aoe run`` (TUI mode) and ``aoe demo`` start a :class:`SeasonHost`: the
:class:`~aoe_tui.season.runner.SeasonRunner` runs in a daemon-less background thread
with a private asyncio loop, so the referee's tick timing never waits for rendering
(the UI loop only *pulls* records from a :class:`~aoe_tui.tui.live.LiveFeed`).

Quitting the UI does not touch the engine. The command then either

* **stops** it (:meth:`SeasonHost.stop`: the run task is cancelled; every running
  heat aborts and tears its territories down; the season folder stays resumable with
  the same command), or
* **detaches** (chosen, or the terminal closed): the same thread keeps running;
  :meth:`SeasonHost.set_sink` switches the progress lines from the UI to stdout, which the
  command has pointed at the season folder's ``aoe-run.log`` (headless lines, as
  ``--headless`` prints them), and the process exits when the season finishes. SIGINT /
  SIGTERM then stop it as above (``aoe_tui.commands.season.finish_tui_run``).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from aoe_tui.domain.display import printable
from aoe_tui.runtime.realtime import engine_priority

__all__ = ["SeasonHost"]


class SeasonHost:
    """Owns the engine thread.

    Args:
        make_runner: ``make_runner(say) -> SeasonRunner`` (called on the engine thread's
            side before the loop starts; ``say`` is :meth:`say`).
        priority: the engine thread's priority while it runs the season
            (:func:`aoe_tui.runtime.realtime.engine_priority`; the outcome is one line).

    Attributes: ``lines`` (recent progress lines, newest last), ``state`` (final
    ``SeasonState`` once done), ``error`` (the exception that ended the run, if any),
    ``cancelled`` (True after a stop).
    """

    def __init__(self, make_runner: Callable[[Callable[[str], None]], Any], *, priority: str = "realtime") -> None:
        self.lines: deque[str] = deque(maxlen=500)
        self._sink: Callable[[str], None] | None = None
        self._lock = threading.Lock()
        self.runner = make_runner(self.say)
        self.state: Any = None
        self.error: BaseException | None = None
        self.cancelled = False
        self._stopping = False
        #: guards ``_stopping``/``_task`` between :meth:`stop` (main thread, maybe a signal
        #: handler: re-entrant) and the engine thread creating the run task
        self._stop_lock = threading.RLock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task | None = None
        self._started = threading.Event()
        self._priority = priority
        self._thread = threading.Thread(target=self._main, name="aoe-season-engine")

    # ------------------------------------------------------------------ output

    def say(self, msg: str) -> None:
        """Record one progress line (and print it through the sink once detached)."""
        line = printable(f"{time.strftime('%H:%M:%S')} {msg}")
        with self._lock:
            self.lines.append(line)
            sink = self._sink
        if sink is not None:
            try:
                sink(line)
            except Exception:
                pass

    def set_sink(self, sink: Callable[[str], None] | None) -> None:
        """Send every later line to ``sink`` (e.g. ``print``); None = only keep them."""
        with self._lock:
            self._sink = sink

    # ------------------------------------------------------------------ engine

    def _main(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        # stray task errors (e.g. an unretrieved SSH probe) become one progress line, not a traceback
        loop.set_exception_handler(lambda _loop, ctx: self.say(
            f"engine: {ctx.get('message', 'error')}: {ctx.get('exception')!r}"[:300]))
        try:
            with self._stop_lock:
                self._task = loop.create_task(self.runner.run())
                stop_now = self._stopping
            if stop_now:  # stopped before the run task existed (a signal in the first milliseconds)
                self._task.cancel()
            self._started.set()
            try:
                with engine_priority(self._priority) as note:
                    self.say(note)
                    self.state = loop.run_until_complete(self._task)
            except asyncio.CancelledError:
                self.cancelled = True
            except BaseException as err:  # reported by the command as one line
                self.error = err
        finally:
            self._started.set()
            try:
                self._end_stray_tasks(loop)
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                loop.close()

    @staticmethod
    def _end_stray_tasks(loop: asyncio.AbstractEventLoop, timeout_s: float = 30.0) -> None:
        """Cancel the tasks still pending once the season run has ended (what a stop left
        behind, e.g. a territory's boot wait under a cancelled provisioning) and let their
        cleanup run on the open loop, at most ``timeout_s`` seconds, as ``asyncio.run``
        does. Closing the loop under them would leave each to be finalized by the garbage
        collector, whose cleanup meets a closed loop: an "Exception ignored ... Event loop
        is closed" traceback on the operator's terminal after Ctrl+C."""
        pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
        if not pending:
            return
        for t in pending:
            t.cancel()
        with contextlib.suppress(BaseException):
            loop.run_until_complete(asyncio.wait(pending, timeout=timeout_s))
        for t in pending:  # retrieve results so none is logged as "never retrieved"
            if t.done() and not t.cancelled():
                t.exception()

    def start(self) -> None:
        """Start the engine thread (returns at once)."""
        self._thread.start()
        self._started.wait(10)

    @property
    def done(self) -> bool:
        """The run ended (finished, stopped or failed)."""
        return self._started.is_set() and not self._thread.is_alive()

    def stop(self, reason: str = "quit") -> None:
        """Cancel the season run (thread-safe, idempotent: only the first call cancels, so
        a second signal cannot cut the teardown short); running heats tear down and the
        runner records ``season_stopped`` with ``reason`` (a signal name or ``quit``).
        A stop before the engine thread has created its run task (before or just after
        :meth:`start`) is kept: the task is cancelled as soon as it exists, so the engine
        never runs on unattended."""
        with self._stop_lock:
            if self._stopping:
                return
            loop, task = self._loop, self._task
            if task is not None and task.done():
                return
            self._stopping = True
            if getattr(self.runner, "stop_reason", None) is None:
                with contextlib.suppress(AttributeError):
                    self.runner.stop_reason = reason
        if loop is not None and task is not None:
            try:
                loop.call_soon_threadsafe(task.cancel)
            except RuntimeError:  # loop already closed
                pass

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the engine thread; returns True when it has ended. Short waits in a
        loop keep the main thread responsive to signals."""
        end = None if timeout is None else time.monotonic() + timeout
        while self._thread.is_alive():
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                return False
            self._thread.join(0.2 if left is None else min(0.2, left))
        return True
