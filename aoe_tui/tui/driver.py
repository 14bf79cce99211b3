"""The terminal input path of every view: no byte sequence on input ends a view.

Textual 8.2.8's :class:`~textual.drivers.linux_driver.LinuxDriver` reads the terminal in
a thread, decodes it as strict UTF-8 and feeds :class:`~textual._xterm_parser.XTermParser`;
any exception there ends the app (``App.panic``). Bytes a spectator's terminal (or a
stray paste) can send that did so:

* a legacy X10 mouse report (``ESC [ M Cb Cx Cy``, one byte per value) at a column past
  95 or a row past 95: its bytes above 127 are not UTF-8 (Textual #6668);
* a lone ``0xFF 0xFE``, a truncated UTF-8 sequence, a Latin-1 paste (UnicodeDecodeError);
* a CSI-u key report with a colon in its code (``ESC[1:2;3u``) or a code point past
  U+10FFFF (ValueError in ``_parse_extended_key``);
* an in-band resize report of 0 cells, then a mouse report (ZeroDivisionError).

:class:`GuardedDriver` is the LinuxDriver with its input thread replaced: bytes go
through :class:`InputDecoder` (X10 and urxvt mouse reports rewritten as the SGR reports
Textual understands, invalid UTF-8 decoded byte by byte: ``0xA0``-``0xFF`` as Latin-1,
anything else as U+FFFD), then :class:`GuardedParser`; whatever still raises resets
the parser and drops the rest of that read. At end of input (EOF, or EIO once the
terminal is gone, or a stdin that never was a terminal such as ``/dev/null``) it stops
reading and sleeps until the app ends instead of spinning on a readable descriptor.

Output goes through :class:`TerminalWriter` instead of Textual's writer thread, so a dead
terminal cannot hang a view's exit. Textual's thread dies on the first EIO (a terminal
closed without a SIGHUP reaching the view: no controlling terminal, or SIGHUP ignored)
and the app's next writes then wait for ever on its full queue of 30; a terminal that
stops reading blocks it in the kernel holding ``sys.__stderr__``'s lock (the interpreter's
exit then aborts on that lock). :class:`TerminalWriter` writes with ``os.write``, leaves
the terminal (:func:`aoe_tui.signals.release_terminal`) and drops all further output on a
write error, and, once a stop signal set a deadline (:meth:`GuardedDriver.bound_output`,
called by :func:`aoe_tui.tui.app.run_in_terminal`), gives up a terminal that has not taken
the output by then.

A SIGCONT resumes application mode only after the driver's own SIGTSTP left it (``kill
-TSTP``; the Ctrl+Z key itself reaches a view in raw mode as a key, not a signal, and no view
binds it),
and until a resume really restarted it (``bg`` continues the view in the background, where
Textual's resume stops it again; the ``fg`` after it resumes it); a process stopped with
SIGSTOP (``aoe serve``'s paused spare view) just goes on.

:func:`driver_class` is what :class:`~aoe_tui.tui.app.AoeApp` passes to Textual (every
view: ``aoe run``, ``aoe watch``, ``aoe replay``, ``aoe demo``, SSH spectators).
"""

from __future__ import annotations

import codecs
import logging
import os
import queue
import re
import select
import selectors
import sys
import threading
import time
from collections.abc import Callable
from typing import IO, Any

from textual import events
from textual._xterm_parser import XTermParser
from textual.drivers._writer_thread import WriterThread
from textual.drivers.linux_driver import LinuxDriver
from textual.message import Message

from aoe_tui.signals import release_terminal

__all__ = ["GuardedDriver", "GuardedParser", "InputDecoder", "TerminalWriter", "driver_class", "MAX_CELLS",
           "color_depth", "TEXTUAL_COLOR_SYSTEMS"]

log = logging.getLogger("aoe_tui.tui")

#: largest terminal side (cells) an in-band resize report may claim; larger ones are dropped
MAX_CELLS = 1000
#: bytes read from the terminal at once
READ_SIZE = 4096
#: seconds between parser ticks (Textual's escape-key timeout needs them) while input is open
SELECT_TIMEOUT_S = 0.1
#: seconds a read's held-back tail (see :class:`InputDecoder`) waits for the rest: a lone
#: escape key reaches Textual this much later
HOLD_S = 0.02

#: seconds between checks of a full output queue (is the terminal gone, is the deadline past?)
OUTPUT_POLL_S = 0.1

