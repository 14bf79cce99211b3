"""Building the cup site (``aoe site``): a season folder, or upstream match folders, → a
static, self-contained site folder (no network request, no build step; works from
``file://`` and any static host).

Layout (all links relative)::

    index.html                       home: season title, status, champion, bracket,
                                     standings, per-arena breakdown, charts
    leaderboard.html                 across arenas, per model configuration; capability treemap
    heats/<slug>/index.html          one page per heat attempt (replay, service maps, …)
    heats/<slug>/artifacts/          events.jsonl, world.json, match.json, arena.json, the bundle
    assets/site.css, assets/site.js  the one stylesheet and the one script
    .nojekyll, .aoe-site             GitHub Pages marker; "aoe site wrote this folder"

``<slug>``: the bundle's ``match.slug`` (Appendix B), else the folder name by upstream's
slug rule (§9.1).
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aoe_tui.errors import AoeError
import aoe_tui.export.site.pages as pages
from aoe_tui.export.site.heat import HeatPage, heat_page
from aoe_tui.export.site.publish import publish_site
from aoe_tui.export.site.render import ASSETS, render_page
from aoe_tui.replay.seasondir import load_season_dir
from aoe_tui.season.season_standings import season_standings

__all__ = ["SiteSummary", "build_match_site", "build_season_site", "season_heat_pages"]


@dataclass
class SiteSummary:
    """What a build wrote: ``out_dir``, ``pages`` (every HTML file), ``seconds`` it took,
    ``skipped`` (one line per heat attempt that has no page or match listed once, naming
    its folder and why)."""

    out_dir: Path
    pages: list[Path] = field(default_factory=list)
    seconds: float = 0.0
    skipped: list[str] = field(default_factory=list)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _copy_assets(tmp: Path) -> None:
    (tmp / "assets").mkdir()
    for f in sorted(ASSETS.iterdir()):
        if f.is_file():
            shutil.copyfile(f, tmp / "assets" / f.name)
    (tmp / ".nojekyll").write_text("")


def _write_heat(tmp: Path, page: HeatPage, summary: SiteSummary, nav: dict[str, Any]) -> None:
    folder = tmp / "heats" / page.slug
    (folder / "artifacts").mkdir(parents=True, exist_ok=True)
    for name, src in page.artifacts.items():
        shutil.copyfile(src, folder / "artifacts" / name)
    _write(folder / "index.html", render_page("heat.html", root="../../", nav=nav, **pages.heat_context(page)))
    summary.pages.append(folder / "index.html")


def season_heat_pages(season_dir: Path, state: Any, skipped: list[str]) -> list[HeatPage]:
    """A :class:`HeatPage` per heat attempt of ``state`` whose folder holds an event log,
    in round, heat, attempt order. A finished attempt whose log is missing, empty or cannot
    be read is listed in ``skipped`` (``"no page for round-1/heat-2/attempt-1: …"``) and gets no page;
    an attempt still starting (no log yet) or interrupted (its folder renamed aside, the
    re-run has the page) is left out silently."""
    out = []
    info = state.info
    for heat in state.heats():
        arena = state.arena(heat.arena) if heat.arena else None
        for att in heat.attempts:
            folder = season_dir / att.folder
            events = folder / "events.jsonl"
            if not events.is_file():
                if att.status == "finished":
                    skipped.append(f"no page for {att.folder}: no events.jsonl")
                continue
            label = f"{info.season} · {info.label}" if info else season_dir.name
            slug = f"season-{info.season}-{info.label}-r{heat.round}-h{heat.heat}-a{att.attempt}" if info else None
            try:
                page = heat_page(folder, slug=slug and pages.slugify(slug),
                                 title=f"{label} · round {heat.round} heat {heat.heat}"
                                       f"{f' ({heat.arena})' if state.multi_arena else ''} · attempt {att.attempt}",
                                 seated=heat.entrants,
                                 season={"round": heat.round, "heat": heat.heat, "attempt": att.attempt,
                                         "status": att.shown_status, "arena": arena.id if arena else heat.arena,
                                         "outcome": att.finished.outcome if att.finished else None,
                                         "counted": heat.counted is att,
                                         "failure_source": att.finished.failure_source if att.finished else None,
                                         "detail": att.finished.detail if att.finished else ""})
            except AoeError as err:
                skipped.append(f"no page for {att.folder}: {err}")
                continue
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:  # a damaged arena.json/match.json
                skipped.append(f"no page for {att.folder}: cannot read its match files ({type(err).__name__}: {err})")
                continue
            if not page.loaded.records and att.status == "finished":
                skipped.append(f"no page for {att.folder}: events.jsonl is empty")
                continue
            out.append(page)
    return out


def build_season_site(season_dir: Path, out_dir: Path) -> SiteSummary:
    """Build the site of the season folder ``season_dir`` into ``out_dir`` (replaced in one
    step, :func:`publish_site`). Raises :class:`AoeError` (one line naming the file) for a
    folder that is not a season or whose ``season.jsonl`` is damaged; a heat attempt whose
    log cannot be read is skipped and named in :attr:`SiteSummary.skipped`."""
    t0 = time.perf_counter()
    season_dir = Path(season_dir)
    state = load_season_dir(season_dir)
    rows = season_standings(state)
    summary = SiteSummary(out_dir=Path(out_dir))

    def build(tmp: Path) -> None:
        _copy_assets(tmp)
        heats = season_heat_pages(season_dir, state, summary.skipped)
        nav = pages.nav(season=True)
        for page in heats:
            _write_heat(tmp, page, summary, nav)
        _write(tmp / "index.html", render_page("home.html", root="", nav=nav,
                                               **pages.home_context(state, rows, heats)))
        _write(tmp / "leaderboard.html", render_page("leaderboard.html", root="", nav=nav,
                                                     **pages.leaderboard_context(heats)))
        summary.pages[:0] = [tmp / "index.html", tmp / "leaderboard.html"]

    summary.out_dir = publish_site(summary.out_dir, build)
    summary.pages = [_rebase(p, summary.out_dir) for p in summary.pages]
    summary.seconds = time.perf_counter() - t0
    return summary


def build_match_site(match_dirs: list[Path], out_dir: Path) -> SiteSummary:
    """Build a site of match folders (ours or upstream's published ones, §9.1; a single-file
    bundle or a bare ``events.jsonl`` too): a page per match and a home page listing them.
    A folder named twice is listed once (:attr:`SiteSummary.skipped` says so). Raises
    :class:`AoeError` naming the first folder that is not a readable match (nothing is
    written then)."""
    t0 = time.perf_counter()
    summary = SiteSummary(out_dir=Path(out_dir))
    firsts: dict[Path, Path] = {}
    for d in map(Path, match_dirs):
        key = d.resolve()
        if key in firsts:
            summary.skipped.append(f"{d}: the same match as {firsts[key]} (listed once)")
        else:
            firsts[key] = d
    loaded = []
    for d in firsts.values():
        try:
            loaded.append(heat_page(d))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
            raise AoeError(f"{d}: cannot read its match files ({type(err).__name__}: {err})") from None
    seen: dict[str, int] = {}
    for p in loaded:  # two folders of one name: -2, -3 …
        n = seen[p.slug] = seen.get(p.slug, 0) + 1
        if n > 1:
            p.slug = f"{p.slug}-{n}"
            p.payload["match"]["slug"] = p.slug

    def build(tmp: Path) -> None:
        _copy_assets(tmp)
        nav = pages.nav(season=False)
        for page in loaded:
            _write_heat(tmp, page, summary, nav)
        _write(tmp / "index.html", render_page("home.html", root="", nav=nav, **pages.matches_context(loaded)))
        _write(tmp / "leaderboard.html", render_page("leaderboard.html", root="", nav=nav,
                                                     **pages.leaderboard_context(loaded)))
        summary.pages[:0] = [tmp / "index.html", tmp / "leaderboard.html"]

    summary.out_dir = publish_site(summary.out_dir, build)
    summary.pages = [_rebase(p, summary.out_dir) for p in summary.pages]
    summary.seconds = time.perf_counter() - t0
    return summary


def _rebase(p: Path, out_dir: Path) -> Path:
    """A page path inside the build folder → the same page inside ``out_dir``."""
    parts = p.parts
    for i, part in enumerate(parts):
        if part.startswith(f".{out_dir.name}.build-"):
            return out_dir.joinpath(*parts[i + 1:])
    return p
