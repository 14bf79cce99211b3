"""TUI behaviour: view-models on real fixture logs, Pilot tests of every key binding,
the live feed seam, and every fixture opening in ``aoe replay``."""

from __future__ import annotations

import threading

import pytest
from textual.widgets import Input

from aoe_tui.cli import main as aoe_main
from aoe_tui.replay.matchdir import load_match
from aoe_tui.replay.reducer import reduce_match
from aoe_tui.tui.app import DARK_THEME, LIGHT_THEME, AoeApp
from aoe_tui.tui.live import LiveFeed, RecordsPending
from aoe_tui.tui.screens import SPEEDS, GotoScreen, HeatScreen, HelpScreen, ReplayScreen
from aoe_tui.domain import events as ev
from aoe_tui.domain.display import fmt_cost
from aoe_tui.domain.events import MatchState
from aoe_tui.tui.viewmodel import ArenaView, HeatModel, ReplayCursor, panel_view
from aoe_tui.tui.widgets import EventFeed, TerritoryPanel, WinnerBanner, render_scoreboard

from tui_fixtures import SEED, TIMER_REASON, all_fixture_paths, timer_finish_match


@pytest.fixture(scope="module")
def seed():
    return load_match(SEED)


# --------------------------------------------------------------------------- view-models


def test_seed_panels_at_end(seed):
    model = HeatModel(ArenaView.from_arena(seed.arena))
    model.extend(seed.records)
    assert model.world == seed.world  # same reducer, incrementally
    two = panel_view(model, "builder-two")
    assert (two.agent, two.adapter, two.model, two.effort) == (
        "deepseek", "opencode", "opencode-go/deepseek-v4.1-flash", "high")
    assert two.winner and two.points == 100
    assert [r.status for r in two.ladder] == ["passed"] * 4
    assert all(r.passed_ms is not None for r in two.ladder)
    assert two.ladder[-1].passed_ms == two.durable_at_ms == 43224
    for tid in ("builder-one", "builder-three"):
        pv = panel_view(model, tid)
        assert not any(r.status == "passed" for r in pv.ladder)
        assert pv.ladder[0].status == "failed" and pv.ladder[0].failures == 14
        assert "Connection reset" in pv.ladder[0].detail
        assert [r.status for r in pv.ladder[1:]] == ["pending"] * 3
    # usage_charged in the seed carries tokens but null cost → tokens shown, cost n/a
    assert two.tokens_in == 10571 and two.cost_microusd is None and fmt_cost(None) == "n/a"
    assert model.winner_line().startswith("WINNER builder-two (deepseek) · 100 points")


def test_feed_collapses_repeated_failures(seed):
    model = HeatModel(ArenaView.from_arena(seed.arena))
    model.extend(seed.records)
    texts = [e.text for e in model.feed]
    assert "builder-one failed service-up ×14: curl: (56) Recv failure: Connection reset by peer" in texts
    assert sum("builder-one failed service-up" in t for t in texts) == 1
    assert not any("verifying service-up" in t for t in texts)  # evaluation starts are not repeated


def test_cost_not_zero_without_usage():
    loaded = timer_finish_match()
    model = HeatModel(ArenaView.from_arena(loaded.arena))
    model.extend(loaded.records)
    for tid in model.territory_ids():
        pv = panel_view(model, tid)
        seen = [r for r in loaded.records if r.event.kind == "usage_charged" and r.event.agent == pv.agent]
        if not any(r.event.cost_microusd is not None for r in seen):
            assert pv.cost_microusd is None
        if not any(r.event.input_tokens is not None for r in seen):
            assert pv.tokens_in is None


def test_timer_finish_partial_ladders():
    loaded = timer_finish_match()
    assert loaded.world.finish_reason == TIMER_REASON
    model = HeatModel(ArenaView.from_arena(loaded.arena))
    model.extend(loaded.records)
    statuses = {t: [r.status for r in panel_view(model, t).ladder] for t in model.territory_ids()}
    assert statuses["queue-one"][:2] == ["passed", "failed"]
    assert statuses["queue-three"][-1] == "killed"  # its verifier was still running at the finish
    assert all("pending" in s or "killed" in s for s in statuses.values())
    assert "match timer expired" in model.winner_line()


