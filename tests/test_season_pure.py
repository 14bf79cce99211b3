"""Season file validation, season log (writer/reader, torn tail), reducer, standings, ratings,
exports (csv/json/md and HTML read back in a real headless chromium)."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from aoe_tui.domain import season_events as se
from aoe_tui.domain.season_file import SeasonFileError, load_season
from aoe_tui.export.standings_files import render
from aoe_tui.replay.season_log import SeasonLogError, SeasonLogWriter, read_season_log
from aoe_tui.replay.season_reducer import SeasonStateError, reduce_season
from aoe_tui.season.ratings import rate_heats
from aoe_tui.season.season_standings import season_standings

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


def test_season_file_toml_error_at_end_of_document(tmp_path):
    """tomllib gives no position for an error at the end of the document (an unclosed
    string or array): the problem is put on the last line, as for arena manifests."""
    from aoe_tui.domain.season_file import SeasonFileError, load_season

    bad = tmp_path / "s.toml"
    bad.write_text('id = "t"\nlabel = "w1"\narena = "a.toml"\nseed = [1,\n')
    with pytest.raises(SeasonFileError) as ei:
        load_season(bad)
    assert str(ei.value) == f"{bad}:5: invalid TOML: Invalid value (at end of document)"


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
    assert list(first)[:5] == ["schema_version", "sequence", "time_unix_ms", "season_clock_ms", "kind"]
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


def test_season_stopped_keeps_the_open_attempt_for_the_resume(tmp_path):
    """``season_stopped`` (a signal or "stop") is logged, shown as one line and changes
    nothing the resume needs: the running attempt stays open; none after the finish."""
    from aoe_tui.domain.display import summarize_season_event

    log = tmp_path / "season.jsonl"
    _season_log(log)
    with SeasonLogWriter(log) as w:
        w.append(se.SeasonStopped(reason="SIGTERM", pid=42, open_attempts=["r1h2a2"]))
        w.append(se.SeasonResumed(pid=43))
    recs = read_season_log(log)
    state = reduce_season(recs)
    assert [(s.reason, s.pid) for s in state.stops] == [("SIGTERM", 42)] and state.resumes == 1
    assert [(h.key, a.attempt) for h, a in state.open_attempts()] == [((1, 2), 2)]
    assert summarize_season_event(recs[-2].event) == "stopped (SIGTERM, pid 42); aborted r1h2a2; the same aoe run resumes"
    done = se.SeasonRecord(sequence=10, time_unix_ms=1, event=se.SeasonFinished(champions=["a"], rounds=1))
    late = se.SeasonRecord(sequence=11, time_unix_ms=1, event=se.SeasonStopped(reason="quit", pid=1))
    with pytest.raises(SeasonStateError, match="season already finished"):
        reduce_season([*recs, done, late])


def test_a_stop_or_a_resume_cuts_off_the_open_attempts_the_resume_still_interrupts(tmp_path):
    """What a view needs of a stopped season, from the reducer: the attempts the stop left
    open are ``cut_off`` (not :meth:`running_attempts`, not ``live``) but stay open for the
    resume (``open_attempts``, ``status`` running) until its ``attempt_interrupted``; a
    resume after a runner killed without ``season_stopped`` cuts them off too; an attempt
    started after the resume is live."""
    log = tmp_path / "season.jsonl"
    _season_log(log)
    recs = read_season_log(log)
    running = reduce_season(recs)
    (h, att), = running.running_attempts()
    assert (h.key, att.attempt) == ((1, 2), 2) and att.live and not att.cut_off
    for first in ("stopped", "killed"):
        extra = [se.SeasonStopped(reason="SIGINT", pid=42, open_attempts=["r1h2a2"])] if first == "stopped" else []
        extra += [se.SeasonResumed(pid=43),
                  se.AttemptInterrupted(round=1, heat=2, attempt=2, renamed_to="round-1/heat-2/attempt-2.interrupted-1"),
                  se.AttemptStarted(round=1, heat=2, attempt=2, folder="round-1/heat-2/attempt-2")]
        more = [se.SeasonRecord(sequence=len(recs) + i, time_unix_ms=2000 + i, event=e) for i, e in enumerate(extra)]
        k = 1 if first == "stopped" else 0
        if first == "stopped":
            stopped = reduce_season(recs + more[:1])
            assert stopped.stopped is not None and stopped.running_attempts() == []
            (h, att), = stopped.open_attempts()
            assert (h.key, att.attempt, att.status, att.cut_off, att.live) == ((1, 2), 2, "running", True, False)
            # the exports call the stopped heat and its cut-off attempt interrupted, not running
            assert (h.status, att.shown_status) == ("interrupted", "interrupted")
            heat = next(x for x in json.loads(render(stopped, "json"))["heats"] if (x["round"], x["heat"]) == (1, 2))
            assert (heat["status"], heat["attempts"][-1]["status"]) == ("interrupted", "interrupted")
            page = render(stopped, "html")
            assert "<b>Heat 2</b> <span class=\"muted\">interrupted" in page
            assert " · stopped (SIGINT); the same aoe run resumes it" in page and "in progress" not in page
            assert json.loads(render(stopped, "json"))["stopped"] == "SIGINT"
        resumed = reduce_season(recs + more[:k + 1])  # season_resumed: not re-run yet
        assert resumed.stopped is None and resumed.running_attempts() == []
        assert [(h.key, a.attempt) for h, a in resumed.open_attempts()] == [((1, 2), 2)]
        rerun = reduce_season(recs + more)
        h2 = rerun.rounds[1].heats[2]
        assert [(a.status, a.cut_off, a.live) for a in h2.attempts] == [
            ("finished", False, False), ("interrupted", True, False), ("running", False, True)]
        assert h2.status == "running" and resumed.rounds[1].heats[2].status == "interrupted"
        assert "in progress" in render(rerun, "html") and json.loads(render(rerun, "json"))["stopped"] is None
        assert [(h.key, a.attempt) for h, a in rerun.running_attempts()] == [((1, 2), 2)]


def test_an_attempt_killed_before_its_folder_existed_is_interrupted_with_nothing_kept(tmp_path):
    """A runner killed between ``attempt_started`` and making the attempt's folder: the
    resume logs ``renamed_to: null`` (no folder claimed that does not exist) and re-runs it."""
    from aoe_tui.domain.display import summarize_season_event

    log = tmp_path / "season.jsonl"
    _season_log(log)
    with SeasonLogWriter(log) as w:
        w.append(se.AttemptInterrupted(round=1, heat=2, attempt=2, renamed_to=None))
    recs = read_season_log(log)
    state = reduce_season(recs)
    att = state.rounds[1].heats[2].attempts[-1]
    assert att.status == "interrupted" and att.interrupted_as == []
    assert summarize_season_event(recs[-1].event) == "r1h2a2 interrupted, before its folder was made"


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


def html_tables(page: str) -> dict[str, list[list[str]]]:
    """Every ``<table id=...>`` of ``page``: id → rows of cell texts (header row first)."""
    from html.parser import HTMLParser

    class P(HTMLParser):
        def __init__(self):
            super().__init__()
            self.tables: dict[str, list[list[str]]] = {}
            self.cur: str | None = None
            self.in_cell = False

        def handle_starttag(self, tag, attrs):
            if tag == "table":
                self.cur = dict(attrs).get("id")
                self.tables[self.cur] = []
            elif self.cur and tag == "tr":
                self.tables[self.cur].append([])
            elif self.cur and tag in ("td", "th"):
                self.in_cell = True
                self.tables[self.cur][-1].append("")

        def handle_endtag(self, tag):
            if tag == "table":
                self.cur = None
            elif tag in ("td", "th"):
                self.in_cell = False

        def handle_data(self, data):
            if self.cur and self.in_cell:
                self.tables[self.cur][-1][-1] += data

    p = P()
    p.feed(page)
    return p.tables


def read_table_in_chromium(html_file: Path, tmp_path: Path, table: str = "standings") -> list[list[str]]:
    """Load ``html_file`` in headless chromium and parse the rows of ``<table id=table>``
    from the DOM it renders."""
    res = subprocess.run(
        [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'chrome-profile'}", "--dump-dom", html_file.resolve().as_uri()],
        capture_output=True, text=True, timeout=120,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    assert "<svg" in res.stdout or "No milestone" in res.stdout
    return html_tables(res.stdout)[table]


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


def test_an_output_that_cannot_be_a_season_folder_is_one_line(tmp_path):
    """From a new user's trial: ``aoe run ... --output FILE`` ended in a FileExistsError
    traceback (and ``--output FILE/sub`` in NotADirectoryError). Now one line names the path."""
    (tmp_path / "afile").write_text("x")
    for out, why in ((tmp_path / "afile", "it is a file, not a folder"),
                     (tmp_path / "afile" / "sub", "a part of the path is a file, not a folder")):
        res = subprocess.run([sys.executable, "-m", "aoe_tui.cli", "run", str(REPO / "seasons" / "demo.toml"),
                              "--output", str(out), "--headless"], capture_output=True, text=True, cwd=REPO,
                             timeout=120)
        assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
        assert res.stderr.strip() == f"aoe: error: {out}: cannot be the season folder: {why}", res.stderr
    assert (tmp_path / "afile").read_text() == "x"


def test_season_folder_is_held_by_one_runner_and_freed_by_sigkill(tmp_path):
    """A second runner on a live season folder is refused (naming the pid); SIGKILL frees it."""
    import signal
    import subprocess
    import sys

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
    _held_again_within(tmp_path, 5, "the killed holder's lock was not freed")


def test_the_lock_file_stays_after_a_normal_exit_harmless_and_documented(tmp_path):
    """A runner that ends normally leaves ``.aoe-run.lock`` (its pid inside) in a folder it
    wrote to; the lock itself is gone with the process, so the next run holds the folder at
    once. docs/formats.md's season folder table names the file and says so."""
    import subprocess
    import sys

    from aoe_tui.commands.season import RUN_LOG
    from aoe_tui.season.runner import LOCK_FILE, hold_season_folder

    run = subprocess.run(
        [sys.executable, "-c",
         "import sys; from pathlib import Path; from aoe_tui.season.runner import hold_season_folder\n"
         "with hold_season_folder(Path(sys.argv[1])):\n    (Path(sys.argv[1]) / 'season.jsonl').write_text('')\n"
         "import os; print(os.getpid())",
         str(tmp_path / "season")], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert run.returncode == 0, run.stderr
    lock = tmp_path / "season" / LOCK_FILE
    assert lock.read_text() == f"{run.stdout.strip()}\n"
    with hold_season_folder(tmp_path / "season"):  # no SeasonBusyError: the process took its flock along
        assert lock.read_text() == f"{os.getpid()}\n"
    table = (REPO / "docs" / "formats.md").read_text().split("**Ours: the season folder**", 1)[1].split("\n\n", 2)[1]
    row = next(line for line in table.splitlines() if line.startswith(f"| `{LOCK_FILE}` |"))
    assert "flock" in row and "harmless" in row and "stale" in row
    assert f"| `{RUN_LOG}` |" in table


def test_season_folder_is_freed_by_sigkill_while_a_forked_export_runs(tmp_path):
    """The standings export after a heat runs in a forked child (runtime/procs.call_forked_idle)
    that outlives a runner killed with SIGKILL: it must not keep the folder's lock (an inherited
    fd of the flock), or the resume is refused until the idle-priority child ends."""
    import signal
    import subprocess
    import sys


    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import asyncio, os, sys, time, types; from pathlib import Path\n"
         "from aoe_tui.season.runner import SeasonRunner, hold_season_folder\n"
         "def write(folder, state):\n    print('export', os.getpid(), flush=True); time.sleep(30)\n"
         "async def main(d):\n"
         "    me = types.SimpleNamespace(write_exports=write, dir=d, state={}, cluster=None, say=print,\n"
         "                               _export_lock=asyncio.Lock(), _export_waiting=True)\n"
         "    await SeasonRunner._export_in_background(me)\n"
         "with hold_season_folder(Path(sys.argv[1])):\n    asyncio.run(main(Path(sys.argv[1])))",
         str(tmp_path)],
        stdout=subprocess.PIPE, text=True,
    )
    child = None
    try:
        word, pid = holder.stdout.readline().split()
        assert word == "export"
        child = int(pid)
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        _held_again_within(tmp_path, 5, "the export child still holds the season folder")
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        if child is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)


