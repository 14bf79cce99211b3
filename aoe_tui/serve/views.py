"""Shared spectator views: one spectator process per view, shown by every session on it.

Twenty spectators of one season, each with its own TUI process, each tail, reduce and
redraw the same events: on the one spectator CPU an event reached the last screen 0.7–1.2 s
after it was written (issue 16). Yet spectators who have pressed the same keys on a terminal
of the same type and size are looking at the same screen. So the server keeps one
:class:`SharedView` per **view key** = ``(terminal, columns, rows, the input bytes the view's
process has been given)``, the terminal being ``TERM`` and the colour variables its client
sent (:func:`~aoe_tui.serve.session.terminal_key`: a view draws in its terminal's colour depth); a new session joins the view of its terminal with no input yet,
or starts it. The view's process draws once and its output is copied to every member (each
member's own back-pressure: a slow client misses output and is repainted once it catches up;
nobody waits for it).

A session's own keys never reach another session's screen:

* a session **alone** on its view types into the view's process directly (the view's key
  grows with the input; if a view with that key already runs, the session moves there and
  its old process ends);
* a session **sharing** its view that presses a key, or resizes its terminal, moves to the
  view keyed by its new terminal size and input — joining it when it runs, else starting it:
  a process forked from the warm zygote (:mod:`aoe_tui.serve.zygote`) that is given the
  whole input history once its first screen is drawn;
* input that changes nothing a spectator sees — terminal replies (device attributes, cursor
  position and mode reports) and pointer motion — is dropped while a view is shared, so a
  terminal's own chatter does not split it;
* a view whose input grew past :data:`PRIVATE_AFTER` bytes is private: nobody joins it.

A new view takes the **spare** when there is one for its terminal type: a view process kept
on screen with nobody watching (resized to the newcomer's terminal), so its first screen does
not wait for the app to build; a new spare is started behind it. The spare follows the most
recent newcomer's terminal: the first is for ``xterm-256color``, 80×24; each new spare is
for the type and size of the session that last arrived, and a newcomer of another type
(``screen``, ``tmux-256color``…) has the spare it could not take replaced by one for its type
once its own view has drawn its first screen (never more than one spare: the old one is ended
as the new one starts). So a room
of ``screen`` spectators gets the spare from its second arrival on. Once drawn (and
:data:`SPARE_PAUSE_AFTER_S` later) the spare is **stopped** (``SIGSTOP``): otherwise it tails,
reduces and draws every event for nobody, on the spectators' CPU at the very moment the views
people watch draw it (issue 16: a season event comes when the race boots or tears down
territories). Taking it continues it (``SIGCONT``; the app's driver ignores a SIGCONT it did
not stop itself for, :mod:`aoe_tui.tui.driver`): its tailer reads what was appended meanwhile
in one poll, and the resize or repaint the newcomer needs draws it all once. Only the default
spectator command (``aoe watch``) is paused; a stopped spare still ends with its PTY's hang-up
(the kernel sends the session leader SIGHUP and SIGCONT), and the pool continues it before
it ends it.

Joining a view that is already on screen: the new member first gets the terminal modes the
view's process has set (alternate screen, mouse and paste modes, cursor), then the process
is asked to repaint its whole screen (``SIGUSR1``, see :mod:`aoe_tui.tui.app`); input from
the member counts only after that repaint reached it. The TUI remains a pure view of the
season's reduced state; every session's input still goes through the process's
``GuardedDriver``.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import re
import signal
import time
from typing import TYPE_CHECKING, Any, Protocol

from aoe_tui.serve.session import OutputFilter, PtyChild, is_passive_input, terminal_env

if TYPE_CHECKING:  # pragma: no cover
    from aoe_tui.serve.zygote import Zygote

__all__ = ["PRIVATE_AFTER", "SharedView", "ViewHost", "ViewPool", "is_passive_input"]

log = logging.getLogger("aoe_tui.serve")

#: input bytes after which a view is private (nobody else joins it)
PRIVATE_AFTER = 256
#: seconds after its first screen before a new view's process gets its input history
REPLAY_AFTER_S = 0.15
#: output bytes after the full-screen switch that make a first screen (or PAINTED_AFTER_S seconds)
PAINTED_BYTES = 512
PAINTED_AFTER_S = 0.5
#: seconds after its first screen before the spare view's process is stopped (SIGSTOP)
SPARE_PAUSE_AFTER_S = 1.0
#: seconds the spare waits at most for newcomers' views to draw their first screen
SPARE_DEFER_MAX_S = 3.0
#: the first spare view's terminal; later spares follow the newest arrival's (ViewPool.spare_shape)
SPARE_TERM = "xterm-256color"
SPARE_SIZE = (80, 24)
#: DEC private modes a joining member must have set to show the view as its process set up
#: its terminal (never 2026, synchronized output, which would freeze a terminal mid-frame)
_MODES = {1, 7, 12, 25, 1000, 1002, 1003, 1005, 1006, 1015, 1049, 2004}
_MODE_SEQ = re.compile(rb"\x1b\[\?([\d;]+)([hl])")
class SharedView:
    """One spectator process (a :class:`~aoe_tui.serve.session.PtyChild`) and the sessions
    that show it. ``key``: its view key (None once private); ``members``: sessions in join
    order; ``history``: the input its process was given."""

    def __init__(self, pool: ViewPool, key: tuple, child: PtyChild, replay: bytes = b"") -> None:
        self.pool = pool
        self.key: tuple | None = key
        self.child = child
        self.members: list[Any] = []
        self.filter = OutputFilter()
        self.history = key[3]
        self.modes: dict[int, bytes] = {}
        self.started = asyncio.Event()
        self.ended = False
        self.failed: str | None = None
        self.painted = False
        #: ``time.monotonic()`` (s) when its process was started and when its first screen
        #: was drawn (None until then)
        self.started_at: float | None = None
        self.painted_at: float | None = None
        self._replay = replay
        #: False while the input history has yet to be given to a new process
        self.accepting = not replay
        self._after_ready = 0
        self._reading = False
        self._repaint_handle: asyncio.TimerHandle | None = None
        self._mode_carry = b""
        #: the process is stopped (SIGSTOP: the spare, with nobody watching)
        self.paused = False

    # ------------------------------------------------------------ process output
    def start_reading(self) -> None:
        if not self._reading and self.child.master >= 0 and not self.ended:
            asyncio.get_running_loop().add_reader(self.child.master, self._on_output)
            self._reading = True

    def stop_reading(self) -> None:
        if self._reading and self.child.master >= 0:
            asyncio.get_running_loop().remove_reader(self.child.master)
        self._reading = False

    def _on_output(self) -> None:
        try:
            data = os.read(self.child.master, 65536)
        except BlockingIOError:
            return
        except OSError as err:  # EIO: every slave fd closed (the child exited)
            if err.errno != errno.EIO:
                log.warning("pty read failed pid=%s: %s", self.child.pid, err)
            data = b""
        if not data:
            self._end()
            return
        was_ready = self.filter.ready
        out = self.filter.feed(data)
        self._track_modes(data)
        if self.filter.ready:
            if not was_ready:  # a small terminal's first screen may be under PAINTED_BYTES
                asyncio.get_running_loop().call_later(PAINTED_AFTER_S, self._mark_painted)
            self._after_ready += len(data)
            if self._after_ready >= PAINTED_BYTES:
                self._mark_painted()
        if not out:
            return
        for member in list(self.members):
            member.view_output(out, self)

    def _track_modes(self, data: bytes) -> None:
        probe = self._mode_carry + data
        for m in _MODE_SEQ.finditer(probe):
            for part in m.group(1).split(b";"):
                if part.isdigit() and int(part) in _MODES:
                    self.modes[int(part)] = m.group(2)
        self._mode_carry = probe[-24:]

    def mode_bytes(self) -> bytes:
        """The terminal modes the process has set, as sequences for a joining member."""
        return b"".join(b"\x1b[?%d%s" % (n, hl) for n, hl in sorted(self.modes.items()))

    def _mark_painted(self) -> None:
        if not self.painted and not self.ended:
            self.painted = True
            self.painted_at = time.monotonic()
            self._on_painted()

    def pause(self) -> None:
        """Stop the process (``SIGSTOP``) while nobody watches it: the spare only (module
        docstring). A no-op for a view with members, or one that ended."""
        proc = self.child.proc
        if self.paused or self.members or self.ended or proc is None or proc.returncode is not None:
            return
        try:
            os.kill(proc.pid, signal.SIGSTOP)
        except ProcessLookupError:
            return
        self.paused = True

    def resume(self) -> None:
        """Continue a paused process (``SIGCONT``); a no-op otherwise."""
        if not self.paused:
            return
        self.paused = False
        proc = self.child.proc
        if proc is not None and proc.returncode is None:
            try:
                os.kill(proc.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass

    def _on_painted(self) -> None:
        self.pool._painted(self)
        if self._replay:
            data, self._replay = self._replay, b""
            asyncio.get_running_loop().call_later(REPLAY_AFTER_S, self._give, data)
        if any(not m.synced for m in self.members[1:]):
            self.request_repaint()

    def _give(self, data: bytes) -> None:
        if not self.ended:
            self.child.write(data)
        self.accepting = True

    def request_repaint(self) -> None:
        """Ask the process to repaint its whole screen (once for a burst of requests); members
        waiting for it count as synced after the next output."""
        if self.ended or not self.painted or self._repaint_handle is not None:
            return

        def send() -> None:
            self._repaint_handle = None
            if self.ended or self.child.proc is None or self.child.proc.returncode is not None:
                return
            try:
                os.kill(self.child.proc.pid, signal.SIGUSR1)
            except ProcessLookupError:
                pass
            loop = asyncio.get_running_loop()
            for m in self.members:
                if not m.synced:
                    loop.call_later(0.3, m.mark_synced, self)

        self._repaint_handle = asyncio.get_running_loop().call_later(0.03, send)

    def _end(self) -> None:
        self.stop_reading()
        if self.ended:
            return
        self.ended = True
        self.pool._forget(self)
        for member in list(self.members):
            member.view_ended(self)

    # ------------------------------------------------------------ input
    def give_input(self, data: bytes) -> int:
        """Write a lone member's input to the process; its key grows by what was written."""
        n = self.child.write(data)
        if n:
            self.history += data[:n]
            self.pool._rekey(self)
        return n

    @property
    def shared(self) -> bool:
        """Whether others may join (not private) and more than one member shows it."""
        return len(self.members) > 1


