"""Season and standings screens, ``aoe watch`` tailing, the quit dialog and ``aoe demo``'s
host check — on a deterministic season folder built from real fixture logs
(:func:`tui_fixtures.build_season_folder`), driven through Textual's Pilot."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

import pytest
from rich.text import Text
from textual.widgets import DataTable

from aoe_tui.replay.season_log import read_season_log
from aoe_tui.replay.season_reducer import reduce_season
from aoe_tui.tui.app import AoeApp
from aoe_tui.tui.live import LiveFeed
from aoe_tui.tui.screens import HeatScreen, ReplayScreen
from aoe_tui.tui.season_screens import QuitScreen, SeasonScreen, StandingsScreen
from aoe_tui.tui.app import watch_app
from aoe_tui.tui.seasonmodel import SeasonModel, sort_standings
from aoe_tui.tui.watch import SeasonTailer

from tui_fixtures import SEASON_NOW_OFFSET_MS, SEASON_T0, build_season_folder


@pytest.fixture(scope="module")
def season_dir(tmp_path_factory) -> Path:
    return build_season_folder(tmp_path_factory.mktemp("tui-season"))


def frozen(app: AoeApp) -> AoeApp:
    app.now_ms = lambda: SEASON_T0 + SEASON_NOW_OFFSET_MS
    app.monotonic = lambda: 1000.0  # live heat clocks do not tick
    return app


def rows_by_key(app: AoeApp) -> dict:
    return {r.key: r for r in app.season.rows(app.heats)}


async def test_bracket_states_winners_times(season_dir):
    app = frozen(watch_app(season_dir, follow=False))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert isinstance(app.screen, SeasonScreen)
        rows = rows_by_key(app)
        assert rows["r1h1"].state == "finished" and rows["r1h1"].winner == "deepseek" and rows["r1h1"].time == "00:43"
        assert rows["r1h2a1#0"].state == "retried" and "provider" in rows["r1h2a1#0"].entrants
        assert rows["r1h2a2#1"].state == "finished"
        assert rows["r1bye"].entrants == "oracle"
        assert rows["r2h1a1#0"].state == "interrupted"
        assert rows["r2h1a1#0"].folder == "round-2/heat-1/attempt-1.interrupted-1"
        assert rows["r2h1"].state == "racing" and rows["r2h1"].running and rows["r2h1"].winner == "(deepseek leads)"
        assert rows["r2h2"].state == "scheduled" and not rows["r2h2"].running
        status = str(app.screen.query_one("#season-status").text)
        # 12:34 of wall time minus the 7 s between the last record before season_resumed and it
        assert status.startswith("clock 12:27 · round 2 · heats 2/4 finished · 1 racing"), status
        table = app.screen.query_one("#bracket", DataTable)
        assert table.row_count == len(rows)
        # the cursor starts on the running heat
        assert app.screen.selected_row().key == "r2h1"


async def test_enter_opens_live_heat_and_replays(season_dir):
    app = frozen(watch_app(season_dir, follow=False))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("enter")  # the running heat: followed → live heat screen
        await pilot.pause()
        assert isinstance(app.screen, HeatScreen) and not isinstance(app.screen, ReplayScreen)
        assert app.screen.heat == "round-2/heat-1/attempt-1"
        assert app.screen.model.world.territories["builder-two"].milestone_points > 0
        await pilot.press("escape")
        assert isinstance(app.screen, SeasonScreen)
        table = app.screen.query_one("#bracket", DataTable)
        table.move_cursor(row=1)  # round 1 heat 1: finished → replay at its end from the folder
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, ReplayScreen) and not app.screen.playing and app.screen.cursor.at_end
        assert "WINNER builder-two (deepseek) · 100 points" in str(app.screen.query_one("#winner").render())
        await pilot.press("escape", "escape")  # never past the season screen
        assert isinstance(app.screen, SeasonScreen)
        table.move_cursor(row=table.get_row_index("r2h2"))  # scheduled: nothing to open
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, SeasonScreen)


async def test_standings_sort_and_read_only(season_dir):
    app = frozen(watch_app(season_dir, follow=False))
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("s")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, StandingsScreen)
        table = screen.query_one("#standings", DataTable)

        def order() -> list[str]:
            return [table.coordinate_to_cell_key((i, 0)).row_key.value for i in range(table.row_count)]

        assert order()[0] == "deepseek" and len(order()) == 7
        ordinal = {r.entrant: r.ordinal for r in app.season.standings()}
        await pilot.press("r")
        assert [ordinal[e] for e in order()] == sorted(ordinal.values(), reverse=True)
        await pilot.press("r")  # again: reversed
        assert [ordinal[e] for e in order()] == sorted(ordinal.values())
        await pilot.press("k")  # tokens: unknown (oracle, no heat) last
        assert order()[0] == "deepseek-queue-builder" and order()[-1] == "oracle"
        await pilot.press("p")
        assert order()[:2] == ["deepseek", "luna-queue-builder"]
        await pilot.press("o")
        assert order()[0] == "deepseek"
        # watch is read-only: no export key
        assert not screen.check_action("export", ())
        assert "e" not in app.active_bindings or not app.active_bindings["e"].enabled
        await pilot.press("e")
        assert not list(season_dir.glob("standings.*"))
        await pilot.press("escape")
        assert isinstance(app.screen, SeasonScreen)


async def test_export_key_writes_four_files(season_dir, tmp_path):
    folder = tmp_path / "season"
    shutil.copytree(season_dir, folder)
    feed = LiveFeed()
    SeasonTailer(folder, feed).poll()
    app = frozen(AoeApp.season_view(feed, folder, read_only=False))
    notes = []
    async with app.run_test(size=(120, 40)) as pilot:
        app.notify = lambda msg, **kw: notes.append(msg)  # type: ignore[method-assign]
        await pilot.press("s", "e")
        await pilot.pause()
    names = sorted(p.name for p in folder.glob("standings.*"))
    assert names == ["standings.csv", "standings.html", "standings.json", "standings.md"]
    assert notes and all(n in notes[-1] for n in names) and str(folder) in notes[-1]
    data = json.loads((folder / "standings.json").read_text())
    assert [r["entrant"] for r in data["standings"]][0] == "deepseek"


def test_sort_standings_unknown_last(season_dir):
    model = SeasonModel()
    for rec in read_season_log(season_dir / "season.jsonl"):
        model.apply(rec)
    rows = model.standings()
    for key in ("median", "cost", "tokens"):
        for rev in (False, True):
            out = sort_standings(rows, key, rev)
            assert out[-1].entrant == "oracle" or key == "median"
    assert [r.entrant for r in sort_standings(rows, "rank")] == [r.entrant for r in rows]


@pytest.mark.parametrize("inotify", [True, False], ids=["inotify", "polling"])
async def test_watch_follows_appended_records(season_dir, tmp_path, monkeypatch, inotify):
    """Tailing: records appended after the catch-up (complete lines only) show up. With
    inotify they arrive without any timed poll (the safety poll is pushed out of the
    test); without it (another OS, no inotify instance left) the app polls."""
    import aoe_tui.tui.app as app_module
    from aoe_tui.tui.watch import FolderWatch

    if inotify:
        monkeypatch.setattr(app_module, "TAIL_SAFETY_POLL_S", 3600.0)
    else:
        monkeypatch.setattr(FolderWatch, "open", classmethod(lambda cls: None))
    folder = tmp_path / "season"
    shutil.copytree(season_dir, folder)
    log = folder / "round-2/heat-1/attempt-1/events.jsonl"
    from aoe_tui.replay.matchdir import load_match

    from tui_fixtures import SEED

    from aoe_tui.replay.log import dump_record

    rest = [r for r in load_match(SEED).records if r.sequence > 104]
    app = watch_app(folder, follow=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.4)
        model = app.heats["round-2/heat-1/attempt-1"]
        assert model.applied == 105
        with open(log, "a", encoding="utf-8") as fh:
            fh.write("".join(dump_record(r) + "\n" for r in rest[:-1]))
            fh.write(dump_record(rest[-1])[:20])  # torn: not consumed yet
        for _ in range(40):
            await pilot.pause(0.1)
            if model.applied == 105 + len(rest) - 1:
                break
        assert model.applied == 105 + len(rest) - 1
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(dump_record(rest[-1])[20:] + "\n")
        for _ in range(40):
            await pilot.pause(0.1)
            if model.world.match_state.value == "finished":
                break
        assert model.world.winner == "builder-two"
        assert rows_by_key(app)["r2h1"].state == "finishing"
        # nothing was written by the watcher
        assert not list(folder.glob("standings.*"))


class FakeHost:
    """Stands in for the engine thread (unit test of the quit dialog only)."""

    def __init__(self) -> None:
        self.lines = ["05:00:00 r1h1a1: provisioning 3 territories (container)"]
        self.done = False
        self.error = None
        self.state = None


@pytest.mark.parametrize("choice,key", [("stop", "s"), ("detach", "d"), (None, "escape")])
async def test_quit_asks_stop_or_detach(season_dir, choice, key):
    feed = LiveFeed()
    SeasonTailer(season_dir, feed).poll()
    app = frozen(AoeApp.season_view(feed, season_dir, host=FakeHost(), read_only=False))
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("q")
        await pilot.pause()
        assert isinstance(app.screen, QuitScreen)
        await pilot.press(key)
        await pilot.pause()
        if choice is None:
            assert isinstance(app.screen, SeasonScreen)
            assert "provisioning 3 territories" in str(app.screen.query_one("#season-log").text)
            app.host.done = True
            await pilot.press("q")
    assert app.return_value == (choice or "finished")


@pytest.mark.parametrize("width", [80, 120])
async def test_the_quit_question_is_not_wrapped(season_dir, width):
    """From a new user's trial: at 120 columns the detach line wrapped ``aoe-run.log;`` onto a
    line of its own at the wrong indent. Every line of the question fits the dialog."""
    feed = LiveFeed()
    SeasonTailer(season_dir, feed).poll()
    app = frozen(AoeApp.season_view(feed, season_dir, host=FakeHost(), read_only=False))
    async with app.run_test(size=(width, 30)) as pilot:
        await pilot.press("q")
        await pilot.pause()
        text = app.screen.query_one("#quit-text")
        lines = str(text.render()).splitlines()
        assert len(lines) == 8 and text.size.height == len(lines), (text.size, lines)
        assert max(map(len, lines)) <= text.size.width, lines
        await pilot.press("escape")
        app.host.done = True
        await pilot.press("q")


async def test_ctrl_c_key_asks_like_q_and_closes_a_finished_view(season_dir):
    """Ctrl+C in the TUI is a key (the terminal is raw): it only showed Textual's "Press
    ctrl+q to quit" toast, though the README says Ctrl+C stops the season. It now asks
    stop / detach / cancel while the season runs and closes the view once it is done."""
    feed = LiveFeed()
    SeasonTailer(season_dir, feed).poll()
    app = frozen(AoeApp.season_view(feed, season_dir, host=FakeHost(), read_only=False))
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert isinstance(app.screen, QuitScreen)
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, SeasonScreen)
        app.host.done = True
        await pilot.press("ctrl+c")
    assert app.return_value == "finished"


async def test_quit_buttons_with_mouse(season_dir):
    feed = LiveFeed()
    SeasonTailer(season_dir, feed).poll()
    app = frozen(AoeApp.season_view(feed, season_dir, host=FakeHost(), read_only=False))
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("q")
        await pilot.pause()
        await pilot.click("#quit-detach")
        await pilot.pause()
    assert app.return_value == "detach"


def test_watch_rejects_non_season_folder(tmp_path, capsys):
    from aoe_tui.cli import main

    assert main(["watch", str(tmp_path)]) != 0
    err = capsys.readouterr().err
    assert "not a season folder" in err and "Traceback" not in err
    (tmp_path / "season.jsonl").write_text('{"schema_version":1,"sequence":0}\n')
    assert main(["watch", str(tmp_path)]) != 0
    err = capsys.readouterr().err
    assert "season.jsonl:1" in err and "Traceback" not in err


def test_demo_refuses_without_root(monkeypatch, capsys):
    from aoe_tui.cli import main

    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert main(["demo", "--headless"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs root" in err[0] and "aoe doctor" in err[0]
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert main(["demo", "--headless"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "systemd-nspawn" in err[0] and "aoe doctor" in err[0]


def test_season_model_matches_reducer(season_dir):
    recs = read_season_log(season_dir / "season.jsonl")
    model = SeasonModel()
    for rec in recs:
        model.apply(rec)
    ref = reduce_season(recs)
    assert model.progress() == (len(ref.finished_heats()), len(ref.heats()))
    assert model.running_folders() == ["round-2/heat-1/attempt-1"]
    # the 7 s between the last record of the first run session and season_resumed do not count
    assert model.clock_ms(SEASON_T0 + SEASON_NOW_OFFSET_MS) == SEASON_NOW_OFFSET_MS - 7_000


async def test_bracket_cursor_follows_new_running_heat_until_moved(season_dir):
    """The cursor jumps to a heat that starts running/racing — unless the user moved it."""
    from aoe_tui.domain import season_events as se
    from aoe_tui.replay.matchdir import load_match

    from tui_fixtures import SEED

    recs = read_season_log(season_dir / "season.jsonl")
    first_r2 = next(i for i, r in enumerate(recs) if isinstance(r.event, se.AttemptStarted) and r.event.round == 2)
    feed = LiveFeed()
    app = frozen(AoeApp.season_view(feed, season_dir))
    app.monotonic = lambda: 100.0

    def cursor_key() -> str:
        table = app.screen.query_one("#bracket", DataTable)
        return table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value

    async with app.run_test(size=(120, 40)) as pilot:
        for rec in recs[:first_r2]:
            feed.post_season_record(rec)
        await pilot.pause(0.1)
        assert cursor_key() == "r1"
        feed.post_season_record(recs[first_r2])  # round 2 heat 1 starts (provisioning)
        await pilot.pause(0.1)
        assert cursor_key() == "r2h1"
        await pilot.press("up", "up")
        assert cursor_key() == "r1bye"
        seed = load_match(SEED)
        feed.open_heat("round-2/heat-1/attempt-1", arena=seed.arena, title="r2h1")
        for rec in seed.records[:20]:  # it starts racing: the user's choice wins
            feed.post_record(rec, "round-2/heat-1/attempt-1")
        for rec in recs[first_r2 + 1:]:  # resumed, interrupted, re-started
            feed.post_season_record(rec)
        await pilot.pause(0.1)
        assert cursor_key() == "r1bye"


def test_status_line_fits_narrow_widths(season_dir):
    """Labels shorten, then secondary parts go; the clock stays first."""
    model = SeasonModel()
    for rec in read_season_log(season_dir / "season.jsonl"):
        model.apply(rec)
    now = SEASON_T0 + SEASON_NOW_OFFSET_MS
    wide = model.status_line(now, {})
    assert wide == "clock 12:27 · round 2 · heats 2/4 finished · 1 provisioning"
    assert model.status_line(now, {}, width=len(wide)) == wide
    assert model.status_line(now, {}, width=40) == "12:27 · r2 · 2/4 heats · 1 prov"
    assert model.status_line(now, {}, width=25) == "12:27 · r2 · 2/4 heats"
    assert model.status_line(now, {}, width=15) == "12:27 · 2/4 heats"


async def test_a_ticking_time_cell_repaints_one_row_not_the_table(season_dir):
    """The running heat's Time cell changes every second in every spectator's bracket:
    the change repaints that row only, and a heat event that changes no row repaints
    nothing in the table."""
    from textual.geometry import Region

    from aoe_tui.tui.season_screens import BracketTable

    app = frozen(watch_app(season_dir, follow=False))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        table = app.screen.query_one("#bracket", BracketTable)
        asked: list = []
        refresh = table.refresh

        def spy(*regions, **kw):
            asked.append(regions)
            return refresh(*regions, **kw)

        table.refresh = spy
        table.set_cell("r2h1", "Time", Text("09:59"))
        assert str(table.get_cell("r2h1", "Time")) == "09:59"
        assert len(asked) == 1 and len(asked[0]) == 1
        region = asked[0][0]
        assert isinstance(region, Region) and region.height == 1
        assert region.y == table.get_row_index("r2h1") + 1 - table.scroll_offset.y  # under the header row
        await pilot.pause()
        assert "09:59" in "\n".join(line.text for line in table.render_lines(Region(0, 0, 120, 20)))
        asked.clear()
        screen = app.screen
        screen._fill_table(app)  # a heat event that changes no row
        assert asked == []
        shown = screen._rows["r2h1"]
        screen._rows["r2h1"] = dataclasses.replace(shown, time="09:59")
        screen._fill_table(app)  # the shown Time differs from the model's: that row only
        assert len(asked) == 1 and asked[0][0].height == 1 and screen._rows["r2h1"] == shown


async def test_season_screen_wakes_once_a_second_and_not_when_hidden(season_dir):
    """The season screen's clock timer is set for the next second of the season clock;
    its progress bar runs no timer of its own; a hidden season screen has no timer."""
    from aoe_tui.tui.season_screens import SEASON_TICK_SLACK_S, SeasonProgress, SeasonScreen

    app = watch_app(season_dir)
    now = [1_700_000_000_250]
    app.now_ms = lambda: now[0]
    app.monotonic = lambda: 1000.0
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.2)
        screen = app.screen
        assert isinstance(screen, SeasonScreen)
        clock = app.season.clock_ms(now[0], 1000.0)
        assert screen._timer._interval == pytest.approx((1000 - clock % 1000) / 1000 + SEASON_TICK_SLACK_S)
        assert not app.screen.query_one(SeasonProgress)._timers
        app.action_help()
        await pilot.pause(0.1)
        assert screen._timer is None
        app.pop_screen()
        await pilot.pause(0.1)
        assert screen._timer is not None


@pytest.mark.parametrize("read_only", [True, False], ids=["watch", "runner"])
async def test_help_lists_what_q_and_e_do_in_this_view(season_dir, read_only):
    """A spectator (read-only view) is not told that q stops the season or that e exports;
    the runner's own TUI is."""
    from aoe_tui.tui.screens import HelpScreen

    feed = LiveFeed()
    SeasonTailer(season_dir, feed).poll()
    app = frozen(AoeApp.season_view(feed, season_dir, read_only=read_only))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        text = str(app.screen.query_one("#help-text").render())
    assert ("quit: stop or detach" in text) is not read_only
    assert ("export to the season folder" in text) is not read_only
    assert ("export (aoe run only)" in text) is read_only