# --------------------------------------------------------------------------- cups across arenas

FB, DJQ, TS = "first-build", "durable-job-queue", "traffic-surge"
#: three arenas with 4, 5 and 6 milestones; service-up and host-reboot are ids of several
MULTI = {
    FB: ["service-up", "write-read", "service-restart", "host-reboot"],
    DJQ: ["service-up", "recover-accepted", "process-new", "worker-restart", "host-reboot"],
    TS: ["baseline-ready", "priority-first-surge", "bounded-optional", "recover-peak", "restart-under-load",
         "host-reboot"],
}


def _st(terr, rank, points, durable=None, ms=None, usage=None):
    """Stats of one entrant in one heat; ``usage`` = (input tokens, output tokens, micro-USD) or None."""
    tin, tout, cost = usage or (0, 0, 0)
    return se.EntrantHeatStats(territory=terr, rank=rank, points=points, passed=len(ms or {}), durable_at_ms=durable,
                               milestones=ms or {}, input_tokens=tin, output_tokens=tout, cost_microusd=cost,
                               usage_recorded=usage is not None)


def _counted(w, r, h, ranks, winner, stats):
    w.append(se.AttemptStarted(round=r, heat=h, attempt=1, folder=f"round-{r}/heat-{h}/attempt-1"))
    w.append(se.AttemptFinished(round=r, heat=h, attempt=1, outcome="counted", winner=winner, ranks=ranks,
                                stats=stats))
    w.append(se.HeatFinished(round=r, heat=h, attempt=1, ranks=ranks, winner=winner))


