"""File-system helpers every layer may use (the bottom of the import graph: imports no
``aoe_tui`` module).

- :func:`write_atomic` replaces a file with new text or bytes so a reader never sees a torn
  file: a temporary file in the same folder, optionally fsynced, renamed over the target,
  then (with ``fsync``) the folder fsynced so the rename survives a host crash.
- :func:`write_json_atomic`: the same for one JSON value (``indent=2``, UTF-8, one final newline).
- :class:`SubPath`: a read-only attribute naming a file inside an object's folder.
- Full disks: :func:`is_no_space` (``ENOSPC``/``EDQUOT``), :func:`free_bytes` (``statvfs``),
  :func:`fmt_bytes`.
- Mount points: :func:`mount_points` (``/proc/self/mountinfo``'s fifth field, unescaped:
  paths with spaces or non-ASCII names compare equal to the path as given).

Line-oriented logs (``events.jsonl``, ``season.jsonl``) use :mod:`aoe_tui.replay.jsonl`.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
from pathlib import Path
from typing import Any

__all__ = ["NO_SPACE_ERRNOS", "SubPath", "fmt_bytes", "free_bytes", "fsync_dir", "is_no_space", "leftover_temps",
           "mount_points", "sweep_pid_folders", "unescape_mount_field", "utf8_bytes", "utf8_text",
           "write_atomic", "write_json_atomic"]

#: errno values that mean "the file system (or the quota) is full"
NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def is_no_space(err: BaseException | None) -> bool:
    """True when ``err`` is an ``OSError`` saying the disk or the quota is full."""
    return isinstance(err, OSError) and err.errno in NO_SPACE_ERRNOS


def unescape_mount_field(field: str) -> str:
    """A path field of ``/proc/self/mountinfo`` as the path it names: the kernel writes space,
    tab, newline and backslash as ``\\ooo`` octal escapes and every other byte as is, so the
    escapes are undone on the bytes and the result decoded as the file system's names are
    (``os.fsdecode``: UTF-8 names stay themselves)."""
    import re

    raw = re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m.group(1), 8) & 0xFF]), os.fsencode(field))
    return os.fsdecode(raw)


def mount_points(mountinfo: str | Path = "/proc/self/mountinfo") -> list[str]:
    """Every mount point listed in ``mountinfo`` (file order, unescaped with
    :func:`unescape_mount_field`); ``[]`` when it cannot be read."""
    try:
        lines = Path(mountinfo).read_text(encoding="utf-8", errors="surrogateescape").splitlines()
    except OSError:
        return []
    return [unescape_mount_field(parts[4]) for ln in lines if len(parts := ln.split(" ")) > 4]


def free_bytes(path: Path | str) -> int:
    """Bytes an unprivileged writer may still use on the file system holding ``path``
    (``statvfs``: ``f_bavail * f_frsize``). Raises ``OSError`` if ``path`` does not exist."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def fmt_bytes(n: int) -> str:
    """``n`` bytes as a short human figure: ``512 B``, ``200 KiB``, ``64 MiB``, ``1.5 GiB``."""
    if n < 1024:
        return f"{n} B"
    for unit, scale in (("KiB", 1 << 10), ("MiB", 1 << 20), ("GiB", 1 << 30)):
        if n < scale * 1024 or unit == "GiB":
            v = n / scale
            return f"{v:.0f} {unit}" if v >= 10 or v == int(v) else f"{v:.1f} {unit}"
    return f"{n} B"  # pragma: no cover


def fsync_dir(folder: Path) -> None:
    """fsync ``folder`` so a rename or create inside it is durable (errors are ignored:
    some file systems cannot open or fsync a folder)."""
    try:
        dfd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


def utf8_text(text: str) -> str:
    """``text`` made encodable as UTF-8: every lone surrogate (``json.loads`` of an agent's
    ``"\\ud800"``, ``os.fsdecode`` of a bad byte) becomes U+FFFD; a surrogate pair becomes the
    character it encodes. ``text`` itself when it is already encodable (the common case)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


def utf8_bytes(text: str) -> bytes:
    """``text`` encoded as UTF-8, lone surrogates as U+FFFD (:func:`utf8_text`): never
    invalid UTF-8, never ``UnicodeEncodeError``."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return utf8_text(text).encode("utf-8")


