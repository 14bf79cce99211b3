"""The cup site's build (no browser; ``tests/test_site.py`` opens the pages in chromium):
the replay frames equal the one reducer's state after every event, the one-step publish
never deletes a folder that is not a site and never leaves a half-built one, bad input is
one line, and agent text cannot leave its element."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from aoe_tui.export.site import build_match_site
from aoe_tui.export.site.heat import heat_page, view_of
from aoe_tui.export.site.publish import MARKER, SiteFolderError, publish_site
from aoe_tui.export.site.render import render_page, script_json
from aoe_tui.domain.world import WorldState
from aoe_tui.replay.reducer import apply_event

REPO = Path(__file__).resolve().parent.parent
MATCHES = sorted((REPO / "tests" / "fixtures" / "upstream" / "matches").iterdir()) + [
    REPO / "tests" / "fixtures" / "ours" / "opencode-first-build",
    REPO / "tests" / "fixtures" / "seed" / "opencode-cup-2026-W37-r1-h2-a1.match.json"]  # a bundle (Appendix B)


def aoe(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "aoe_tui.cli", *args], capture_output=True, text=True, cwd=cwd)


def assert_frames_follow_the_reducer(page) -> None:  # noqa: ANN001
    """The page's script only applies frames: folding the frames of steps 0..i onto
    ``initial`` must give the view of the one reducer's world after the step's last event
    (its ``seq``), for every step (a thinned replay folds several events into one step)."""
    p = page.payload
    mids = [m["id"] for m in p["milestones"]]
    view = dict(p["initial"])
    world = WorldState()
    steps = iter(zip(p["events"], p["frames"]))
    step = next(steps, None)
    assert len(p["frames"]) == len(p["events"]) and p["match"]["log_events"] == len(page.loaded.records)
    for rec in page.loaded.records:
        apply_event(world, rec)
        if step is not None and step[0]["seq"] == rec.sequence:
            view.update(step[1])
            assert view == view_of(world, mids, p["match"]["fog"]), f"after sequence {rec.sequence}"
            step = next(steps, None)
    assert step is None, "every step is an event of the log"
    assert view["winner"] == page.loaded.world.winner == p["match"]["winner"]


@pytest.mark.parametrize("folder", MATCHES, ids=lambda p: p.name)
def test_replay_frames_are_the_reducers_state_after_every_event(folder):
    page = heat_page(folder)
    if len(page.loaded.records) < 1000:  # only a long log (first-contact: 1743 events) is thinned
        assert not page.payload["match"]["thinned"] and len(page.payload["events"]) == len(page.loaded.records)
    assert_frames_follow_the_reducer(page)


def test_a_long_log_is_thinned_to_fit_the_page_and_still_follows_the_reducer(tmp_path):
    """5000 more failed checks (a real long race fails its checks thousands of times): the
    page stays under 500 kB, the failed checks fold into steps, every milestone passing
    stays its own step, and the folded replay still shows the reducer's state."""
    from aoe_tui.domain.events import MilestoneFailed
    from aoe_tui.replay.log import dump_record, read_events

    src = REPO / "tests" / "fixtures" / "ours" / "demo-season" / "round-1" / "heat-3" / "attempt-1"
    folder = tmp_path / "long"
    shutil.copytree(src, folder)
    records = read_events(folder / "events.jsonl")
    end = next(i for i, r in enumerate(records) if r.event.kind == "match_finished")
    at = records[end].elapsed_ms
    tid = next(r.event.territory for r in records if r.event.kind == "milestone_passed")
    extra = [records[0].model_copy(update={"elapsed_ms": at, "event": MilestoneFailed(
        territory=tid, milestone="host-reboot", detail=f"GET /records/{n:06d} returned HTTP 404 (record lost) " + "x" * 60)})
        for n in range(5000)]
    out = [r.model_copy(update={"sequence": i}) for i, r in enumerate(records[:end] + extra + records[end:])]
    (folder / "events.jsonl").write_text("".join(dump_record(r) + "\n" for r in out))
    page = heat_page(folder)
    assert page.payload["match"]["thinned"] and page.payload["match"]["log_events"] == len(out)
    passed = sum(1 for r in out if r.event.kind == "milestone_passed")
    assert sum(1 for e in page.payload["events"] if e["kind"] == "milestone_passed") == passed
    assert any(e.get("folded", 0) > 1 for e in page.payload["events"])
    assert_frames_follow_the_reducer(page)
    site = build_match_site([folder], tmp_path / "site")
    for f in site.pages:
        assert f.stat().st_size <= 500_000, f"{f}: {f.stat().st_size} bytes"