@pytest.mark.parametrize("spectator", [True, False], ids=["spectator", "local"])
async def test_palette_offers_no_screenshot_to_a_spectator(season_dir, monkeypatch, spectator):
    """An SSH spectator's screenshot would be written on the server, in a scratch folder
    it cannot reach: the palette does not offer it there; a local watcher keeps it."""
    if spectator:
        monkeypatch.setenv("AOE_SPECTATOR", "1")
    else:
        monkeypatch.delenv("AOE_SPECTATOR", raising=False)
    app = frozen(watch_app(season_dir))
    async with app.run_test(size=(120, 40)):
        titles = [c.title for c in app.get_system_commands(app.screen)]
    assert "Help" in titles and "Quit" in titles
    assert ("Screenshot" in titles) is not spectator


# --------------------------------------------------------------------------- cups across arenas


@pytest.fixture(scope="module")
def multi_dir(tmp_path_factory) -> Path:
    from tui_fixtures import build_multi_arena_season_folder

    return build_multi_arena_season_folder(tmp_path_factory.mktemp("tui-multi"))


def applied(folder: Path) -> SeasonModel:
    model = SeasonModel()
    for rec in read_season_log(folder / "season.jsonl"):
        model.apply(rec)
    return model


ARENA_IDS = ["first-build", "durable-job-queue", "traffic-surge"]