def test_killed_milestones_are_not_evaluating_after_the_finish():
    """A check still in flight at the finish is killed (rules: "killed at the finish"): the
    world keeps ``evaluating: true`` (upstream's shape), but after the heat ends the ladder,
    the scoreboard and ``aoe match run``'s matrix say killed/not evaluated, never evaluating;
    before the finish the same milestone is evaluating."""
    from aoe_tui.commands.match import matrix_lines
    from aoe_tui.tui.widgets import render_panel

    loaded = timer_finish_match()
    assert loaded.world.territories["queue-three"].milestones[
        [m for m in loaded.world.territories["queue-three"].milestones][-1]].evaluating
    before = HeatModel(ArenaView.from_arena(loaded.arena))
    before.extend(loaded.records[:-2])  # up to the deadline, not finished yet
    assert panel_view(before, "queue-three").ladder[-1].status == "evaluating"
    model = HeatModel(ArenaView.from_arena(loaded.arena))
    model.extend(loaded.records)
    views = [panel_view(model, t) for t in model.territory_ids()]
    assert all(r.status != "evaluating" for v in views for r in v.ladder)
    three = panel_view(model, "queue-three")
    row = three.ladder[-1]
    assert row.status == "killed" and row.evaluating_ms is None
    text = render_panel(three).plain
    assert "evaluating" not in text and f"⊘ {row.label} killed at the finish, not evaluated" in text
    assert "…" not in render_scoreboard(views).plain and "⊘" in render_scoreboard(views).plain
    milestones = [m.id for m in model.arena.milestones]
    matrix = matrix_lines(loaded.world, milestones, model.territory_ids())
    cells = {line.split()[0]: line.split()[1:1 + len(milestones)] for line in matrix[1:]}
    assert cells["queue-three"] == ["+", "+", "+", "+", "-"]
    assert not any("~" in c for c in cells.values())


def test_winner_line_of_a_tied_timer_finish():
    loaded = timer_finish_match(150_000)  # queue-one and queue-two: 10 points each
    model = HeatModel(ArenaView.from_arena(loaded.arena))
    model.extend(loaded.records)
    assert model.winner_line() == "NO WINNER (tie) · queue-one, queue-two · 10 points · match timer expired"
    aborted = HeatModel(ArenaView.from_arena(loaded.arena))
    aborted.extend(loaded.records[:-2])
    aborted.apply(loaded.records[-2].model_copy(update={"event": ev.MatchStateChanged(
        from_=MatchState.running, to=MatchState.aborted)}))
    aborted.apply(loaded.records[-1].model_copy(update={"event": ev.MatchFinished(winner=None, reason="operator interrupt")}))
    assert aborted.winner_line() == "NO WINNER · operator interrupt"  # an abort is no tie


def test_cursor_is_incremental_and_scrubs(seed):
    model = HeatModel(ArenaView.from_arena(seed.arena))
    cur = ReplayCursor(seed.records, model)
    cur.step(60)
    assert model.applied == 60 and model.world == reduce_match(seed.records[:60])
    cur.seek_position(100)  # forward: only 40 more applied
    assert model.applied == 100
    cur.seek_sequence(10)  # backward: reset + 11
    assert cur.last_sequence == 10 and model.world == reduce_match(seed.records[:11])
    cur.seek_sequence(10_000)
    assert cur.at_end and model.world == seed.world
    cur.seek_position(0)
    assert cur.last_sequence is None and model.world.last_sequence is None


def test_advance_time_applies_due_records(seed):
    model = HeatModel()
    cur = ReplayCursor(seed.records, model)
    cur.advance_time(0)  # every t=0 record is due at once
    assert cur.position == sum(1 for r in seed.records if r.elapsed_ms == 0)
    while not cur.at_end:
        cur.advance_time(1000)
    assert model.world == seed.world


# --------------------------------------------------------------------------- pilot


async def test_replay_keys(seed):
    app = AoeApp.replay(seed, playing=False)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        assert isinstance(screen, ReplayScreen)
        cur = screen.cursor
        assert cur.position == 0 and not screen.playing
        await pilot.press("right")
        assert cur.position == 1 and cur.last_sequence == 0
        await pilot.press("right", "right", "left")
        assert cur.position == 2
        await pilot.press("end")
        assert cur.at_end
        assert app.screen.query_one(WinnerBanner).display
        await pilot.press("home")
        assert cur.position == 0 and not app.screen.query_one(WinnerBanner).display
        # speed ×1 … ×100, clamped at both ends
        for _ in range(10):
            await pilot.press("plus")
        assert screen.speed == SPEEDS[-1] == 100
        await pilot.press("minus")
        assert screen.speed == 50
        for _ in range(10):
            await pilot.press("minus")
        assert screen.speed == 1
        await pilot.press("equals_sign")
        assert screen.speed == 2
        # play at ×100 until the end: the timer drives the cursor
        for _ in range(10):
            await pilot.press("plus")
        await pilot.press("space")
        assert screen.playing or cur.at_end  # ×100 may already have reached the end
        for _ in range(200):
            await pilot.pause(0.05)
            if cur.at_end:
                break
        assert cur.at_end and not screen.playing
        assert "WINNER builder-two" in str(app.screen.query_one(WinnerBanner).content)
        # space at the end restarts from the beginning (at ×1 so it is still playing)
        for _ in range(10):
            await pilot.press("minus")
        await pilot.press("space")
        assert screen.playing and cur.position < cur.total
        await pilot.press("space")
        assert not screen.playing