def test_match_site_builds_every_published_match(tmp_path):
    out = tmp_path / "site"
    summary = build_match_site(MATCHES, out)
    heats = sorted(p.parent.name for p in summary.pages if p.parent.parent.name == "heats")
    assert len(heats) == len(MATCHES) == len(set(heats))
    for name in heats:
        page = out / "heats" / name / "index.html"
        assert page.stat().st_size <= 500_000, f"{page}: {page.stat().st_size} bytes"
        arts = {p.name for p in (out / "heats" / name / "artifacts").iterdir()}
        assert "events.jsonl" in arts or arts == {"opencode-cup-2026-W37-r1-h2-a1.match.json"}, arts
    assert (out / "index.html").is_file() and (out / "leaderboard.html").is_file()
    assert (out / "assets" / "site.js").is_file() and (out / ".nojekyll").is_file() and (out / MARKER).is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "no build folder left beside the site"


def test_publish_refuses_a_folder_that_is_not_a_site_and_replaces_its_own(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_text("keep me")
    with pytest.raises(SiteFolderError, match=r"home: a folder with other files \(no \.aoe-site\)"):
        publish_site(home, lambda d: (d / "index.html").write_text("new"))
    assert (home / "notes.txt").read_text() == "keep me" and not (home / "index.html").exists()

    site = tmp_path / "site"
    publish_site(site, lambda d: (d / "index.html").write_text("one"))
    inode = site.stat().st_ino
    publish_site(site, lambda d: (d / "index.html").write_text("two"))
    assert (site / "index.html").read_text() == "two" and (site / MARKER).read_text().splitlines()[1:] == ["index.html"]
    assert site.stat().st_ino != inode, "the new folder was swapped in, not written over the old one"

    def broken(d: Path) -> None:
        (d / "index.html").write_text("half")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        publish_site(site, broken)
    assert (site / "index.html").read_text() == "two", "a failed build leaves the old site whole"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home", "site"]


def test_a_rebuild_never_deletes_what_the_site_did_not_write(tmp_path):
    """A CNAME, a .git or a season folder put into a site folder: the next build refuses,
    naming them, and deletes nothing (GitHub Pages users keep both in the site folder)."""
    site = tmp_path / "site"
    publish_site(site, lambda d: (d / "index.html").write_text("one"))
    (site / "CNAME").write_text("cup.example.org\n")
    (site / ".git").mkdir()
    (site / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    with pytest.raises(SiteFolderError, match=r"holds files the site did not write \(\.git/HEAD, CNAME\); a rebuild "
                                              r"would delete them"):
        publish_site(site, lambda d: (d / "index.html").write_text("two"))
    assert (site / "CNAME").is_file() and (site / ".git" / "HEAD").is_file() and (site / "index.html").read_text() == "one"


def test_a_symlinked_output_folder_is_written_through_the_link(tmp_path):
    real, link = tmp_path / "real", tmp_path / "link"
    publish_site(real, lambda d: (d / "index.html").write_text("one"))
    link.symlink_to(real)
    assert publish_site(link, lambda d: (d / "index.html").write_text("two")) == real.resolve()
    assert link.is_symlink() and (link / "index.html").read_text() == "two"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "real"]


def test_cli_bad_input_is_one_line(tmp_path):
    res = aoe("site", "-o", str(tmp_path / "s"))
    assert res.returncode == 2 and "give either SEASON_DIR or --match" in res.stderr and "Traceback" not in res.stderr
    res = aoe("site", str(MATCHES[0]), "-o", str(tmp_path / "s"))
    assert res.returncode == 2 and "not a season folder (no season.jsonl); for a match folder use --match" in res.stderr
    res = aoe("site", "--match", str(tmp_path), "-o", str(tmp_path / "s"))
    assert res.returncode != 0 and "not a match folder (no events.jsonl)" in res.stderr
    assert "Traceback" not in res.stderr and not (tmp_path / "s").exists()
    torn = tmp_path / "torn"
    shutil.copytree(MATCHES[0], torn)
    with open(torn / "events.jsonl", "a") as f:
        f.write('{"schema_version":1,"sequence":99999,"elapsed_ms":0,"kind":"match_finished"}\n{"x":1}\n')
    res = aoe("site", "--match", str(torn), "-o", str(tmp_path / "s"))
    assert res.returncode != 0 and "events.jsonl" in res.stderr and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


HOSTILE = ["<script>alert(1)</script>", "<img src=x onerror=alert(1)>", "]]></script><script>alert(2)</script>",
           "\x1b[31mred\x1b[0m", "abc\u202edcba", "line\u2028sep"]


def test_agent_text_cannot_leave_its_element():
    for text in HOSTILE:
        data = str(script_json({"line": text}))
        assert "<" not in data and "\u2028" not in data and "\u202e" not in data
        assert json.loads(data)["line"] == text.replace("\x1b", "\\x1b").replace("\u202e", "\\u202e").replace(
            "\u2028", "\\u2028")
    out = render_page("base.html", root="", nav={"links": [(t, "index.html") for t in HOSTILE]}, title=HOSTILE[1])
    assert "<script>alert" not in out and "<img src=x" not in out and "\x1b" not in out and "\u202e" not in out
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in out and "\\x1b[31mred" in out and "abc\\u202edcba" in out


def test_aoe_run_checks_its_site_folder_before_the_season_starts(tmp_path):
    """``aoe run --site`` naming the season folder, or a folder with other files, is one line
    at once (exit non-zero), before a territory boots or the season folder is made."""
    season = tmp_path / "season"
    res = aoe("run", "seasons/demo.toml", "--output", str(season), "--site", str(season / "site"), "--headless")
    assert res.returncode == 2 and "must lie apart (neither inside the other)" in res.stderr, res.stderr
    other = tmp_path / "notes"
    other.mkdir()
    (other / "todo.txt").write_text("x")
    res = aoe("run", "seasons/demo.toml", "--output", str(season), "--site", str(other), "--headless")
    assert res.returncode != 0 and "a folder with other files (no .aoe-site)" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr and not season.exists()


DEMO = REPO / "tests" / "fixtures" / "ours" / "demo-season"


def test_each_territory_names_its_own_entrant_even_after_an_empty_seat(tmp_path):
    """round 2 heat 3 seats (memory, —, volatile-2): the arena.json of a heat lists only the
    seated territories, so entrants come from its agents, never from seat positions."""
    from aoe_tui.export.site.build import season_heat_pages
    from aoe_tui.replay.seasondir import load_season_dir

    skipped: list[str] = []
    pages = season_heat_pages(DEMO, load_season_dir(DEMO), skipped)
    assert not skipped and len(pages) == 6
    for page in pages:
        agents = page.loaded.arena["agents"]
        assert page.entrants == {a["territory"]: a["id"] for a in agents}, page.slug
        for t in page.payload["territories"]:
            assert t["entrant"] == page.entrants.get(t["id"])
    r2h3 = next(p for p in pages if p.slug.endswith("r2-h3-a1"))
    assert sorted(r2h3.entrants.values()) == ["memory", "volatile-2"]


def test_damaged_attempts_are_one_line_each_and_the_rest_is_built(tmp_path):
    season = tmp_path / "season"
    shutil.copytree(DEMO, season)
    (season / "round-1" / "heat-1" / "attempt-1" / "events.jsonl").unlink()
    (season / "round-1" / "heat-2" / "attempt-1" / "arena.json").write_text('{"agents": 5}')
    (season / "round-1" / "heat-3" / "attempt-1" / "events.jsonl").write_text("")
    (season / "round-2" / "heat-1" / "attempt-1" / "arena.json").unlink()  # the bundle holds the manifest
    res = aoe("site", str(season), "-o", str(tmp_path / "site"))
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    lines = res.stdout.splitlines()
    assert lines[:3] == ["no page for round-1/heat-1/attempt-1: no events.jsonl",
                         "no page for round-1/heat-2/attempt-1: cannot read its match files (TypeError: 'int' object "
                         "is not iterable)",
                         "no page for round-1/heat-3/attempt-1: events.jsonl is empty"], lines
    assert lines[3].startswith(f"site written to {tmp_path / 'site'}/index.html: 5 pages (3 heat pages)")
    page = heat_page(season / "round-2" / "heat-1" / "attempt-1")
    assert page.payload["visualization"] and sum(m["points"] for m in page.payload["milestones"]) == 100


def test_a_match_named_twice_is_listed_once(tmp_path):
    m = MATCHES[0]
    rel = m.relative_to(REPO)
    res = aoe("site", "--match", str(m), "--match", f"{rel}/", "-o", str(tmp_path / "s"))
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[0] == f"{rel}: the same match as {m} (listed once)"
    assert len(list((tmp_path / "s" / "heats").iterdir())) == 1