async def test_multi_arena_bracket_and_header_name_the_arenas(multi_dir):
    """Each round row names the arena its heats race (short form when narrow); the header
    names the arenas and fits 80 columns; the season log says where a round races."""
    app = frozen(watch_app(multi_dir, follow=False))
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        rows = rows_by_key(app)
        assert [rows[f"r{r}"].entrants for r in (1, 2, 3, 4)] == [
            "arena first-build", "arena durable-job-queue", "arena traffic-surge", "arena first-build"]
        assert rows["r2h1"].entrants == "glm vs deepseek vs oracle" and rows["r2h1"].winner == "oracle"
        narrow = {r.key: r for r in app.season.rows(app.heats, narrow=True)}
        assert narrow["r3"].entrants == "traffic-surge"
        header = app.screen.query_one("#season-header")
        assert str(header.text) == ("season cross-cup · 2026-W38 · league · 3 arenas: first-build, "
                                    "durable-job-queue, traffic-surge · 4 entrants")
        table = app.screen.query_one("#bracket", DataTable)
        assert str(table.get_cell("r2", "Entrants / detail")) == "arena durable-job-queue"
        assert "round 4 scheduled on first-build: h1: kimi vs deepseek vs glm" in str(
            app.screen.query_one("#season-log").text)
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        assert str(header.text) == "cross-cup · 2026-W38 · league · 3 arenas: first-build, +2 · 4 entrants"
        assert header.content_size.width == 78
        assert str(table.get_cell("r2", "Entrants / detail")) == "durable-job-queue"