async def test_replay_scrubbed_back_to_the_start_shows_no_final_panels(seed):
    """From the end back to sequence 0 (``g 0``), to nothing (home) and to a sequence before
    the last registration: only the territories registered by then have a panel, and each
    shows that moment (no final ladders, points or winner)."""
    app = AoeApp.replay(seed, at_end=True)
    async with app.run_test(size=(160, 50)) as pilot:
        screen = app.screen

        def panels():
            return {p.territory: p for p in screen.query(TerritoryPanel)}

        assert set(panels()) == {"builder-one", "builder-two", "builder-three"}
        screen.seek_sequence(0)
        await pilot.pause()
        assert screen.cursor.last_sequence == 0 and panels() == {}
        assert not screen.query_one(WinnerBanner).display
        await pilot.press("end")
        await pilot.pause()
        assert set(panels()) == {"builder-one", "builder-two", "builder-three"}
        await pilot.press("home")
        await pilot.pause()
        assert screen.cursor.position == 0 and panels() == {}
        await pilot.press("end")
        screen.seek_sequence(1)  # builder-one seen (#1: preparing → building), the other two not yet
        await pilot.pause()
        assert list(panels()) == ["builder-one"]
        shown = panels()["builder-one"]._shown
        assert shown.points == 0 and not shown.winner
        assert all(r.status == "pending" for r in shown.ladder)
        screen.seek_sequence(10_000)
        await pilot.pause()
        assert list(panels()) == ["builder-one", "builder-two", "builder-three"]  # manifest order again
        assert panels()["builder-two"]._shown.winner


async def test_goto_sequence_prompt(seed):
    app = AoeApp.replay(seed, playing=False)
    async with app.run_test(size=(100, 30)) as pilot:
        screen = app.screen
        await pilot.press("g")
        assert isinstance(app.screen, GotoScreen)
        app.screen.query_one(Input).cursor_blink = False
        await pilot.press("5", "7", "enter")
        assert app.screen is screen
        assert screen.cursor.last_sequence == 57
        assert app.screen.query_one(EventFeed).render_line(0) is not None
        await pilot.press("g", "escape")
        assert app.screen is screen and screen.cursor.last_sequence == 57