_ERRORS = "aoe-terminal-input"


def _decode_error(err: UnicodeError) -> tuple[str, int]:
    """Codec error handler: each undecodable byte becomes its Latin-1 character when it is
    a printable one (``0xA0``-``0xFF``: a Latin-1 paste stays readable), else U+FFFD."""
    if not isinstance(err, UnicodeDecodeError):
        raise err
    bad = err.object[err.start:err.end]
    return "".join(chr(b) if b >= 0xA0 else "\ufffd" for b in bad), err.end


codecs.register_error(_ERRORS, _decode_error)

#: X10 mouse report: ESC [ M and three bytes (button + 32, column + 32, row + 32)
_X10 = re.compile(rb"\x1b\[M([\x20-\xff])([\x20-\xff])([\x20-\xff])")
#: urxvt (mode 1015) mouse report: ESC [ button+32 ; column ; row M
_URXVT = re.compile(rb"\x1b\[(\d{1,4});(\d{1,5});(\d{1,5})M")
#: a read that ends inside an X10 report: held back until the next read (or idle)
_X10_PREFIX = re.compile(rb"\x1b(?:\[(?:M[\x20-\xff]{0,2})?)?\Z")


def _sgr(code: int, col: int, row: int) -> bytes:
    """An SGR mouse report for a legacy report's button ``code`` (the value minus 32) at
    1-based ``col``/``row``; a legacy release (low bits 3, no motion) becomes an SGR
    release (``m``) of button 1 (legacy releases do not say which button)."""
    if code & 3 == 3 and not code & 0x60:
        return b"\x1b[<%d;%d;%dm" % (code & ~3, col, row)
    return b"\x1b[<%d;%d;%dM" % (code, col, row)


class InputDecoder:
    """Terminal bytes → text for the parser; never raises.

    ``decode(data: bytes, final=False) -> str``. Legacy mouse reports (X10 and urxvt
    1015) are rewritten as SGR reports (so a click past column 95 is a click, not a
    decoding error); a read ending where an X10 report may have been cut (``ESC``,
    ``ESC [``, ``ESC [ M`` and up to two bytes) keeps that tail for the next call
    (``final=True`` or :meth:`flush` gives it up: the driver does after :data:`HOLD_S`
    without input). Invalid UTF-8 never raises (see
    :func:`_decode_error`); a UTF-8 sequence cut at the end of a read waits for the rest.
    """

    def __init__(self) -> None:
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors=_ERRORS)
        self._carry = b""

    @property
    def pending(self) -> bool:
        """Whether bytes are held back (an X10 report or a UTF-8 sequence cut short)."""
        return bool(self._carry) or bool(self._utf8.getstate()[0])

    def decode(self, data: bytes, final: bool = False) -> str:
        data = self._carry + data
        self._carry = b""
        if not final:
            tail = _X10_PREFIX.search(data, max(0, len(data) - 5))
            if tail is not None:
                self._carry = data[tail.start():]
                data = data[:tail.start()]
        if b"\x1b[" in data:
            data = _X10.sub(lambda m: _sgr(m[1][0] - 32, m[2][0] - 32, m[3][0] - 32), data)
            data = _URXVT.sub(lambda m: _sgr(max(0, int(m[1]) - 32), int(m[2]), int(m[3])), data)
        return self._utf8.decode(data, final=final)

    def flush(self) -> str:
        """Give up whatever is held back (input went idle): decode it as it is."""
        return self.decode(b"", final=True)


def _sane_resize(event: events.Resize) -> bool:
    width, height = event.size
    if not (0 < width <= MAX_CELLS and 0 < height <= MAX_CELLS):
        return False
    pixels = event.pixel_size
    return pixels is None or (pixels[0] > 0 and pixels[1] > 0)


class GuardedParser(XTermParser):
    """:class:`~textual._xterm_parser.XTermParser` whose report decoders return nothing
    instead of raising on malformed numbers, and which drops in-band resize reports
    outside 1..:data:`MAX_CELLS` cells or of 0 pixels (a terminal never sends them; a
    spectator could, to make its TUI render a 99999-column screen)."""

    def parse(self, token_callback):  # type: ignore[override]
        def keep(token: Message) -> None:
            if isinstance(token, events.Resize) and not _sane_resize(token):
                self.terminal_size = self.terminal_pixel_size = None
                self.mouse_pixels = False
                return
            token_callback(token)

        return super().parse(keep)

    def parse_mouse_code(self, code: str) -> Message | None:
        try:
            return super().parse_mouse_code(code)
        except (ArithmeticError, ValueError):
            return None

    def _parse_extended_key(self, sequence: str) -> list[events.Key] | None:
        try:
            return super()._parse_extended_key(sequence)
        except (ValueError, OverflowError):
            return None


