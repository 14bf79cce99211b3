"""The cup site's heat attempt page (``aoe site``, issue #28): what ``heat.html`` renders
for every match fixture — the replay's controls, the service maps, the tables — its weight,
and that agent text stays inert. (The replay's behaviour in a browser is the browser
tests' business.)"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from aoe_tui.export.site.build import build_match_site
from aoe_tui.export.site.heat import heat_page
from aoe_tui.export.site.heat_context import clock, heat_context, map_geometry, node_state, usd

FIXTURES = Path(__file__).parent / "fixtures"
MATCHES = sorted(p for p in (FIXTURES / "upstream" / "matches").iterdir() if (p / "events.jsonl").is_file())
OURS = FIXTURES / "ours" / "opencode-first-build"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site") / "site"
    build_match_site([*MATCHES, OURS], out)
    return out


def _page(site: Path, name: str) -> str:
    return (site / "heats" / name / "index.html").read_text(encoding="utf-8")


def _payload(html: str) -> dict:
    m = re.search(r'<script type="application/json" id="replay-data">(.*?)</script>', html, re.S)
    assert m
    return json.loads(m.group(1))


@pytest.mark.parametrize("folder", [*MATCHES, OURS], ids=lambda p: p.name)
def test_every_page_has_the_replay_and_stays_light(site: Path, folder: Path) -> None:
    html = _page(site, folder.name)
    assert len(html.encode()) <= 500_000
    for needle in ('id="winner"', 'id="replay"', '<button type="button" id="play"', 'id="step-back"',
                   '<button type="button" id="step"', 'data-speed="1"', 'data-speed="5"',
                   'data-speed="20" aria-pressed="true"', 'id="clock"', 'href="../../index.html"'):
        assert needle in html, needle
    payload = _payload(html)
    assert f'<input type="range" id="scrub" min="0" max="{payload["match"]["final_ms"]}" step="100" value="0"' in html
    assert re.search(r"<[^>]+\sstyle=", html) is None  # the CSP forbids style attributes
    assert len(re.findall(r"<script(?![^>]*(?:application/json|src=))", html)) == 0  # no inline script
    assert len(payload["frames"]) == len(payload["events"])
    for name in ("events.jsonl", "world.json"):
        assert f'href="artifacts/{name}"' in html
        assert (site / "heats" / folder.name / "artifacts" / name).is_file()


def test_maps_have_a_node_per_visualization_node_with_its_final_state(site: Path) -> None:
    html = _page(site, "durable-job-queue-20260814-194238-round-002")
    payload = _payload(html)
    nodes = payload["visualization"]["nodes"]
    for t in payload["territories"]:
        assert f'class="map" data-territory="{t["id"]}"' in html
    winner = payload["match"]["winner"]
    svg = html.split(f'class="map" data-territory="{winner}"', 1)[1].split("</svg>", 1)[0]
    assert sorted(re.findall(r'data-node="([^"]+)"', svg)) == sorted(n["id"] for n in nodes)
    assert set(re.findall(r'data-state="([^"]+)"', svg)) == {"durable"}  # the winner is durable everywhere
    assert "How they fought" in html and "First change" in html and "Architecture seen" in html


def test_no_visualization_no_map_and_usage_na_and_no_provenance(site: Path) -> None:
    html = _page(site, "first-contact-20260813-074110")
    assert 'class="map"' not in html and "No service map" in html
    assert "provenance unavailable" in html
    assert re.search(r"<dt>Recorded cost</dt><dd>n/a</dd>", html)


def test_provenance_digests_are_prefixes_with_the_full_value_in_the_title(site: Path) -> None:
    html = _page(site, OURS.name)
    prov = json.loads((OURS / "match.json").read_text())
    key = prov["compatibility_key"]
    assert f'title="{key}">{key[:12]}</dd>' in html


def _built(tmp_path: Path, folder: Path) -> str:
    page = heat_page(folder)
    out = tmp_path / "site"
    build_match_site([folder], out)
    return (out / "heats" / page.slug / "index.html").read_text()


def _stat(html: str, n: int) -> str:
    return re.findall(r'<div class="stat[^"]*"[^>]*>.*?</div>', html, re.S)[n]


def test_a_match_still_running_is_racing_not_lost(tmp_path: Path) -> None:
    """A heat whose log stops mid-race (match_state running): the hero says it is racing and
    the clock so far, in no winner styling; the Results table counts the arena's milestones."""
    folder = tmp_path / "cut"
    shutil.copytree(OURS, folder)
    lines = (folder / "events.jsonl").read_text().splitlines()
    (folder / "events.jsonl").write_text("\n".join(lines[:30]) + "\n")
    (folder / "world.json").unlink()
    html = _built(tmp_path, folder)
    card, clock_card = _stat(html, 0), _stat(html, 1)
    assert '<span id="winner">racing</span>' in card and "no winner" not in html
    assert 'class="stat win"' not in html and "data-racing" in card and "<dt>Status</dt>" in card
    assert "<dt>Clock so far</dt>" in clock_card and "Final clock" not in html
    n_ms = len(_payload(html)["milestones"])
    cells = re.findall(r'data-label="Milestones"[^>]*>(\d+)/(\d+)</td>', html)
    assert cells and all(int(total) == n_ms and int(p) <= n_ms for p, total in cells)
    # a season attempt cut off the same way is over, not racing: no winner, final clock
    hero = heat_context(heat_page(folder, season={"round": 1, "heat": 1, "attempt": 1, "status": "interrupted"}))["hero"]
    assert (hero["winner_text"], hero["clock_label"], hero["ended"]) == ("no winner", "Final clock", True)
    hero = heat_context(heat_page(folder, season={"round": 1, "heat": 1, "attempt": 1, "status": "running"}))["hero"]
    assert (hero["winner_text"], hero["clock_label"]) == ("racing", "Clock so far")


