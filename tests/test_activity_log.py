"""``activity.jsonl`` (issue 16 item 3): the writer's bounds, the adapter hook, and the
views that read it by its ``ms`` (replay) or as it grows (``aoe watch``'s tailer).

The end-to-end checks are elsewhere: a real ``aoe watch`` under a PTY on a heat in
progress (``tests/test_tui_watch_activity.py``) and a real container heat writing the
file as it runs (``tests/test_arena_first_build.py::test_heat_oracle_hasty_memory``).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from aoe_tui.agents.base import ActivityLines
from aoe_tui.replay.activity import (ACTIVITY_FILE, MAX_LINE_CHARS, ActivityError, ActivityRecord,
                                     ActivityWriter, read_activity, tail_activity)
from aoe_tui.replay.matchdir import load_match
from aoe_tui.testing.feeder import FOLDER, SeasonFeeder
from aoe_tui.tui.live import LiveFeed
from aoe_tui.tui.viewmodel import ArenaView, HeatModel, ReplayCursor, panel_view
from aoe_tui.tui.watch import SeasonTailer

REPO = Path(__file__).resolve().parent.parent
SEED = REPO / "tests" / "fixtures" / "seed" / "opencode-cup-2026-W37-r1-h2-a1.match.json"


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]


def test_writer_bounds_each_agent_and_each_line(tmp_path):
    """A line longer than MAX_LINE_CHARS is cut (``…``); an agent past its cap gets one
    cap line and nothing more (counted in ``dropped``) while the other agent goes on; a
    flush is one append of everything buffered; the file reads back in sequence."""
    path = tmp_path / ACTIVITY_FILE
    w = ActivityWriter(path, max_lines=100, max_bytes=1 << 20)
    w.add(5, "loud", "x" * 10_000)
    w.add(6, "loud", "bad \udcff surrogate")  # not UTF-8 encodable: replaced, not a crash
    for i in range(5000):  # a burst: buffered, written once
        w.add(10 + i, "loud", f"line {i}")
        if i % 100 == 0:
            w.add(10 + i, "quiet", f"quiet {i}")
    assert path.stat().st_size == 0  # nothing written before the flush
    assert w.flush() == 100 + 1 + 50
    w.close()
    rows = _lines(path)
    assert [r["sequence"] for r in rows] == list(range(len(rows)))
    loud = [r for r in rows if r["agent"] == "loud"]
    assert len(loud[0]["line"]) == MAX_LINE_CHARS and loud[0]["line"].endswith("…")
    assert loud[1]["line"] == "bad ? surrogate"
    assert len(loud) == 101 and "activity cap reached" in loud[-1]["line"]
    assert w.dropped == 5000 + 2 - 100
    assert [r["line"] for r in rows if r["agent"] == "quiet"] == [f"quiet {i}" for i in range(0, 5000, 100)]
    assert path.stat().st_size < 100 * 1024  # bounded: 5,000 lines and a 10 kB one did not land

    # by bytes too: 1 KiB per agent holds a handful of lines
    small = ActivityWriter(tmp_path / "small.jsonl", max_lines=10_000, max_bytes=1024)
    for i in range(1000):
        small.add(i, "a", "y" * 100)
    small.close()
    kept = _lines(tmp_path / "small.jsonl")
    assert 5 <= len(kept) <= 10 and "cap reached" in kept[-1]["line"]
    assert (tmp_path / "small.jsonl").stat().st_size < 2048


def test_a_torn_or_damaged_file_replays_up_to_the_damage(tmp_path):
    path = tmp_path / ACTIVITY_FILE
    w = ActivityWriter(path)
    for i in range(3):
        w.add(i * 1000, "a", f"step {i}")
    w.close()
    with open(path, "ab") as fh:
        fh.write(b'{"sequence":3,"ms":')  # killed mid-append: ignored
    records, problem = read_activity(path)
    assert [r.line for r in records] == ["step 0", "step 1", "step 2"] and problem is None
    with open(path, "ab") as fh:
        fh.write(b'nonsense\n{"sequence":4,"ms":1,"agent":"a","line":"x"}\n')
    records, problem = read_activity(path)
    assert len(records) == 3 and problem is not None and f"{path}:4: invalid activity line" in problem
    assert read_activity(tmp_path / "missing.jsonl") == ([], None)


def test_activity_lines_tell_the_listener_what_was_and_what_comes():
    lines = ActivityLines(3)
    lines.append("before start")
    heard: list[str] = []
    lines.listen(heard.append)
    lines.append("one")
    lines.listen(lambda line: 1 / 0)  # a broken listener does not break the adapter
    lines.append("two")
    lines.listen(None)
    lines.append("three")
    assert heard == ["before start", "one"]
    assert list(lines) == ["one", "two", "three"]  # still the bounded deque the live TUI reads


def test_replay_shows_each_activity_line_at_its_moment():
    loaded = load_match(SEED)
    model = HeatModel(ArenaView.from_arena(loaded.arena))
    acts = [ActivityRecord(0, 1000, "kimi", "$ early"), ActivityRecord(1, 20_000, "kimi", "$ later"),
            ActivityRecord(2, loaded.records[-1].elapsed_ms + 500, "kimi", "drain line")]
    cursor = ReplayCursor(loaded.records, model, acts)
    tid = "builder-one"  # kimi's territory
    assert panel_view(model, tid).activity == ()
    cursor.seek_sequence(next(r.sequence for r in loaded.records if r.elapsed_ms >= 2000))
    assert panel_view(model, tid).activity == ("$ early",)
    cursor.advance_time(0)
    while not cursor.at_end and cursor.playhead_ms < 20_000:
        cursor.advance_time(250)
    assert panel_view(model, tid).activity == ("$ early", "$ later")
    cursor.seek_position(cursor.total)  # the end shows everything, the drain too
    assert panel_view(model, tid).activity == ("$ early", "$ later", "drain line")
    cursor.seek_position(1)  # scrubbing back takes lines back
    assert panel_view(model, tid).activity == ()


def test_tailer_posts_activity_and_when_the_last_event_was_written(tmp_path):
    """The ``aoe watch`` tailer reads ``activity.jsonl`` as it grows (shape of what it
    posts: the ActivityRecord) and posts the event log's mtime once it read to the end."""
    feeder = SeasonFeeder(SEED, tmp_path / "season", speed=1000.0, max_gap_s=0.0, finish=False,
                          activity=[(0, "kimi", "$ first"), (5000, "glm", "  output")])
    feeder.prepare()
    feed = LiveFeed()
    tailer = SeasonTailer(feeder.out, feed)
    tailer.poll()
    feeder.run()
    events = feeder.out / FOLDER / "events.jsonl"
    then = time.time() - 90
    os.utime(events, (then, then))
    tailer.poll()
    acts = feed.drain_activity()
    assert [(h, r.ms, r.agent, r.line) for h, r in acts] == [
        (FOLDER, 0, "kimi", "$ first"), (FOLDER, 5000, "glm", "  output")]
    assert feed.drain_written() == {FOLDER: then}
    _, pending = feed.drain()
    assert len(pending) == len(feeder.loaded.records)
    # the app side: the ticking clock counts from the write, not from the read
    model = HeatModel(ArenaView.from_arena(feeder.loaded.arena))
    model.live = True
    for _, rec in pending[:105]:
        model.apply(rec)
    model.received_at = 500.0
    model.set_written_age(90.0, 500.0)
    assert model.clock_ms(500.0) == pending[104][1].elapsed_ms + 90_000


