"""A reboot decides as soon as the evidence is in, not at ``reboot_timeout_s``.

Against a real SSH server (asyncssh, in this process, on a real TCP port) standing in for a
guest's sshd: ``systemctl reboot`` closes it (the guest goes down) and, after a moment, it
listens again on the same port (the guest came back), accepting the root password, refusing
it (the player's lockout), or never (a guest that did not come back). The territory's process
on the host is a real process that exits when the reboot is asked.

* :func:`reboot_over_ssh` (``ssh`` hosts, ``nixos`` VMs): a server that refuses the root login
  before the reboot is the player's lockout at once, with nothing rebooted; after the reboot,
  once it has refused for :data:`SSH_REFUSED_AFTER_S` seconds in a row (not at the timeout).
  A server that refuses a few logins while booting and then takes the password is no lockout.
* ``nixos``: the VM runner's process exiting during the reboot fails it at once, naming the
  pid and exit status (the runner is never relaunched, so nothing would come back).
* ``qemu``: QEMU exiting with a status other than 0 during the reboot (the guest's reset under
  ``-no-reboot`` exits 0) fails it at once, although the supervisor relaunches QEMU.

Every reboot here has ``reboot_timeout_s=600`` and is bounded by ``asyncio.wait_for(…, 60)``:
the code before this change waited the whole 600 s.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncssh
import pytest

from aoe_tui.runtime.nixos import NixosProvider
from aoe_tui.runtime.provider import (
    SSH_REFUSED_AFTER_S,
    RebootError,
    Territory,
    TerritoryRefusedError,
    TerritorySpec,
    reboot_over_ssh,
)
from aoe_tui.runtime.qemu import PortPlan, QemuProvider, _Guest
from tests.ssh_support import password_server

PASSWORD = "b1-race"
BOUND_S = 60  # every reboot below is given this long; the timeout it must not wait for is 600 s


class Guest:
    """A guest's sshd. ``before``/``after``: ``"accept"`` or ``"refuse"`` the root password
    before and after the reboot; ``after="never"``: it does not come back. ``refuse_first``:
    logins refused after the reboot before ``after`` holds (a booting guest). ``marker``:
    created when ``systemctl reboot`` is asked (the host process's cue to exit)."""

    def __init__(self, marker: Path, *, before: str = "accept", after: str = "accept", refuse_first: int = 0) -> None:
        self.marker, self.before, self.after, self.refuse_first = marker, before, after, refuse_first
        self.rebooted = False
        self.logins_after = 0
        self.commands: list[str] = []
        self.server: asyncssh.SSHAcceptor | None = None
        self.port = 0

    def _check(self, username: str, password: str) -> bool:
        if not self.rebooted:
            return self.before == "accept" and password == PASSWORD
        self.logins_after += 1
        return self.logins_after > self.refuse_first and self.after == "accept" and password == PASSWORD

    def _process(self, proc: asyncssh.SSHServerProcess) -> None:
        self.commands.append(proc.command or "")
        proc.exit(0)
        if proc.command == "systemctl reboot":
            self.rebooted = True
            self.marker.touch()
            assert self.server is not None
            self.server.close()
            if self.after != "never":
                asyncio.get_running_loop().call_later(1.0, lambda: asyncio.ensure_future(self._listen()))

    async def _listen(self) -> None:
        self.server, self.port = await password_server(self._check, port=self.port, process_factory=self._process)

    async def start(self) -> Territory:
        await self._listen()
        return Territory("b1", "127.0.0.1", self.port, self.port, PASSWORD, self.marker.parent / "cred")

    def close(self) -> None:
        if self.server is not None:
            self.server.close()


async def test_ssh_lockout_after_the_reboot_is_decided_in_seconds(tmp_path: Path) -> None:
    guest = Guest(tmp_path / "rebooted", after="refuse")
    t = await guest.start()
    try:
        with pytest.raises(TerritoryRefusedError,
                           match=rf"^territory b1 refused the referee after the reboot: the SSH server on port "
                                 rf"{t.ssh_port} refused the root password login for {SSH_REFUSED_AFTER_S:.0f} s$"):
            await asyncio.wait_for(reboot_over_ssh(t, reboot_timeout_s=600), BOUND_S)
        assert guest.commands == ["systemctl reboot"]
    finally:
        guest.close()


async def test_ssh_lockout_before_the_reboot_is_decided_at_once(tmp_path: Path) -> None:
    guest = Guest(tmp_path / "rebooted", before="refuse")
    t = await guest.start()
    try:
        with pytest.raises(TerritoryRefusedError,
                           match=rf"^territory b1 refused the referee before the reboot: the SSH server on port "
                                 rf"{t.ssh_port} refused the root password login"):
            await asyncio.wait_for(reboot_over_ssh(t, reboot_timeout_s=600), BOUND_S)
        assert guest.commands == [] and not guest.rebooted  # nothing was rebooted
    finally:
        guest.close()


async def test_ssh_refusals_while_booting_are_no_lockout(tmp_path: Path) -> None:
    guest = Guest(tmp_path / "rebooted", refuse_first=3)
    t = await guest.start()
    try:
        await asyncio.wait_for(reboot_over_ssh(t, reboot_timeout_s=600), BOUND_S)
        assert guest.commands == ["systemctl reboot", "true"] and guest.logins_after > 3
    finally:
        guest.close()


def _exits_on(marker: Path, status: int) -> list[str]:
    """A host process (the VM runner's stand-in) that runs until ``marker`` exists, then exits ``status``."""
    return ["sh", "-c", f'while [ ! -e "$0" ]; do sleep 0.1; done; exit {status}', str(marker)]


async def test_nixos_reboot_fails_at_once_when_the_vm_runner_exits(tmp_path: Path) -> None:
    guest = Guest(tmp_path / "rebooted", after="never")
    t = await guest.start()
    prov = NixosProvider(tmp_path, tmp_path / "territories", reboot_timeout_s=600)
    runner = await asyncio.create_subprocess_exec(*_exits_on(guest.marker, 3))
    prov._procs["b1"] = runner
    try:
        with pytest.raises(RebootError, match=rf"^b1: the VM runner \(pid {runner.pid}\) exited with status 3 "
                                              "during the reboot$"):
            await asyncio.wait_for(prov.reboot(t), BOUND_S)
    finally:
        guest.close()
        if runner.returncode is None:
            runner.kill()
        await runner.wait()


async def test_qemu_reboot_fails_at_once_when_qemu_exits_with_an_error(tmp_path: Path) -> None:
    """QEMU (a stand-in: the same supervisor, relaunching it on every exit) exits 1 when the
    reboot is asked; its relaunch runs but no guest answers SSH again."""
    guest = Guest(tmp_path / "rebooted", after="never")
    t = await guest.start()
    prov = QemuProvider(tmp_path / "territories", reboot_timeout_s=600, connect_timeout_s=2)
    gdir = tmp_path / "territories" / "b1"
    gdir.mkdir(parents=True)
    stand_in = f'if [ -e "$0" ]; then exec sleep 600; fi; {_exits_on(guest.marker, 1)[2]}'
    g = _Guest(TerritorySpec("b1", PASSWORD), gdir, gdir, PortPlan(0, t.ssh_port, t.ssh_port),
               cmd=["sh", "-c", stand_in, str(guest.marker)])
    prov._guests["b1"] = g
    started: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    g.task = asyncio.ensure_future(prov._supervise(g, started))
    await started
    try:
        with pytest.raises(RebootError, match=r"^b1: qemu exited with status 1 during the reboot"):
            await asyncio.wait_for(prov.reboot(t), BOUND_S)
        assert g.exits[:1] == [1]
    finally:
        guest.close()
        g.stopping = True
        if g.proc is not None and g.proc.returncode is None:
            g.proc.kill()
        await asyncio.wait_for(g.task, 30)
