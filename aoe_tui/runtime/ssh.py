"""Root password SSH to territories over asyncssh (the project's only SSH library).

Readiness is a real login that runs a command (spec §6.3; a TCP accept is not
enough: QEMU's forwarder accepts while the guest is still down).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import asyncssh


@dataclass(frozen=True)
class CommandResult:
    """Outcome of one remote command: ``exit_status`` (``None`` if killed by a signal), text output."""

    exit_status: int | None
    stdout: str
    stderr: str


async def connect(
    host: str, port: int, password: str, *, connect_timeout_s: float = 10.0, username: str = "root"
) -> asyncssh.SSHClientConnection:
    """Open a password-authenticated SSH connection with host-key checking off.

    ``connect_timeout_s`` bounds TCP connect + key exchange + auth (seconds).

    Raises:
        asyncssh.Error, OSError, asyncio.TimeoutError: the login failed.
    """
    return await asyncio.wait_for(
        asyncssh.connect(
            host,
            port=port,
            username=username,
            password=password,
            known_hosts=None,
            client_keys=None,
            agent_path=None,
            preferred_auth=("password", "keyboard-interactive"),
            login_timeout=connect_timeout_s,
            connect_timeout=connect_timeout_s,
            keepalive_interval=5,
            keepalive_count_max=3,
        ),
        timeout=connect_timeout_s + 2,
    )


async def run(
    host: str,
    port: int,
    password: str,
    command: str,
    *,
    timeout_s: float = 60.0,
    connect_timeout_s: float = 10.0,
    input: str | None = None,
) -> CommandResult:
    """Run one shell ``command`` as root and return its exit status and output.

    Raises:
        asyncssh.Error, OSError, asyncio.TimeoutError: connection failed or ``timeout_s`` passed.
    """
    conn = await connect(host, port, password, connect_timeout_s=connect_timeout_s)
    try:
        res = await asyncio.wait_for(conn.run(command, check=False, input=input), timeout=timeout_s)
    finally:
        conn.close()
    return CommandResult(res.exit_status, str(res.stdout or ""), str(res.stderr or ""))


async def probe(host: str, port: int, password: str, *, connect_timeout_s: float = 10.0) -> bool:
    """Return True iff a root login works and ``true`` runs (one attempt, never raises)."""
    try:
        res = await run(host, port, password, "true", timeout_s=connect_timeout_s + 5, connect_timeout_s=connect_timeout_s)
    except (asyncssh.Error, OSError, asyncio.TimeoutError, EOFError):
        return False
    return res.exit_status == 0


async def login_refusal(host: str, port: int, password: str, *, connect_timeout_s: float = 5.0) -> str | None:
    """Why a root login at ``host:port`` fails *although a server answered* there, or None.

    One attempt. Returns a one-line reason when the port answered and the login was refused
    (an SSH server that rejected the password, or something on the port that is not an SSH
    server), i.e. the guest is up but refuses the referee. Returns None when the login works
    or nothing answered (connection refused, timeout, the connection dropped before any
    reply): the guest may not be up. Never raises.
    """
    try:  # what the port says first: an SSH server greets with "SSH-"
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), connect_timeout_s)
    except (OSError, asyncio.TimeoutError):
        return None
    try:
        first = await asyncio.wait_for(reader.read(64), connect_timeout_s)
    except (OSError, asyncio.TimeoutError):
        first = b""
    finally:
        writer.close()
    if not first:
        return None  # accepted and closed, or silent (a port forward with nothing behind it)
    if not first.startswith(b"SSH-"):
        return f"port {port} answered but is not an SSH server"
    try:
        conn = await connect(host, port, password, connect_timeout_s=connect_timeout_s)
    except asyncssh.PermissionDenied:
        return f"the SSH server on port {port} refused the root password login"
    except (asyncssh.Error, OSError, asyncio.TimeoutError, EOFError):
        return None
    conn.close()
    return None


async def wait_ready(
    host: str,
    port: int,
    password: str,
    *,
    timeout_s: float = 120.0,
    interval_s: float = 0.25,
    connect_timeout_s: float = 10.0,
) -> float:
    """Poll until a root login works and ``true`` runs over it (:func:`probe`'s test; the
    login is closed); return the seconds waited. ``interval_s``: seconds between attempts
    (the reboot path polls every 0.5 s, spec §3.4).

    Raises:
        TimeoutError: no successful login within ``timeout_s`` seconds.
    """
    conn, waited = await _poll_login(host, port, password, timeout_s=timeout_s, interval_s=interval_s,
                                     connect_timeout_s=connect_timeout_s, run_true=True)
    conn.close()
    return waited


async def wait_down(host: str, port: int, password: str, *, timeout_s: float = 30.0, interval_s: float = 0.1) -> float:
    """Poll until a login *fails* (the guest went down for a reboot); return seconds waited.

    Raises:
        TimeoutError: SSH kept answering for ``timeout_s`` seconds ("SSH never stopped during reboot").
    """
    start = time.monotonic()
    while True:
        if not await probe(host, port, password, connect_timeout_s=2.0):
            return time.monotonic() - start
        if time.monotonic() - start > timeout_s:
            raise TimeoutError("SSH never stopped during reboot")
        await asyncio.sleep(interval_s)


async def wait_login(
    host: str,
    port: int,
    password: str,
    *,
    timeout_s: float = 120.0,
    interval_s: float = 0.25,
    connect_timeout_s: float = 10.0,
) -> tuple[asyncssh.SSHClientConnection, float]:
    """Poll until a root login works; return the open connection (the caller closes it)
    and the seconds waited. One login less than :func:`wait_ready` followed by another
    command: provisioning asks the boot state over the connection that proved readiness.

    Raises:
        TimeoutError: no successful login within ``timeout_s`` seconds.
    """
    return await _poll_login(host, port, password, timeout_s=timeout_s, interval_s=interval_s,
                             connect_timeout_s=connect_timeout_s, run_true=False)


async def _poll_login(host: str, port: int, password: str, *, timeout_s: float, interval_s: float,
                      connect_timeout_s: float, run_true: bool) -> tuple[asyncssh.SSHClientConnection, float]:
    """What :func:`wait_login` and :func:`wait_ready` share: a login (:func:`connect`)
    every ``interval_s`` seconds until one works — and, with ``run_true``, runs ``true``
    with exit status 0 within ``connect_timeout_s + 5`` seconds — or ``timeout_s`` seconds
    passed (``TimeoutError``). Returns the open connection and the seconds waited."""
    start = time.monotonic()
    while True:
        try:
            conn = await connect(host, port, password, connect_timeout_s=connect_timeout_s)
        except (asyncssh.Error, OSError, asyncio.TimeoutError, EOFError):
            conn = None
        if conn is not None and run_true:
            try:
                res = await asyncio.wait_for(conn.run("true", check=False), timeout=connect_timeout_s + 5)
            except (asyncssh.Error, OSError, asyncio.TimeoutError, EOFError):
                res = None
            except BaseException:  # cancelled (or anything else): the login is closed, as run() does
                conn.close()
                raise
            if res is None or res.exit_status != 0:
                conn.close()
                conn = None
        if conn is not None:
            return conn, time.monotonic() - start
        if time.monotonic() - start > timeout_s:
            raise TimeoutError(f"ssh {host}:{port} not ready after {timeout_s:.0f} s")
        await asyncio.sleep(interval_s)


async def wait_boot_finished(host: str, port: int, password: str, *, timeout_s: float = 60.0,
                             connect_timeout_s: float = 10.0,
                             conn: asyncssh.SSHClientConnection | None = None) -> str:
    """Wait until the guest's boot has finished (every start-up job done, seeds included):
    ``systemctl is-system-running --wait``, which returns ``running`` or ``degraded`` (a
    failed unit, e.g. a dormant slot) once systemd has no more start-up jobs. SSH answers
    before that, so a territory is ready only then: the starting state is "booted, seeds
    done" (upstream's guests are too slow to show the difference). Returns the state.
    ``conn``: an open login to ask over (left open), else a new one is made.

    Raises:
        TimeoutError: the boot did not finish within ``timeout_s`` seconds.
        asyncssh.Error, OSError: the login failed.
    """
    command = "systemctl is-system-running --wait"
    try:
        if conn is not None:
            done = await asyncio.wait_for(conn.run(command, check=False), timeout=timeout_s)
            return str(done.stdout or "").strip() or str(done.stderr or "").strip()
        res = await run(host, port, password, command, timeout_s=timeout_s, connect_timeout_s=connect_timeout_s)
    except asyncio.TimeoutError:
        raise TimeoutError(f"boot of {host}:{port} not finished after {timeout_s:.0f} s") from None
    return res.stdout.strip() or res.stderr.strip()


#: Run as root in a territory by :func:`end_login_sessions`: kill (SIGKILL, every process)
#: each logind session opened from the runner's address (the one this session comes
#: from), but this one; print each session id ended. Console logins and sessions from
#: other machines (an operator on an ``ssh`` provider host) are spared. Exit 3 when the
#: guest has no ``loginctl`` (no logind: nothing to tell sessions apart by).
END_SESSIONS_SH = r"""command -v loginctl >/dev/null 2>&1 || exit 3
me="${XDG_SESSION_ID:-}"
runner="${SSH_CLIENT%% *}"
for s in $(loginctl list-sessions --no-legend 2>/dev/null | awk '{print $1}'); do
  [ "$s" = "$me" ] && continue
  [ "$(loginctl show-session "$s" -p RemoteHost --value 2>/dev/null)" = "$runner" ] || continue
  loginctl kill-session --kill-whom=all --signal=KILL "$s" 2>/dev/null || continue
  loginctl terminate-session "$s" 2>/dev/null
  echo "$s"
done
true"""


async def end_login_sessions(host: str, port: int, password: str, *, timeout_s: float = 15.0) -> list[str]:
    """End every login session opened in a territory from the runner's address (the SSH
    sessions agents and verifiers open, and whatever was started from them: background
    jobs, ``nohup`` / ``setsid`` processes stay in their session's scope) except the one
    this opens to do it; console logins and sessions from elsewhere are left alone.
    Units under systemd's ``system.slice`` (a deployed ``builder-app.service``, a
    ``systemd-run`` unit) are not sessions and keep running.

    Returns the ids of the sessions ended (``[]``: none). Raises ``asyncssh.Error``,
    ``OSError`` or ``asyncio.TimeoutError`` (after ``timeout_s`` seconds in all) when the
    territory cannot be reached, :class:`RuntimeError` when it has no ``loginctl``."""
    res = await asyncio.wait_for(run(host, port, password, END_SESSIONS_SH, timeout_s=timeout_s,
                                     connect_timeout_s=min(10.0, timeout_s)), timeout=timeout_s + 1)
    if res.exit_status == 3:
        raise RuntimeError("no loginctl in the territory")
    return res.stdout.split()
