"""What a player changed in a territory that the referee depends on, compared with the image.

A container territory's root is the image's trees (``lowers``, top first: arena layers, then
the base root file system) under the territory's own writable layer, and the host sees both.
Two kinds of file matter to the referee:

- the binaries it runs inside the guest (:func:`binary_tampering`; the container provider's
  ``REFEREE_BINARIES``): a replaced ``systemctl`` can fake a restart;
- the guest's shell hooks and sshd settings (:data:`CONFIG_WATCHED`, :func:`config_tampering`):
  a login hook runs before every SSH command, and an sshd setting can lock the referee out.

Each finding is a :class:`Tampering`: the guest path and how it differs from the image's copy,
in one line fit for a seat's record (the failure detail of a refused reboot). Nothing here
raises for an unreadable or vanished file: it is reported as such.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CONFIG_WATCHED", "Tampering", "binary_tampering", "config_tampering", "describe"]

#: guest files and folders (a trailing ``/``: every file directly in it) whose change by the
#: player the referee reports: the shell hooks a root login or ``bash`` runs, what the dynamic
#: loader preloads, and sshd's settings
CONFIG_WATCHED = (
    "/etc/profile", "/etc/profile.d/", "/etc/bash.bashrc", "/etc/environment", "/etc/ld.so.preload",
    "/root/.bashrc", "/root/.profile", "/root/.bash_profile", "/root/.bash_login",
    "/etc/ssh/sshd_config", "/etc/ssh/sshd_config.d/", "/etc/pam.d/sshd",
)
#: changed lines shown per file (each way); the rest are counted
_LINES_SHOWN = 2
#: files larger than this (bytes) are compared by size and digest only, never line by line
_TEXT_MAX = 256 * 1024


@dataclass(frozen=True)
class Tampering:
    """One finding: ``path`` in the guest (``/etc/ssh/sshd_config.d/aoe.conf``) and ``how``
    it differs from the image (``line 'PermitRootLogin no' added, 'PermitRootLogin yes'
    removed``)."""

    path: str
    how: str

    def detail(self) -> str:
        """``path: how``, one line."""
        return f"{self.path}: {self.how}"


def describe(findings: Sequence[Tampering]) -> str:
    """The findings as one line (``; ``-separated), or ``""`` for none."""
    return "; ".join(f.detail() for f in findings)


def _image_copy(lowers: Sequence[str | Path], guest: str) -> Path | None:
    rel = guest.lstrip("/")
    return next((Path(low) / rel for low in lowers if os.path.lexists(Path(low) / rel)), None)


def _inside(path: str, root_real: str) -> bool:
    return path == root_real or path.startswith(root_real + os.sep)


def _digest(path: str | Path) -> tuple[int, str]:
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            size += len(chunk)
            h.update(chunk)
    return size, h.hexdigest()[:12]


def _quoted(line: bytes) -> str:
    text = line.decode("utf-8", errors="replace").strip()
    text = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)
    return repr(text[:120])


def _line_change(mine: bytes, image: bytes) -> str:
    """Lines added and removed (as multisets, so an edit in place shows as both)."""
    from collections import Counter

    a, b = Counter(mine.splitlines()), Counter(image.splitlines())
    added = [ln for ln in mine.splitlines() if (a - b)[ln] > 0 and ln.strip()]
    removed = [ln for ln in image.splitlines() if (b - a)[ln] > 0 and ln.strip()]
    added = list(dict.fromkeys(added))
    removed = list(dict.fromkeys(removed))
    parts = []
    for what, lines in (("added", added), ("removed", removed)):
        if lines:
            shown = ", ".join(_quoted(ln) for ln in lines[:_LINES_SHOWN])
            more = f" and {len(lines) - _LINES_SHOWN} more" if len(lines) > _LINES_SHOWN else ""
            parts.append(f"{'line' if len(lines) == 1 else 'lines'} {shown}{more} {what}")
    return ", ".join(parts) or "whitespace or blank lines changed"


def _compare(guest: str, mine: Path, root_real: str, image: Path | None, *, text: bool) -> str | None:
    """How the territory's ``guest`` file differs from ``image``'s copy (None: it does not)."""
    if not os.path.lexists(mine):
        return "removed (the image has it)" if image is not None else None
    real = os.path.realpath(mine)
    if not _inside(real, root_real):
        return f"a symlink to {real}, outside the territory"
    try:
        st = os.stat(real)
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if image is None:
        if not text:
            return None
        try:
            data = Path(real).read_bytes()[:_TEXT_MAX]
        except OSError as exc:
            return f"added (not in the image), unreadable ({exc.strerror})"
        first = next((ln for ln in data.splitlines() if ln.strip() and not ln.lstrip().startswith(b"#")), None)
        return "added (not in the image)" + (f": {_quoted(first)}" if first is not None else "")
    try:
        image_real = os.path.realpath(image)
        if not os.path.isfile(image_real):
            return None
        if text and st.st_size <= _TEXT_MAX and os.path.getsize(image_real) <= _TEXT_MAX:
            a, b = Path(real).read_bytes(), Path(image_real).read_bytes()
            return None if a == b else _line_change(a, b)
        (size, dig), (isize, idig) = _digest(real), _digest(image_real)
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
    if (size, dig) == (isize, idig):
        return None
    return f"not the image's copy: {size} bytes, sha256 {dig}… (the image's: {isize} bytes, sha256 {idig}…)"


def binary_tampering(root: str | Path, lowers: Sequence[str | Path], binaries: Sequence[str]) -> list[Tampering]:
    """The guest ``binaries`` (absolute guest paths) that are no longer the image's.

    ``root``: the territory's root as the host sees it; ``lowers``: the image's trees, top
    first. A binary is tampered when its path in the territory leaves the territory's root (a
    symlink to elsewhere), is missing, is not a regular file, or differs byte for byte from
    the first image tree that has it (size and sha256 prefix of both are given). Returns the
    findings in ``binaries`` order; ``[]`` when all are the image's (a binary the image lacks
    is not checked)."""
    root_real = os.path.realpath(root)
    found = []
    for path in binaries:
        image = _image_copy(lowers, path)
        if image is None:
            continue
        how = _compare(path, Path(root) / path.lstrip("/"), root_real, image, text=False)
        if how is not None:
            found.append(Tampering(path, how))
    return found


def config_tampering(root: str | Path, lowers: Sequence[str | Path],
                     watched: Sequence[str] = CONFIG_WATCHED) -> list[Tampering]:
    """The shell hooks and sshd settings of the territory that differ from the image's.

    ``watched``: guest files, or folders ending in ``/`` (every file directly in the folder,
    the territory's and the image's). A file differs when it was added, removed, made a
    symlink leaving the territory, or its lines changed (``line 'X' added, 'Y' removed``;
    files over 256 KiB by size and digest). Returns findings in ``watched`` order, the files
    of a folder sorted by name; ``[]`` when nothing differs."""
    root_real = os.path.realpath(root)
    found = []
    for entry in watched:
        if entry.endswith("/"):
            names: set[str] = set()
            for base in (Path(root), *(Path(low) for low in lowers)):
                folder = base / entry.strip("/")
                if folder.is_dir() and not folder.is_symlink():
                    names.update(p.name for p in folder.iterdir() if p.is_symlink() or not p.is_dir())
            guests = [entry + n for n in sorted(names)]
        else:
            guests = [entry]
        for guest in guests:
            how = _compare(guest, Path(root) / guest.lstrip("/"), root_real, _image_copy(lowers, guest), text=True)
            if how is not None:
                found.append(Tampering(guest, how))
    return found