def test_a_finished_match_without_a_winner_says_so(tmp_path: Path) -> None:
    folder = tmp_path / "nowin"
    shutil.copytree(OURS, folder)
    recs = [json.loads(line) for line in (folder / "events.jsonl").read_text().splitlines()]
    for r in recs:
        if r["kind"] == "match_finished":
            r["winner"] = None
    (folder / "events.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    (folder / "world.json").unlink()
    html = _built(tmp_path, folder)
    assert '<span id="winner">no winner</span>' in _stat(html, 0) and "data-racing" not in html
    assert "<dt>Winner</dt>" in _stat(html, 0) and "<dt>Final clock</dt>" in _stat(html, 1)
    assert 'class="stat win"' not in html and "pill win" not in html


def test_results_milestones_are_of_the_arenas_milestones(site: Path) -> None:
    """Milestones in the Results table: passed / the arena's milestone count (not / evaluated)."""
    for folder in [*MATCHES, OURS]:
        html = _page(site, folder.name)
        n_ms = len(_payload(html)["milestones"])
        cells = re.findall(r'data-label="Milestones"[^>]*>(\d+)/(\d+)</td>', html)
        assert cells and {int(t) for _, t in cells} == {n_ms}, folder.name
        if 'class="stat win"' in html:
            assert "<dt>Winner</dt>" in html and "data-racing" not in html


def test_result_tables_label_every_cell_for_phones(site: Path) -> None:
    """Below 600 px the Results, Agents and "How they fought" tables stack into a card per
    row labelled from data-label: every cell carries its column's label."""
    html = _page(site, "durable-job-queue-20260814-194238-round-002")
    for cls in ("territories stack", "agents stack"):
        table = html.split(f'<table class="{cls}">', 1)[1].split("</table>", 1)[0]
        heads = re.findall(r"<th[^>]*>([^<]+)</th>", table)
        body = table.split("<tbody>", 1)[1]
        cells = re.findall(r"<td([^>]*)>", body)
        assert cells and all("data-label=" in c for c in cells), cls
        labels = re.findall(r'<td[^>]*data-label="([^"]+)"', body)
        assert labels[: len(heads)] == heads, (cls, labels, heads)
    css = (site / "assets" / "site.css").read_text()
    assert "content: attr(data-label)" in css and "@media (max-width: 600px)" in css


def test_agent_text_is_inert(tmp_path: Path) -> None:
    folder = tmp_path / "hostile"
    shutil.copytree(OURS, folder)
    path = folder / "events.jsonl"
    evil = '</script><script>alert(1)</script><img src=x onerror=alert(2)>\u202e\x1b[31m'
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    for r in recs:
        if r["kind"] == "agent_finished":
            r["detail"] = evil
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    (folder / "world.json").unlink()
    out = tmp_path / "site"
    build_match_site([folder], out)
    html = next((out / "heats").glob("*/index.html")).read_text()
    assert "<script>alert" not in html and "<img src=x" not in html
    assert "\u202e" not in html and "\x1b" not in html
    assert "&lt;script&gt;alert(1)" in html  # shown, escaped (the agents table's outcome detail)


def test_helpers() -> None:
    assert clock(None) == "–" and clock(0) == "00:00.0" and clock(227871) == "03:47.8"
    assert usd(43800) == "$0.0438" and usd(None) == "n/a"
    view = {"m/a/x": "healthy", "m/a/y": "pending", "d/a": None, "t/a": "provisioning"}
    assert node_state(view, "a", "y", ["x", "y"]) == "pending"
    assert node_state(view, "a", None, ["x", "y"]) == "healthy"
    assert node_state({**view, "d/a": 100}, "a", None, ["x"]) == "durable"
    assert node_state({"t/a": "eliminated"}, "a", None, ["x"]) == "failed"
    assert node_state({"m/a/x": "unknown"}, "a", None, ["x"]) == "unknown"
    geo = map_geometry({"nodes": [{"id": "n", "display_name": "N", "kind": "host", "x": 0, "y": 100}], "links": []})
    assert geo and 0 <= geo["nodes"][0]["x"] and geo["nodes"][0]["y"] + geo["nh"] <= geo["h"]
    assert map_geometry(None) is None


def test_season_context_carries_the_attempt(tmp_path: Path) -> None:
    page = heat_page(OURS, season={"round": 1, "heat": 2, "attempt": 2, "status": "finished", "outcome": "retry",
                                   "counted": False, "failure_source": "provider", "detail": "rate limited"})
    ctx = heat_context(page)
    assert ctx["season"]["outcome"] == "retry"
    from aoe_tui.export.site.render import render_page
    html = render_page("heat.html", root="../../", nav={"links": []}, **ctx)
    assert "Round 1 · heat 2 · attempt 2" in html and "spoiled by <b>provider</b>: rate limited" in html
