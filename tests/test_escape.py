"""Outputs that agent text cannot subvert (issue #17): every text an agent or a season file
writes (model names, summaries, activity lines, labels) reaches our outputs escaped for
each output's own format: CSV (no formula), Markdown (no table pipe, HTML, heading or
emphasis), HTML and the TUI (literal), headless lines (no terminal control sequence)."""

from __future__ import annotations

import csv
import html
import io
import json
from html.parser import HTMLParser
from pathlib import Path

from markdown_it import MarkdownIt

from aoe_tui.domain import season_events as se
from aoe_tui.export.standings_files import render
from aoe_tui.replay.season_reducer import reduce_season
from aoe_tui.replay.season_log import SeasonRecord

#: what an agent may report as its model or summary: formulas, Markdown, HTML, markup, escapes
HOSTILE = [
    "=HYPERLINK(\"http://x\",\"y\")", "+1+cmd|' /C calc'!A0", "-2+3", "@SUM(A1:A9)", "\tstarts with tab",
    "\rstarts with CR", "a | b | c", "# heading", "*bold* _em_ `code` [link](http://x) ![i](x.png)",
    "<script>alert(1)</script>", "<b>&amp;</b>", "back\\slash\\|", "line one\n# line two\n| x |",
    "[bold red]markup[/]", "~~strike~~", "\x1b[31mred\x1b[0m",
]


def _state(models: dict[str, str], label: str = "w1"):
    """A two-entrant season: one counted heat, entrants named a..; model names from ``models``."""
    events = _events(models, label)
    return reduce_season([SeasonRecord(sequence=i, time_unix_ms=1000, event=e) for i, e in enumerate(events)])


def _events(models: dict[str, str], label: str) -> list:
    """The season events of :func:`_state`."""
    entrants = list(models)
    events = [
        se.SeasonStarted(season="t", label=label, arena_id="first-build", format={"kind": "league"},
                         entrants=entrants, seed=1, heat_size=len(entrants), min_heat_size=2, max_attempts=1,
                         season_sha256="0" * 64, milestones=["service-up"], models=models),
        se.RoundScheduled(round=1, heats=[se.HeatSeats(heat=1, seats=entrants)]),
        se.AttemptStarted(round=1, heat=1, attempt=1, folder="round-1/heat-1/attempt-1"),
        se.AttemptFinished(round=1, heat=1, attempt=1, outcome="counted", winner=entrants[0],
                           ranks={e: i + 1 for i, e in enumerate(entrants)},
                           stats={e: se.EntrantHeatStats(territory=f"builder-{i}", rank=i + 1, points=10 - i, passed=1,
                                                         durable_at_ms=None, milestones={"service-up": 1000})
                                  for i, e in enumerate(entrants)}),
        se.HeatFinished(round=1, heat=1, attempt=1, ranks={e: i + 1 for i, e in enumerate(entrants)},
                        winner=entrants[0]),
    ]
    return events


def _hostile_state():
    return _state({f"e{i:02d}": text for i, text in enumerate(HOSTILE)}, label="w1 | <i>x</i>\n# not a heading")


def test_csv_export_lets_no_formula_through():
    state = _hostile_state()
    rows = list(csv.reader(io.StringIO(render(state, "csv"), newline="")))
    head, body = rows[0], rows[1:]
    assert len(body) == len(HOSTILE)
    numbers = 0
    for row in body:
        for cell in row:
            if cell[:1] in ("=", "+", "-", "@", "\t", "\r"):
                float(cell)  # only a number we produce may start like a formula (a negative ordinal)
                numbers += 1
    assert numbers > 0  # there were negative numbers, and they stayed numbers
    by_entrant = {row[head.index("entrant")]: row for row in body}
    for i, text in enumerate(HOSTILE):
        cell = by_entrant[f"e{i:02d}"][head.index("model")]
        # neutralised with the OWASP quote, else as written (the CSV stays faithful)
        assert cell == ("'" + text if text[:1] in "=+-@\t\r" else text).replace("\r", "\n")


class _Cells(HTMLParser):
    """Rendered HTML → the tags seen and the text of each table row's cells."""

    def __init__(self):
        super().__init__()
        self.tags: list[str] = []
        self.rows: list[list[str]] = []
        self.h1: list[str] = []
        self._cell = self._h1 = False

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self.rows[-1].append("")
            self._cell = True
        elif tag == "h1":
            self.h1.append("")
            self._h1 = True

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self._cell = False
        elif tag == "h1":
            self._h1 = False

    def handle_data(self, data):
        if self._cell:
            self.rows[-1][-1] += data
        if self._h1:
            self.h1[-1] += data


