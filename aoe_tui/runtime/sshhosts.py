"""The ``ssh`` territory provider: existing hosts listed in an inventory TOML.

Use it for machines you already run (cloud VMs, lab boxes, a NixOS guest you boot
yourself). The provider never creates or destroys anything: it checks that root SSH
works, optionally runs each host's ``reset_command`` before the heat, reboots the
guest OS on the referee's request (spec §3.4), and at teardown only deletes the
credential files it wrote.

Inventory format (all tables reject unknown keys)::

    # hosts.toml
    [territories.builder-one]          # keyed by territory id (preferred)
    host = "192.0.2.10"
    port = 22                          # ssh port (default 22)
    service_port = 8080                # runner-visible service port (default: the manifest's)
    password_env = "BUILDER_ONE_PW"    # name of an environment variable holding the root password
    # password_file = "secrets/one.pw" # or a file (mode 0600, relative to this inventory) with it
    reset_command = "rm -rf /opt/builder && systemctl reset-failed"   # optional, run before the heat
    reset_timeout_seconds = 300

    [[hosts]]                          # or: a pool assigned to territories by seat index
    host = "192.0.2.11"
    password_env = "POOL_PW"

Secrets are never inline: a ``password`` key is rejected on purpose.

Resources: nothing is enforced on these hosts. After the first login the provider reads what
each host offers (``nproc``, ``MemTotal``, the size of ``/``; :mod:`aoe_tui.runtime.hostoffer`)
and compares it with the seat's class (spec §1.7): a smaller host is refused (ProvisionError,
one line), a larger one runs with a warning line in :attr:`~SshHostsProvider.notes`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from aoe_tui.domain.tomlfile import Problem, parse_toml, read_toml_source
from aoe_tui.runtime.hostoffer import HostOffer, check_host
from aoe_tui.runtime.provider import (
    DoctorCheck,
    ProviderError,
    ProvisionError,
    Territory,
    TerritoryProvider,
    TerritorySpec,
    reboot_over_ssh,
    write_credential_file,
)


class InventoryError(ProviderError):
    """The inventory TOML is missing, malformed, or names an unusable credential (file:field: message).

    Takes one message, or the :class:`~aoe_tui.domain.tomlfile.Problem` list of the shared
    TOML reader (joined with ``; ``)."""

    def __init__(self, message: str | list[Problem]) -> None:
        super().__init__(message if isinstance(message, str) else "; ".join(map(str, message)))


class HostEntry(BaseModel):
    """One existing host of the inventory (see the module docstring for the TOML)."""

    model_config = ConfigDict(extra="forbid")

    host: str = Field(min_length=1)
    port: int = Field(default=22, ge=1, le=65535)
    service_port: int | None = Field(default=None, ge=1, le=65535)
    user: str = "root"
    password_env: str | None = None
    password_file: str | None = None
    reset_command: str | None = None
    reset_timeout_seconds: float = Field(default=300, gt=0)

    @model_validator(mode="after")
    def _one_secret(self) -> HostEntry:
        if (self.password_env is None) == (self.password_file is None):
            raise ValueError("set exactly one of password_env or password_file")
        return self


class Inventory(BaseModel):
    """The whole inventory: ``territories`` keyed by id and/or a ``hosts`` pool by seat index."""

    model_config = ConfigDict(extra="forbid")

    territories: dict[str, HostEntry] = Field(default_factory=dict)
    hosts: list[HostEntry] = Field(default_factory=list)


def load_inventory(path: Path) -> Inventory:
    """Parse and validate the inventory TOML.

    Raises:
        InventoryError: missing file, TOML syntax error, or schema error, as ``<file>:<field>: <message>``.
    """
    _, text = read_toml_source(path, str(path), InventoryError, "inventory file")
    data = parse_toml(text, str(path), InventoryError)
    try:
        return Inventory.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        loc = ".".join(str(p) for p in first["loc"]) or "(top level)"
        msg = first["msg"]
        if first["type"] == "extra_forbidden":
            msg = "unknown key" + (" (inline secrets are not allowed; use password_env or password_file)" if loc.endswith("password") else "")
        more = f" (+{err.error_count() - 1} more)" if err.error_count() > 1 else ""
        raise InventoryError(f"{path}:{loc}: {msg}{more}") from None


def resolve_password(entry: HostEntry, inventory: Path, field_path: str) -> str:
    """Read an entry's root password from its env var or 0600 file (never logged).

    Raises:
        InventoryError: the env var is unset/empty, or the file is missing, empty, or
            readable by group/others.
    """
    if entry.password_env is not None:
        value = os.environ.get(entry.password_env)
        if not value:
            raise InventoryError(
                f"{inventory}:{field_path}.password_env: environment variable {entry.password_env} is not set"
            )
        return value
    assert entry.password_file is not None
    p = Path(entry.password_file).expanduser()
    if not p.is_absolute():
        p = inventory.parent / p
    try:
        st = p.stat()
    except OSError:
        raise InventoryError(f"{inventory}:{field_path}.password_file: {p} not found") from None
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise InventoryError(
            f"{inventory}:{field_path}.password_file: {p} must not be readable by group/others (chmod 600 {p})"
        )
    value = p.read_text().rstrip("\r\n")
    if not value:
        raise InventoryError(f"{inventory}:{field_path}.password_file: {p} is empty")
    return value


class SshHostsProvider(TerritoryProvider):
    """Territories on existing hosts from an inventory TOML (see module docstring).

    Args:
        inventory: path of the inventory TOML.
        workdir: folder for per-territory credential files (``workdir/<id>/credential.env``).
        ready_timeout_s: seconds to wait for the first root login (and after reset).
        reboot_timeout_s: seconds to wait for SSH after ``systemctl reboot`` (upstream: 120).
    """

    name = "ssh"

    def __init__(
        self,
        inventory: Path,
        workdir: Path,
        *,
        ready_timeout_s: float = 60.0,
        reboot_timeout_s: float = 120.0,
        connect_timeout_s: float = 10.0,
    ) -> None:
        self.inventory_path = Path(inventory)
        self.workdir = Path(workdir)
        self.ready_timeout_s = ready_timeout_s
        self.reboot_timeout_s = reboot_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self._territories: dict[str, Territory] = {}
        self._offers: dict[str, HostOffer] = {}

    def limits(self, territory_id: str) -> dict[str, object]:
        """Nothing is enforced on an existing host: ``{"enforced": [], "offered": {"vcpus",
        "memory_mib", "disk_mib"}, "not_enforced": {...}}`` (``offered``: what the host showed
        at provisioning; absent when it could not be read). Never raises."""
        out: dict[str, object] = {
            "enforced": [],
            "not_enforced": {k: "the host's own" for k in ("cpu", "memory", "disk", "tasks")},
        }
        offer = self._offers.get(territory_id)
        if offer is not None:
            out["offered"] = offer.as_dict()
        return out

    def _entry_for(self, inv: Inventory, spec: TerritorySpec, rank: int) -> tuple[HostEntry, str]:
        if spec.id in inv.territories:
            return inv.territories[spec.id], f"territories.{spec.id}"
        if rank < len(inv.hosts):
            return inv.hosts[rank], f"hosts[{rank}]"
        raise InventoryError(
            f"{self.inventory_path}:territories.{spec.id}: no host for territory {spec.id} "
            f"(add [territories.{spec.id}] or more [[hosts]])"
        )

    async def provision(self, specs: Sequence[TerritorySpec]) -> list[Territory]:
        """Check root login on each host, run its ``reset_command``, return the territories.

        The spec's ``password`` is ignored: existing hosts keep their own root password.

        Each host's offer is compared with its seat's class (``spec.resources``): a host
        with fewer vCPUs, or less memory or disk than the class (beyond the tolerances of
        :mod:`aoe_tui.runtime.hostoffer`) is refused; a larger one adds a line to :attr:`notes`.

        Raises:
            ProvisionError: inventory errors, a missing secret, wrong credentials, an
                unreachable host, a host smaller than its class, or a failing reset command
                (all hosts are checked; the message lists every failure).
        """
        try:
            inv = load_inventory(self.inventory_path)
            order = sorted(range(len(specs)), key=lambda k: specs[k].index)
            plan = []
            for k, spec in enumerate(specs):
                entry, fpath = self._entry_for(inv, spec, order.index(k))
                plan.append((spec, entry, resolve_password(entry, self.inventory_path, fpath)))
        except InventoryError as err:
            raise ProvisionError(str(err)) from err
        results = await asyncio.gather(*(self._prepare(s, e, pw) for s, e, pw in plan), return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            await self.teardown()
            for e in errors:
                if not isinstance(e, Exception):
                    raise e
            raise ProvisionError("; ".join(str(e) for e in errors))
        return [r for r in results if isinstance(r, Territory)]

    async def _prepare(self, spec: TerritorySpec, entry: HostEntry, password: str) -> Territory:
        import asyncssh

        from aoe_tui.runtime.ssh import connect, wait_ready

        where = f"{spec.id} ({entry.user}@{entry.host}:{entry.port})"
        try:
            conn = await connect(
                entry.host, entry.port, password, connect_timeout_s=self.connect_timeout_s, username=entry.user
            )
        except asyncssh.PermissionDenied:
            raise ProvisionError(f"{where}: SSH login refused: wrong credentials") from None
        except (asyncssh.Error, OSError, asyncio.TimeoutError) as err:
            raise ProvisionError(f"{where}: SSH unreachable: {type(err).__name__}: {err}".rstrip(": ")) from None
        try:
            offer = await check_host(conn, spec, who=f"host {spec.id} ({entry.host}:{entry.port})",
                                     provider=self.name, notes=self.notes)
            if offer is not None:
                self._offers[spec.id] = offer
            if entry.reset_command:
                try:
                    res = await asyncio.wait_for(
                        conn.run(entry.reset_command, check=False), timeout=entry.reset_timeout_seconds
                    )
                except asyncio.TimeoutError:
                    raise ProvisionError(
                        f"{where}: reset_command timed out after {entry.reset_timeout_seconds:.0f} s"
                    ) from None
                except (asyncssh.Error, OSError):
                    res = None  # the reset may reboot the host; readiness below decides
                if res is not None and res.exit_status not in (0, None):
                    err_line = str(res.stderr or "").strip().splitlines()[-1:] or [""]
                    raise ProvisionError(f"{where}: reset_command exited {res.exit_status}: {err_line[0]}")
        finally:
            conn.close()
        if entry.reset_command:
            try:
                await wait_ready(
                    entry.host, entry.port, password,
                    timeout_s=self.ready_timeout_s, connect_timeout_s=self.connect_timeout_s,
                )  # fmt: skip
            except TimeoutError:
                raise ProvisionError(f"{where}: SSH not available after reset_command") from None
        cred = write_credential_file(
            self.workdir / spec.id / "credential.env", password, {"AOE_SSH_PORT": str(entry.port)}
        )
        t = Territory(
            id=spec.id,
            host=entry.host,
            ssh_port=entry.port,
            service_port=entry.service_port or spec.service_port,
            password=password,
            credential_file=cred,
            extra={"user": entry.user},
        )
        self._territories[spec.id] = t
        return t

    async def reboot(self, territory: Territory) -> None:
        """Spec §3.4: ``systemctl reboot``, SSH down within 30 s, back within ``reboot_timeout_s``.

        Raises:
            RebootError: "SSH never stopped during reboot" or "SSH unavailable after reboot".
            TerritoryRefusedError: the host's SSH server refused the root login before the
                reboot (at once) or for 10 s in a row after it (the player's lockout).
        """
        await reboot_over_ssh(
            territory, reboot_timeout_s=self.reboot_timeout_s, connect_timeout_s=self.connect_timeout_s
        )

    async def teardown(self) -> None:
        """Nothing destructive: only the credential files this provider wrote are deleted."""
        for t in list(self._territories.values()):
            with contextlib.suppress(FileNotFoundError):
                t.credential_file.unlink()
        self._territories.clear()


def doctor_checks() -> list[DoctorCheck]:
    """The ``ssh`` provider needs no local tools (asyncssh is a dependency) but an inventory."""
    try:
        import asyncssh

        version = getattr(asyncssh, "__version__", "?")
        ok = True
    except ImportError:  # pragma: no cover - a declared dependency
        version, ok = "not installed", False
    return [
        DoctorCheck("ssh", "asyncssh", ok, f"asyncssh {version}", "" if ok else "./setup.sh"),
        DoctorCheck(
            "ssh", "inventory", True, "given per run with --inventory FILE (hosts you already run)"
        ),
        DoctorCheck(
            "ssh", "limits", True, "none enforced (the hosts' own); each host is compared with its seat's class: "
            "a smaller one is refused, a larger one runs with a note"
        ),
    ]


__all__ = ["HostEntry", "Inventory", "InventoryError", "SshHostsProvider", "doctor_checks", "load_inventory", "resolve_password"]
