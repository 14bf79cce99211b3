"""Issue 30 item 6: a wall-clock step neither freezes nor jumps the season clock.

The runner's :class:`SeasonLogWriter` and the TUI (``aoe watch``: a real
:class:`SeasonTailer` reading the real ``season.jsonl``) are given a wall clock the test
steps by an hour, back or forward, while their monotonic clock runs on steadily: records
keep the stepped wall time for people, the season clock (in the log and on the status
line) is the running time, never 0, never an hour off, never back."""

from __future__ import annotations

import json

import pytest

from aoe_tui.domain import season_events as se
from aoe_tui.replay.season_log import SeasonLogWriter, read_season_log
from aoe_tui.tui.app import AoeApp
from aoe_tui.tui.live import LiveFeed
from aoe_tui.tui.seasonmodel import SeasonModel
from aoe_tui.tui.watch import SeasonTailer

WALL0 = 1_757_728_758_000
HOUR_MS = 3_600_000


class Clocks:
    """A wall clock (Unix ms) and a monotonic clock (s) that advance together until the
    wall clock is stepped."""

    def __init__(self) -> None:
        self.wall_ms = WALL0
        self.mono_s = 5_000.0

    def advance(self, seconds: float) -> None:
        self.wall_ms += int(seconds * 1000)
        self.mono_s += seconds

    def step_wall(self, ms: int) -> None:
        self.wall_ms += ms


def _started() -> se.SeasonStarted:
    return se.SeasonStarted(season="s", label="L", arena_id="first-build", format={"kind": "league"},
                            entrants=["a", "b", "c"], seed=1, heat_size=3, min_heat_size=2, max_attempts=2,
                            season_sha256="0" * 64, milestones=["service-up", "write-read"])


def _write(path, clocks: Clocks, step_ms: int, stop: bool = False) -> list[se.SeasonRecord]:
    """season_started at 0 s, round_scheduled at 5 s, the wall stepped by ``step_ms`` at
    8 s, attempt_started at 20 s (monotonic); ``stop``: season_stopped at 21 s."""
    w = SeasonLogWriter(path, clock=lambda: clocks.wall_ms, monotonic=lambda: clocks.mono_s)
    w.append(_started())
    clocks.advance(5)
    w.append(se.RoundScheduled(round=1, heats=[se.HeatSeats(heat=1, seats=["a", "b", "c"])]))
    clocks.advance(3)
    clocks.step_wall(step_ms)
    clocks.advance(12)
    w.append(se.AttemptStarted(round=1, heat=1, attempt=1, folder="round-1/heat-1/attempt-1"))
    if stop:
        clocks.advance(1)
        w.append(se.SeasonStopped(reason="SIGINT", pid=1, open_attempts=["r1h1a1"]))
    w.close()
    return read_season_log(path)


@pytest.mark.parametrize("step_ms", [-HOUR_MS, HOUR_MS], ids=["back-1h", "forward-1h"])
def test_the_season_log_counts_running_time_across_a_wall_step(tmp_path, step_ms):
    clocks = Clocks()
    recs = _write(tmp_path / "season.jsonl", clocks, step_ms)
    # the wall stamps are what the wall clock said (for people) ...
    assert [r.time_unix_ms for r in recs] == [WALL0, WALL0 + 5_000, WALL0 + 20_000 + step_ms]
    # ... the season clock is the running time (the arithmetic)
    assert [r.season_clock_ms for r in recs] == [0, 5_000, 20_000]
    line = json.loads((tmp_path / "season.jsonl").read_bytes().decode("utf-8").splitlines()[2])
    assert line["season_clock_ms"] == 20_000 and line["time_unix_ms"] == WALL0 + 20_000 + step_ms
    model = SeasonModel()
    for rec in recs:
        model.apply(rec)
    assert model.clock_ms(clocks.wall_ms) == 20_000
    assert model.log[-1].startswith("00:20  ")


