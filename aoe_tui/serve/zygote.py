"""Warm spectator processes: a zygote that has the spectator TUI imported forks one per session.

Starting a spectator the plain way (``python -m aoe_tui.cli watch``) costs about a second of
CPU for the interpreter and the Textual import alone; twenty spectators joining at once on
the one spectator CPU waited 20–35 s for their first screen (issue 16). ``aoe serve`` instead
starts one **zygote** process when it starts: it imports the CLI, Textual and the app, renders
one throw-away frame off-screen (so the stylesheet and render caches are warm), moves
everything it holds out of the garbage collector's sight (``gc.freeze``: forked children then
share those pages instead of copying them when a collection touches them) and waits. For
each PTY session the server sends it the PTY's slave end (``SCM_RIGHTS`` over a
``SOCK_SEQPACKET`` socket pair) with the command, ``TERM``, scratch folder and environment;
the zygote ``fork()``\\ s a child that becomes a session leader with the PTY as its
controlling terminal and runs the command in-process when it is ``python -m MODULE ...``
(``runpy``; any other command is ``exec``\\ ed). Process-per-session isolation is kept: each spectator is still its
own process, own terminal, own signal handlers, own ``GuardedDriver``.

The zygote runs single-threaded (``fork`` of a threaded process is unsafe; it checks), at the
spectator placement (:mod:`aoe_tui.serve.placement`, inherited by every child), reaps its
children and reports each exit status to the server. It ends when the server's end of the
socket closes (and, on Linux, when the server dies: ``PR_SET_PDEATHSIG``); its children
then still end by the SIGHUP of their PTY.

Wire format (one JSON object per datagram). Server → zygote: ``{"argv": [...], "term": T,
"cwd": DIR, "env": {...}}`` with the slave fd attached. Zygote → server: ``{"ready": true}``
once warm; ``{"pid": N}`` or ``{"error": "one line"}`` per request, in request order;
``{"exited": N, "rc": CODE}`` when a child ends (``rc`` as ``asyncio`` reports it: negative
= killed by that signal).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import sys
import time
from collections import deque
from typing import Any

__all__ = ["Zygote", "ForkedProcess"]

log = logging.getLogger("aoe_tui.serve")

#: largest datagram (a request is well under 4 KiB)
_MAX_MSG = 65536


class ForkedProcess:
    """A spectator forked by the zygote, seen from the server: ``pid``, ``returncode`` (None
    while it runs) and ``await wait()``, like :class:`asyncio.subprocess.Process`."""

    def __init__(self, pid: int, zygote: Zygote) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._zygote = zygote
        self._done: asyncio.Future = asyncio.get_running_loop().create_future()

    def _exited(self, rc: int | None) -> None:
        if self.returncode is None:
            self.returncode = rc
        if not self._done.done():
            self._done.set_result(rc)

    async def wait(self) -> int | None:
        """Wait until it has exited; returns its exit status (None if unknown: its zygote
        died first and ``init`` reaped it)."""
        while not self._done.done():
            if self._zygote.alive:
                await asyncio.wait([self._done], timeout=0.5)
            else:  # an orphan of a dead zygote: poll until it is gone
                try:
                    os.kill(self.pid, 0)
                except ProcessLookupError:
                    self._exited(None)
                    break
                await asyncio.sleep(0.1)
        return self.returncode


class Zygote:
    """The server's handle on its zygote process (see the module docstring).

    ``env``: the zygote's (and so every spectator's) base environment; ``placement_args``:
    :meth:`~aoe_tui.serve.placement.Placement.ctty_args` of the spectator placement;
    ``preload``: modules to import before forking (those of the ``python -m MODULE``
    spectator command).
    :meth:`start` launches it (returns at once; spawns wait until it is warm);
    :meth:`spawn` forks a spectator; :meth:`close` ends the zygote (not its children).
    """

    def __init__(self, env: dict[str, str], placement_args: list[str], preload: list[str] = ()) -> None:
        self.env = env
        self.placement_args = placement_args
        self.preload = list(preload)
        self.proc: asyncio.subprocess.Process | None = None
        self.sock: socket.socket | None = None
        self.ready = asyncio.Event()
        self.alive = False
        self.started_at = 0.0
        self.warm_s: float | None = None
        self._waiting: deque[asyncio.Future] = deque()
        self._children: dict[int, ForkedProcess] = {}

    async def start(self) -> None:
        """Launch the zygote (raises ``OSError`` if it cannot be started)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "aoe_tui.serve.zygote", str(theirs.fileno()),
                *(["--preload", ",".join(self.preload)] if self.preload else []), *self.placement_args,
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
                pass_fds=[theirs.fileno()], env=self.env, cwd="/", start_new_session=True)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        ours.setblocking(False)
        self.sock = ours
        self.alive = True
        self.started_at = time.monotonic()
        asyncio.get_running_loop().add_reader(ours.fileno(), self._on_message)

    def _on_message(self) -> None:
        assert self.sock is not None
        try:
            data = self.sock.recv(_MAX_MSG)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._gone()
            return
        msg = json.loads(data)
        if msg.get("ready"):
            self.warm_s = time.monotonic() - self.started_at
            self.ready.set()
            log.info("spectator zygote ready pid=%s after %.1fs", self.proc.pid if self.proc else "?", self.warm_s)
        elif "exited" in msg:
            child = self._children.pop(int(msg["exited"]), None)
            if child is not None:
                child._exited(msg.get("rc"))
        elif self._waiting:
            fut = self._waiting.popleft()
            if not fut.done():
                fut.set_result(msg)

    def _gone(self, closing: bool = False) -> None:
        if not self.alive:
            return
        self.alive = False
        if not closing:
            log.warning("spectator zygote ended; new spectators start the slow way")
        if self.sock is not None:
            asyncio.get_running_loop().remove_reader(self.sock.fileno())
            self.sock.close()
            self.sock = None
        while self._waiting:
            fut = self._waiting.popleft()
            if not fut.done():
                fut.set_exception(OSError("the spectator zygote ended"))

    async def spawn(self, argv: list[str], slave: int, *, term: str, cwd: str, env: dict[str, str]) -> ForkedProcess:
        """Fork a spectator running ``argv`` on the PTY whose slave end is ``slave`` (the
        caller keeps and closes its own copy). Raises ``OSError`` when the zygote is gone
        or could not fork."""
        if not self.alive or self.sock is None:
            raise OSError("the spectator zygote is not running")
        fut = asyncio.get_running_loop().create_future()
        self._waiting.append(fut)
        payload = json.dumps({"argv": argv, "term": term, "cwd": cwd, "env": env}).encode()
        try:
            socket.send_fds(self.sock, [payload], [slave])
        except OSError:
            self._waiting.remove(fut)
            raise
        reply = await fut
        if "pid" not in reply:
            raise OSError(reply.get("error", "the spectator zygote could not fork"))
        child = ForkedProcess(int(reply["pid"]), self)
        self._children[child.pid] = child
        return child

    async def close(self) -> None:
        """End the zygote (its children keep running until their sessions end them)."""
        if self.sock is not None:
            self._gone(closing=True)
        if self.proc is not None and self.proc.returncode is None:
            try:
                self.proc.terminate()
                await asyncio.wait_for(self.proc.wait(), 2.0)
            except (ProcessLookupError, asyncio.TimeoutError):
                try:
                    self.proc.kill()
                except ProcessLookupError:
                    pass


