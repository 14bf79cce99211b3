"""Season file validation, season log (writer/reader, torn tail), reducer, standings, ratings,
exports (csv/json/md and HTML read back in a real headless chromium)."""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from aoe_tui.domain import season_events as se
from aoe_tui.domain.season import SeasonFileError, load_season
from aoe_tui.export.season import render
from aoe_tui.replay.season_log import SeasonLogError, SeasonLogWriter, read_season_log
from aoe_tui.replay.season_reducer import SeasonStateError, reduce_season
from aoe_tui.season.ratings import rate_heats
from aoe_tui.season.standings import season_standings

REPO = Path(__file__).resolve().parent.parent


def test_shipped_season_files_validate():
    demo = load_season(REPO / "seasons" / "demo.toml")
    assert len(demo.season.entrants) == 7 and demo.season.concurrent_heats == 2
    assert demo.arena_path.resolve() == (REPO / "arenas" / "first-build" / "arena.toml").resolve()
    cup = load_season(REPO / "seasons" / "opencode-cup.toml")
    assert cup.season.format.kind == "knockout"
    assert all(e.adapter == "opencode" for e in cup.season.entrants)


def test_season_file_errors_name_file_line_and_field(tmp_path):
    bad = tmp_path / "s.toml"
    bad.write_text(
        'id = "Bad Id"\nlabel = "w1"\narena = "a.toml"\nmax_attempts = 0\n\n[format]\nkind = "league"\n'
        'heats_per_entrant = "3"\n\n[[entrants]]\nid = "a"\nadapter = "oracle"\nmodel = "m"\ncolour = 1\n'
    )
    with pytest.raises(SeasonFileError) as ei:
        load_season(bad)
    msg = str(ei.value)
    assert f"{bad}:4: max_attempts:" in msg
    assert f"{bad}:8: format.heats_per_entrant:" in msg
    assert f"{bad}:14: entrants[0].colour: unknown field" in msg
    bad.write_text('id = "Bad Id"\nlabel = "w1"\narena = "a.toml"\n[format]\nkind = "league"\n'
                   '[[entrants]]\nid = "a"\nadapter = "oracle"\nmodel = "m"\n'
                   '[[entrants]]\nid = "a"\nadapter = "oracle"\nmodel = "m"\n')
    with pytest.raises(SeasonFileError) as ei:
        load_season(bad)
    assert f"{bad}:1: id: invalid id 'Bad Id'" in str(ei.value)
    assert f"{bad}:11: entrants[1].id: duplicate entrant id 'a'" in str(ei.value)
    bad.write_text("id = \n")
    with pytest.raises(SeasonFileError, match=r"s.toml:1: invalid TOML"):
        load_season(bad)
    with pytest.raises(SeasonFileError, match="season file not found"):
        load_season(tmp_path / "missing.toml")


def _started(entrants=("a", "b", "c", "d")):
    return se.SeasonStarted(season="t", label="w1", arena_id="first-build", format={"kind": "league"},
                            entrants=list(entrants), seed=1, heat_size=3, min_heat_size=2, max_attempts=2,
                            season_sha256="0" * 64, milestones=["service-up", "write-read"])


def _stats(terr, rank, points, durable=None, ms=None, usage=False):
    return se.EntrantHeatStats(territory=terr, rank=rank, points=points, passed=len(ms or {}), durable_at_ms=durable,
                               milestones=ms or {}, input_tokens=10 if usage else 0, usage_recorded=usage,
                               cost_microusd=500 if usage else 0)


