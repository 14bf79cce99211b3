"""The cup site's home and leaderboard pages (issue #28): the pure parts — the squarified
treemap layout, the inline SVG (escaped), the leaderboard figures per model configuration
against upstream's own series summaries — and the pages built from fixture seasons and
matches (bracket links, folding standings, no inline style or script)."""

from __future__ import annotations

import json
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aoe_tui.export.site import build_match_site, build_season_site
from aoe_tui.export.site.heat import heat_page
from aoe_tui.export.site.season_context import (
    CATEGORY_FALLBACK, STANDINGS_COLUMNS, arena_category, leaderboard_rows, treemap_tiles)
from aoe_tui.export.site.svg import (COLORS, TreemapTile, bar_chart, entrant_colors, legend_html, line_chart, squarify,
                                    treemap_svg)
from tests.tui_fixtures import build_multi_arena_season_folder, build_season_folder, build_stopped_season_folder

FIXTURES = Path(__file__).parent / "fixtures" / "upstream"
MATCHES = FIXTURES / "matches"
SERIES = FIXTURES / "series"
EPS = 1e-6


# ---- squarify ---------------------------------------------------------------------------

def _check_layout(values: list[float], box: tuple[float, float, float, float]) -> None:
    x0, y0, w, h = box
    rects = squarify(values, *box)
    assert len(rects) == len(values)
    total = sum(v for v in values if v > 0)
    placed = []
    for v, r in zip(values, rects):
        if v <= 0:
            assert r is None
            continue
        assert r is not None
        x, y, rw, rh = r
        tol = EPS * max(1.0, w, h)
        # inside the box
        assert x >= x0 - tol and y >= y0 - tol and x + rw <= x0 + w + tol and y + rh <= y0 + h + tol
        assert rw >= -tol and rh >= -tol
        # area proportional to the value
        assert rw * rh == pytest.approx(v / total * w * h, rel=1e-6, abs=1e-6 * w * h)
        placed.append(r)
    # no two tiles overlap
    for i, a in enumerate(placed):
        for b in placed[i + 1:]:
            ox = min(a[0] + a[2], b[0] + b[2]) - max(a[0], b[0])
            oy = min(a[1] + a[3], b[1] + b[3]) - max(a[1], b[1])
            assert ox <= EPS * max(1.0, w) or oy <= EPS * max(1.0, h), (a, b)
    if total:  # the tiles cover the box
        assert sum(r[2] * r[3] for r in placed) == pytest.approx(w * h, rel=1e-6)


@settings(derandomize=True, max_examples=300, deadline=None)
@given(values=st.lists(st.one_of(st.just(0.0), st.floats(min_value=0.001, max_value=1e6)), min_size=0, max_size=30),
       x=st.floats(min_value=-100, max_value=100), y=st.floats(min_value=-100, max_value=100),
       w=st.floats(min_value=1, max_value=2000), h=st.floats(min_value=1, max_value=2000))
def test_squarify_tiles_are_proportional_inside_and_disjoint(values, x, y, w, h):
    _check_layout(values, (x, y, w, h))


def test_squarify_known_cases():
    """The paper's example (6, 6, 4, 3, 2, 2, 1 in 6×4) and the edges: one value fills the box,
    zeros and negatives get no tile, order of the result is the order given."""
    _check_layout([6, 6, 4, 3, 2, 2, 1], (0, 0, 6, 4))
    rects = squarify([6, 6, 4, 3, 2, 2, 1], 0, 0, 6, 4)
    assert rects[0] == pytest.approx((0, 0, 3, 2)) and rects[1] == pytest.approx((0, 2, 3, 2))
    assert squarify([5], 10, 20, 30, 40) == [(10, 20, 30, 40)]
    assert squarify([0, -1, 3], 0, 0, 10, 10) == [None, None, (0, 0, 10, 10)]
    assert squarify([], 0, 0, 10, 10) == [] and squarify([0, 0], 0, 0, 1, 1) == [None, None]
    small_first = squarify([1, 9], 0, 0, 10, 10)
    assert small_first[1][2] * small_first[1][3] == pytest.approx(90)


