"""``aoe cleanup PATH``: tear down territories a killed runner left behind."""

from __future__ import annotations

import argparse
from pathlib import Path

from aoe_tui.errors import UsageError


def register(sub: argparse._SubParsersAction) -> None:
    """Register the ``cleanup`` sub-command."""
    p = sub.add_parser(
        "cleanup",
        help="tear down territories a killed runner left behind",
        description="Find territories (containers, QEMU guests) recorded under PATH — a match folder, "
        "a season folder, a territories folder (or a provider workdir) or a folder of them — whose runner is gone, and remove their processes, "
        "mounts, network namespaces, links and overlays. Territories of a live runner are left alone.",
    )
    p.add_argument("path", metavar="PATH", help="match, season or territories folder (searched recursively)")
    p.set_defaults(func=_cmd)


def _cmd(args: argparse.Namespace) -> int:
    from aoe_tui.runtime.cleanup import cleanup_under

    root = Path(args.path)
    if not root.is_dir():
        raise UsageError(f"{root}: not a folder")
    cleaned = cleanup_under(root)
    for tdir, ident in cleaned:
        print(f"removed {ident} ({tdir})")
    print(f"{len(cleaned)} stale territor{'y' if len(cleaned) == 1 else 'ies'} removed under {root}")
    return 0
