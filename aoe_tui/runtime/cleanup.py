"""Find and remove territories that a killed runner left behind.

Every provider records what it started in ``<match>/territories/<id>/state.json``
(written atomically before a territory boots). :func:`cleanup_under` walks a match
folder, a season folder or any folder holding them and runs the cleanup of every
registered provider (:mod:`aoe_tui.runtime.registry`, ``cleanup=``) on each
``territories/`` folder, in registration order; territories of a runner that is still
alive are never touched (container state names its owner pid; a QEMU guest dies with its
runner, so a live QEMU process means a live runner).
"""

from __future__ import annotations

from pathlib import Path

from aoe_tui.runtime.provider import ProviderError
from aoe_tui.runtime.registry import providers


def cleanup_under(root: Path) -> list[tuple[Path, str]]:
    """Tear down stale territories in every ``territories/`` folder below ``root`` and in
    ``root`` itself when it is one: named ``territories`` once resolved (``aoe cleanup .``
    inside it, a link to it) or holding territory records (``<id>/state.json``) directly.

    Returns ``(territories folder, territory id)`` for each territory removed.

    Raises:
        aoe_tui.runtime.provider.ProviderError: a leftover could not be removed (names it),
            or a provider's cleanup could not be imported or failed unexpectedly (names the
            provider, the folder and the error, in one line).
    """
    root = Path(root).resolve()  # "." or a link inside a territories folder names it too
    if root.name == "territories" or _holds_territories(root):
        dirs = [root]
    else:
        dirs = sorted(p for p in root.glob("**/territories") if p.is_dir())
    cleaned: list[tuple[Path, str]] = []
    for tdir in dirs:
        cleaned += cleanup_folder(tdir)
    return cleaned


def _holds_territories(folder: Path) -> bool:
    """True when ``folder`` directly holds a territory record (``<id>/state.json``)."""
    return any(p.is_file() for p in folder.glob("*/state.json"))


def cleanup_folder(tdir: Path) -> list[tuple[Path, str]]:
    """Every provider's ``cleanup_stale`` on the one folder ``tdir`` (territory records
    directly in it); returns ``(tdir, territory id)`` for each territory removed. Raises as
    :func:`cleanup_under`."""
    cleaned: list[tuple[Path, str]] = []
    for entry in providers():
        try:
            cleaned += [(tdir, ident) for ident in entry.cleanup_stale(tdir)]
        except ProviderError:
            raise
        except Exception as err:  # noqa: BLE001 - a plugin's bug becomes one clear line
            raise ProviderError(f"{tdir}: cleanup of provider {entry.name!r} failed: "
                                f"{type(err).__name__}: {err}") from None
    return cleaned