def test_a_view_joining_a_long_heat_reads_only_the_latest_activity(tmp_path):
    path = tmp_path / ACTIVITY_FILE
    w = ActivityWriter(path)
    for i in range(20_000):
        w.add(i, f"agent-{i % 3}", f"output line {i}")
    w.close()
    tail = tail_activity(path, last_bytes=64 * 1024)
    records = tail.read()
    assert 500 < len(records) < 1500 and records[-1].line == "output line 19999"
    assert [r.sequence for r in records] == list(range(records[0].sequence, 20_000))
    assert tail.line == 20_000  # line numbers stay those of the file (for error messages)
    with open(path, "ab") as fh:
        fh.write(b"nonsense\n")
    with pytest.raises(ActivityError, match=f"{path}:20001: invalid activity line"):
        tail.read()
    assert 0 < tail_activity(path).offset < path.stat().st_size - 200_000  # the default: the last 256 KiB
    assert tail_activity(tmp_path / "none.jsonl").offset == 0


async def test_aoe_replay_of_a_folder_plays_its_activity_lines_at_their_moments(tmp_path):
    """``aoe replay FOLDER``'s app: the heat screen's panel shows a line of
    ``activity.jsonl`` once the replay passes its ``ms`` (a damaged tail is said once)."""
    from tui_fixtures import _write_match_folder

    from aoe_tui.tui.app import AoeApp
    from aoe_tui.tui.widgets import TerritoryPanel

    folder = tmp_path / "heat"
    _write_match_folder(folder, load_match(SEED))
    w = ActivityWriter(folder / ACTIVITY_FILE)
    w.add(1000, "kimi", "$ early step")
    w.add(30_000, "kimi", "$ late step")
    w.close()
    with open(folder / ACTIVITY_FILE, "ab") as fh:
        fh.write(b"not json\n")
    at = next(r.sequence for r in load_match(folder).records if r.elapsed_ms >= 2000)
    app = AoeApp.replay(load_match(folder), at_sequence=at)
    async with app.run_test(size=(140, 50)) as pilot:
        await pilot.pause()
        panel = app.screen.query_one("#panel-builder-one", TerritoryPanel)
        shown = panel._shown
        assert shown is not None and shown.activity == ("$ early step",)
        await pilot.press("end")
        await pilot.pause()
        assert panel._shown.activity == ("$ early step", "$ late step")
        notes = [n.message for n in app._notifications]
        assert any(f"{folder / ACTIVITY_FILE}:3: invalid activity line" in n for n in notes), notes