def _multi_season_log(path: Path, arenas: bool = True) -> None:
    """Four rounds cycling first-build → durable-job-queue → traffic-surge → first-build,
    entrants alpha, bravo, charlie, delta. ``arenas=False`` writes the same heats as a
    one-arena log of before cups across arenas (no arena list, rounds name no arena).

    * r1 first-build: alpha wins (durable 5 s), bravo durable 9 s, charlie 1 milestone; usage all;
    * r2 durable-job-queue: h1 alpha and delta **tie** (rank 1 both, no winner), 2 milestones each,
      delta records **no usage**; h2 bravo vs charlie **void** (retry, then void);
    * r3 traffic-surge: charlie wins (durable 40 s), bravo durable 60 s, delta nothing; **no usage at all**;
    * r4 first-build: bravo wins (durable 7 s), alpha durable 11 s, delta 2 milestones; usage all.
    """
    fb_all = lambda t: dict(zip(MULTI[FB], t))  # noqa: E731
    ts_all = lambda t: dict(zip(MULTI[TS], t))  # noqa: E731
    started = _started(("alpha", "bravo", "charlie", "delta")).model_copy(update={
        "milestones": MULTI[FB],
        "arenas": [se.SeasonArena(id=a, display_name=a.replace("-", " ").title(), milestones=ms)
                   for a, ms in MULTI.items()] if arenas else []})
    on = (lambda a: a) if arenas else (lambda a: None)
    with SeasonLogWriter(path, clock=lambda: 1000) as w:
        w.append(started)
        w.append(se.RoundScheduled(round=1, heats=[se.HeatSeats(heat=1, seats=["alpha", "bravo", "charlie"])],
                                   byes=["delta"], arena=on(FB)))
        _counted(w, 1, 1, {"alpha": 1, "bravo": 2, "charlie": 3}, "alpha", {
            "alpha": _st("builder-one", 1, 100, 5000, fb_all((1000, 2000, 3000, 5000)), (100, 10, 1000)),
            "bravo": _st("builder-two", 2, 100, 9000, fb_all((2000, 4000, 6000, 9000)), (200, 20, 2000)),
            "charlie": _st("builder-three", 3, 10, None, {"service-up": 3000}, (50, 5, 500))})
        w.append(se.RoundFinished(round=1))
        w.append(se.RoundScheduled(round=2, heats=[se.HeatSeats(heat=1, seats=["alpha", None, "delta"]),
                                                    se.HeatSeats(heat=2, seats=["bravo", "charlie", None])],
                                   arena=on(DJQ)))
        _counted(w, 2, 1, {"alpha": 1, "delta": 1}, None, {
            "alpha": _st("queue-one", 1, 30, None, {"service-up": 4000, "recover-accepted": 8000}, (300, 30, 3000)),
            "delta": _st("queue-three", 1, 30, None, {"service-up": 5000, "recover-accepted": 7000})})
        w.append(se.AttemptStarted(round=2, heat=2, attempt=1, folder="round-2/heat-2/attempt-1"))
        w.append(se.AttemptFinished(round=2, heat=2, attempt=1, outcome="retry", failure_source="provider"))
        w.append(se.AttemptStarted(round=2, heat=2, attempt=2, folder="round-2/heat-2/attempt-2"))
        w.append(se.AttemptFinished(round=2, heat=2, attempt=2, outcome="void", failure_source="provider",
                                    stats={"bravo": _st("queue-one", 1, 100, 1000, {"service-up": 1}, (9, 9, 9))}))
        w.append(se.HeatFinished(round=2, heat=2, attempt=None, void=True))
        w.append(se.RoundFinished(round=2))
        w.append(se.RoundScheduled(round=3, heats=[se.HeatSeats(heat=1, seats=["charlie", "bravo", "delta"])],
                                   byes=["alpha"], arena=on(TS)))
        _counted(w, 3, 1, {"charlie": 1, "bravo": 2, "delta": 3}, "charlie", {
            "charlie": _st("surge-one", 1, 100, 40000, ts_all((1000, 10000, 20000, 30000, 35000, 40000))),
            "bravo": _st("surge-two", 2, 100, 60000, ts_all((2000, 12000, 25000, 40000, 50000, 60000))),
            "delta": _st("surge-three", 3, 0)})
        w.append(se.RoundFinished(round=3))
        w.append(se.RoundScheduled(round=4, heats=[se.HeatSeats(heat=1, seats=["bravo", "alpha", "delta"])],
                                   byes=["charlie"], arena=on(FB)))
        _counted(w, 4, 1, {"bravo": 1, "alpha": 2, "delta": 3}, "bravo", {
            "bravo": _st("builder-one", 1, 100, 7000, fb_all((1500, 3000, 5000, 7000)), (400, 40, 4000)),
            "alpha": _st("builder-two", 2, 100, 11000, fb_all((3000, 5000, 8000, 11000)), (500, 50, 5000)),
            "delta": _st("builder-three", 3, 20, None, {"service-up": 6000, "write-read": 9000}, (10, 1, 100))})
        w.append(se.RoundFinished(round=4))
        w.append(se.SeasonFinished(champions=["bravo"], rounds=4))


