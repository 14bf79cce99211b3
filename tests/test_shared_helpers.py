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


def test_headless_lines_print_a_failing_milestone_once_per_state_change():
    """A verifier retrying every tick with a changing detail (a counter, another error) is
    one failing state: ``aoe run`` headless (season voice) and ``aoe match run`` print it
    once; a pass is a line, and a failure after the pass is news again."""
    import io

    from aoe_tui.commands.match import ProgressPrinter
    from aoe_tui.domain.events import EventRecord
    from aoe_tui.domain.world import WorldState
    from aoe_tui.replay.reducer import apply_event

    ticks = [ev.MilestoneFailed(territory="t1", milestone="m", category="not_ready", detail=f"attempt {i}: refused")
             for i in range(3)]
    ticks.append(ev.MilestoneFailed(territory="t1", milestone="m", category="not_ready", detail="timed out"))
    ticks.append(ev.MilestonePassed(territory="t1", milestone="m", points=40))
    ticks.append(ev.MilestoneFailed(territory="t1", milestone="m2", category="not_ready", detail="x"))
    ticks.append(ev.MilestoneFailed(territory="t1", milestone="m", category="not_ready", detail="broken again"))

    rep, said = RepeatedFailures(), []
    for e in ticks:
        if e.kind == "milestone_passed":
            rep.passed(e.territory, e.milestone, "r1h1a1")
        line = summarize_event(e, "season", name=lambda t: "alice")
        if line is not None and rep.fresh(line, "r1h1a1"):
            said.append(line.text)
    assert said == ["alice failed m: attempt 0: refused", "alice passed m", "alice failed m2: x",
                    "alice failed m: broken again"]

    out = io.StringIO()
    loaded = SimpleNamespace(manifest=SimpleNamespace(build=SimpleNamespace(milestones=[SimpleNamespace(id="m")]),
                                                      territories=[SimpleNamespace(id="t1")]))
    printer, world = ProgressPrinter(loaded, out), WorldState()
    for i, e in enumerate(ticks):
        rec = EventRecord(sequence=i, elapsed_ms=100 * i, event=e)
        apply_event(world, rec)
        printer(rec, world)
    failed = [x for x in out.getvalue().splitlines() if " failed " in x]
    assert [x.split("] ", 1)[1] for x in failed] == ["t1 failed m: attempt 0: refused", "t1 failed m2: x",
                                                      "t1 failed m: broken again"]


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


def test_tick_lateness_counts_idle_entered_ticks_only(tmp_path):
    """The benchmarks' one lateness measure (aoe_tui/testing/lateness.py): a territory's first
    evaluation in tick k against k * tick_ms, only when its previous result came before the
    tick; tick 0 and a second start within a tick are not counted."""
    import json

    from aoe_tui.testing.lateness import log_tick_lateness, pct, tick_lateness

    heat = tmp_path / "round-1" / "heat-1" / "attempt-1"
    heat.mkdir(parents=True)
    (heat / "arena.json").write_text(json.dumps({"rules": {"tick_ms": 1000}}))
    rows = [("milestone_evaluation_started", 5, "a"),     # tick 0: not counted
            ("milestone_passed", 300, "a"),
            ("milestone_evaluation_started", 1004, "a"),  # tick 1, idle since 300: 4 ms
            ("milestone_evaluation_started", 1010, "b"),  # tick 1, never evaluated: 10 ms
            ("milestone_evaluation_started", 1500, "b"),  # second start in tick 1: not counted
            ("milestone_failed", 2100, "a"),              # a's check of tick 1 ran into tick 2
            ("milestone_evaluation_started", 2150, "a"),  # so tick 2 was entered busy: not counted
            ("milestone_evaluation_started", 3002, "a")]  # tick 3, idle since 2100: 2 ms
    (heat / "events.jsonl").write_text("".join(
        json.dumps({"kind": k, "elapsed_ms": t, "territory": terr}) + "\n" for k, t, terr in rows))
    assert log_tick_lateness(heat / "events.jsonl") == [4, 10, 2]
    assert tick_lateness(tmp_path) == [4, 10, 2]
    assert pct([4, 10, 2], 50) == 4 and pct([], 99) != pct([], 99)  # NaN when empty
