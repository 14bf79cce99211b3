"""The ``container`` territory provider: systemd-nspawn system containers.

Each territory is a booted Debian system (systemd as PID 1, sshd, the dormant
``builder-app.service``; guest contract of spec §6 / issue 3) made of:

* its own copy-on-write root: an overlayfs mount ``<workdir>/<id>/root`` with the image's
  ``rootfs`` as the read-only lower layer and ``<workdir>/<id>/disk/upper`` as the writable
  layer (if the kernel refuses overlayfs, a full copy ``disk/root`` bind-mounted on ``root``);
* its own disk: ``<workdir>/<id>/disk`` is an ext4 file system of the class's ``disk_mib``
  MiB in ``<workdir>/<id>/disk.img`` (its space reserved on the host), loop-mounted, holding the writable layer,
  so everything the guest writes (``/``, ``/var``, ``/tmp``) counts against it, ``df /`` in
  the guest shows about ``disk_mib`` MiB, and a full territory is the player's ``ENOSPC``,
  never the host's (:mod:`aoe_tui.runtime.territory_disk`; where the host has no loop
  devices or ``mkfs.ext4`` the layer is a plain folder, and the heat says so in a note);
* its class's CPU, memory and tasks (:class:`~aoe_tui.runtime.provider.TerritoryResources`)
  in cgroups, v1 or v2 (:mod:`aoe_tui.runtime.cgroups`): a CFS quota of ``vcpus`` CPUs and a
  cpuset of ``vcpus`` CPUs (what ``nproc`` shows inside; the host CPUs least used by live
  territories), equal ``cpu.shares``, ``memory_mib`` MiB of memory without swap, ``tasks``
  tasks (``pids.max``, default :data:`~aoe_tui.runtime.provider.DEFAULT_TASKS_MAX`). The
  nspawn wrapper enters these groups before it execs nspawn, so every process of the
  territory, across its reboots, is in them. A limit that is hit is the seat's own business:
  :meth:`ContainerProvider.exhaustion` names it from the kernel's counters (OOM kills,
  ``pids.max`` refusals, a full disk), :meth:`ContainerProvider.limits` says what is
  enforced;
* its own network namespace ``aoe-<hash>`` holding one end of a veth pair (``arena0``,
  address ``<subnet>.(10+index)/24``, no default route). The host end ``aoe<hash>`` carries
  ``<subnet>.1/32`` plus a ``/32`` route to the territory, has forwarding and proxy ARP
  off and IPv6 disabled, and an ``ip rule iif aoe<hash> prohibit`` drops anything from it
  that is not for a local address, so the runner reaches every territory while
  territories reach neither each other nor the internet (they can reach the host's own
  addresses, as a VM's guest can reach its host's services). The ``/24`` comes from :mod:`netalloc` per heat:
  the arena's ``network.cidr`` when free, else the next free one;
* on cgroup-v1 hosts, its own cgroups ``aoe-territories/<machine>`` in the ``name=systemd``
  and the v2 hierarchy (the v2 one is mounted at ``/run/aoe-cgroup2`` when the host has not
  mounted it; it stays mounted), so the territories' systemds never share a cgroup tree; on
  cgroup-v2 hosts one group ``aoe-territories/<machine>`` in the unified hierarchy;
* one ``systemd-nspawn --boot --register=no --keep-unit`` process (no system bus here),
  console output in ``<workdir>/<id>/console.log``. A supervisor task relaunches it on
  the same root when the guest reboots (nspawn exits with 133), so state persists.
  :meth:`ContainerProvider.reboot` is bounded: a guest whose orderly reboot hangs is
  forced (SIGRTMIN+15, then SIGKILL of its init) and relaunched like a power-cycled host.

Identity (hostname = territory id, root password hash) is written into the territory's
own writable layer before the first boot; the password never appears in a process's
arguments. So are systemd drop-ins capping the guest's stop timeouts
(:data:`FAST_STOP_DROPINS`; per territory, the image is untouched), and the masks of
guest units and generators a container territory has no use for, with a few drop-ins and
stamps that skip boot steps already done in the image (:data:`CONTAINER_MASKED_UNITS`,
:data:`CONTAINER_MASKED_GENERATORS`, :data:`CONTAINER_DROPINS`, :data:`NEEDS_UPDATE_STAMPS`:
a faster, cheaper boot and reboot; QEMU guests keep them). Everything started is recorded in ``<workdir>/<id>/state.json`` (atomic writes)
so :func:`cleanup_stale` can remove the leftovers of a killed runner.

Needs root, ``systemd-nspawn`` (package ``systemd-container``), ``ip`` (iproute2),
overlayfs, and the built guest image (``aoe image build``); for the limits, the cgroup
``cpu``, ``cpuset``, ``memory`` and ``pids`` controllers, loop devices and ``mkfs.ext4``
(``aoe doctor`` says which this host has; a missing one is a limit not enforced, never a
failed heat). Raises the host's
``fs.inotify.max_user_instances`` to :data:`INOTIFY_INSTANCES` when lower (many territories
at once exhaust Debian's 128). Teardown kills the guest (no orderly shutdown): see
:func:`destroy_from_state`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aoe_tui.fsio import SubPath, write_atomic
from aoe_tui.runtime import cgroups as limits_cg
from aoe_tui.runtime import netalloc, territory_disk
from aoe_tui.runtime.image import GuestImage, find_image, image_root, require_image, safe_rmtree, _mounts_under
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
    write_credential_file,
)
from aoe_tui.runtime.tamper import Tampering, binary_tampering, config_tampering, describe

log = logging.getLogger(__name__)

NSPAWN_REBOOT_EXIT = 133
#: systemd's "start reboot.target" signal: the referee's orderly reboot, sent from the host
#: to the container's init (no guest binary, shell or SSH login involved)
SIGNAL_REBOOT = signal.SIGRTMIN + 5
#: the fixed environment of every referee command run in a territory from the host side
#: (no rc files, no inherited variables): ``env -i`` + these, then the image's binary
REFEREE_ENV = ("PATH=/usr/bin:/usr/sbin", "HOME=/root", "LC_ALL=C")
#: guest binaries the referee runs from the host side; each must still be the image's
REFEREE_BINARIES = ("/usr/bin/env", "/usr/bin/bash", "/usr/bin/systemctl", "/usr/bin/cat")
#: flags of the python that runs :data:`ENTER_GUEST`: isolated (no ``PYTHON*`` variables,
#: no user site) and no ``site`` import (ctypes is in the standard library): half the start-up
#: CPU of a venv's python (~38 -> ~18 ms), paid on every host-side entry into a territory
ENTER_FLAGS = ("-I", "-S")
#: ``python -I -S -c ENTER_GUEST LEADER PROGRAM ARGS...``: join the ipc, uts, net, pid and mount
#: namespaces of host PID LEADER (a container's init), then run PROGRAM (a guest path) in a
#: child with an empty capability bounding set, no ambient capabilities, empty effective,
#: permitted and inheritable sets (an inheritable capability of the runner would otherwise
#: survive the exec of a root program) and no_new_privs, so a guest binary the host runs has
#: no more power than the guest's own processes; exits with
#: its status. (The same program is ``REFEREE_ENTER`` in the arenas' ``verify/lib.sh``.)
ENTER_GUEST = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
for ns in ("ipc", "uts", "net", "pid", "mnt"):
    fd = os.open("/proc/%s/ns/%s" % (sys.argv[1], ns), os.O_RDONLY)
    if libc.setns(fd, 0) != 0:
        sys.exit("cannot enter the territory: setns %s: %s" % (ns, os.strerror(ctypes.get_errno())))
    os.close(fd)
pid = os.fork()
if pid == 0:
    try:
        os.chdir("/")
        for cap in range(64):
            libc.prctl(24, cap, 0, 0, 0)
        if libc.prctl(47, 4, 0, 0, 0) != 0 or libc.prctl(38, 1, 0, 0, 0) != 0 or libc.prctl(23, 0, 0, 0, 0) != 0:
            raise OSError("cannot drop capabilities")
        if libc.capset((ctypes.c_uint32 * 2)(0x20080522, 0), (ctypes.c_uint32 * 6)()) != 0:
            raise OSError("cannot clear the capability sets")
        os.execve(sys.argv[2], sys.argv[2:], {})
    except BaseException as err:
        sys.stderr.write("cannot run %s in the territory: %s\\n" % (sys.argv[2], err))
        os._exit(127)
code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
sys.exit(code if code >= 0 else 128 - code)
"""
#: seconds a rebooted territory whose boot has finished (seen from the host side) may keep
#: refusing root SSH before :meth:`ContainerProvider.reboot` calls it the player's lockout
REFUSED_AFTER_S = 10.0
#: systemd's "reboot now, without stopping units" signal (``systemctl --force reboot``)
SIGNAL_FORCE_REBOOT = signal.SIGRTMIN + 15
#: seconds the guest gets to exit after the forced reboot signal before its init is SIGKILLed
FORCE_REBOOT_GRACE_S = 5.0
#: stop timeout the territory's systemd gets (per territory, written into its own layer)
FAST_STOP_TIMEOUT = "5s"
#: drop-ins written into each territory's writable layer before its first boot, so a guest
#: shutdown never waits systemd's default 90 s for a unit (an open SSH session's scope, a
#: process that ignores SIGTERM). Path relative to the guest root -> content.
FAST_STOP_DROPINS: dict[str, str] = {
    # Only the login sessions (SSH sessions of agents and verifiers) get a short stop timeout:
    # the agent's own services keep systemd's default, as on any Debian host. A unit that
    # still will not stop is bounded by the forced reboot in ``reboot()``.
    # user@.service sets its own TimeoutStopSec=120s; login session scopes get theirs from logind
    "etc/systemd/system/user@.service.d/aoe-fast-stop.conf":
        f"[Service]\nTimeoutStopSec={FAST_STOP_TIMEOUT}\n",
    "etc/systemd/system/session-.scope.d/aoe-fast-stop.conf":
        f"[Scope]\nTimeoutStopSec={FAST_STOP_TIMEOUT}\n",
}
#: guest units masked in each container territory's own writable layer before its first
#: boot (``/etc/systemd/system/UNIT -> /dev/null``; the image, which QEMU guests share, is
#: untouched): a console getty (nspawn's console is read-only), utmp bookkeeping on the boot's
#: critical chain (sshd records logins itself), periodic timers a heat never lives long
#: enough to need, and kernel-cmdline/fuse units meaningless in a container. Measured in a
#: booted territory with ``systemd-analyze blame``; a player may ``systemctl unmask`` them.
CONTAINER_MASKED_UNITS: tuple[str, ...] = (
    "console-getty.service", "getty.target",
    "systemd-update-utmp.service", "systemd-update-utmp-runlevel.service",
    "dpkg-db-backup.timer", "systemd-tmpfiles-clean.timer",
    "systemd-network-generator.service", "sys-fs-fuse-connections.mount",
    # the root is nspawn's mount (the image's fstab names the QEMU disk /dev/vda)
    "systemd-remount-fs.service",
    # the per-user service manager (``systemd --user``) that logind starts for root's first
    # SSH session: the session's login waited for it (~0.6 s wall on a loaded host, a whole
    # systemd instance of CPU, and again after each 10 s without a session) and stopping it
    # lengthened every reboot. Sessions, ``loginctl`` and ``/run/user/0`` stay (logind and
    # user-runtime-dir@); only ``systemctl --user`` has no manager to talk to.
    "user@.service",
)
#: systemd generators masked the same way (``/etc/systemd/system-generators/NAME ->
#: /dev/null``): systemd runs every generator at each boot and each ``daemon-reload``, one
#: process each; these read the kernel command line, block devices or offline-update
#: markers, none of which a container territory has. ``fstab``, ``rc-local`` and ``sysv``
#: stay: they read files a player may edit.
CONTAINER_MASKED_GENERATORS: tuple[str, ...] = (
    "systemd-cryptsetup-generator", "systemd-debug-generator", "systemd-getty-generator",
    "systemd-gpt-auto-generator", "systemd-hibernate-resume-generator",
    "systemd-integritysetup-generator", "systemd-run-generator",
    "systemd-system-update-generator", "systemd-veritysetup-generator",
)
#: drop-ins written into each container territory's own layer besides
#: :data:`FAST_STOP_DROPINS` (path relative to the guest root -> content): Debian's
#: ``ssh.service`` runs ``sshd -t`` (a config check: one more sshd start, every host key
#: loaded) before ``sshd -D``, which makes the same checks itself and fails the unit the
#: same way on a broken config.
CONTAINER_DROPINS: dict[str, str] = {
    "etc/systemd/system/ssh.service.d/aoe-container.conf": "[Service]\nExecStartPre=\n",
}
#: ``ConditionNeedsUpdate=`` stamps (guest paths) written into each container territory's
#: layer: without them ``systemd-sysusers`` runs at every boot (Debian has no
#: ``systemd-update-done``), although the image's users already exist (``systemd-sysusers
#: --dry-run`` on the image does nothing). A player's later change to ``/usr`` makes it run
#: again at the next boot, as systemd intends.
NEEDS_UPDATE_STAMPS: tuple[str, ...] = ("etc/.updated", "var/.updated")
#: added to nspawn's environment: no tmpfs on the guest's /tmp, so /tmp survives a reboot
#: as on upstream's NixOS territories and on our QEMU guests
NSPAWN_ENV = {"SYSTEMD_NSPAWN_TMPFS_TMP": "0"}
#: cgroup-v1 ``name=systemd`` hierarchy; where present, each territory's nspawn runs in its
#: own group below :data:`CGROUP_PARENT` (see :func:`territory_cgroups`)
CGROUP_V1_SYSTEMD = Path("/sys/fs/cgroup/systemd")
#: where the host's cgroup hierarchies are mounted (v1: one folder per controller; a pure
#: cgroup-v2 host: the unified hierarchy itself)
CGROUP_V1_ROOT = Path("/sys/fs/cgroup")
CGROUP_PARENT = limits_cg.PARENT
#: cgroup-v1 ``cpu`` hierarchy: where :meth:`ContainerProvider.set_cpu_weight` gives each
#: territory a weighted group ``aoe-territories/<machine>`` (see :func:`cpu_group`)
CGROUP_V1_CPU = Path("/sys/fs/cgroup/cpu")
#: where we mount the cgroup-v2 hierarchy when the host has not (cgroup-v1 hosts)
CGROUP2_MOUNT = Path("/run/aoe-cgroup2")
GUEST_IFACE = "arena0"
SSH_PORT = 22
#: priority of the per-veth ``ip rule ... prohibit`` (after the local table at 0, before main)
RULE_PRIORITY = 20000
_ID_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