@pytest.fixture
def multi_state(tmp_path):
    _multi_season_log(tmp_path / "season.jsonl")
    return reduce_season(read_season_log(tmp_path / "season.jsonl"))


def _bd(arena, heats=0, wins=0, times=(), points=0, passes=0, available=0, usage=0, tokens=None, ms=None):
    """The expected :class:`ArenaBreakdown` (tokens = (in, out, cost) or None = unknown)."""
    from aoe_tui.season.season_standings import ArenaBreakdown, median_ms

    tin, tout, cost = tokens or (None, None, None)
    return ArenaBreakdown(
        arena=arena, heats=heats, wins=wins, durable=len(times), points=points, durable_times_ms=list(times),
        median_durable_ms=median_ms(list(times)), milestone_passes=passes, milestones_available=available,
        coverage=round(passes / available, 4) if available else 0.0, usage_recorded=usage, input_tokens=tin,
        output_tokens=tout, cost_microusd=cost,
        cost_per_durable_microusd=cost // len(times) if cost is not None and times else None, milestone_ms=ms or {},
        cost_source="adapter" if usage else None)  # logs before [prices]: a recorded cost is the adapter's


def test_standings_per_arena_breakdown_exact(multi_state):
    """Every figure of every entrant on every arena, by hand; the overall coverage weighs
    each heat by its own arena's milestones; a void heat charges nobody; a tie has no winner."""
    rows = {r.entrant: r for r in season_standings(multi_state)}
    assert [r.entrant for r in season_standings(multi_state)] == ["bravo", "alpha", "charlie", "delta"]
    assert [r.rank for r in season_standings(multi_state)] == [1, 2, 3, 4]
    for r in rows.values():
        assert list(r.arenas) == [FB, DJQ, TS]  # season arena order, also arenas never raced
        assert r.milestone_ms == {}  # arenas share milestone ids: no season-wide time-to-milestone
    a, b, c, d = (rows[e] for e in ("alpha", "bravo", "charlie", "delta"))
    assert a.arenas == {
        FB: _bd(FB, 2, 1, (5000, 11000), 200, 8, 8, 2, (600, 60, 6000),
                {"host-reboot": 8000, "service-restart": 5500, "service-up": 2000, "write-read": 3500}),
        DJQ: _bd(DJQ, 1, 0, (), 30, 2, 5, 1, (300, 30, 3000), {"recover-accepted": 8000, "service-up": 4000}),
        TS: _bd(TS),
    }
    assert a.arenas[FB].cost_per_durable_microusd == 3000 and a.arenas[FB].median_durable_ms == 8000  # (5000 + 11000) / 2
    assert b.arenas == {
        FB: _bd(FB, 2, 1, (9000, 7000), 200, 8, 8, 2, (600, 60, 6000),
                {"host-reboot": 8000, "service-restart": 5500, "service-up": 1750, "write-read": 3500}),
        DJQ: _bd(DJQ),  # the void heat is not counted: nothing on this arena
        TS: _bd(TS, 1, 0, (60000,), 100, 6, 6, 0, None,
                dict(zip(MULTI[TS], (2000, 12000, 25000, 40000, 50000, 60000)))),
    }
    assert c.arenas == {
        FB: _bd(FB, 1, 0, (), 10, 1, 4, 1, (50, 5, 500), {"service-up": 3000}),
        DJQ: _bd(DJQ),
        TS: _bd(TS, 1, 1, (40000,), 100, 6, 6, 0, None,
                dict(zip(MULTI[TS], (1000, 10000, 20000, 30000, 35000, 40000)))),
    }
    assert d.arenas == {
        FB: _bd(FB, 1, 0, (), 20, 2, 4, 1, (10, 1, 100), {"service-up": 6000, "write-read": 9000}),
        DJQ: _bd(DJQ, 1, 0, (), 30, 2, 5, 0, None, {"recover-accepted": 7000, "service-up": 5000}),
        TS: _bd(TS, 1, 0, (), 0, 0, 6, 0, None),
    }
    # overall: coverage = passes ÷ Σ each heat's arena milestones (alpha 10/13, not 10/12)
    overall = {e: (r.heats, r.wins, r.durable, r.points, r.coverage, r.median_durable_ms, r.usage_recorded,
                   r.input_tokens, r.output_tokens, r.cost_microusd, r.cost_per_durable_microusd, r.mean_rank)
               for e, r in rows.items()}
    assert overall == {
        "alpha": (3, 1, 2, 230, 0.7692, 8000, 3, 900, 90, 9000, 4500, 1.333),
        "bravo": (3, 1, 3, 300, 1.0, 9000, 2, None, None, None, None, 1.667),
        "charlie": (2, 1, 1, 110, 0.7, 40000, 1, None, None, None, None, 2.0),
        "delta": (3, 0, 0, 50, 0.2667, None, 1, None, None, None, None, 2.333),
    }


