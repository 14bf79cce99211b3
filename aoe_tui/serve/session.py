"""One SSH session of ``aoe serve``: a spectator TUI on a PTY, or a fixed command.

A PTY session (``ssh -t host`` / ``ssh -t host watch``) shows a view
(:mod:`aoe_tui.serve.views`): a child process (the spectator TUI, ``aoe watch SEASON_DIR``
by default, forked from the server's warm zygote, :mod:`aoe_tui.serve.zygote`) on a fresh
pseudo-terminal, shared with the sessions of the same terminal type and size that pressed
the same keys (:class:`PtyChild` below is that child):

* the PTY is sized to the client (``TIOCSWINSZ`` before the child starts) and resized
  on every ``window-change`` request (the kernel then sends SIGWINCH to the child);
* the child runs confined to the spectator CPU set at idle priority
  (:mod:`aoe_tui.serve.placement`), in its own session with the PTY as controlling
  terminal (``_ctty.py``), ``TERM`` from the client, a private scratch ``cwd`` (so nothing it
  might write lands in the season folder) and a minimal environment (no secrets of
  the server's environment);
* client input is dropped until the app has switched its terminal to full-screen
  mode (``ESC[?1049h`` or ``ESC[?25l``), so early keystrokes / terminal replies are
  not echoed by the line discipline; input the child does not read is dropped, never
  queued in the server;
* output enabling focus reporting (``ESC[?1004h``) or the kitty keyboard protocol
  (``ESC[>1u``) is removed (``docs/serving.md``, terminal sequences);
* when the client leaves, the whole process group is ended (SIGHUP via the PTY,
  then SIGTERM, then SIGKILL after a grace period) and reaped.

A session without a PTY (or an exec of ``standings``) gets the season's current
standings as plain text and ends. Any other exec request (``sh``, ``scp``…) is
never run: it gets one line naming what is offered and exit status 1. Subsystems
(SFTP) are refused at the protocol level.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import re
import shlex
import shutil
import signal
import struct
import sys
import tempfile
import termios
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import asyncssh

from aoe_tui.fsio import sweep_pid_folders
from aoe_tui.serve.placement import Placement

if TYPE_CHECKING:  # pragma: no cover
    from aoe_tui.serve.keys import KeyGrant
    from aoe_tui.serve.zygote import ForkedProcess, Zygote

__all__ = ["PtyChild", "SpectatorSession", "SessionHost", "ConnFacts", "parse_command", "OutputFilter",
           "is_passive_input", "terminal_key",
           "terminal_env", "COLOR_ENV"]

log = logging.getLogger("aoe_tui.serve")

CTTY_HELPER = str(Path(__file__).with_name("_ctty.py"))
_TERM_OK = re.compile(r"^[A-Za-z0-9._+-]{1,64}$")
DEFAULT_TERM = "xterm-256color"
#: the app has taken over the screen: input may flow from now on
_READY_MARKERS = (b"\x1b[?1049h", b"\x1b[?25l")
#: output sequences removed on the way to the client (``docs/serving.md``, terminal sequences)
_STRIP = (b"\x1b[?1004h", b"\x1b[>1u")
_STANDINGS_FORMATS = ("md", "csv", "json", "html")
#: the SSH client's environment variables (``SendEnv``/``SetEnv``) that reach its view: what
#: it says of its terminal's colours (``docs/serving.md``, colour depth); nothing else is taken
COLOR_ENV = ("COLORTERM", "NO_COLOR")
_ENV_OK = re.compile(r"^[A-Za-z0-9._+-]{1,32}$")


def terminal_key(term: str, env: dict) -> str:
    """A session's terminal as its views are keyed: ``TERM``, then each :data:`COLOR_ENV`
    variable the client sent (``"xterm-256color COLORTERM=truecolor NO_COLOR=1"``; just
    ``TERM`` when it sent neither). ``env``: the SSH session's environment (str or bytes);
    ``NO_COLOR`` counts when not empty (no-color.org), a ``COLORTERM`` that is not a plain
    word is ignored."""
    parts = [term]
    for name in COLOR_ENV:
        value = env.get(name, env.get(name.encode(), ""))
        if isinstance(value, bytes):
            value = value.decode("ascii", "replace")
        if not value:
            continue
        if name == "NO_COLOR":
            value = "1"
        elif not _ENV_OK.match(value):
            continue
        parts.append(f"{name}={value}")
    return " ".join(parts)


def terminal_env(key: str) -> tuple[str, dict[str, str]]:
    """``(TERM, {COLORTERM/NO_COLOR: value})`` of a :func:`terminal_key`."""
    term, *rest = key.split(" ")
    return term, dict(part.split("=", 1) for part in rest)


def parse_command(command: str | None) -> tuple[str, dict[str, str]] | None:
    """Map an exec command line to ``(name, options)`` or ``None`` if not allowed.

    Allowed: ``""`` / ``None`` / ``watch`` (the spectator TUI), ``standings`` with an
    optional ``--format md|csv|json|html`` (default ``md``), ``help``.
    """
    if command is None:
        return ("watch", {})
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    if not words or words == ["watch"]:
        return ("watch", {})
    if words == ["help"]:
        return ("help", {})
    if words[0] == "standings":
        rest = words[1:]
        fmt = "md"
        if len(rest) == 2 and rest[0] == "--format":
            fmt = rest[1]
        elif len(rest) == 1 and rest[0].startswith("--format="):
            fmt = rest[0].split("=", 1)[1]
        elif rest:
            return None
        if fmt not in _STANDINGS_FORMATS:
            return None
        return ("standings", {"format": fmt})
    return None


HELP_TEXT = (
    "aoe serve: read-only spectator access to an aoe season.\n"
    "  ssh -t -p PORT HOST                 live spectator TUI (needs a terminal)\n"
    "  ssh -p PORT HOST standings [--format md|csv|json|html]\n"
    "  ssh -p PORT HOST help\n"
)


class OutputFilter:
    """Removes :data:`_STRIP` sequences from a byte stream split into arbitrary chunks.

    ``feed(chunk) -> bytes`` returns what may be sent now; a trailing partial match is
    held back until the next chunk (at most 7 bytes). ``ready`` turns true once a
    :data:`_READY_MARKERS` sequence has been seen.
    """

    def __init__(self) -> None:
        self._carry = b""
        self.ready = False
        self._seen = b""

    def feed(self, chunk: bytes) -> bytes:
        data = self._carry + chunk
        self._carry = b""
        if not self.ready:
            probe = self._seen + data
            if any(m in probe for m in _READY_MARKERS):
                self.ready = True
            self._seen = probe[-8:]
        for seq in _STRIP:
            data = data.replace(seq, b"")
        # hold back a suffix that could start a stripped sequence
        cut = data.rfind(b"\x1b", max(0, len(data) - 7))
        if cut != -1 and any(seq.startswith(data[cut:]) for seq in _STRIP):
            self._carry = data[cut:]
            data = data[:cut]
        return data


#: terminal replies and pointer motion (nothing a spectator would see change)
_PASSIVE = re.compile(
    rb"\x1b\[<(\d+);\d+;\d+[Mm]"  # SGR mouse report (passive when it is motion, bit 32)
    rb"|\x1b\[\?[\d;]*c|\x1b\[>[\d;]*c"  # device attributes
    rb"|\x1b\[\??[\d;]*\$y"  # mode reports
    rb"|\x1b\[\d+;\d+R"  # cursor position report
    rb"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC replies (colours)
    rb"|\x1bP[^\x1b]*\x1b\\"  # DCS replies
    rb"|\x1b\[[IO]"  # focus in/out
)


def is_passive_input(data: bytes) -> bool:
    """Whether ``data`` is only terminal replies and pointer motion (SGR mouse reports with
    the motion bit and no button): input that shows nothing a spectator would miss."""
    pos = 0
    for m in _PASSIVE.finditer(data):
        if m.start() != pos:
            return False
        if m.group(1) is not None and not int(m.group(1)) & 32:
            return False  # a press or release
        pos = m.end()
    return pos == len(data) and pos > 0


def _winsize(cols: int, rows: int, pw: int = 0, ph: int = 0) -> bytes:
    cols = max(1, min(int(cols or 80), 1000))
    rows = max(1, min(int(rows or 24), 1000))
    return struct.pack("HHHH", rows, cols, max(0, int(pw)) & 0xFFFF, max(0, int(ph)) & 0xFFFF)


#: spectator scratch folders: ``<tmp>/aoe-serve-<server pid>-XXXXXXXX``
SCRATCH_PREFIX = "aoe-serve-"


def sweep_scratch(tmp: str | None = None) -> int:
    """Remove the scratch folders of spectator servers that are gone (a SIGKILLed
    server cannot remove its own); returns how many were removed."""
    return sweep_pid_folders(SCRATCH_PREFIX, tmp)


@dataclass
class PtyChild:
    """A child process on its own PTY (see the module docstring).

    ``argv``: the command (``argv[0]`` an absolute path); ``cols``/``rows``: initial size
    in cells; ``term``: the ``TERM`` value; ``env``: extra environment variables;
    ``placement``: CPU set and priority applied in the child before it execs
    (:mod:`aoe_tui.serve.placement`; default: unchanged); ``zygote``: the server's warm
    :class:`~aoe_tui.serve.zygote.Zygote`, which forks the child in milliseconds (it already
    runs at the placement); without one, or when it fails, the child is started from scratch.
    Start with :meth:`start`; :meth:`terminate` ends the whole process group.
    """

    argv: list[str]
    cols: int = 80
    rows: int = 24
    term: str = DEFAULT_TERM
    env: dict[str, str] = field(default_factory=dict)
    placement: Placement = field(default_factory=lambda: Placement(None, "normal"))
    zygote: Zygote | None = None
    master: int = -1
    proc: asyncio.subprocess.Process | ForkedProcess | None = None
    scratch: str | None = None
    #: how the child was started: ``"fork"`` (from the warm zygote) or ``"exec"``
    started_by: str = ""

    @property
    def pid(self) -> int | None:
        """The child's pid (= its process group and session id) or None before start."""
        return self.proc.pid if self.proc else None

    async def start(self) -> None:
        """Open the PTY, size it, and spawn the child with the slave as its terminal."""
        master, slave = os.openpty()
        try:
            fcntl.ioctl(slave, termios.TIOCSWINSZ, _winsize(self.cols, self.rows))
            os.set_blocking(master, False)
            self.scratch = tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-")
            env = {
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "HOME": self.scratch,
                "LANG": "C.UTF-8",
                "LC_ALL": "C.UTF-8",
                "TERM": self.term,
                "TEXTUAL_SCREENSHOT_LOCATION": self.scratch,
                "PYTHONDONTWRITEBYTECODE": "1",
            }
            if "PYTHONPATH" in os.environ:
                env["PYTHONPATH"] = os.environ["PYTHONPATH"]
            env.update(self.env)
            if self.zygote is not None and self.zygote.alive:
                try:
                    self.proc = await self.zygote.spawn(self.argv, slave, term=self.term, cwd=self.scratch, env=env)
                    self.started_by = "fork"
                except OSError as err:
                    log.warning("spectator zygote could not start a session (%s); starting it from scratch", err)
            if self.proc is None:
                self.proc = await asyncio.create_subprocess_exec(
                    sys.executable, "-I", "-S", CTTY_HELPER, *self.placement.ctty_args(), *self.argv,
                    stdin=slave, stdout=slave, stderr=slave, start_new_session=True,
                    env=env, cwd=self.scratch, close_fds=True,
                )
                self.started_by = "exec"
        except BaseException:
            os.close(master)
            if self.scratch:
                shutil.rmtree(self.scratch, ignore_errors=True)
            raise
        finally:
            os.close(slave)
        self.master = master

    def resize(self, cols: int, rows: int, pw: int = 0, ph: int = 0) -> None:
        """Set the PTY size (cells); the kernel sends SIGWINCH to the child's group."""
        self.cols, self.rows = cols, rows
        if self.master >= 0:
            try:
                fcntl.ioctl(self.master, termios.TIOCSWINSZ, _winsize(cols, rows, pw, ph))
            except OSError:
                pass

    def write(self, data: bytes) -> int:
        """Write input to the child without blocking; bytes it cannot take now are dropped."""
        if self.master < 0 or not data:
            return 0
        try:
            return os.write(self.master, data)
        except BlockingIOError:
            return 0
        except OSError:
            return 0

    def _signal(self, sig: int) -> None:
        if self.proc is None or self.proc.returncode is not None:
            return
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def close_master(self) -> None:
        """Close the PTY master (the kernel hangs up the child's session)."""
        if self.master >= 0:
            try:
                os.close(self.master)
            except OSError:
                pass
            self.master = -1

    async def terminate(self, grace_s: float = 1.5) -> int | None:
        """End the child's whole process group and reap it; returns its exit code.

        SIGHUP (PTY closed) + SIGTERM, then SIGKILL after ``grace_s`` seconds.
        Any survivors of the group are SIGKILLed too. Removes the scratch folder.
        """
        self.close_master()
        rc = None
        if self.proc is not None:
            self._signal(signal.SIGHUP)
            self._signal(signal.SIGTERM)
            try:
                rc = await asyncio.wait_for(self.proc.wait(), grace_s)
            except asyncio.TimeoutError:
                self._signal(signal.SIGKILL)
                rc = await self.proc.wait()
            try:  # grandchildren left in the group
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if self.scratch:
            shutil.rmtree(self.scratch, ignore_errors=True)
            self.scratch = None
        return rc


