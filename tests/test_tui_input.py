"""No byte sequence on input ends a view, and no view spins when its input is gone
(issue #17; ``aoe_tui/tui/driver.py``).

The input path (:class:`~aoe_tui.tui.driver.InputDecoder`,
:class:`~aoe_tui.tui.driver.GuardedParser`) is checked on the issue's bytes directly; a
real ``aoe watch`` on a real PTY, read with ``pyte``, gets the issue's bytes and 10,000
fuzzed sequences (``tests/input_fuzz.py``) and must stay alive and answer a key; ``aoe
watch`` and ``aoe replay`` whose standard input is ``/dev/null``, a pipe at EOF or a
terminal that went away must idle at a few percent of a CPU at most.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from textual import events

from input_fuzz import PtyView, cpu_s, forbidden_keys, fuzz_sequences
from tui_fixtures import build_season_folder

from aoe_tui.tui.app import GC_FREEZE_AFTER_S
from aoe_tui.tui.driver import GuardedParser, InputDecoder

REPO = Path(__file__).resolve().parent.parent
SEED = REPO / "tests" / "fixtures" / "seed" / "opencode-cup-2026-W37-r1-h2-a1.match.json"
AOE = [sys.executable, "-m", "aoe_tui.cli"]
ENV = {"PYTHONPATH": str(REPO)}
#: what "idle" may cost a view (share of one CPU)
IDLE_CPU = 0.05
HELP_MARK = "command palette"  # a line of the help screen (tui/screens.py _HELP)

#: the issue's bytes: X10 click past column 95 (press, release), a lone 0xFF 0xFE, a
#: truncated UTF-8 sequence, Latin-1 text typed and pasted; and the other crashers found
ISSUE_BYTES = {
    "x10 mouse at column 120": b"\x1b[M" + bytes([32, 32 + 120, 32 + 5]) + b"\x1b[M" + bytes([35, 32 + 120, 32 + 5]),
    "lone 0xFF 0xFE": b"\xff\xfe",
    "truncated UTF-8": b"\xe2\x82" + b"x" + b"\xf0\x9f\x98",
    "Latin-1 text": b"caf\xe9 cr\xe8me",
    "Latin-1 paste": b"\x1b[200~caf\xe9 cr\xe8me br\xfbl\xe9e\x1b[201~",
    "CSI-u with a colon": b"\x1b[1:2;3u",
    "CSI-u past U+10FFFF": b"\x1b[97;;99999999u",
    "in-band resize to 0, then a mouse report": b"\x1b[48;0;0;0;0t\x1b[<35;5;5M",
}


def parse(chunks: list[bytes]) -> list:
    decoder, parser, out = InputDecoder(), GuardedParser(), []
    for text in [decoder.decode(chunk) for chunk in chunks] + [decoder.flush()]:
        if text:
            out += parser.feed(text)
    return out


def test_the_issue_bytes_read_as_clicks_text_and_nothing():
    # an X10 click at column 120 is a click there (Textual reads SGR reports only), even cut between reads
    x10 = ISSUE_BYTES["x10 mouse at column 120"]
    for chunks in ([x10], [x10[:5], x10[5:8], x10[8:]]):
        evs = [e for e in parse(chunks) if isinstance(e, events.MouseEvent)]
        assert [(type(e).__name__, e.x, e.y, e.button) for e in evs] == [("MouseDown", 119, 4, 1), ("MouseUp", 119, 4, 1)]
    # urxvt (1015) reports likewise
    evs = parse([b"\x1b[32;130;7M"])
    assert [(type(e).__name__, e.x, e.y) for e in evs] == [("MouseDown", 129, 6)]
    # undecodable bytes are characters: Latin-1 where printable, U+FFFD otherwise
    assert [e.character for e in parse([b"\xff\xfe"])] == ["ÿ", "þ"]
    assert [e.character for e in parse([b"\x81"])] == ["\ufffd"]
    assert "x" in [e.character for e in parse([b"\xe2\x82x"])]
    assert [e.character for e in parse([b"caf\xe9"])] == ["c", "a", "f", "é"]
    # a UTF-8 character cut between reads is still one character
    assert [e.character for e in parse([b"\xc3", b"\xa9"])] == ["é"]
    pastes = [e.text for e in parse([ISSUE_BYTES["Latin-1 paste"]]) if isinstance(e, events.Paste)]
    assert pastes == ["café crème brûlée"]
    assert parse([ISSUE_BYTES["CSI-u with a colon"]]) == []  # malformed: read as nothing (Textual raised)
    # and input goes on: the keys after it arrive (here flushed by the next escape sequence)
    assert "q" in [e.character for e in parse([ISSUE_BYTES["CSI-u with a colon"], b"q", b"\x1b[A"])]
    assert not [e for e in parse([ISSUE_BYTES["CSI-u past U+10FFFF"]]) if isinstance(e, events.Key) and e.key == "a"]
    # an insane in-band resize is dropped; the mouse report after it still reads
    evs = parse([ISSUE_BYTES["in-band resize to 0, then a mouse report"]])
    assert [type(e).__name__ for e in evs] == ["MouseMove"]
    assert not [e for e in parse([b"\x1b[48;99999;99999;1;1t"]) if isinstance(e, events.Resize)]
    assert [e.size for e in parse([b"\x1b[48;30;120;600;1200t"]) if isinstance(e, events.Resize)] == [(120, 30)]


#: bytes that make up terminal input: escape sequence pieces, digits, UTF-8 and Latin-1
_PIECES = st.sampled_from([b"\x1b", b"\x1b[", b"\x1b[M", b"\x1b[<", b"\x1b[48;", b"\x1b[200~", b"\x1b[201~",
                           b";", b":", b"u", b"M", b"m", b"t", b"~", b"$y", b"R", b"0", b"7", b"99999999",
                           b"\xff", b"\xfe", b"\xc3", b"\xa9", b"\xe2\x82", b"\x80", b"\xe9", b"a", b"\r", b"\x00"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(_PIECES | st.binary(max_size=6), max_size=12).map(b"".join), max_size=8))
def test_no_input_raises_in_the_input_path(chunks):
    """Any bytes, cut into reads anywhere, decode and parse without an exception; a read
    boundary never changes how valid UTF-8 text reads."""
    parse(chunks)
    text = "".join(chr(c) for c in b"".join(chunks) if 0x20 <= c < 0x7F) + "é€😀"
    data = text.encode()
    decoder = InputDecoder()
    cut = [decoder.decode(data[i:i + 3]) for i in range(0, len(data), 3)]
    assert "".join(cut) + decoder.flush() == text


def dead_after(view, sent: list[bytes]) -> str:
    """Why a fuzzed view ended: a quit key the corpus should not hold, or a crash."""
    keys = forbidden_keys(b"".join(sent))
    why = f"the corpus held {keys} (fix tests/input_fuzz.py)" if keys else "a crash"
    return f"the view ended (rc {view.proc.returncode}) after {len(sent)} sequences: {why}; screen:\n{view.text()}"


def answers_help(view, timeout: float = 30) -> float:
    """Back out of whatever the input opened, press ``?``: the help screen shows, escape
    hides it. Returns how long the help screen took to show (s)."""
    view.write(b"\x1b[201~")  # close a bracketed paste left open, if any
    for _ in range(4):
        view.write(b"\x1b")
        time.sleep(0.3)
    t0 = time.monotonic()
    view.write(b"?")
    view.wait_for(lambda s: HELP_MARK in s, timeout, "the help screen")
    took = time.monotonic() - t0
    view.write(b"\x1b")
    view.wait_for(lambda s: HELP_MARK not in s, timeout, "the help screen to close")
    return took


def test_watch_survives_the_issue_bytes_and_10000_fuzzed_sequences(tmp_path, record_property):
    season = build_season_folder(tmp_path)
    view = PtyView(AOE + ["watch", str(season)], cols=120, rows=30, env=ENV)
    try:
        view.wait_for(lambda s: "attempt 1" in s, 60, "the season screen")
        for name, data in ISSUE_BYTES.items():
            view.write(data)
            time.sleep(0.3)
            assert view.proc.poll() is None, f"{name} ended the view:\n{view.text()}"
        answers_help(view)
        seqs = fuzz_sequences(10_000, 17, 120, 30)
        t0 = time.monotonic()
        for i in range(0, len(seqs), 100):
            view.write(b"".join(seqs[i:i + 100]))
            assert view.proc.poll() is None, dead_after(view, seqs[:i + 100])
        sent_s = time.monotonic() - t0
        took = answers_help(view, timeout=60)
        record_property("fuzz_send_s", round(sent_s, 1))
        record_property("help_after_fuzz_s", round(took, 1))
        assert view.proc.poll() is None, view.text()
    finally:
        view.stop()


def test_views_without_input_idle(tmp_path, record_property):
    """``aoe watch`` with standard input ``/dev/null``, ``aoe replay --end`` with a pipe at
    EOF, and ``aoe watch`` whose terminal went away (PTY master closed: reads fail with
    EIO): each drawn, alive and idle at :data:`IDLE_CPU` of a CPU at most over 2 s
    (Textual's own input thread spun at 40-70 % on the first two, 25 % on the last)."""
    season = build_season_folder(tmp_path)
    devnull = open(os.devnull, "rb")  # noqa: SIM115 - closed below
    r, w = os.pipe()
    os.close(w)
    eof_pipe = os.fdopen(r, "rb")
    views = {
        "watch </dev/null": (PtyView(AOE + ["watch", str(season)], stdin=devnull, env=ENV), "attempt 1"),
        "replay <eof-pipe": (PtyView(AOE + ["replay", "--end", str(SEED)], stdin=eof_pipe, env=ENV), "builder-one"),
        "watch, terminal gone": (PtyView(AOE + ["watch", str(season)], env=ENV), "attempt 1"),
    }
    devnull.close()
    eof_pipe.close()
    try:
        for name, (view, mark) in views.items():
            view.wait_for(lambda s, m=mark: m in s, 60, f"{name}: {mark}")
        views["watch, terminal gone"][0].close_terminal()
        # start-up work is over: the first layout, and the one-time gc freeze GC_FREEZE_AFTER_S
        # after the app mounted (a full collection: ~0.1 s of CPU on a busy machine, which
        # inside the 2 s window alone made 6 %)
        time.sleep(GC_FREEZE_AFTER_S + 1.0)
        pids = {name: v.proc.pid for name, (v, _) in views.items()}
        c0, t0 = {n: cpu_s(p) for n, p in pids.items()}, time.monotonic()
        time.sleep(2.0)
        shares = {n: (cpu_s(p) - c0[n]) / (time.monotonic() - t0) for n, p in pids.items()}
        record_property("cpu", {n: round(s, 3) for n, s in shares.items()})
        for name, (view, _) in views.items():
            assert view.proc.poll() is None, f"{name} ended: {view.text()}"
            assert shares[name] <= IDLE_CPU, f"{name}: {shares[name]:.0%} of a CPU with no input"
    finally:
        for view, _ in views.values():
            view.stop()


def test_every_view_reads_its_terminal_through_the_guarded_driver(tmp_path):
    """``aoe replay``, the live heat view, ``aoe run`` / ``aoe demo`` (a season view with
    an engine host) and ``aoe watch`` all build :class:`AoeApp`; each gets the driver."""
    from aoe_tui.replay.matchdir import load_match
    from aoe_tui.tui.app import AoeApp, watch_app
    from aoe_tui.tui.driver import GuardedDriver
    from aoe_tui.tui.live import LiveFeed

    apps = [AoeApp.replay(load_match(SEED)), AoeApp.live(LiveFeed()),
            AoeApp.season_view(LiveFeed(), tmp_path, host=object(), read_only=False),
            watch_app(build_season_folder(tmp_path))]
    assert [app.driver_class for app in apps] == [GuardedDriver] * 4


def _writer_on(fd: int, left: list[str]):
    from aoe_tui.tui.driver import TerminalWriter

    file = os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace")
    writer = TerminalWriter(file, leave=lambda: left.append("left"))
    writer.start()
    return file, writer


def _in_thread(fn) -> threading.Thread:
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    return t


def test_terminal_writer_writes_everything_in_order():
    """A terminal that reads: every write arrives, in order, encoded as the file encodes;
    ``stop`` ends the thread once all is written; the terminal is not left."""
    r, w = os.pipe()
    left: list[str] = []
    file, writer = _writer_on(w, left)
    lines = [f"{i} é \udcff\n" for i in range(3000)]
    chunks: list[bytes] = []

    def read_all() -> None:
        while data := os.read(r, 65536):
            chunks.append(data)

    reader = _in_thread(read_all)
    for line in lines:
        writer.write(line)
    writer.stop()
    assert not writer.is_alive()
    file.close()
    reader.join(30)
    assert b"".join(chunks) == "".join(lines).encode("utf-8", "backslashreplace")
    assert not writer.gone and left == []
    os.close(r)


def test_terminal_writer_never_waits_on_a_terminal_that_answers_eio():
    """A terminal closed without a SIGHUP (its PTY master closed): the first write answers
    EIO; the terminal is left once and 100 more writes (more than Textual's queue of 30,
    which then waited for ever on its dead thread) and ``stop`` return."""
    master, slave = os.openpty()
    os.close(master)
    left: list[str] = []
    file, writer = _writer_on(slave, left)

    def burst() -> None:
        for _ in range(100):
            writer.write("x" * 1000)
        writer.stop()

    t = _in_thread(burst)
    t.join(60)
    assert not t.is_alive(), "a write or stop waited on a terminal that answers EIO"
    assert writer.gone and left == ["left"] and not writer.is_alive()
    with contextlib.suppress(OSError):
        file.close()


def test_terminal_writer_gives_up_a_terminal_that_stopped_reading_once_its_deadline_passed():
    """A terminal that is never read (a pipe whose buffer is full): writes wait (output is
    not lost while the view runs), until a deadline is set (a stop signal) and passes: the
    waiting write and ``stop`` then return, the terminal left once; the thread stays in the
    kernel's write without holding the file's lock (the file can still be flushed)."""
    r, w = os.pipe()
    left: list[str] = []
    file, writer = _writer_on(w, left)

    def fill() -> None:
        for _ in range(200):
            writer.write("y" * 4096)  # 800 KiB: the pipe's 64 KiB, then 30 queued writes

    t = _in_thread(fill)
    t.join(1.0)
    assert t.is_alive() and not writer.gone, "the writes did not wait for the terminal"
    writer.deadline = time.monotonic()  # what GuardedDriver.bound_output sets
    t.join(60)
    assert not t.is_alive() and writer.gone and left == ["left"]
    stopper = _in_thread(writer.stop)
    stopper.join(60)
    assert not stopper.is_alive(), "stop waited on a terminal given up"
    flusher = _in_thread(file.flush)
    flusher.join(60)
    assert not flusher.is_alive(), "the writer thread holds the file's lock"
    os.close(r)  # its write now fails (EPIPE): the thread drains and ends
    writer.stop()
    writer.join(60)
    assert not writer.is_alive() and left == ["left"]
    with contextlib.suppress(OSError):
        file.close()
