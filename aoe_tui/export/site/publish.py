"""Publishing a built site folder in one step (``aoe site``, ``aoe run --site``).

The site is built in a sibling folder ``.NAME.build-PID`` and then swapped in with
``renameat2(RENAME_EXCHANGE)`` (Linux ≥ 3.15): a reader or a static host serving ``NAME``
sees either the whole old site or the whole new one, never a half-written page. Where the
file system refuses the exchange, two renames replace it (a moment with no folder, never
a mixed one). A folder is only ever replaced if it is empty or holds :data:`MARKER`
(written into every site), so ``-o ~`` cannot delete a home folder.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from aoe_tui.errors import AoeError

__all__ = ["MARKER", "SiteFolderError", "publish_site"]

#: the file that marks a folder as a site ``aoe site`` wrote (safe to replace)
MARKER = ".aoe-site"
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


class SiteFolderError(AoeError):
    """The output folder cannot take the site (not ours, not writable)."""


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap the paths ``a`` and ``b``; False where the system cannot."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    return False


def publish_site(out_dir: Path, build: Callable[[Path], None]) -> None:
    """Build the site with ``build(tmp_folder)`` and put it at ``out_dir`` in one step.

    Raises :class:`SiteFolderError` (one line naming the folder) when ``out_dir`` exists and
    is not empty and not a site, or cannot be written; whatever ``build`` raises leaves
    ``out_dir`` untouched (the half-built folder is removed)."""
    out_dir = Path(out_dir).absolute()
    if out_dir.exists():
        if not out_dir.is_dir():
            raise SiteFolderError(f"{out_dir}: exists and is not a folder")
        if any(out_dir.iterdir()) and not (out_dir / MARKER).is_file():
            raise SiteFolderError(f"{out_dir}: a folder with other files (no {MARKER}); the site goes to a new or "
                                  f"empty folder, or one aoe site wrote before")
    try:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        tmp = out_dir.parent / f".{out_dir.name}.build-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
    except OSError as err:
        raise SiteFolderError(f"{out_dir}: cannot write the site here: {err.strerror or err}") from None
    try:
        build(tmp)
        (tmp / MARKER).write_text("a site written by aoe site; aoe site replaces this folder\n")
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
