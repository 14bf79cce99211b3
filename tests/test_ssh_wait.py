"""Waiting for a territory's SSH (``aoe_tui/runtime/ssh.py``): :func:`wait_login` and
:func:`wait_ready` against a real SSH server (asyncssh, in this process, on a real TCP
port) that refuses the first logins, then accepts them and runs commands with a chosen
exit status.

* Both retry a refused login every ``interval_s`` and succeed on the first accepted one
  (the number of logins is counted by the server, no clock involved).
* :func:`wait_login` returns the open connection that proved readiness (provisioning asks
  the boot state over it); :func:`wait_ready` needs ``true`` to run over the login (exit 0)
  and closes it.
* Neither waits past ``timeout_s``: ``TimeoutError`` naming the address.
"""

from __future__ import annotations

import asyncio

import asyncssh
import pytest

from aoe_tui.runtime import ssh
from tests.ssh_support import password_server

PASSWORD = "pw"


class Guest:
    """An SSH server whose first ``refuse`` logins are refused; then ``exit_status`` is what
    every command exits with. ``logins``: password checks so far; ``commands``: commands run."""

    def __init__(self, refuse: int, exit_status: int = 0) -> None:
        self.refuse, self.exit_status = refuse, exit_status
        self.logins = 0
        self.commands: list[str] = []

    async def start(self) -> int:
        guest = self

        def check(username: str, password: str) -> bool:
            guest.logins += 1
            return guest.logins > guest.refuse and password == PASSWORD

        def process(proc: asyncssh.SSHServerProcess) -> None:
            guest.commands.append(proc.command or "")
            proc.exit(guest.exit_status)

        self.server, port = await password_server(check, process_factory=process)
        return port

    def close(self) -> None:
        self.server.close()


@pytest.mark.parametrize("wait", ["wait_login", "wait_ready"])
async def test_waits_retry_refused_logins_until_one_works(wait):
    guest = Guest(refuse=3)
    port = await guest.start()
    try:
        if wait == "wait_login":
            conn, waited = await ssh.wait_login("127.0.0.1", port, PASSWORD, timeout_s=60, interval_s=0.05)
            try:  # the connection that proved readiness is open and usable
                assert (await conn.run("systemctl is-system-running", check=False)).exit_status == 0
            finally:
                conn.close()
            assert guest.commands == ["systemctl is-system-running"]
        else:
            waited = await ssh.wait_ready("127.0.0.1", port, PASSWORD, timeout_s=60, interval_s=0.05)
            assert guest.commands == ["true"]
        assert guest.logins == 4 and waited > 0
    finally:
        guest.close()


async def test_wait_ready_needs_true_to_run_and_wait_login_only_the_login():
    guest = Guest(refuse=0, exit_status=1)  # logins work, every command fails
    port = await guest.start()
    try:
        conn, _waited = await ssh.wait_login("127.0.0.1", port, PASSWORD, timeout_s=60, interval_s=0.05)
        conn.close()
        assert guest.logins == 1 and guest.commands == []
        with pytest.raises(TimeoutError, match=rf"ssh 127\.0\.0\.1:{port} not ready after 1 s"):
            await ssh.wait_ready("127.0.0.1", port, PASSWORD, timeout_s=1, interval_s=0.2)
        assert guest.logins > 2 and set(guest.commands) == {"true"} and len(guest.commands) == guest.logins - 1
    finally:
        guest.close()


async def test_waits_give_up_after_their_timeout():
    guest = Guest(refuse=10**6)
    port = await guest.start()
    try:
        for wait in (ssh.wait_login, ssh.wait_ready):
            with pytest.raises(TimeoutError, match=rf"ssh 127\.0\.0\.1:{port} not ready after 1 s"):
                await asyncio.wait_for(wait("127.0.0.1", port, PASSWORD, timeout_s=1, interval_s=0.2), 60)
        assert guest.commands == []
    finally:
        guest.close()


async def test_wait_ready_cancelled_while_true_runs_closes_its_login(monkeypatch):
    """Cancelled while ``true`` runs over the login (a reboot or provisioning abandoned), the
    connection is closed, as :func:`ssh.run` closed it before the two waits shared a loop."""
    running = asyncio.Event()

    class Conn:
        closed = False

        async def run(self, command, check=False):
            running.set()
            await asyncio.sleep(3600)

        def close(self):
            Conn.closed = True

    async def fake_connect(host, port, password, *, connect_timeout_s=10.0):
        return Conn()

    monkeypatch.setattr(ssh, "connect", fake_connect)
    task = asyncio.ensure_future(ssh.wait_ready("127.0.0.1", 1, PASSWORD, timeout_s=60))
    await asyncio.wait_for(running.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert Conn.closed
