"""A real ``aoe watch`` on a real PTY (read with ``pyte``) on a heat in progress (issue 16
item 3): it shows an agent's activity line before the heat ends, and a watch that joins
mid-heat shows the referee's clock at once, not the last event's.

The live heat is :class:`~aoe_tui.testing.feeder.SeasonFeeder` writing a recorded heat
(and its activity lines, through the referee's own
:class:`~aoe_tui.replay.activity.ActivityWriter`) into a season folder in real time.
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

from input_fuzz import PtyView
from tui_fixtures import build_season_folder

from aoe_tui.domain.display import fmt_clock
from aoe_tui.replay.matchdir import load_match
from aoe_tui.testing.feeder import SeasonFeeder

REPO = Path(__file__).resolve().parent.parent
SEED = REPO / "tests" / "fixtures" / "seed" / "opencode-cup-2026-W37-r1-h2-a1.match.json"
AOE = [sys.executable, "-m", "aoe_tui.cli"]
ENV = {"PYTHONPATH": str(REPO)}
#: what the seed heat's first agent (kimi) does at 1.5 s, in the feeder's activity
LINE = "$ systemctl start kv-live"


def test_watch_shows_an_agents_activity_line_before_the_heat_ends(tmp_path, record_property):
    feeder = SeasonFeeder(SEED, tmp_path / "season", speed=1.0, max_gap_s=1.0,
                          activity=[(500, "kimi", "thinking about the task"), (1500, "kimi", LINE)])
    feeder.prepare()
    view = PtyView(AOE + ["watch", str(feeder.out)], cols=120, rows=50, env=ENV)
    try:
        view.wait_for(lambda s: "attempt 1" in s, 60, "the season screen")
        view.write(b"\r")  # the cursor starts on the running heat: its live heat screen
        view.wait_for(lambda s: "/15:00" in s, 30, "the heat screen")
        feeder.start()
        view.wait_for(lambda s: LINE in s, 30, "kimi's activity line")
        shown = time.monotonic()
        last = feeder.loaded.records[-1].sequence
        assert not feeder.done.is_set() and last not in feeder.written, "the heat had ended"
        assert "WINNER" not in view.text()
        seq = max(feeder.activity_written)
        took = shown - feeder.activity_written[seq]
        record_property("activity_line_to_screen_s", round(took, 3))
        assert took < 5, f"the line took {took:.1f} s to reach the screen"
    finally:
        feeder.stop()
        view.stop()


def test_a_watch_joining_mid_heat_shows_the_right_clock_at_once(tmp_path, record_property):
    """The racing heat's last event (``elapsed_ms`` 28.5 s) was written 100 s ago: the
    referee's clock is at 2:08 now, and the view shows that as it opens, not 0:28."""
    season = build_season_folder(tmp_path)
    folder = season / "round-2" / "heat-1" / "attempt-1"
    last_ms = load_match(folder).records[-1].elapsed_ms
    written = time.time() - 100
    os.utime(folder / "events.jsonl", (written, written))
    view = PtyView(AOE + ["watch", str(season)], cols=120, rows=40, env=ENV)
    try:
        view.wait_for(lambda s: "attempt 1" in s, 60, "the season screen")
        view.write(b"\r")
        view.wait_for(lambda s: "/15:00" in s, 30, "the heat screen's clock")
        opened = time.time()
        m = re.search(r"(\d\d):(\d\d)/15:00", view.text())
        assert m is not None, view.text()
        shown_ms = (int(m[1]) * 60 + int(m[2])) * 1000
        expected_ms = last_ms + (opened - written) * 1000
        record_property("clock_shown", fmt_clock(shown_ms))
        record_property("clock_expected", fmt_clock(int(expected_ms)))
        assert expected_ms - 3000 <= shown_ms <= expected_ms + 1000, (fmt_clock(shown_ms), fmt_clock(int(expected_ms)))
    finally:
        view.stop()