def test_multi_arena_header_shortens_to_fit_and_one_arena_stays():
    from aoe_tui.domain import season_events as se

    from tui_fixtures import MULTI_ARENAS

    model = SeasonModel()
    arenas = [se.SeasonArena(id=i, milestones=ms) for i, _n, _c, ms in MULTI_ARENAS]
    arenas += [se.SeasonArena(id="zero-downtime-rollout"), se.SeasonArena(id="primary-failover")]
    model.apply(se.SeasonRecord(sequence=0, time_unix_ms=0, event=se.SeasonStarted(
        season="cup", label="W1", arena_id="first-build", format={"kind": "knockout"}, entrants=["a", "b"], seed=1,
        heat_size=3, min_heat_size=2, max_attempts=1, season_sha256="0" * 64, arenas=arenas)))
    full = ("season cup · W1 · knockout · 5 arenas: first-build, durable-job-queue, traffic-surge, "
            "zero-downtime-rollout, primary-failover · 2 entrants")
    assert model.title == model.header() == model.header(len(full)) == full
    assert model.header(len(full) - 1) == full[len("season "):]
    two = "cup · W1 · knockout · 5 arenas: first-build, durable-job-queue, +3 · 2 entrants"
    assert model.header(len(two)) == two and len(two) == 79
    assert model.header(78) == "cup · W1 · knockout · 5 arenas: first-build, +4 · 2 entrants"
    assert model.header(50) == "cup · W1 · knockout · 5 arenas · 2 entrants"
    assert model.header(30) == "cup · W1 · 5 arenas"
    assert model.header(5) == "cup · W1 · 5 arenas"  # the shortest; the screen cuts the rest
    one = SeasonModel()
    one.apply(se.SeasonRecord(sequence=0, time_unix_ms=0, event=se.SeasonStarted(
        season="cup", label="W1", arena_id="first-build", format={"kind": "league"}, entrants=["a", "b"], seed=1,
        heat_size=3, min_heat_size=2, max_attempts=1, season_sha256="0" * 64)))
    assert one.header(10) == one.title == "season cup · W1 · league · arena first-build · 2 entrants"