def test_a_resume_written_after_a_wall_step_goes_on_from_the_stop(tmp_path):
    """A new runner (a new writer) resumes after the wall clock went back a day: the clock
    goes on from the stop's record, not from 0 and not a day back."""
    clocks = Clocks()
    path = tmp_path / "season.jsonl"
    _write(path, clocks, 0, stop=True)
    clocks.step_wall(-24 * HOUR_MS)
    clocks.advance(600)  # the stopped gap is not counted
    w = SeasonLogWriter(path, clock=lambda: clocks.wall_ms, monotonic=lambda: clocks.mono_s)
    w.append(se.SeasonResumed(pid=2))
    clocks.advance(4)
    w.append(se.AttemptInterrupted(round=1, heat=1, attempt=1, renamed_to=None))
    w.close()
    assert [r.season_clock_ms for r in read_season_log(path)][-3:] == [21_000, 21_000, 25_000]


@pytest.mark.parametrize("step_ms", [-HOUR_MS, HOUR_MS], ids=["back-1h", "forward-1h"])
async def test_the_watched_season_clock_runs_on_through_a_wall_step(tmp_path, step_ms):
    """``aoe watch`` of a running season: the status line's clock moves with the monotonic
    clock through the wall step (before the fix: after −1 h it stood at the last record's
    time, then fell back to 00:00; after +1 h it jumped by 3600 s)."""
    clocks = Clocks()
    path = tmp_path / "season.jsonl"
    w = SeasonLogWriter(path, clock=lambda: clocks.wall_ms, monotonic=lambda: clocks.mono_s)
    feed = LiveFeed()
    tailer = SeasonTailer(tmp_path, feed)
    app = AoeApp.season_view(feed, tmp_path)
    app.now_ms = lambda: clocks.wall_ms
    app.monotonic = lambda: clocks.mono_s
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen

        def shown() -> str:
            screen.refresh_view()
            return str(screen.query_one("#season-status").text).split(" · ")[0]

        w.append(_started())
        clocks.advance(5)
        w.append(se.RoundScheduled(round=1, heats=[se.HeatSeats(heat=1, seats=["a", "b", "c"])]))
        tailer.poll()
        await pilot.pause(0.1)
        assert shown() == "clock 00:05"
        clocks.advance(3)
        clocks.step_wall(step_ms)
        clocks.advance(2)
        assert shown() == "clock 00:10"
        clocks.advance(10)
        w.append(se.AttemptStarted(round=1, heat=1, attempt=1, folder="round-1/heat-1/attempt-1"))
        tailer.poll()
        await pilot.pause(0.1)
        assert app.season.at_ms == 20_000
        assert shown() == "clock 00:20"
        clocks.advance(40)
        assert shown() == "clock 01:00"
    w.close()


async def test_a_forward_step_between_a_write_and_the_poll_does_not_jump_the_season_clock(tmp_path):
    """The wall clock is stepped +1 h after the runner wrote a record and before ``aoe
    watch`` read it: the record's wall age is read only when the view joins, later records
    count from their arrival (before the fix the status line jumped by 3600 s)."""
    clocks = Clocks()
    path = tmp_path / "season.jsonl"
    w = SeasonLogWriter(path, clock=lambda: clocks.wall_ms, monotonic=lambda: clocks.mono_s)
    feed = LiveFeed()
    tailer = SeasonTailer(tmp_path, feed)
    app = AoeApp.season_view(feed, tmp_path)
    app.now_ms = lambda: clocks.wall_ms
    app.monotonic = lambda: clocks.mono_s
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen

        def shown() -> str:
            screen.refresh_view()
            return str(screen.query_one("#season-status").text).split(" · ")[0]

        w.append(_started())
        clocks.advance(5)
        w.append(se.RoundScheduled(round=1, heats=[se.HeatSeats(heat=1, seats=["a", "b", "c"])]))
        clocks.advance(2)  # the view joins 2 s after the last write
        tailer.poll()
        await pilot.pause(0.1)
        assert shown() == "clock 00:07"
        clocks.advance(3)
        w.append(se.AttemptStarted(round=1, heat=1, attempt=1, folder="round-1/heat-1/attempt-1"))
        clocks.step_wall(HOUR_MS)
        clocks.advance(0.2)
        tailer.poll()
        await pilot.pause(0.1)
        assert app.season.at_ms == 10_000
        assert shown() == "clock 00:10"
        clocks.advance(5)
        assert shown() == "clock 00:15"
    w.close()