class TerminalWriter(WriterThread):
    """Textual's output thread (a queue of at most 30 writes, drained by a daemon thread)
    made safe against a dead terminal; a drop-in for
    :class:`~textual.drivers._writer_thread.WriterThread` (``write(text: str)``,
    ``stop()``, ``fileno()``, ``isatty()``).

    * The thread writes with ``os.write`` (all that is queued at once, encoded as ``file``
      encodes), so no Python-level lock of ``file`` is held while the kernel blocks.
    * A write error (EIO: the terminal is gone) makes the output :attr:`gone`: the process
      leaves the terminal (``leave()``, by default :func:`~aoe_tui.signals.release_terminal`:
      fds 0-2 to ``/dev/null``), queued and later writes are dropped; the thread keeps
      draining, so ``write`` never waits on a dead reader.
    * :attr:`deadline` (``time.monotonic()`` seconds, set by :meth:`GuardedDriver.bound_output`
      once a stop signal arrived): past it, a ``write`` or ``stop`` that would still wait
      for the terminal gives the terminal up the same way (it is not reading: closed
      without EIO, or a peer that stopped reading). Before it, a full queue waits as
      Textual's does (a slow terminal slows the view, output is never lost).
    Raises nothing."""

    def __init__(self, file: IO[str], leave: Callable[[], None] = release_terminal) -> None:
        super().__init__(file)
        self._leave = leave
        self._fd = file.fileno()
        self._encoding = getattr(file, "encoding", None) or "utf-8"
        self._errors = getattr(file, "errors", None) or "strict"
        #: the terminal is gone or given up: output is dropped
        self.gone = False
        #: monotonic time (s) after which a terminal that does not take output is given up
        self.deadline: float | None = None
        self._writing = False

    def give_up(self) -> None:
        """Leave the terminal and drop all further output (idempotent, any thread)."""
        if not self.gone:
            self.gone = True
            self._leave()

    def _overdue(self) -> bool:
        if self.deadline is not None and time.monotonic() >= self.deadline:
            self.give_up()
        return self.gone

    def write(self, text: str | None) -> None:  # type: ignore[override]
        """Queue ``text`` (``None``: the end) for the thread; waits while the queue is full,
        unless the output is or becomes :attr:`gone`, then drops it."""
        while not self.gone:
            try:
                self._queue.put(text, timeout=OUTPUT_POLL_S)
                return
            except queue.Full:
                if self._overdue():
                    return

    def stop(self) -> None:
        """End the thread once it wrote what is queued (no wait past :attr:`deadline`, nor
        for a terminal that is :attr:`gone`)."""
        while self.is_alive():
            try:
                self._queue.put(None, timeout=OUTPUT_POLL_S)
                break
            except queue.Full:
                if self._stuck():
                    return
        while self.is_alive() and not self._stuck():
            self.join(OUTPUT_POLL_S)

    def _stuck(self) -> bool:
        """The thread is in the kernel's write to a terminal that is given up (it may never
        return: a daemon thread that holds no lock, left behind)."""
        return self._writing and self._overdue()

    def run(self) -> None:
        get = self._queue.get
        while True:
            texts = [get()]
            with self._queue.mutex:  # all that is queued now, in one write
                texts.extend(self._queue.queue)
                self._queue.queue.clear()
                self._queue.not_full.notify_all()
            end = None in texts
            if end:
                texts = texts[:texts.index(None)]
            if texts and not self.gone:
                self._writing = True
                try:
                    self._write_all("".join(texts).encode(self._encoding, self._errors))
                except OSError:  # EIO (terminal gone) or any other write error
                    self.give_up()
                finally:
                    self._writing = False
            if end:
                return

    def _write_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view and not self.gone:
            try:
                view = view[os.write(self._fd, view):]
            except BlockingIOError:  # a non-blocking descriptor: wait until it takes more
                select.select([], [self._fd], [], OUTPUT_POLL_S)