# ------------------------------------------------------------------ the zygote process


def _die_with_parent() -> None:
    """Linux: SIGKILL this process when its parent (the server) dies."""
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        pass


def _warm_up(modules: list[str]) -> None:
    """Import ``modules`` (what the spectators run) and draw one ``aoe watch`` frame
    off-screen, so the children start with warm stylesheet and render caches."""
    import importlib
    import tempfile
    from pathlib import Path

    for name in modules:
        try:
            module = importlib.import_module(name)
            # a CLI that imports its commands lazily names them (aoe_tui.cli.COMMAND_MODULES)
            for sub in getattr(module, "COMMAND_MODULES", ()):
                importlib.import_module(sub)
        except ImportError:
            pass
    from aoe_tui.tui.app import watch_app

    with tempfile.TemporaryDirectory(prefix="aoe-zygote-") as tmp:
        season = Path(tmp)
        (season / "season.jsonl").write_bytes(b"")
        try:
            app = watch_app(season, follow=False)

            async def once() -> None:
                async with app.run_test(size=(120, 40)) as pilot:
                    await pilot.pause()

            asyncio.run(once())
        except Exception:  # a warm-up is an optimisation only
            pass


def _child(sock: socket.socket, wake_r: int, req: dict[str, Any], slave: int) -> None:
    """In the forked child: become the PTY's session, then run the command. Never returns."""
    import fcntl
    import io
    import signal
    import termios

    rc = 1
    try:
        sock.close()
        os.close(wake_r)
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)  # a repaint request before the app handles it
        os.setsid()
        for fd in (0, 1, 2):
            os.dup2(slave, fd)
        if slave > 2:
            os.close(slave)
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        os.chdir(req["cwd"])
        os.environ.update({str(k): str(v) for k, v in req["env"].items()})
        os.environ["TERM"] = str(req["term"])
        sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.open(0, "rb", closefd=False), encoding="utf-8",
                                                     errors="surrogateescape")
        sys.stdout = sys.__stdout__ = io.TextIOWrapper(io.open(1, "wb", closefd=False), encoding="utf-8",
                                                       errors="surrogateescape", line_buffering=True)
        sys.stderr = sys.__stderr__ = io.TextIOWrapper(io.open(2, "wb", closefd=False), encoding="utf-8",
                                                       errors="backslashreplace", line_buffering=True)
        argv = [str(a) for a in req["argv"]]
        if len(argv) >= 3 and argv[0] == sys.executable and argv[1] == "-m":
            import runpy

            sys.argv = [argv[2], *argv[3:]]
            # as ``python -m MODULE`` finds it: not imported yet (the warm-up imported it, and
            # runpy then warns "found in sys.modules" on the spectator's terminal); the
            # modules it imports stay warm
            sys.modules.pop(argv[2], None)
            try:
                runpy.run_module(argv[2], run_name="__main__", alter_sys=True)  # python -m MODULE, in-process
                rc = 0
            finally:
                for stream in (sys.stdout, sys.stderr):
                    try:
                        stream.flush()
                    except (OSError, ValueError):
                        pass
        else:
            os.execv(argv[0], argv)
    except SystemExit as ex:
        rc = ex.code if isinstance(ex.code, int) else 1
    except BaseException:
        try:
            import traceback

            traceback.print_exc()
        except BaseException:
            pass
    os._exit(rc if isinstance(rc, int) else 1)