def _season_log(path: Path) -> None:
    with SeasonLogWriter(path, clock=lambda: 1000) as w:
        w.append(_started())
        w.append(se.RoundScheduled(round=1, heats=[se.HeatSeats(heat=1, seats=["a", "b", None]),
                                                    se.HeatSeats(heat=2, seats=["c", None, "d"])]))
        w.append(se.AttemptStarted(round=1, heat=1, attempt=1, folder="round-1/heat-1/attempt-1"))
        w.append(se.AttemptStarted(round=1, heat=2, attempt=1, folder="round-1/heat-2/attempt-1"))
        w.append(se.AttemptFinished(round=1, heat=2, attempt=1, outcome="retry", failure_source="provider",
                                    detail="boom"))
        w.append(se.AttemptFinished(
            round=1, heat=1, attempt=1, outcome="counted", winner="a", ranks={"a": 1, "b": 2},
            stats={"a": _stats("builder-one", 1, 30, 5000, {"service-up": 1000, "write-read": 2000}, True),
                   "b": _stats("builder-two", 2, 10, None, {"service-up": 3000}, True)},
            bundle="round-1/heat-1/attempt-1/x.match.json"))
        w.append(se.HeatFinished(round=1, heat=1, attempt=1, ranks={"a": 1, "b": 2}, winner="a"))
        w.append(se.AttemptStarted(round=1, heat=2, attempt=2, folder="round-1/heat-2/attempt-2"))


def test_season_log_roundtrip_torn_tail_and_resume(tmp_path):
    log = tmp_path / "season.jsonl"
    _season_log(log)
    recs = read_season_log(log)
    assert [r.sequence for r in recs] == list(range(8))
    first = json.loads(log.read_text().splitlines()[0])
    assert list(first)[:4] == ["schema_version", "sequence", "time_unix_ms", "kind"]
    # a torn append (kill -9 mid-line) is ignored on read and cut off on resume
    with open(log, "ab") as fh:
        fh.write(b'{"schema_version":1,"sequence":8,"time_un')
    assert len(read_season_log(log)) == 8
    w = SeasonLogWriter(log)
    rec = w.append(se.SeasonResumed(pid=1))
    w.close()
    assert rec.sequence == 8 and len(read_season_log(log)) == 9
    # a bad complete line is an error naming path:line
    lines = log.read_text().splitlines()
    lines[3] = lines[3].replace('"attempt_started"', '"attempt_begun"')
    log.write_text("\n".join(lines) + "\n")
    with pytest.raises(SeasonLogError, match=r"season.jsonl:4: invalid season event: unknown season event kind"):
        read_season_log(log)


def test_reducer_states_and_consistency(tmp_path):
    log = tmp_path / "season.jsonl"
    _season_log(log)
    state = reduce_season(read_season_log(log))
    h1, h2 = state.rounds[1].heats[1], state.rounds[1].heats[2]
    assert h1.status == "finished" and h1.counted.attempt == 1
    assert h2.status == "running" and [a.attempt for a in h2.attempts] == [1, 2]
    assert [(h.key, a.attempt) for h, a in state.open_attempts()] == [((1, 2), 2)]
    assert h2.next_attempt_number() == 2  # a re-run of the open attempt keeps its number
    # a second round while round 1 is open, or an entrant twice in a round, is refused
    recs = read_season_log(log)
    bad = se.SeasonRecord(sequence=8, time_unix_ms=1, event=se.RoundScheduled(round=2, heats=[se.HeatSeats(heat=1, seats=["a", "b"])]))
    with pytest.raises(SeasonStateError, match="before round 1 finished"):
        reduce_season([*recs, bad])
    dup = se.SeasonRecord(sequence=1, time_unix_ms=1, event=se.RoundScheduled(
        round=1, heats=[se.HeatSeats(heat=1, seats=["a", "b"]), se.HeatSeats(heat=2, seats=["a", "c"])]))
    with pytest.raises(SeasonStateError, match="'a' scheduled twice"):
        reduce_season([recs[0], dup])


def test_standings_order_usage_and_ratings(tmp_path):
    log = tmp_path / "season.jsonl"
    _season_log(log)
    state = reduce_season(read_season_log(log))
    rows = season_standings(state)
    assert [r.entrant for r in rows][:2] == ["a", "b"]
    a = rows[0]
    assert (a.heats, a.wins, a.durable, a.points, a.median_durable_ms) == (1, 1, 1, 30, 5000)
    assert a.coverage == 1.0 and a.cost_microusd == 500 and a.cost_per_durable_microusd == 500
    assert a.milestone_ms == {"service-up": 1000, "write-read": 2000}
    assert a.mu > 25 > rows[1].mu and a.ordinal > rows[1].ordinal
    c = next(r for r in rows if r.entrant == "c")
    assert c.heats == 0 and c.cost_microusd is None and c.mu == pytest.approx(25.0)
    # ties share a rank and draw in the rating
    r = rate_heats(["x", "y", "z"], [{"x": 1, "y": 1, "z": 3}])
    assert r["x"].mu == pytest.approx(r["y"].mu) and r["x"].mu > r["z"].mu