def test_multi_arena_ratings_are_one_per_entrant_and_one_arena_figures_unchanged(multi_state, tmp_path):
    """One OpenSkill rating per entrant over every heat of every arena (the same as the same
    heats in a one-arena log); a one-arena log keeps its season-wide ``milestone_ms`` and
    its coverage over the one arena's milestones, as before cups across arenas."""
    rows = {r.entrant: r for r in season_standings(multi_state)}
    heats = [{"alpha": 1, "bravo": 2, "charlie": 3}, {"alpha": 1, "delta": 1}, {"charlie": 1, "bravo": 2, "delta": 3},
             {"bravo": 1, "alpha": 2, "delta": 3}]
    ratings = rate_heats(["alpha", "bravo", "charlie", "delta"], heats)
    for e, r in rows.items():
        assert (r.mu, r.sigma, r.ordinal) == (round(ratings[e].mu, 4), round(ratings[e].sigma, 4),
                                              round(ratings[e].ordinal, 4))
    _multi_season_log(tmp_path / "single.jsonl", arenas=False)
    single = reduce_season(read_season_log(tmp_path / "single.jsonl"))
    assert not single.multi_arena
    one = {r.entrant: r for r in season_standings(single)}
    for e in rows:
        assert (one[e].mu, one[e].sigma, one[e].wins, one[e].durable, one[e].points, one[e].heats) == \
            (rows[e].mu, rows[e].sigma, rows[e].wins, rows[e].durable, rows[e].points, rows[e].heats)
        assert list(one[e].arenas) == [FB]
    # every heat counted on the one arena's 4 milestones: alpha 10 / (3 × 4)
    assert one["alpha"].coverage == 0.8333 and one["alpha"].arenas[FB].coverage == 0.8333
    # season-wide medians, mixing what the one-arena log calls service-up (1000, 4000, 3000)
    assert one["alpha"].milestone_ms == {"host-reboot": 8000, "recover-accepted": 8000, "service-restart": 5500,
                                         "service-up": 3000, "write-read": 3500}


