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


@pytest.mark.parametrize("folder", MATCHES, ids=lambda p: p.name)
def test_replay_frames_are_the_reducers_state_after_every_event(folder):
    """The page's script only applies frames: folding frames 0..i onto ``initial`` must give
    the view of the one reducer's world after event i, for every i (and the last one the
    final world's winner)."""
    page = heat_page(folder)
    p = page.payload
    mids = [m["id"] for m in p["milestones"]]
    view = dict(p["initial"])
    world = WorldState()
    assert len(p["frames"]) == len(p["events"]) == len(page.loaded.records)
    for rec, frame in zip(page.loaded.records, p["frames"]):
        apply_event(world, rec)
        view.update(frame)
        assert view == view_of(world, mids, p["match"]["fog"]), f"after sequence {rec.sequence}"
    assert view["winner"] == page.loaded.world.winner == p["match"]["winner"]


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
    assert (site / "index.html").read_text() == "two" and (site / MARKER).is_file()
    assert site.stat().st_ino != inode, "the new folder was swapped in, not written over the old one"

    def broken(d: Path) -> None:
        (d / "index.html").write_text("half")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        publish_site(site, broken)
    assert (site / "index.html").read_text() == "two", "a failed build leaves the old site whole"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home", "site"]


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
