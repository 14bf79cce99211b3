"""Publishing a built site folder in one step (``aoe site``, ``aoe run --site``).

The site is built in a sibling folder ``.NAME.build-PID`` and then swapped in with
``renameat2(RENAME_EXCHANGE)`` (Linux ≥ 3.15): a reader or a static host serving ``NAME``
sees either the whole old site or the whole new one, never a half-written page. Where the
file system refuses the exchange, two renames replace it (a moment with no folder, never
a mixed one). ``-o`` naming a symlink publishes into the folder it points to (the link
stays).

A folder is only ever replaced if it is new, empty, or a site this command wrote and that
holds nothing else: :data:`MARKER` lists every file the site wrote, and any other file in
the folder (a ``CNAME``, a ``.git``, a season folder kept there) makes the build refuse
with one line naming it, before anything is written — never deleted.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from aoe_tui.errors import AoeError

__all__ = ["MARKER", "SiteFolderError", "check_site_folder", "publish_site"]

#: the file that marks a folder as a site ``aoe site`` wrote: its first line says so, the
#: others list every file of the site (paths relative to the folder)
MARKER = ".aoe-site"
_MARKER_HEAD = "a site written by aoe site; aoe site replaces this folder and every file listed below"
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


class SiteFolderError(AoeError):
    """The output folder cannot take the site (holds other files, not writable)."""


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap the paths ``a`` and ``b``; False where the system cannot."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    return fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0


def _listed(folder: Path) -> set[str] | None:
    """The files :data:`MARKER` lists (None: no marker, or not one of ours)."""
    try:
        lines = (folder / MARKER).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    if not lines or lines[0] != _MARKER_HEAD:
        return None
    return set(lines[1:])


def _files(folder: Path) -> list[str]:
    """Every file and empty folder under ``folder`` (relative paths, sorted)."""
    out = []
    for dirpath, dirnames, filenames in os.walk(folder):
        rel = Path(dirpath).relative_to(folder)
        out.extend(str(rel / f) for f in filenames)
        if not dirnames and not filenames and rel != Path("."):
            out.append(str(rel) + "/")
    return sorted(p.removeprefix("./") for p in out)


def check_site_folder(out_dir: Path) -> Path:
    """The folder the site goes to (``out_dir`` with symlinks resolved), or raise
    :class:`SiteFolderError` (one line naming the folder and what is in the way): it must be
    new, empty, or a site this command wrote holding only the files it wrote; its parent
    must be a folder."""
    out_dir = Path(out_dir).expanduser().resolve()
    if out_dir.exists() and not out_dir.is_dir():
        raise SiteFolderError(f"{out_dir}: exists and is not a folder")
    for parent in out_dir.parents:
        if parent.exists():
            if not parent.is_dir():
                raise SiteFolderError(f"{out_dir}: {parent} is not a folder")
            break
    if out_dir.is_dir():
        present = [p for p in _files(out_dir) if p != MARKER]
        if present:
            listed = _listed(out_dir)
            if listed is None:
                raise SiteFolderError(f"{out_dir}: a folder with other files (no {MARKER}); the site goes to a new "
                                      "or empty folder, or one aoe site wrote before")
            foreign = [p for p in present if p not in listed]
            if foreign:
                more = f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""
                raise SiteFolderError(f"{out_dir}: holds files the site did not write ({', '.join(foreign[:3])}{more}); "
                                      "a rebuild would delete them: move them out, or write the site elsewhere")
    return out_dir


def publish_site(out_dir: Path, build: Callable[[Path], None]) -> Path:
    """Build the site with ``build(tmp_folder)`` and put it at ``out_dir`` in one step;
    returns the folder written (symlinks resolved).

    Raises :class:`SiteFolderError` (:func:`check_site_folder`; or the folder cannot be
    written); whatever ``build`` raises leaves ``out_dir`` untouched (the half-built folder
    is removed)."""
    out_dir = check_site_folder(out_dir)
    try:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        tmp = out_dir.parent / f".{out_dir.name}.build-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
    except OSError as err:
        raise SiteFolderError(f"{out_dir}: cannot write the site here: {err.strerror or err}") from None
    try:
        build(tmp)
        (tmp / MARKER).write_text("\n".join([_MARKER_HEAD, *_files(tmp)]) + "\n", encoding="utf-8")
        tmp.chmod(0o755)
        if not out_dir.exists():
            os.rename(tmp, out_dir)
        elif _exchange(tmp, out_dir):
            pass
        else:
            old = out_dir.parent / f".{out_dir.name}.old-{os.getpid()}"
            os.rename(out_dir, old)
            os.rename(tmp, out_dir)
            tmp = old
    except OSError as err:
        shutil.rmtree(tmp, ignore_errors=True)
        raise SiteFolderError(f"{out_dir}: cannot write the site: {err.strerror or err}") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(tmp, ignore_errors=True)
    return out_dir