def test_one_arena_bracket_and_log_name_no_arena(season_dir):
    """Neither an old log (rounds name no arena) nor a new one-arena log (its one arena
    listed, every round naming it) shows arenas in the bracket, the log or the header."""
    from aoe_tui.domain import season_events as se

    model = applied(season_dir)
    rows = {r.key: r for r in model.rows({})}
    assert rows["r1"].entrants == "" and rows["r2"].entrants == ""
    assert model.heat_arena("round-2/heat-1/attempt-1") is None
    assert any(line.endswith("round 2 scheduled: h1: kimi vs deepseek vs glm; "
                             "h2: glm-queue-builder vs deepseek-queue-builder vs luna-queue-builder; byes oracle")
               for line in model.log)
    new = SeasonModel()
    for i, event in enumerate([
        se.SeasonStarted(season="cup", label="W1", arena_id="first-build", format={"kind": "league"},
                         entrants=["a", "b"], seed=1, heat_size=3, min_heat_size=2, max_attempts=1,
                         season_sha256="0" * 64, arenas=[se.SeasonArena(id="first-build", milestones=["service-up"])]),
        se.RoundScheduled(round=1, heats=[se.HeatSeats(heat=1, seats=["a", "b"])], arena="first-build"),
    ]):
        new.apply(se.SeasonRecord(sequence=i, time_unix_ms=i, event=event))
    assert not new.state.multi_arena and new.state.rounds[1].arena == "first-build"
    assert [r.entrants for r in new.rows({}, narrow=True)] == ["", "a vs b"]
    assert new.heat_arena("round-1/heat-1/attempt-1") is None
    assert list(new.log)[-1].endswith("round 1 scheduled: h1: a vs b")
    assert new.header(20) == "season cup · W1 · league · arena first-build · 2 entrants"