def test_markdown_export_renders_agent_text_as_written():
    """Rendered by a CommonMark + tables renderer, every row keeps its 19 cells, the model
    cell reads exactly as the agent wrote it (line breaks as spaces) and no tag but the
    table's and the one title heading appears: no pipe splits a cell, no HTML, heading,
    emphasis, link, image or code span gets through."""
    state = _hostile_state()
    page = MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(render(state, "md"))
    p = _Cells()
    p.feed(page)
    assert set(p.tags) <= {"h1", "p", "table", "thead", "tbody", "tr", "th", "td"}, set(p.tags)
    assert p.h1 == ["t · w1 | <i>x</i> # not a heading — standings"]
    head, body = p.rows[0], p.rows[1:]
    assert len(head) == 19 and all(len(r) == 19 for r in body)
    models = {r[head.index("entrant")]: r[head.index("model")] for r in body}
    for i, text in enumerate(HOSTILE):
        want = "".join(" " if (c < " " or c == "\x7f") else c for c in text).strip()
        assert models[f"e{i:02d}"] == want


def test_html_export_shows_agent_text_literally():
    state = _hostile_state()
    page = render(state, "html")
    assert "<script>" not in page and "<i>x</i>" not in page
    p = _Cells()
    p.feed(page)
    assert "script" not in p.tags and "i" not in p.tags
    table = [r for r in p.rows if len(r) == 20]
    head, body = table[0], table[1:]
    models = {r[head.index("entrant")]: r[head.index("model")] for r in body}
    assert [models[f"e{i:02d}"] for i in range(len(HOSTILE))] == HOSTILE
    assert html.escape("w1 | <i>x</i>") in page


# ------------------------------------------------------------------ a match whose agents write hostile text

#: what a guest's console, a verifier's stderr or an agent's summary may carry: ESC
#: sequences (clear screen, window title, colours, cursor up), C1 CSI, CR, bidi override,
#: and emoji sequences whose widths terminals and Rich count differently
CONSOLE = "boot\x1b[2J\x1b[H\x1b]0;pwned\x07 \x1b[31mred\x1b[0m \x9b1A\rover \u202eevil ☀️👨‍👩‍👧🇫🇷👍🏽 done"
MODEL = "kimi ❤️🧑🏿‍💻🇩🇪✌🏻 \x1b[5m[bold]m[/] <script>"


def hostile_match(dest: Path) -> Path:
    """The seed heat with its model names, verifier failure details and agent summaries
    replaced by :data:`MODEL` / :data:`CONSOLE`; written as a match folder ``dest``."""
    from tui_fixtures import SEED

    from aoe_tui.replay.log import dump_record
    from aoe_tui.replay.matchdir import load_match

    m = load_match(SEED)
    out = []
    for rec in m.records:
        e = rec.event
        if e.kind == "agent_started":
            e = e.model_copy(update={"model": MODEL})
        elif e.kind in ("milestone_failed", "agent_finished", "agent_interrupted"):
            e = e.model_copy(update={"detail": CONSOLE})
        elif e.kind in ("agent_outraced", "match_finished"):
            e = e.model_copy(update={"reason": CONSOLE})
        out.append(rec.model_copy(update={"event": e}))
    dest.mkdir(parents=True)
    (dest / "arena.json").write_text(json.dumps(m.arena))
    (dest / "events.jsonl").write_text("".join(dump_record(r) + "\n" for r in out))
    return dest


def _terminal_safe(text: str) -> bool:
    """No byte a terminal acts on: no C0 control but the line feed, no DEL, no C1, no bidi override."""
    return not any((ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) < 0xA0 or c in "\u202e\u2066" for c in text)


