"""SVG snapshots of every TUI screen at 80×24 and 160×48, built from fixture logs.

Deterministic by construction: replays start paused (no playback timer runs), the
season clock (``app.now_ms``) and the live heat clock (``app.monotonic``) are frozen,
and the go-to prompt's cursor blink is switched off. Accept new images with ``pytest --snapshot-update``
after checking ``snapshot_report.html``.
"""

from __future__ import annotations

import pytest
from textual.widgets import Input

from aoe_tui.replay.matchdir import load_match
from aoe_tui.tui.app import LIGHT_THEME, AoeApp
from aoe_tui.tui.live import LiveFeed

from tui_fixtures import SEED, TIMER_CONQUEST, timer_finish_match

SIZES = [(80, 24), (160, 48)]
size_ids = [f"{w}x{h}" for w, h in SIZES]


@pytest.mark.parametrize("size", SIZES, ids=size_ids)
def test_seed_heat_at_end(snap_compare, size):
    """builder-two (deepseek) wins with 100 points; the others passed nothing."""
    app = AoeApp.replay(load_match(SEED), at_end=True)
    assert snap_compare(app, terminal_size=size)


@pytest.mark.parametrize("size", SIZES, ids=size_ids)
def test_seed_heat_light_theme(snap_compare, size):
    app = AoeApp.replay(load_match(SEED), at_end=True, theme=LIGHT_THEME)
    assert snap_compare(app, terminal_size=size)


@pytest.mark.parametrize("size", SIZES, ids=size_ids)
def test_seed_heat_mid_replay(snap_compare, size):
    """Scrubbed to sequence 104: builder-two just passed service-up, others failing."""
    app = AoeApp.replay(load_match(SEED), at_sequence=104)
    assert snap_compare(app, terminal_size=size)


@pytest.mark.parametrize("size", SIZES, ids=size_ids)
def test_timer_finish_partial_ladders(snap_compare, size):
    """A build race ended by the match timer (from a real log): partial ladders."""
    app = AoeApp.replay(timer_finish_match(), at_end=True)
    assert snap_compare(app, terminal_size=size)


@pytest.mark.parametrize("size", SIZES, ids=size_ids)
def test_timer_finish_tie(snap_compare, size):
    """A timer finish with the top two tied (queue-one and queue-two, 10 points each at
    150 s): the banner says "NO WINNER (tie)" and names them."""
    match = timer_finish_match(150_000)
    assert match.world.winner is None
    app = AoeApp.replay(match, at_end=True)
    assert snap_compare(app, terminal_size=size)


@pytest.mark.parametrize("size", SIZES, ids=size_ids)
def test_conquest_timer_fixture(snap_compare, size):
    """The upstream timer-finish fixture (conquest prototype): health and resources."""
    app = AoeApp.replay(load_match(TIMER_CONQUEST), at_end=True)
    assert snap_compare(app, terminal_size=size)


@pytest.mark.parametrize("size", SIZES, ids=size_ids)
def test_help_screen(snap_compare, size):
    app = AoeApp.replay(load_match(SEED), at_end=True)
    assert snap_compare(app, press=["question_mark"], terminal_size=size)


@pytest.mark.parametrize("size", SIZES, ids=size_ids)
def test_goto_prompt(snap_compare, size):
    app = AoeApp.replay(load_match(SEED), at_end=True)

    async def run_before(pilot) -> None:
        await pilot.press("g")
        pilot.app.screen.query_one(Input).cursor_blink = False
        await pilot.press("4", "2")

    assert snap_compare(app, run_before=run_before, terminal_size=size)


@pytest.mark.parametrize("size", SIZES, ids=size_ids)
def test_live_heat_screen(snap_compare, size):
    """The live heat screen (no transport bar) fed through a LiveFeed, mid-race."""
    seed = load_match(SEED)
    feed = LiveFeed()
    feed.open_heat("r1-h2-a1", arena=seed.arena, title="opencode-cup · round 1 heat 2 · attempt 1",
                   activity=lambda aid: [f"$ ss -ltnp  # {aid}", "LISTEN 0 128 *:8080"])
    for rec in seed.records[:100]:
        feed.post_record(rec, "r1-h2-a1")
    app = AoeApp.live(feed)
    app.monotonic = lambda: 1000.0  # freeze the ticking live clock
    assert snap_compare(app, terminal_size=size)


# --------------------------------------------------------------------------- season screens