async def test_help_theme_palette_quit(seed):
    app = AoeApp.replay(seed, at_end=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        assert isinstance(app.screen, ReplayScreen)
        await pilot.press("f1")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("q")  # q closes help first …
        assert isinstance(app.screen, ReplayScreen)
        assert app.theme == DARK_THEME
        await pilot.press("t")
        assert app.theme == LIGHT_THEME
        await pilot.press("t")
        assert app.theme == DARK_THEME
        await pilot.press("ctrl+p")
        await pilot.pause()
        assert type(app.screen).__name__ == "CommandPalette"
        await pilot.press(*"jump to start")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await pilot.pause(0.1)
        assert isinstance(app.screen, ReplayScreen) and app.screen.cursor.position == 0
        assert not app.screen.query(TerritoryPanel)  # nothing registered at the start
        await pilot.press("end")
        await pilot.press("tab")
        assert isinstance(app.focused, TerritoryPanel)
        await pilot.press("q")  # … and quits from the main screen
    assert app.return_code == 0


async def test_narrow_terminal_keyboard_and_mouse(seed):
    app = AoeApp.replay(seed, at_end=True)
    async with app.run_test(size=(80, 24)) as pilot:
        body = app.screen.query_one("#heat-body")
        assert "-narrow" in app.screen.classes
        assert body.max_scroll_y > 0  # stacked panels overflow 24 rows
        await pilot.press("tab")
        assert app.focused is not None
        await pilot.press("pagedown")
        await pilot.pause()
        assert body.scroll_y > 0  # keyboard only
        await pilot.press("pageup")
        await pilot.click("#panel-builder-one")
        assert app.focused is app.screen.query_one("#panel-builder-one")
        await pilot.press("home")  # priority binding: replay start, not scroll
        assert app.screen.cursor.position == 0


async def test_hidden_screen_does_no_work(seed):
    app = AoeApp.replay(seed, playing=False, speed=25)
    async with app.run_test(size=(100, 30)) as pilot:
        screen = app.screen
        await pilot.press("space")
        assert screen.playing
        await pilot.press("question_mark")
        assert not screen.cursor.at_end
        pos = screen.cursor.position
        await pilot.pause(0.3)
        assert screen.cursor.position == pos  # the replay timer is paused while hidden
        await pilot.press("escape")
        await pilot.pause(0.4)
        assert screen.cursor.position > pos


# --------------------------------------------------------------------------- live seam


async def test_live_feed_from_a_thread_coalesces(seed):
    feed = LiveFeed()
    app = AoeApp.live(feed)
    handled: list[int] = []
    async with app.run_test(size=(160, 48), message_hook=lambda m: handled.append(1)
                            if isinstance(m, RecordsPending) else None) as pilot:
        assert isinstance(app.screen, HeatScreen)
        feed.open_heat("r1-h2-a1", arena=seed.arena, title="round 1 heat 2 · attempt 1",
                       activity=lambda aid: [f"{aid}: $ systemctl status builder"])

        def engine() -> None:  # the referee's side: post and never wait
            for rec in seed.records:
                feed.post_record(rec, "r1-h2-a1")

        t = threading.Thread(target=engine)
        t.start()
        t.join()
        for _ in range(50):
            await pilot.pause(0.02)
            if app.heats["r1-h2-a1"].applied == len(seed.records):
                break
        model = app.heats["r1-h2-a1"]
        assert model.world == seed.world
        assert len(handled) < len(seed.records)  # coalesced, not one message per record
        await pilot.pause()
        banner = app.screen.query_one(WinnerBanner)
        assert banner.display and "builder-two" in str(banner.content)
        panel = app.screen.query_one("#panel-builder-two", TerritoryPanel)
        assert "$ systemctl status builder" in str(panel.render())


def test_on_event_callback_shape(seed):
    feed = LiveFeed()
    cb = feed.on_event("h")
    cb(seed.records[0], seed.world)
    opened, pending = feed.drain()
    assert opened == [] and pending == [("h", seed.records[0])]
    assert feed.drain() == ([], [])


# --------------------------------------------------------------------------- every fixture


@pytest.mark.parametrize("path", all_fixture_paths(), ids=lambda p: p.name)
async def test_every_fixture_opens(path):
    loaded = load_match(path)
    app = AoeApp.replay(loaded, playing=False)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("end")
        screen = app.screen
        assert screen.cursor.at_end
        assert screen.model.world == loaded.world
        panels = screen.query(TerritoryPanel)
        assert {p.territory for p in panels} == set(loaded.world.territories)
        banner = str(screen.query_one(WinnerBanner).content)
        assert (loaded.world.winner or "NO WINNER") in banner


def test_cli_replay_errors(tmp_path, capsys):
    assert aoe_main(["replay", str(tmp_path / "missing")]) != 0
    assert "no such file" in capsys.readouterr().err
    (tmp_path / "events.jsonl").write_text("")
    assert aoe_main(["replay", str(tmp_path)]) != 0
    assert "empty" in capsys.readouterr().err
    assert aoe_main(["replay", "--speed", "500", str(SEED)]) != 0
    assert "--speed" in capsys.readouterr().err
    assert aoe_main(["watch", str(tmp_path / "nope")]) != 0
    assert "no such season folder" in capsys.readouterr().err


def test_views_refuse_a_stdout_that_is_not_a_terminal(tmp_path):
    """``aoe replay > file`` would fill the file with screen-drawing escapes: one line instead."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "aoe_tui.cli", "replay", str(SEED)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr == (f"aoe: error: aoe replay draws a terminal view and stdout is not a terminal; "
                        f"`aoe inspect {SEED}` prints the match as text\n")
    (tmp_path / "season.jsonl").write_text("")
    r = subprocess.run([sys.executable, "-m", "aoe_tui.cli", "watch", str(tmp_path)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1 and r.stdout == "" and "`aoe standings" in r.stderr and r.stderr.count("\n") == 1


# --------------------------------------------------------------------------- live clock, activity


def _header(app) -> str:
    from aoe_tui.tui.widgets import HeatHeader

    return app.screen.query_one("#heat-header", HeatHeader).text.plain


async def until(pilot, cond, what: str, timeout_s: float = 60.0) -> None:
    """Let the app run until ``cond()`` holds (it is checked between short pauses): no fixed
    pause that a busy machine outlasts. ``timeout_s`` (wall seconds) only bounds a failure."""
    import time

    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"not within {timeout_s:.0f} s: {what}"
        await pilot.pause(0.02)


def _shown_through(app, heat: str, rec) -> bool:
    """The app's model of ``heat`` has taken every record up to ``rec``."""
    model = app.heats.get(heat)
    return model is not None and model.world.last_sequence == rec.sequence


def live_app_with_clock() -> tuple[LiveFeed, AoeApp, list[float]]:
    """A live app whose monotonic clock is ``now[0]`` (seconds; tests move it by hand)."""
    feed = LiveFeed()
    app = AoeApp.live(feed)
    now = [5000.0]
    app.monotonic = lambda: now[0]
    return feed, app, now


async def test_live_clock_ticks_between_events_and_stops_when_finished(seed):
    """A running live heat's clock = last event's elapsed_ms + monotonic time since it arrived
    (capped); the evaluating milestone shows how long it has been evaluating; the next event
    snaps the clock back to the log; a finished heat's clock does not tick."""
    from aoe_tui.domain.display import fmt_clock
    from aoe_tui.tui.viewmodel import LIVE_CLOCK_CAP_MS

    i = next(n for n, r in enumerate(seed.records) if r.event.kind == "milestone_evaluation_started")
    head, rest = seed.records[: i + 1], seed.records[i + 1:]
    terr = head[-1].event.territory
    assert reduce_match(head).match_state.value == "running"
    feed, app, now = live_app_with_clock()
    async with app.run_test(size=(160, 48)) as pilot:
        feed.open_heat("h", arena=seed.arena, title="live heat")
        for rec in head:
            feed.post_record(rec, "h")
        base = head[-1].elapsed_ms
        await until(pilot, lambda: _shown_through(app, "h", head[-1]) and app.screen.query(f"#panel-{terr}")
                    and _header(app).startswith(fmt_clock(base) + "/"), "the heat shown at its last event")
        panel = app.screen.query_one(f"#panel-{terr}", TerritoryPanel)
        assert "evaluating 0s" in panel.text.plain
        now[0] += 30.0  # 30 s pass, no event arrives: the clock timer (not a record) redraws
        await until(pilot, lambda: _header(app).startswith(fmt_clock(base + 30_000) + "/"), "the clock ticked")
        assert "evaluating 30s" in panel.text.plain
        now[0] += 3600.0  # a stalled feed: the clock stops at the cap
        await until(pilot, lambda: _header(app).startswith(fmt_clock(base + LIVE_CLOCK_CAP_MS) + "/"),
                    "the clock at its cap")
        assert app.heats["h"].world.last_sequence == head[-1].sequence  # the timer did it, no record came
        feed.post_record(rest[0], "h")  # the next event: back to the log's clock
        await until(pilot, lambda: _shown_through(app, "h", rest[0])
                    and _header(app).startswith(fmt_clock(rest[0].elapsed_ms) + "/"), "back to the log's clock")
        for rec in rest[1:]:
            feed.post_record(rec, "h")
        await until(pilot, lambda: _shown_through(app, "h", rest[-1]) and app.screen._clock_timer is None,
                    "the finished heat taken")
        final = app.heats["h"].world.elapsed_ms
        assert app.heats["h"].world.match_state.value == "finished"
        now[0] += 120.0
        await pilot.pause(1.1)
        assert _header(app).startswith(fmt_clock(final) + "/"), _header(app)  # finished: no tick
        assert app.screen._clock_timer is None  # and no timer wakes the app


async def _evaluating_heat(pilot, feed: LiveFeed, seed) -> HeatScreen:
    """Open live heat ``h`` from ``seed`` up to its first milestone evaluation; returns
    the heat screen showing it."""
    i = next(n for n, r in enumerate(seed.records) if r.event.kind == "milestone_evaluation_started")
    feed.open_heat("h", arena=seed.arena, title="live heat")
    for rec in seed.records[: i + 1]:
        feed.post_record(rec, "h")
    await until(pilot, lambda: _shown_through(pilot.app, "h", seed.records[i]) and isinstance(pilot.app.screen, HeatScreen)
                and pilot.app.screen._clock_timer is not None, "the evaluating heat shown, its clock timer set")
    return pilot.app.screen


async def test_clock_timer_wakes_when_the_shown_second_changes(seed):
    """One wake-up a second, at the moment the shown clock reaches its next second; none
    while the heat screen is hidden."""
    from aoe_tui.tui.screens import CLOCK_SLACK_S

    feed, app, now = live_app_with_clock()
    async with app.run_test(size=(160, 48)) as pilot:
        screen = await _evaluating_heat(pilot, feed, seed)
        clock = screen.clock_ms(app.heats["h"])
        assert screen._clock_timer._interval == pytest.approx((1000 - clock % 1000) / 1000 + CLOCK_SLACK_S)
        now[0] += 0.25
        screen._tick_clock()
        assert screen._clock_timer._interval == pytest.approx((1000 - (clock + 250) % 1000) / 1000 + CLOCK_SLACK_S)
        app.push_screen(HelpScreen())
        await until(pilot, lambda: isinstance(app.screen, HelpScreen), "help shown")
        await until(pilot, lambda: screen._clock_timer is None, "no clock timer while hidden")
        app.pop_screen()
        await until(pilot, lambda: screen._clock_timer is not None, "the clock timer back")


async def test_clock_tick_redraws_once_a_second(seed):
    """A clock tick redraws only when the shown second (or the model) changed."""
    feed, app, now = live_app_with_clock()
    async with app.run_test(size=(160, 48)) as pilot:
        screen = await _evaluating_heat(pilot, feed, seed)
        screen._stop_clock()  # the test ticks by hand
        screen._ticked = None
        header = screen.query_one("#heat-header")
        drawn: list[int] = []
        show = header.show_header
        header.show_header = lambda model, clock=None: (drawn.append(clock), show(model, clock))
        screen._tick_clock()
        now[0] += 0.3
        screen._tick_clock()  # same second: nothing to draw
        now[0] += 0.8
        screen._tick_clock()  # the next second
        screen._tick_clock()
        assert len(drawn) == 2 and drawn[1] // 1000 == drawn[0] // 1000 + 1, drawn


async def test_replay_clock_does_not_tick(seed):
    app = AoeApp.replay(seed, at_sequence=60)
    now = [0.0]
    app.monotonic = lambda: now[0]
    async with app.run_test(size=(120, 40)) as pilot:
        shown = _header(app)
        now[0] += 100.0
        await pilot.pause(0.4)
        assert _header(app) == shown


def test_sanitize_line():
    from aoe_tui.domain.display import sanitize_line

    assert sanitize_line("\x1b[31mred\x1b[0m [bold]x[/bold]") == "red [bold]x[/bold]"
    assert sanitize_line("a\tb\r\nc\x00d\x07e\u202ef") == "a b  cdef"
    assert sanitize_line("  a\tb\r\nc  ", collapse=True) == "a b c"
    assert sanitize_line("\x1b]0;title\x07ok") == "ok"
    assert sanitize_line(b"caf\xc3\xa9 \xff\xfe ok") == "café \ufffd ok"
    assert sanitize_line(bytes(range(256)) * 2).startswith("‹binary output")
    assert sanitize_line("x" * 500).endswith("…") and len(sanitize_line("x" * 500)) == 200


async def test_activity_lines_render_safely(seed):
    """Garbage from an adapter: escapes stripped, one line each, markup shown literally."""
    garbage = ["\x1b[1;31mERROR\x1b[0m [bold red]not markup[/]", "multi\nline\routput   aligned",
               "\x00\x01\x02\x03\x04\x05\x06\x07\x08\x0e\x0f\ufffd\ufffd\ufffd", "tail ok"]
    feed = LiveFeed()
    app = AoeApp.live(feed)
    async with app.run_test(size=(160, 48)) as pilot:
        feed.open_heat("h", arena=seed.arena, title="garbage", activity=lambda aid: garbage)
        for rec in seed.records[:50]:
            feed.post_record(rec, "h")
        await pilot.pause(0.1)
        panel = app.screen.query_one("#panel-builder-one", TerritoryPanel)
        text = panel.text.plain
        tail = text.split("── activity\n", 1)[1].split("\n")
        assert tail == ["ERROR [bold red]not markup[/]", "multi line output   aligned", "‹binary output, 14 chars›", "tail ok"]
        assert not any(ch in text for ch in "\x1b\x00\x07\r")
        rendered = "".join(seg.text for seg in panel.render().render(app.console))
        assert "[bold red]not markup[/]" in rendered


async def test_text_view_relayouts_only_when_its_wrapped_height_changes():
    """Width-only changes of a fixed-width TextView repaint it; a change of its wrapped
    height lays it out again (and the widget really grows and shrinks)."""
    from textual.app import App

    from aoe_tui.tui.widgets import TextView

    class One(App):
        CSS = "TextView { height: auto; width: 22; border: solid red; }"

        def compose(self):
            yield TextView("a\nb", id="t")

    app = One()
    async with app.run_test(size=(60, 30)) as pilot:
        view = app.query_one("#t", TextView)
        await pilot.pause()
        assert view.size.height == 2
        asked: list[bool] = []  # the layout flag of each set_text's own refresh
        refresh, set_text, inside = view.refresh, view.set_text, []

        def spy(*regions, layout: bool = False, **kw):
            if inside:
                asked.append(layout)
            return refresh(*regions, layout=layout, **kw)

        def spy_set_text(text):
            inside.append(1)
            try:
                set_text(text)
            finally:
                inside.clear()

        view.refresh, view.set_text = spy, spy_set_text
        view.set_text("abc\nb")  # wider, still fits 20 cells: repaint only
        view.set_text("x" * 30 + "\nb")  # wraps into 2 rows: 3 rows in all
        await pilot.pause()
        assert view.size.height == 3
        view.set_text("y" * 31 + "\nb")  # other widths, same wrapped height: repaint only
        view.set_text("1\n2\n3\n4\n5")
        await pilot.pause()
        assert view.size.height == 5
        view.set_text("1\n2")
        await pilot.pause()
        assert view.size.height == 2
        assert asked == [False, True, False, True, True]


def _styled(*lines: str):
    """A multi-line Rich Text with spans: the first word of each line bold, digits red."""
    from rich.text import Text

    t = Text()
    for i, line in enumerate(lines):
        if i:
            t.append("\n")
        head, _, rest = line.partition(" ")
        t.append(head, style="bold")
        if rest:
            t.append(" ")
            t.append(rest, style="red" if any(c.isdigit() for c in rest) else "")
    return t


def _count_rows(widget) -> list[int]:
    """Content rows ``widget`` renders from now on (Textual asks ``render_line`` for each)."""
    drawn: list[int] = []
    render_line = widget.render_line
    widget.render_line = lambda y: (drawn.append(y), render_line(y))[1]
    return drawn


async def test_text_view_draws_what_textual_draws_after_any_sequence_of_texts():
    """A TextView draws its rows line by line from a cache and repaints only rows that
    changed; after every text of a sequence (rows changed, a wrap, grown, shrunk, empty,
    wide characters) it draws exactly what a Static with the same styles draws."""
    from rich.text import Text
    from textual.app import App
    from textual.geometry import Region
    from textual.widgets import Static

    from aoe_tui.tui.widgets import TextView

    class Two(App):
        CSS = "TextView, Static { height: auto; width: 24; border: round red; padding: 0 1; }"

        def compose(self):
            yield TextView(id="t")
            yield Static(id="s")

    texts = [_styled("alpha 1", "beta 2", "gamma 3"), _styled("alpha 1", "beta 22", "gamma 3"),
             _styled("alpha 1", "x" * 50, "gamma 3"), _styled("alpha 1", "y" * 45, "gamma 3"),
             _styled("alpha", "", "", ""), Text(""), _styled("é中文 wide 12", "tab\there 3", "end"),
             _styled("é中文 wide 13", "tab\there 3", "end"),
             _styled("new 1", "z" * 50, "", "end 2"), _styled("new 1", "z" * 50, "", "end 3"),
             _styled("new 1", "z" * 50, "", "end 3", "more 4")]
    async with Two().run_test(size=(60, 30)) as pilot:
        view, static = pilot.app.query_one(TextView), pilot.app.query_one(Static)
        for text in texts:
            view.set_text(text)
            static.update(text)
            await pilot.pause()
            assert view.outer_size == static.outer_size, text.plain
            whole = Region(0, 0, *view.outer_size)
            assert view.render_lines(whole) == static.render_lines(whole), text.plain
        for widget in (view, static):  # resized: every row again
            widget.styles.width = 31
        await pilot.pause()
        whole = Region(0, 0, *view.outer_size)
        assert view.outer_size.width == 31 and view.render_lines(whole) == static.render_lines(whole)


async def test_text_view_repaints_only_the_rows_that_changed():
    from textual.app import App

    from aoe_tui.tui.widgets import TextView

    class One(App):
        CSS = "TextView { height: auto; width: 30; border: round red; }"

        def compose(self):
            yield TextView(_styled("a 1", "b 2", "c 3", "d 4"))

    async with One().run_test(size=(60, 30)) as pilot:
        view = pilot.app.query_one(TextView)
        await pilot.pause()
        drawn = _count_rows(view)
        view.set_text(_styled("a 1", "b 2", "c 33", "d 4"))
        await pilot.pause()
        assert drawn == [2]
        drawn.clear()
        view.set_text(_styled("a 1", "b 2", "c 33", "d 4"))  # the same text: nothing
        view.set_text(_styled("a 9", "b 2", "c 33", "d 9"))
        await pilot.pause()
        assert sorted(drawn) == [0, 3]


async def test_territory_panel_repaints_only_the_rows_that_changed(seed):
    """A new token count repaints the panel's tokens row, not the panel (its border title
    and points are set again only when they change)."""
    import dataclasses

    from textual.app import App

    model = HeatModel(ArenaView.from_arena(seed.arena))
    model.extend(seed.records)
    tid = model.territory_ids()[0]
    pv = panel_view(model, tid)

    class Panels(App):
        CSS = ".territory-panel { height: auto; width: 60; border: round white; }"

        def compose(self):
            yield TerritoryPanel(tid)

    async with Panels().run_test(size=(80, 60)) as pilot:
        panel = pilot.app.query_one(TerritoryPanel)
        panel.show_panel(pv)
        await pilot.pause()
        drawn = _count_rows(panel)
        panel.show_panel(dataclasses.replace(pv, tokens_in=(pv.tokens_in or 0) + 123_456))
        await pilot.pause()
        row = next(i for i, line in enumerate(panel.text.plain.split("\n")) if line.startswith("tokens "))
        assert drawn == [row]


async def test_scoreboard_is_drawn_when_the_terminal_becomes_narrow(seed):
    """On wide terminals the (hidden) scoreboard costs nothing; narrowed, it shows the
    heat as it is now."""
    from aoe_tui.tui.widgets import Scoreboard

    feed = LiveFeed()
    app = AoeApp.live(feed)
    async with app.run_test(size=(160, 48)) as pilot:
        feed.open_heat("h", arena=seed.arena, title="narrow")
        for rec in seed.records[:40]:
            feed.post_record(rec, "h")
        await until(pilot, lambda: _shown_through(app, "h", seed.records[39]) and app.screen.query("#scoreboard"),
                    "the first 40 records shown")
        board = app.screen.query_one("#scoreboard", Scoreboard)
        assert not board.display and board.text.plain == ""
        await pilot.resize_terminal(80, 24)
        await until(pilot, lambda: board.display and board.text.plain, "the scoreboard shown, narrow")
        assert all(tid in board.text.plain for tid in ("builder-one", "builder-two", "builder-three"))
        want = render_scoreboard([panel_view(app.heats["h"], t) for t in app.heats["h"].territory_ids()])
        assert board.text.plain == want.plain
        for rec in seed.records[40:]:
            feed.post_record(rec, "h")
        await until(pilot, lambda: _shown_through(app, "h", seed.records[-1]), "every record taken")
        final = render_scoreboard([panel_view(app.heats["h"], t) for t in app.heats["h"].territory_ids()])
        await until(pilot, lambda: board.text.plain == final.plain, "the scoreboard redrawn at the end")
        assert final.plain != want.plain


async def test_territory_panel_height_does_not_shrink_during_a_heat(seed):
    """Lines that go away (activity, an evaluating milestone's detail) leave the panel as
    tall as it was: no jump, no re-layout of every spectator's screen. A new panel (the
    next heat) starts from its own height."""
    import dataclasses

    from textual.app import App

    model = HeatModel(ArenaView.from_arena(seed.arena))
    model.extend(seed.records)
    tid = model.territory_ids()[0]
    pv = panel_view(model, tid)
    busy = dataclasses.replace(pv, activity=tuple(f"step {i}" for i in range(6)))
    quiet = dataclasses.replace(pv, activity=())

    class Panels(App):
        CSS = ".territory-panel { height: auto; width: 40; border: round white; }"

        def compose(self):
            yield TerritoryPanel(tid)

    app = Panels()
    async with app.run_test(size=(60, 60)) as pilot:
        panel = app.query_one(TerritoryPanel)
        panel.show_panel(busy)
        await pilot.pause()
        tall = panel.size.height
        panel.show_panel(quiet)
        await pilot.pause()
        assert panel.size.height == tall
        assert "no activity" in panel.text.plain and panel.text.plain.endswith("\n" * 5)
        fresh = TerritoryPanel("next-heat")
        await app.mount(fresh)
        fresh.show_panel(quiet)
        await pilot.pause()
        assert fresh.size.height == tall - 5


async def test_app_moves_its_start_up_objects_out_of_the_collectors_sight(seed, monkeypatch):
    """After start-up the app freezes what is alive (``gc.freeze``): a full collection
    then walks only newer objects (about 40 ms less, at the same event, for every
    spectator of a heat)."""
    import gc

    import aoe_tui.tui.app as app_module

    monkeypatch.setattr(app_module, "GC_FREEZE_AFTER_S", 0.05)
    gc.unfreeze()
    try:
        app = AoeApp.replay(seed, at_end=True)
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause(0.3)
            assert gc.get_freeze_count() > 1000  # 0 unless this app froze them
    finally:
        gc.unfreeze()