class InputBudget:
    """Token bucket for a spectator's keystrokes: ``burst`` bytes at once, refilled at
    ``rate`` bytes per second. A spectator types keys, not files: a 260 KB paste fed
    key by key kept a TUI busy for minutes. :meth:`admit` lets a chunk of input
    through whole or drops it whole — never half a key or mouse sequence, whose tail
    would arrive as stray keys."""

    def __init__(self, rate: float = 256.0, burst: float = 128.0) -> None:
        self.rate, self.burst = rate, burst
        self.tokens = burst
        self.at = time.monotonic()

    def admit(self, n: int) -> bool:
        """Whether a chunk of ``n`` bytes may pass now (its cost is then taken)."""
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if n > self.tokens:
            return False
        self.tokens -= n
        return True


#: written to a client before the server ends its session: leave the alternate screen,
#: show the cursor, stop mouse reporting and bracketed paste, reset colours
TERMINAL_RESET = (b"\x1b[?1000l\x1b[?1002l\x1b[?1003l\x1b[?1006l\x1b[?1015l\x1b[?2004l"
                  b"\x1b[?1049l\x1b[?25h\x1b[0m")


class ConnFacts(Protocol):
    """What a session reads of its SSH connection (the server's record of it): the client's
    address, its key's fingerprint (``SHA256:…``) and what its authorized_keys line grants
    (None before authentication)."""

    addr: str
    key_fp: str
    grant: KeyGrant | None