class ViewHost(Protocol):
    """What the view pool uses of the server that owns it. ``SpectatorServer`` is one; this
    module never imports the server (imports run one way: server → views → session)."""

    config: Any

    @property
    def pauses_spare(self) -> bool: ...

    def spectator_argv(self) -> list[str]: ...

    def child_env(self) -> dict[str, str]: ...

    async def warm_zygote(self) -> Zygote | None: ...


class ViewPool:
    """The server's views by key (see the module docstring). Not thread-safe: the server's
    event loop only."""

    def __init__(self, server: ViewHost) -> None:
        self.server = server
        self.views: dict[tuple, SharedView] = {}
        self.all: list[SharedView] = []
        #: a view process started ahead, on screen with nobody watching, for the next new view
        self.spare: SharedView | None = None
        self._spare_task: asyncio.Task | None = None
        #: ``(TERM, columns, rows)`` the next spare is started for: the most recent newcomer's
        self.spare_shape: tuple[str, int, int] = (SPARE_TERM, *SPARE_SIZE)
        #: spares being ended (replaced by one for another terminal type)
        self._retiring: set[asyncio.Task] = set()
        #: the newest newcomer's view, not drawn yet: the spare follows the newcomer once it is
        self._follow_view: SharedView | None = None
        #: views being started for sessions (:meth:`join`), and whether the spare waits for
        #: them (:meth:`keep_spare`)
        self._starting = 0
        self._spare_deferred: asyncio.TimerHandle | None = None
        self.closed = False

    def pids(self) -> list[int]:
        """Pids of the running view processes (not the spare's: nobody watches it yet)."""
        return [v.child.pid for v in self.all if v.child.pid and not v.ended and v is not self.spare]

    def _newcomers_drawing(self) -> bool:
        """A view is being started for a session, or one with members has yet to draw its
        first screen."""
        return self._starting > 0 or any(v.members and not v.painted and not v.ended for v in self.all)

    def _spare_after_newcomers(self, force: bool = False) -> None:
        """Start the spare that waited (:meth:`keep_spare`) once no newcomer's view is
        drawing its first screen (``force``: waited :data:`SPARE_DEFER_MAX_S`)."""
        if self._spare_deferred is None or (not force and self._newcomers_drawing()):
            return
        self._spare_deferred.cancel()
        self._spare_deferred = None
        self.keep_spare(wait=False)

    def keep_spare(self, wait: bool = True) -> None:
        """Start a spare view in the background unless one runs (or is being started).
        While a session's view is being started or has yet to draw its first screen (``wait``),
        the spare waits for it, :data:`SPARE_DEFER_MAX_S` at most: both on the one spectator
        CPU at once, the newcomer waited for the spare's first screen too (issue 30: a
        spectator arriving while the zygote warmed up)."""
        if self.closed or (self.spare is not None and not self.spare.ended) or self._spare_task is not None:
            return
        if wait and self._newcomers_drawing():
            if self._spare_deferred is None:
                self._spare_deferred = asyncio.get_running_loop().call_later(
                    SPARE_DEFER_MAX_S, self._spare_after_newcomers, True)
            return

        async def make() -> None:
            renew = False
            try:
                view = await self._start((*self.spare_shape, b""), b"", register=False)
                if self.closed:
                    await self.leave(None, view)
                elif view.key is not None and view.key[0] != self.spare_shape[0]:
                    # a newcomer of another terminal type arrived while it started: replace it
                    await self.leave(None, view)
                    renew = True
                else:
                    self.spare = view
                    if view.painted:
                        self._painted(view)
            except OSError as err:
                log.warning("cannot start a spare spectator view: %s", err)
            finally:
                self._spare_task = None
            if renew:
                self.keep_spare()

        self._spare_task = asyncio.get_running_loop().create_task(make())

    def _follow_newcomer(self) -> None:
        """A newcomer joined and its view is on screen (``spare_shape`` is its terminal): a
        spare for another terminal type is ended and one for this type started (one spare at
        a time). A spare being started is checked when it is ready (``keep_spare``)."""
        spare = self.spare
        if self.closed or spare is None or spare.ended or spare.key is None or spare.key[0] == self.spare_shape[0]:
            return
        self.spare = None
        log.info("spare view pid=%s (term=%s) replaced for term=%s", spare.child.pid, spare.key[0],
                 self.spare_shape[0])
        task = asyncio.get_running_loop().create_task(self.leave(None, spare))
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)
        self.keep_spare()

    def _painted(self, view: SharedView) -> None:
        """``view`` drew its first screen: the spare is paused :data:`SPARE_PAUSE_AFTER_S`
        later if it still is the spare then (default spectator command only); if it is the
        newest newcomer's view, the spare follows that newcomer's terminal now."""
        if view is self._follow_view:
            self._follow_view = None
            self._follow_newcomer()
        self._spare_after_newcomers()
        if view is not self.spare or not self.server.pauses_spare:
            return

        def pause() -> None:
            if view is self.spare and not self.closed:
                view.pause()

        asyncio.get_running_loop().call_later(SPARE_PAUSE_AFTER_S, pause)

    def _take_spare(self, key: tuple) -> SharedView | None:
        """The spare, given ``key`` (resized to its size), when it can show it; then another
        spare is started."""
        spare = self.spare
        if spare is None or spare.ended or spare.key is None or key[0] != spare.key[0] or key[3]:
            return None
        self.spare = None
        spare.resume()
        size = (spare.key[1], spare.key[2])
        spare.key = key
        self.views[key] = spare
        if (key[1], key[2]) != size:
            spare.child.resize(key[1], key[2])  # SIGWINCH: the app lays out and redraws it all
        self.keep_spare()
        return spare

    async def join(self, session: Any, cols: int, rows: int, history: bytes = b"", *,
                   newcomer: bool = False) -> SharedView:
        """Put ``session`` on the view keyed ``(session.terminal, cols, rows, history)``, starting
        it if needed (raises ``OSError`` when its process cannot be started). ``newcomer``: a
        session arriving (not one moving between views): the spares follow its terminal
        (:attr:`spare_shape`, :meth:`_follow_newcomer`)."""
        key = (session.terminal, cols, rows, history)
        if newcomer:
            self.spare_shape = (session.terminal, cols, rows)
        view = self.views.get(key)
        starting = False
        if view is None or view.ended:
            view = self._take_spare(key)
            if view is None:
                self._starting += 1
                starting = True
                try:
                    view = await self._start(key, history)
                except BaseException:
                    self._starting -= 1
                    self._spare_after_newcomers()
                    raise
        else:
            await view.started.wait()
            if view.failed:
                raise OSError(view.failed)
        if newcomer:
            if view.painted:
                self._follow_newcomer()
            else:  # once its view drew its first screen: a new spare would compete with it for the CPU
                self._follow_view = view
        self._add(view, session)
        if starting:
            self._starting -= 1
            self._spare_after_newcomers()
        return view

    def _add(self, view: SharedView, session: Any) -> None:
        first = not view.members and not view.painted
        view.members.append(session)
        session.attach(view, synced=first)
        if not first:
            session.view_output(b"\x1b[H\x1b[2J" + view.mode_bytes(), view)
            view.request_repaint()

    async def _start(self, key: tuple, replay: bytes, register: bool = True) -> SharedView:
        terminal, cols, rows, _ = key
        term, color_env = terminal_env(terminal)
        srv = self.server
        child = PtyChild(list(srv.spectator_argv()), cols=cols, rows=rows, term=term,
                         env={**srv.child_env(), **color_env},
                         placement=srv.config.placement, zygote=await srv.warm_zygote())
        view = SharedView(self, key, child, replay)
        existing = self.views.get(key) if register else None
        if existing is not None and not existing.ended:  # another session started it meanwhile
            await existing.started.wait()
            if existing.failed:
                raise OSError(existing.failed)
            return existing
        if register:
            self.views[key] = view
        self.all.append(view)
        try:
            await child.start()
        except OSError as err:
            view.failed = err.strerror or str(err)
            view.ended = True
            self._forget(view)
            view.started.set()
            raise
        view.started_at = time.monotonic()
        view.started.set()
        view.start_reading()
        log.info("view start pid=%s (%s) term=%s size=%dx%d input=%dB views=%d", child.pid, child.started_by, terminal,
                 cols, rows, len(replay), len(self.all))
        return view

    def _forget(self, view: SharedView) -> None:
        if view.key is not None and self.views.get(view.key) is view:
            del self.views[view.key]
        if view in self.all:
            self.all.remove(view)
        if view is self._follow_view:  # ended before its first screen
            self._follow_view = None
            if not self.closed:
                self._follow_newcomer()
        if not self.closed:
            self._spare_after_newcomers()

    def _rekey(self, view: SharedView, cols: int | None = None, rows: int | None = None) -> None:
        """A lone member typed or resized: ``view``'s key follows (a view past
        :data:`PRIVATE_AFTER` input bytes becomes private)."""
        if view.key is None:
            return
        if self.views.get(view.key) is view:
            del self.views[view.key]
        if len(view.history) > PRIVATE_AFTER:
            view.key = None  # private from now on
            return
        view.key = (view.key[0], cols or view.key[1], rows or view.key[2], view.history)
        other = self.views.get(view.key)
        if other is None or other.ended:
            self.views[view.key] = view

    async def leave(self, session: Any, view: SharedView) -> None:
        """Take ``session`` off ``view`` (None: nobody); the last member's leaving ends the process."""
        if session in view.members:
            view.members.remove(session)
        if not view.members:
            self._forget(view)
            view.stop_reading()
            view.resume()  # a stopped process acts on SIGHUP and SIGTERM only once continued
            view.ended = True
            await view.child.terminate()

    async def move(self, session: Any, view: SharedView, cols: int, rows: int, history: bytes) -> SharedView:
        """Move ``session`` from ``view`` to the view of ``(cols, rows, history)``."""
        new = await self.join(session, cols, rows, history)
        if new is not view:
            await self.leave(session, view)
        return new

    async def close(self) -> None:
        """End every view's process (and the spare)."""
        self.closed = True
        if self._spare_deferred is not None:
            self._spare_deferred.cancel()
            self._spare_deferred = None
        if self._spare_task is not None:
            await asyncio.gather(self._spare_task, return_exceptions=True)
        if self._retiring:
            await asyncio.gather(*self._retiring, return_exceptions=True)
        self.spare = None
        views = list(self.all)
        for v in views:
            v.stop_reading()
            v.resume()
            v.ended = True
        await asyncio.gather(*(v.child.terminate() for v in views), return_exceptions=True)
        self.all.clear()
        self.views.clear()