def test_multi_arena_exports_json_csv_md(multi_state):
    from aoe_tui.export.standings_files import COLUMNS

    data = json.loads(render(multi_state, "json"))
    assert data["arena"] == FB
    assert [(a["id"], a["milestones"]) for a in data["arenas"]] == list(MULTI.items())
    assert [(h["round"], h["heat"], h["arena"]) for h in data["heats"]] == [
        (1, 1, FB), (2, 1, DJQ), (2, 2, DJQ), (3, 1, TS), (4, 1, FB)]
    alpha = next(s for s in data["standings"] if s["entrant"] == "alpha")
    assert list(alpha["arenas"]) == [FB, DJQ, TS] and alpha["coverage"] == 0.7692
    assert alpha["arenas"][DJQ] == {
        "arena": DJQ, "heats": 1, "wins": 0, "durable": 0, "points": 30, "durable_times_ms": [],
        "median_durable_ms": None, "milestone_passes": 2, "milestones_available": 5, "coverage": 0.4,
        "usage_recorded": 1, "input_tokens": 300, "output_tokens": 30, "cost_microusd": 3000,
        "cost_per_durable_microusd": None, "milestone_ms": {"recover-accepted": 8000, "service-up": 4000},
        "cache_read_tokens": None, "cache_write_tokens": None, "cost_source": "adapter"}
    # CSV: exactly the documented columns, one row per entrant
    text = render(multi_state, "csv")
    assert text.splitlines()[0] == ",".join(COLUMNS)
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [(r["entrant"], r["coverage"], r["input_tokens"]) for r in rows] == [
        ("bravo", "1.0", ""), ("alpha", "0.7692", "900"), ("charlie", "0.7", ""), ("delta", "0.2667", "")]
    # who computed the cost: only where a cost is shown (the others had a heat without usage)
    assert [(r["entrant"], r["cost_microusd"], r["cost_source"]) for r in rows] == [
        ("bravo", "", ""), ("alpha", "9000", "adapter"), ("charlie", "", ""), ("delta", "", "")]
    md = render(multi_state, "md")
    main, per_arena = md.split("\n## Per arena\n")
    assert "| 2 | alpha |  | 3 | 1 | 2 | 230 | 77% | 0:08.0 |" in main and "Tie-break order" in main
    lines = per_arena.strip().splitlines()
    assert lines[0] == ("Arenas: first-build (4 milestones), durable-job-queue (5 milestones), "
                        "traffic-surge (6 milestones).")
    assert lines[2] == ("| entrant | arena | heats | wins | durable | points | milestones | coverage | "
                        "median durable | tokens in/out | cost | cost/durable |")
    body = lines[4:]
    assert len(body) == 12  # 4 entrants × 3 arenas, entrants in standings order
    assert body[0] == "| bravo | first-build | 2 | 1 | 2 | 200 | 8/8 | 100% | 0:08.0 | 600/60 | $0.0060 | $0.0030 |"
    assert body[2] == "| bravo | traffic-surge | 1 | 0 | 1 | 100 | 6/6 | 100% | 1:00.0 | — | — | — |"
    assert body[4] == "| alpha | durable-job-queue | 1 | 0 | 0 | 30 | 2/5 | 40% | — | 300/30 | $0.0030 | — |"
    assert body[10] == "| delta | durable-job-queue | 1 | 0 | 0 | 30 | 2/5 | 40% | — | — | — | — |"
    # never raced there: no coverage
    assert body[5] == "| alpha | traffic-surge | 0 | 0 | 0 | 0 | 0/0 | — | — | — | — | — |"


def test_one_arena_exports_have_no_breakdown_sections(tmp_path):
    """A one-arena season: Markdown ends with the tie-break line, the HTML names its one arena
    with one chart and no breakdown or arena marks, the CSV header is :data:`COLUMNS`."""
    from aoe_tui.export.standings_files import COLUMNS

    log = tmp_path / "season.jsonl"
    _season_log(log)
    state = reduce_season(read_season_log(log))
    md = render(state, "md")
    assert md.endswith("rating ordinal, cost, id.\n") and "Per arena" not in md
    page = render(state, "html")
    assert "<p>Arena <b>first-build</b> · format" in page and 'id="milestone-chart"' in page
    assert "arena-breakdown" not in page and "data-arena" not in page and "milestone-chart-" not in page
    assert "<h3>Round 1</h3>" in page
    assert render(state, "csv").splitlines()[0] == ",".join(COLUMNS)
    data = json.loads(render(state, "json"))
    assert [a["id"] for a in data["arenas"]] == ["first-build"] and data["heats"][0]["arena"] == "first-build"
    assert list(data["standings"][0]["arenas"]) == ["first-build"]


def test_multi_arena_html_page(multi_state, tmp_path):
    """The page names the arenas, marks each round's and heat's arena in the bracket, has the
    per-arena table (read back in chromium too) and one time-to-milestone chart per arena."""
    import re

    from aoe_tui.export.standings_files import BREAKDOWN_HEADS

    page = render(multi_state, "html")
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "") and "https://" not in page
    assert re.search(r"<p>3 arenas <b [^>]*>first-build</b>, <b [^>]*>durable-job-queue</b>, "
                     r"<b [^>]*>traffic-surge</b> · format", page)
    for r, arena in ((1, FB), (2, DJQ), (3, TS), (4, FB)):
        assert f"<h3>Round {r} · {arena}</h3>" in page
    assert re.findall(r'<div class="heat" data-arena="([^"]+)">', page) == [FB, DJQ, DJQ, TS, FB]
    tables = html_tables(page)
    assert set(tables) == {"standings", "arena-breakdown"}
    brk = tables["arena-breakdown"]
    assert tuple(brk[0]) == BREAKDOWN_HEADS and len(brk) == 13
    assert brk[7] == ["charlie", "first-build", "1", "0", "0", "10", "1/4", "25%", "—", "50/5", "$0.0005", "—"]
    assert brk[9] == ["charlie", "traffic-surge", "1", "1", "1", "100", "6/6", "100%", "0:40.0", "—", "—", "—"]
    charts = {m.group(1): m.group(0) for m in re.finditer(r'<svg id="milestone-chart-([a-z-]+)".*?</svg>', page)}
    assert list(charts) == [FB, DJQ, TS] and 'id="milestone-chart"' not in page
    # each chart: its own arena's milestones on the x axis, only entrants that passed one there
    assert ">recover-accepted</text>" in charts[DJQ] and ">recover-accepted</text>" not in charts[FB]
    assert all(f">{m}</text>" in charts[TS] for m in MULTI[TS])
    legend = lambda svg: re.findall(r'fill="#[0-9a-f]{6}">([a-z]+)</text>', svg)  # noqa: E731
    assert legend(charts[TS]) == ["bravo", "charlie"]
    assert legend(charts[DJQ]) == ["alpha", "delta"]
    assert legend(charts[FB]) == ["bravo", "alpha", "charlie", "delta"]
    # a league's champion (season_finished's rank 1) has its 🏆 as a knockout's does
    assert [r[1] for r in tables["standings"][1:]] == ["bravo 🏆", "alpha", "charlie", "delta"]
    (tmp_path / "standings.html").write_text(page)
    assert read_table_in_chromium(tmp_path / "standings.html", tmp_path, "arena-breakdown") == brk


