"""Acceptance tests of the cup site (``aoe site``, issue #28) in a real browser.

The site of ``tests/fixtures/ours/demo-season`` (a real demo season run), of every published
match folder (``aoe site --match``), of a season with hostile agent text
(``tests/site_fixtures.py`` ``hostile_season``) and of the test session's live demo run,
opened in the Debian chromium (``tests/site_browser.py``, one browser for the session) at a
laptop's and a phone's width: no console error, no uncaught exception, no request outside
the site folder; the replay plays to the end and its winner and service maps follow the
race; agent text shows literally and never runs; screenshots match ``tests/snapshots/site/``
(``AOE_UPDATE_SITE_SNAPSHOTS=1`` rewrites them); every page stays under 500 kB.

The DOM hooks these tests rely on are the site's contract (``docs/site.md``): every page's
``body[data-page=home|heat|leaderboard]``; the home page's ``table#standings``, ``#bracket``
with an ``a.heat-link`` per heat attempt and ``#champion``; a heat page's ``#replay`` with
``button#play``, ``#step``, ``#step-back``, ``button[data-speed=1|5|20]``, ``input#scrub``
(its value the replay clock in ms), ``#clock``, ``#winner`` and ``body[data-replay-state=final]``
at the last event, its service maps ``.map[data-territory=T] [data-node=N][data-state]``;
the leaderboard's ``table#leaderboard`` and ``#treemap`` with ``select#treemap-measure``.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from site_browser import WIDTHS, open_page, site_browser  # noqa: F401 (fixtures)
from site_fixtures import (DEMO_SEASON, HOSTILE_ATTEMPT, HOSTILE_CHARS, HOSTILE_MODEL, HOSTILE_PIECES, SOURCES,
                           hostile_season, hostile_text, visible)

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
MATCH_FOLDERS = sorted(p for p in (FIXTURES / "upstream" / "matches").iterdir() if (p / "events.jsonl").is_file()) + [
    FIXTURES / "ours" / "opencode-first-build"]
SNAPSHOTS = REPO / "tests" / "snapshots" / "site"
UPDATE_SNAPSHOTS = os.environ.get("AOE_UPDATE_SITE_SNAPSHOTS") == "1"
MAX_PAGE_BYTES = 500_000
#: how long a replay may take to reach its end once driven there (ms)
REPLAY_TIMEOUT_MS = 30_000
NODE_STATES = {"unknown", "pending", "verifying", "healthy", "failed", "durable"}
ARTIFACTS = {"events.jsonl", "world.json", "match.json", "arena.json"}

# --- helpers ------------------------------------------------------------------------------

#: the page's text as a reader gets it: every text node but those of script, style and
#: template elements (a data block's JSON is not shown text)
VISIBLE_TEXT_JS = """() => {
  const out = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    if (!n.parentElement.closest('script, style, template, noscript')) out.push(n.nodeValue);
  }
  return out.join('\\n');
}"""

MAP_STATES_JS = """() => {
  const out = {};
  for (const m of document.querySelectorAll('.map[data-territory]')) {
    for (const n of m.querySelectorAll('[data-node]')) out[m.dataset.territory + '/' + n.dataset.node] = n.dataset.state;
  }
  return out;
}"""

SET_SCRUB_JS = """(to) => {
  const s = document.querySelector('#scrub');
  s.value = to === 'max' ? s.max : String(to);
  s.dispatchEvent(new Event('input', {bubbles: true}));
  s.dispatchEvent(new Event('change', {bubbles: true}));
  return Number(s.value);
}"""


def aoe(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "aoe_tui.cli", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=300)


def build_cli(out: Path, *args: str) -> Path:
    """``aoe site ARGS -o OUT``; returns OUT (fails the test with aoe's output if it fails)."""
    res = aoe("site", *args, "-o", str(out))
    assert res.returncode == 0, f"aoe site {' '.join(args)} exited {res.returncode}:\n{res.stdout}\n{res.stderr}"
    assert "Traceback" not in res.stderr, res.stderr
    assert (out / "index.html").is_file(), f"no {out}/index.html; aoe site said:\n{res.stdout}"
    return out


def heat_pages(site: Path) -> list[Path]:
    return sorted(site.glob("heats/*/index.html"))


def world_of(heat_page: Path) -> dict:
    return json.loads((heat_page.parent / "artifacts" / "world.json").read_text(encoding="utf-8"))


def arena_of(heat_page: Path) -> dict | None:
    p = heat_page.parent / "artifacts" / "arena.json"
    return json.loads(p.read_text(encoding="utf-8")) if p.is_file() else None


def winner_heat(site: Path) -> Path:
    """The first heat page (by slug) whose race has a winner and whose arena draws service maps."""
    for page in heat_pages(site):
        arena = arena_of(page) or {}
        if world_of(page).get("winner") and (arena.get("visualization") or {}).get("nodes"):
            return page
    raise AssertionError(f"{site}: no heat page with a winner and a service map")


def visible_text(page) -> str:  # noqa: ANN001
    return page.evaluate(VISIBLE_TEXT_JS)


#: the text of tooltips and labels (``title``, ``aria-label``, ``alt``): shown text too
ATTRIBUTE_TEXT_JS = """() => [...document.querySelectorAll('[title], [aria-label], [alt]')]
  .flatMap(e => ['title', 'aria-label', 'alt'].map(a => e.getAttribute(a)).filter(v => v !== null)).join('\\n')"""


def replay_state(page) -> str | None:  # noqa: ANN001
    return page.get_attribute("body", "data-replay-state")


def play_to_final(page) -> None:  # noqa: ANN001
    """Press 20× and play, and wait for the replay's last event."""
    need(page, '#replay button[data-speed="20"]')
    need(page, "#replay button#play")
    page.click('[data-speed="20"]')
    page.click("#play")
    page.wait_for_selector('body[data-replay-state="final"]', state="attached", timeout=REPLAY_TIMEOUT_MS)


def need(page, selector: str) -> None:  # noqa: ANN001
    """Wait for ``selector`` (a DOM hook of the site's contract); fail naming it."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_selector(selector, state="attached")
    except PlaywrightTimeout:
        pytest.fail(f"{page.url}: no {selector} (a DOM hook of the site's contract, docs/site.md)")


def scrub_to(page, to: int | str) -> int:  # noqa: ANN001
    """Set ``#scrub`` to ``to`` ms (``"max"``: its end) as a reader's drag does; returns the value."""
    need(page, "input#scrub")
    return page.evaluate(SET_SCRUB_JS, to)


def scrub_value(page) -> float:  # noqa: ANN001
    return float(page.locator("#scrub").input_value())


def scrub_to_final(page) -> None:  # noqa: ANN001
    scrub_to(page, "max")
    page.wait_for_selector('body[data-replay-state="final"]', state="attached", timeout=REPLAY_TIMEOUT_MS)


def expected_winner_text(world: dict) -> str:
    return world["winner"] if world.get("winner") else "no winner"


def milestone_nodes(arena: dict) -> dict[str, str]:
    """Node id → milestone id of the arena's service map nodes that stand for a milestone."""
    return {n["id"]: n["milestone"] for n in (arena.get("visualization") or {}).get("nodes", []) if n.get("milestone")}


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value is not None and (tag, name) in {("a", "href"), ("link", "href"), ("script", "src"),
                                                     ("img", "src"), ("source", "src"), ("iframe", "src")}:
                self.links.append((tag, name, value))


# --- the sites, built once per module -----------------------------------------------------


@pytest.fixture(scope="module")
def season_site(tmp_path_factory) -> Path:
    """The site of the demo season fixture, through the CLI."""
    return build_cli(tmp_path_factory.mktemp("site") / "demo-site", str(DEMO_SEASON))


@pytest.fixture(scope="module")
def hostile_site(tmp_path_factory) -> tuple[Path, Path]:
    """``(season folder, site)`` of :func:`hostile_season`."""
    season = hostile_season(tmp_path_factory.mktemp("hostile"))
    return season, build_cli(season.parent / "site", str(season))


@pytest.fixture(scope="module")
def match_site(tmp_path_factory) -> Path:
    """One ``aoe site --match …`` site of every published match folder and ours."""
    args = [a for m in MATCH_FOLDERS for a in ("--match", str(m))]
    return build_cli(tmp_path_factory.mktemp("matches") / "site", *args)


# --- the fixtures themselves ------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["csv", "json", "md", "html"])
def test_demo_season_fixture_gives_its_standings(fmt, tmp_path):
    """The trimmed fixture still holds all ``aoe standings`` needs: the same files the run wrote."""
    res = aoe("standings", str(DEMO_SEASON), "--format", fmt, "-o", str(tmp_path / f"standings.{fmt}"))
    assert res.returncode == 0, res.stderr
    assert (tmp_path / f"standings.{fmt}").read_bytes() == (DEMO_SEASON / f"standings.{fmt}").read_bytes()


def test_hostile_season_still_loads(hostile_site):
    """The hostile copy is a valid season: ``aoe standings`` reads it, with the hostile model."""
    season, _site = hostile_site
    res = aoe("standings", str(season), "--format", "json", "-o", str(season.parent / "standings.json"))
    assert res.returncode == 0, res.stderr
    rows = json.loads((season.parent / "standings.json").read_text(encoding="utf-8"))["standings"]
    assert HOSTILE_MODEL in {r["model"] for r in rows}
    res = aoe("inspect", str(season / HOSTILE_ATTEMPT))
    assert res.returncode == 0, res.stderr


# --- layout ---------------------------------------------------------------------------------


def test_season_site_layout(season_site):
    """index, leaderboard, a page per heat attempt with its artifacts (copies of the heat's
    files), the one stylesheet and script, ``.nojekyll``."""
    attempts = sorted(p for p in DEMO_SEASON.glob("round-*/heat-*/attempt-*") if (p / "events.jsonl").is_file())
    pages = heat_pages(season_site)
    assert len(pages) == len(attempts) == 6
    for f in ("index.html", "leaderboard.html", "assets/site.css", "assets/site.js", ".nojekyll"):
        assert (season_site / f).is_file(), f
    sources = {(a / "events.jsonl").read_bytes(): a for a in attempts}
    seen = set()
    for page in pages:
        art = page.parent / "artifacts"
        slug = page.parent.name
        names = {p.name for p in art.iterdir()}
        assert ARTIFACTS | {f"{slug}.match.json"} <= names, f"{art}: {sorted(names)}"
        src = sources.get((art / "events.jsonl").read_bytes())
        assert src is not None, f"{art}/events.jsonl is no heat attempt's event log"
        seen.add(src)
        for name in ARTIFACTS:
            assert (art / name).read_bytes() == (src / name).read_bytes(), f"{art / name} differs from {src / name}"
    assert seen == set(attempts), "one page per heat attempt"


def test_python_api(tmp_path):
    """``build_season_site`` / ``build_match_site`` return a :class:`SiteSummary` naming every
    page they wrote and the seconds it took."""
    from aoe_tui.export.site import build_match_site, build_season_site

    out = tmp_path / "season-site"
    summary = build_season_site(DEMO_SEASON, out)
    assert sorted(map(Path, summary.pages)) == sorted(p for p in out.rglob("*.html") if "artifacts" not in p.parts)
    assert len(summary.pages) == 2 + 6 and 0 < summary.seconds < 10
    out = tmp_path / "match-site"
    summary = build_match_site([MATCH_FOLDERS[0], MATCH_FOLDERS[-1]], out)
    assert len([p for p in summary.pages if p.parent.parent.name == "heats"]) == 2
    assert all(Path(p).is_file() for p in summary.pages) and summary.seconds > 0


@pytest.mark.parametrize("which", ["season_site", "match_site"])
def test_links_are_relative_and_resolve(which, request):
    """Every link, stylesheet and script of every page is relative and names a file of the site."""
    season_site = request.getfixturevalue(which)
    for page in [season_site / "index.html", season_site / "leaderboard.html", *heat_pages(season_site)]:
        parser = _Links()
        parser.feed(page.read_text(encoding="utf-8"))
        assert parser.links, page
        for tag, attr, value in parser.links:
            u = urlparse(value)
            where = f"{page.relative_to(season_site)}: <{tag} {attr}={value!r}>"
            if value.startswith("#") or u.scheme == "data":
                continue
            assert not u.scheme and not u.netloc and not value.startswith("/"), f"{where}: not relative"
            target = (page.parent / unquote(u.path)).resolve()
            assert target.is_relative_to(season_site.resolve()), f"{where}: leaves the site"
            assert target.is_file() or (target.is_dir() and (target / "index.html").is_file()), f"{where}: no such file"


def test_pages_stay_small(season_site, match_site):
    """Each page's HTML (artifacts apart) is at most 500 kB."""
    for site in (season_site, match_site):
        for page in site.rglob("*.html"):
            if "artifacts" in page.relative_to(site).parts:
                continue
            size = page.stat().st_size
            assert size <= MAX_PAGE_BYTES, f"{page.relative_to(site)}: {size} bytes > {MAX_PAGE_BYTES}"


# --- every page in the browser ----------------------------------------------------------------


@pytest.mark.parametrize("width", WIDTHS)
def test_every_page_loads_cleanly(season_site, open_page, width):
    """Home, leaderboard and every heat page at 1280 and 390 px: no console error, no
    uncaught exception, no failed request, no request outside the site folder."""
    kinds = {season_site / "index.html": "home", season_site / "leaderboard.html": "leaderboard"}
    for f in [*kinds, *heat_pages(season_site)]:
        page, problems = open_page(f, width)
        assert page.get_attribute("body", "data-page") == kinds.get(f, "heat"), f
        if f not in kinds:  # the replay to its end at this width (test_heat_replay_plays_to_the_winner plays one)
            scrub_to_final(page)
        page.wait_for_timeout(50)
        problems.assert_none(f"{f.relative_to(season_site)} at {width} px")
        page.context.close()


def test_home_page(season_site, open_page):
    page, problems = open_page(season_site / "index.html")
    assert page.locator("table#standings").count() == 1
    standings = page.locator("table#standings").inner_text()
    for entrant in ("oracle", "oracle-2", "memory", "memory-2", "volatile", "volatile-2", "slow"):
        assert entrant in standings
    links = page.locator("#bracket a.heat-link")
    assert links.count() == len(heat_pages(season_site))
    hrefs = {(season_site / unquote(links.nth(i).get_attribute("href"))).resolve() for i in range(links.count())}
    assert hrefs == {p.resolve() for p in heat_pages(season_site)} or \
        hrefs == {p.parent.resolve() for p in heat_pages(season_site)}, "a heat-link per heat attempt page"
    assert "oracle" in page.locator("#champion").inner_text()  # season_finished: champion oracle
    problems.assert_none()


def test_heat_replay_plays_to_the_winner(season_site, open_page):
    """Loaded, the replay is paused at 0; 20x play reaches the last event, ``#winner`` names
    the world's winner; the service maps colour as the milestones pass: nothing healthy at 0,
    the winner's milestone nodes durable (or healthy) at the end."""
    heat = winner_heat(season_site)
    world, arena = world_of(heat), arena_of(heat)
    page, problems = open_page(heat)
    assert page.locator("#replay").count() == 1
    assert page.locator("input#scrub").get_attribute("type") == "range"
    assert scrub_value(page) == 0, "the replay starts at 0 ms"
    assert replay_state(page) != "final"
    start = page.evaluate(MAP_STATES_JS)
    nodes = milestone_nodes(arena)
    territories = sorted(world["territories"])
    assert {k.split("/")[0] for k in start} >= set(territories), f"a map per territory: {sorted(start)}"
    assert all(f"{t}/{n}" in start for t in territories for n in nodes), f"every milestone node: {sorted(start)}"
    assert set(start.values()) <= NODE_STATES, start
    assert not [k for k, s in start.items() if s in ("healthy", "durable")], f"healthy at 0 ms: {start}"

    play_to_final(page)
    assert expected_winner_text(world) in page.locator("#winner").inner_text()
    end = page.evaluate(MAP_STATES_JS)
    assert set(end.values()) <= NODE_STATES, end
    winner = world["winner"]
    for node in nodes:
        assert end[f"{winner}/{node}"] in ("durable", "healthy"), f"{winner}/{node} at the end: {end}"
    assert end != start, "the maps follow the race"
    assert scrub_value(page) > 0

    # back to 0 ms by the scrub (the events of ms 0 applied): nothing healthy again
    scrub_to(page, 0)
    clock0 = page.locator("#clock").inner_text()
    page.wait_for_function("() => document.body.dataset.replayState !== 'final'", timeout=5000)
    at0 = page.evaluate(MAP_STATES_JS)
    assert not [k for k, s in at0.items() if s in ("healthy", "durable")], f"healthy at 0 ms: {at0}"
    # step on event by event until the clock moves, then back as many steps to 0
    steps = 0
    while scrub_value(page) == 0:
        assert steps < 200, "200 steps and the replay clock is still at 0"
        page.click("#step")
        steps += 1
    moved = scrub_value(page)
    page.wait_for_function("(c) => document.querySelector('#clock').textContent !== c", arg=clock0, timeout=5000)
    for _ in range(steps):
        page.click("#step-back")
        assert scrub_value(page) <= moved
    page.wait_for_function("() => Number(document.querySelector('#scrub').value) === 0", timeout=5000)
    # and to the end by the scrub
    scrub_to_final(page)
    assert page.evaluate(MAP_STATES_JS) == end
    problems.assert_none()


def test_every_heat_replay_reaches_the_worlds_winner(season_site, open_page):
    """Each heat page driven by the scrub ends on its world's winner (or "no winner")."""
    for heat in heat_pages(season_site):
        page, problems = open_page(heat, 390)
        scrub_to_final(page)
        assert expected_winner_text(world_of(heat)) in page.locator("#winner").inner_text(), heat
        problems.assert_none(str(heat.relative_to(season_site)))
        page.context.close()


def test_leaderboard_treemap_measures(season_site, open_page):
    """The leaderboard lists every model configuration; each treemap measure redraws it."""
    page, problems = open_page(season_site / "leaderboard.html")
    board = page.locator("table#leaderboard").inner_text()
    for model in ("oracle", "scripted-memory", "scripted-volatile", "scripted-slow"):
        assert model in board
    select = page.locator("#treemap select#treemap-measure")
    if select.count() == 0:
        select = page.locator("select#treemap-measure")
    assert page.locator("#treemap").count() == 1 and select.count() == 1
    options = select.locator("option").evaluate_all("os => os.map(o => o.value)")
    assert len(options) >= 2, options
    drawings = {}
    for value in options:
        select.select_option(value)
        page.wait_for_timeout(50)
        drawings[value] = page.evaluate("""() => {
          const t = document.querySelector('#treemap');
          return [...t.querySelectorAll('*')].filter(e => !e.closest('select'))
            .map(e => { const r = e.getBoundingClientRect();
                        return [e.tagName, Math.round(r.width), Math.round(r.height), e.textContent.trim().slice(0, 80)]; });
        }""")
    assert len({json.dumps(d) for d in drawings.values()}) > 1, "changing the measure redraws the treemap"
    problems.assert_none()


# --- screenshots ------------------------------------------------------------------------------

#: per-channel difference above which a pixel counts as changed, and the share of pixels
#: allowed to change (anti-aliasing, font hinting)
PIXEL_THRESHOLD = 24
MAX_CHANGED = 0.005


def compare_snapshot(png: bytes, name: str, tmp_path: Path) -> None:
    """``png`` against ``tests/snapshots/site/NAME.png`` (``AOE_UPDATE_SITE_SNAPSHOTS=1``
    writes it); on a mismatch the actual and a diff image go to ``tmp_path``."""
    from PIL import Image, ImageChops

    stored = SNAPSHOTS / f"{name}.png"
    if UPDATE_SNAPSHOTS:
        SNAPSHOTS.mkdir(parents=True, exist_ok=True)
        Image.open(io.BytesIO(png)).save(stored, optimize=True)  # the same pixels, fewer bytes in git
        return
    actual_path = tmp_path / f"{name}.actual.png"
    if not stored.is_file():
        actual_path.write_bytes(png)
        pytest.fail(f"no snapshot {stored.relative_to(REPO)}; this run's is {actual_path}. "
                    "AOE_UPDATE_SITE_SNAPSHOTS=1 writes the snapshots (look at them before committing)")
    actual = Image.open(io.BytesIO(png)).convert("RGB")
    want = Image.open(stored).convert("RGB")
    if actual.size != want.size:
        actual_path.write_bytes(png)
        pytest.fail(f"{name}: {actual.size[0]}x{actual.size[1]} px, the snapshot {stored.relative_to(REPO)} is "
                    f"{want.size[0]}x{want.size[1]}; this run's is {actual_path} "
                    "(AOE_UPDATE_SITE_SNAPSHOTS=1 rewrites the snapshots)")
    diff = ImageChops.difference(actual, want)
    mask = diff.convert("L").point(lambda v: 255 if v > PIXEL_THRESHOLD else 0)
    changed = mask.histogram()[255]
    share = changed / (actual.size[0] * actual.size[1])
    if share > MAX_CHANGED:
        actual_path.write_bytes(png)
        diff_path = tmp_path / f"{name}.diff.png"
        red = Image.new("RGB", actual.size, (255, 0, 0))
        Image.composite(red, Image.blend(want, actual, 0.5).convert("L").convert("RGB"), mask).save(diff_path)
        pytest.fail(f"{name}: {changed} pixels ({share:.2%}) differ from {stored.relative_to(REPO)} "
                    f"(allowed {MAX_CHANGED:.1%}); actual {actual_path}, diff {diff_path} "
                    "(AOE_UPDATE_SITE_SNAPSHOTS=1 rewrites the snapshots)")


def screenshot(page) -> bytes:  # noqa: ANN001
    page.evaluate("document.fonts.ready.then(() => true)")
    return page.screenshot(full_page=True, animations="disabled", caret="hide", scale="css")


@pytest.mark.parametrize("width", WIDTHS)
def test_screenshots(season_site, open_page, tmp_path, width):
    """Home, the winner's heat page at its end, and the leaderboard, full page, against the
    stored snapshots."""
    failures = []
    for name, f in (("home", season_site / "index.html"), ("heat-final", winner_heat(season_site)),
                    ("leaderboard", season_site / "leaderboard.html")):
        page, problems = open_page(f, width)
        if name == "heat-final":
            scrub_to_final(page)
        try:
            compare_snapshot(screenshot(page), f"{name}-{width}", tmp_path)
        except pytest.fail.Exception as err:
            failures.append(str(err))
        problems.assert_none(f"{name} at {width} px")
        page.context.close()
    assert not failures, "\n".join(failures)


# --- hostile agent text -------------------------------------------------------------------------

FOREIGN_MARKUP_JS = """(root) => {
  const bad = [];
  for (const s of document.querySelectorAll('script')) {
    const own = s.src && new URL(s.src).href === new URL(root + 'assets/site.js', document.baseURI).href;
    const data = !s.src && (s.type || '').toLowerCase() === 'application/json';
    if (!own && !data) bad.push('script: ' + (s.src || s.textContent.slice(0, 80)));
  }
  for (const e of document.querySelectorAll('*')) {
    for (const a of e.attributes) if (a.name.toLowerCase().startsWith('on')) bad.push(e.tagName + ' ' + a.name);
  }
  for (const i of document.querySelectorAll('img[src="x"], iframe, object, embed')) bad.push(i.outerHTML.slice(0, 80));
  return bad;
}"""


def _site_pages(site: Path) -> list[tuple[Path, str]]:
    return [(site / "index.html", ""), (site / "leaderboard.html", ""),
            *[(p, "../../") for p in heat_pages(site)]]


def _hostile_pages(site: Path, open_page) -> dict[Path, str]:  # noqa: ANN001
    """Open every page of ``site`` (heat pages at the end of their replay, every ``<details>``
    open) and check what no page may hold; returns each page's shown text (text nodes,
    tooltips, labels)."""
    texts = {}
    for f, root in _site_pages(site):
        page, problems = open_page(f)
        if f.parent.parent.name == "heats":
            scrub_to_final(page)
        page.evaluate("() => document.querySelectorAll('details').forEach(d => { d.open = true; })")
        page.wait_for_timeout(50)
        text = visible_text(page) + "\n" + page.evaluate(ATTRIBUTE_TEXT_JS)
        texts[f] = text
        where = str(f.relative_to(site))
        assert page.evaluate(FOREIGN_MARKUP_JS, root) == [], where
        for ch in HOSTILE_CHARS + ("\u202c",):
            assert ch not in text, f"{where}: a raw {ch!r} in the shown text"
        problems.assert_none(where)
        page.context.close()
    return texts


def _assert_hostile_heat_shown(shown: str, where: str) -> None:
    """The hostile heat's page shows each hostile piece and each place's text literally."""
    for piece in HOSTILE_PIECES:
        assert visible(piece) in shown, f"{where}: {visible(piece)!r} not shown"
    missing = [f"{src} ({SOURCES[src]})" for src in ("activity", "analysis-command", "analysis-output")
               if visible(hostile_text(src)) not in shown]
    # a failure detail may be shown cut, as the one-line event summaries are (160 characters):
    # its start, with every control and bidi character and the first markup, shows literally
    start = visible(hostile_text("failure-detail")).split(HOSTILE_PIECES[4])[0]
    if start not in shown:
        missing.append(f"failure-detail ({SOURCES['failure-detail']}), not even its first {len(start)} characters")
    assert not missing, f"{where} does not show, literally: " + "; ".join(missing)
    assert visible(HOSTILE_MODEL) in shown, f"{where}: the hostile model name is not shown"


def test_hostile_agent_text_shows_literally_and_never_runs(hostile_site, open_page):
    """Every page of the hostile season: no dialog, no script but the site's own, no event
    handler attribute, no raw ESC / bidi override / line separator in the shown text (text
    nodes, tooltips, labels). The hostile heat at the end of its replay (every ``<details>``
    open) shows its activity line, failure detail (a tooltip will do), and its analysis'
    commands and outputs literally (control and bidi characters as visible escapes), and the
    hostile model name shows there and on the home page or the leaderboard."""
    season, site = hostile_site
    target = None
    for heat in heat_pages(site):
        if (heat.parent / "artifacts" / "events.jsonl").read_bytes() == (season / HOSTILE_ATTEMPT / "events.jsonl").read_bytes():
            target = heat
    assert target is not None, f"no page for {HOSTILE_ATTEMPT}"
    texts = _hostile_pages(site, open_page)
    _assert_hostile_heat_shown(texts[target], str(target.relative_to(site)))
    assert any(visible(HOSTILE_MODEL) in texts[f] for f in (site / "index.html", site / "leaderboard.html")), \
        "the hostile model name shows on the home page or the leaderboard"


def test_hostile_match_site(hostile_site, open_page):
    """``aoe site --match`` of the hostile heat attempt: the same guarantees as in a season."""
    season, site = hostile_site
    msite = build_cli(site.parent / "match-site", "--match", str(season / HOSTILE_ATTEMPT))
    [heat] = heat_pages(msite)
    texts = _hostile_pages(msite, open_page)
    _assert_hostile_heat_shown(texts[heat], f"--match {HOSTILE_ATTEMPT}: {heat.relative_to(msite)}")


def test_long_agent_lines_do_not_widen_the_page(hostile_site, open_page):
    """A 5000-character agent line (activity, failure detail, transcript) wraps or scrolls in
    its own box: the phone-width heat page does not scroll sideways."""
    season, site = hostile_site
    for heat in heat_pages(site):
        page, problems = open_page(heat, 390)
        scrub_to_final(page)
        widths = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
        assert widths[0] <= widths[1] + 1, f"{heat.relative_to(site)}: {widths[0]} px wide in a {widths[1]} px window"
        problems.assert_none(str(heat.relative_to(site)))
        page.context.close()


# --- published matches ------------------------------------------------------------------------


def test_match_site_replays_every_published_match(match_site, open_page):
    """``aoe site --match`` of every upstream match folder and ours: every heat page loads
    cleanly and its replay reaches the world's winner."""
    pages = heat_pages(match_site)
    assert len(pages) == len(MATCH_FOLDERS)
    for f in [match_site / "index.html", match_site / "leaderboard.html"]:
        page, problems = open_page(f)
        problems.assert_none(f.name)
        page.context.close()
    for heat in pages:
        page, problems = open_page(heat)
        scrub_to_final(page)  # published heats run for minutes: 20x play would take long
        assert expected_winner_text(world_of(heat)) in page.locator("#winner").inner_text(), heat.parent.name
        problems.assert_none(heat.parent.name)
        page.context.close()


# --- the session's live demo run -------------------------------------------------------------------


@pytest.mark.container
def test_live_demo_season_site(demo_local, demo_run, tmp_path, open_page):
    """The test session's real demo season (``aoe run … --site``): the site ``aoe run`` kept
    and one built now through the Python API both have every heat attempt, and a replay
    reaches its winner."""
    from aoe_tui.export.site import build_season_site

    summary = build_season_site(demo_run, tmp_path / "site")
    site = tmp_path / "site"
    heats = heat_pages(site)
    attempts = [p for p in demo_run.glob("round-*/heat-*/attempt-*") if (p / "events.jsonl").is_file()]
    assert len(heats) == len(attempts) > 0
    assert {p.resolve() for p in summary.pages} >= {(site / "index.html").resolve(), *(p.resolve() for p in heats)}
    assert summary.seconds < 10
    kept = getattr(demo_local, "site", None)
    if kept is not None:
        assert len(heat_pages(kept)) == len(attempts), f"aoe run --site {kept}: a page per heat attempt"
    heat = winner_heat(site)
    page, problems = open_page(heat)
    play_to_final(page)
    assert expected_winner_text(world_of(heat)) in page.locator("#winner").inner_text()
    problems.assert_none(str(heat.relative_to(site)))


# --- a bigger season: retries, many rounds ------------------------------------------------------


def test_big_season_with_retries(tmp_path, open_page):
    """A 30-heat season synthesized as ``benchmarks/site_build.py`` does (every tenth heat's
    first attempt spoiled by the provider and retried): a bracket link per heat attempt, the
    home page, the leaderboard and a retried attempt's page load cleanly."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("site_build_bench", REPO / "benchmarks" / "site_build.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    season = bench.synthesize(tmp_path / "season", 30)
    site = build_cli(tmp_path / "site", str(season))
    attempts = sorted(p for p in season.glob("round-*/heat-*/attempt-*"))
    assert len(heat_pages(site)) == len(attempts) == 33
    page, problems = open_page(site / "index.html", 390)
    assert page.locator("#bracket a.heat-link").count() == len(attempts)
    problems.assert_none("index.html")
    page.context.close()
    page, problems = open_page(site / "leaderboard.html", 390)
    problems.assert_none("leaderboard.html")
    page.context.close()
    retried = next(p for p in heat_pages(site) if p.parent.name.endswith("-a1") and
                   (site / "heats" / p.parent.name.replace("-a1", "-a2")).is_dir())
    page, problems = open_page(retried)
    scrub_to_final(page)
    problems.assert_none(str(retried.relative_to(site)))
