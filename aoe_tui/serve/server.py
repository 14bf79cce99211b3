"""``aoe serve``: an asyncssh server giving spectators a read-only view of a season.

Policy (issue 7):

* public-key authentication only, against an OpenSSH ``authorized_keys`` file
  (re-read on every attempt); passwords, keyboard-interactive and host-based auth
  are not offered;
* sessions: a PTY gets the spectator TUI in its own process (see
  :mod:`aoe_tui.serve.session`), no PTY gets the standings as text; only the fixed
  commands ``watch``, ``standings [--format F]``, ``help`` may be exec'd; no SFTP,
  no SCP, no TCP/Unix port forwarding in either direction, no agent or X11
  forwarding, no tun/tap;
* limits: at most ``max_per_address`` connections per client address and
  ``max_sessions`` spectator TUIs in total; over a limit the client gets a one-line
  reason (an auth banner + SSH disconnect reason, or a message on the session's
  stderr) and is let go;
* the host key is created on first start (Ed25519, 0600) and kept;
* every connection, authentication result, session and disconnection is logged on
  the ``aoe_tui.serve`` logger with the client address, the key's SHA256 fingerprint,
  the terminal size and the duration; never a credential (passwords are never even
  accepted by the protocol layer).

* CPU placement: spectators (and, under ``aoe serve``, the server itself) run confined
  to a CPU set at idle priority so they never delay a referee tick
  (:mod:`aoe_tui.serve.placement`).

Binds to 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncssh

from aoe_tui.serve.keys import AuthorizedKeysFile, KeyGrant, ServeError, ensure_host_key, fingerprint, load_authorized_keys
from aoe_tui.serve.placement import Placement
from aoe_tui.serve.seats import SeatPool
from aoe_tui.serve.session import SpectatorSession, sweep_scratch
from aoe_tui.serve.views import ViewPool
from aoe_tui.serve.zygote import Zygote

__all__ = ["ServeConfig", "SpectatorServer", "ServerThread", "watch_argv"]

log = logging.getLogger("aoe_tui.serve")


def watch_argv(season_dir: Path) -> list[str]:
    """The default spectator command: ``python -m aoe_tui.cli watch SEASON_DIR``."""
    return [sys.executable, "-m", "aoe_tui.cli", "watch", str(Path(season_dir).resolve())]


@dataclass
class ServeConfig:
    """Settings of one spectator server.

    ``season_dir``: season folder (holds ``season.jsonl``); ``host_key``: private host
    key file (created if missing); ``authorized_keys``: OpenSSH authorized_keys file;
    ``host``/``port``: where to listen (port 0 = any free port, see
    :attr:`SpectatorServer.port`); ``max_sessions``: spectator TUIs at once (all
    clients); ``max_per_address``: SSH connections at once per client IP;
    ``login_timeout_s``: seconds to finish authentication; ``spectator_argv``: the
    command each PTY session runs (default :func:`watch_argv`); ``fps``: the
    ``TEXTUAL_FPS`` cap given to spectator apps (30: a frame waits 33 ms at most; one view draws
    for all its sessions, so frames are cheap); ``allow_missing_season``: start even if
    ``season_dir`` does not exist yet (``aoe run --serve-ssh`` on a new season: clients
    are told the season has not started until ``season.jsonl`` appears);
    ``placement``: CPU set and priority of the spectator processes
    (:class:`~aoe_tui.serve.placement.Placement`; default: the upper half of the CPUs,
    idle priority); ``warm_start``: fork spectators from a warm zygote process
    (:mod:`aoe_tui.serve.zygote`) instead of starting each from scratch; ``spare_view``:
    keep one spectator process on screen ahead of need, for the next new view
    (:mod:`aoe_tui.serve.views`; with ``warm_start`` only).
    """

    season_dir: Path
    host_key: Path
    authorized_keys: Path
    host: str = "127.0.0.1"
    port: int = 2222
    max_sessions: int = 100
    max_per_address: int = 4
    login_timeout_s: float = 30.0
    spectator_argv: list[str] | None = None
    fps: int = 30
    allow_missing_season: bool = False
    extra_env: dict[str, str] = field(default_factory=dict)
    placement: Placement = field(default_factory=Placement.default)
    warm_start: bool = True
    spare_view: bool = True


#: seconds between re-checks of the logged-in keys against authorized_keys (a key removed
#: from the file ends its sessions within this, plus :data:`KEYS_FAREWELL_S`)
KEYS_RECHECK_S = 1.0
#: seconds a revoked key's spectators have to read why before the connection is cut
KEYS_FAREWELL_S = 0.5

#: seconds a session waits for a zygote that is still warming up (it imports and draws one
#: frame once, at server start) before starting its spectator from scratch
ZYGOTE_WAIT_S = 15.0


@dataclass
class _ConnInfo:
    addr: str
    port: int
    since: float
    conn: Any = None
    user: str = "-"
    key_fp: str = "-"
    over: str | None = None
    #: the client's public key once authenticated, and what its authorized_keys line grants
    key: Any = None
    grant: KeyGrant | None = None
    #: set once the server ends the connection because its key's line went (or changed)
    revoked: str | None = None


class _Server(asyncssh.SSHServer):
    """Per-connection policy object (asyncssh creates one per client)."""

    def __init__(self, owner: SpectatorServer) -> None:
        self.owner = owner
        self.info: _ConnInfo | None = None

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        peer = conn.get_extra_info("peername") or ("?", 0)
        self.info = _ConnInfo(addr=str(peer[0]), port=int(peer[1]), since=time.monotonic(), conn=conn)
        self.info.over = self.owner._admit(self.info)
        log.info("connect addr=%s port=%d%s", self.info.addr, self.info.port,
                 f" refused=({self.info.over})" if self.info.over else "")

    def connection_lost(self, exc: Exception | None) -> None:
        if self.info is None:
            return
        self.owner._forget(self.info)
        reason = f" reason={type(exc).__name__}: {str(exc)[:100]}" if exc else ""
        log.info("disconnect addr=%s port=%d user=%s key=%s duration=%.1fs%s", self.info.addr, self.info.port,
                 self.info.user, self.info.key_fp, time.monotonic() - self.info.since, reason)

    def begin_auth(self, username: str) -> bool:
        assert self.info is not None
        self.info.user = username[:64]
        if self.info.over:
            msg = f"aoe serve: {self.info.over}; try again later\r\n"
            self.info.conn.send_auth_banner(msg)
            self.info.conn.disconnect(asyncssh.DISC_TOO_MANY_CONNECTIONS, msg.strip())
        return True  # authentication is always required

    # --- only public keys
    def public_key_auth_supported(self) -> bool:
        return True

    def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        assert self.info is not None
        fp = fingerprint(key)
        try:
            grant, why = self.owner.key_grant(key, self.info.addr)
        except ServeError as err:
            log.error("auth refused addr=%s key=%s: %s", self.info.addr, fp, err)
            return False
        if grant is None:
            log.warning("auth refused addr=%s user=%s key=%s (%s)", self.info.addr, self.info.user, fp, why)
            return False
        self.info.key_fp = fp
        self.info.key = key
        self.info.grant = grant
        return True

    def auth_completed(self) -> None:
        assert self.info is not None
        g = self.info.grant
        extra = ""
        if g is not None:
            extra = f" line={g.line}" + ("" if g.pty else " no-pty") + (f" command={g.command!r}" if g.command else "")
        log.info("auth ok addr=%s user=%s key=%s%s", self.info.addr, self.info.user, self.info.key_fp, extra)

    def password_auth_supported(self) -> bool:
        return False

    def kbdint_auth_supported(self) -> bool:
        return False

    def host_based_auth_supported(self) -> bool:
        return False

    # --- no forwarding of any kind
    def connection_requested(self, dest_host: str, dest_port: int, orig_host: str, orig_port: int) -> bool:
        log.warning("port forward refused addr=%s key=%s", self.info.addr if self.info else "?",
                    self.info.key_fp if self.info else "-")
        # "administratively prohibited", not asyncssh's default "Connection refused" (which
        # reads as if the target port were closed)
        raise asyncssh.ChannelOpenError(asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED,
                                        "port forwarding is not allowed on a spectator server")

    def server_requested(self, listen_host: str, listen_port: int) -> bool:
        log.warning("remote forward refused addr=%s key=%s", self.info.addr if self.info else "?",
                    self.info.key_fp if self.info else "-")
        return False

    def unix_connection_requested(self, dest_path: str) -> bool:
        return False

    def unix_server_requested(self, listen_path: str) -> bool:
        return False

    def tun_requested(self, unit: int | None) -> bool:
        return False

    def tap_requested(self, unit: int | None) -> bool:
        return False

    def session_requested(self) -> Any:
        assert self.info is not None
        if self.info.revoked:
            return False
        return SpectatorSession(self.owner, self.info)


class SpectatorServer:
    """The spectator SSH server (see the module docstring); runs on the current event loop.

    ``await start()`` checks the inputs (raises :class:`ServeError` naming the file or
    port) and starts listening; ``await close()`` stops listening, ends every
    spectator process and closes every connection. ``port`` is the bound port,
    ``host_key_fingerprint`` the SHA256 fingerprint to publish, ``spectator_pids()``
    the pids of running spectator processes.
    """

    def __init__(self, config: ServeConfig) -> None:
        self.config = config
        self._acceptor: asyncssh.SSHAcceptor | None = None
        self._per_addr: Counter[str] = Counter()
        self._conns: set[int] = set()
        self._conn_objs: dict[int, _ConnInfo] = {}
        #: the spectator seats (sessions take and release them)
        self.seats = SeatPool(self.config.max_sessions)
        #: the spectator processes and the sessions showing each (:mod:`aoe_tui.serve.views`)
        self.views = ViewPool(self)
        self.port: int = config.port
        self.host_key_fingerprint = ""
        self.host_key_created = False
        #: the warm spectator zygote (:mod:`aoe_tui.serve.zygote`), when ``warm_start``
        self.zygote: Zygote | None = None
        self._ready_task: asyncio.Task | None = None
        #: the authorized_keys file, re-read when it changes (every login, and every
        #: :data:`KEYS_RECHECK_S` while someone is logged in)
        self.authorized = AuthorizedKeysFile(config.authorized_keys)
        self._recheck_problem: str | None = None  # why the last re-check was skipped (logged once)
        self._recheck_task: asyncio.Task | None = None

    # ------------------------------------------------------------ policy hooks
    def _admit(self, info: _ConnInfo) -> str | None:
        self._conn_objs[id(info)] = info
        self._per_addr[info.addr] += 1
        if self._per_addr[info.addr] > self.config.max_per_address:
            return f"too many connections from {info.addr} (limit {self.config.max_per_address})"
        if len(self._conn_objs) > 2 * self.config.max_sessions + self.config.max_per_address:
            return f"server full ({len(self._conn_objs) - 1} connections)"
        return None

    def _forget(self, info: _ConnInfo) -> None:
        if self._conn_objs.pop(id(info), None) is not None:
            self._per_addr[info.addr] -= 1
            if self._per_addr[info.addr] <= 0:
                del self._per_addr[info.addr]

    def key_grant(self, key: asyncssh.SSHKey, addr: str) -> tuple[KeyGrant | None, str]:
        """What the authorized_keys file grants ``key`` from ``addr`` now (re-read if it
        changed): :meth:`~aoe_tui.serve.keys.AuthorizedKeysFile.grant`. Raises
        :class:`ServeError` when the file cannot be read."""
        self.authorized.refresh()
        return self.authorized.grant(key, addr)

    def recheck_keys(self) -> list[str]:
        """Re-check every logged-in connection against the authorized_keys file as it is now:
        one whose key's line is gone, refused (expired…) or grants something else is ended —
        each of its spectators is told why (:meth:`SpectatorSession.farewell`), then it is
        disconnected. Returns the fingerprints ended. A file that cannot be read or is missing
        (a rewrite that is not atomic, a move) ends nobody: it is logged once, new logins are
        refused meanwhile; an empty file is what ends every session."""
        ended: list[str] = []
        conns = [i for i in self._conn_objs.values() if i.key is not None and i.revoked is None]
        if not conns:
            return ended
        try:
            self.authorized.refresh()
            problem = (f"{self.authorized.path}: missing" if self.authorized.missing else None)
        except ServeError as err:
            problem = str(err)
        if problem != self._recheck_problem:
            self._recheck_problem = problem
            if problem is not None:  # once per change, not every second
                log.error("authorized_keys re-check skipped, open sessions kept, new logins refused: %s", problem)
        if problem is not None:
            return ended
        for info in conns:
            grant, why = self.authorized.grant(info.key, info.addr)
            if grant == info.grant:
                continue
            if grant is not None:
                why = f"its authorized_keys entry changed (now line {grant.line})"
            info.revoked = why
            ended.append(info.key_fp)
            log.warning("key revoked addr=%s key=%s (%s): ending its sessions", info.addr, info.key_fp, why)
            for session in self.seats.sessions():
                if session.conn is info:
                    session.farewell("aoe serve: your key is no longer authorized here")
            loop = asyncio.get_running_loop()
            loop.call_later(KEYS_FAREWELL_S, self._disconnect, info, "aoe serve: your key is no longer authorized")
        return ended

    @staticmethod
    def _disconnect(info: _ConnInfo, reason: str) -> None:
        try:
            info.conn.disconnect(asyncssh.DISC_NO_MORE_AUTH_METHODS_AVAILABLE, reason)
        except Exception:  # already gone
            pass

    async def _recheck_loop(self) -> None:
        while True:
            await asyncio.sleep(KEYS_RECHECK_S)
            try:
                self.recheck_keys()
            except Exception:  # never let the re-check take the server down
                log.exception("authorized_keys re-check failed")

    @property
    def session_count(self) -> int:
        """Spectator TUIs running now."""
        return len(self.seats)

    def spectator_pids(self) -> list[int]:
        """Pids of the running spectator processes (each its own process group; one per
        view, shown by one or more sessions)."""
        return self.views.pids()

    def spectator_argv(self) -> list[str]:
        """The command a PTY session runs."""
        return list(self.config.spectator_argv or watch_argv(self.config.season_dir))

    @property
    def pauses_spare(self) -> bool:
        """Whether the spare view is stopped while nobody watches it: only for the default
        spectator command, whose driver takes a SIGSTOP/SIGCONT in its stride
        (:mod:`aoe_tui.serve.views`)."""
        return not self.config.spectator_argv

    def zygote_env(self) -> dict[str, str]:
        """The zygote's environment: what every spectator shares (a minimal one, no secret
        of the server's, no colour variable: per-session ``TERM``/``HOME`` and the client's
        ``COLORTERM``/``NO_COLOR`` come with each request)."""
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
               "PYTHONDONTWRITEBYTECODE": "1", **self.child_env()}
        if "PYTHONPATH" in os.environ:
            env["PYTHONPATH"] = os.environ["PYTHONPATH"]
        return env

    def _zygote_ready(self) -> None:
        """Once the zygote is warm: start the spare view (the next new view's process)."""
        if self.config.spare_view:
            self.views.keep_spare()

    async def warm_zygote(self) -> Zygote | None:
        """The zygote to fork a spectator from, once it is warm (waits up to
        :data:`ZYGOTE_WAIT_S`); None without one (the session starts its spectator from scratch)."""
        z = self.zygote
        if z is None or not z.alive:
            return None
        if not z.ready.is_set():
            try:
                await asyncio.wait_for(z.ready.wait(), ZYGOTE_WAIT_S)
            except asyncio.TimeoutError:
                return None
        return z if z.alive else None

    def child_env(self) -> dict[str, str]:
        """Extra environment for spectator processes."""
        return {"TEXTUAL_FPS": str(self.config.fps), "AOE_SPECTATOR": "1", **self.config.extra_env}

    def season_started(self) -> bool:
        """Whether ``season.jsonl`` exists yet."""
        return (Path(self.config.season_dir) / "season.jsonl").is_file()

    def standings_text(self, fmt: str) -> str:
        """The season's current standings in ``fmt`` (``md``/``csv``/``json``/``html``)."""
        from aoe_tui.export.standings_files import render
        from aoe_tui.replay.seasondir import load_season_dir

        return render(load_season_dir(self.config.season_dir), fmt)

    # ------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Check inputs and start listening (raises :class:`ServeError`)."""
        cfg = self.config
        if not cfg.allow_missing_season and not Path(cfg.season_dir).is_dir():
            raise ServeError(f"{cfg.season_dir}: no such season folder")
        load_authorized_keys(cfg.authorized_keys)  # fail early on a bad file
        swept = sweep_scratch()
        if swept:
            log.info("removed %d scratch folder(s) of spectator servers that are gone", swept)
        key, self.host_key_created = ensure_host_key(Path(cfg.host_key))
        self.host_key_fingerprint = fingerprint(key)
        try:
            self._acceptor = await asyncssh.create_server(
                lambda: _Server(self), cfg.host, cfg.port,
                server_host_keys=[key],
                encoding=None,
                line_editor=False,
                allow_pty=True,
                agent_forwarding=False,
                x11_forwarding=False,
                allow_scp=False,
                sftp_factory=None,
                login_timeout=cfg.login_timeout_s,
                keepalive_interval=30,
                keepalive_count_max=3,
                server_version="aoe-serve",
                reuse_address=True,
            )
        except OSError as err:
            why = err.strerror or str(err)
            if "address already in use" in str(err).lower():
                why = "address already in use"
            raise ServeError(f"cannot listen on {cfg.host}:{cfg.port}: {why}") from None
        sockets = self._acceptor.sockets
        if sockets:
            self.port = sockets[0].getsockname()[1]
        self._recheck_task = asyncio.get_running_loop().create_task(self._recheck_loop())
        if cfg.warm_start:
            argv = self.spectator_argv()
            preload = [argv[2]] if argv[1:2] == ["-m"] and len(argv) > 2 else []
            self.zygote = Zygote(self.zygote_env(), cfg.placement.ctty_args(), preload)
            try:
                await self.zygote.start()
                zyg = self.zygote

                async def when_ready() -> None:
                    await zyg.ready.wait()
                    self._zygote_ready()

                self._ready_task = asyncio.get_running_loop().create_task(when_ready())
            except OSError as err:
                log.warning("cannot start the spectator zygote (%s); spectators start from scratch", err)
                self.zygote = None
        log.info("listening host=%s port=%d host_key=%s%s season=%s spectator_cpus=%s priority=%s", cfg.host,
                 self.port, self.host_key_fingerprint, " (new)" if self.host_key_created else "", cfg.season_dir,
                 cfg.placement.cpu_text, cfg.placement.priority)

    async def close(self, reason: str = "the server is shutting down") -> None:
        """Stop listening; tell every spectator ``reason`` with its terminal put back
        (:meth:`SpectatorSession.farewell`), end every spectator process, then close
        every connection."""
        if self._acceptor is not None:
            self._acceptor.close()
            await self._acceptor.wait_closed()
            self._acceptor = None
        if self._recheck_task is not None:
            self._recheck_task.cancel()
            self._recheck_task = None
        for session in self.seats.sessions():
            session.farewell(f"aoe serve: {reason}")
        for _ in range(60):  # each session ends its own spectator process (bounded)
            if not self.seats:
                break
            await asyncio.sleep(0.05)
        await self.views.close()
        for info in list(self._conn_objs.values()):
            try:
                info.conn.disconnect(asyncssh.DISC_BY_APPLICATION, f"aoe serve: {reason}")
            except Exception:  # already gone
                pass
        for _ in range(20):  # give sessions a moment to log their end
            if not self.seats:
                break
            await asyncio.sleep(0.05)
        if self._ready_task is not None:
            self._ready_task.cancel()
        if self.zygote is not None:
            await self.zygote.close()
            self.zygote = None

    async def serve_forever(self, stop: asyncio.Event | None = None) -> None:
        """``start()``, then run until ``stop`` is set (or cancelled), then ``close()``."""
        await self.start()
        try:
            await (stop.wait() if stop is not None else asyncio.Event().wait())
        finally:
            await self.close()


class ServerThread:
    """A :class:`SpectatorServer` on its own event loop in a daemon thread.

    For embedding in a program that is not an asyncio program (tests): ``start()``
    returns once the server listens (or raises its :class:`ServeError`); ``stop()``
    ends every spectator and joins the thread (``timeout_s`` seconds at most).
    ``aoe run --serve-ssh`` does not use it: there the server is a child process
    (:class:`aoe_tui.commands.serve.ServerProcess`), so relaying sessions never
    competes with the referee for the runner's interpreter lock.
    """

    def __init__(self, config: ServeConfig) -> None:
        self.server = SpectatorServer(config)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="aoe-serve", daemon=True)

    def _main(self) -> None:
        async def run() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            try:
                await self.server.start()
            except BaseException as err:
                self._error = err
                self._ready.set()
                return
            self._ready.set()
            try:
                await self._stop.wait()
            finally:
                await self.server.close()

        asyncio.run(run())

    def start(self) -> SpectatorServer:
        """Start the thread; block until listening. Raises the server's start error."""
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            self._thread.join()
            raise self._error
        return self.server

    def stop(self, timeout_s: float = 10.0) -> None:
        """Close the server (ends all spectator processes) and join the thread."""
        if self._loop is not None and self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout_s)


def configure_logging(stream: Any = None, level: int = logging.INFO) -> None:
    """Send ``aoe_tui.serve`` log lines (``time level message``) to ``stream`` (stderr).

    asyncssh's own logger is limited to warnings (its info lines are noisy).
    """
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    log.addHandler(handler)
    log.setLevel(level)
    log.propagate = False
    logging.getLogger("asyncssh").setLevel(logging.WARNING)