class GuardedDriver(LinuxDriver):
    """LinuxDriver whose input thread survives any input and stops at end of input, and
    whose output cannot hang on a dead terminal (module docstring)."""

    @property
    def _writer_thread(self) -> TerminalWriter | None:
        return self.__writer

    @_writer_thread.setter
    def _writer_thread(self, writer: WriterThread | None) -> None:
        # LinuxDriver.start_application_mode makes a WriterThread and starts it: this
        # driver's is a TerminalWriter on the same file (Textual's is never started)
        if writer is not None and not isinstance(writer, TerminalWriter):
            writer = TerminalWriter(writer._file)
        self.__writer = writer

    #: True from a SIGTSTP (Textual leaves application mode and stops the process)
    #: until the SIGCONT that resumes it (not ``bg``'s: see :meth:`_sigcont_application`)
    _suspended = False

    def _sigtstp_application(self, *args: Any) -> None:
        self._suspended = True
        super()._sigtstp_application(*args)

    def _sigcont_application(self, *args: Any) -> None:
        """Re-enter application mode only after this driver's own SIGTSTP left it. A SIGCONT
        after a plain SIGSTOP (``aoe serve`` pauses its spare view so, :mod:`aoe_tui.serve.views`)
        or the one the kernel sends with a hang-up finds application mode still on: Textual's
        handler would start it a second time (new input and writer threads on one terminal)."""
        if not self._suspended:
            return
        writer = self.__writer
        super()._sigcont_application(*args)
        # ``bg``'s SIGCONT finds the process in the background: Textual's resume gives up at
        # its first terminal write (SIGTTOU stops the process again, no new writer started), so
        # the SIGCONT of the ``fg`` that follows must still resume it
        if self.__writer is not writer or not self._auto_restart:
            self._suspended = False

    def bound_output(self, seconds: float) -> None:
        """A stop signal arrived: from ``seconds`` (s) on, output the terminal has not taken
        is dropped and the terminal left (:class:`TerminalWriter`). Signal-handler safe (one
        attribute set); a no-op outside application mode or when a deadline is set."""
        writer = self.__writer
        if writer is not None and writer.deadline is None:
            writer.deadline = time.monotonic() + seconds

    def run_input_thread(self) -> None:
        """Read the terminal until the app ends: decode, parse, dispatch; a read of 0 bytes
        or an ``OSError`` ends the reading (the thread then waits for the app's end)."""
        fileno = self.fileno
        decoder = InputDecoder()
        parser = GuardedParser(self._debug)
        selector = selectors.SelectSelector()
        selector.register(fileno, selectors.EVENT_READ)
        open_ = True

        def feed(text: str) -> None:
            nonlocal parser
            try:
                for event in parser.feed(text):
                    self.process_message(event)
            except Exception as err:  # pragma: no cover - a parser bug we have not met yet
                log.warning("terminal input: %s: %s; input parser reset", type(err).__name__, err)
                parser = GuardedParser(self._debug)

        def tick() -> None:
            nonlocal parser
            try:
                for event in parser.tick():
                    self.process_message(event)
            except Exception as err:  # pragma: no cover
                log.warning("terminal input: %s: %s; input parser reset", type(err).__name__, err)
                parser = GuardedParser(self._debug)

        try:
            while open_ and not self.exit_event.is_set() and threading.main_thread().is_alive():
                try:
                    ready = selector.select(HOLD_S if decoder.pending else SELECT_TIMEOUT_S)
                except (OSError, ValueError):  # the descriptor was closed under us
                    ready, open_ = [], False
                if ready:
                    try:
                        data = os.read(fileno, READ_SIZE)
                    except BlockingIOError:
                        continue
                    except OSError:  # EIO: the terminal is gone
                        data = b""
                    if not data:
                        open_ = False
                        text = decoder.decode(b"", final=True)
                    else:
                        text = decoder.decode(data)
                    if text:
                        feed(text)
                elif decoder.pending:
                    text = decoder.flush()
                    if text:
                        feed(text)
                tick()
        finally:
            selector.close()
        if not open_:
            # end of input: nothing more will come; flush the parser (a lone ESC is the
            # escape key) and wait for the app to end without polling a dead descriptor
            try:
                for event in parser.feed(""):
                    self.process_message(event)
            except Exception:  # pragma: no cover
                pass
            # (or for the interpreter's shutdown: the main thread stopped without the app
            # setting exit_event, e.g. after a hangup; a thread left waiting here would hold
            # the process alive for ever, an orphaned spectator)
            while not self.exit_event.wait(0.25) and threading.main_thread().is_alive():
                pass