async def test_multi_arena_heat_screens_name_their_arena(multi_dir):
    """The live heat screen and a replay opened from the bracket name the heat's arena in
    the header (also after stepping back, which resets the replayed model)."""
    app = frozen(watch_app(multi_dir, follow=False))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert app.screen.selected_row().key == "r4h1"
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, HeatScreen) and not isinstance(app.screen, ReplayScreen)
        text = str(app.screen.query_one("#heat-header").text)
        assert "running  leader builder-two  arena first-build  cross-cup · 2026-W38 · round 4" in text
        await pilot.press("escape")
        table = app.screen.query_one("#bracket", DataTable)
        table.move_cursor(row=table.get_row_index("r2h1"))
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, ReplayScreen) and app.screen.heat == "replay:round-2/heat-1/attempt-2"
        assert "finished  arena durable-job-queue  cross-cup" in str(app.screen.query_one("#heat-header").text)
        await pilot.press("left")
        await pilot.pause()
        assert app.screen.model.season_arena == "durable-job-queue"
        assert "arena durable-job-queue" in str(app.screen.query_one("#heat-header").text)


async def test_one_arena_heat_screen_names_no_arena(season_dir):
    app = frozen(watch_app(season_dir, follow=False))
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, HeatScreen) and app.screen.model.season_arena is None
        text = str(app.screen.query_one("#heat-header").text)
        assert "leader builder-two  fixture-cup · 2026-W37 · round 2 heat 1" in text and "arena" not in text


async def test_multi_arena_standings_breakdown_toggle(multi_dir):
    """``a`` shows one row per entrant and arena (entrants in the current sort order), ``a``
    again the standings; fewer columns on an 80-column terminal."""
    from aoe_tui.tui.seasonmodel import ARENA_COLUMNS, ARENA_COLUMNS_NARROW, STANDINGS_COLUMNS

    app = frozen(watch_app(multi_dir, follow=False))
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("s")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, StandingsScreen) and screen.check_action("toggle_arenas", ())
        table = screen.query_one("#standings", DataTable)

        def keys() -> list[str]:
            return [table.coordinate_to_cell_key((i, 0)).row_key.value for i in range(table.row_count)]

        def cells(key: str) -> list[str]:
            return [str(c) for c in table.get_row(key)]

        def columns() -> tuple[str, ...]:
            return tuple(str(c.label) for c in table.columns.values())

        assert keys() == ["oracle", "deepseek", "kimi", "glm"] and columns() == STANDINGS_COLUMNS
        await pilot.press("a")
        assert columns() == ARENA_COLUMNS
        assert keys() == [f"{e}/{a}" for e in ("oracle", "deepseek", "kimi", "glm") for a in ARENA_IDS]
        assert cells("oracle/first-build") == ["1", "oracle", "first-build", "0", "0", "0",
                                               "—", "—", "—", "—", "—"]  # never raced there
        assert cells("oracle/durable-job-queue") == ["", "", "durable-job-queue", "1", "1", "1", "100%", "03:47",
                                                     "171k/6.7k", "$0.0077", "$0.0077"]
        assert cells("oracle/traffic-surge") == ["", "", "traffic-surge", "1", "1", "1", "100%", "00:20", "n/a", "n/a",
                                                 "n/a"]  # the oracle smoke log recorded no usage
        assert cells("glm/durable-job-queue") == ["", "", "durable-job-queue", "1", "0", "0", "20%", "—", "118k/6.4k",
                                                  "$0.0907", "—"]
        header = str(screen.query_one("#standings-header").text)
        assert header.startswith("Standings per arena · season cross-cup") and header.endswith("sorted by #")
        await pilot.press("p")  # sorted by points: kimi (80) before glm (75) either way; deepseek 110
        assert [k.split("/")[0] for k in keys()][::3] == ["oracle", "deepseek", "kimi", "glm"]
        await pilot.press("p")  # reversed
        assert [k.split("/")[0] for k in keys()][::3] == ["glm", "kimi", "deepseek", "oracle"]
        assert cells("glm/first-build")[:3] == ["4", "glm", "first-build"]
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        assert columns() == ARENA_COLUMNS_NARROW
        assert cells("oracle/durable-job-queue") == ["", "durable-job-queue", "1", "1", "1", "100%", "03:47", "$0.0077"]
        assert str(screen.query_one("#standings-header").text) == \
            "Per arena · cross-cup · 2026-W38 · 3 arenas · 3/4 heats · sorted by Points (reversed)"
        await pilot.press("a")
        assert columns() == STANDINGS_COLUMNS and keys() == ["glm", "kimi", "deepseek", "oracle"]