def _which(tool: str) -> str | None:
    return shutil.which(tool)


# ------------------------------------------------------------------------- low-level steps


def _run(argv: list[str], *, check: bool = True, input: str | None = None,
         cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run a host command (in folder ``cwd`` when given); raise ProviderError with its stderr
    when ``check`` and it fails."""
    try:
        res = subprocess.run(argv, capture_output=True, text=True, input=input, timeout=30, cwd=cwd)
    except FileNotFoundError:
        raise ProviderError(f"{argv[0]} not found on PATH") from None
    except subprocess.TimeoutExpired:
        raise ProviderError(f"`{' '.join(argv[:4])}` hung for 30 s") from None
    if check and res.returncode != 0:
        raise ProviderError(f"`{' '.join(argv)}` failed: {(res.stderr or res.stdout).strip()[:300]}")
    return res


def _bind_path(path: str | Path) -> str:
    """``path`` as one side of systemd-nspawn's ``--bind``/``--bind-ro`` (``SRC:DEST``):
    backslashes and colons escaped, so a path with ':' binds what it names."""
    return str(path).replace("\\", "\\\\").replace(":", "\\:")


def _ip_batch(lines: list[str], netns: str | None = None) -> None:
    """Run ``ip`` commands (``ip`` argv without the ``ip``, one a line) in one ``ip -batch``
    process, in network namespace ``netns`` when given; stops at the first failure.

    Raises:
        ProviderError: a command failed (names it, with ``ip``'s message).
    """
    argv = ["ip", *(["-n", netns] if netns else []), "-batch", "-"]
    res = _run(argv, check=False, input="\n".join(lines) + "\n")
    if res.returncode != 0:
        err = " ".join((res.stderr or res.stdout).split())[:300]
        m = re.search(r"Command failed -:(\d+)", err)
        failed = lines[int(m.group(1)) - 1] if m and 0 < int(m.group(1)) <= len(lines) else "; ".join(lines)
        raise ProviderError(f"`ip {'-n ' + netns + ' ' if netns else ''}{failed}` failed: {err}")


def _write_sysctl(path: str, value: str) -> None:
    with contextlib.suppress(OSError):
        Path(path).write_text(value)


#: host-wide inotify instances per user (``fs.inotify.max_user_instances``) the provider
#: raises the limit to: every territory's systemd, logind, dbus and user manager hold about
#: 7-10 of root's, so Debian's default 128 stops the ~15th concurrent territory at boot
#: ("Failed to allocate manager object: Too many open files", nspawn exits 255)
INOTIFY_INSTANCES = 8192
INOTIFY_LIMIT = Path("/proc/sys/fs/inotify/max_user_instances")


def _raise_inotify_limit() -> None:
    """Raise ``fs.inotify.max_user_instances`` to :data:`INOTIFY_INSTANCES` when lower
    (never lowers it; a host that refuses keeps its limit)."""
    with contextlib.suppress(OSError, ValueError):
        if int(INOTIFY_LIMIT.read_text()) < INOTIFY_INSTANCES:
            INOTIFY_LIMIT.write_text(str(INOTIFY_INSTANCES))
            log.info("raised fs.inotify.max_user_instances to %d (many territories)", INOTIFY_INSTANCES)


def _hash_password(password: str) -> str:
    """SHA-512 crypt hash (5000 rounds, fast logins) computed with the password on stdin."""
    if _which("openssl"):
        res = subprocess.run(["openssl", "passwd", "-6", "-stdin"], input=password + "\n",
                             capture_output=True, text=True, timeout=10)
        if res.returncode == 0 and res.stdout.startswith("$6$"):
            return res.stdout.strip()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import crypt  # noqa: PLC0415  (stdlib until 3.13)

        return crypt.crypt(password, crypt.mksalt(crypt.METHOD_SHA512))


def _apply_identity(root: Path, territory_id: str, password: str) -> None:
    """Write hostname, /etc/hosts and the root password hash into the territory's own layer.

    Atomic renames without fsync, like every file of the territory's layer: the layer does
    not outlive the host (a crashed runner's territories are removed by
    :func:`cleanup_stale`), so an fsync would only make each boot wait for the disk.
    """
    etc = root / "etc"
    write_atomic(etc / "hostname", territory_id + "\n", mode=0o644, fsync=False)
    hosts = (etc / "hosts").read_text() if (etc / "hosts").exists() else ""
    lines = [ln for ln in hosts.splitlines() if not ln.startswith("127.0.1.1")]
    lines.insert(1, f"127.0.1.1 {territory_id}")
    write_atomic(etc / "hosts", "\n".join(lines) + "\n", mode=0o644, fsync=False)
    shadow = etc / "shadow"
    st = shadow.stat()
    hashed = _hash_password(password)
    out = []
    for ln in shadow.read_text().splitlines():
        parts = ln.split(":")
        if parts and parts[0] == "root" and len(parts) > 2:
            parts[1] = hashed
            ln = ":".join(parts)
        out.append(ln)
    write_atomic(shadow, "\n".join(out) + "\n", mode=0o640, fsync=False)
    os.chown(shadow, st.st_uid, st.st_gid)
    os.chmod(shadow, st.st_mode & 0o7777)
    marker = root / "var" / "lib" / "aoe"
    marker.mkdir(parents=True, exist_ok=True)
    (marker / "identity-applied").touch()


def _apply_fast_stop(root: Path) -> None:
    """Write :data:`FAST_STOP_DROPINS`, :data:`CONTAINER_DROPINS`, the
    :data:`NEEDS_UPDATE_STAMPS` and the masks of :data:`CONTAINER_MASKED_UNITS` and
    :data:`CONTAINER_MASKED_GENERATORS` into a territory root (its own layer, never the image).

    Directories are created root-owned 0755, files 0644, written atomically (no fsync: see
    :func:`_apply_identity`).
    """
    for rel, text in {**FAST_STOP_DROPINS, **CONTAINER_DROPINS}.items():
        path = root / rel
        for parent in reversed(path.relative_to(root).parents[:-1]):
            d = root / parent
            if not d.is_dir():
                d.mkdir(mode=0o755)
                os.chmod(d, 0o755)
        write_atomic(path, text, mode=0o644, fsync=False)
        os.chmod(path, 0o644)
    generators = root / "etc/systemd/system-generators"
    if not generators.is_dir():
        generators.mkdir(mode=0o755)
        os.chmod(generators, 0o755)
    units = root / "etc/systemd/system"
    for link in [units / u for u in CONTAINER_MASKED_UNITS] + [generators / g for g in CONTAINER_MASKED_GENERATORS]:
        if not link.exists() and not link.is_symlink():
            link.symlink_to("/dev/null")
    stamp = ("# written by aoe (container territory): the image's users and caches are current\n"
             f"TIMESTAMP_NSEC={time.time_ns()}\n")
    for rel in NEEDS_UPDATE_STAMPS:
        if not (root / rel).exists():
            write_atomic(root / rel, stamp, mode=0o644, fsync=False)
            os.chmod(root / rel, 0o644)


def _cgroup2_mount(mount: bool = True) -> Path | None:
    """Where the cgroup-v2 hierarchy is mounted (the host's, else ours at
    :data:`CGROUP2_MOUNT`, mounted on first use unless ``mount`` is false); None if it
    cannot be (or is not mounted and ``mount`` is false)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            left, _, right = line.partition(" - ")
            if right.split(" ", 1)[0] == "cgroup2":
                return Path(left.split()[4])
    if not mount:
        return None
    CGROUP2_MOUNT.mkdir(parents=True, exist_ok=True)
    try:
        res = subprocess.run(["mount", "-t", "cgroup2", "none", str(CGROUP2_MOUNT)], capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return CGROUP2_MOUNT if res.returncode == 0 else None


def territory_cgroups(machine: str) -> list[Path]:
    """The cgroups a territory's nspawn runs in, created if needed (``[]`` when they cannot
    be made): on a cgroup-v1 host one in the v1 ``name=systemd`` hierarchy and one in the v2
    hierarchy, both ``aoe-territories/<machine>``; on a cgroup-v2 host the one v2 group (its
    limits: :mod:`aoe_tui.runtime.cgroups`). The limit groups of the v1 controllers
    (``cpu``, ``cpuset``, ``memory``, ``pids``) are made apart, by :func:`cgroups.setup`.

    With ``--keep-unit --register=no`` nspawn puts itself in ``<own cgroup>/supervisor`` and
    its container in ``<own cgroup>/payload``, taking "own cgroup" from the v2 line of
    ``/proc/self/cgroup`` even on a v1 host. Territories of one runner share that cgroup,
    so without a group each their systemds would create and remove the same unit cgroups
    (``payload/system.slice/…``) at once, and a unit now and then failed to start with
    219/CGROUP ("Failed to attach to cgroup").
    """
    if not (CGROUP_V1_SYSTEMD / "cgroup.procs").is_file():
        # a cgroup-v2 host: one group in the unified hierarchy, where the limits go too
        v2 = _cgroup2_mount() if (CGROUP_V1_ROOT / "cgroup.controllers").is_file() else None
        paths = [v2 / CGROUP_PARENT / machine] if v2 is not None else []
    else:
        v2 = _cgroup2_mount()
        paths = [CGROUP_V1_SYSTEMD / CGROUP_PARENT / machine]
        if v2 is not None:
            paths.append(v2 / CGROUP_PARENT / machine)
    try:
        for p in paths:
            make_cpu_group(p)  # (retried: another runner may remove the empty parent meanwhile)
    except OSError:
        return []
    return paths


def _cgroup_pids(paths: list[str]) -> list[int]:
    """Every process in the cgroup trees ``paths`` (a territory's own groups, see
    :func:`territory_cgroups`); ``[]`` for groups that are gone."""
    found: set[int] = set()
    for cg in paths:
        for dirpath, _dirs, files in os.walk(cg):
            if "cgroup.procs" in files:
                with contextlib.suppress(OSError, ValueError):
                    found |= {int(x) for x in Path(dirpath, "cgroup.procs").read_text().split()}
    found.discard(os.getpid())
    return sorted(found)


#: remove a territory's cgroup tree bottom-up; True when it is gone (see :func:`cgroups.remove_tree`)
remove_cgroup = limits_cg.remove_tree


def cpu_weight_problem() -> str | None:
    """Why :meth:`ContainerProvider.set_cpu_weight` can weigh nothing on this host (one
    clause, for a one-line note), or None when it can: the territories get their own
    groups only on a cgroup-v1 host (:data:`CGROUP_V1_SYSTEMD`, :func:`territory_cgroups`)
    and the weights live in the v1 ``cpu`` hierarchy (:data:`CGROUP_V1_CPU`). On a pure
    cgroup-v2 host nspawn's payload groups are shared by every territory of the runner, so
    there is no territory group to weigh. Reads two paths; raises nothing."""
    if not (CGROUP_V1_SYSTEMD / "cgroup.procs").is_file():
        return (f"this host is not on cgroup v1 (no {CGROUP_V1_SYSTEMD}); the weights need the v1 cpu "
                "hierarchy, cgroup v2 is not supported")
    if not (CGROUP_V1_CPU / "cgroup.procs").is_file():
        return f"this host has no cgroup-v1 cpu hierarchy ({CGROUP_V1_CPU})"
    return None


def cpu_group(machine: str, cpu_root: Path = CGROUP_V1_CPU) -> Path:
    """The weighted ``cpu`` group of territory ``machine`` (``aoe-<hash>``, the name of its
    own groups, :func:`territory_cgroups`): ``<cpu_root>/aoe-territories/<machine>``."""
    return cpu_root / CGROUP_PARENT / machine


#: create a group and its parent ``aoe-territories``, retried while another runner's cleanup
#: removes the empty parent meanwhile (:func:`remove_cpu_group`); raises :class:`OSError`
make_cpu_group = limits_cg.make_group


def remove_cpu_group(group: Path) -> bool:
    """Remove a territory's weighted ``cpu`` group, then its parent ``aoe-territories`` if
    that has no other group left (:func:`cgroups.remove_groups`, race-safe: while another
    runner's group is in it, or one is being made, it stays); True when ``group`` is gone."""
    return not limits_cg.remove_groups([group])


def _remove_cgroup_soon(path: Path, timeout_s: float = 3.0) -> bool:
    """:func:`remove_cgroup`, retried for up to ``timeout_s`` seconds: SIGKILL to whatever
    still runs in the territory's own cgroup tree (only its processes are there; e.g. an
    nspawn stopped before its init existed leaves its helper), and time for the runner to
    reap its nspawn (a zombie keeps a cgroup-v1 group busy). True when the tree is gone."""
    deadline = time.monotonic() + timeout_s
    while not remove_cgroup(path):
        if time.monotonic() > deadline:
            return False
        for dirpath, _dirs, _files in os.walk(path):
            with contextlib.suppress(OSError, ValueError):
                for pid in Path(dirpath, "cgroup.procs").read_text().split():
                    with contextlib.suppress(OSError):
                        os.kill(int(pid), signal.SIGKILL)
        time.sleep(0.02)
    return True


def _signal_leader(nspawn_pid: int, sig: int) -> bool:
    """Send ``sig`` to the container init under ``nspawn_pid``; True if it was delivered.

    The init is found and re-checked through a pidfd, so a recycled PID is never signalled.
    """
    leader = _leader_of(nspawn_pid)
    if leader is None:
        return False
    try:
        fd = os.pidfd_open(leader)
    except OSError:
        return False
    try:
        if leader not in _children(nspawn_pid):  # exited (and maybe recycled) before the pidfd
            return False
        signal.pidfd_send_signal(fd, sig)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def _children(pid: int) -> list[int]:
    try:
        return [int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except (OSError, ValueError):
        return []


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def _is_our_nspawn(pid: int, root: str) -> bool:
    cmd = _cmdline(pid)
    return bool(cmd) and "systemd-nspawn" in cmd[0] and any(a == f"--directory={root}" for a in cmd)


def _leader_of(nspawn_pid: int) -> int | None:
    """PID (host view) of the container's init: the nspawn child whose NSpid ends in 1."""
    for child in _children(nspawn_pid):
        try:
            status = Path(f"/proc/{child}/status").read_text()
        except OSError:
            continue
        for ln in status.splitlines():
            if ln.startswith("NSpid:") and ln.split()[-1] == "1" and len(ln.split()) > 2:
                return child
    return None


def referee_tampering(root: str | Path, lowers: Sequence[str | Path],
                      binaries: Sequence[str] = REFEREE_BINARIES) -> list[Tampering]:
    """The guest binaries the referee runs that are no longer the image's, each with how it
    differs (:func:`aoe_tui.runtime.tamper.binary_tampering`: a symlink leaving the territory,
    removed, or its size and digest against the image's). ``root``: the territory's root as
    the host sees it; ``lowers``: the image's trees, top first. ``[]`` when all are the image's."""
    return binary_tampering(root, lowers, binaries)


async def guest_boot_state(leader: int, timeout_s: float = 5.0) -> str:
    """The container's systemd state (``systemctl is-system-running``: ``running``,
    ``degraded``, ``starting``...) asked from the host side: :data:`ENTER_GUEST` into the
    namespaces of init ``leader`` (host PID), without capabilities, and run the guest's
    systemctl with :data:`REFEREE_ENV`. Returns ``""`` when it cannot be asked (init gone,
    timeout). Never raises.
    """
    import sys

    argv = [sys.executable, *ENTER_FLAGS, "-c", ENTER_GUEST, str(leader),
            "/usr/bin/env", "-i", *REFEREE_ENV, "/usr/bin/systemctl", "is-system-running"]
    try:
        proc = await asyncio.create_subprocess_exec(*argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                                    stderr=subprocess.DEVNULL, env={})
    except OSError:
        return ""
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout_s)
    except (asyncio.TimeoutError, TimeoutError):
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        return ""
    return out.decode(errors="replace").strip()


def _umount(path: str, *, lazy: bool = False) -> bool:
    """``umount2(path)`` (``MNT_DETACH`` when ``lazy``) without starting a process; True on success."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    return libc.umount2(os.fsencode(path), 2 if lazy else 0) == 0


def _wait_gone(pids: list[int], timeout_s: float) -> bool:
    """True once none of ``pids`` is alive (polled every 10 ms for up to ``timeout_s`` s)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not any(netalloc.pid_alive(p) for p in pids):
            return True
        time.sleep(0.01)
    return not any(netalloc.pid_alive(p) for p in pids)


#: seconds nspawn gets to exit by itself once its container's init was SIGKILLed (it
#: notices at once and removes its own files under ``/run/systemd/nspawn``) before it is
#: SIGKILLed too
NSPAWN_EXIT_S = 2.0
#: where nspawn keeps each machine's mount propagation folder
NSPAWN_PROPAGATE = Path("/run/systemd/nspawn/propagate")


def destroy_from_state(state: dict[str, Any], *, graceful_s: float = 2.0) -> list[str]:
    """Undo everything one territory's ``state.json`` records; return what could not be removed.

    Order: stop the container, unmount the root, unmount the territory's own disk (its loop
    device goes with it; one left over is freed) and delete ``disk.img``, remove the
    territory's cgroups (its own groups, its limit groups and, where
    :meth:`ContainerProvider.set_cpu_weight` made one, its weighted ``cpu`` group; their
    parents ``aoe-territories`` go too once empty), delete the host veth and the network
    namespace, remove the overlay folders. Each step tolerates an already-gone resource.
    Used by :meth:`ContainerProvider.teardown` and :func:`cleanup_stale`.

    The container gets no orderly shutdown: a territory is thrown away, and everything
    kept from it (``console.log``, evidence, agent logs) is written on the host before the
    teardown begins. Its init is SIGKILLed (the kernel then kills every process of its PID
    namespace), nspawn exits by itself within :data:`NSPAWN_EXIT_S` seconds (else it is
    SIGKILLed). Only an nspawn caught before its init exists gets SIGTERM and
    ``graceful_s`` seconds, then SIGKILL. A teardown of three territories takes 0.2-0.5 s
    (an orderly guest shutdown took 0.4-2.2 s).
    """
    leftovers: list[str] = []
    root = state.get("root", "")
    pid = int(state.get("nspawn_pid") or 0)
    leader = int(state.get("leader_pid") or 0)
    pids: list[int] = []
    grace = 0.0
    if pid and netalloc.pid_alive(pid) and _is_our_nspawn(pid, root):
        pids.append(pid)
        if _signal_leader(pid, signal.SIGKILL):
            leader = 0  # dead; nspawn follows on its own
            grace = NSPAWN_EXIT_S
        else:  # no init yet (nspawn still setting up): ask nspawn itself
            leader = _leader_of(pid) or 0
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            grace = graceful_s
    if leader and netalloc.pid_alive(leader):
        # the leader of a container whose nspawn is gone (killed runner) is only ours if its
        # root is the territory root
        with contextlib.suppress(OSError):
            if not pids and os.readlink(f"/proc/{leader}/root") != root:
                leader = 0
        if leader:
            pids.append(leader)
    if pids and not _wait_gone(pids, grace):
        for p in reversed(pids):
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)
        if not _wait_gone(pids, 5.0):
            leftovers.append(f"processes {pids}")
    # what still runs in the territory's own cgroups: a container whose nspawn was killed with
    # its runner's whole process group (a Ray node's processes) keeps its init and services,
    # which the readlink check above cannot always recognise; the cgroups are ours alone
    cgroups = [str(p) for p in state.get("cgroups") or []]
    # its limit groups (cgroups.setup), which hold only its processes too
    limit_groups = limits_cg.TerritoryGroups.from_json(state.get("limit_groups")).paths()
    cgroups = list(dict.fromkeys([*cgroups, *(str(p) for p in limit_groups)]))
    # the weighted cpu group (set_cpu_weight) is named after the territory's own groups and,
    # like them, holds only its processes; not in state.json: derived, so a runner killed
    # mid-heat leaves nothing the sweep does not know
    cpu = cpu_group(Path(cgroups[0]).name) if cgroups else None
    if cpu is not None and cpu.is_dir() and str(cpu) not in cgroups:
        cgroups.append(str(cpu))
    elif cpu is not None and str(cpu) in cgroups:
        pass  # the cpu limit group is the weighted one
    else:
        cpu = None  # weights were off (or it is gone already)
    left = _cgroup_pids(cgroups)
    if left:
        for p in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)
        if not _wait_gone(left, 5.0):
            leftovers.append(f"processes {left}")
    if root:
        for _ in range(4):  # stacked mounts: the overlay (or copy) on the root's shared bind mount
            mps = _mounts_under(Path(root))
            if not mps:
                break
            for mp in mps:
                if not _umount(mp):
                    _umount(mp, lazy=True)
        if _mounts_under(Path(root)):
            leftovers.append(f"mount {root}")
    disk = state.get("disk")
    if (isinstance(disk, dict) and disk.get("image") and disk.get("mount")
            and not any(x.startswith("mount") for x in leftovers)):
        # its own disk: unmount (the loop device goes with it), free a loop left over, delete the
        # image; a record without both paths is skipped (Path("") would be the current folder)
        leftovers.extend(territory_disk.remove_disk(Path(disk["image"]), Path(disk["mount"])))
    veth = state.get("host_veth")
    if veth and not any(x.startswith("processes") for x in leftovers):
        # nspawn leaves its (empty) mount propagation folder: "Attempted to remove disk file
        # system under /run/systemd/nspawn/propagate/..., and we can't allow that"
        with contextlib.suppress(OSError):
            shutil.rmtree(NSPAWN_PROPAGATE / f"aoe-{veth[3:]}")
    if not any(x.startswith("processes") for x in leftovers):
        for cg in cgroups:
            if not _remove_cgroup_soon(Path(cg)):
                leftovers.append(f"cgroup {cg}")
        if cpu is not None and not cpu.exists():
            remove_cpu_group(cpu)  # its parent, once no other runner's group is in it
        limits_cg.remove_groups(cgroups)  # their empty parents (aoe-territories) likewise
    ns = state.get("netns")
    # one `ip` process for the whole network side (deleting the veth drops its address and
    # route; -force goes on past an already-gone one); the rule is deleted up to 8 times in
    # case a relaunch added a duplicate
    batch = [f"rule del iif {veth} priority {RULE_PRIORITY}"] * 8 if veth else []
    if veth and Path(f"/sys/class/net/{veth}").exists():
        batch.append(f"link del {veth}")
    if ns and Path(f"/run/netns/{ns}").exists():
        batch.append(f"netns del {ns}")
    if batch:
        _run(["ip", "-force", "-batch", "-"], check=False, input="\n".join(batch) + "\n")
    if veth and f"iif {veth} " in _run(["ip", "rule", "list"], check=False).stdout:
        leftovers.append(f"ip rule iif {veth}")
    if veth and Path(f"/sys/class/net/{veth}").exists():
        leftovers.append(f"link {veth}")
    if ns and Path(f"/run/netns/{ns}").exists():
        leftovers.append(f"netns {ns}")
    if not any(x.startswith("mount") for x in leftovers):
        for d in state.get("dirs", []):
            try:
                safe_rmtree(Path(d))
            except ProviderError as exc:
                leftovers.append(str(exc))
    return leftovers


def cleanup_stale(workdir: Path) -> list[str]:
    """Tear down territories left behind by a runner that was killed.

    Scans ``<workdir>/*/state.json`` (only ``"provider": "container"`` ones); for each one
    whose ``owner_pid`` is no longer alive (or, with ``owner_start``, is now another
    process's: a pid reused, as :func:`aoe_tui.cluster.sweep` judges a heat folder),
    stops its container, unmounts its root, deletes its veth and network namespace,
    removes its overlay folders and its ``state.json``, and frees its subnet lease.
    Territories of a live runner are left alone.

    Returns the ids of the territories cleaned up. Raises :class:`ProviderError` if a
    leftover could not be removed (the message names it).
    """
    cleaned: list[str] = []
    problems: list[str] = []
    if not workdir.is_dir():
        return cleaned
    for sf in sorted(workdir.glob("*/state.json")):
        try:
            state = json.loads(sf.read_text())
        except (OSError, ValueError):
            problems.append(f"{sf}: unreadable state file")
            continue
        if not isinstance(state, dict) or state.get("provider") != "container":
            continue  # another provider's territory (e.g. qemu): its own cleanup_stale handles it
        owner = int(state.get("owner_pid") or 0)
        start = state.get("owner_start")
        if owner and netalloc.pid_alive(owner, start if isinstance(start, int) else None):
            continue  # a live runner's (a pid reused since, with another start, is not it)
        left = destroy_from_state(state, graceful_s=3.0)
        if left:
            problems.append(f"{state.get('id', sf.parent.name)}: " + ", ".join(left))
            continue
        if state.get("subnet"):
            with contextlib.suppress(ProviderError, OSError):
                netalloc.NetAllocator().release_value("subnet", state["subnet"])
        sf.unlink(missing_ok=True)
        (sf.parent / REFEREE_STATE_FILE).unlink(missing_ok=True)  # its companion, as teardown removes it
        cleaned.append(str(state.get("id", sf.parent.name)))
    if problems:
        raise ProviderError("stale territory cleanup incomplete: " + "; ".join(problems))
    return cleaned


# ------------------------------------------------------------------------------ provider


@dataclass
class _Box:
    """Runtime record of one container territory."""

    spec: TerritorySpec
    dir: Path
    address: str
    host_address: str
    netns: str
    host_veth: str
    subnet: str
    mode: str = "overlay"
    proc: asyncio.subprocess.Process | None = None
    leader_pid: int | None = None
    supervisor: asyncio.Task[None] | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    launches: int = 0
    exits: list[int | None] = field(default_factory=list)
    dead: asyncio.Future[int | None] | None = None
    #: the nspawn process the provider hard-reset (its exit counts as a reboot: relaunch)
    reset: asyncio.subprocess.Process | None = None
    #: the territory's own cgroups (cgroup-v1 hosts), see territory_cgroups
    cgroups: list[Path] = field(default_factory=list)
    #: the image's read-only trees, top first (arena layers, then the base rootfs): where the
    #: referee finds the image's own copy of a guest file (see :func:`referee_tampering`)
    lowers: list[str] = field(default_factory=list)
    #: set when the provisioning thread of this territory has ended (None: none started)
    prepared: threading.Event | None = None
    #: teardown removed ``state.json``: it is never written again
    state_removed: bool = False
    #: the territory's limit groups (:mod:`aoe_tui.runtime.cgroups`; empty: none enforced)
    limits: limits_cg.TerritoryGroups = field(default_factory=limits_cg.TerritoryGroups)
    #: whether the territory's writable layer is on its own disk (:mod:`territory_disk`)
    own_disk: bool = False
    #: the limits hit so far (phrases of :meth:`ContainerProvider.exhaustion`; latched)
    exhausted: list[str] = field(default_factory=list)
    #: why the territory has no disk of its own (empty when it has one)
    disk_why: str = ""
    #: its CPU weight by phase (``CPUWeight=`` scale; :meth:`ContainerProvider.set_cpu_weight`)
    cpu_weight: int = 100
    #: whether it yields the CPU now (:class:`cgroups.CpuYield`; None: no ``cpu`` group or
    #: no CPU accounting, so no yield)
    cpu_yield: limits_cg.CpuYield | None = None
    #: its CPU demand so far (what :attr:`cpu_yield` is fed)
    cpu_demand: limits_cg.CpuDemand = field(default_factory=limits_cg.CpuDemand)

    root = SubPath("dir", "root", "The territory's root file system (an overlay mount, or a copy where overlayfs is unusable).")
    disk = SubPath("dir", "disk", "Where the territory's own disk is mounted (its writable layer's file system; a "
                   "plain folder where the disk limit is not enforced).")
    disk_image = SubPath("dir", "disk.img", "The territory's disk: an ext4 image of disk_mib MiB, its space reserved on the host (fallocate).")
    upper = SubPath("dir", "disk/upper", "The overlay's upper (writable) tree, on the territory's disk.")
    work = SubPath("dir", "disk/work", "The overlay's work folder, on the territory's disk.")
    copy = SubPath("dir", "disk/root", "The full-copy root (where overlayfs is unusable), on the territory's "
                   "disk; bind-mounted on ``root``.")

    def procs_groups(self) -> list[Path]:
        """Every cgroup the territory's nspawn enters at launch: its own groups, then its
        limit groups."""
        return list(dict.fromkeys([*self.cgroups, *self.limits.entry_paths()]))
    console = SubPath("dir", "console.log", "The nspawn console log.")

    def state(self, owner_pid: int, heat_id: str, owner_start: int | None = None) -> dict[str, Any]:
        return {
            "provider": "container",
            "id": self.spec.id,
            "heat_id": heat_id,
            "owner_pid": owner_pid,
            "owner_start": owner_start,
            "nspawn_pid": self.proc.pid if self.proc else None,
            "leader_pid": self.leader_pid,
            "root": str(self.root),
            "mode": self.mode,
            "mounts": [str(self.root)] if self.mode in ("overlay", "copy") else [],
            "dirs": [str(self.upper), str(self.work), str(self.root), str(self.disk)],
            "cgroups": [str(p) for p in self.cgroups],
            "limit_groups": self.limits.to_json(),
            "disk": {"image": str(self.disk_image), "mount": str(self.disk), "mib": self.spec.resources.disk_mib}
            if self.own_disk else None,
            "lowers": list(self.lowers),
            "netns": self.netns,
            "host_veth": self.host_veth,
            "address": self.address,
            "subnet": self.subnet,
            "launches": self.launches,
        }


#: the companion of ``state.json`` the arenas' verifiers read (see :func:`_write_referee_state`)
REFEREE_STATE_FILE = "referee-state"


def _write_referee_state(folder: Path, state: dict[str, Any]) -> None:
    """Write ``<folder>/referee-state``, the fields of ``state`` (a ``state.json`` dict) the
    verifiers' ``territory_state`` (arenas' ``verify/lib.sh``) needs, read there with one bash
    builtin (``mapfile -d ''``) instead of a jq run (~45 ms of CPU): NUL-terminated
    ``container``, ``root``, ``nspawn_pid``, ``leader_pid`` (decimal, empty for None), then each
    of ``lowers``. Ours, not upstream's. Written atomically (no fsync: only running verifiers
    read it) right after ``state.json``, so it is never older than the ``state.json`` it
    mirrors; a verifier that finds it older (or unreadable) reads ``state.json`` with jq."""
    fields = ["container", str(state.get("root") or ""),
              *("" if state.get(k) is None else str(state[k]) for k in ("nspawn_pid", "leader_pid")),
              *(str(p) for p in state.get("lowers") or [])]
    write_atomic(folder / REFEREE_STATE_FILE, "".join(f"{f}\0" for f in fields), fsync=False, mode=0o644)


class ContainerProvider(TerritoryProvider):
    """Territories as systemd-nspawn system containers (see the module docstring).

    Args:
        workdir: folder of the heat's territories; each gets ``<workdir>/<id>/`` holding
            ``credential.env`` (mode 0600), ``console.log``, ``state.json`` and, while it
            runs, its overlay folders.
        image: the guest image (default: :func:`aoe_tui.runtime.image.require_image`).
        cidr: preferred ``/24`` (arena ``network.cidr``); another free one is used when a
            live heat or a host route already has it. Territory ``i`` gets ``.(10+i)``.
        heat_id: unique id of the heat (owner of the address lease); generated if omitted.
        ready_timeout_s: seconds for every territory to accept a root SSH login.
        reboot_timeout_s: seconds for SSH to come back after a reboot (spec §3.4).
        reboot_grace_s: seconds the guest gets to finish an orderly ``systemctl reboot``
            before the provider forces it (see :meth:`reboot`).
    """

    name = "container"

    def __init__(
        self,
        workdir: Path,
        image: GuestImage | None = None,
        cidr: str = "10.78.0.0/24",
        heat_id: str | None = None,
        ready_timeout_s: float = 60,
        reboot_timeout_s: float = 120,
        reboot_grace_s: float = 10,
    ) -> None:
        # absolute: every path state.json records is compared with /proc/self/mountinfo and
        # losetup's absolute ones at teardown (a relative one, as `aoe demo`'s seasons-out/,
        # left each territory's disk mounted and its 2 GiB image behind)
        self.workdir = Path(workdir).absolute()
        self.image = image
        self.cidr = cidr
        self.heat_id = heat_id or netalloc.new_heat_id()
        self.ready_timeout_s = ready_timeout_s
        self.reboot_timeout_s = reboot_timeout_s
        self.reboot_grace_s = reboot_grace_s
        self._boxes: dict[str, _Box] = {}
        self._closing = False
        #: the copy fallback (overlayfs unusable) was said for this heat: once, not per territory
        self._copy_said = False
        self._teardown_task: asyncio.Task[None] | None = None
        self._pacer: asyncio.Task[None] | None = None
        #: held while a territory's CPU weight is decided and written (the pacer's thread,
        #: :meth:`set_cpu_weight`'s), so neither writes a weight from the other's stale state
        self._weight_lock = threading.Lock()
        self._alloc = netalloc.NetAllocator()
        self.subnet: str | None = None
        self._state_lock = threading.Lock()
        #: (pid, start ticks) of this process, the owner recorded in every ``state.json``
        #: (:meth:`_save_state`; read from ``/proc`` once)
        self._owner: tuple[int, int | None] | None = None

    # -- checks ------------------------------------------------------------------------

    def _preflight(self, specs: Sequence[TerritorySpec]) -> tuple[GuestImage, str]:
        nspawn = _which("systemd-nspawn")
        if nspawn is None:
            raise ProvisionError(
                "container provider: systemd-nspawn not found on PATH; install it with: "
                "apt-get install -y systemd-container"
            )
        if _which("ip") is None:
            raise ProvisionError("container provider: ip not found on PATH; install it with: apt-get install -y iproute2")
        if os.geteuid() != 0:
            raise ProvisionError("container provider needs root (network namespaces, mounts); run as root or use --provider qemu")
        if self.image is None:
            try:
                self.image = require_image()
            except ProviderError as exc:  # ImageMissingError: the message names `aoe image build`
                raise ProvisionError(f"container provider: {exc}") from exc
        image = self.image
        if not os.path.lexists(image.rootfs / "sbin" / "init"):
            raise ProvisionError(f"guest image root filesystem {image.rootfs} is incomplete; rebuild it with: aoe image build --force")
        seen: set[str] = set()
        for s in specs:
            if not _ID_RE.match(s.id):
                raise ProvisionError(f"territory id {s.id!r} is not a valid hostname (a-z, 0-9, '-')")
            if s.id in seen:
                raise ProvisionError(f"territory id {s.id!r} appears twice")
            seen.add(s.id)
            if not 0 <= s.index <= 240:
                raise ProvisionError(f"territory {s.id}: index {s.index} out of range 0..240 (spec §6.2)")
        if not specs:
            raise ProvisionError("no territories to provision")
        _raise_inotify_limit()
        return image, nspawn

    # -- provision ---------------------------------------------------------------------

    async def provision(self, specs: Sequence[TerritorySpec]) -> list[Territory]:
        """Boot one container per spec concurrently; return them SSH-ready in spec order.

        Raises:
            ProvisionError: missing tool/image/privilege, bad spec, or a territory that did
                not boot or accept a root login within ``ready_timeout_s`` (the message
                names it and ends with its console log tail). Everything started has been
                torn down before this is raised.
        """
        if self._closing:
            raise ProvisionError("provider already torn down")
        image, nspawn = self._preflight(specs)
        try:
            net = await asyncio.to_thread(self._alloc.allocate_subnet, self.heat_id, self.cidr)
            self.subnet = str(net)
            hosts = list(net)  # includes network/broadcast; index by offset
            for s in specs:
                h = hashlib.sha1(f"{self.heat_id}/{s.id}".encode()).hexdigest()[:8]
                self._boxes[s.id] = _Box(
                    spec=s, dir=self.workdir / s.id, address=str(hosts[10 + s.index]),
                    host_address=str(hosts[1]), netns=f"aoe-{h}", host_veth=f"aoe{h}", subnet=str(net),
                )
            boxes = [self._boxes[s.id] for s in specs]
            for b in boxes:  # a cancelled to_thread leaves its thread running: teardown waits for it
                b.prepared = threading.Event()
            await asyncio.gather(*(asyncio.to_thread(self._prepare, b, image) for b in boxes))
            shared = limits_cg.share_note([(b.spec.id, b.spec.resources.vcpus, b.limits.cpus) for b in boxes])
            if shared:
                self._note(shared)
            for b in boxes:  # a class larger than this host: the seat sees (and gets) fewer CPUs
                got = len(limits_cg.parse_cpus(b.limits.cpus))
                if got and b.spec.resources.vcpus > got:
                    self._note(f"territory {b.spec.id}: its class asks {b.spec.resources.vcpus} vCPUs; this host "
                               f"has {got} for it, so it sees and gets {got} (nproc {got})")
            for b in boxes:
                await self._launch(b, nspawn)
                b.supervisor = asyncio.create_task(self._supervise(b, nspawn), name=f"nspawn-{b.spec.id}")
            if self._pacer is None and any(b.cpu_yield is not None for b in boxes):
                self._pacer = asyncio.create_task(self._pace(), name=f"cpu-yield-{self.heat_id}")
            await asyncio.gather(*(self._wait_boot(b) for b in boxes))
        except BaseException as exc:
            cause = exc if isinstance(exc, ProviderError) else None
            with contextlib.suppress(Exception):
                await self.teardown()
            if cause is not None:
                raise ProvisionError(str(cause)) from None
            if isinstance(exc, Exception):
                raise ProvisionError(f"container provision failed: {type(exc).__name__}: {exc}") from exc
            raise
        out: list[Territory] = []
        for s in specs:
            b = self._boxes[s.id]
            cred = write_credential_file(b.dir / "credential.env", s.password, {"AOE_SSH_PORT": str(SSH_PORT)})
            out.append(Territory(
                id=s.id, host=b.address, ssh_port=SSH_PORT, service_port=s.service_port, password=s.password,
                credential_file=cred,
                extra={"provider": "container", "netns": b.netns, "host_veth": b.host_veth, "root": str(b.root),
                       "nspawn_pid": b.proc.pid if b.proc else None, "leader_pid": b.leader_pid,
                       "console_log": str(b.console), "heat_id": self.heat_id,
                       # the host-side groups its login sessions are ended in (cgroups.end_sessions)
                       "cgroups": [str(p) for p in b.cgroups]},
            ))
        return out

    def _save_state(self, b: _Box) -> None:
        """Write ``b``'s ``state.json`` (blocking); never once teardown has removed it (a
        write still in flight in a thread of a cancelled step must not bring it back)."""
        with self._state_lock:
            if b.state_removed:
                return
            b.dir.mkdir(parents=True, exist_ok=True)
            pid = os.getpid()
            if self._owner is None or self._owner[0] != pid:  # read once (again only in a forked child)
                self._owner = (pid, netalloc.process_start_ticks(pid))
            state = b.state(pid, self.heat_id, self._owner[1])
            write_atomic(b.dir / "state.json", json.dumps(state, indent=2) + "\n", mode=0o644)
            _write_referee_state(b.dir, state)

    def _remove_state(self, b: _Box) -> None:
        with self._state_lock:
            b.state_removed = True
            (b.dir / "state.json").unlink(missing_ok=True)
            (b.dir / REFEREE_STATE_FILE).unlink(missing_ok=True)

    def _prepare(self, b: _Box, image: GuestImage) -> None:
        """Create the CoW root, write the identity, create netns + veth (blocking; run in a
        thread); sets ``b.prepared`` when it ends, however it ends."""
        try:
            self._prepare_box(b, image)
        finally:
            if b.prepared is not None:
                b.prepared.set()

    def _prepare_box(self, b: _Box, image: GuestImage) -> None:
        # (``upper``/``work`` at the top: where an earlier version kept the writable layer)
        for d in (b.disk, b.disk_image, b.root, b.dir / "upper", b.dir / "work"):
            if d.exists():
                b.mode = "foreign"  # not ours: teardown must leave it alone
                raise ProviderError(f"territory {b.spec.id}: {d} already exists (stale run? try cleanup_stale)")
        b.dir.mkdir(parents=True, exist_ok=True)
        machine = f"aoe-{b.host_veth[3:]}"
        b.cgroups = territory_cgroups(machine)
        b.disk.mkdir()
        b.root.mkdir()
        res_ = b.spec.resources
        disk_why = territory_disk.disk_problem()
        b.own_disk = disk_why is None
        self._save_state(b)  # before anything is created, so a crash leaves a record
        seats = sorted(self._boxes.values(), key=lambda x: x.spec.index)
        peers = limits_cg.heat_order(self.heat_id, [(f"aoe-{x.host_veth[3:]}", x.spec.resources.vcpus) for x in seats])
        b.limits = limits_cg.setup(self._cgroup_host(), machine, b.spec.id, res_, b.spec.index,
                                   lock_file=netalloc.runtime_dir() / limits_cg.CPU_PICK_LOCK, peers=peers)
        if "cpu" in b.limits.groups and limits_cg.cpu_usage_s(b.limits) is not None:
            b.cpu_yield = limits_cg.CpuYield(res_.vcpus)
        self._save_state(b)
        if disk_why is None:
            try:
                took, disk_note = territory_disk.make_disk(b.disk_image, b.disk, res_.disk_mib, b.spec.id)
                log.info("territory %s: %d MiB disk made and mounted in %.3f s", b.spec.id, res_.disk_mib, took)
                if disk_note:
                    self._note(disk_note)
            except ProvisionError:
                raise  # the host has not the space for the class's disk: the heat cannot start
            except ProviderError as exc:
                disk_why = str(exc)
                b.own_disk = False
                b.disk.mkdir(exist_ok=True)
                self._save_state(b)
        if disk_why is not None:
            b.disk_why = disk_why
            self._note(f"disk limit not enforced: {disk_why}; a territory may fill the host's disk")
        for limit, why in self._not_enforced_cgroups(b).items():
            self._note(f"{limit} limit not enforced: {why}")
        b.upper.mkdir()
        b.work.mkdir()
        # the arena's image layer (if any) sits between the base root filesystem and the
        # territory's own writable layer
        lowers = [str(p) for p in (*image.layers, image.rootfs)]
        b.lowers = lowers
        # the root's own mounts are unmounted everywhere with the host's (territory_disk.shared_mountpoint)
        try:
            territory_disk.shared_mountpoint(b.root)
        except OSError as exc:
            raise ProviderError(f"territory {b.spec.id}: {exc}") from None
        # the writable layer is named relative to the territory's folder (mount runs there), so
        # an output path with ',' or ':' (the option separators) still gets an overlay; the
        # image's trees are absolute (image_users finds them in the mount table)
        opts = f"lowerdir={':'.join(lowers)},upperdir={b.upper.relative_to(b.dir)},workdir={b.work.relative_to(b.dir)}"
        odd = next((c for low in lowers for c in ",:" if c in low), None)
        res = None if odd else _run(["mount", "-t", "overlay", "overlay", "-o", opts, str(b.root)],
                                    check=False, cwd=b.dir)
        if res is None or res.returncode != 0:
            b.mode = "copy"
            why = res.stderr.strip() if res is not None else f"the image's path {lowers[-1]} has {odd!r}"
            if not self._copy_said:  # said once per heat, not once per territory
                self._copy_said = True
                log.info("overlayfs unusable for %s (%s); copying the root filesystem of each territory",
                         b.spec.id, why)  # the operator reads the note, not a second line on stderr
                self._note(f"overlayfs unusable ({why}): each territory's root is a full copy of the image")
            b.copy.mkdir()  # on the territory's disk, bind-mounted on the root
            _run(["cp", "-a", "--reflink=auto", str(image.rootfs) + "/.", str(b.copy)])
            if image.layers:
                from aoe_tui.runtime.layers import apply_upper

                for layer in reversed(image.layers):  # bottom layer first
                    apply_upper(Path(layer), b.copy)
            _run(["mount", "--bind", str(b.copy), str(b.root)])
        self._save_state(b)
        _apply_identity(b.root, b.spec.id, b.spec.password)
        _apply_fast_stop(b.root)
        # network: netns with arena0 <-> host end aoe<hash> (state.json already names both;
        # teardown passes over an absent one). One `ip` process per step, not one per command.
        hv = b.host_veth
        _ip_batch([f"netns add {b.netns}", f"link add {hv} type veth peer name {GUEST_IFACE} netns {b.netns}"])
        _write_sysctl(f"/proc/sys/net/ipv6/conf/{hv}/disable_ipv6", "1")
        _write_sysctl(f"/proc/sys/net/ipv4/conf/{hv}/forwarding", "0")
        _write_sysctl(f"/proc/sys/net/ipv4/conf/{hv}/proxy_arp", "0")
        _write_sysctl(f"/proc/sys/net/ipv4/conf/{hv}/accept_local", "0")
        # policy: whatever arrives on the territory's veth and is not for a local address is
        # dropped, even if someone turns global forwarding on later (ip_forward=1 rewrites
        # every interface's forwarding flag)
        _ip_batch([f"rule add iif {hv} priority {RULE_PRIORITY} prohibit",
                   f"addr add {b.host_address}/32 dev {hv}",
                   f"link set {hv} up",
                   f"route add {b.address}/32 dev {hv} src {b.host_address}"])
        self._setup_guest_net(b)

    def _setup_guest_net(self, b: _Box) -> None:
        _ip_batch(["link set lo up", f"addr replace {b.address}/24 dev {GUEST_IFACE}",
                   f"link set {GUEST_IFACE} up"], netns=b.netns)

    def _nspawn_argv(self, b: _Box, nspawn: str) -> list[str]:
        argv = [
            nspawn, "--boot", "--register=no", "--keep-unit", "--quiet",
            f"--directory={b.root}", f"--machine=aoe-{b.host_veth[3:]}", f"--hostname={b.spec.id}",
            f"--network-namespace-path=/run/netns/{b.netns}", "--console=read-only",
            "--link-journal=no", "--resolv-conf=off", "--timezone=off",
        ]
        # harness shares (opencode...): read-only binds, the same at every relaunch (reboots)
        # (nspawn splits --bind on ':' and undoes backslash escapes: a path's own are escaped)
        argv += [f"--bind-ro={_bind_path(share.host)}:{_bind_path(share.guest)}" for share in b.spec.shares]
        if not b.procs_groups():
            return argv
        # enter the territory's own cgroups and its limit groups, then become nspawn (same pid)
        return ["/bin/sh", "-c", 'for cg in $1; do echo $$ > "$cg/cgroup.procs" || exit 97; done; shift; exec "$@"',
                "sh", " ".join(str(p) for p in b.procs_groups()), *argv]

    async def _launch(self, b: _Box, nspawn: str) -> None:
        """Start nspawn for ``b`` (caller holds no lock; takes ``b.lock``). Never after teardown began."""
        async with b.lock:
            if self._closing:
                return
            with b.console.open("ab") as con:
                con.write(f"\n=== aoe: launch {b.launches + 1} of {b.spec.id} at {time.strftime('%H:%M:%S')} ===\n".encode())
                con.flush()
                b.proc = await asyncio.create_subprocess_exec(
                    *self._nspawn_argv(b, nspawn), stdin=subprocess.DEVNULL, stdout=con, stderr=con,
                    start_new_session=True, env={**os.environ, **NSPAWN_ENV},
                )
            b.launches += 1
            b.leader_pid = None
            b.dead = asyncio.get_running_loop().create_future()
            await asyncio.to_thread(self._save_state, b)

    async def _supervise(self, b: _Box, nspawn: str) -> None:
        """Wait for nspawn to exit; relaunch the same root after a guest reboot (rc 133)."""
        while True:
            proc = b.proc
            if proc is None:
                return
            rc = await proc.wait()
            b.exits.append(rc)
            if self._closing:
                return
            with b.console.open("ab") as con:
                con.write(f"\n=== aoe: nspawn of {b.spec.id} exited with {rc} ===\n".encode())
            if rc != NSPAWN_REBOOT_EXIT and b.reset is not proc:
                if b.dead is not None and not b.dead.done():
                    b.dead.set_result(rc)
                log.warning("territory %s: container exited with %s (not a reboot); not relaunched", b.spec.id, rc)
                return
            try:
                await asyncio.to_thread(self._setup_guest_net, b)
            except ProviderError as exc:
                log.warning("territory %s: network re-setup failed: %s", b.spec.id, exc)
            await self._launch(b, nspawn)
            if self._closing:
                return

    async def _wait_boot(self, b: _Box) -> None:
        from aoe_tui.runtime.ssh import wait_boot_finished, wait_login

        assert b.dead is not None
        ready = asyncio.ensure_future(
            wait_login(b.address, SSH_PORT, b.spec.password, timeout_s=self.ready_timeout_s,
                       interval_s=0.1, connect_timeout_s=5.0)
        )
        dead = b.dead
        try:
            done, _ = await asyncio.wait({ready, dead}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            ready.cancel()
            raise
        if ready in done:
            try:
                conn, waited = ready.result()
            except TimeoutError:
                raise ProviderError(
                    f"territory {b.spec.id}: no root SSH login on {b.address}:22 within "
                    f"{self.ready_timeout_s:.0f} s; console: {self._console_tail(b)}"
                ) from None
            try:  # SSH answers before the boot has finished: wait for the seeds too (same login)
                await wait_boot_finished(b.address, SSH_PORT, b.spec.password,
                                         timeout_s=max(5.0, self.ready_timeout_s - waited), conn=conn)
            except Exception as exc:  # noqa: BLE001 - reported in one line
                raise ProviderError(f"territory {b.spec.id}: boot did not finish: {exc}; "
                                    f"console: {self._console_tail(b)}") from None
            finally:
                conn.close()
            b.leader_pid = _leader_of(b.proc.pid) if b.proc else None
            await asyncio.to_thread(self._save_state, b)
            return
        ready.cancel()
        with contextlib.suppress(BaseException):
            if ready.done() and not ready.cancelled() and ready.exception() is None:
                ready.result()[0].close()
        raise ProviderError(
            f"territory {b.spec.id}: systemd-nspawn exited with {dead.result()} during boot; "
            f"console: {self._console_tail(b)}"
        )

    @staticmethod
    def _console_tail(b: _Box, n: int = 3) -> str:
        try:
            lines = [ln.strip() for ln in b.console.read_text(errors="replace").splitlines() if ln.strip()]
        except OSError:
            return "(no console log)"
        return " | ".join(lines[-n:]) or "(empty console log)"

    # -- reboot ------------------------------------------------------------------------

    async def reboot(self, territory: Territory) -> None:
        """Reboot the guest and return once root SSH works again (spec §3.4); bounded in time.

        The reboot is asked from the host side, out of the player's reach: the container's
        init gets :data:`SIGNAL_REBOOT` (systemd starts ``reboot.target``), whatever the
        player did to SSH, PAM, shells or binaries in the guest (``systemctl reboot`` over
        SSH only if the init cannot be signalled). If the container has not exited
        ``reboot_grace_s`` seconds later (a unit that will not stop, e.g. an open SSH
        session's scope holding a process that ignores SIGTERM), the reboot is forced like
        an operator's power-cycle: the container's init gets SIGRTMIN+15 (``systemctl
        --force reboot``: no unit stops), and ``FORCE_REBOOT_GRACE_S`` seconds later, if
        still running, SIGKILL. Either way the supervisor relaunches nspawn on the same
        root, so files on the guest's disk persist (the host kernel is shared: even writes
        not yet fsync'ed survive the SIGKILL; a process's unwritten buffers do not). Never signals a relaunched container or one that
        teardown has taken over. Each territory's own layer also carries drop-ins that cap
        the guest's stop timeouts at ``FAST_STOP_TIMEOUT`` (see :data:`FAST_STOP_DROPINS`),
        so the orderly path is normally fast too.

        Worst case before SSH is awaited: ~``reboot_grace_s`` + 2 x ``FORCE_REBOOT_GRACE_S``.

        Raises:
            RebootError: unknown territory; the container did not exit even after SIGKILL;
                the container is gone for good — its relaunch exited at once, could not
                start, or it exited without asking for a reboot (noticed as soon as it
                happens, not at ``reboot_timeout_s``; the message gives the exit status);
                or SSH not back within ``reboot_timeout_s`` after the container exited
                (message names the territory and the console tail).
            TerritoryRefusedError: the relaunched container booted (its init runs and,
                asked from the host side, its systemd says the boot finished, or the
                referee's binaries in it are not the image's) but root SSH still fails
                :data:`REFUSED_AFTER_S` seconds later: the player locked the referee out.
        """
        from aoe_tui.runtime import ssh

        b = self._boxes.get(territory.id)
        if b is None or self._closing:
            raise RebootError(f"territory {territory.id}: not provisioned by this container provider")
        proc = b.proc
        launches = b.launches
        t_cmd = time.monotonic()
        async with b.lock:
            asked = (proc is not None and b.proc is proc and proc.returncode is None and not self._closing
                     and _signal_leader(proc.pid, SIGNAL_REBOOT))
        if not asked:
            with contextlib.suppress(Exception):
                await ssh.run(b.address, SSH_PORT, b.spec.password, "systemctl reboot", timeout_s=10,
                              connect_timeout_s=5)
        if proc is not None:
            grace = max(0.0, self.reboot_grace_s - (time.monotonic() - t_cmd))
            if not await self._wait_exit(proc, grace):
                await self._force_reboot(b, proc)
        t0 = time.monotonic()
        ready = asyncio.ensure_future(
            ssh.wait_ready(b.address, SSH_PORT, b.spec.password, timeout_s=self.reboot_timeout_s,
                           interval_s=0.5, connect_timeout_s=5.0)  # spec §3.4: every 500 ms
        )
        refused = asyncio.ensure_future(self._watch_refusal(b, territory, launches))
        try:
            watch = b.supervisor
            if watch is not None and not self._closing:
                # the supervisor task ends only when the container is gone for good (an exit
                # that is not a reboot, e.g. a relaunch exiting at once, or a failed launch)
                await asyncio.wait({ready, watch, refused}, return_when=asyncio.FIRST_COMPLETED)
                if not ready.done() and watch.done() and not self._closing:
                    ready.cancel()
                    raise RebootError(self._relaunch_failure(b, launches))
                if not ready.done() and refused.done():
                    ready.cancel()
                    refused.result()  # raises TerritoryRefusedError
            await ready
        except TimeoutError:
            seen = await self._booted(b) if b.launches > launches else ""
            if seen:
                why = await ssh.login_refusal(b.address, SSH_PORT, b.spec.password)
                raise TerritoryRefusedError(
                    f"territory {territory.id} refused the referee after the reboot: "
                    f"{why or 'no root SSH login on port 22'} within {self.reboot_timeout_s:.0f} s although {seen}"
                    f"{await self._tampering_found(b)}"
                ) from None
            raise RebootError(
                f"territory {territory.id}: SSH unavailable after reboot ({self.reboot_timeout_s:.0f} s); "
                f"console: {self._console_tail(b)}"
            ) from None
        finally:
            settle(ready, refused)
        if b.launches == launches:
            log.info("territory %s: ssh answered again %.1f s after the reboot without a relaunch",
                     territory.id, time.monotonic() - t0)
        b.leader_pid = _leader_of(b.proc.pid) if b.proc else None
        await asyncio.to_thread(self._save_state, b)
        territory.extra["nspawn_pid"] = b.proc.pid if b.proc else None
        territory.extra["leader_pid"] = b.leader_pid

    async def _watch_refusal(self, b: _Box, territory: Territory, launches_before: int) -> None:
        """Raise :class:`TerritoryRefusedError` once the container relaunched after
        ``launches_before`` has booted (seen from the host side) and root SSH has still not
        worked :data:`REFUSED_AFTER_S` seconds later; otherwise wait forever (cancelled by
        :meth:`reboot`). Booted: its init runs and its systemd reports ``running``,
        ``degraded`` or ``maintenance``, or the referee's binaries in it are not the image's
        (a territory whose systemctl was replaced cannot be asked, and that is the player's
        doing too).
        """
        from aoe_tui.runtime import ssh

        booted_at: float | None = None
        seen = ""
        while True:
            await asyncio.sleep(1.0)
            if b.launches <= launches_before:
                continue
            if booted_at is None:
                seen = await self._booted(b)
                if not seen:
                    continue
                booted_at = time.monotonic()
            if time.monotonic() - booted_at < REFUSED_AFTER_S:
                continue
            if await ssh.probe(b.address, SSH_PORT, b.spec.password, connect_timeout_s=5.0):
                booted_at = time.monotonic()  # a login works after all: the readiness wait ends
                continue
            why = await ssh.login_refusal(b.address, SSH_PORT, b.spec.password)
            raise TerritoryRefusedError(
                f"territory {territory.id} refused the referee after the reboot: "
                f"{why or 'no root SSH login on port 22'} {REFUSED_AFTER_S:.0f} s after {seen}"
                f"{await self._tampering_found(b)}"
            )

    async def _tampering_found(self, b: _Box) -> str:
        """``"; changed from the image: PATH: HOW; ..."``: what of the referee's binaries, the guest's shell
        hooks and its sshd settings differs from the image (:mod:`aoe_tui.runtime.tamper`),
        for a refusal's record; ``""`` when nothing does. Never raises."""
        def find() -> list[Tampering]:
            return referee_tampering(b.root, b.lowers) + config_tampering(b.root, b.lowers)

        try:
            found = await asyncio.to_thread(find)
        except Exception as exc:  # noqa: BLE001 - the refusal stands without the detail
            log.warning("territory %s: tampering check failed: %s", b.spec.id, exc)
            return ""
        return f"; changed from the image: {describe(found)}" if found else ""

    async def _booted(self, b: _Box) -> str:
        """What shows, from the host side, that ``b``'s running container has booted ("its
        boot finished (systemd running, asked from the host)", "its /usr/bin/systemctl not
        the image's"), or ``""`` when it has not (no init, boot still going, no answer)."""
        proc = b.proc
        leader = _leader_of(proc.pid) if proc is not None and proc.returncode is None else None
        if leader is None:
            return ""
        tampered = await asyncio.to_thread(referee_tampering, b.root, b.lowers)
        if tampered:
            return f"its {', '.join(t.path for t in tampered)} not the image's"
        state = await guest_boot_state(leader)
        if state in ("running", "degraded", "maintenance"):
            return f"its boot finished (systemd {state}, asked from the host)"
        return ""

    def _relaunch_failure(self, b: _Box, launches_before: int) -> str:
        """The one-line reason a rebooting container is gone for good (its supervisor task
        ended): the relaunch exited at once (its exit status), could not start, or the
        container exited without asking for a reboot; then the console log's last lines
        (nspawn's own error and the guest's last messages)."""
        tid = b.spec.id
        sup = b.supervisor
        err = sup.exception() if sup is not None and sup.done() and not sup.cancelled() else None
        rc = b.exits[-1] if b.exits else None
        if err is not None:
            what = f"relaunch after the reboot failed: {type(err).__name__}: {err}"
        elif b.launches > launches_before:
            what = f"container exited with status {rc} right after its relaunch (launch {b.launches})"
        else:
            what = f"container exited with status {rc} during the reboot and was not relaunched"
        return f"territory {tid}: {what}; console: {self._console_tail(b, 5)}"

    @staticmethod
    async def _wait_exit(proc: asyncio.subprocess.Process, timeout_s: float) -> bool:
        """True once ``proc`` has exited (within ``timeout_s`` seconds)."""
        if proc.returncode is not None:
            return True
        try:
            await asyncio.wait_for(proc.wait(), max(timeout_s, 0.0))
        except TimeoutError:
            return proc.returncode is not None
        return True

    async def _force_reboot(self, b: _Box, proc: asyncio.subprocess.Process) -> None:
        """Escalate a stuck guest reboot of nspawn ``proc``: SIGRTMIN+15, then SIGKILL, to its init.

        Signals only while holding ``b.lock`` and only if ``proc`` is still the territory's
        running nspawn and teardown has not begun (the supervisor's relaunch and teardown
        both take the lock). Marks ``proc`` as reset so the supervisor relaunches the root
        whatever nspawn's exit code.

        Raises:
            RebootError: ``proc`` is still running after the SIGKILL.
        """
        tid = b.spec.id
        steps = ((SIGNAL_FORCE_REBOOT, "forced reboot (SIGRTMIN+15)"), (signal.SIGKILL, "hard reset (SIGKILL)"))
        for sig, what in steps:
            async with b.lock:
                if self._closing or b.proc is not proc or proc.returncode is not None:
                    return  # exited, relaunched, or teardown owns it now
                b.reset = proc
                delivered = _signal_leader(proc.pid, sig)
                if not delivered and sig == signal.SIGKILL:
                    with contextlib.suppress(ProcessLookupError):
                        proc.kill()  # no init to kill: nspawn itself
                    delivered = True
                note = (f"\n=== aoe: {tid} did not finish rebooting; {what} "
                        f"{'sent' if delivered else 'not delivered'} at {time.strftime('%H:%M:%S')} ===\n")
                with contextlib.suppress(OSError), b.console.open("ab") as con:
                    con.write(note.encode())
            log.warning("territory %s: reboot still running after %.0f s; %s", tid, self.reboot_grace_s, what)
            if await self._wait_exit(proc, FORCE_REBOOT_GRACE_S):
                return
        if not self._closing and b.proc is proc:
            raise RebootError(f"territory {tid}: container did not stop during reboot, even after SIGKILL; "
                              f"console: {self._console_tail(b)}")

    def set_cpu_weight(self, weight: int | None, cpu_root: Path = Path("/sys/fs/cgroup/cpu")) -> int:
        """Give each territory ``weight`` (cgroup v2 ``CPUWeight=`` scale: 1..10000, 100 = a
        normal process's share) against everything else on the host, or with ``None`` remove
        what an earlier call made (after :meth:`teardown`; a group still holding a process stays).

        Blocking (run it in a thread); call it again to move processes started since into the
        group (a process's children inherit it, so a sweep while a territory boots catches the
        few forked before its init was moved). Here there is no system bus, so no
        ``systemctl set-property``: on a cgroup-v1 host (the territories have their own
        groups, :func:`territory_cgroups`) each gets ``<cpu_root>/aoe-territories/<machine>``
        with ``cpu.shares = weight * 1024 / 100`` and every process of the territory is moved
        into it. Returns how many territories have a weighted group (with ``None``: how many
        have none left; 0 where the host has no v1 ``cpu`` hierarchy, e.g. a pure cgroup-v2
        host where nspawn shares one payload group). Never raises: a process that exits
        while moved is skipped. The teardown removes the groups (:func:`destroy_from_state`),
        and so does ``cleanup_stale`` after a runner killed mid-heat; the parent
        ``aoe-territories`` goes with the last group in it (:func:`remove_cpu_group`).
        """
        if not (cpu_root / "cgroup.procs").is_file():
            return 0
        done = 0
        for b in list(self._boxes.values()):
            if not b.cgroups:
                continue
            group = cpu_group(f"aoe-{b.host_veth[3:]}", cpu_root)
            limit_group = b.limits.versions.get("cpu") == "v1" and cpu_root == CGROUP_V1_CPU
            if limit_group:
                group = Path(b.limits.groups["cpu"])  # the limit group (cpu.shares 1024 = weight 100)
            if weight is None:
                done += remove_cpu_group(group)
                continue
            try:
                make_cpu_group(group)
                with self._weight_lock:
                    if limit_group:
                        b.cpu_weight = weight  # divided while the territory yields (_pace)
                    now = b.cpu_yield.weight(weight) if limit_group and b.cpu_yield is not None else weight
                    (group / "cpu.shares").write_text(str(max(2, now * 1024 // 100)))
                inside = {str(pid) for pid in _cgroup_pids([str(group)])}  # its guest child included
            except OSError:
                continue
            entry = group / limits_cg.GUEST_CHILD if (group / limits_cg.GUEST_CHILD).is_dir() else group
            for pid in _cgroup_pids([str(p) for p in b.cgroups]):
                if str(pid) not in inside:
                    with contextlib.suppress(OSError):
                        (entry / "cgroup.procs").write_text(str(pid))
            done += 1
        return done

    # -- limits ------------------------------------------------------------------------

    @staticmethod
    def _cgroup_host(mount: bool = True) -> limits_cg.CgroupHost:
        """This host's cgroup roots (the v2 one mounted by :func:`_cgroup2_mount` if need be,
        unless ``mount`` is false: ``aoe doctor`` changes nothing)."""
        v2 = None
        if (CGROUP_V1_ROOT / "cgroup.controllers").is_file() or (CGROUP_V1_SYSTEMD / "cgroup.procs").is_file():
            v2 = _cgroup2_mount(mount)
        return limits_cg.CgroupHost(v1_root=CGROUP_V1_ROOT, v2_root=v2)

    def _note(self, line: str) -> None:
        """Add ``line`` to :attr:`notes` once (the heat prints each and keeps them in
        ``aoe-extra.json``)."""
        with self._state_lock:
            if line not in self.notes:
                self.notes.append(line)

    @staticmethod
    def _not_enforced_cgroups(b: _Box) -> dict[str, str]:
        """Limit (``cpu``, ``memory``, ``tasks``) -> why this host cannot enforce (all of) it."""
        out: dict[str, str] = {}
        for c in limits_cg.CONTROLLERS:
            if c in b.limits.versions:
                continue
            what, why = limits_cg.LIMIT_OF[c], b.limits.why.get(c) or f"no cgroup {c} controller on this host"
            out[what] = f"{out[what]}; {why}" if what in out else why
        return out

    def exhaustion(self, territory_id: str) -> list[str]:
        """The limits territory ``territory_id`` has hit so far, latched (once hit, reported
        until the end of the heat, also after its teardown), in this order: ``out of memory
        in the territory (<memory_mib> MiB)`` (the kernel's OOM killer killed one of its
        processes at the memory limit: ``memory.oom_control``/``memory.events`` ``oom_kill``),
        ``out of tasks in the territory (<tasks>)`` (a fork failed at ``pids.max``:
        ``pids.events`` ``max``), ``disk full in the territory (<disk_mib> MiB)`` (less than
        1 % of its disk free, or no inode left). ``[]`` for an unknown territory. Reads two
        counters and one ``statvfs``; never raises."""
        b = self._boxes.get(territory_id)
        if b is None:
            return []
        try:
            r = b.spec.resources
            hit = limits_cg.exhaustion(b.limits)
            if b.own_disk and territory_disk.disk_full(b.disk, r.disk_mib):
                hit.add("disk")
            phrases = {"memory": f"out of memory in the territory ({r.memory_mib} MiB)",
                       "tasks": f"out of tasks in the territory ({r.tasks})",
                       "disk": f"disk full in the territory ({r.disk_mib} MiB)"}
            for k in ("memory", "tasks", "disk"):
                if k in hit and phrases[k] not in b.exhausted:
                    b.exhausted.append(phrases[k])
        except Exception:  # noqa: BLE001 - a poll must never break the heat
            log.debug("exhaustion poll of %s failed", territory_id, exc_info=True)
        return list(b.exhausted)

    def limits(self, territory_id: str) -> dict[str, object]:
        """What is enforced for ``territory_id`` (for ``aoe-extra.json``): ``{"vcpus",
        "memory_mib", "disk_mib", "tasks", "enforced": [...] of "cpu", "memory", "tasks",
        "disk", "cpus": "0" (its cpuset), "cgroup": {"cpu": "v1", ...}, "not_enforced":
        {"disk": "why", ...}, "cpu_yielded_s": 12.5}`` (``cpu_yielded_s``: seconds it yielded
        the CPU, :class:`cgroups.CpuYield`, where its CPU time is accounted); ``{}`` for an
        unknown territory. Never raises."""
        b = self._boxes.get(territory_id)
        if b is None:
            return {}
        r = b.spec.resources
        enforced = b.limits.enforced() + (["disk"] if b.own_disk else [])
        not_enforced = self._not_enforced_cgroups(b)
        if not b.own_disk:
            not_enforced["disk"] = b.disk_why or "the territory's disk could not be made"
        out: dict[str, object] = {"vcpus": r.vcpus, "memory_mib": r.memory_mib, "disk_mib": r.disk_mib,
                                  "tasks": r.tasks, "enforced": enforced, "cpus": b.limits.cpus,
                                  "cgroup": dict(b.limits.versions)}
        if b.cpu_yield is not None:  # seconds it yielded the CPU (busy on all its vCPUs)
            out["cpu_yielded_s"] = round(b.cpu_yield.yielded_total(time.monotonic()), 1)
        if not_enforced:
            out["not_enforced"] = not_enforced
        return out

    # -- teardown ----------------------------------------------------------------------

    async def teardown(self) -> None:
        """Stop every container and remove its processes, mount, netns, veth and overlay folders.

        Safe to call repeatedly and after a partial provision; keeps running to the end when
        the calling task is cancelled (Ctrl-C), then re-raises the cancellation. Keeps
        ``console.log`` and ``credential.env``; removes ``state.json`` once everything is gone.

        Raises:
            ProviderError: something could not be removed (names it); everything else was.
        """
        self._closing = True
        if self._teardown_task is None:
            self._teardown_task = asyncio.ensure_future(self._teardown())
        cancelled = False
        while True:
            try:
                await asyncio.shield(self._teardown_task)
                break
            except asyncio.CancelledError:
                if self._teardown_task.done():
                    break
                cancelled = True
        if cancelled:
            raise asyncio.CancelledError()
        self._teardown_task.result()

    async def _pace(self) -> None:
        """Every :data:`cgroups.YIELD_SAMPLE_S` seconds, from the boot to the teardown: sample
        each territory's CPU demand (:class:`cgroups.CpuDemand`, in a thread: one small read
        per thread of the territory) and, where :class:`cgroups.CpuYield` changes its mind,
        write its new weight (its weight by phase, divided while it yields). Never raises (a
        poll must never break the heat)."""
        while not self._closing:
            try:
                await asyncio.to_thread(self._pace_once, time.monotonic())
            except Exception:  # noqa: BLE001
                log.debug("CPU yield sample failed", exc_info=True)
            await asyncio.sleep(limits_cg.YIELD_SAMPLE_S)

    def _pace_once(self, now: float) -> None:
        for b in list(self._boxes.values()):
            y = b.cpu_yield
            if y is None:
                continue
            demand = b.cpu_demand.read(b.limits)
            with self._weight_lock:
                if self._closing:  # the teardown has closed the yield spells: nothing more to write
                    return
                changed = y.sample(now, demand)
                if changed is not None:
                    limits_cg.write_cpu_weight(b.limits, y.weight(b.cpu_weight))
            if changed is not None:
                log.info("territory %s: %s the CPU", b.spec.id, "yields" if changed else "no longer yields")

    async def _teardown(self) -> None:
        if self._pacer is not None:
            self._pacer.cancel()
            with contextlib.suppress(BaseException):
                await self._pacer
        def end_spells() -> None:  # after a sample still in flight in its thread (it holds the lock)
            with self._weight_lock:
                for b in self._boxes.values():
                    if b.cpu_yield is not None:
                        b.cpu_yield.end(time.monotonic())

        await asyncio.to_thread(end_spells)

        async def one(b: _Box) -> list[str]:
            if b.prepared is not None and not b.prepared.is_set():  # provisioning cancelled mid-way
                await asyncio.to_thread(b.prepared.wait, 60)
            if b.mode == "foreign":
                return []
            async with b.lock:  # no launch is in flight past this point, and none will start
                state = b.state(os.getpid(), self.heat_id)
            left = await asyncio.to_thread(destroy_from_state, state)
            if b.proc is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(b.proc.wait(), 5)
            if b.supervisor is not None:
                b.supervisor.cancel()
                with contextlib.suppress(BaseException):
                    await b.supervisor
            if not left:
                await asyncio.to_thread(self._remove_state, b)
            return [f"{b.spec.id}: {x}" for x in left]

        results = await asyncio.gather(*(one(b) for b in self._boxes.values()), return_exceptions=True)
        problems: list[str] = []
        for r in results:
            if isinstance(r, BaseException):
                problems.append(f"{type(r).__name__}: {r}")
            else:
                problems.extend(r)
        if not problems:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self._alloc.release, self.heat_id)
        if problems:
            raise ProviderError("container teardown left: " + "; ".join(problems))


# ------------------------------------------------------------------------------- doctor


def _overlay_usable() -> tuple[bool, str]:
    try:
        fs = Path("/proc/filesystems").read_text()
    except OSError:
        fs = ""
    if "overlay" not in fs:
        return False, "overlay filesystem not in /proc/filesystems (full copies will be used, slower)"
    return True, "overlay listed in /proc/filesystems"


def limit_checks() -> list[DoctorCheck]:
    """``aoe doctor``'s lines on the class's resources (issue 26): one per limit (``cpu
    limit``, ``memory limit``, ``tasks limit``, ``disk limit``) saying whether this host
    enforces it and how, or what happens where it cannot. A limit the host cannot enforce
    does not make the host unready (territories run without it, and each heat says so in a
    note): its line passes, its detail starts with ``not enforced``. Never raises."""
    out: list[DoctorCheck] = []
    try:
        said = limits_cg.describe(ContainerProvider._cgroup_host(mount=False))
    except Exception as exc:  # noqa: BLE001 - the doctor reports, it never crashes
        said = {k: (False, f"not enforced: cannot read the cgroup hierarchies: {exc}") for k in ("cpu", "memory", "tasks")}
    for key in ("cpu", "memory", "tasks"):
        out.append(DoctorCheck("container", f"{key} limit", True, said[key][1]))
    why = territory_disk.disk_problem()
    out.append(DoctorCheck(
        "container", "disk limit", True,
        "enforced: the writable layer on its own ext4 of disk_mib MiB (space reserved with fallocate, loop mount)" if why is None
        else f"not enforced ({why}): a territory may fill the host's disk"))
    return out


def doctor_checks() -> list[DoctorCheck]:
    """What the ``container`` provider needs and whether this host has it (for ``aoe doctor``).

    Checks: ``systemd-nspawn`` on PATH, running as root, overlayfs, ``ip`` (iproute2), the
    limits this host can enforce (:func:`limit_checks`) and the built guest image. Never raises.
    """
    checks: list[DoctorCheck] = []
    p = _which("systemd-nspawn")
    checks.append(DoctorCheck("container", "systemd-nspawn", p is not None, p or "not found in PATH",
                              "" if p else "apt-get install -y systemd-container"))
    root = os.geteuid() == 0
    checks.append(DoctorCheck("container", "root", root, "running as root" if root else f"running as uid {os.geteuid()}",
                              "" if root else "sudo aoe ..."))
    ok, detail = _overlay_usable()
    checks.append(DoctorCheck("container", "overlayfs", ok, detail, "" if ok else "modprobe overlay"))
    ip = _which("ip")
    checks.append(DoctorCheck("container", "ip (iproute2)", ip is not None, ip or "not found in PATH",
                              "" if ip else "apt-get install -y iproute2"))
    checks.extend(limit_checks())
    try:
        img = find_image()
        checks.append(DoctorCheck("container", "guest image", img is not None,
                                  str(img.root) if img else f"not built (under {image_root()})",
                                  "" if img else "aoe image build"))
    except ProviderError as exc:
        checks.append(DoctorCheck("container", "guest image", False, str(exc), "aoe image build"))
    return checks
