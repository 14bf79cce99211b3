"""The territory provider interface shared by every runtime backend.

A *territory* is one equivalent blank Linux host (a seat) that one agent turns
into a durable service. Providers (``container``, ``qemu``, ``ssh``,
``nixos``) create them, reboot them on the referee's request (spec §3.4) and
tear them down. The referee and adapters only ever see :class:`Territory`.

Guest contract (spec §6, issue "Real local territories"): systemd as PID 1,
root password SSH, the dormant ``builder-app.service`` slot, no internet,
hostname = territory id.
"""

from __future__ import annotations

import abc
import asyncio
import shlex
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from aoe_tui.errors import AoeError
from aoe_tui.fsio import write_atomic

if TYPE_CHECKING:  # pragma: no cover
    import asyncssh


class ProviderError(AoeError):
    """A provider could not do what was asked (missing tool or image, port taken, boot failed).

    The message is one line naming the territory and the cause. The referee turns
    it into an ``infrastructure_failure`` event with source ``arena``.
    """


class ProvisionError(ProviderError):
    """One or more territories could not be provisioned (nothing is left running)."""


class RebootError(ProviderError):
    """A territory's reboot did not complete: SSH never went down, or never came back."""


class TerritoryRefusedError(RebootError):
    """The territory came back up after the referee's reboot but refuses the referee.

    The guest booted (the provider saw it from the host side: a container's init running
    and its boot finished, or a server answering on the SSH port that rejects the root
    login), so this is the player's doing (sshd disabled, the password or PAM changed, port
    22 firewalled), not the infrastructure's: the referee fails the milestone and charges
    it to that territory alone. The message is one line naming the territory and what the
    provider saw.
    """


#: default tasks limit of a territory (processes plus threads: cgroup ``pids.max``), ours:
#: upstream's classes have no such field (§1.7). Enough for a coding agent's harness, ``make``,
#: a node or JVM build and a few servers on a 1-vCPU, 768 MiB class. Measured
#: (``benchmarks/greedy_seat.py --greed fork``, docs/territories.md): a fork bomb held at
#: 2048 tasks slowed its rivals' time to durable by +26 % (tick lateness p99 349 ms), held at
#: 512 by +2.4 % (p99 6 ms): the kernel's work for thousands of tasks is not all charged to
#: the seat's own CPU limit.
DEFAULT_TASKS_MAX = 512


@dataclass(frozen=True)
class TerritoryResources:
    """What one seat's territory may use: its class's ``[classes.resources]`` (spec §1.7)
    plus our tasks limit.

    Attributes:
        vcpus: CPUs the guest sees and may use (``nproc``; CPU time of that many CPUs).
        memory_mib: memory in MiB (no swap beyond it).
        disk_mib: writable disk in MiB (everything the guest can write: ``/``, ``/var``, ``/tmp``).
        tasks: processes plus threads at once (ours, :data:`DEFAULT_TASKS_MAX`).
    """

    vcpus: int = 1
    memory_mib: int = 768
    disk_mib: int = 2048
    tasks: int = DEFAULT_TASKS_MAX


@dataclass(frozen=True)
class HarnessShare:
    """A host folder shared read-only into a territory before the race clock starts (an
    in-territory harness such as opencode: built and cached once on the runner, never
    copied per seat where the provider can share it).

    Attributes:
        host: the folder on the runner (absolute).
        guest: where the guest sees it (absolute path, read-only).
    """

    host: Path
    guest: str


@dataclass(frozen=True)
class TerritorySpec:
    """What the runner asks a provider for, one per seat.

    Attributes:
        id: territory id from the manifest (also the guest hostname).
        password: root password of the guest (upstream convention ``<id>-race``).
        service_port: guest TCP port of the public service (manifest ``service.port``, 8080).
        index: seat index in manifest order (0-based); decides addresses and port blocks (§6.2).
        resources: the seat's class resources (§1.7) the provider enforces.
        shares: host folders shared read-only into the guest (:class:`HarnessShare`).
    """

    id: str
    password: str
    service_port: int = 8080
    index: int = 0
    resources: TerritoryResources = field(default_factory=TerritoryResources)
    shares: tuple[HarnessShare, ...] = ()


@dataclass
class Territory:
    """A provisioned, SSH-ready territory.

    Attributes:
        id: territory id.
        host: address the runner reaches the guest on (``127.0.0.1`` for QEMU port
            forwards, the veth address such as ``10.78.3.10`` for containers).
        ssh_port: TCP port of the guest's sshd as seen from the runner.
        service_port: TCP port of the guest's service as seen from the runner.
        password: root password (never logged, never written outside ``credential_file``).
        credential_file: ``KEY=VALUE`` file in upstream's format (spec §5.1), mode 0600,
            with at least ``AOE_SSH_PASSWORD``; exported to verifiers and adapters as
            ``AOE_CREDENTIAL_FILE``.
        extra: provider-specific facts (pids, netns name, overlay dir) for teardown/debug;
            ``"cgroups"``: the host-side cgroup folders a territory runs in (container), where
            its login sessions are ended from the host (:func:`aoe_tui.runtime.cgroups.end_sessions`).
    """

    id: str
    host: str
    ssh_port: int
    service_port: int
    password: str = field(repr=False)
    credential_file: Path
    extra: dict[str, object] = field(default_factory=dict)