def test_headless_lines_show_console_control_sequences_escaped(tmp_path, capsys):
    """``aoe match run`` progress lines, ``aoe run --headless`` season lines (and a
    detached TUI's), ``aoe inspect`` and error lines carry a guest console's text with
    every control sequence as a visible escape, never as bytes a terminal would act on."""
    import subprocess
    import sys

    from aoe_tui.commands.match import ProgressPrinter
    from aoe_tui.commands.season import _say
    from aoe_tui.domain.display import summarize_event
    from aoe_tui.replay.matchdir import load_match
    from aoe_tui.domain.world import WorldState
    from aoe_tui.replay.reducer import apply_event
    from aoe_tui.tui.host import SeasonHost

    folder = hostile_match(tmp_path / "hm")
    match = load_match(folder)

    class Loaded:  # what ProgressPrinter reads of a loaded manifest
        class manifest:
            build = None
            territories = []

    out = io.StringIO()
    printer = ProgressPrinter(Loaded, stream=out)
    world = WorldState()
    for rec in match.records:
        apply_event(world, rec)
        printer(rec, world)
        line = summarize_event(rec.event, "season")
        if line is not None:
            _say(line.text)
    host = SeasonHost(lambda say: None)
    printed: list[str] = []
    host.set_sink(printed.append)
    host.say(f"r1h1a1: spoiled by harness: {CONSOLE}")
    res = subprocess.run([sys.executable, "-m", "aoe_tui.cli", "inspect", str(folder)], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    bad = subprocess.run([sys.executable, "-m", "aoe_tui.cli", "replay", str(tmp_path / "no\x1b[2Jsuch")],
                         capture_output=True, text=True, timeout=60)
    outputs = {"match run": out.getvalue(), "season run": capsys.readouterr().out, "detached": "\n".join(printed),
               "inspect": res.stdout, "error": bad.stderr}
    for name, text in outputs.items():
        assert _terminal_safe(text), (name, text)
    assert "boot\\x1b[2J\\x1b[H\\x1b]0;pwned\\x07 \\x1b[31mred" in outputs["match run"]
    assert "\\x9b1A\\rover \\u202eevil ☀️👨‍👩‍👧🇫🇷👍🏽 done" in outputs["match run"]  # emoji kept as written
    failures = sum(r.event.kind == "milestone_failed" for r in match.records)
    assert outputs["season run"].count("failed service-up: boot\\x1b[2J") == failures == 41  # each one, escaped
    assert "spoiled by harness: boot\\x1b[2J" in outputs["detached"]
    assert "kimi ❤️🧑🏿‍💻🇩🇪✌🏻 \\x1b[5m[bold]m[/] <script>" in outputs["inspect"]
    assert "no\\x1b[2Jsuch" in outputs["error"] and bad.returncode != 0


def test_tui_panel_borders_hold_on_emoji_and_agent_text_stays_literal(tmp_path):
    """``aoe replay`` of the hostile heat on a real PTY read by pyte (which counts cells
    per code point with wcwidth, as xterm and tmux do): every territory panel's right
    border sits in one column on every row although model names, failure details and
    the winner line carry emoji sequences (VS16, ZWJ, flags, skin tones); Rich markup and
    HTML in them show literally; no escape sequence reached the terminal (the screen was
    not cleared, the window title not set)."""
    import os
    import pty
    import select
    import signal
    import struct
    import sys
    import termios
    import time

    import fcntl
    import pyte

    folder = hostile_match(tmp_path / "hm")
    cols, rows = 160, 50
    screen = pyte.Screen(cols, rows)
    stream = pyte.ByteStream(screen)
    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - the child: its terminal's size is set before the app reads it
        fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        os.environ.update(TERM="xterm-256color", COLUMNS=str(cols), LINES=str(rows))
        os.execv(sys.executable, [sys.executable, "-m", "aoe_tui.cli", "replay", str(folder), "--end"])
    try:
        end, quiet_since = time.monotonic() + 60, None
        while time.monotonic() < end:
            ready, _, _ = select.select([fd], [], [], 0.2)
            if ready:
                try:
                    stream.feed(os.read(fd, 65536))
                except OSError:
                    break
                quiet_since = None
            elif "── activity" in "\n".join(screen.display) and "events" in "\n".join(screen.display):
                quiet_since = quiet_since or time.monotonic()
                if time.monotonic() - quiet_since > 1.0:
                    break
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(fd)
    text = "\n".join(screen.display)
    cell = lambda y, x: screen.buffer[y][x].data  # noqa: E731
    top = next(y for y in range(rows) if "builder-one" in screen.display[y] and "╭" in screen.display[y])
    corners = [x for x in range(cols) if cell(top, x) in "╮┓"]
    assert len(corners) == 3, text
    for x in corners:
        y = top + 1
        while cell(y, x) in "│┃":
            y += 1
        assert cell(y, x) in "╯┛" and y - top > 10, f"panel border at column {x} broke on row {y}:\n{text}"
    model_rows = [line for line in screen.display if "model kimi" in line]
    assert len(model_rows) == 1 and model_rows[0].count("[bold]m[/] <script>") == 3
    assert sum("boot red over evil" in line for line in screen.display) >= 3  # failure details + winner line
    assert "WINNER builder-two" in text and "pwned" not in screen.title


_EMOJI_PARTS = "".join(map(chr, [0xFE0F, 0xFE0E, 0x200D, 0x20E3, 0x1F3FB, 0x1F3FF, 0x1F1EB, 0x1F1F7, 0x2764, 0x2600,
                                 0x1F468, 0x1F469, 0x1F4BB, 0x1F44D, 0x0301, 0x0915, 0x094D, 0x0937, 0x0E17, 0x0E35,
                                 0x1100, 0x1161, 0x4E00, 0x23, 0x61, 0x20]))


def test_sanitized_text_measures_the_same_for_rich_and_a_terminal():
    """Whatever emoji parts an agent strings together, Rich's cell count of the sanitized
    line equals the per-code-point wcwidth sum a terminal uses (so TUI borders hold)."""
    from hypothesis import given, settings, strategies as st
    from rich.cells import cell_len
    from wcwidth import wcwidth

    from aoe_tui.domain.display import sanitize_line

    @settings(max_examples=200, deadline=None)
    @given(st.text(alphabet=_EMOJI_PARTS, max_size=12))
    def check(text):
        line = sanitize_line(text)
        assert cell_len(line) == sum(max(0, wcwidth(c)) for c in line), [hex(ord(c)) for c in line]

    check()


def test_inspect_world_json_on_a_terminal_carries_no_c1_control(tmp_path):
    """``aoe inspect --world`` prints agent summaries and verifier details inside JSON;
    ``json.dumps(ensure_ascii=False)`` escapes C0 but leaves the C1 controls raw, and a
    terminal decoding UTF-8 acts on U+009B (CSI) / U+009D (OSC: a window title, OSC 52
    clipboard, OSC 8 links). Printed, they are ``\\u009b`` escapes; the JSON means the same."""
    import subprocess
    import sys

    import pyte

    from aoe_tui.domain.world import world_dict
    from aoe_tui.replay.matchdir import load_match

    folder = hostile_match(tmp_path / "hm")
    evil = "\x9d0;PWNED\x9c\x9d52;c;ZXZpbA==\x9c\x9d8;;http://x\x9c\x9b2J\u202e"
    events = folder / "events.jsonl"
    events.write_text(events.read_text(encoding="utf-8").replace("boot", evil + "boot"), encoding="utf-8")
    res = subprocess.run([sys.executable, "-m", "aoe_tui.cli", "inspect", str(folder), "--world"],
                         capture_output=True, timeout=60)
    assert res.returncode == 0, res.stderr
    text = res.stdout.decode("utf-8")
    assert _terminal_safe(text)
    assert json.loads(text) == json.loads(json.dumps(world_dict(load_match(folder).world)))  # same data
    assert "\\u009d0;PWNED\\u009c" in text
    screen = pyte.Screen(120, 40)
    pyte.ByteStream(screen).feed(res.stdout)
    assert screen.title == ""  # no OSC reached the terminal


def test_standings_on_a_terminal_carry_no_control_and_output_never_replaces_a_link(tmp_path):
    """``aoe standings`` printed to a terminal escapes the controls agent text may hold in
    every format (a pipe or a file gets the export's exact bytes); ``--output`` through a
    symlink or onto a device writes through it and never replaces it with a regular file."""
    import os
    import subprocess
    import sys

    from aoe_tui.replay.season_log import SeasonLogWriter

    season = tmp_path / "season"
    season.mkdir()
    with SeasonLogWriter(season / "season.jsonl") as w:
        for e in _events({f"e{i:02d}": text for i, text in enumerate(HOSTILE)}, "w1"):
            w.append(e)
    aoe = [sys.executable, "-m", "aoe_tui.cli", "standings", str(season)]
    for fmt in ("csv", "md", "html", "json"):
        master, slave = os.openpty()
        try:
            proc = subprocess.Popen(aoe + ["--format", fmt], stdout=slave, stderr=subprocess.PIPE)
            os.close(slave)
            chunks = []
            while True:
                try:
                    data = os.read(master, 65536)
                except OSError:  # EIO: the child closed its end
                    break
                if not data:
                    break
                chunks.append(data)
            assert proc.wait(60) == 0, proc.stderr.read()
        finally:
            os.close(master)
        text = b"".join(chunks).decode("utf-8")
        assert "e00" in text and _terminal_safe(text.replace("\r\n", "\n")), (fmt, text[:400])
    piped = subprocess.run(aoe + ["--format", "csv"], capture_output=True, text=True, timeout=60)
    assert "\x1b[31mred" in piped.stdout  # a pipe or file: the exact export
    target = tmp_path / "kept.csv"
    target.write_text("old\n")
    link = tmp_path / "link.csv"
    link.symlink_to(target)
    assert subprocess.run(aoe + ["--format", "csv", "--output", str(link)], timeout=60).returncode == 0
    assert link.is_symlink() and "e00" in target.read_text()
