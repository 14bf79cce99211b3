"""Outputs that agent text cannot subvert (issue #17): every text an agent or a season file
writes (model names, summaries, activity lines, labels) reaches our outputs escaped for
each output's own format: CSV (no formula), Markdown (no table pipe, HTML, heading or
emphasis), HTML and the TUI (literal), headless lines (no terminal control sequence)."""

from __future__ import annotations

import csv
import html
import io
from html.parser import HTMLParser

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
    return reduce_season([SeasonRecord(sequence=i, time_unix_ms=1000, event=e) for i, e in enumerate(events)])


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
