"""``aoe site``: the cup site of a season folder, or of published match folders (§9.1).

``aoe site SEASON_DIR -o DIR`` and ``aoe site --match MATCH_DIR [--match …] -o DIR`` write
a static, self-contained site (``aoe_tui.export.site``); ``aoe run … --site DIR`` refreshes
one after every heat (:func:`season_exports`).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aoe_tui.domain.display import printable
from aoe_tui.errors import AoeError, UsageError

__all__ = ["check_run_site", "register", "season_exports"]


def register(sub: argparse._SubParsersAction) -> None:
    """Register ``aoe site``."""
    p = sub.add_parser(
        "site", help="write a season's cup site: standings, bracket, a replay page per heat (static HTML)",
        description="Write a static, self-contained website of a season folder (home with bracket, standings "
        "and charts; a replay page per heat attempt with service maps, milestone ladders, agent activity and "
        "artifacts; a leaderboard across arenas), or of published match folders with --match. It works from "
        "file:// and any static host, and makes no network request. DIR is replaced in one step; it must be "
        "new, empty, or a site aoe site wrote.")
    p.add_argument("season_dir", nargs="?", metavar="SEASON_DIR", help="season folder written by aoe run")
    p.add_argument("--match", action="append", default=[], metavar="MATCH_DIR",
                   help="a match folder (events.jsonl + world.json, ours or upstream's published ones); "
                   "repeatable; instead of SEASON_DIR")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="the site folder to write")
    p.set_defaults(func=_cmd_site)


def _cmd_site(args: argparse.Namespace) -> int:
    from aoe_tui.export.site import build_match_site, build_season_site

    if bool(args.season_dir) == bool(args.match):
        raise UsageError("aoe site: give either SEASON_DIR or --match MATCH_DIR (one or more), not both")
    out = Path(args.output)
    if args.season_dir:
        season_dir = Path(args.season_dir)
        if not (season_dir / "season.jsonl").is_file():
            raise UsageError(f"{season_dir}: not a season folder (no season.jsonl); for a match folder use "
                             f"--match {season_dir}")
        summary = build_season_site(season_dir, out)
    else:
        summary = build_match_site([Path(m) for m in args.match], out)
    for line in summary.skipped:
        print(printable(line))
    heats = sum(1 for p in summary.pages if p.parent.parent.name == "heats")
    print(printable(f"site written to {out}/index.html: {len(summary.pages)} pages ({heats} heat pages) "
                    f"in {summary.seconds:.1f}s"))
    return 0


def check_run_site(site: Path, season_dir: Path) -> None:
    """``aoe run --site SITE``, checked before the season starts (one line, exit 2): the site
    folder must be able to take the site (:func:`check_site_folder`) and lie apart from the
    season folder (neither inside the other)."""
    from aoe_tui.export.site.publish import check_site_folder

    where = check_site_folder(site)
    season = Path(season_dir).expanduser().resolve()
    if where == season or season in where.parents or where in season.parents:
        raise UsageError(f"--site {site}: the site folder and the season folder {season_dir} must lie apart "
                         "(neither inside the other)")


def season_exports(site: Path | None) -> Callable[[Path, Any], None]:
    """``aoe run``'s ``write_exports``: the standings files, then (``site`` given) the cup
    site, rebuilt and swapped in one step after every heat. A site that cannot be written
    raises :class:`~aoe_tui.season.runner.ExportFailed` (one progress line; the season goes on)."""
    from aoe_tui.export import write_all

    if site is None:
        return write_all
    return _SeasonExports(Path(site).absolute())


class _SeasonExports:
    """Picklable (forked/threaded exports) pair of standings files + cup site."""

    def __init__(self, site: Path) -> None:
        self.site = site

    def __call__(self, season_dir: Path, state: Any) -> None:
        from aoe_tui.export import write_all
        from aoe_tui.export.site import build_season_site
        from aoe_tui.season.runner import ExportFailed

        write_all(season_dir, state)
        try:
            build_season_site(season_dir, self.site)
        except AoeError as err:
            raise ExportFailed(f"cup site not refreshed: {err}") from None
        except OSError as err:
            raise ExportFailed(f"cup site not refreshed: {self.site}: {err.strerror or err}") from None