class SessionHost(Protocol):
    """What a session uses of the server that made it. ``SpectatorServer`` is one; this
    module never imports the server (imports run one way: server → views → session)."""

    config: Any
    #: the spectator seats (:class:`~aoe_tui.serve.seats.SeatPool`) and shared views
    #: (:class:`~aoe_tui.serve.views.ViewPool`)
    seats: Any
    views: Any

    @property
    def session_count(self) -> int: ...

    def season_started(self) -> bool: ...

    def standings_text(self, fmt: str) -> str: ...


class SpectatorSession(asyncssh.SSHServerSession):
    """The asyncssh session object for one channel (see the module docstring)."""

    def __init__(self, server: SessionHost, conn: ConnFacts) -> None:
        self.server = server
        self.conn = conn
        self.chan: asyncssh.SSHServerChannel | None = None
        self.term = DEFAULT_TERM
        #: the terminal its views are keyed by (:func:`terminal_key`: TERM and colour variables)
        self.terminal = DEFAULT_TERM
        self.size = (80, 24)
        self.pty = False
        self.command: tuple[str, dict[str, str]] | None = ("watch", {})
        #: a PTY was asked for and refused (the key's ``no-pty`` / ``restrict``)
        self.pty_refused = False
        #: the shared view this session shows (:mod:`aoe_tui.serve.views`)
        self.view: Any = None
        self.synced = False
        self.stale = False
        self.paused = False
        self._moving = False
        self._move_task: asyncio.Task | None = None
        self.started = 0.0
        self.dropped_input = 0
        self.input_budget = InputBudget()
        self._closed = False
        self._reading = False
        self._task: asyncio.Task | None = None
        self._eof: asyncio.Future | None = None

    # ------------------------------------------------------------ requests
    def connection_made(self, chan: asyncssh.SSHServerChannel) -> None:  # type: ignore[override]
        self.chan = chan

    def pty_requested(self, term_type: str, term_size: tuple[int, int, int, int], term_modes: Any) -> bool:
        grant = self.conn.grant
        if grant is not None and not grant.pty:  # no-pty / restrict: the client is told, as by sshd
            self.pty_refused = True
            log.warning("pty refused addr=%s key=%s (no-pty or restrict on authorized_keys line %d)",
                        self.conn.addr, self.conn.key_fp, grant.line)
            return False
        self.pty = True
        self.term = term_type if _TERM_OK.match(term_type or "") else DEFAULT_TERM
        if term_size and term_size[0] and term_size[1]:
            self.size = (int(term_size[0]), int(term_size[1]))
        return True

    def _forced(self, asked: str | None) -> str | None:
        """The command to run: the key's ``command="…"`` whatever the client asked (as sshd:
        logged with what was asked), else ``asked`` (None: a shell)."""
        grant = self.conn.grant
        if grant is None or grant.command is None:
            return asked
        log.info("forced command addr=%s key=%s command=%r (asked %r)", self.conn.addr, self.conn.key_fp,
                 grant.command[:80], None if asked is None else asked[:80])
        return grant.command

    def shell_requested(self) -> bool:
        forced = self._forced(None)
        if forced is not None:
            return self.exec_requested(forced, forced=True)
        self.command = ("watch", {})
        return True

    def exec_requested(self, command: str, forced: bool = False) -> bool:
        if not forced:
            command = self._forced(command)
        parsed = parse_command(command)
        if parsed is None:  # never run: answered with one line and exit status 1
            log.warning("exec refused addr=%s key=%s command=%r", self.conn.addr, self.conn.key_fp, command[:80])
            parsed = ("refused", {"command": command[:80]})
        self.command = parsed
        return True

    def subsystem_requested(self, subsystem: str) -> bool:
        log.warning("subsystem refused addr=%s key=%s subsystem=%r", self.conn.addr, self.conn.key_fp, subsystem[:40])
        return False

    def break_received(self, msec: int) -> bool:
        return True  # ignored

    def signal_received(self, signal: str) -> None:
        pass  # clients cannot signal the spectator

    def eof_received(self) -> bool:
        return True  # keep the channel open for output

    # ------------------------------------------------------------ running
    def session_started(self) -> None:
        self.started = time.monotonic()
        env: dict = {}
        if self.chan is not None:
            try:
                env = dict(self.chan.get_environment())
            except (AttributeError, TypeError):
                env = {}
        self.terminal = terminal_key(self.term, env)
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        name, opts = self.command or ("watch", {})
        try:
            if name not in ("help", "refused") and not self.server.season_started():
                self._finish_text("aoe serve: the season has not started yet (no season.jsonl); try again soon\n", 1)
            elif name == "help":
                self._finish_text(HELP_TEXT, 0)
            elif name == "refused":
                self._finish_text(f"aoe serve: {opts['command']!r} is not a command here; it offers:\n{HELP_TEXT}", 1)
            elif name == "standings" or not self.pty:
                if name == "watch" and self.pty_refused and self.chan is not None:
                    with contextlib.suppress(OSError, asyncssh.Error):  # the client may be gone (ssh -t)
                        self.chan.write_stderr(b"aoe serve: this key may not have a terminal (no-pty in authorized_keys),"
                                               b" so the live view cannot be served; the standings follow\n")
                fmt = opts.get("format", "md")
                try:
                    text = await asyncio.get_running_loop().run_in_executor(None, self.server.standings_text, fmt)
                    rc = 0
                except Exception as err:  # a bad/absent season log: one line, no traceback
                    text, rc = f"aoe serve: {err}\n", 1
                log.info("standings addr=%s key=%s format=%s", self.conn.addr, self.conn.key_fp, fmt)
                self._finish_text(text, rc)
            else:
                await self._run_spectator()
        except Exception:  # never let one session take the server down
            log.exception("session failed addr=%s", self.conn.addr)
            view, self.view = self.view, None
            if view is not None:
                await self.server.views.leave(self, view)
            self.server.seats.release(self)
            self._exit(1)

    def _finish_text(self, text: str, rc: int) -> None:
        if self.chan is None:
            return
        if self.pty:
            text = text.replace("\r\n", "\n").replace("\n", "\r\n")
        data = text.encode("utf-8")
        try:
            (self.chan.write_stderr if rc else self.chan.write)(data)
        except (OSError, asyncssh.Error):  # the client already left (ssh -t gives up on a refused PTY)
            log.info("client gone before its text addr=%s", self.conn.addr)
        self._exit(rc)

    def farewell(self, message: str) -> None:
        """End a spectator session from the server side: stop relaying the TUI, put the
        client's terminal back (:data:`TERMINAL_RESET`), say ``message`` on its own line
        and exit 0. The spectator process is ended by the session's own cleanup."""
        if self.chan is None or self._closed:
            return
        view, self.view = self.view, None
        try:
            self.chan.write(TERMINAL_RESET + b"\r\n" + message.encode("utf-8") + b"\r\n")
        except (OSError, asyncssh.Error):
            pass
        self._exit(0)
        self.view = view  # the session's cleanup takes it off its view
        if self._eof is not None and not self._eof.done():
            self._eof.set_result(None)

    def _exit(self, rc: int) -> None:
        if self.chan is not None and not self._closed:
            self._closed = True
            try:
                self.chan.exit(rc)
            except (OSError, asyncssh.Error):
                pass

    @property
    def child(self) -> PtyChild | None:
        """The spectator process this session shows (shared with the other sessions on its
        view, :mod:`aoe_tui.serve.views`), or None."""
        return self.view.child if self.view is not None else None

    async def _run_spectator(self) -> None:
        assert self.chan is not None
        seat = self.server.seats.take(self)
        if seat is not None:
            self._finish_text(seat, 1)
            return
        cols, rows = self.size
        try:
            await self.server.views.join(self, cols, rows, newcomer=True)
        except OSError as err:
            self.server.seats.release(self)
            self._finish_text(f"aoe serve: cannot start the spectator view: {err.strerror or err}\n", 1)
            return
        view = self.view
        assert view is not None
        log.info("session start addr=%s key=%s term=%s size=%dx%d pid=%s (%s) viewers=%d sessions=%d/%d",
                 self.conn.addr, self.conn.key_fp, self.term, cols, rows, view.child.pid, view.child.started_by,
                 len(view.members), self.server.session_count, self.server.config.max_sessions)
        loop = asyncio.get_running_loop()
        self._eof = loop.create_future()
        if self._closed:  # the client left while the view was starting
            self._eof.set_result(None)
        try:
            await self._eof
        finally:
            if self._move_task is not None:  # a move in flight lands first, then is undone
                await asyncio.gather(self._move_task, return_exceptions=True)
            view, self.view = self.view, None
        rc = None
        if view is not None:
            await self.server.views.leave(self, view)
            if view.ended and view.child.proc is not None:
                rc = view.child.proc.returncode
        self.server.seats.release(self)
        if self.chan is not None and not self._closed:
            # flush what is left, then report the exit status
            self._exit(0 if rc in (0, None) else 1)
        log.info("session end addr=%s key=%s size=%dx%d duration=%.1fs exit=%s dropped_input=%d", self.conn.addr,
                 self.conn.key_fp, self.size[0], self.size[1], time.monotonic() - self.started, rc, self.dropped_input)

    # ------------------------------------------------------------ the view's side
    def attach(self, view: Any, synced: bool) -> None:
        """Show ``view`` from now on; ``synced``: this session has seen its whole screen
        (else input waits for the repaint it was promised)."""
        self.view = view
        self.synced = synced
        self.stale = False

    def mark_synced(self, view: Any) -> None:
        """The repaint requested for this session has been drawn."""
        if view is self.view:
            self.synced = True

    def view_output(self, data: bytes, view: Any) -> None:
        """Output of ``view``'s process, for this session's client (dropped while the client's
        channel is paused; a repaint follows when it resumes)."""
        if view is not self.view or self.chan is None or self._closed:
            return
        if self.paused:
            self.stale = True
            return
        try:
            self.chan.write(data)
        except (OSError, asyncssh.Error):
            pass

    def view_ended(self, view: Any) -> None:
        """``view``'s process exited (``q``, a crash): the session ends with it."""
        if view is self.view and self._eof is not None and not self._eof.done():
            self._eof.set_result(None)

    def _move(self, cols: int, rows: int, history: bytes) -> None:
        """Leave a shared view for the one of this terminal size and input (in the background)."""
        view = self.view
        if view is None or self._moving:
            return
        self._moving = True

        async def move() -> None:
            try:
                await self.server.views.move(self, view, cols, rows, history)
            except OSError as err:
                log.warning("session move failed addr=%s: %s", self.conn.addr, err)
            finally:
                self._moving = False
                self._move_task = None

        self._move_task = asyncio.get_running_loop().create_task(move())

    def data_received(self, data: bytes, datatype: int | None) -> None:  # type: ignore[override]
        view = self.view
        if view is None or not view.filter.ready or not self.synced or not view.accepting or self._moving:
            self.dropped_input += len(data)
            return
        if not self.input_budget.admit(len(data)):
            self.dropped_input += len(data)
            return
        if view.shared:
            if is_passive_input(data):  # a terminal's chatter must not split a shared view
                self.dropped_input += len(data)
                return
            self._move(self.size[0], self.size[1], view.history + data)
            return
        n = view.give_input(data)
        self.dropped_input += len(data) - n

    def terminal_size_changed(self, width: int, height: int, pixwidth: int, pixheight: int) -> None:
        if width and height:
            self.size = (int(width), int(height))
            view = self.view
            if view is not None:
                if view.shared:
                    self._move(self.size[0], self.size[1], view.history)
                else:
                    view.child.resize(width, height, pixwidth, pixheight)
                    self.server.views._rekey(view, self.size[0], self.size[1])
            log.info("resize addr=%s size=%dx%d", self.conn.addr, width, height)

    def pause_writing(self) -> None:
        self.paused = True  # back-pressure: this client misses output, nobody else waits

    def resume_writing(self) -> None:
        self.paused = False
        view = self.view
        if self.stale and view is not None and not self._closed:
            self.stale = False
            self.synced = False
            self.view_output(b"\x1b[H\x1b[2J" + view.mode_bytes(), view)
            view.request_repaint()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        if self._eof is not None and not self._eof.done():
            self._eof.set_result(None)  # the client left: _run_spectator ends the child
