"""The season TUI on real container territories (systemd-nspawn, real SSH, built-in adapters).

* ``aoe run``'s TUI wiring (engine thread + LiveFeed + season screen) on ``seasons/demo.toml``,
  driven through Pilot until the first heat finishes: the live heat screen shows the winner
  banner, the standings screen lists that heat's entrants; then the season is stopped from
  the engine side and its territories are gone.
* ``aoe watch`` (the same app :func:`watch_app` builds) on a season run by a second process
  (``aoe run --headless``) ends with the same bracket as that process's ``season.jsonl``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from textual.widgets import DataTable

from aoe_tui.replay.season_log import read_season_log
from aoe_tui.tui.screens import HeatScreen
from aoe_tui.tui.season_screens import SeasonScreen, StandingsScreen
from aoe_tui.tui.app import watch_app
from aoe_tui.tui.seasonmodel import SeasonModel
from procfs import policy, this_thread_policy

pytestmark = [pytest.mark.container]

REPO = Path(__file__).resolve().parent.parent
DEMO = REPO / "seasons" / "demo.toml"


@pytest.fixture(scope="module", autouse=True)
def _host(guest_image):
    if os.geteuid() != 0 or shutil.which("systemd-nspawn") is None:
        pytest.skip("container seasons need root and systemd-nspawn")


async def wait_for(pilot, cond, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        await pilot.pause(0.25)


async def test_demo_season_live_until_first_heat(tmp_path):
    from aoe_tui.domain.season_file import load_season
    from aoe_tui.season.runner import SeasonRunner, cleanup_stale_territories
    from aoe_tui.tui.app import AoeApp
    from aoe_tui.tui.host import SeasonHost
    from aoe_tui.tui.live import FeedObserver, LiveFeed

    out = tmp_path / "demo"
    loaded = load_season(DEMO)
    feed = LiveFeed()
    observer = FeedObserver(feed)
    host = SeasonHost(lambda say: SeasonRunner(loaded, out, say=say, observer=observer))
    host.start()
    app = AoeApp.season_view(feed, out, host=host, read_only=False)
    try:
        async with app.run_test(size=(160, 48)) as pilot:
            assert isinstance(app.screen, SeasonScreen)
            await wait_for(pilot, lambda: "r1h1" in {r.key for r in app.season.rows(app.heats)}, 60, "round 1")
            if os.geteuid() == 0:  # the engine thread runs the referee at real-time priority, the UI does not
                assert any("referee thread: real-time" in line for line in host.lines), list(host.lines)
                assert policy(os.getpid(), host._thread.native_id) == os.SCHED_RR
                assert this_thread_policy() == os.SCHED_OTHER
            table = app.screen.query_one("#bracket", DataTable)
            await pilot.pause(0.3)
            table.move_cursor(row=table.get_row_index("r1h1"))
            await pilot.press("enter")
            await wait_for(pilot, lambda: isinstance(app.screen, HeatScreen), 60, "the heat screen (events flowing)")
            screen = app.screen
            assert screen.heat == "round-1/heat-1/attempt-1"
            banner = screen.query_one("#winner")
            await wait_for(pilot, lambda: banner.display and "WINNER" in str(banner.render()), 120,
                           "the winner banner")
            heat = app.season.state.rounds[1].heats[1]
            await wait_for(pilot, lambda: heat.result is not None, 60, "heat_finished in season.jsonl")
            winner_line = str(banner.render())
            assert heat.result.winner is not None and "WINNER" in winner_line
            # live activity came from the referee's seats
            assert any(screen.model.activity(a) for a in heat.entrants)
            await pilot.press("escape", "s")
            await pilot.pause(0.3)
            assert isinstance(app.screen, StandingsScreen)
            st = app.screen.query_one("#standings", DataTable)
            listed = {st.coordinate_to_cell_key((i, 0)).row_key.value for i in range(st.row_count)}
            assert set(heat.entrants) <= listed and len(listed) == 7
            row = next(r for r in app.season.standings() if r.entrant == heat.result.winner)
            assert row.wins == 1
    finally:
        host.stop()
        assert host.join(180), "the season engine did not stop"
    assert host.cancelled and host.error is None
    assert cleanup_stale_territories(out) == []  # every territory was torn down by the stop
    assert (out / "round-1/heat-1/attempt-1/world.json").is_file()


MINI = """\
id = "mini"
label = "watch-test"
arena = "{arena}"
seed = 11
max_attempts = 2
concurrent_heats = 1
drain_seconds = 2

[provider]
kind = "container"
ready_timeout_s = 90

[arena_overrides]
duration_seconds = 30
minimum_territories = 2

[format]
kind = "league"
heats_per_entrant = 1

[[entrants]]
id = "oracle"
adapter = "oracle"
model = "oracle"

[[entrants]]
id = "memory"
adapter = "scripted:memory"
model = "scripted-memory"

[[entrants]]
id = "volatile"
adapter = "scripted:volatile"
model = "scripted-volatile"
"""


async def test_watch_shows_the_same_final_bracket(tmp_path):
    season_file = tmp_path / "mini.toml"
    season_file.write_text(MINI.format(arena=REPO / "arenas" / "first-build" / "arena.toml"))
    out = tmp_path / "season"
    proc = subprocess.Popen([sys.executable, "-m", "aoe_tui.cli", "run", str(season_file), "--output", str(out),
                             "--headless"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO)
    try:
        end = time.monotonic() + 30
        while not (out / "season.jsonl").is_file():
            assert proc.poll() is None, proc.stdout.read()
            assert time.monotonic() < end, "season.jsonl never appeared"
            time.sleep(0.1)
        app = watch_app(out)
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_for(pilot, lambda: app.season.state.finished is not None, 240, "season_finished")
            assert proc.wait(60) == 0
            await pilot.pause(0.5)
            model = SeasonModel()
            for rec in read_season_log(out / "season.jsonl"):
                model.apply(rec)
            assert app.season.rows({}) == model.rows({})
            assert app.season.state.finished == model.state.finished
            # the watcher followed at least one heat live from its events.jsonl
            followed = [k for k, m in app.heats.items() if not k.startswith("replay:") and m.applied]
            assert followed and all(app.heats[k].world.match_state.value in ("finished", "aborted") for k in followed)
            champs = ", ".join(model.state.finished.champions)
            assert f"champion {champs}" in str(app.screen.query_one("#season-status").text)
        stdout = proc.stdout.read()
        assert f"season finished: champion {champs}" in stdout
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(120)
