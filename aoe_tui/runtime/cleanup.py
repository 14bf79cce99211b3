"""Find and remove territories that a killed runner left behind.

Every provider records what it started in ``<match>/territories/<id>/state.json``
(written atomically before a territory boots). :func:`cleanup_under` walks a match
folder, a season folder or any folder holding them and tears down the leftovers of
runners that are gone; territories of a runner that is still alive are never touched
(container state names its owner pid; a QEMU guest dies with its runner, so a live
QEMU process means a live runner).
"""

from __future__ import annotations

import json
from pathlib import Path

from aoe_tui.runtime import container, qemu
from aoe_tui.runtime.netalloc import pid_alive


def _live_qemu(tdir: Path) -> bool:
    for state_file in tdir.glob("*/state.json"):
        try:
            state = json.loads(state_file.read_text())
        except (OSError, ValueError):
            continue
        pid = state.get("pid")
        if state.get("provider", "qemu") == "qemu" and isinstance(pid, int) and pid_alive(pid):
            return True
    return False


def cleanup_under(root: Path) -> list[tuple[Path, str]]:
    """Tear down stale territories in every ``territories/`` folder below ``root`` (or ``root`` itself).

    Returns ``(territories folder, territory id)`` for each territory removed.

    Raises:
        aoe_tui.runtime.provider.ProviderError: a leftover could not be removed (names it).
    """
    root = Path(root)
    dirs = [root] if root.name == "territories" else sorted(p for p in root.glob("**/territories") if p.is_dir())
    cleaned: list[tuple[Path, str]] = []
    for tdir in dirs:
        found = container.cleanup_stale(tdir)
        if not _live_qemu(tdir):
            found += qemu.cleanup_stale(tdir)
        cleaned += [(tdir, ident) for ident in found]
    return cleaned
