"""The ``qemu`` territory provider: one QEMU VM per territory from the Debian guest image.

Each territory boots from a copy-on-write overlay (``qemu-img create -b``) of the
image's read-only ``base.qcow2``, with the image's kernel and initrd (``-kernel``/
``-initrd``). Networking is QEMU user mode with ``restrict=on`` (no route to the
host or the internet) plus two ``127.0.0.1`` host forwards per territory, laid out
as upstream's port plan (spec §6.2): ``ssh = base + 2i`` and ``service = base + 2i + 1``.

Acceleration: KVM only when a stock guest kernel can really run on it. Hosts whose
``/dev/kvm`` comes from ``kvm_pvm`` (or whose CPU lacks ``svm``/``vmx``) get TCG
(``-accel tcg -cpu max``); see ``docs/territories.md`` pitfall 1.

Reboots: QEMU runs with ``-no-reboot`` and a supervisor task relaunches the same
command line when QEMU exits. Under TCG this cold boot is 1.7-2.5x faster than an
in-place reset (``docs/territories.md`` pitfall 3); the overlay keeps the disk, the host ports stay
the same, and the guest sees an ordinary reboot (spec §3.4 only observes SSH).

Resources (spec §1.7): each guest gets its seat's class, ``spec.resources``: ``-smp vcpus``,
``-m memory_mib`` and a disk of ``disk_mib`` (the overlay's virtual size; when that is larger
than the image's, the guest's ext4 root is grown online with ``resize2fs /dev/vda`` before
the territory is ready). A disk cannot shrink below the image's (``image.DISK_SIZE``,
2048 MiB): a class asking less gets the image's size and a line in :attr:`QemuProvider.notes`.
The guest kernel's OOM killer line on the serial console is the seat's ``out of memory``
(:meth:`QemuProvider.exhaustion`).

Identity: the territory's identity (hostname and root password) goes through ``-fw_cfg name=opt/aoe/hostname,file=...``
and ``-fw_cfg name=opt/aoe/root_password,file=<0600 file>``, which the image's
``aoe-identity`` script reads, so the password never shows in ``ps``. Older images
only read ``aoe.root_password=`` from the kernel command line; then the provider
falls back to that (visible in QEMU's argv) and logs a warning.

Folder layout per territory (``workdir/<id>/``)::

    console.log      guest serial console (kept after teardown, password redacted)
    qemu.log         QEMU's own stdout/stderr (kept after teardown)
    state.json       {"pid", "ssh_port", "service_port", ...} while running (removed)
    credential.env   upstream credential file, 0600 (removed at teardown)
    disk/            overlay.qcow2, hostname + root_password (0600), monitor socket (removed at teardown)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from aoe_tui.fsio import leftover_temps, write_atomic
from aoe_tui.runtime.netalloc import NetAllocator
from aoe_tui.runtime.provider import (
    DoctorCheck,
    ProviderError,
    ProvisionError,
    RebootError,
    Territory,
    TerritoryProvider,
    TerritoryRefusedError,
    TerritorySpec,
    settle,
    raise_if_refused,
    write_credential_file,
)

if TYPE_CHECKING:  # pragma: no cover
    from aoe_tui.runtime.image import GuestImage

log = logging.getLogger(__name__)

QEMU_BIN = "qemu-system-x86_64"
QEMU_IMG = "qemu-img"
#: First port tried when no ``base_port`` is given (upstream's CLI default, spec §6.2).
AUTO_BASE_PORT = 26000
#: Automatic port blocks are searched in ``[AUTO_BASE_PORT, AUTO_PORT_LIMIT)``.
AUTO_PORT_LIMIT = 60000
#: fw_cfg items the guest's ``aoe-identity`` reads (raw values, no trailing newline).
FW_CFG_HOSTNAME = "opt/aoe/hostname"
FW_CFG_PASSWORD = "opt/aoe/root_password"
#: Base kernel command line (``docs/territories.md`` pitfall 6: ``quiet mitigations=off`` is the fastest TCG boot).
KERNEL_ARGS = "root=/dev/vda rw console=ttyS0 quiet mitigations=off"
#: A QEMU run shorter than this (seconds) counts as a crash, not a guest reboot.
_QUICK_EXIT_S = 5.0
_MAX_QUICK_EXITS = 3
#: Default of :attr:`QemuProvider.refused_after_s`: seconds a relaunched guest that shows it
#: booted (:data:`BOOT_SIGNS` on its serial console) may keep failing the root SSH login
#: before :meth:`QemuProvider.reboot` calls it the player's lockout. Measured under TCG on a
#: loaded 2-core host: a root login works 21 s after the prompt (sshd starts next to the
#: getty; the login itself is slow there).
REFUSED_AFTER_S = 45.0
#: What the guest writes on its serial console (``console.log``) once its boot reached
#: userspace: the serial getty's login prompt (``<hostname> login:``, the only line a
#: ``quiet`` boot prints) or systemd's emergency/rescue shell (a broken ``/etc/fstab``).
BOOT_SIGNS: tuple[bytes, ...] = (b" login:", b"emergency mode", b"rescue mode", b"Give root password")
#: What the guest kernel's OOM killer prints on the serial console (``Out of memory: Killed
#: process <pid> (<comm>)`` since Linux 5.x, ``Out of memory: Kill process`` before; printed at
#: KERN_ERR, so a ``quiet`` console shows it).
OOM_SIGN = b"Out of memory: Kill"
#: At most this many bytes of a console are read per :meth:`ConsoleWatch.seen` call (a
#: flooding guest costs the poller no more than this a second).
_CONSOLE_READ_MAX = 4 << 20


# --------------------------------------------------------------------------- acceleration


def _loaded_modules() -> set[str]:
    """Names of loaded kernel modules (``/proc/modules``, else ``/sys/module``)."""
    names: set[str] = set()
    try:
        for line in Path("/proc/modules").read_text().splitlines():
            if line.strip():
                names.add(line.split()[0])
    except OSError:
        pass
    try:
        names.update(p.name for p in Path("/sys/module").iterdir())
    except OSError:
        pass
    return names


def _cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def kvm_status(
    *, dev: Path = Path("/dev/kvm"), modules: set[str] | None = None, cpu_flags: set[str] | None = None
) -> tuple[bool, str]:
    """Whether KVM can run a *stock* guest kernel here, and why (one line).

    ``/dev/kvm`` alone is not enough: ``kvm_pvm`` (PVM) only runs PVM-aware guest
    kernels, and a CPU without ``svm``/``vmx`` cannot host hardware virtualization
    (``docs/territories.md`` pitfall 1). ``modules``/``cpu_flags`` override detection (tests).

    Returns:
        ``(usable, detail)``.
    """
    modules = _loaded_modules() if modules is None else modules
    flags = _cpu_flags() if cpu_flags is None else cpu_flags
    if not dev.exists():
        return False, f"{dev} is absent"
    if not os.access(dev, os.R_OK | os.W_OK):
        return False, f"{dev} is not readable and writable by this user"
    if "kvm_pvm" in modules:
        return False, "KVM here is kvm_pvm (PVM), which cannot run stock guest kernels; using TCG"
    if not flags & {"svm", "vmx"}:
        return False, "the CPU has no svm/vmx flag (nested virtualization is off); using TCG"
    vendor = "kvm_intel" if "vmx" in flags else "kvm_amd"
    return True, f"{dev} usable ({vendor})"


def accel_args(accel: str = "auto", *, kvm: tuple[bool, str] | None = None) -> tuple[list[str], str]:
    """QEMU acceleration arguments for ``accel`` in ``auto`` | ``kvm`` | ``tcg``.

    ``auto`` picks KVM only when :func:`kvm_status` says a stock guest can run.

    Returns:
        ``(args, chosen)`` where ``chosen`` is ``"kvm"`` or ``"tcg"``.

    Raises:
        ProviderError: ``accel`` is unknown, or ``kvm`` was forced but is unusable.
    """
    usable, detail = kvm if kvm is not None else kvm_status()
    if accel == "auto":
        accel = "kvm" if usable else "tcg"
    if accel == "kvm":
        if not usable:
            raise ProviderError(f"qemu: accel 'kvm' requested but {detail}")
        return ["-accel", "kvm", "-cpu", "host"], "kvm"
    if accel == "tcg":
        return ["-accel", "tcg", "-cpu", "max"], "tcg"
    raise ProviderError(f"qemu: unknown accel {accel!r} (expected auto, kvm or tcg)")


# --------------------------------------------------------------------------- ports


@dataclass(frozen=True)
class PortPlan:
    """Host ports of one territory (spec §6.2): ``ssh_port = base + 2i``, ``service_port = base + 2i + 1``."""

    index: int
    ssh_port: int
    service_port: int


def port_plan(base_port: int, count: int) -> list[PortPlan]:
    """The §6.2 port plan for ``count`` territories starting at ``base_port``.

    Raises:
        ProviderError: more than 240 territories, or the range leaves 1024-65535.
    """
    if count > 240:
        raise ProviderError(f"qemu: at most 240 territories per heat (got {count})")
    if base_port < 1024 or base_port + 2 * count - 1 > 65535:
        raise ProviderError(f"qemu: port block {base_port}..{base_port + 2 * count - 1} is outside 1024-65535")
    return [PortPlan(i, base_port + 2 * i, base_port + 2 * i + 1) for i in range(count)]


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """True if a TCP listener could not bind ``host:port`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def _pid_alive(pid: int) -> bool:
    from aoe_tui.runtime.netalloc import pid_alive

    return pid_alive(pid)


def reserve_ports(allocator: NetAllocator, owner: str, count: int, base_port: int | None) -> int:
    """Lease the §6.2 block of ``2*count`` ports for one heat and return its first port.

    With ``base_port`` the block must start exactly there (clear error otherwise); without
    it, the first free block at or above :data:`AUTO_BASE_PORT` that no other running heat
    holds is taken (``netalloc``).

    Raises:
        ProviderError: a port of the explicit block is in use or leased by another heat, or
            no block is free.
    """
    width = 2 * count
    if base_port is None:
        block = allocator.allocate_ports(owner, width, base=AUTO_BASE_PORT)
        port_plan(block.start, count)
        return block.start
    port_plan(base_port, count)
    # The lease registry first: a block another running heat holds gets the clearer message,
    # whether or not that heat's guests have bound the ports yet.
    if allocator.ports_leased(range(base_port, base_port + width)):
        raise ProviderError(
            f"qemu: ports {base_port}..{base_port + width - 1} are held by another running heat; "
            "choose another --base-port"
        )
    for p in range(base_port, base_port + width):
        if port_in_use(p):
            raise ProviderError(f"qemu: host port 127.0.0.1:{p} is already in use; choose another --base-port")
    block = allocator.allocate_ports(owner, width, base=base_port)
    if block.start != base_port:  # lost a race with another heat between the checks
        allocator.release(owner, "ports")
        raise ProviderError(
            f"qemu: ports {base_port}..{base_port + width - 1} are held by another running heat; "
            "choose another --base-port"
        )
    return block.start


# --------------------------------------------------------------------------- disk and console


def qcow2_virtual_size(path: Path) -> int:
    """The virtual size in bytes of the qcow2 image ``path``, from its header (offset 24, u64
    big-endian), without running ``qemu-img``.

    Raises:
        ProviderError: the file is unreadable or not a qcow2 image.
    """
    try:
        with open(path, "rb") as f:
            head = f.read(32)
    except OSError as err:
        raise ProviderError(f"qemu: cannot read the guest disk {path}: {err.strerror}") from None
    if len(head) < 32 or head[:4] != b"QFI\xfb":
        raise ProviderError(f"qemu: the guest disk {path} is not a qcow2 image")
    return int.from_bytes(head[24:32], "big")


def overlay_size_mib(asked_mib: int, image_bytes: int) -> int | None:
    """The virtual size (MiB) to give a territory's overlay so that its disk is ``asked_mib``
    MiB, or ``None`` when the image's own size (``image_bytes``) is kept: the class asks
    that much or less (a qcow2 overlay cannot be smaller than its backing image's data)."""
    return asked_mib if asked_mib * 2**20 > image_bytes else None


class ConsoleWatch:
    """Watches a guest's serial console (a file QEMU appends to) for the OOM killer's line
    (:data:`OOM_SIGN`), reading only the bytes added since the last call (at most
    :data:`_CONSOLE_READ_MAX` a call) and keeping a sign split between two reads.

    Args:
        path: the console file (``console.log``); it may not exist yet.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.offset = 0
        self._carry = b""
        self.oom = False

    def seen(self) -> bool:
        """True once the console has shown :data:`OOM_SIGN` (stays True). Never raises."""
        if self.oom:
            return True
        try:
            with open(self.path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size < self.offset:  # truncated or replaced: start over
                    self.offset, self._carry = 0, b""
                f.seek(self.offset)
                data = f.read(min(size - self.offset, _CONSOLE_READ_MAX))
        except OSError:
            return False
        self.offset += len(data)
        buf = self._carry + data
        if OOM_SIGN in buf:
            self.oom = True
        self._carry = buf[-(len(OOM_SIGN) - 1):]
        return self.oom


def oom_phrase(memory_mib: int) -> str:
    """The seat's exhaustion phrase for memory: ``out of memory in the territory (768 MiB)``."""
    return f"out of memory in the territory ({memory_mib} MiB)"


def console_exhaustion(watches: dict[str, tuple[ConsoleWatch, int]], territory_id: str) -> list[str]:
    """``[oom_phrase(memory_mib)]`` once territory ``territory_id``'s console watch
    (``watches``: territory -> (:class:`ConsoleWatch`, its memory_mib)) has seen the OOM
    killer, else ``[]`` (also for an unknown territory). Never raises (polled by the
    supervisor)."""
    watch = watches.get(territory_id)
    if watch is None:
        return []
    try:
        return [oom_phrase(watch[1])] if watch[0].seen() else []
    except Exception:  # noqa: BLE001 - never raises
        return []


# --------------------------------------------------------------------------- command line


def image_reads_fw_cfg_identity(image: GuestImage) -> bool:
    """True when the image's ``aoe-identity`` script reads the ``opt/aoe/*`` fw_cfg items."""
    flag = getattr(image, "identity_fw_cfg", None)
    if isinstance(flag, bool):
        return flag
    script = Path(image.rootfs) / "usr/local/sbin/aoe-identity"
    try:
        text = script.read_text(errors="replace")
    except OSError:
        return False
    return "qemu_fw_cfg/by_name/opt/aoe" in text and "root_password/raw" in text


def build_qemu_command(
    *,
    name: str,
    kernel: Path,
    initrd: Path,
    disk: Path,
    ssh_port: int,
    service_port: int,
    console_log: Path,
    monitor_socket: Path,
    accel: Sequence[str] = ("-accel", "tcg", "-cpu", "max"),
    memory_mib: int = 768,
    cpus: int = 1,
    guest_service_port: int = 8080,
    identity_dir: Path | None = None,
    password_on_cmdline: str | None = None,
    qemu_bin: str = QEMU_BIN,
) -> list[str]:
    """The full QEMU argv for one territory (no shell; pass to ``exec`` as is).

    Networking follows ``docs/territories.md`` pitfall 5 and spec §6.1's ``QEMU_NET_OPTS``:
    ``-netdev user,restrict=on,hostfwd=tcp:127.0.0.1:<ssh>-:22,hostfwd=tcp:127.0.0.1:<svc>-:<guest svc>``.
    Every path inside an option list (``file=``, ``path=``, ``unix:``) goes through
    :func:`opt_value`, so an output folder with commas (``match,1``) names the file it names.
    ``identity_dir`` holds the files ``hostname`` and ``root_password`` passed as
    ``-fw_cfg name=opt/aoe/hostname,file=...`` / ``-fw_cfg name=opt/aoe/root_password,file=...``;
    without it (legacy images) ``aoe.hostname=`` and ``password_on_cmdline`` go on ``-append``.
    """
    append = KERNEL_ARGS
    if identity_dir is None:
        append += f" aoe.hostname={name}"
    if password_on_cmdline is not None:
        append += f" aoe.root_password={password_on_cmdline}"
    cmd = [
        qemu_bin,
        "-name", name,
        *accel,
        "-machine", "q35",
        "-m", str(memory_mib),
        "-smp", str(cpus),
        "-nographic",
        "-nodefaults",
        "-no-reboot",
        "-kernel", str(kernel),
        "-initrd", str(initrd),
        "-append", append,
        "-drive", f"file={opt_value(disk)},if=virtio,format=qcow2",
        "-netdev",
        f"user,id=mgmt,restrict=on,hostfwd=tcp:127.0.0.1:{ssh_port}-:22,"
        f"hostfwd=tcp:127.0.0.1:{service_port}-:{guest_service_port}",
        "-device", "virtio-net-pci,netdev=mgmt,romfile=",  # no iPXE ROM: -kernel boots directly
        "-chardev", f"file,id=console,path={opt_value(console_log)},append=on",
        "-serial", "chardev:console",
        "-monitor", f"unix:{opt_value(monitor_socket)},server=on,wait=off",
    ]  # fmt: skip
    if identity_dir is not None:
        cmd += ["-fw_cfg", f"name={FW_CFG_HOSTNAME},file={opt_value(identity_dir / 'hostname')}"]
        cmd += ["-fw_cfg", f"name={FW_CFG_PASSWORD},file={opt_value(identity_dir / 'root_password')}"]
    return cmd


def opt_value(path: str | Path) -> str:
    """``path`` as the value of a QEMU option list (``-drive file=...,if=virtio``): commas
    doubled, QEMU's escape, so ``match,1/territories`` is one value and not a second option
    ``1/territories``. Spaces, colons after the first ``/``, quotes and non-ASCII need none:
    the argv reaches QEMU without a shell and an absolute path has no protocol prefix."""
    return str(path).replace(",", ",,")


def _short_socket_path(preferred: Path) -> tuple[Path, Path | None]:
    """A unix socket path under the 107-byte limit: ``preferred`` or one in a fresh /tmp dir.

    Returns ``(socket_path, created_tmp_dir_or_None)``.
    """
    if len(os.fsencode(str(preferred))) < 100:
        return preferred, None
    d = Path(tempfile.mkdtemp(prefix="aoe-q-"))
    return d / "mon", d


def _tail(path: Path, lines: int = 8, redact: str | None = None) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    if redact:
        text = text.replace(redact, "***")
    out = [ln.strip() for ln in text.splitlines() if ln.strip()][-lines:]
    return " | ".join(out)


def _qemu_error_line(qemu_log: Path, redact: str) -> str:
    """The most telling line of QEMU's own log (port clash, missing file...)."""
    text = _tail(qemu_log, 20, redact)
    for part in text.split(" | "):
        if "host forwarding rule" in part or "Could not" in part or "error" in part.lower():
            return part
    return text.split(" | ")[-1] if text else ""


# --------------------------------------------------------------------------- provider


@dataclass
class _Guest:
    spec: TerritorySpec
    dir: Path
    disk_dir: Path
    ports: PortPlan
    cmd: list[str] = field(default_factory=list)
    proc: asyncio.subprocess.Process | None = None
    task: asyncio.Task[None] | None = None
    stopping: bool = False
    failed: str | None = None
    launches: int = 0
    sock_tmp: Path | None = None
    monitor: Path | None = None
    console_mark: int = 0  # size of console.log when the current launch started (bytes)
    vcpus: int = 1  # -smp
    memory_mib: int = 768  # -m (MiB)
    disk_mib: int = 2048  # virtual size of the overlay (MiB)
    grow_fs: bool = False  # the overlay is larger than the image: resize2fs before ready
    boot_seen_at: float | None = None  # monotonic time the reboot watch saw the boot sign
    exits: list[int | None] = field(default_factory=list)  # QEMU's exit statuses, launch by launch


class QemuProvider(TerritoryProvider):
    """One QEMU VM per territory from the Debian guest image (see the module docstring).

    Args:
        workdir: folder for per-territory state (``match_dir/territories``); created if missing.
        image: the guest image; ``None`` → ``aoe_tui.runtime.image.require_image()`` at provision.
        base_port: first host port of the §6.2 block; ``None`` → first free block ≥ 26000
            that no other running heat holds.
        accel: ``auto`` (KVM only if a stock guest can run, else TCG), ``kvm`` or ``tcg``.
        memory_mib: guest RAM in MiB for every territory, overriding the seats' classes
            (``spec.resources.memory_mib``; upstream's base.nix: 768) and saying so in
            :attr:`notes`; ``None`` (default): each seat's class.
        ready_timeout_s: seconds to wait for the first root login after boot.
        reboot_timeout_s: seconds to wait for SSH to come back after ``systemctl reboot``.
        allocator: the port-block registry (default: the machine's, :class:`NetAllocator`).
        connect_timeout_s: SSH connect timeout (s) of the provider's logins (TCG logins are slow).
        refused_after_s: seconds a relaunched guest whose console shows it booted may keep
            failing the root SSH login before :meth:`reboot` calls it the player's lockout
            (default :data:`REFUSED_AFTER_S`, 45 s; a guest with a working sshd logs in 11-21 s
            after the prompt under TCG, so a lower value would blame honest slow guests).
            Also the attribute :attr:`refused_after_s`, read at each reboot.
    """

    name = "qemu"

    def __init__(
        self,
        workdir: Path,
        image: GuestImage | None = None,
        base_port: int | None = None,
        accel: str = "auto",
        memory_mib: int | None = None,
        ready_timeout_s: float = 300,
        reboot_timeout_s: float = 300,
        *,
        allocator: NetAllocator | None = None,
        connect_timeout_s: float = 15.0,
        refused_after_s: float = REFUSED_AFTER_S,
    ) -> None:
        # absolute: a relative one such as `match:1` would read as a QEMU protocol prefix in -drive file=
        self.workdir = Path(workdir).absolute()
        self.image = image
        self.base_port = base_port
        self.accel = accel
        self.memory_mib = memory_mib
        self.ready_timeout_s = ready_timeout_s
        self.reboot_timeout_s = reboot_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.refused_after_s = refused_after_s
        self.allocator = allocator or NetAllocator()
        self._owner = f"qemu:{os.getpid()}:{Path(workdir).resolve()}"
        self._guests: dict[str, _Guest] = {}
        self._block: int | None = None
        self.chosen_accel: str | None = None
        # per territory, kept after the teardown (console.log is kept): OOM watch, limits
        self._watches: dict[str, tuple[ConsoleWatch, int]] = {}
        self._limits: dict[str, dict[str, object]] = {}

    def exhaustion(self, territory_id: str) -> list[str]:
        """``["out of memory in the territory (<memory_mib> MiB)"]`` once the guest kernel's
        OOM killer has printed on the serial console (:data:`OOM_SIGN` in ``console.log``),
        else ``[]``. Reads only the console bytes added since the last call; never raises.
        Running out of tasks or disk inside a VM leaves no host-side sign: not reported."""
        return console_exhaustion(self._watches, territory_id)

    def limits(self, territory_id: str) -> dict[str, object]:
        """What the VM of ``territory_id`` is held to: ``{"vcpus", "memory_mib", "disk_mib",
        "enforced": ["cpu", "memory", "disk"], "not_enforced": {"tasks": ...}}`` (MiB; the
        disk is the overlay's virtual size); ``{}`` for an unknown territory. Never raises."""
        return dict(self._limits.get(territory_id, {}))

    # ---------------------------------------------------------------- provision

    def _preflight(self) -> GuestImage:
        for binary in (QEMU_BIN, QEMU_IMG):
            if shutil.which(binary) is None:
                raise ProvisionError(f"qemu: {binary} not found in PATH; install it with ./setup.sh")
        image = self.image
        if image is None:
            try:
                from aoe_tui.runtime.image import require_image
            except ImportError as err:  # pragma: no cover - image module ships with the package
                raise ProvisionError(f"qemu: guest image support is unavailable ({err})") from err
            image = require_image()
            self.image = image
        for what in ("qcow2", "kernel", "initrd"):
            p = Path(getattr(image, what))
            if not p.is_file():
                raise ProvisionError(f"qemu: guest image {what} {p} is missing; run `aoe image build`")
        return image

    async def provision(self, specs: Sequence[TerritorySpec]) -> list[Territory]:
        """Boot one VM per spec concurrently; return them SSH-ready in spec order.

        Raises:
            ProvisionError: missing qemu/qemu-img or image, a port taken, qemu crashed, or no
                root login within ``ready_timeout_s``; all started VMs are torn down first.
        """
        if not specs:
            return []
        try:
            image = self._preflight()
            accel, self.chosen_accel = accel_args(self.accel)
            self._block = reserve_ports(self.allocator, self._owner, len(specs), self.base_port)
        except ProvisionError:
            raise
        except ProviderError as err:
            raise ProvisionError(str(err)) from err
        plans = port_plan(self._block, len(specs))
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            image_bytes = qcow2_virtual_size(Path(image.qcow2))
        except ProviderError as err:
            await self.teardown()
            raise ProvisionError(str(err)) from err
        self._resource_notes(specs, image_bytes)
        fw_cfg = image_reads_fw_cfg_identity(image)
        if not fw_cfg:
            log.warning(
                "qemu: the guest image reads the root password only from the kernel command line; "
                "it is visible in qemu's argv (rebuild the image to use fw_cfg)"
            )
        # Positional slot i in this heat decides the port block entry (§6.2 uses manifest order).
        order = sorted(range(len(specs)), key=lambda k: specs[k].index)
        results = await asyncio.gather(
            *(self._start_one(specs[k], plans[order.index(k)], image, accel, fw_cfg) for k in range(len(specs))),
            return_exceptions=True,
        )
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            await self.teardown()
            for e in errors:
                if not isinstance(e, Exception):
                    raise e
            raise ProvisionError("; ".join(str(e) for e in errors))
        return [r for r in results if isinstance(r, Territory)]

    def _resource_notes(self, specs: Sequence[TerritorySpec], image_bytes: int) -> None:
        """Add to :attr:`notes` what differs from the seats' classes: the ``memory_mib``
        override, a class disk smaller than the image's (one line per figure, naming the
        territories)."""
        image_mib = image_bytes // 2**20
        if self.memory_mib is not None:
            differ = [s for s in specs if s.resources.memory_mib != self.memory_mib]
            if differ:
                asked = sorted({s.resources.memory_mib for s in differ})
                self.notes.append(
                    f"qemu: [provider] memory_mib = {self.memory_mib} overrides the class memory "
                    f"({', '.join(f'{m} MiB' for m in asked)}) of {', '.join(s.id for s in differ)}"
                )
        by_disk: dict[int, list[str]] = {}
        for s in specs:
            if s.resources.disk_mib * 2**20 < image_bytes:
                by_disk.setdefault(s.resources.disk_mib, []).append(s.id)
        for asked_mib, ids in sorted(by_disk.items()):
            self.notes.append(
                f"qemu: the class of {', '.join(ids)} asks {asked_mib} MiB of disk; a qemu guest's disk "
                f"cannot be smaller than the guest image's {image_mib} MiB, so it gets {image_mib} MiB"
            )

    async def _start_one(
        self, spec: TerritorySpec, plan: PortPlan, image: GuestImage, accel: list[str], fw_cfg: bool
    ) -> Territory:
        tdir = self.workdir / spec.id
        disk_dir = tdir / "disk"
        if disk_dir.exists():
            shutil.rmtree(disk_dir)
        disk_dir.mkdir(parents=True)
        res = spec.resources
        image_bytes = qcow2_virtual_size(Path(image.qcow2))
        grow = overlay_size_mib(res.disk_mib, image_bytes)
        g = _Guest(spec=spec, dir=tdir, disk_dir=disk_dir, ports=plan, vcpus=res.vcpus,
                   memory_mib=self.memory_mib if self.memory_mib is not None else res.memory_mib,
                   disk_mib=grow if grow is not None else image_bytes // 2**20, grow_fs=grow is not None)
        self._guests[spec.id] = g
        self._watches[spec.id] = (ConsoleWatch(tdir / "console.log"), g.memory_mib)
        self._limits[spec.id] = {
            "vcpus": g.vcpus, "memory_mib": g.memory_mib, "disk_mib": g.disk_mib,
            "enforced": ["cpu", "memory", "disk"],
            "not_enforced": {"tasks": "the guest kernel's own (no limit set by the provider)"},
        }
        overlay = disk_dir / "overlay.qcow2"
        proc = await asyncio.create_subprocess_exec(
            QEMU_IMG, "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", str(Path(image.qcow2).resolve()), str(overlay),
            *([f"{grow}M"] if grow is not None else []),
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip
        out, _ = await proc.communicate()
        if proc.returncode != 0:
            raise ProvisionError(f"{spec.id}: qemu-img create failed: {out.decode(errors='replace').strip()}")
        identity = None
        if fw_cfg:
            identity = disk_dir
            write_atomic(disk_dir / "hostname", spec.id, mode=0o600)
            write_atomic(disk_dir / "root_password", spec.password, mode=0o600)
        g.monitor, g.sock_tmp = _short_socket_path(disk_dir / "monitor.sock")
        console = tdir / "console.log"
        g.cmd = build_qemu_command(
            name=spec.id,
            kernel=Path(image.kernel),
            initrd=Path(image.initrd),
            disk=overlay,
            ssh_port=plan.ssh_port,
            service_port=plan.service_port,
            console_log=console,
            monitor_socket=g.monitor,
            accel=accel,
            memory_mib=g.memory_mib,
            cpus=g.vcpus,
            guest_service_port=spec.service_port,
            identity_dir=identity,
            password_on_cmdline=None if fw_cfg else spec.password,
        )
        if spec.shares:  # harness shares: cached read-only disks (runtime/sharedisk.py)
            from aoe_tui.runtime.sharedisk import drive_args

            try:
                g.cmd += await asyncio.to_thread(drive_args, spec.shares)
            except (ProviderError, OSError, subprocess.SubprocessError) as exc:  # no share: the harness uploads
                # instead (before the clock)
                log.warning("qemu: %s: harness share not attached: %s", spec.id, exc)
        cred = write_credential_file(tdir / "credential.env", spec.password, {"AOE_SSH_PORT": str(plan.ssh_port)})
        started = asyncio.get_running_loop().create_future()
        g.task = asyncio.create_task(self._supervise(g, started), name=f"qemu-supervisor-{spec.id}")
        await started
        t0 = time.monotonic()
        waited = await self._wait_login(g, self.ready_timeout_s, "never became ready")
        from aoe_tui.runtime.ssh import wait_boot_finished

        try:  # SSH answers before the boot has finished: wait for the seeds too
            await wait_boot_finished("127.0.0.1", g.ports.ssh_port, spec.password,
                                     timeout_s=max(10.0, self.ready_timeout_s - waited),
                                     connect_timeout_s=self.connect_timeout_s)
        except Exception as exc:  # noqa: BLE001 - reported in one line
            raise ProvisionError(f"{spec.id}: boot did not finish: {exc}") from None
        if g.grow_fs:
            await self._grow_root(g)
        await self._mount_shares(spec)
        log.info("qemu: %s ssh-ready after %.1f s (%s)", spec.id, time.monotonic() - t0, self.chosen_accel)
        return Territory(
            id=spec.id,
            host="127.0.0.1",
            ssh_port=plan.ssh_port,
            service_port=plan.service_port,
            password=spec.password,
            credential_file=cred,
            extra={"pid": g.proc.pid if g.proc else None, "dir": str(tdir), "accel": self.chosen_accel},
        )

    async def _grow_root(self, g: _Guest) -> None:
        """Grow the guest's ext4 root to its (larger) disk online: ``resize2fs /dev/vda`` over
        root SSH, before the territory is ready. Once done it stays (the overlay keeps it).

        Raises:
            ProvisionError: the login or ``resize2fs`` failed (one line).
        """
        from aoe_tui.runtime.ssh import run

        try:
            r = await run("127.0.0.1", g.ports.ssh_port, g.spec.password, "resize2fs /dev/vda",
                          timeout_s=max(60.0, self.ready_timeout_s / 2), connect_timeout_s=self.connect_timeout_s)
        except Exception as exc:  # noqa: BLE001 - reported in one line
            raise ProvisionError(f"{g.spec.id}: growing the root file system to {g.disk_mib} MiB failed: "
                                 f"{type(exc).__name__}: {exc}".rstrip(": ")) from None
        if r.exit_status != 0:
            last = (r.stderr.strip().splitlines() or r.stdout.strip().splitlines() or [""])[-1]
            raise ProvisionError(f"{g.spec.id}: resize2fs /dev/vda exited {r.exit_status}: {last}")

    async def _supervise(self, g: _Guest, started: asyncio.Future[None]) -> None:
        """Run QEMU; relaunch the same command line whenever it exits (a guest reboot)."""
        quick = 0
        qemu_log = g.dir / "qemu.log"
        try:
            while not g.stopping:
                t0 = time.monotonic()
                try:
                    g.console_mark = (g.dir / "console.log").stat().st_size
                except OSError:
                    g.console_mark = 0
                with open(qemu_log, "ab") as logf:
                    try:
                        g.proc = await asyncio.create_subprocess_exec(
                            *self._exec_prefix(), *g.cmd,
                            stdin=subprocess.DEVNULL, stdout=logf, stderr=logf, start_new_session=True,
                        )  # fmt: skip
                    except OSError as err:
                        g.failed = f"{g.spec.id}: cannot start {QEMU_BIN}: {err.strerror}"
                        return
                g.launches += 1
                self._write_state(g)
                if not started.done():
                    started.set_result(None)
                rc = await g.proc.wait()
                g.exits.append(rc)
                if g.stopping:
                    return
                line = _qemu_error_line(qemu_log, g.spec.password)
                if "host forwarding rule" in line:
                    p = g.ports
                    g.failed = (
                        f"{g.spec.id}: qemu could not forward 127.0.0.1:{p.ssh_port}/{p.service_port} "
                        f"(port already in use?): {line}"
                    )
                    return
                if time.monotonic() - t0 < _QUICK_EXIT_S:
                    quick += 1
                    if quick >= _MAX_QUICK_EXITS:
                        g.failed = f"{g.spec.id}: qemu exited with status {rc} {quick} times in a row: {line}"
                        return
                else:
                    quick = 0
                log.info("qemu: %s exited (%s); relaunching (guest reboot)", g.spec.id, rc)
        finally:
            if not started.done():
                started.set_result(None)

    @staticmethod
    def _exec_prefix() -> list[str]:
        """``setpriv --pdeathsig KILL --`` when available: QEMU dies with the runner."""
        setpriv = shutil.which("setpriv")
        return [setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []

    def _write_state(self, g: _Guest) -> None:
        if not g.dir.is_dir():
            return
        state = {
            "provider": "qemu",
            "id": g.spec.id,
            "pid": g.proc.pid if g.proc else None,
            "ssh_port": g.ports.ssh_port,
            "service_port": g.ports.service_port,
            "disk_dir": str(g.disk_dir),
            "monitor": str(g.monitor) if g.monitor else None,
            "sock_tmp": str(g.sock_tmp) if g.sock_tmp else None,
            "launches": g.launches,
            "accel": self.chosen_accel,
        }
        write_atomic(g.dir / "state.json", json.dumps(state, indent=2))

    async def _wait_login(self, g: _Guest, timeout_s: float, what: str) -> float:
        """Poll a real root login until it works, the supervisor fails, or ``timeout_s`` passes."""
        from aoe_tui.runtime.ssh import probe

        start = time.monotonic()
        while True:
            if g.failed:
                raise ProvisionError(g.failed)
            if await probe("127.0.0.1", g.ports.ssh_port, g.spec.password, connect_timeout_s=self.connect_timeout_s):
                return time.monotonic() - start
            if g.failed:
                raise ProvisionError(g.failed)
            if time.monotonic() - start > timeout_s:
                tail = _tail(g.dir / "console.log", 3, g.spec.password)
                raise ProvisionError(
                    f"{g.spec.id}: root SSH login on 127.0.0.1:{g.ports.ssh_port} {what} after {timeout_s:.0f} s"
                    + (f" (console: {tail})" if tail else "")
                )
            await asyncio.sleep(0.5)

    # ---------------------------------------------------------------- reboot

    async def reboot(self, territory: Territory) -> None:
        """``systemctl reboot`` over SSH (spec §3.4), then wait for SSH down (≤30 s) and for a
        root login again (≤ ``reboot_timeout_s``).

        QEMU exits on the guest's reset (``-no-reboot``) and the supervisor relaunches it.

        The player's lockout is told apart from a guest that never came up from the host side:

        * the referee cannot even log in to ask for the reboot, and the SSH port answers but
          refuses the root login (password changed, ``PermitRootLogin no``, not an SSH
          server): :class:`TerritoryRefusedError` at once, without waiting for a reboot that
          was never asked. The provider does not reset the VM from the host instead (monitor
          ``system_reset``): that is a power cut, not the guest-initiated reboot of §3.4.
        * after the relaunch, the guest's serial console (``console.log``, written by QEMU on
          the host) shows one of :data:`BOOT_SIGNS` (the getty's login prompt, or systemd's
          emergency shell after a broken ``/etc/fstab``), i.e. the guest reached userspace,
          and root SSH still fails :attr:`refused_after_s` seconds later (sshd masked or
          refusing, port 22 firewalled): :class:`TerritoryRefusedError` then, not at
          ``reboot_timeout_s``. With user networking "nothing answers" alone is ambiguous
          (the forward accepts and closes whether or not the guest is up): the console is
          the evidence.

        Known limit: a player who also silences ttyS0 (masks ``serial-getty@ttyS0``) and
        locks SSH leaves no host-side evidence of the boot; without evidence the provider
        errs toward infrastructure (:class:`RebootError`) rather than blame a player for
        what may be a host fault (a kernel that never booted prints nothing either).

        Raises:
            RebootError: unknown territory, SSH never stopped, QEMU crashed (an exit status
                other than 0 during the reboot, or its relaunch given up: raised as soon as it
                happens, with QEMU's error line and the console's tail), or SSH never came
                back and the console shows no boot since the relaunch.
            TerritoryRefusedError: the player's lockout, as above (one line naming the
                territory, what refused and what the console showed).
        """
        import asyncssh

        from aoe_tui.runtime.ssh import login_refusal, run, wait_down

        g = self._guests.get(territory.id)
        if g is None or g.stopping:
            raise RebootError(f"{territory.id}: not a running qemu territory of this heat")
        launches = g.launches
        exits_before = len(g.exits)
        g.boot_seen_at = None
        try:
            await run(
                territory.host, territory.ssh_port, territory.password,
                "systemctl reboot", timeout_s=15, connect_timeout_s=self.connect_timeout_s,
            )  # fmt: skip
        except asyncssh.ConnectionLost:
            pass  # the session died with the guest: the reboot is under way
        except Exception as exc:  # noqa: BLE001 - the login may have been refused: ask once
            log.info("qemu: %s: the referee's systemctl reboot failed (%s)", territory.id, type(exc).__name__)
            if g.launches == launches and g.proc is not None and g.proc.returncode is None:
                if isinstance(exc, asyncssh.PermissionDenied):
                    why = f"the SSH server on port {territory.ssh_port} refused the root password login"
                else:  # TCG logins are slow: the provider's connect timeout, not login_refusal's 5 s
                    why = await login_refusal(territory.host, territory.ssh_port, territory.password,
                                              connect_timeout_s=self.connect_timeout_s)
                if why is not None:
                    raise TerritoryRefusedError(
                        f"territory {territory.id} refused the referee before the reboot: {why}; "
                        "the VM runs, so the referee could not ask it to reboot"
                    ) from None
        try:
            await wait_down(territory.host, territory.ssh_port, territory.password, timeout_s=30)
        except TimeoutError as err:
            raise RebootError(f"{territory.id}: SSH never stopped during reboot (30 s)") from err
        ready = asyncio.ensure_future(self._wait_login(g, self.reboot_timeout_s, "did not come back"))
        refused = asyncio.ensure_future(self._watch_refusal(g, territory, launches))
        crashed = asyncio.ensure_future(self._watch_exits(g, exits_before))
        try:
            await asyncio.wait({ready, refused, crashed}, return_when=asyncio.FIRST_COMPLETED)
            if not ready.done():
                if crashed.done():
                    crashed.result()  # raises RebootError
                refused.result()  # raises TerritoryRefusedError
            await ready
        except ProvisionError as err:
            if g.proc is not None and g.proc.returncode is None:
                seen = self._boot_sign(g) if g.launches > launches else ""
                # the VM runs: a server answering on the SSH port that refuses the root login
                # is the player's lockout, not a guest that never came up
                await raise_if_refused(territory, seen=f"the VM is running{', ' + seen if seen else ''}")
                if seen:
                    raise TerritoryRefusedError(
                        f"territory {territory.id} refused the referee after the reboot: no root SSH "
                        f"login on port {territory.ssh_port} within {self.reboot_timeout_s:.0f} s although {seen}"
                    ) from None
            raise RebootError(f"{territory.id}: SSH unavailable after reboot: {err}") from err
        finally:
            settle(ready, refused, crashed)
        if g.boot_seen_at is not None:
            log.info("qemu: %s root SSH back %.1f s after its console showed the boot",
                     territory.id, time.monotonic() - g.boot_seen_at)
        territory.extra["pid"] = g.proc.pid if g.proc else None
        await self._mount_shares(g.spec)

    async def _mount_shares(self, spec: TerritorySpec) -> None:
        """Mount the spec's harness share disks read-only in the guest (after its boot or
        reboot). A mount that fails is logged, not raised: the harness then uploads instead."""
        if not spec.shares:
            return
        from aoe_tui.runtime.sharedisk import mount_command
        from aoe_tui.runtime.ssh import run

        try:
            res = await run("127.0.0.1", self._guests[spec.id].ports.ssh_port, spec.password,
                            mount_command(spec.shares), timeout_s=30, connect_timeout_s=self.connect_timeout_s)
            if res.exit_status != 0:
                log.warning("qemu: %s: harness share not mounted: %s", spec.id, (res.stderr or res.stdout).strip()[-200:])
        except Exception as exc:  # noqa: BLE001 - the adapter falls back to an upload
            log.warning("qemu: %s: harness share not mounted: %s", spec.id, exc)

    async def _watch_exits(self, g: _Guest, exits_before: int) -> None:
        """Raise :class:`RebootError` as soon as QEMU's exits since the reboot was asked
        (``g.exits[exits_before:]``) show it will not come back: an exit with a status other
        than 0 (the guest's reset under ``-no-reboot`` exits 0; anything else is QEMU failing
        or being killed: the relaunch would boot a guest nobody rebooted, or fail), or the
        supervisor gone; otherwise poll every 0.5 s forever (cancelled by :meth:`reboot`)."""
        while True:
            bad = next((rc for rc in g.exits[exits_before:] if rc != 0), 0)
            if bad != 0 or (g.task is not None and g.task.done() and not g.stopping):
                line = _qemu_error_line(g.dir / "qemu.log", g.spec.password)
                what = f"qemu exited with status {bad}" if bad != 0 else (g.failed or "qemu was not relaunched")
                tail = _tail(g.dir / "console.log", 3, g.spec.password)
                raise RebootError(f"{g.spec.id}: {what} during the reboot{': ' + line if line else ''}"
                                  + (f" (console: {tail})" if tail else ""))
            await asyncio.sleep(0.5)

    async def _watch_refusal(self, g: _Guest, territory: Territory, launches_before: int) -> None:
        """Raise :class:`TerritoryRefusedError` once QEMU was relaunched after
        ``launches_before``, its console shows the guest booted (:meth:`_boot_sign`) and root
        SSH has still not worked :attr:`refused_after_s` seconds later; otherwise poll forever
        (cancelled by :meth:`reboot`)."""
        from aoe_tui.runtime.ssh import login_refusal, probe

        booted_at: float | None = None
        seen = ""
        while True:
            await asyncio.sleep(1.0)
            if g.launches <= launches_before or g.proc is None or g.proc.returncode is not None:
                booted_at = None  # not relaunched yet, or between two launches
                continue
            if booted_at is None:
                seen = self._boot_sign(g)
                if not seen:
                    continue
                booted_at = g.boot_seen_at = time.monotonic()
                log.info("qemu: %s %s", territory.id, seen)
            if time.monotonic() - booted_at < self.refused_after_s:
                continue
            if await probe(territory.host, territory.ssh_port, territory.password, connect_timeout_s=5.0):
                booted_at = time.monotonic()  # a login works after all: the readiness wait ends
                continue
            if await _ssh_banner(territory.host, territory.ssh_port):
                why = await login_refusal(territory.host, territory.ssh_port, territory.password,
                                          connect_timeout_s=self.connect_timeout_s)
                if why is None:
                    continue  # an SSH server answers and did not refuse: slow, not locked
            else:
                why = f"nothing answers SSH on port {territory.ssh_port}"
            raise TerritoryRefusedError(
                f"territory {territory.id} refused the referee after the reboot: "
                f"{why} {self.refused_after_s:.0f} s after {seen}"
            )

    @staticmethod
    def _boot_sign(g: _Guest) -> str:
        """What the current launch's serial console shows of a finished boot, as a phrase
        ("its console showed the login prompt (launch 2)"), or ``""`` when it shows none of
        :data:`BOOT_SIGNS` since the launch started (``console.log`` past ``console_mark``)."""
        try:
            with open(g.dir / "console.log", "rb") as f:
                f.seek(g.console_mark)
                text = f.read()
        except OSError:
            return ""
        for sign in BOOT_SIGNS:
            if sign in text:
                what = "the login prompt" if sign == b" login:" else f"{sign.decode()!r}"
                return f"its console showed {what} (launch {g.launches})"
        return ""

    # ---------------------------------------------------------------- teardown

    async def teardown(self) -> None:
        """Quit every VM (monitor ``quit``, then SIGTERM, then SIGKILL) and remove overlays.

        Keeps ``console.log``/``qemu.log`` (password redacted); removes ``disk/``,
        ``state.json`` and ``credential.env``. Safe after a partial provision and repeatedly.
        """
        guests = list(self._guests.values())
        for g in guests:
            g.stopping = True
        await asyncio.gather(*(self._stop_guest(g) for g in guests), return_exceptions=True)
        for g in guests:
            self._remove_guest_files(g.dir, g.sock_tmp, g.spec.password)
        self._guests.clear()
        if self._block is not None:
            with contextlib.suppress(Exception):
                self.allocator.release(self._owner, "ports")
            self._block = None

    async def _stop_guest(self, g: _Guest) -> None:
        """Stop one VM for good: monitor ``quit``, SIGTERM, SIGKILL; then end its supervisor."""
        await self._stop_proc(g)
        if g.task is not None:
            if not g.task.done():
                g.task.cancel()
            with contextlib.suppress(BaseException):
                await g.task
        # The supervisor may have relaunched QEMU just before it saw ``stopping``.
        await self._stop_proc(g)

    @staticmethod
    async def _stop_proc(g: _Guest) -> None:
        proc = g.proc
        if proc is None or proc.returncode is not None:
            return
        if g.monitor is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(_monitor_command(g.monitor, "quit"), 3)
        try:
            await asyncio.wait_for(proc.wait(), 5)
        except asyncio.TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 5)
            except asyncio.TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()

    @staticmethod
    def _remove_guest_files(tdir: Path, sock_tmp: Path | None, password: str | None) -> None:
        shutil.rmtree(tdir / "disk", ignore_errors=True)
        if sock_tmp is not None:
            shutil.rmtree(sock_tmp, ignore_errors=True)
        for name in ("state.json", "credential.env"):
            for p in (tdir / name, *leftover_temps(tdir / name)):
                with contextlib.suppress(FileNotFoundError):
                    p.unlink()
        if password:
            for name in ("console.log", "qemu.log"):
                p = tdir / name
                with contextlib.suppress(OSError):
                    text = p.read_bytes()
                    secret = password.encode()
                    if secret in text:
                        p.write_bytes(text.replace(secret, b"***"))


async def _ssh_banner(host: str, port: int, timeout_s: float = 5.0) -> bool:
    """True iff something on ``host:port`` sends a first line within ``timeout_s`` seconds
    (an SSH server greets at once; a user-mode forward with nothing behind it accepts and
    closes, or stays silent). Never raises."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout_s)
    except (OSError, asyncio.TimeoutError):
        return False
    try:
        return bool(await asyncio.wait_for(reader.read(64), timeout_s))
    except (OSError, asyncio.TimeoutError):
        return False
    finally:
        writer.close()


async def _monitor_command(sock: Path, command: str) -> str:
    """Send one HMP ``command`` to a QEMU monitor unix socket and return what it printed."""
    reader, writer = await asyncio.open_unix_connection(str(sock))
    try:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(reader.read(65536), 1)  # banner + prompt
        writer.write(command.encode() + b"\n")
        await writer.drain()
        out = b""
        with contextlib.suppress(asyncio.TimeoutError, ConnectionError):
            out = await asyncio.wait_for(reader.read(65536), 1)
        return out.decode(errors="replace")
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


def _is_our_qemu(pid: int, disk_dir: str) -> bool:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return bool(argv) and any(b"qemu" in a for a in argv[:4]) and any(disk_dir.encode() in a for a in argv)


def cleanup_stale(workdir: Path) -> list[str]:
    """Kill QEMU processes and remove overlays left in ``workdir`` by a runner that died.

    Reads each ``workdir/<id>/state.json``; a live PID is killed only if its argv is a QEMU
    using that territory's overlay. Returns the ids cleaned up (empty if nothing was stale).
    """
    cleaned: list[str] = []
    workdir = Path(workdir)
    if not workdir.is_dir():
        return cleaned
    for state_file in sorted(workdir.glob("*/state.json")):
        tdir = state_file.parent
        try:
            state = json.loads(state_file.read_text())
        except (OSError, ValueError):
            state = {}
        if state.get("provider", "qemu") != "qemu":
            continue  # another provider's territory (e.g. a container): its own cleanup handles it
        pid = state.get("pid")
        disk_dir = str(state.get("disk_dir") or tdir / "disk")
        if isinstance(pid, int) and _pid_alive(pid) and _is_our_qemu(pid, disk_dir):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            for _ in range(50):
                if not _pid_alive(pid) or not _is_our_qemu(pid, disk_dir):
                    break
                time.sleep(0.1)
        sock_tmp = state.get("sock_tmp")
        QemuProvider._remove_guest_files(tdir, Path(sock_tmp) if sock_tmp else None, None)
        cleaned.append(tdir.name)
    for disk in sorted(workdir.glob("*/disk")):
        if disk.parent.name not in cleaned and not (disk.parent / "state.json").exists():
            shutil.rmtree(disk, ignore_errors=True)
            cleaned.append(disk.parent.name)
    return cleaned


def cleanup_unless_live(workdir: Path) -> list[str]:
    """:func:`cleanup_stale`, unless a QEMU guest recorded in ``workdir`` still runs: a guest
    dies with its runner, so a live one means a live runner, whose territories are left
    alone (returns ``[]``). ``aoe cleanup``'s step for ``qemu``."""
    for state_file in Path(workdir).glob("*/state.json"):
        try:
            state = json.loads(state_file.read_text())
        except (OSError, ValueError):
            continue
        pid = state.get("pid") if isinstance(state, dict) else None
        if isinstance(pid, int) and state.get("provider", "qemu") == "qemu" and _pid_alive(pid):
            return []
    return cleanup_stale(workdir)


# --------------------------------------------------------------------------- doctor


#: ``aoe doctor``'s line on what a qemu territory is held to (spec §1.7, issue 26).
LIMITS_DETAIL = ("enforced from each seat's class: cpu (-smp vcpus), memory (-m memory_mib), disk (overlay of "
                 "disk_mib, at least the image's 2048 MiB); tasks: the guest kernel's own")


def doctor_checks() -> list[DoctorCheck]:
    """What the ``qemu`` provider needs: qemu-system-x86_64, qemu-img, acceleration, the guest
    image; and what it enforces (the ``limits`` line, always ok)."""
    checks: list[DoctorCheck] = []
    for binary in (QEMU_BIN, QEMU_IMG):
        path = shutil.which(binary)
        checks.append(
            DoctorCheck("qemu", binary, path is not None, path or "not found in PATH", "" if path else "./setup.sh")
        )
    usable, detail = kvm_status()
    # TCG always works (slowly); this line informs, it never blocks.
    checks.append(DoctorCheck("qemu", "acceleration", True, ("kvm: " if usable else "tcg: ") + detail))
    checks.append(_image_check("qemu"))
    checks.append(DoctorCheck("qemu", "limits", True, LIMITS_DETAIL))
    return checks


def _image_check(provider: str) -> DoctorCheck:
    """The guest-image line shared by the qemu doctor checks."""
    try:
        from aoe_tui.runtime.image import find_image
    except ImportError:
        return DoctorCheck(provider, "guest image", False, "image builder not installed", "aoe image build")
    try:
        img = find_image()
    except Exception as err:  # noqa: BLE001 - doctor must report, never crash
        return DoctorCheck(provider, "guest image", False, f"cannot inspect the image cache: {err}", "aoe image build")
    if img is None:
        return DoctorCheck(provider, "guest image", False, "not built", "aoe image build")
    missing = [w for w in ("qcow2", "kernel", "initrd") if not Path(getattr(img, w)).is_file()]
    if missing:
        return DoctorCheck(provider, "guest image", False, f"incomplete (missing {', '.join(missing)})", "aoe image build")
    return DoctorCheck(provider, "guest image", True, str(img.qcow2))


__all__ = [
    "AUTO_BASE_PORT",
    "opt_value",
    "OOM_SIGN",
    "ConsoleWatch",
    "PortPlan",
    "reserve_ports",
    "QemuProvider",
    "accel_args",
    "build_qemu_command",
    "cleanup_stale",
    "cleanup_unless_live",
    "doctor_checks",
    "image_reads_fw_cfg_identity",
    "kvm_status",
    "oom_phrase",
    "console_exhaustion",
    "overlay_size_mib",
    "port_in_use",
    "port_plan",
    "qcow2_virtual_size",
]