def driver_class() -> Any:
    """The driver for :class:`~aoe_tui.tui.app.AoeApp`: :class:`GuardedDriver` on a POSIX
    system unless ``TEXTUAL_DRIVER`` names another one (``None``: Textual chooses)."""
    if os.environ.get("TEXTUAL_DRIVER") or sys.platform == "win32":
        return None
    return GuardedDriver


#: our colour depths → the ``color_system`` Textual's console is built with ("none" has no
#: console system of its own: Textual renders a console without one as truecolor, so a
#: view without colour keeps "standard" and drops every colour with a line filter,
#: :meth:`aoe_tui.tui.app.AoeApp.get_line_filters`)
TEXTUAL_COLOR_SYSTEMS = {"truecolor": "truecolor", "256": "256", "16": "standard", "none": "standard"}


#: where terminfo databases live (ncurses' default search order after $TERMINFO, ~/.terminfo)
_TERMINFO_DIRS = ("/etc/terminfo", "/lib/terminfo", "/usr/share/terminfo", "/usr/lib/terminfo")


def _terminfo_colors(term: str, environ: dict[str, str] | os._Environ) -> int | None:
    """The ``colors`` capability of ``term`` in this machine's terminfo database (-1: the
    terminal has no colour), or None when the database does not know ``term``. Read from the
    compiled entry (term(5): legacy 16-bit or extended 32-bit numbers; ``colors`` is number
    13), not through curses, whose ``setupterm`` takes only the first terminal of a process."""
    if not re.fullmatch(r"[a-z0-9][a-z0-9._+-]{0,63}", term):
        return None
    dirs = [environ.get("TERMINFO", ""), os.path.join(environ.get("HOME", ""), ".terminfo") if environ.get("HOME") else "",
            *environ.get("TERMINFO_DIRS", "").split(":"), *_TERMINFO_DIRS]
    for d in dirs:
        if not d:
            continue
        for sub in (term[0], f"{ord(term[0]):x}"):
            try:
                with open(os.path.join(d, sub, term), "rb") as fh:
                    data = fh.read(4096)
            except OSError:
                continue
            if len(data) < 12:
                return None
            magic, names, bools, nums = (int.from_bytes(data[i:i + 2], "little", signed=True) for i in (0, 2, 4, 6))
            width = {0o432: 2, 0o1036: 4}.get(magic)
            if width is None or nums <= 13:
                return -1 if width else None
            at = 12 + names + bools
            at += at % 2
            at += 13 * width
            return int.from_bytes(data[at:at + width], "little", signed=True)
    return None


def color_depth(environ: dict[str, str] | os._Environ) -> str:
    """The colour depth a view draws with: ``"truecolor"``, ``"256"``, ``"16"`` or ``"none"``,
    from what the terminal says of itself (for an SSH spectator: what its client sent).

    In this order: ``NO_COLOR`` set and not empty → none (no-color.org); ``TERM`` ``dumb`` or
    ``unknown`` → none; ``COLORTERM`` ``truecolor``/``24bit`` → truecolor; else the ``colors``
    of ``TERM`` in terminfo (≥ 2**24 truecolor, ≥ 256 → 256, ≥ 8 → 16, fewer or none → none,
    so ``vt100`` has none), and for a ``TERM`` terminfo does not know, its suffix as Rich
    reads it (``-direct`` truecolor, ``-256color`` 256, else 16). No ``TERM`` at all → 16."""
    if environ.get("NO_COLOR", ""):
        return "none"
    term = environ.get("TERM", "").strip().lower()
    if term in ("dumb", "unknown"):
        return "none"
    if environ.get("COLORTERM", "").strip().lower() in ("truecolor", "24bit"):
        return "truecolor"
    if not term:
        return "16"
    colors = _terminfo_colors(term, environ)
    if colors is None:
        if term.endswith("-direct"):
            return "truecolor"
        return "256" if term.endswith("-256color") else "16"
    if colors >= 1 << 24:
        return "truecolor"
    if colors >= 256:
        return "256"
    return "16" if colors >= 8 else "none"
