"""Harness shares for VM territories: a cached read-only ext4 disk made from a share folder.

A :class:`~aoe_tui.runtime.provider.HarnessShare` (a host folder such as opencode's
binary and ``rg``) cannot be bind-mounted into a QEMU guest. :func:`share_disk` turns the
folder into a raw ext4 image once, under ``<user cache>/aoe-tui/harness-disks/``, named by a
digest of the folder's file names, sizes and modification times (a changed folder gets a new
disk; an unchanged one is reused by every territory and heat). The QEMU provider attaches it
read-only (:func:`drive_args`: ``-drive ...,readonly=on``) and mounts it read-only in the guest
by its label (:func:`mount_command`) at the end of provisioning and after each reboot.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shlex
import shutil
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path

from aoe_tui.runtime.provider import HarnessShare, ProviderError

__all__ = ["drive_args", "mount_command", "share_disk", "share_label"]

#: free room in a share disk beyond its files (bytes): ext4's own metadata
_SLACK_BYTES = 16 << 20


def _digest(folder: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            st = p.stat()
            h.update(f"{p.relative_to(folder)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def share_label(folder: Path) -> str:
    """The ext4 label of ``folder``'s disk (16 characters at most: ``aoe`` + 13 hex digits)."""
    return "aoe" + _digest(Path(folder))[:13]


def share_disk(folder: Path) -> Path:
    """The read-only disk image of ``folder`` (made once, then reused; blocking, seconds the
    first time for a folder of a few hundred MB). Made under an ``flock`` per label
    (``.<label>.lock`` beside the images), so territories and heats that ask at once wait for
    one ``mkfs.ext4`` instead of each running their own; the temporary ``.part`` file is
    removed however the making ends.

    Raises:
        ProviderError: ``mkfs.ext4`` is missing, failed or timed out, or the folder or cache
            could not be read or written (one line).
    """
    from aoe_tui.runtime.image import cache_root

    folder = Path(folder)
    try:
        label = share_label(folder)
        out_dir = cache_root() / "harness-disks"
        out_dir.mkdir(parents=True, exist_ok=True)
        img = out_dir / f"{label}.img"
        if img.is_file():
            return img
        with open(out_dir / f".{label}.lock", "a+b") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)  # released when the file is closed
            if img.is_file():  # made by another territory meanwhile
                return img
            _make(folder, label, out_dir, img)
        return img
    except ProviderError:
        raise
    except (OSError, subprocess.SubprocessError) as exc:
        raise ProviderError(f"harness share {folder}: cannot make its disk: {exc}") from None


def _make(folder: Path, label: str, out_dir: Path, img: Path) -> None:
    mkfs = shutil.which("mkfs.ext4") or ("/usr/sbin/mkfs.ext4" if Path("/usr/sbin/mkfs.ext4").exists() else None)
    if mkfs is None:
        raise ProviderError("mkfs.ext4 is missing (apt-get install e2fsprogs): cannot share a harness into a VM")
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    size_kib = (size + size // 10 + _SLACK_BYTES) // 1024
    tmp = out_dir / f".{label}.{os.getpid()}.{threading.get_ident()}.part"  # concurrent heats: their own
    try:
        res = subprocess.run([mkfs, "-q", "-F", "-L", label, "-d", str(folder), "-E", "root_owner=0:0", str(tmp),
                              f"{size_kib}k"], capture_output=True, text=True, timeout=300)
        if res.returncode != 0:
            raise ProviderError(f"mkfs.ext4 of the harness share {folder} failed: "
                                f"{' '.join((res.stderr or res.stdout).split())[-300:]}")
        os.replace(tmp, img)
    finally:
        tmp.unlink(missing_ok=True)


def drive_args(shares: Sequence[HarnessShare]) -> list[str]:
    """QEMU arguments attaching each share's disk read-only (virtio, raw). Blocking (may make disks)."""
    args: list[str] = []
    for share in shares:
        # commas doubled: QEMU's escape inside an option list (see qemu.opt_value)
        args += ["-drive", f"file={str(share_disk(share.host)).replace(',', ',,')},if=virtio,format=raw,readonly=on"]
    return args


def mount_command(shares: Sequence[HarnessShare]) -> str:
    """The guest shell command that mounts each share's disk read-only at its guest path
    (idempotent: an already mounted path is left as is)."""
    parts = []
    for share in shares:
        guest = shlex.quote(share.guest)
        parts.append(f"mkdir -p {guest} && (mountpoint -q {guest} || mount -o ro LABEL={share_label(share.host)} {guest})")
    return " && ".join(parts) or "true"
