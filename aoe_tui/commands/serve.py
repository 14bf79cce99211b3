"""``aoe serve SEASON_DIR``: let spectators watch a season over SSH (issue 7).

``ssh -t -p PORT HOST`` gives a known key the live, read-only spectator TUI
(``aoe watch``) in its own process and PTY; ``ssh -p PORT HOST standings
[--format md|csv|json|html]`` prints the standings. Public-key auth only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

from aoe_tui.errors import AoeError, UsageError
from aoe_tui.serve.placement import PRIORITIES

DEFAULT_HOST_KEY_NAME = "serve_host_ed25519_key"


def default_host_key() -> Path:
    """``<user config dir>/aoe-tui/serve_host_ed25519_key`` (platformdirs)."""
    from platformdirs import user_config_dir

    return Path(user_config_dir("aoe-tui")) / DEFAULT_HOST_KEY_NAME


def add_limit_args(p: argparse.ArgumentParser) -> None:
    """The options ``aoe serve`` and ``aoe run --serve-ssh`` share."""
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--host-key", type=Path, default=None, metavar="FILE",
                   help="private host key; created (Ed25519, mode 0600) if missing "
                        f"(default: <user config>/aoe-tui/{DEFAULT_HOST_KEY_NAME})")
    p.add_argument("--max-sessions", type=int, default=100, metavar="N",
                   help="spectator TUIs at once, all clients together (default 100; one more is told, in one line, that every seat is taken)")
    p.add_argument("--max-per-address", type=int, default=4, metavar="N",
                   help="SSH connections at once per client address (default 4)")
    p.add_argument("--cpus", default=None, metavar="LIST",
                   help="CPUs the server and its spectators may use, like 1 or 2-3, or all "
                        "(default: the upper half of this machine's CPUs, so the referee keeps the rest)")
    p.add_argument("--priority", choices=PRIORITIES, default="idle",
                   help="CPU priority of the server and its spectators: idle (default; they run only when "
                        "the race does not need the CPU), low (nice 10; for hosts the territories keep busy), "
                        "normal")


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``aoe serve``."""
    p = sub.add_parser("serve", help="serve a season's live spectator view over SSH",
                       description="Serve a read-only live view of SEASON_DIR over SSH: a PTY session gets the "
                                   "spectator TUI (aoe watch), `standings [--format md|csv|json|html]` prints "
                                   "the standings. Public-key authentication only.")
    p.add_argument("season_dir", metavar="SEASON_DIR", type=Path, help="season folder holding season.jsonl")
    p.add_argument("--port", type=int, default=2222, help="TCP port (default 2222)")
    p.add_argument("--authorized-keys", type=Path, required=True, metavar="FILE",
                   help="OpenSSH authorized_keys file of the spectators' public keys")
    add_limit_args(p)
    # internal: started by `aoe run --serve-ssh` (see ServerProcess)
    p.add_argument("--for-runner", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--final-view-s", type=float, default=None, help=argparse.SUPPRESS)
    p.set_defaults(func=_cmd_serve)


def make_config(season_dir: Path, port: int, args: argparse.Namespace):
    """A :class:`~aoe_tui.serve.server.ServeConfig` from parsed options (raises UsageError)."""
    from aoe_tui.serve.placement import Placement, default_cpus, parse_cpus
    from aoe_tui.serve.server import ServeConfig

    if not 0 <= port <= 65535:
        raise UsageError(f"--port {port}: not a TCP port")
    if args.max_sessions < 1 or args.max_per_address < 1:
        raise UsageError("--max-sessions and --max-per-address must be at least 1")
    try:
        cpus = default_cpus() if args.cpus is None else parse_cpus(args.cpus)
    except ValueError as err:
        raise UsageError(f"--cpus {args.cpus}: {err}") from None
    return ServeConfig(season_dir=Path(season_dir), host_key=args.host_key or default_host_key(),
                       authorized_keys=args.authorized_keys, host=args.host, port=port,
                       max_sessions=args.max_sessions, max_per_address=args.max_per_address,
                       placement=Placement(cpus, args.priority))


def _cmd_serve(args: argparse.Namespace) -> int:
    from aoe_tui.serve.keys import ServeError
    from aoe_tui.serve.server import SpectatorServer, configure_logging, log

    config = make_config(args.season_dir, args.port, args)
    config.allow_missing_season = args.for_runner
    configure_logging()
    # before any thread exists, so every thread inherits it
    for problem in config.placement.apply_to_self():
        log.warning("%s", problem)

    async def main() -> int:
        server = SpectatorServer(config)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        # SIGHUP (its terminal closed) stops a standalone server like SIGTERM; the runner's
        # own server (--for-runner, its own session) follows its runner, never a terminal
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            loop.add_signal_handler(sig, stop.set)
        try:
            await server.start()
        except ServeError as err:
            if not args.for_runner:
                raise
            print(f"error {err}", flush=True)
            return 1
        finished = asyncio.Event()
        runner_gone = asyncio.Event()
        if args.for_runner:
            print(f"ready {server.port} {server.host_key_fingerprint}", flush=True)
            _follow_runner(loop, sys.stdin.fileno(), finished, runner_gone)
        reason = "the server is shutting down"
        try:
            await _first(stop, runner_gone)
            if runner_gone.is_set() and not stop.is_set():
                reason = "the season runner stopped"
                if finished.is_set():
                    linger = FINAL_VIEW_S if args.final_view_s is None else args.final_view_s
                    log.info("season finished: serving the final view for %.0f s", linger)
                    reason = "the season finished; thanks for watching"
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(stop.wait(), linger)
        finally:
            await server.close(reason)
        return 0

    return asyncio.run(main())


async def _first(*events: asyncio.Event) -> None:
    """Wait until any of ``events`` is set."""
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()


def _follow_runner(loop: asyncio.AbstractEventLoop, fd: int, finished: asyncio.Event,
                   gone: asyncio.Event) -> None:
    """Read the runner's pipe ``fd``: ``finished`` sets ``finished``; end of file (the
    runner ended the server, or died) sets ``gone``."""
    seen = bytearray()

    def readable() -> None:
        try:
            data = os.read(fd, 4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        seen.extend(data[:64])
        if b"finished" in seen:
            finished.set()
        if not data:
            loop.remove_reader(fd)
            gone.set()

    os.set_blocking(fd, False)
    loop.add_reader(fd, readable)


def add_run_args(p: argparse.ArgumentParser) -> None:
    """Add ``--serve-ssh PORT`` (+ ``--authorized-keys`` and the limits) to ``aoe run``."""
    g = p.add_argument_group("spectators over SSH (aoe serve beside the runner)")
    g.add_argument("--serve-ssh", type=int, default=None, metavar="PORT",
                   help="also serve the live spectator view over SSH on PORT (needs --authorized-keys)")
    g.add_argument("--authorized-keys", type=Path, default=None, metavar="FILE",
                   help="OpenSSH authorized_keys file of the spectators' public keys")
    add_limit_args(g)


#: seconds ``aoe run --serve-ssh`` keeps serving the final view once the season finished
FINAL_VIEW_S = 60.0
#: times ``aoe run --serve-ssh`` restarts a spectator server that died under it
MAX_RESTARTS = 3


class ServerProcess:
    """``aoe serve --for-runner`` as a child process of ``aoe run --serve-ssh``.

    The spectator server runs in its own process, placed like its spectators
    (:mod:`aoe_tui.serve.placement`), so relaying twenty sessions never holds the
    runner's interpreter lock or delays a referee tick. Protocol: the child prints
    one line on stdout, ``ready PORT FINGERPRINT`` or ``error MESSAGE``. Its stdin is
    a pipe from the runner: ``finished`` on it means the season finished (the child
    keeps serving the final view for :data:`FINAL_VIEW_S` seconds after the pipe
    closes, then says goodbye); end of file without it — the runner stopped, or was
    killed — ends every spectator at once. A child that dies while the season runs is
    reported through ``say`` and restarted (at most :data:`MAX_RESTARTS` times). Its
    log goes to ``log`` (a binary file object; ``None`` = the runner's stderr).
    """

    def __init__(self, argv: list[str], log=None, say=None) -> None:
        self.argv = list(argv)
        self.log = log
        self.say = say or (lambda msg: None)
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.host_key_fingerprint = ""
        self.restarts = 0
        #: set by the runner when the season finished (the final view stays up)
        self.finished = False
        self._stopping = False

    @classmethod
    def for_args(cls, season_dir: Path, port: int, args: argparse.Namespace, log=None, say=None) -> ServerProcess:
        """The child for ``aoe run``'s parsed ``--serve-ssh`` options (checks them first;
        raises :class:`UsageError`)."""
        config = make_config(season_dir, port, args)
        argv = [sys.executable, "-m", "aoe_tui.cli", "serve", str(Path(season_dir).resolve()),
                "--port", str(port), "--host", config.host, "--host-key", str(Path(config.host_key).resolve()),
                "--authorized-keys", str(Path(config.authorized_keys).resolve()),
                "--max-sessions", str(config.max_sessions), "--max-per-address", str(config.max_per_address),
                "--cpus", config.placement.cpu_text, "--priority", config.placement.priority, "--for-runner"]
        return cls(argv, log, say)

    def start(self, timeout_s: float = 60.0) -> ServerProcess:
        """Spawn the child and wait for its ``ready`` line. Raises :class:`AoeError` with
        the child's own one-line reason when it cannot listen."""
        import selectors
        import threading

        proc = self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            stderr=self.log, start_new_session=True, close_fds=True)
        assert proc.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        line = b""
        if sel.select(timeout_s):
            line = proc.stdout.readline()
        sel.close()
        words = line.decode("utf-8", "replace").strip().split(" ", 2)
        if words[0] == "ready" and len(words) == 3:
            # the port stays the same on a restart (port 0 becomes the one first bound)
            self.port, self.host_key_fingerprint = int(words[1]), words[2]
            self.argv[self.argv.index("--port") + 1] = str(self.port)
            threading.Thread(target=self._watch, args=(proc,), name="aoe-serve-watch", daemon=True).start()
            return self
        self._end(proc, 5.0)
        if words[0] == "error" and len(words) > 1:
            raise AoeError(" ".join(words[1:]))
        raise AoeError(f"the spectator server did not start (exit {proc.returncode}); see its log for the reason")

    def _watch(self, proc: subprocess.Popen) -> None:
        rc = proc.wait()
        if self._stopping or proc is not self.proc:
            return
        if self.restarts >= MAX_RESTARTS:
            self.say(f"the spectator SSH server stopped (exit {rc}); not restarted again (restarted "
                     f"{self.restarts} times); spectators cannot connect until the season ends")
            return
        self.restarts += 1
        self.say(f"the spectator SSH server stopped (exit {rc}); restarting it ({self.restarts}/{MAX_RESTARTS})")
        try:
            self.start()
        except AoeError as err:
            self.say(f"the spectator SSH server could not restart: {err}")

    def stop(self, *, finished: bool = False, timeout_s: float = 10.0) -> int | None:
        """End the server. ``finished``: the season finished — the child keeps the final
        view up for :data:`FINAL_VIEW_S` seconds on its own and this returns at once
        (None). Otherwise close its pipe (it ends every spectator and exits), wait
        ``timeout_s`` seconds, then SIGTERM and SIGKILL; returns its exit code."""
        self._stopping = True
        proc = self.proc
        if proc is None:
            return None
        if finished and proc.poll() is None and proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.write(b"finished\n")
                proc.stdin.flush()
                proc.stdin.close()
                return None
        return self._end(proc, timeout_s)

    @staticmethod
    def _end(proc: subprocess.Popen, timeout_s: float) -> int | None:
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        for sig, wait_s in ((None, timeout_s), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
            if sig is not None and proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(sig)
            try:
                return proc.wait(wait_s)
            except subprocess.TimeoutExpired:
                continue
        return proc.poll()


#: ``aoe run`` options that only mean something with ``--serve-ssh``
_SERVE_ONLY = ("authorized_keys", "host_key", "cpus")


def server_log_path() -> Path:
    """Where ``aoe run --serve-ssh`` appends its spectator server's log:
    ``<user log dir>/aoe-tui/serve-ssh.log`` (platformdirs; ``$XDG_STATE_HOME/aoe-tui/log``)."""
    from platformdirs import user_log_dir

    return Path(user_log_dir("aoe-tui")) / "serve-ssh.log"


@contextmanager
def serving(args: argparse.Namespace, season_dir: Path, *, headless: bool):
    """Run the spectator server beside a block when ``args.serve_ssh`` is set (else no-op).

    The server is a child process (:class:`ServerProcess`), ended with the block: at
    once when the block raises or the season did not finish, else after showing the
    final view for :data:`FINAL_VIEW_S` seconds (set ``server.finished = True`` inside
    the block when the season finished). Its log lines (connects, sessions, views: INFO)
    are appended to :func:`server_log_path`, in the TUI (which owns the terminal) and
    ``headless`` alike, so headless output stays one line per state change; the path is
    said once on stderr. What the runner itself says about the server (the ``ssh``
    command, a restart) is one ``aoe: ...`` line on stderr when ``headless``, else a line
    in that log. Raises :class:`UsageError` without ``--authorized-keys`` (or with serve
    options but no ``--serve-ssh``) and :class:`AoeError` when the server cannot start or
    its log cannot be opened.
    """
    port = getattr(args, "serve_ssh", None)
    if port is None:
        given = [f"--{name.replace('_', '-')}" for name in _SERVE_ONLY if getattr(args, name, None) is not None]
        if given:
            raise UsageError(f"{', '.join(given)} only apply with --serve-ssh PORT")
        yield None
        return
    if args.authorized_keys is None:
        raise UsageError("--serve-ssh needs --authorized-keys FILE")
    server = ServerProcess.for_args(season_dir, port, args)  # checks the options first
    log_path = server_log_path()
    try:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_file = open(log_path, "ab")  # noqa: SIM115 - closed below
    except OSError as err:
        raise AoeError(f"{log_path}: cannot open the spectator server's log: {err.strerror or err}") from None
    server.log = log_file
    if headless:
        def say(msg: str) -> None:
            print(f"aoe: {msg}", file=sys.stderr, flush=True)
    else:
        def say(msg: str) -> None:
            with contextlib.suppress(OSError, ValueError):
                log_file.write(f"aoe run: {msg}\n".encode())
                log_file.flush()
    server.say = say
    try:
        print(f"aoe: spectator SSH server log: {log_path}", file=sys.stderr, flush=True)
        server.start()
        print(f"aoe: spectators: ssh -t -p {server.port} cup@{args.host}  (host key {server.host_key_fingerprint})",
              file=sys.stderr, flush=True)
        yield server
    finally:
        server.stop(finished=server.finished)
        if server.finished:
            print(f"aoe: spectators keep the final view for {FINAL_VIEW_S:.0f} s", file=sys.stderr, flush=True)
        log_file.close()