def _held_again_within(folder, seconds: float, why: str) -> None:
    """``hold_season_folder(folder)`` succeeds within ``seconds`` (polled every 50 ms)."""
    import time

    from aoe_tui.season.runner import SeasonBusyError, hold_season_folder

    deadline = time.monotonic() + seconds
    while True:
        try:
            with hold_season_folder(folder):
                return
        except SeasonBusyError:
            assert time.monotonic() < deadline, why
            time.sleep(0.05)


def test_a_knockout_waiting_on_a_void_heat_says_so_in_every_export_and_the_tui(tmp_path):
    """Issue #30 item 1: a knockout whose round 1 heat of c, e and f went void waits on it:
    nobody of that heat is shown out or advanced, and the JSON, CSV, Markdown, HTML and the
    TUI's season model say ``waiting on heat r1h2 (void)``; once it is re-run nothing waits."""
    from aoe_tui.domain.display import summarize_season_event
    from aoe_tui.tui.seasonmodel import SeasonModel, standings_cells

    log = tmp_path / "season.jsonl"
    started = _started(("a", "b", "c", "d", "e", "f")).model_copy(update={"format": {"kind": "knockout", "advance": 1}})
    with SeasonLogWriter(log, clock=lambda: 1000) as w:
        w.append(started)
        w.append(se.RoundScheduled(round=1, heats=[se.HeatSeats(heat=1, seats=["a", "b", "d"]),
                                                    se.HeatSeats(heat=2, seats=["c", "e", "f"])]))
        w.append(se.AttemptStarted(round=1, heat=1, attempt=1, folder="round-1/heat-1/attempt-1"))
        w.append(se.AttemptFinished(round=1, heat=1, attempt=1, outcome="counted", winner="b",
                                    ranks={"b": 1, "a": 2, "d": 3}))
        w.append(se.HeatFinished(round=1, heat=1, attempt=1, ranks={"b": 1, "a": 2, "d": 3}, winner="b"))
        w.append(se.AttemptStarted(round=1, heat=2, attempt=1, folder="round-1/heat-2/attempt-1"))
        w.append(se.AttemptFinished(round=1, heat=2, attempt=1, outcome="void", failure_source="provider",
                                    detail="injected"))
        w.append(se.HeatFinished(round=1, heat=2, attempt=None, void=True, ranks={"c": 1, "e": 1, "f": 1}))
        w.append(se.SeasonStopped(reason="void_heat", detail="waiting on heat r1h2 (void): c, e, f", round=1, heat=2))
    records = read_season_log(log)
    state = reduce_season(records)
    label = "waiting on heat r1h2 (void)"
    # aoe watch's line says how the wait ends (not "the same aoe run resumes": that waits again)
    assert summarize_season_event(records[-1].event) == (
        "season waiting: waiting on heat r1h2 (void): c, e, f; aoe run --retry-void re-runs it")
    data = json.loads(render(state, "json"))
    assert data["waiting"] == [{"round": 1, "heat": 2, "entrants": ["c", "e", "f"], "label": label}]
    rows = {r["entrant"]: r for r in data["standings"]}
    assert {e for e, r in rows.items() if r["waiting"] == label} == {"c", "e", "f"}
    assert [h["waiting"] for h in data["heats"]] == [False, True]
    table = list(csv.DictReader(io.StringIO(render(state, "csv"))))
    assert {r["entrant"]: r["waiting"] for r in table} == {"a": "", "b": "", "d": "", "c": label, "e": label, "f": label}
    md = render(state, "md")
    assert f"**{label}**: c, e, f neither advanced nor eliminated" in md and f"| c ({label}) |" in md
    page = render(state, "html")
    assert f"<b>{label}</b>: c, e, f neither advanced nor eliminated" in page and f"void · {label}" in page
    model = SeasonModel()
    for rec in records:
        model.apply(rec)
    assert "WAITING on heat r1h2 (void)" in model.status_line(0, {}) and "--retry-void" in model.status_line(0, {})
    heat_row = next(r for r in model.rows({}) if r.key == "r1h2")
    assert (heat_row.state, heat_row.winner) == ("void", "waiting")
    assert {r.entrant for r in model.standings() if "(waiting)" in standings_cells(r)[1]} == {"c", "e", "f"}
    # --retry-void reopened it: nothing waits any more
    with SeasonLogWriter(log, clock=lambda: 2000) as w:
        w.append(se.SeasonResumed(pid=1))
        w.append(se.HeatsReopened(heats=[(1, 2)], max_attempts=2, season_sha256="0" * 64))
    state = reduce_season(read_season_log(log))
    data = json.loads(render(state, "json"))
    assert data["waiting"] == [] and all(r["waiting"] is None for r in data["standings"])


