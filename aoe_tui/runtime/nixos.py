"""The ``nixos`` territory provider: upstream's own path (spec §6.1, §6.2).

For each territory the manifest's ``nixos_config`` flake reference is resolved as
upstream does, built with ``nix build``, and the NixOS VM runner script
``<out>/bin/run-*-vm`` is started with cwd ``territories/<id>/vm-state`` and the
``QEMU_NET_OPTS`` / ``QEMU_OPTS`` environment of §6.1, using the §6.2 port plan
(``ssh = base + 2i``, ``service = base + 2i + 1``, MAC ``52:54:00:77:00:<hex(10+i)>``).

It needs Nix with flakes and network access to the flake inputs (nixpkgs). Neither is
available on a machine that reaches only PyPI/Debian/npm; :func:`doctor_checks` says so.

Deviation (only when KVM cannot run stock kernels, e.g. ``kvm_pvm``): NixOS's runner
picks KVM whenever ``/dev/kvm`` exists, and a stock NixOS kernel hangs on PVM, so
``-machine accel=tcg`` is appended to ``QEMU_OPTS`` (``accel="auto"``). With
``accel="native"`` the environment is upstream's plus the class's size below.

Resources (spec §1.7): ``QEMU_OPTS`` ends with ``-m <memory_mib> -smp <vcpus>`` of the seat's
class; the runner script puts ``$QEMU_OPTS`` after its own ``-m``/``-smp`` (the flake's
``virtualisation.memorySize``/``cores``) and QEMU keeps the last, so the class wins. The disk
is the flake's ``virtualisation.diskSize``, fixed at build time: after the first login the
provider reads what each guest offers (:mod:`aoe_tui.runtime.hostoffer`) and refuses a guest
whose disk is smaller than its class; a larger one runs, with a line in
:attr:`NixosProvider.notes`. A runner whose output carries the serial console
(``virtualisation.graphics = false``) reports the guest's OOM killer as the seat's
``out of memory`` (:meth:`NixosProvider.exhaustion`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from aoe_tui.domain.tomlfile import Problem, parse_toml, read_toml_source
from aoe_tui.runtime.hostoffer import HostOffer, check_host
from aoe_tui.runtime.qemu import ConsoleWatch, console_exhaustion
from aoe_tui.runtime.provider import (
    DoctorCheck,
    ProviderError,
    ProvisionError,
    Territory,
    TerritoryProvider,
    TerritoryResources,
    TerritorySpec,
    reboot_over_ssh,
    write_credential_file,
)

NIX_BIN = "nix"
#: The multicast group of the shared "arena" L2 segment (spec §6.1).
MULTICAST_GROUP = "230.77.0.1"


def resolve_flake_ref(nixos_config: str, arena_dir: Path, cwd: Path | None = None) -> str:
    """Resolve a manifest ``nixos_config`` exactly as upstream does (spec §6.1).

    The part before ``#`` is the flake path. A relative path is tried under ``arena_dir``
    first, then under ``cwd`` (default: the process cwd); the first that exists is
    canonicalized and rewritten as ``path:<absolute>#<attr>``. Absolute paths, and paths
    that resolve to nothing (``github:...`` and the like), are returned unchanged.
    """
    path_part, sep, attr = nixos_config.partition("#")
    if Path(path_part).is_absolute():
        return nixos_config
    for root in (Path(arena_dir), Path(cwd) if cwd is not None else Path.cwd()):
        candidate = root / path_part
        if path_part and candidate.exists():
            return f"path:{candidate.resolve()}{sep}{attr}"
    return nixos_config


def nix_build_command(ref: str, nix_bin: str = NIX_BIN) -> list[str]:
    """``nix --extra-experimental-features "nix-command flakes" build --no-link --print-out-paths <ref>``."""
    return [
        nix_bin, "--extra-experimental-features", "nix-command flakes",
        "build", "--no-link", "--print-out-paths", ref,
    ]  # fmt: skip


def find_vm_runner(out: Path) -> Path:
    """The single executable ``run-*-vm`` in ``<out>/bin`` (spec §6.1).

    Raises:
        ProviderError: none, or more than one, was found.
    """
    bindir = Path(out) / "bin"
    found = sorted(
        p for p in (bindir.glob("run-*-vm") if bindir.is_dir() else [])
        if p.is_file() and os.access(p, os.X_OK)
    )  # fmt: skip
    if len(found) != 1:
        names = ", ".join(p.name for p in found) or "none"
        raise ProviderError(f"nixos: expected exactly one run-*-vm in {bindir}, found {names}")
    return found[0]


def mac_for(index: int) -> str:
    """Arena-NIC MAC of territory ``index`` (spec §6.2): ``52:54:00:77:00:<hex(10+i)>``."""
    return f"52:54:00:77:00:{10 + index:02x}"


def qemu_net_opts(ssh_port: int, service_port: int, guest_service_port: int = 8080) -> str:
    """``QEMU_NET_OPTS`` of spec §6.1 (appended to the runner's slirp NIC)."""
    return (
        f"restrict=on,hostfwd=tcp:127.0.0.1:{ssh_port}-:22,"
        f"hostfwd=tcp:127.0.0.1:{service_port}-:{guest_service_port}"
    )


def qemu_opts(multicast_port: int, mac: str) -> str:
    """``QEMU_OPTS`` of spec §6.1: the second "arena" NIC on a shared multicast socket segment."""
    return f"-netdev socket,id=arena,mcast={MULTICAST_GROUP}:{multicast_port} -device virtio-net-pci,netdev=arena,mac={mac}"


@dataclass(frozen=True)
class NixosLaunch:
    """Everything needed to start one territory's VM runner.

    Attributes:
        territory: territory id.
        ref: resolved flake reference passed to ``nix build``.
        ssh_port / service_port: host ports (§6.2).
        mac: arena-NIC MAC (§6.2).
        cwd: ``<workdir>/<id>/vm-state``.
        console_log: ``<workdir>/<id>/console.log`` (runner stdout and stderr).
        env: ``QEMU_NET_OPTS`` and ``QEMU_OPTS`` (added to the inherited environment);
            ``QEMU_OPTS`` ends with the class's ``-m <memory_mib> -smp <vcpus>``.
    """

    territory: str
    ref: str
    ssh_port: int
    service_port: int
    mac: str
    cwd: Path
    console_log: Path
    env: dict[str, str]


def plan_launches(
    configs: Sequence[tuple[TerritorySpec, str]],
    *,
    arena_dir: Path,
    workdir: Path,
    base_port: int,
    multicast_port: int,
    cwd: Path | None = None,
    force_tcg: bool = False,
) -> list[NixosLaunch]:
    """Per-territory launch plans, with ports/MACs from each spec's seat index (spec §6.2).

    Raises:
        ProviderError: more than 240 territories, ports out of u16, or duplicate ports.
    """
    if len(configs) > 240:
        raise ProviderError(f"nixos: at most 240 territories (got {len(configs)})")
    launches = []
    seen: set[int] = set()
    for spec, nixos_config in configs:
        i = spec.index
        ssh, svc = base_port + 2 * i, base_port + 2 * i + 1
        if not (1 <= base_port and svc <= 65535):
            raise ProviderError(f"nixos: port {svc} for {spec.id} does not fit in 1-65535")
        if ssh in seen or svc in seen:
            raise ProviderError(f"nixos: duplicate host port for {spec.id} ({ssh}/{svc})")
        seen.update((ssh, svc))
        mac = mac_for(i)
        opts = qemu_opts(multicast_port, mac)
        if force_tcg:
            opts += " -machine accel=tcg"
        opts += f" -m {spec.resources.memory_mib} -smp {spec.resources.vcpus}"
        tdir = workdir / spec.id
        launches.append(
            NixosLaunch(
                territory=spec.id,
                ref=resolve_flake_ref(nixos_config, arena_dir, cwd),
                ssh_port=ssh,
                service_port=svc,
                mac=mac,
                cwd=tdir / "vm-state",
                console_log=tdir / "console.log",
                env={"QEMU_NET_OPTS": qemu_net_opts(ssh, svc, spec.service_port), "QEMU_OPTS": opts},
            )
        )
    return launches


def _manifest_error(problems: list[Problem]) -> ProviderError:
    return ProviderError("; ".join(map(str, problems)))


def read_nixos_configs(manifest_dir: Path) -> dict[str, str]:
    """``{territory id: nixos_config}`` from ``<manifest_dir>/arena.toml`` (spec §1.8).

    Raises:
        ProviderError: the manifest is missing or not TOML, or a territory lacks ``nixos_config``.
    """
    manifest = Path(manifest_dir) / "arena.toml"
    _, text = read_toml_source(manifest, str(manifest), _manifest_error, "arena manifest")
    data = parse_toml(text, str(manifest), _manifest_error)
    out: dict[str, str] = {}
    for k, t in enumerate(data.get("territories", [])):
        cfg = t.get("nixos_config") if isinstance(t, dict) else None
        if not isinstance(cfg, str) or not cfg.strip():
            raise ProviderError(f"{manifest}:territories[{k}].nixos_config: missing or blank")
        out[str(t.get("id"))] = cfg
    return out


class NixosProvider(TerritoryProvider):
    """NixOS VMs built from the arena's flake, upstream's way (spec §6.1).

    Args:
        manifest_dir: the arena directory (holds ``arena.toml`` and ``flake.nix``).
        workdir: ``match_dir/territories``; each VM runs in ``workdir/<id>/vm-state``.
        base_port: first host port of the §6.2 block (CLI default 26000).
        multicast_port: UDP port of the arena multicast segment (CLI default 23977).
        nixos_configs: ``{territory id: nixos_config}``; default: read from ``arena.toml``.
        accel: ``auto`` (append ``-machine accel=tcg`` when KVM cannot run stock kernels) or ``native``.
        ready_timeout_s: seconds for all territories to accept a root login (upstream: 120).
        reboot_timeout_s: seconds for SSH to return after ``systemctl reboot`` (upstream: 120).
    """

    name = "nixos"

    def __init__(
        self,
        manifest_dir: Path,
        workdir: Path,
        base_port: int = 26000,
        multicast_port: int = 23977,
        *,
        nixos_configs: Mapping[str, str] | None = None,
        accel: str = "auto",
        ready_timeout_s: float = 120.0,
        reboot_timeout_s: float = 120.0,
    ) -> None:
        self.manifest_dir = Path(manifest_dir)
        self.workdir = Path(workdir)
        self.base_port = base_port
        self.multicast_port = multicast_port
        self.nixos_configs = dict(nixos_configs) if nixos_configs is not None else None
        self.accel = accel
        self.ready_timeout_s = ready_timeout_s
        self.reboot_timeout_s = reboot_timeout_s
        self._procs: dict[str, asyncio.subprocess.Process] = {}
        self._launches: list[NixosLaunch] = []
        self._offers: dict[str, HostOffer] = {}
        self._watches: dict[str, tuple[ConsoleWatch, int]] = {}
        self._resources: dict[str, TerritoryResources] = {}

    def exhaustion(self, territory_id: str) -> list[str]:
        """``["out of memory in the territory (<memory_mib> MiB)"]`` once the guest kernel's
        OOM killer line shows in the runner's output (``console.log``; only when it carries
        the serial console), else ``[]``. Reads only the new bytes; never raises."""
        return console_exhaustion(self._watches, territory_id)

    def limits(self, territory_id: str) -> dict[str, object]:
        """``{"vcpus", "memory_mib"`` (the class's, passed as ``-smp``/``-m``), ``"disk_mib"``
        (the size of the guest's ``/``, from the flake), ``"enforced": ["cpu", "memory",
        "disk"], "not_enforced": {"tasks": ...}, "offered": {...}}``; ``{}`` for an unknown
        territory. Never raises."""
        res = self._resources.get(territory_id)
        if res is None:
            return {}
        offer = self._offers.get(territory_id)
        out: dict[str, object] = {
            "vcpus": res.vcpus, "memory_mib": res.memory_mib,
            "disk_mib": offer.disk_mib if offer is not None else None,
            "enforced": ["cpu", "memory", "disk"],
            "not_enforced": {"tasks": "the guest kernel's own (no limit set by the provider)"},
        }
        if offer is not None:
            out["offered"] = offer.as_dict()
        return out

    def plan(self, specs: Sequence[TerritorySpec]) -> list[NixosLaunch]:
        """The launch plans for ``specs`` (no side effects; used by ``provision`` and tests).

        Raises:
            ProviderError: a territory has no ``nixos_config``, or the port plan is invalid.
        """
        configs = self.nixos_configs if self.nixos_configs is not None else read_nixos_configs(self.manifest_dir)
        pairs = []
        for spec in specs:
            if spec.id not in configs:
                raise ProviderError(f"nixos: no nixos_config for territory {spec.id}")
            pairs.append((spec, configs[spec.id]))
        force_tcg = False
        if self.accel == "auto":
            from aoe_tui.runtime.qemu import kvm_status

            force_tcg = Path("/dev/kvm").exists() and not kvm_status()[0]
        return plan_launches(
            pairs,
            arena_dir=self.manifest_dir,
            workdir=self.workdir,
            base_port=self.base_port,
            multicast_port=self.multicast_port,
            force_tcg=force_tcg,
        )

    async def _build(self, launch: NixosLaunch) -> Path:
        proc = await asyncio.create_subprocess_exec(
            *nix_build_command(launch.ref), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        out, err = await proc.communicate()
        if proc.returncode != 0:
            last = (err.decode(errors="replace").strip().splitlines() or [""])[-1]
            raise ProvisionError(f"{launch.territory}: nix build {launch.ref} failed: {last}")
        paths = out.decode().split()
        if not paths:
            raise ProvisionError(f"{launch.territory}: nix build {launch.ref} printed no output path")
        return find_vm_runner(Path(paths[-1]))

    async def provision(self, specs: Sequence[TerritorySpec]) -> list[Territory]:
        """Build every territory's VM, boot them concurrently, wait for root SSH on all.

        Each guest's disk is then held to its class (:func:`~aoe_tui.runtime.hostoffer.check_host`).

        Raises:
            ProvisionError: nix missing, a build failed, a port taken, SSH not ready in
                ``ready_timeout_s``, or a guest smaller than its class (the flake's disk);
                every started VM is stopped first (upstream ``PartialBoot``).
        """
        from aoe_tui.runtime.qemu import port_in_use
        from aoe_tui.runtime.ssh import wait_ready

        if shutil.which(NIX_BIN) is None:
            raise ProvisionError("nixos: nix not found in PATH; install Nix with flakes (see nixos/README.md)")
        try:
            self._launches = self.plan(specs)
            for la in self._launches:
                for p in (la.ssh_port, la.service_port):
                    if port_in_use(p):
                        raise ProvisionError(f"nixos: host port 127.0.0.1:{p} is already in use; choose another --base-port")
            runners = await asyncio.gather(*(self._build(la) for la in self._launches))
        except ProviderError as err:
            raise ProvisionError(str(err)) from err
        try:
            for la, runner in zip(self._launches, runners, strict=True):
                la.cwd.mkdir(parents=True, exist_ok=True)
                with open(la.console_log, "ab") as logf:
                    self._procs[la.territory] = await asyncio.create_subprocess_exec(
                        str(runner), cwd=la.cwd, env={**os.environ, **la.env},
                        stdin=subprocess.DEVNULL, stdout=logf, stderr=logf, start_new_session=True,
                    )  # fmt: skip
            by_id = {s.id: s for s in specs}
            for la in self._launches:
                self._resources[la.territory] = by_id[la.territory].resources
                self._watches[la.territory] = (ConsoleWatch(la.console_log), by_id[la.territory].resources.memory_mib)
            await asyncio.gather(
                *(
                    wait_ready("127.0.0.1", la.ssh_port, by_id[la.territory].password, timeout_s=self.ready_timeout_s, interval_s=0.5)
                    for la in self._launches
                )
            )
            await asyncio.gather(*(self._check_offer(la, by_id[la.territory]) for la in self._launches))
        except (TimeoutError, OSError) as err:
            await self.teardown()
            raise ProvisionError(f"nixos: partial boot: {err}") from err
        except BaseException:
            await self.teardown()
            raise
        result = []
        for la in self._launches:
            spec = by_id[la.territory]
            cred = write_credential_file(
                self.workdir / la.territory / "credential.env", spec.password, {"AOE_SSH_PORT": str(la.ssh_port)}
            )
            result.append(
                Territory(la.territory, "127.0.0.1", la.ssh_port, la.service_port, spec.password, cred, {"mac": la.mac})
            )
        return result

    async def _check_offer(self, la: NixosLaunch, spec: TerritorySpec) -> None:
        """Hold the guest's disk (the flake's) to its class over one root login (see
        :func:`check_host`; its CPUs and memory are the class's own ``-smp``/``-m``).

        Raises:
            ProvisionError: the guest is smaller than its class.
        """
        import asyncssh

        from aoe_tui.runtime.ssh import connect

        try:
            conn = await connect("127.0.0.1", la.ssh_port, spec.password)
        except (asyncssh.Error, OSError, asyncio.TimeoutError) as err:
            raise ProvisionError(f"{spec.id}: root login on 127.0.0.1:{la.ssh_port} failed after boot: "
                                 f"{type(err).__name__}: {err}".rstrip(": ")) from None
        try:
            offer = await check_host(conn, spec, who=f"guest {spec.id} (127.0.0.1:{la.ssh_port})",
                                     provider=self.name, notes=self.notes, figures=("disk",))
        finally:
            conn.close()
        if offer is not None:
            self._offers[spec.id] = offer

    async def reboot(self, territory: Territory) -> None:
        """Spec §3.4: guest-initiated ``systemctl reboot``; the runner's QEMU survives.

        Raises:
            RebootError: SSH never stopped (30 s) or never came back (``reboot_timeout_s``),
                or the VM runner's process exited during the reboot (at once, with its
                status: it is never relaunched, so nothing would come back).
            TerritoryRefusedError: the guest's SSH server refuses the root login
                (``reboot_over_ssh``: before the reboot at once, after it within 10 s).
        """
        proc = self._procs.get(territory.id)

        def exited() -> str | None:
            if proc is None or proc.returncode is None:
                return None
            return f"the VM runner (pid {proc.pid}) exited with status {proc.returncode}"

        await reboot_over_ssh(territory, reboot_timeout_s=self.reboot_timeout_s, exited=exited)

    async def teardown(self) -> None:
        """Kill every runner's process group and remove ``vm-state`` and credential files."""
        for tid, proc in list(self._procs.items()):
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
                try:
                    await asyncio.wait_for(proc.wait(), 10)
                except asyncio.TimeoutError:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    await proc.wait()
            del self._procs[tid]
        for la in self._launches:
            shutil.rmtree(la.cwd, ignore_errors=True)
            with contextlib.suppress(FileNotFoundError):
                (la.cwd.parent / "credential.env").unlink()


def _github_reachable(timeout_s: float = 2.0) -> bool:
    try:
        with socket.create_connection(("api.github.com", 443), timeout=timeout_s):
            return True
    except OSError:
        return False


def doctor_checks(*, probe_network: bool = True) -> list[DoctorCheck]:
    """What the ``nixos`` provider needs: ``nix`` (flakes), network access to nixpkgs, QEMU.

    ``probe_network=False`` skips the one TCP connect to ``api.github.com:443`` (tests).
    """
    checks: list[DoctorCheck] = []
    nix = shutil.which(NIX_BIN)
    checks.append(
        DoctorCheck(
            "nixos", "nix", nix is not None, nix or "not found in PATH",
            "" if nix else "sh <(curl -L https://nixos.org/nix/install) --daemon  (or: apt-get install nix-bin)",
        )  # fmt: skip
    )
    if nix is None:
        checks.append(
            DoctorCheck("nixos", "nixpkgs", False, "cannot build NixOS guests without nix", "install nix (above)")
        )
    elif probe_network:
        ok = _github_reachable()
        checks.append(
            DoctorCheck(
                "nixos", "nixpkgs", ok,
                "github.com reachable for flake inputs" if ok
                else "github.com unreachable: the arena flake's nixpkgs input cannot be fetched",
                "" if ok else "allow HTTPS to github.com (or pre-fetch the flake inputs into the nix store)",
            )  # fmt: skip
        )
    qemu = shutil.which("qemu-system-x86_64")
    checks.append(
        DoctorCheck("nixos", "qemu-system-x86_64", qemu is not None, qemu or "not found in PATH",
                    "" if qemu else "./setup.sh")  # fmt: skip
    )
    checks.append(DoctorCheck("nixos", "limits", True, "enforced from each seat's class: cpu (-smp), memory (-m); "
                              "disk: the flake's diskSize, compared with the class (smaller: refused); "
                              "tasks: the guest kernel's own"))
    return checks


__all__ = [
    "NixosLaunch",
    "NixosProvider",
    "doctor_checks",
    "find_vm_runner",
    "mac_for",
    "nix_build_command",
    "plan_launches",
    "qemu_net_opts",
    "qemu_opts",
    "read_nixos_configs",
    "resolve_flake_ref",
]