async def test_one_arena_standings_have_no_breakdown_key(season_dir):
    from aoe_tui.tui.seasonmodel import STANDINGS_COLUMNS

    app = frozen(watch_app(season_dir, follow=False))
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("s")
        await pilot.pause()
        screen = app.screen
        assert not screen.check_action("toggle_arenas", ())
        assert "a" not in app.active_bindings or not app.active_bindings["a"].enabled
        await pilot.press("a")
        table = screen.query_one("#standings", DataTable)
        assert tuple(str(c.label) for c in table.columns.values()) == STANDINGS_COLUMNS and table.row_count == 7
        assert not screen.per_arena


@pytest.mark.parametrize("multi", [True, False], ids=["multi-arena", "one-arena"])
async def test_help_lists_the_breakdown_key_in_a_cup_across_arenas(season_dir, multi_dir, multi):
    from aoe_tui.tui.screens import HelpScreen, help_text

    app = frozen(watch_app(multi_dir if multi else season_dir, follow=False))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        text = str(app.screen.query_one("#help-text").render())
    assert ("per-arena breakdown" in text) is multi
    assert help_text(True) == help_text(True, multi_arena=False)
    assert help_text(True, multi_arena=True).replace("  a            per-arena breakdown (a cup across arenas)\n",
                                                     "") == help_text(True)


# --------------------------------------------------------------------------- a stopped season


@pytest.fixture(scope="module")
def stopped_dir(tmp_path_factory) -> Path:
    from tui_fixtures import build_stopped_season_folder

    return build_stopped_season_folder(tmp_path_factory.mktemp("tui-stopped"))


def bracket_text(app: AoeApp) -> str:
    from textual.geometry import Region

    table = app.screen.query_one("#bracket", DataTable)
    return "\n".join(line.text for line in table.render_lines(Region(0, 0, app.size.width, table.row_count + 1)))


async def test_a_stopped_season_says_so_and_its_clock_stands_still(stopped_dir):
    """From a new user's trial: ``aoe watch`` of a season whose ``aoe run`` was stopped
    (Ctrl+C: ``season_stopped``) looked as if it still ran — its clock ticked on, the status
    line said "1 provisioning, 1 finishing" and the bracket kept its ▶ markers. Now the
    status line says STOPPED and how to resume, the clock stands at the stop however late
    the view looks, the cut-off attempts are interrupted, nothing is marked running and the
    screen no longer wakes every second."""
    from tui_fixtures import STOPPED_AT

    app = watch_app(stopped_dir, follow=False)
    now = [STOPPED_AT + 8_000]
    app.now_ms = lambda: now[0]
    app.monotonic = lambda: 1000.0
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, SeasonScreen)

        def status() -> str:
            return str(screen.query_one("#season-status").text)

        # 84 s of the first run session (to its last record before season_resumed) and 28 s
        # of the second, to its season_stopped
        stopped = "clock 01:52 · STOPPED by SIGINT · round 2 · heats 2/4 finished · the same aoe run resumes it"
        assert app.season.clock_ms(now[0]) == 112_000 and status() == stopped
        now[0] += 3_600_000  # an hour later: the clock has not moved
        screen.refresh_view()
        assert app.season.clock_ms(now[0]) == 112_000 and status() == stopped
        rows = rows_by_key(app)
        assert not [k for k, r in rows.items() if r.running] and app.season.running_folders() == []
        assert rows["r2"].state == "stopped"
        assert rows["r2h1"].state == rows["r2h2"].state == "interrupted"
        assert rows["r2h1"].folder == "round-2/heat-1/attempt-1"  # enter opens the aborted heat
        cut = rows["r2h1a1#1"]
        assert cut.state == "interrupted" and cut.entrants == "cut off by the stop; the resume re-runs it"
        assert rows["r2h2a1#0"].state == "interrupted"
        shown = bracket_text(app)
        assert "▶" not in shown and "interrupted" in shown and "provisioning" not in shown
        assert "finishing" not in shown and "racing" not in shown
        assert screen._timer is None  # nothing moves: no wake-ups
        assert screen.selected_row().key == "r2h1"  # the cursor starts on the first heat cut off
        log = str(screen.query_one("#season-log").text)
        assert "stopped (SIGINT, pid 4343); aborted r2h1a1, r2h2a1; the same aoe run resumes" in log
        # the aborted heat opens at its last clock
        table = screen.query_one("#bracket", DataTable)
        table.move_cursor(row=table.get_row_index("r2h1"))
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, HeatScreen) and app.screen.heat == "round-2/heat-1/attempt-1"
        assert app.screen.model.world.match_state.value == "aborted"