def _send(sock: socket.socket, msg: dict[str, Any]) -> None:
    try:
        sock.send(json.dumps(msg).encode())
    except OSError:
        pass


def zygote_main(argv: list[str]) -> int:
    """``python -m aoe_tui.serve.zygote FD [--preload MOD,...] [--cpus LIST] [--priority P] --``:
    serve fork requests on socket ``FD`` until the server closes it."""
    import gc
    import selectors
    import signal
    import threading

    fd = int(argv[0])
    opts = argv[1:]
    preload: list[str] = []
    _die_with_parent()
    from aoe_tui.serve.placement import Placement

    cpus, prio = None, "normal"
    while opts and opts[0] != "--":
        opt, value, opts = opts[0], opts[1], opts[2:]
        if opt == "--cpus":
            cpus = frozenset(int(c) for c in value.split(","))
        elif opt == "--priority":
            prio = value
        elif opt == "--preload":
            preload = [m for m in value.split(",") if m]
    Placement(cpus, prio).apply_to_self()
    sock = socket.socket(fileno=fd)
    if os.getppid() == 1:  # the server died before we got here
        return 0
    _warm_up(preload)
    if threading.active_count() != 1:  # fork() would copy a half-held lock: refuse to serve
        print("aoe serve: spectator zygote has threads after warm-up; not forking", file=sys.stderr)
        return 1
    gc.collect()
    gc.freeze()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ)
    sel.register(wake_r, selectors.EVENT_READ)
    _send(sock, {"ready": True})
    while True:
        for key, _ in sel.select():
            if key.fileobj is sock:
                try:
                    data, fds, _flags, _addr = socket.recv_fds(sock, _MAX_MSG, 4)
                except InterruptedError:
                    continue
                except OSError:
                    data, fds = b"", []
                if not data:
                    return 0
                if len(fds) != 1:
                    for extra in fds:
                        os.close(extra)
                    _send(sock, {"error": "a request without exactly one terminal"})
                    continue
                try:
                    req = json.loads(data)
                    pid = os.fork()
                except (OSError, ValueError) as err:
                    os.close(fds[0])
                    _send(sock, {"error": f"cannot start the spectator: {err}"})
                    continue
                if pid == 0:
                    _child(sock, wake_r, req, fds[0])
                os.close(fds[0])
                _send(sock, {"pid": pid})
            else:
                try:
                    while os.read(wake_r, 512):
                        pass
                except BlockingIOError:
                    pass
        while True:  # reap every child that has ended
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            rc = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            _send(sock, {"exited": pid, "rc": rc})


if __name__ == "__main__":
    sys.exit(zygote_main(sys.argv[1:]))
