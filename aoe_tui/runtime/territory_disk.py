"""A territory's own disk: the writable layer of a container territory on a file system of
exactly ``disk_mib`` MiB.

The file system is ext4 in a file ``<territory dir>/disk.img`` whose space is reserved on the
host when it is made (``posix_fallocate``: unwritten extents, instant on ext4/xfs; sparse, with
a provider note, where the host's file system cannot), loop-mounted
(``mount -o loop``: the loop device is freed when the file system is unmounted) at
``<territory dir>/disk/`` (on a shared bind mount of that folder: see
:func:`shared_mountpoint`); the overlay's ``upper/`` and ``work/`` (or the full-copy root
where overlayfs is unusable) live there, so everything the guest writes (``/``, ``/var``,
``/tmp``) counts against it and ``df /`` in the guest shows about ``disk_mib`` MiB. A full
territory disk is the player's (``ENOSPC`` in the guest), never the host's: the host's space
is taken when the territory is made (a host without it fails the provisioning), never while
the guest writes.

ext4 without a journal (the host kernel is shared: a crash loses the territory anyway),
no reserved blocks, one inode per 16 KiB (a Debian default for disks over 512 MiB), inode
tables neither zeroed by ``mkfs`` nor by the kernel (``noinit_itable``: unwritten extents
and a sparse file read as zeros). The image is sized so the file system's usable size is
about ``disk_mib`` MiB (:func:`image_mib`). Measured (2-core host, load average 120-175):
``fallocate`` + ``mkfs.ext4`` + ``mount`` of a 2048 MiB disk take 36-67 ms (median 48 ms;
sparse, interleaved: 35-56 ms, median 44 ms); the file holds its whole size on the host
(2087 MiB for a 2048 MiB disk, 522 MiB for 512 MiB) from the start.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
import time
from pathlib import Path

from aoe_tui.fsio import mount_points
from aoe_tui.runtime.provider import ProviderError, ProvisionError

MIB = 1024 * 1024
#: mkfs.ext4 options (see the module docstring)
MKFS_OPTIONS = ("-F", "-q", "-m", "0", "-i", "16384", "-O", "^has_journal", "-E", "nodiscard,lazy_itable_init=1",
                "-L", "aoe-territory")
MOUNT_OPTIONS = "loop,noinit_itable"
#: a territory disk is full when less than this share of it is free (or
#: :data:`FULL_MIN_FREE_MIB`, whichever is larger), or its inodes ran out
FULL_FREE_SHARE = 0.01
FULL_MIN_FREE_MIB = 2
LOOP_CONTROL = Path("/dev/loop-control")
#: seconds an unmounted disk's loop device gets to be freed by the kernel (autoclear) before
#: :func:`remove_disk` detaches it itself
LOOP_CLEAR_S = 1.0


def disk_problem() -> str | None:
    """Why this host cannot give territories their own disk (one clause, for a note), or
    None when it can: root, ``/dev/loop-control``, ``mkfs.ext4``, ``mount`` and ext4 in the
    kernel. Never raises."""
    if os.geteuid() != 0:
        return "not running as root"
    if not LOOP_CONTROL.exists():
        return f"no loop devices on this host ({LOOP_CONTROL} missing)"
    if shutil.which("mkfs.ext4") is None:
        return "mkfs.ext4 not found on PATH (apt-get install -y e2fsprogs)"
    if shutil.which("mount") is None or shutil.which("losetup") is None:
        return "mount/losetup not found on PATH (apt-get install -y mount)"
    with contextlib.suppress(OSError):
        fs = Path("/proc/filesystems").read_text()
        if "ext4" not in fs.split():
            return "the kernel has no ext4 (not in /proc/filesystems)"
    return None


def image_mib(disk_mib: int) -> int:
    """Size of the image (MiB) whose ext4 shows about ``disk_mib`` MiB usable (the
    inode tables, 1/64 of it, bitmaps and group descriptors: 1.9 % in all, measured)."""
    return disk_mib + disk_mib * 3 // 160 + 1


_MS_BIND = 4096
_MS_SHARED = 1 << 20


def shared_mountpoint(path: Path) -> None:
    """Bind-mount ``path`` on itself and make that mount shared, so that what is later
    mounted on it (a territory's disk, its overlay root) is unmounted everywhere when the host
    unmounts it. Every nspawn launched afterwards copies the host's mounts into its own
    namespace (as a slave); on a host whose ``/`` is private those copies of *other*
    territories' disks would otherwise stay there, keeping their file systems and loop devices
    busy until that container ends (measured: a territory's loop device outlived its teardown
    while another heat ran). Unmount propagation follows the parent mount's peer group, hence
    the shared bind under the mount.

    Raises:
        OSError: the mount calls failed.
    """
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    target = os.fsencode(str(path))
    for src, flags in ((target, _MS_BIND), (None, _MS_SHARED)):
        if libc.mount(src, target, None, flags, None) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"mount {'--bind' if flags == _MS_BIND else '--make-shared'} {path}: "
                               f"{os.strerror(err)}")


def _no_space(territory: str, disk_mib: int, size: int, folder: Path) -> ProvisionError:
    free = "?"
    with contextlib.suppress(OSError):
        st = os.statvfs(folder)
        free = str(st.f_bavail * st.f_frsize // MIB)
    return ProvisionError(f"territory {territory}: its {disk_mib} MiB disk needs {size // MIB} MiB on the host's "
                          f"file system at {folder}, which has {free} MiB free")


def make_disk(image: Path, mount: Path, disk_mib: int, territory: str) -> tuple[float, str | None]:
    """Create the ext4 image ``image`` for ``disk_mib`` MiB, its space reserved on the host
    (``posix_fallocate``: unwritten extents, instant on ext4/xfs), and loop-mount it on
    ``mount`` (created). Returns (the seconds it took, a note or None): where the host's
    file system cannot reserve space (``EOPNOTSUPP``) the image stays sparse and the note
    says so (the territory's writes then take the host's free space as they come).

    Raises:
        ProvisionError: the host's file system has not enough free space for the image (one
            line naming the territory, the size and the free space): the host's problem, not
            the player's; nothing is left behind.
        ProviderError: ``mkfs.ext4`` or ``mount`` failed (one line naming the territory and
            the tool's message); the image is removed again.
    """
    t0 = time.monotonic()
    size = image_mib(disk_mib) * MIB
    note = None
    mount.mkdir(parents=True, exist_ok=True)
    try:
        st = os.statvfs(image.parent)
        if st.f_bavail * st.f_frsize < size:
            raise _no_space(territory, disk_mib, size, image.parent)
        shared_mountpoint(mount)
        with open(image, "xb") as fh:
            try:
                os.posix_fallocate(fh.fileno(), 0, size)
            except OSError as exc:
                if exc.errno == errno.ENOSPC:
                    raise _no_space(territory, disk_mib, size, image.parent) from None
                if exc.errno not in (errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL):
                    raise
                fh.truncate(size)
                note = (f"territory disks are sparse: the host's file system at {image.parent} cannot reserve "
                        f"space (fallocate: {exc.strerror}); territories together may fill it")
        for argv in (["mkfs.ext4", *MKFS_OPTIONS, str(image)],
                     ["mount", "-t", "ext4", "-o", MOUNT_OPTIONS, str(image), str(mount)]):
            res = subprocess.run(argv, capture_output=True, text=True, timeout=60)
            if res.returncode != 0:
                raise ProviderError(f"territory {territory}: cannot make its {disk_mib} MiB disk: `{argv[0]}` "
                                    f"failed: {' '.join((res.stderr or res.stdout).split())[:200]}")
    except (OSError, subprocess.SubprocessError, ProviderError) as exc:
        remove_disk(image, mount, timeout_s=1.0)
        if isinstance(exc, ProviderError):
            raise
        raise ProviderError(f"territory {territory}: cannot make its {disk_mib} MiB disk {image}: {exc}") from None
    return time.monotonic() - t0, note


def is_mounted(path: Path) -> bool:
    return str(path) in mount_points()


def loops_of(image: Path) -> list[str]:
    """Loop devices backed by ``image`` (``losetup -j``); ``[]`` when none or unknown."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        res = subprocess.run(["losetup", "-j", str(image)], capture_output=True, text=True, timeout=10)
        return [ln.split(":", 1)[0] for ln in res.stdout.splitlines() if ln.strip()]
    return []


def remove_disk(image: Path, mount: Path, timeout_s: float = 5.0) -> list[str]:
    """Unmount ``mount`` (retried for ``timeout_s`` seconds while busy), free any loop device
    still backed by ``image``, delete ``image`` and the mount folder (only an absolute one).
    Returns what is left (``"mount <path>"``, ``"loop /dev/loopN"``); each step tolerates a
    gone resource; never raises for a failed or timed-out ``losetup``."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    left: list[str] = []
    deadline = time.monotonic() + timeout_s
    while is_mounted(mount):
        if libc.umount2(os.fsencode(str(mount)), 0) == 0:
            continue
        if time.monotonic() > deadline:
            left.append(f"mount {mount}")
            return left
        time.sleep(0.05)
    # autoclear frees the loop device after the unmount (the kernel does it asynchronously: it
    # may still be listed for a moment); one still there after LOOP_CLEAR_S (a crash's
    # leftover) is detached here
    t_unmounted = time.monotonic()
    while still := loops_of(image):
        waited = time.monotonic() - t_unmounted
        if waited > LOOP_CLEAR_S:
            for dev in still:
                with contextlib.suppress(OSError, subprocess.SubprocessError):  # still listed: reported below
                    subprocess.run(["losetup", "-d", dev], capture_output=True, timeout=10)
        if waited > LOOP_CLEAR_S + timeout_s:
            left.extend(f"loop {d}" for d in still)
            return left
        time.sleep(0.05)
    image.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        if mount.is_absolute() and mount.is_dir():  # never a relative path (Path("") is the current folder)
            shutil.rmtree(mount)
    return left


def disk_full(mount: Path, disk_mib: int) -> bool:
    """True when the territory's disk at ``mount`` has less than 1 % (at least
    :data:`FULL_MIN_FREE_MIB` MiB) free, or no free inode. Never raises (False when unknown)."""
    try:
        st = os.statvfs(mount)
    except OSError:
        return False
    free = st.f_bavail * st.f_frsize
    if free < max(FULL_FREE_SHARE * disk_mib * MIB, FULL_MIN_FREE_MIB * MIB):
        return True
    return st.f_files > 0 and st.f_favail == 0