# ---- SVG: escaping, no style attributes ---------------------------------------------------

HOSTILE = 'ev<script>alert(1)</script>"\u202e&\x1b[31m'


def _assert_safe_svg(svg_text: str) -> None:
    assert "<script" not in svg_text and "\u202e" not in svg_text and "\x1b" not in svg_text
    assert " style=" not in svg_text and "onload" not in svg_text.lower().replace("&lt;", "")


def test_svg_text_is_visible_and_escaped():
    tiles = [TreemapTile(arena=HOSTILE, name=HOSTILE, category=HOSTILE, value=3, text="$1", fleet=[HOSTILE, "m2"]),
             TreemapTile(arena="b", name="b", category="x", value=1, text="$0.5")]
    svg = treemap_svg("t", tiles, measure=HOSTILE)
    _assert_safe_svg(svg)
    assert "&lt;script&gt;" in svg and "\\u202e" in svg and "\\x1b" in svg and 'viewBox="0 0 960 540"' in svg
    chart = line_chart("c", [HOSTILE, "b"], [(HOSTILE, [1, 2])], label=HOSTILE, y_fmt=str)
    _assert_safe_svg(chart)
    assert chart.count("&lt;script&gt;") >= 3  # axis label, legend, point title
    bars = bar_chart("b", [(HOSTILE, None, "n/a"), ("x", 5, "$5")], label=HOSTILE)
    _assert_safe_svg(bars)
    assert ">n/a</text>" in bars and bars.count("<rect") == 1


def test_chart_colours_follow_the_entrant_not_the_series_order():
    colors = entrant_colors(["a", "b", "c"])
    assert colors == {"a": 0, "b": 1, "c": 2}
    one = line_chart("c", ["x", "y"], [("c", [1, 2]), ("a", [2, 3])], label="l", y_fmt=str, colors=colors)
    two = line_chart("c", ["x", "y"], [("a", [2, 3]), ("c", [1, 2])], label="l", y_fmt=str, colors=colors)
    for chart in (one, two):
        assert f'stroke="{COLORS[2]}"' in chart and f'stroke="{COLORS[0]}"' in chart and COLORS[1] not in chart
        assert '<span class="sw c2"></span>c</li>' in chart and '<span class="sw c0"></span>a</li>' in chart
    bars = bar_chart("b", [("c", 3, "$3"), ("a", 1, "$1")], label="l", colors=colors)
    assert re.findall(r'fill="(#[0-9a-f]{6})"/>', bars) == [COLORS[2], COLORS[0]]
    assert legend_html(["b"], colors) == '<ul class="chart-legend"><li><span class="sw c1"></span>b</li></ul>'
    # without colours (aoe standings --format html): by position, as before
    assert legend_html(["z", "y"]) == ('<ul class="chart-legend"><li><span class="sw c0"></span>z</li>'
                                       '<li><span class="sw c1"></span>y</li></ul>')
    assert entrant_colors([f"e{i}" for i in range(12)])["e11"] == 11 % len(COLORS)


def test_treemap_of_nothing_says_so():
    svg = treemap_svg("t", [TreemapTile("a", "A", "c", 0, "spend n/a")], measure="spend")
    assert "no spend recorded" in svg and "tm-tile" not in svg


# ---- leaderboard figures from upstream's fixtures ----------------------------------------

def _pages(*names: str):
    return [heat_page(MATCHES / n) for n in names]