def test_exports_csv_json_md(tmp_path):
    log = tmp_path / "season.jsonl"
    _season_log(log)
    state = reduce_season(read_season_log(log))
    rows = list(csv.DictReader(io.StringIO(render(state, "csv"))))
    assert [r["entrant"] for r in rows] == [s.entrant for s in season_standings(state)]
    assert rows[0]["wins"] == "1" and rows[2]["cost_microusd"] == ""
    data = json.loads(render(state, "json"))
    assert data["standings"][0]["entrant"] == "a" and len(data["heats"]) == 2
    assert data["heats"][1]["attempts"][0]["outcome"] == "retry"
    assert "| 1 | a |" in render(state, "md")


def _chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        if shutil.which(name):
            return shutil.which(name)  # type: ignore[return-value]
    pytest.skip("chromium not installed (apt-get install -y chromium)")


def read_table_in_chromium(html_file: Path, tmp_path: Path) -> list[list[str]]:
    """Load ``html_file`` in headless chromium and parse ``#standings`` rows from the DOM it renders."""
    from html.parser import HTMLParser

    res = subprocess.run(
        [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'chrome-profile'}", "--dump-dom", html_file.resolve().as_uri()],
        capture_output=True, text=True, timeout=120,
    )
    assert res.returncode == 0, res.stderr[-2000:]

    class P(HTMLParser):
        def __init__(self):
            super().__init__()
            self.rows: list[list[str]] = []
            self.in_table = self.in_td = False

        def handle_starttag(self, tag, attrs):
            if tag == "table" and ("id", "standings") in attrs:
                self.in_table = True
            elif self.in_table and tag == "tr":
                self.rows.append([])
            elif self.in_table and tag in ("td", "th"):
                self.in_td = True
                self.rows[-1].append("")

        def handle_endtag(self, tag):
            if tag == "table":
                self.in_table = False
            elif tag in ("td", "th"):
                self.in_td = False

        def handle_data(self, data):
            if self.in_table and self.in_td:
                self.rows[-1][-1] += data

    p = P()
    p.feed(res.stdout)
    assert "<svg" in res.stdout or "No milestone" in res.stdout
    return p.rows


def test_html_is_self_contained_and_reads_back_in_chromium(tmp_path):
    log = tmp_path / "season.jsonl"
    _season_log(log)
    state = reduce_season(read_season_log(log))
    page = tmp_path / "standings.html"
    text = render(state, "html")
    assert "http://" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "") and "https://" not in text
    assert 'href="round-1/heat-1/attempt-1/x.match.json"' in text and "<svg" in text
    page.write_text(text)
    rows = read_table_in_chromium(page, tmp_path)
    assert rows[0][:2] == ["#", "entrant"]
    assert [r[1] for r in rows[1:]] == [s.entrant for s in season_standings(state)]


def test_season_folder_is_held_by_one_runner_and_freed_by_sigkill(tmp_path):
    """A second runner on a live season folder is refused (naming the pid); SIGKILL frees it."""
    import signal
    import subprocess
    import sys
    import time

    from aoe_tui.season.runner import SeasonBusyError, hold_season_folder

    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from pathlib import Path; from aoe_tui.season.runner import hold_season_folder\n"
         "with hold_season_folder(Path(sys.argv[1])):\n    print('held', flush=True); time.sleep(60)",
         str(tmp_path)],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(SeasonBusyError, match=rf"in use by another aoe run \(pid {holder.pid}\)"):
            with hold_season_folder(tmp_path):
                pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    deadline = time.monotonic() + 5
    while True:
        try:
            with hold_season_folder(tmp_path):
                break
        except SeasonBusyError:
            assert time.monotonic() < deadline
            time.sleep(0.05)