def write_atomic(path: Path | str, data: str | bytes, *, fsync: bool = True, mode: int | None = None,
                 durable_dir: bool | None = None) -> Path:
    """Replace ``path`` with ``data`` (``str`` is written as UTF-8, lone surrogates as U+FFFD:
    :func:`utf8_bytes`) atomically; returns ``path``.

    The data goes to ``.<name>.<pid>.<random>.tmp`` next to ``path`` (the folder must
    exist), which is renamed over ``path``; on any error the temporary file is removed and
    the error re-raised (``OSError`` for an unwritable folder or a full disk, its ``filename``
    ``path`` when the failing call named none).

    Args:
        fsync: fsync the file before the rename (data survives a host crash).
        mode: exact permission bits of the new file (e.g. ``0o600`` for secrets, ``0o644``
            for published artifacts); ``None``: ``0o666`` minus the umask, like ``open()``.
        durable_dir: also fsync the folder after the rename (default: the value of ``fsync``).
    """
    path = Path(path)
    raw = utf8_bytes(data) if isinstance(data, str) else bytes(data)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666 if mode is None else mode)
    try:
        try:
            if mode is not None:
                os.fchmod(fd, mode)  # exact bits, whatever the umask
            view = memoryview(raw)
            while view:
                view = view[os.write(fd, view):]
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException as err:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(err, OSError) and err.filename is None:
            err.filename = str(path)  # os.write/fsync name no file: say which one failed
        raise
    if fsync if durable_dir is None else durable_dir:
        fsync_dir(path.parent)
    return path


def leftover_temps(path: Path | str) -> list[Path]:
    """The temporary files of :func:`write_atomic` for ``path`` that a killed writer left
    behind (``.<name>.<pid>.<random>.tmp`` next to it), e.g. to delete them with a secret."""
    path = Path(path)
    return sorted(path.parent.glob(f".{path.name}.*.tmp"))


def write_json_atomic(path: Path | str, data: Any, *, fsync: bool = True, indent: int | None = 2,
                      mode: int | None = None) -> Path:
    """Write ``data`` as JSON (``indent``, non-ASCII kept, one final newline) with
    :func:`write_atomic`; the parent folder is created if missing. Returns ``path``.
    Raises ``TypeError`` for a value JSON cannot encode, ``OSError`` for an unwritable folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data, indent=indent, ensure_ascii=False) + "\n"
    return write_atomic(path, text, fsync=fsync, mode=mode)


class SubPath:
    """A read-only path attribute: ``getattr(obj, folder) / name``.

    ::

        @dataclass
        class Seat:
            dir: Path
            console = SubPath("dir", "console.log", "The guest's console log.")

        Seat(Path("/w")).console  # Path("/w/console.log")

    ``folder`` names the attribute holding the folder (a :class:`~pathlib.Path`); ``doc``
    becomes the attribute's docstring.
    """

    def __init__(self, folder: str, name: str, doc: str = "") -> None:
        self.folder = folder
        self.name = name
        self.__doc__ = doc or f"``<{folder}>/{name}``."

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        return getattr(obj, self.folder) / self.name


def sweep_pid_folders(prefix: str, root: str | Path | None = None) -> int:
    """Remove the folders ``<root>/<prefix><pid>-*`` (``root``: the temp folder) whose
    process ``pid`` is gone: scratch a SIGKILLed process could not remove itself (spectator
    servers' ``aoe-serve-``, heats' verifier ``aoe-verifiers-``). Returns how many."""
    import shutil
    import tempfile

    removed = 0
    for d in Path(root or tempfile.gettempdir()).glob(f"{prefix}*-*"):
        pid = d.name[len(prefix):].split("-", 1)[0]
        if not pid.isdigit() or d.is_symlink() or not d.is_dir():
            continue
        try:
            os.kill(int(pid), 0)
            continue  # its process still runs
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        shutil.rmtree(d, ignore_errors=True)
        removed += 1
    return removed