def test_leaderboard_agrees_with_upstream_series_summary():
    """The three rounds of upstream's first-build-real series: each model configuration (one
    model per agent there) has the figures upstream's own series.json gives its agent
    (appearances, wins, durable, usage, tokens, cost, cost per durable)."""
    series = json.loads((SERIES / "first-build-real-20260814-075912.json").read_text())
    rounds = [f"first-build-real-20260814-075912-round-00{i}" for i in (1, 2, 3)]
    rows = {r.model: r for r in leaderboard_rows(_pages(*rounds))}
    assert len(rows) == 3
    for s in series["standings"]:
        r = rows[s["model"]]
        assert (r.appearances, r.wins, r.durable, r.usage) == (s["appearances"], s["wins"],
                                                                s["durable_deployments"], s["usage_recorded"])
        assert r.tokens == s["input_tokens"] + s["output_tokens"] and r.cost_microusd == s["cost_microusd"]
        assert r.cost_per_durable_microusd == s["cost_per_durable_microusd"]
        assert r.available == 4 * s["appearances"] and sum(r.failures.values()) == s["appearances"]
    # failures by source: each appearance's attribution from the reduced world (§3.9)
    assert rows["deepseek/deepseek-v4-flash-0731"].failures == {"controller": 1, "arena": 2}
    assert rows["openai/gpt-5.6-luna"].failures == {"player": 1, "controller": 2}
    # our median (the mean of the two middle times), not upstream's series' upper median (§7.1)
    deepseek = rows["deepseek/deepseek-v4-flash-0731"]
    assert deepseek.durable_ms == [38695, 50234] and deepseek.median_durable_ms == 44464
    assert rows["z-ai/glm-5.2"].median_durable_ms == 50878 == series["standings"][1]["median_durable_ms"]
    # upstream's order: wins first
    assert [r.model for r in leaderboard_rows(_pages(*rounds))][0] == "deepseek/deepseek-v4-flash-0731"


def test_leaderboard_one_configuration_across_rounds_without_usage():
    """oracle-smoke-2: three oracle agents × two rounds are one configuration; no usage →
    tokens and cost unknown (never zero)."""
    series = json.loads((SERIES / "oracle-smoke-2.json").read_text())
    rows = leaderboard_rows(_pages("oracle-smoke-2-round-001", "oracle-smoke-2-round-002"))
    assert len(rows) == 1
    r = rows[0]
    assert (r.model, r.adapter, r.reasoning) == ("oracle", None, None)
    assert r.appearances == sum(s["appearances"] for s in series["standings"]) == 6
    assert r.wins == 2 and r.durable == sum(s["durable_deployments"] for s in series["standings"])
    assert r.usage == 0 and r.tokens is None and r.cost_microusd is None and r.cost_per_durable_microusd is None


def test_leaderboard_keys_on_model_harness_and_reasoning():
    """arena.json's agents name the harness (adapter) and reasoning effort: the same model
    raced through claux (arena.json) and with no arena.json are two configurations."""
    pages = _pages("durable-job-queue-20260814-194238-round-002", "first-build-real-20260814-075912-round-001",
                   "traffic-surge-oracle-smoke")
    keys = {(r.model, r.adapter, r.reasoning) for r in leaderboard_rows(pages)}
    assert ("openai/gpt-5.6-luna", "claux", "high") in keys and ("openai/gpt-5.6-luna", None, None) in keys
    assert ("oracle", "oracle-surge", "default") in keys
    surge = next(r for r in leaderboard_rows(pages) if r.adapter == "oracle-surge")
    assert surge.appearances == 3 and surge.wins == 1 and surge.arenas == ["traffic-surge"]


def test_treemap_tiles_categories_and_measures():
    pages = _pages("durable-job-queue-20260814-194238-round-002", "first-build-real-20260814-075912-round-001",
                   "traffic-surge-oracle-smoke", "first-contact-20260813-074110")
    runs = {t.arena: t for t in treemap_tiles(pages, "runs")}
    assert {a: t.category for a, t in runs.items()} == {
        "durable-job-queue": "stateful-recovery", "first-build-real": "service-delivery",
        "traffic-surge": "traffic-and-saturation", "first-contact": "adversarial-systems"}
    assert all(t.value == 1 for t in runs.values())
    assert runs["traffic-surge"].fleet == ["oracle · oracle-surge · default"]
    spend = {t.arena: t for t in treemap_tiles(pages, "spend")}
    assert spend["traffic-surge"].value == 0 and spend["traffic-surge"].text == "spend n/a"
    assert spend["durable-job-queue"].value == 117_820 or spend["durable-job-queue"].value > 0
    durable = {t.arena: t.value for t in treemap_tiles(pages, "durable")}
    assert durable["first-contact"] == 0 and durable["traffic-surge"] >= 1
    with pytest.raises(ValueError):
        treemap_tiles(pages, "nope")
    assert set(CATEGORY_FALLBACK.values()) == {"service-delivery", "stateful-recovery", "traffic-and-saturation",
                                               "adversarial-systems"}
    assert arena_category(pages[0], "durable-job-queue") == "stateful-recovery"
    pages[0].loaded.arena = {**pages[0].loaded.arena, "arena": {"id": "x", "category": "adversarial-systems"}}
    assert arena_category(pages[0], "durable-job-queue") == "adversarial-systems"  # arena.json's own wins
    assert arena_category(pages[1], "zero-downtime-rollout") == "service-delivery"
    assert arena_category(pages[1], "mystery") == "uncategorized"


