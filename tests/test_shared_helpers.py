"""The one-home helpers: atomic writes (fsio), JSONL logs (replay/jsonl), clocks and event
lines (domain/display), spectator seats (serve/seats)."""

from __future__ import annotations

import os
import stat
from types import SimpleNamespace

import pytest

from aoe_tui.domain import events as ev
from aoe_tui.domain.display import RepeatedFailures, fmt_clock, summarize_event
from aoe_tui.fsio import SubPath, leftover_temps, write_atomic, write_json_atomic
from aoe_tui.replay.jsonl import LogTail
from aoe_tui.replay.log import EVENT_LOG, EventLogError, EventLogWriter, read_events
from aoe_tui.serve.seats import SeatPool


def test_write_atomic_text_bytes_mode(tmp_path):
    p = tmp_path / "a.txt"
    write_atomic(p, "héllo\n")
    assert p.read_bytes() == "héllo\n".encode()
    write_atomic(p, b"\x00\x01", mode=0o600, fsync=False)
    assert p.read_bytes() == b"\x00\x01" and stat.S_IMODE(p.stat().st_mode) == 0o600
    write_atomic(p, "x", mode=0o644)
    assert stat.S_IMODE(p.stat().st_mode) == 0o644
    assert sorted(os.listdir(tmp_path)) == ["a.txt"]  # no temporary file left


def test_write_atomic_failure_leaves_target_and_no_temp(tmp_path):
    p = tmp_path / "keep.json"
    write_json_atomic(p, {"a": 1})
    with pytest.raises(TypeError):
        write_json_atomic(p, {"a": object()})
    assert p.read_text() == '{\n  "a": 1\n}\n'
    with pytest.raises(FileNotFoundError):
        write_atomic(tmp_path / "missing" / "x", "y")
    assert leftover_temps(p) == [] and sorted(os.listdir(tmp_path)) == ["keep.json"]


def test_subpath():
    class Box:
        console = SubPath("dir", "console.log", "The console.")

        def __init__(self, d):
            self.dir = d

    from pathlib import Path

    assert Box(Path("/w")).console == Path("/w/console.log")
    assert Box.console.__doc__ == "The console."


def test_resumed_event_log_ends_a_complete_last_line(tmp_path):
    """A complete last line without its newline is kept, and the next line goes on a new line."""
    p = tmp_path / "events.jsonl"
    with EventLogWriter(p) as log:
        log.append(ev.MatchStateChanged(from_="preparing", to="running"), 0)
    p.write_bytes(p.read_bytes().rstrip(b"\n"))
    with EventLogWriter(p, resume=True) as log:
        log.append(ev.MatchFinished(winner=None, reason="timer"), 5)
    assert [r.sequence for r in read_events(p)] == [0, 1]


def test_resumed_event_log_cuts_a_torn_tail(tmp_path):
    p = tmp_path / "events.jsonl"
    with EventLogWriter(p) as log:
        log.append(ev.MatchStateChanged(from_="preparing", to="running"), 0)
    good = p.read_bytes()
    p.write_bytes(good + b'{"schema_version":1,"seq')
    assert len(read_events(p)) == 1
    with EventLogWriter(p, resume=True) as log:
        assert log.next_sequence == 1
    assert p.read_bytes() == good


def test_tail_delivers_the_good_records_before_a_bad_line_then_stops_there(tmp_path):
    """A tailer (aoe watch) gets every good record before a bad complete line; then every
    read raises, naming that line, and the tail does not move past it."""
    p = tmp_path / "events.jsonl"
    with EventLogWriter(p) as log:
        log.append(ev.MatchStateChanged(from_="preparing", to="running"), 0)
        log.append(ev.MatchFinished(winner=None, reason="timer"), 5)
    p.write_bytes(p.read_bytes() + b"not json\n")
    tail = LogTail(EVENT_LOG, p)
    assert [r.sequence for r in tail.read()] == [0, 1]
    offset = tail.offset
    for _ in range(2):
        with pytest.raises(EventLogError, match=r"events\.jsonl:3: invalid event"):
            tail.read()
        assert tail.offset == offset and tail.next_sequence == 2


@pytest.mark.parametrize(("ms", "style", "out"), [
    (None, "mm:ss", "--:--"),
    (65_400, "mm:ss", "01:05"),
    (3_725_000, "mm:ss", "1:02:05"),
    (65_490, "mm:ss.d", "01:05.4"),
    (3_725_000, "mm:ss.d", "62:05.0"),
    (65_440, "m:ss.d", "1:05.4"),
    (59_960, "m:ss.d", "1:00.0"),  # was "0:60.0"
    (12_345, "s.d", "12.3s"),
])
def test_fmt_clock_styles(ms, style, out):
    assert fmt_clock(ms, style) == out


def test_headless_voices_and_repeats():
    fail = ev.MilestoneFailed(territory="t1", milestone="m", detail="no\nmore")
    line = summarize_event(fail, "season", name=lambda t: "alice")
    assert line is not None and line.text == "alice failed m: no"
    rep = RepeatedFailures()
    assert rep.fresh(line, "r1") and not rep.fresh(line, "r1") and rep.fresh(line, "r2")
    rep.passed("t1", "m", "r1")
    assert rep.fresh(line, "r1")
    passed = ev.MilestonePassed(territory="t1", milestone="m", points=40)
    assert summarize_event(passed, "match").text == "t1 passed m (+40)"
    assert summarize_event(passed, "feed").text == "t1 passed m (+40)"
    assert summarize_event(ev.MilestoneEvaluationStarted(territory="t1", milestone="m"), "feed") is None


def test_seat_pool():
    pool = SeatPool(1)
    a = SimpleNamespace(conn=SimpleNamespace(addr="a", key_fp="k"), child=None)
    b = SimpleNamespace(conn=SimpleNamespace(addr="b", key_fp="k"), child=None)
    assert pool.take(a) is None and len(pool) == 1
    refusal = pool.take(b)
    assert refusal is not None and "all 1 spectator seats are taken" in refusal and refusal.endswith("\n")
    pool.release(a)
    pool.release(a)
    assert not pool and pool.take(b) is None and pool.sessions() == [b]