def test_season_rules_record_digests_changes_and_a_bad_record_is_one_line(tmp_path):
    """Issue #30 item 2 (pure parts): a package's digests leave out README.md and hidden
    files, follow symlinks; ``changes`` names each changed, added or removed file by its
    shown path; a season-rules.json that is not a record is one line naming it."""
    import hashlib

    from aoe_tui.errors import AoeError
    from aoe_tui.referee.verifier import VERIFY_KIT
    from aoe_tui.season.rules_record import RULES_FILE, changes, load_rules, rules_of, write_rules

    pkg = tmp_path / "arenas" / "x"
    (pkg / "verify").mkdir(parents=True)
    (pkg / "arena.toml").write_text("points = 10\n")
    (pkg / "verify" / "y.sh").write_text("exit 1\n")
    (pkg / "README.md").write_text("docs\n")
    (pkg / ".hidden").write_text("x\n")
    (pkg / "adapters").mkdir()
    (pkg / "adapters" / "oracle.sh").symlink_to(pkg / "verify" / "y.sh")
    before, paths = rules_of([("x", pkg)], {"adapter oracle (x)": "ab" * 32, "adapter none (x)": None}, {})
    assert set(before) == {"arena x: arena.toml", "arena x: verify/y.sh", "arena x: adapters/oracle.sh",
                           "adapter oracle (x)", "verifier toolkit"}
    assert before["verifier toolkit"] == hashlib.sha256(VERIFY_KIT.read_bytes()).hexdigest()
    write_rules(tmp_path, before, paths)
    assert load_rules(tmp_path)["files"] == before
    (pkg / "verify" / "y.sh").write_text("exit 0\n")
    (pkg / "verify" / "z.sh").write_text("exit 0\n")
    (pkg / "README.md").write_text("other docs\n")
    now, now_paths = rules_of([("x", pkg)], {}, {})
    assert changes(before, now, now_paths, paths) == [
        "adapter oracle (x) removed", f"{pkg / 'adapters' / 'oracle.sh'} changed", f"{pkg / 'verify' / 'y.sh'} changed",
        f"{pkg / 'verify' / 'z.sh'} added"]
    (tmp_path / RULES_FILE).write_text("{not json")
    with pytest.raises(AoeError, match=f"^{tmp_path / RULES_FILE}: not a season rules record") as err:
        load_rules(tmp_path)
    assert "\n" not in str(err.value)


def _league_two_heats(path: Path, finished: bool = True) -> None:
    """A finished league of a, b, c: two rounds of one heat in which ``a`` wins durable at
    1000 ms and 3001 ms (its median is 2000 ms; the upper median would be 3001 ms)."""
    with SeasonLogWriter(path, clock=lambda: 1000) as w:
        w.append(_started(("a", "b", "c")))
        for rnd, durable in ((1, 1000), (2, 3001)):
            w.append(se.RoundScheduled(round=rnd, heats=[se.HeatSeats(heat=1, seats=["a", "b", "c"])]))
            folder = f"round-{rnd}/heat-1/attempt-1"
            w.append(se.AttemptStarted(round=rnd, heat=1, attempt=1, folder=folder))
            w.append(se.AttemptFinished(
                round=rnd, heat=1, attempt=1, outcome="counted", winner="a", ranks={"a": 1, "b": 2, "c": 3},
                stats={"a": _stats("builder-one", 1, 30, durable, {"service-up": durable // 2}),
                       "b": _stats("builder-two", 2, 10, None, {"service-up": 3000}),
                       "c": _stats("builder-three", 3, 0)},
                bundle=f"{folder}/x.match.json"))
            w.append(se.HeatFinished(round=rnd, heat=1, attempt=1, ranks={"a": 1, "b": 2, "c": 3}, winner="a"))
            w.append(se.RoundFinished(round=rnd))
        if finished:
            w.append(se.SeasonFinished(champions=["a"], rounds=1))


def test_a_league_champion_is_flagged_in_every_export(tmp_path):
    """A league's champion (season_finished names its rank 1) has ``champion`` true in the
    standings rows, the CSV, the JSON and the Markdown, as a knockout's does; nobody else has."""
    log = tmp_path / "season.jsonl"
    _league_two_heats(log)
    state = reduce_season(read_season_log(log))
    assert state.info.format["kind"] == "league" and state.finished.champions == ["a"]
    assert {r.entrant: r.champion for r in season_standings(state)} == {"a": True, "b": False, "c": False}
    csv_rows = {r["entrant"]: r["champion"] for r in csv.DictReader(io.StringIO(render(state, "csv")))}
    assert csv_rows == {"a": "True", "b": "False", "c": "False"}
    data = json.loads(render(state, "json"))
    assert {r["entrant"]: r["champion"] for r in data["standings"]} == {"a": True, "b": False, "c": False}
    assert "| 1 | a 🏆 |" in render(state, "md")
    # before the season finishes nobody is champion yet
    _league_two_heats(tmp_path / "open.jsonl", finished=False)
    open_state = reduce_season(read_season_log(tmp_path / "open.jsonl"))
    assert not any(r.champion for r in season_standings(open_state))


def test_median_durable_is_the_true_median():
    """An even count's median is the mean of the two middle times (rounded down to a whole
    ms), not the upper one; an odd count's is the middle one."""
    from aoe_tui.season.season_standings import median_ms

    assert median_ms([]) is None
    assert median_ms([3001, 1000]) == 2000
    assert median_ms([1000, 2001]) == 1500
    assert median_ms([5, 1, 3]) == 3
    assert median_ms([4, 1, 3, 2]) == 2


def test_standings_and_exports_show_the_true_median(tmp_path):
    log = tmp_path / "season.jsonl"
    _league_two_heats(log)
    state = reduce_season(read_season_log(log))
    a = next(r for r in season_standings(state) if r.entrant == "a")
    assert a.median_durable_ms == 2000 and a.milestone_ms == {"service-up": 1000}
    assert a.arenas["first-build"].median_durable_ms == 2000
    row = next(r for r in csv.DictReader(io.StringIO(render(state, "csv"))) if r["entrant"] == "a")
    assert row["median_durable_ms"] == "2000"
    assert "| 0:02.0 |" in render(state, "md")