def test_a_stopped_status_line_fits_narrow_widths_and_names_the_stop(stopped_dir):
    """STOPPED stays next to the clock at every width; the round goes first, then the
    resume hint (an 80-column terminal's status line, 64 columns, keeps it). A full disk
    and the TUI's own stop say so."""
    from aoe_tui.domain import season_events as se
    from tui_fixtures import STOPPED_AT

    recs = read_season_log(stopped_dir / "season.jsonl")
    model = SeasonModel()
    for rec in recs:
        model.apply(rec)
    now = STOPPED_AT + 99_000
    assert model.status_line(now, {}, width=80) == "01:52 · STOPPED by SIGINT · r2 · 2/4 heats · same aoe run resumes"
    assert model.status_line(now, {}, width=64) == "01:52 · STOPPED by SIGINT · 2/4 heats · same aoe run resumes"
    assert model.status_line(now, {}, width=40) == "01:52 · STOPPED by SIGINT · 2/4 heats"
    for reason, said in (("disk_full", "STOPPED: disk full"), ("quit", "STOPPED from the TUI"),
                         ("SIGTERM", "STOPPED by SIGTERM")):
        other = SeasonModel()
        for rec in recs[:-1]:
            other.apply(rec)
        other.apply(se.SeasonRecord(sequence=recs[-1].sequence, time_unix_ms=recs[-1].time_unix_ms,
                                    event=se.SeasonStopped(reason=reason, pid=1)))
        line = other.status_line(now, {})
        assert line.startswith(f"clock 01:52 · {said} · round 2"), line
        assert line.endswith("free space, then the same aoe run resumes it" if reason == "disk_full"
                             else "heats 2/4 finished · the same aoe run resumes it"), line


async def test_a_resumed_season_runs_on_from_where_its_clock_stood(tmp_path):
    """The same ``aoe run`` resumes the stopped season an hour later: the clock goes on from
    where it stood at the stop (the stopped hour is not counted, and it never steps back),
    the status line no longer says STOPPED, the attempts the stop cut off stay interrupted
    (kept as ``*.interrupted-K``; not running even before the resume marks them) and the
    re-runs are the running rows (▶) again; the screen ticks again."""
    from aoe_tui.replay.matchdir import load_match

    from tui_fixtures import RESUMED_AT, SEED, STOPPED_AT, build_stopped_season_folder

    folder = build_stopped_season_folder(tmp_path, resumed=True)
    recs = read_season_log(folder / "season.jsonl")
    stop = next(i for i, r in enumerate(recs) if r.event.kind == "season_stopped")
    feed = LiveFeed()
    app = AoeApp.season_view(feed, folder)
    now = [STOPPED_AT + 5_000]
    app.now_ms = lambda: now[0]
    app.monotonic = lambda: now[0] / 1000  # the wall and monotonic clocks move together
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen

        def status() -> str:
            return str(screen.query_one("#season-status").text)

        for rec in recs[:stop + 1]:
            feed.post_season_record(rec)
        await pilot.pause(0.1)
        assert status().startswith("clock 01:52 · STOPPED by SIGINT") and screen._timer is None
        now[0] = RESUMED_AT - 1_000
        assert app.season.clock_ms(now[0]) == 112_000  # stood still for the hour it was stopped
        now[0] = RESUMED_AT + 2_000
        feed.post_season_record(recs[stop + 1])  # season_resumed: the cut-off attempts are not re-run yet
        await pilot.pause(0.1)
        assert recs[stop + 1].event.kind == "season_resumed"
        assert app.season.clock_ms(now[0]) == 112_000 + 2_000
        assert status() == "clock 01:54 · round 2 · heats 2/4 finished"
        assert app.season.log[-1].startswith("01:52  resumed (pid 4444)")  # the log's stamps: the same clock
        assert app.season.running_folders() == [] and not any(r.running for r in rows_by_key(app).values())
        assert screen._timer is not None  # the clock runs again
        now[0] = recs[-1].time_unix_ms  # the view sees the runner's records as they are written
        for rec in recs[stop + 2:]:
            feed.post_season_record(rec)
        seed = load_match(SEED)
        feed.open_heat("round-2/heat-1/attempt-1", arena=seed.arena, title="r2h1")
        for rec in seed.records[:61]:
            feed.post_record(rec, "round-2/heat-1/attempt-1")
        await pilot.pause(0.1)
        now[0] = RESUMED_AT + 60_000
        screen.refresh_view()
        assert app.season.clock_ms(now[0]) == 112_000 + 60_000
        assert status() == "clock 02:52 · round 2 · heats 2/4 finished · 1 provisioning, 1 racing"
        rows = rows_by_key(app)
        assert rows["r2"].state == "racing"
        assert [(k, rows[k].state) for k in rows if rows[k].running] == [
            ("r2h1", "racing"), ("r2h1a1#2", "racing"), ("r2h2", "provisioning"), ("r2h2a1#1", "provisioning")]
        assert rows["r2h1a1#1"].state == "interrupted"
        assert rows["r2h1a1#1"].entrants == "kept as round-2/heat-1/attempt-1.interrupted-2"
        assert rows["r2h2a1#0"].entrants == "kept as round-2/heat-2/attempt-1.interrupted-1"
        assert bracket_text(app).count("▶") == 4
        assert sorted(app.season.running_folders()) == ["round-2/heat-1/attempt-1", "round-2/heat-2/attempt-1"]