@pytest.fixture(scope="module")
def season_dir(tmp_path_factory):
    from tui_fixtures import build_season_folder

    return build_season_folder(tmp_path_factory.mktemp("snap-season"))


def season_app(season_dir, **kw):
    """``aoe watch`` of the fixture season, caught up, not following, clock frozen."""
    from aoe_tui.tui.app import watch_app

    from tui_fixtures import SEASON_NOW_OFFSET_MS, SEASON_T0

    app = watch_app(season_dir, follow=False, **kw)
    app.now_ms = lambda: SEASON_T0 + SEASON_NOW_OFFSET_MS
    app.monotonic = lambda: 1000.0  # the racing heat's live clock is frozen too
    return app


@pytest.mark.parametrize("size", SIZES, ids=size_ids)
def test_season_screen(snap_compare, size, season_dir):
    """Rounds → heats → attempts: finished, retried, bye, interrupted, racing (▶), scheduled."""
    assert snap_compare(season_app(season_dir), terminal_size=size)


@pytest.mark.parametrize("size", SIZES, ids=size_ids)
def test_quit_question(snap_compare, size, season_dir):
    """``q`` in ``aoe run``'s TUI while the season runs: stop, detach or cancel, every line of
    the question whole (at 120 columns the detach line used to wrap)."""
    from aoe_tui.tui.live import LiveFeed
    from aoe_tui.tui.watch import SeasonTailer

    from test_tui_season import FakeHost, frozen

    feed = LiveFeed()
    SeasonTailer(season_dir, feed).poll()
    app = frozen(AoeApp.season_view(feed, season_dir, host=FakeHost(), read_only=False))
    assert snap_compare(app, press=["q"], terminal_size=size)


@pytest.mark.parametrize("size", SIZES, ids=size_ids)
def test_standings_screen(snap_compare, size, season_dir):
    """Official order, rating μ±σ, tokens n/a for the entrant without a heat."""
    assert snap_compare(season_app(season_dir), press=["s"], terminal_size=size)


@pytest.mark.parametrize("size", SIZES, ids=size_ids)
def test_standings_sorted_by_rating(snap_compare, size, season_dir):
    assert snap_compare(season_app(season_dir), press=["s", "r"], terminal_size=size)


# --------------------------------------------------------------------------- a cup across arenas


@pytest.fixture(scope="module")
def multi_dir(tmp_path_factory):
    from tui_fixtures import build_multi_arena_season_folder

    return build_multi_arena_season_folder(tmp_path_factory.mktemp("snap-multi"))


@pytest.mark.parametrize("size", SIZES, ids=size_ids)
def test_multi_arena_season_screen(snap_compare, size, multi_dir):
    """Three arenas: the header names them (shortened at 80 columns), each round row its arena."""
    assert snap_compare(season_app(multi_dir), terminal_size=size)


@pytest.mark.parametrize("size", SIZES, ids=size_ids)
def test_multi_arena_standings_screen(snap_compare, size, multi_dir):
    """Standings over all arenas; the footer offers ``a`` (per arena)."""
    assert snap_compare(season_app(multi_dir), press=["s"], terminal_size=size)


@pytest.mark.parametrize("size", SIZES, ids=size_ids)
def test_multi_arena_standings_per_arena(snap_compare, size, multi_dir):
    """The per-arena breakdown: one row per entrant and arena (fewer columns at 80)."""
    assert snap_compare(season_app(multi_dir), press=["s", "a"], terminal_size=size)


@pytest.mark.parametrize("size", SIZES, ids=size_ids)
def test_multi_arena_heat_screen(snap_compare, size, multi_dir):
    """The racing heat of round 4: its header names the arena (first-build)."""
    assert snap_compare(season_app(multi_dir), press=["enter"], terminal_size=size)


# --------------------------------------------------------------------------- a stopped season


@pytest.fixture(scope="module")
def stopped_dir(tmp_path_factory):
    from tui_fixtures import build_stopped_season_folder

    return build_stopped_season_folder(tmp_path_factory.mktemp("snap-stopped"))


@pytest.mark.parametrize("size", SIZES, ids=size_ids)
def test_stopped_season_screen(snap_compare, size, stopped_dir):
    """A season its ``aoe run`` stopped (SIGINT): the status line says STOPPED and how to
    resume, the clock stands at the stop, round 2 is stopped and its cut-off attempts
    interrupted (no ▶); the log's last line is the stop."""
    assert snap_compare(season_app(stopped_dir), terminal_size=size)