def write_credential_file(path: Path, password: str, extra: dict[str, str] | None = None) -> Path:
    """Write an upstream-format credential file (spec §5.1) atomically with mode 0600.

    Lines are ``KEY=<shell-quoted value>``; ``AOE_SSH_PASSWORD`` comes first.
    Returns ``path``.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [f"AOE_SSH_PASSWORD={shlex.quote(password)}"]
    for key, value in (extra or {}).items():
        lines.append(f"{key}={shlex.quote(value)}")
    return write_atomic(path, "\n".join(lines) + "\n", mode=0o600)


@dataclass(frozen=True)
class DoctorCheck:
    """One line of ``aoe doctor``: what a provider needs, whether it is present, how to fix it.

    Attributes:
        provider: provider name (``container``, ``qemu``, ``ssh``, ``nixos``).
        name: the requirement (``systemd-nspawn``, ``guest image``, ``kvm``...).
        ok: whether it is present/usable.
        detail: what was found (a path, a version, or why it is unusable).
        fix: the one command that fixes it (empty when ``ok`` or nothing can fix it here).
    """

    provider: str
    name: str
    ok: bool
    detail: str
    fix: str = ""


#: seconds a server on a rebooted territory's SSH port may keep refusing the root login before
#: ``reboot_over_ssh`` calls it the player's lockout (a booting sshd does not refuse a right
#: password: it answers once it can check it)
SSH_REFUSED_AFTER_S = 10.0


async def reboot_over_ssh(territory: Territory, *, reboot_timeout_s: float, connect_timeout_s: float = 10.0,
                          exited: Callable[[], str | None] | None = None,
                          refused_after_s: float = SSH_REFUSED_AFTER_S) -> None:
    """The guest-initiated reboot cycle of spec §3.4 over root SSH.

    Runs ``systemctl reboot``, waits up to 30 s for SSH to stop answering, then up to
    ``reboot_timeout_s`` seconds for a real login to work again (polled every 0.5 s). For
    providers whose guest reboots in place (``ssh`` hosts, ``nixos`` VMs).

    ``exited``: asked at every poll; a one-line reason (``"the VM process exited with status
    1"``) when the territory's process on this host is gone, so the reboot fails at once
    rather than at ``reboot_timeout_s``.

    Raises:
        TerritoryRefusedError: the server refused the root login before the reboot could be
            asked (decided at once, nothing rebooted), or after it for ``refused_after_s``
            seconds in a row (s; the player's lockout, decided then, not at the timeout).
        RebootError: "SSH never stopped during reboot", "SSH unavailable after reboot", or
            the process ``exited`` named is gone (its reason).
    """
    import asyncssh

    from aoe_tui.runtime.ssh import login_refusal, probe, run, wait_down

    host, port, password = territory.host, territory.ssh_port, territory.password

    def check_exited() -> None:
        why = exited() if exited is not None else None
        if why:
            raise RebootError(f"{territory.id}: {why} during the reboot")

    try:
        await run(host, port, password, "systemctl reboot", timeout_s=15, connect_timeout_s=connect_timeout_s)
    except asyncssh.PermissionDenied:
        raise TerritoryRefusedError(
            f"territory {territory.id} refused the referee before the reboot: the SSH server on port {port} "
            "refused the root password login, so the referee could not ask it to reboot") from None
    except Exception:  # noqa: BLE001 - the session dies with the guest; only the cycle below counts
        pass
    check_exited()
    try:
        await wait_down(host, port, password, timeout_s=30)
    except TimeoutError:
        raise RebootError(f"{territory.id}: SSH never stopped during reboot (30 s)") from None
    loop = asyncio.get_running_loop()
    deadline = loop.time() + reboot_timeout_s
    refused_since: float | None = None
    while True:
        check_exited()
        if await probe(host, port, password, connect_timeout_s=connect_timeout_s):
            return
        check_exited()
        why = await login_refusal(host, port, password, connect_timeout_s=connect_timeout_s)
        now = loop.time()
        if why is None:
            refused_since = None
        else:
            refused_since = now if refused_since is None else refused_since
            if now - refused_since >= refused_after_s:
                raise TerritoryRefusedError(
                    f"territory {territory.id} refused the referee after the reboot: {why} "
                    f"for {refused_after_s:.0f} s")
        if now >= deadline:
            await raise_if_refused(territory)
            raise RebootError(f"{territory.id}: SSH unavailable after reboot ({reboot_timeout_s:.0f} s)")
        await asyncio.sleep(0.5)


def settle(*tasks: asyncio.Future) -> None:
    """Cancel ``tasks`` (a reboot's readiness and lockout watchers) and retrieve the
    exception of any that already ended with one, so asyncio never logs "Task exception was
    never retrieved" (a traceback on the operator's terminal) for a watcher that lost the race."""
    for t in tasks:
        t.cancel()
        if t.done() and not t.cancelled():
            t.exception()


async def raise_if_refused(territory: Territory, *, seen: str = "") -> None:
    """Raise :class:`TerritoryRefusedError` if the territory's SSH port answers but refuses
    the root login (see :func:`aoe_tui.runtime.ssh.login_refusal`); return otherwise.

    ``seen``: what the provider already saw from the host side (e.g. "its boot finished"),
    added to the message.
    """
    from aoe_tui.runtime.ssh import login_refusal

    why = await login_refusal(territory.host, territory.ssh_port, territory.password)
    if why is not None:
        raise TerritoryRefusedError(
            f"territory {territory.id} refused the referee after the reboot: {why}{'; ' + seen if seen else ''}"
        )


class TerritoryProvider(abc.ABC):
    """Creates, reboots and destroys territories for one heat.

    One provider instance serves one heat (one match). ``teardown`` must be safe
    to call at any time, more than once, and after a partial ``provision``.

    Usage::

        provider = ContainerProvider(workdir=match_dir / "territories", ...)
        try:
            territories = await provider.provision(specs)
            ...
        finally:
            await provider.teardown()
    """

    #: Short provider name as used on the command line (``container``, ``qemu``, ``ssh``, ``nixos``).
    name: str = ""

    @abc.abstractmethod
    async def provision(self, specs: Sequence[TerritorySpec]) -> list[Territory]:
        """Boot one territory per spec concurrently and return them SSH-ready, in spec order.

        Ready means a real root login over SSH ran a command (a TCP accept is not enough).

        Raises:
            ProvisionError: a territory could not be created or never became ready; every
                territory that was started has been torn down before this is raised.
        """

    @abc.abstractmethod
    async def reboot(self, territory: Territory) -> None:
        """Reboot the guest OS and return once root SSH works again (spec §3.4).

        Runs ``systemctl reboot`` in the guest, waits for SSH to stop answering, then for a
        real login to succeed. State on the guest's disk persists.

        Raises:
            RebootError: SSH never stopped (30 s) or never came back (``reboot_timeout_s``).
        """

    def exhaustion(self, territory_id: str) -> list[str]:
        """The limits territory ``territory_id`` has run into so far, one phrase each, e.g.
        ``out of memory in the territory (768 MiB)``, ``out of tasks in the territory
        (2048)``, ``disk full in the territory (2048 MiB)``; ``[]`` when none (or the
        provider cannot tell). Running out of its own resources is the player's doing,
        never an infrastructure failure: the referee charges it to that seat alone.

        Cheap (reads a few counters), blocking-safe on the event loop; never raises.
        """
        return []

    def limits(self, territory_id: str) -> dict[str, object]:
        """What the provider enforces for ``territory_id`` (for ``aoe-extra.json``):
        ``{"vcpus": 1, "memory_mib": 768, "disk_mib": 2048, "tasks": 512, "enforced":
        ["cpu", "memory", "tasks", "disk"], ...}``; ``{}`` when it enforces nothing. Never raises."""
        return {}

    @property
    def notes(self) -> list[str]:
        """One-line warnings about this heat's territories (e.g. an SSH host larger than its
        class), appended by the provider; the heat prints each and writes them to
        ``aoe-extra.json`` ``territory_notes``."""
        return self.__dict__.setdefault("_notes", [])

    @abc.abstractmethod
    async def teardown(self) -> None:
        """Stop every territory and remove every process, mount, namespace, link and overlay.

        Never raises for an already-gone territory; safe to call repeatedly.
        """

    @asynccontextmanager
    async def ssh(self, territory: Territory, *, connect_timeout_s: float = 10.0) -> AsyncIterator[asyncssh.SSHClientConnection]:
        """Open a root SSH session (password auth, no host-key check) to ``territory``.

        Yields an ``asyncssh.SSHClientConnection``; closes it on exit.

        Raises:
            asyncssh.Error / OSError: the connection or login failed.
        """
        from aoe_tui.runtime.ssh import connect

        conn = await connect(
            territory.host, territory.ssh_port, territory.password, connect_timeout_s=connect_timeout_s
        )
        try:
            yield conn
        finally:
            conn.close()
            await conn.wait_closed()