# ---- built pages --------------------------------------------------------------------------

class _Tables(HTMLParser):
    """Rows of text cells per table id (main rows only; the folded "more" rows skipped)."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self._id: list[str | None] = []
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self._skip = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table":
            self._id.append(a.get("id"))
            self.tables.setdefault(a.get("id") or "", [])
        elif tag == "tr":
            self._row = None if "more-row" in (a.get("class") or "") else []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = [] if "more-col" not in (a.get("class") or "") else None
        elif tag == "abbr":
            self._skip += 1

    def handle_endtag(self, tag):
        if tag == "table":
            self._id.pop()
        elif tag in ("td", "th") and self._row is not None and self._cell is not None:
            self._row.append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self.tables[self._id[-1] or ""].append(self._row)
            self._row = None
        elif tag == "abbr":
            self._skip -= 1

    def handle_data(self, data):
        if self._cell is not None and not self._skip:
            self._cell.append(data)


def _tables(text: str) -> dict[str, list[list[str]]]:
    p = _Tables()
    p.feed(text)
    return p.tables


def _assert_csp_clean(text: str) -> None:
    assert not re.search(r"\sstyle=", text), "style attributes are refused by the CSP"
    for m in re.finditer(r"<script([^>]*)>", text):
        assert 'src="' in m.group(1) or 'type="application/json"' in m.group(1), m.group(0)
    assert "http://" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "") and "https://" not in text


@pytest.fixture(scope="module")
def multi_site(tmp_path_factory):
    root = tmp_path_factory.mktemp("multi")
    season = build_multi_arena_season_folder(root)
    build_season_site(season, root / "site")
    return root / "site"


def test_season_home_bracket_standings_and_charts(multi_site):
    text = (multi_site / "index.html").read_text()
    _assert_csp_clean(text)
    assert '<body data-page="home">' in text
    tables = _tables(text)
    head = tables["standings"][0]
    assert head[:3] == ["#", "entrant", "model"] and len(head) == len(STANDINGS_COLUMNS) == 20
    assert [r[1] for r in tables["standings"][1:]] == ["oracle", "deepseek", "kimi", "glm"]
    assert {"arenas", "arena-breakdown", "standings"} <= set(tables)
    assert len(tables["arena-breakdown"]) == 1 + 4 * 3
    # every heat attempt page is linked from the bracket, and every link resolves
    links = re.findall(r'<a class="heat-link" href="([^"]+)"', text)
    pages = sorted(p.relative_to(multi_site).as_posix() for p in multi_site.glob("heats/*/index.html"))
    assert sorted(links) == pages and len(pages) == 4
    assert 'id="champion"' in text and "none yet" in text  # a running season has no champion
    assert ">running</span>" in text
    assert "byes:" in text and "retry" in text  # round 2's spoiled attempt is listed
    for arena in ("first-build", "durable-job-queue", "traffic-surge"):
        assert f'id="milestone-chart-{arena}"' in text
    assert 'id="points-chart"' in text and 'id="spend-chart"' in text


def test_each_entrant_has_one_colour_in_every_chart(multi_site):
    """The home page's charts colour an entrant by its place in the season's entrant list:
    the same swatch in every legend and the same bar colour, whatever the standings order."""
    text = (multi_site / "index.html").read_text()
    entrants = json.loads(next(line for line in (multi_site.parent / "season" / "season.jsonl").read_text()
                                .splitlines() if '"season_started"' in line))["entrants"]
    standings = [r[1] for r in _tables(text)["standings"][1:]]
    assert standings != list(entrants)  # the standings order is not the season order here
    want = {e: i % len(COLORS) for i, e in enumerate(entrants)}
    legends = re.findall(r'<ul class="chart-legend">(.*?)</ul>', text)
    assert len(legends) >= 3
    seen = 0
    for legend in legends:
        for k, name in re.findall(r'<li><span class="sw c(\d+)"></span>([^<]+)</li>', legend):
            assert int(k) == want[name], (name, k, legend)
            seen += 1
    assert seen >= len(entrants)
    spend = text.split('id="spend-chart"', 1)[1].split("</svg>", 1)[0]
    bars = re.findall(r"<title>([^<]+)</title></text><rect [^>]*fill=\"(#[0-9a-f]{6})\"", spend)
    assert bars
    for name, fill in bars:
        assert fill == COLORS[want[name]], name


def test_every_page_names_no_favicon_to_fetch(multi_site):
    for page in [multi_site / "index.html", multi_site / "leaderboard.html", *multi_site.glob("heats/*/index.html")]:
        assert '<link rel="icon" href="data:,">' in page.read_text(), page


def test_finished_and_stopped_seasons(tmp_path):
    """A finished league (test_season_pure's cup across arenas: champion bravo, a void heat
    with its retried and void attempts, which have no event log and so no page), a season a
    SIGINT stopped, and one with byes."""
    from tests.test_season_pure import _multi_season_log

    (tmp_path / "done").mkdir()
    _multi_season_log(tmp_path / "done" / "season.jsonl")
    build_season_site(tmp_path / "done", tmp_path / "done-site")
    text = (tmp_path / "done-site" / "index.html").read_text()
    _assert_csp_clean(text)
    champ = re.search(r'<div class="sum-stat" id="champion">(.*?)</div>', text, re.S).group(1)
    assert '<b class="entrant">bravo</b>' in champ and "none yet" not in champ and ">finished</span>" in text
    assert 'class="heat state-void' in text and "void" in text and 'class="heat-link"' not in text
    assert [r[1] for r in _tables(text)["standings"][1:]] == ["bravo ★", "alpha", "charlie", "delta"]
    season = build_stopped_season_folder(tmp_path / "s")
    build_season_site(season, tmp_path / "stopped")
    text = (tmp_path / "stopped" / "index.html").read_text()
    _assert_csp_clean(text)
    assert ">stopped</span>" in text and "stopped (SIGINT)" in text
    # the interrupted attempt 1 of r2h1 (folder renamed) and its re-run share the number: one link
    links = re.findall(r'<a class="heat-link" href="([^"]+)"', text)
    pages = sorted(p.relative_to(tmp_path / "stopped").as_posix()
                   for p in (tmp_path / "stopped").glob("heats/*/index.html"))
    assert sorted(links) == pages and len(set(links)) == len(links)
    fixture = build_season_folder(tmp_path / "f")
    build_season_site(fixture, tmp_path / "fixture")
    text = (tmp_path / "fixture" / "index.html").read_text()
    assert "byes:" in text and '<span class="entrant">oracle</span>' in text
    assert "(interrupted: round-2/heat-1/attempt-1.interrupted-1)" in text


def test_leaderboard_page_and_treemap_panels(multi_site):
    text = (multi_site / "leaderboard.html").read_text()
    _assert_csp_clean(text)
    assert '<body data-page="leaderboard">' in text
    board = _tables(text)["leaderboard"]
    assert board[0][:2] == ["#", "model"] and "failures by source" in board[0]
    assert '<select id="treemap-measure">' in text
    panels = re.findall(r'<figure class="treemap-panel" data-measure="([a-z]+)"( hidden)?>', text)
    assert [p[0] for p in panels] == ["spend", "tokens", "runs", "durable"]
    assert [bool(p[1]) for p in panels] == [False, True, True, True]  # only the first shows without script
    assert text.count('class="treemap wide"') == 4 and text.count('class="treemap tall"') == 4


def test_match_site_home_and_hostile_text(tmp_path):
    """``aoe site --match``: a card per match, the territories' standings; a model name an
    agent chose with markup, bidi and escape characters shows literally everywhere."""
    src = tmp_path / "m"
    shutil.copytree(MATCHES / "traffic-surge-oracle-smoke", src)
    arena = json.loads((src / "arena.json").read_text())
    for a in arena["agents"]:
        a["adapter"] = HOSTILE
    (src / "arena.json").write_text(json.dumps(arena))
    build_match_site([src, MATCHES / "oracle-smoke-2-round-001"], tmp_path / "site")
    home = (tmp_path / "site" / "index.html").read_text()
    board = (tmp_path / "site" / "leaderboard.html").read_text()
    for text in (home, board):
        _assert_csp_clean(text)
        assert "<script>alert" not in text and "\u202e" not in text and "\x1b" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in board and "\\u202e" in board
    assert home.count('class="mcard match-card"') == 2
    assert [r[1] for r in _tables(home)["standings"][1:]][:1] == ["surge-one"] or "builder-one" in home
    assert len(re.findall(r'<a class="heat-link" href="heats/[^"]+/index.html"', home)) == 2


def test_a_knockout_waiting_on_a_void_heat(tmp_path):
    """The home page of a knockout whose round 1 heat went void says it waits on it (status,
    the heat, its entrants' standings rows) and the void attempt is in the bracket."""
    from aoe_tui.domain import season_events as se
    from aoe_tui.replay.season_log import SeasonLogWriter
    from tests.test_season_pure import _started

    season = tmp_path / "season"
    season.mkdir()
    started = _started(("a", "b", "c", "d", "e", "f")).model_copy(update={"format": {"kind": "knockout", "advance": 1}})
    with SeasonLogWriter(season / "season.jsonl", clock=lambda: 1000) as w:
        w.append(started)
        w.append(se.RoundScheduled(round=1, heats=[se.HeatSeats(heat=1, seats=["a", "b", "d"]),
                                                    se.HeatSeats(heat=2, seats=["c", "e", "f"])]))
        w.append(se.AttemptStarted(round=1, heat=1, attempt=1, folder="round-1/heat-1/attempt-1"))
        w.append(se.AttemptFinished(round=1, heat=1, attempt=1, outcome="counted", winner="b",
                                    ranks={"b": 1, "a": 2, "d": 3}))
        w.append(se.HeatFinished(round=1, heat=1, attempt=1, ranks={"b": 1, "a": 2, "d": 3}, winner="b"))
        w.append(se.AttemptStarted(round=1, heat=2, attempt=1, folder="round-1/heat-2/attempt-1"))
        w.append(se.AttemptFinished(round=1, heat=2, attempt=1, outcome="void", failure_source="provider",
                                    detail="injected"))
        w.append(se.HeatFinished(round=1, heat=2, attempt=None, void=True, ranks={"c": 1, "e": 1, "f": 1}))
        w.append(se.SeasonStopped(reason="void_heat", detail="waiting on heat r1h2 (void): c, e, f", round=1, heat=2))
    build_season_site(season, tmp_path / "site")
    text = (tmp_path / "site" / "index.html").read_text()
    _assert_csp_clean(text)
    assert ">waiting</span>" in text and "waiting on heat r1h2 (void): c, e, f neither advanced" in text
    assert 'class="heat state-void waiting"' in text and "void · provider" in text
    entrants = {r[1] for r in _tables(text)["standings"][1:]}
    assert {"c (waiting on heat r1h2 (void))", "e (waiting on heat r1h2 (void))", "a", "b"} <= entrants
    assert 'id="champion"' in text and "none yet" in text
