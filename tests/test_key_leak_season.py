"""Issue 27 acceptance, keys: a provider plants its key in every place it can, and after a
whole season no piece of it is anywhere a spectator, a log or an export could show it.

Real parts throughout: ``aoe run --headless`` in a subprocess (the runner's environment holds
the key), systemd-nspawn territories, real SSH, the three real harnesses (opencode, Claude
Code, Codex) in their guests, the credential proxy, and a **hostile** scripted model server
(:class:`~aoe_tui.testing.model_server.ScriptedModelServer` ``plant_key``): it sends the key
back in every response header, in every JSON body, in an SSE comment split across two chunks,
in every error message and in a redirect's ``Location``. Searched afterwards for any
8-character piece of the key (none can occur by chance: the key is not hex):

* every file under the season folder: events, world, agents' artifacts, transcripts, logs,
  the heats' bundles, standings exports;
* what the run printed (stdout and stderr);
* a spectator's screens: the season screen and the heat's replay at its end (``aoe watch``'s
  app on the folder, rendered by Textual's Pilot).

The guests' disks are searched by ``test_proxy_heat`` (opencode) and ``test_harness_heat``
(Claude Code, Codex) during their heats.
"""

from __future__ import annotations

import html
import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from test_opencode_heat import need_host

pytestmark = [pytest.mark.container]

REPO = Path(__file__).resolve().parent.parent
KEY_ENV = "AOE_TEST_LEAK_KEY"
HARNESSES = ("opencode", "claude-code", "codex")


def _pieces(key: str, n: int = 8) -> list[str]:
    return [key[i:i + n] for i in range(len(key) - n + 1)]


def _file_hits(folder: Path, key: str) -> list[str]:
    pieces = [p.encode() for p in _pieces(key)]
    out = []
    for p in folder.rglob("*"):
        if p.is_file() and not p.is_symlink():
            data = p.read_bytes()
            if any(x in data for x in pieces):
                out.append(str(p.relative_to(folder)))
    return out


def _screen_text(svg: str) -> str:
    """The characters a spectator sees in an exported screenshot (tags dropped, entities decoded)."""
    return html.unescape(re.sub(r"<[^>]+>", "", svg)).replace("\xa0", " ")


@pytest.fixture(scope="module")
def leaky_season(tmp_path_factory, guest_image):
    need_host()
    from aoe_tui.agents.registry import harness_adapters
    from aoe_tui.testing.model_server import ScriptedModelServer, durable_sqlite_script

    for cls in harness_adapters():
        if cls.harness.binary() is None:
            pytest.skip(f"{cls.harness.name} is not installed (./setup.sh)")
    key = "sk-aoe-leak-" + secrets.token_urlsafe(24)
    root = tmp_path_factory.mktemp("leak")
    with ScriptedModelServer(durable_sqlite_script(step_delay_s=1.0), expect_key=key, plant_key=key) as srv:
        entrants = "".join(
            f'[[entrants]]\nid = "{h}"\nadapter = "{h}"\nmodel = "scripted/durable-sqlite"\n'
            f'[entrants.options]\nbase_url = "{srv.base_url}"\napi_key_env = "{KEY_ENV}"\n' for h in HARNESSES)
        season = root / "leak.toml"
        season.write_text(
            'id = "leak"\nlabel = "hostile provider"\n'
            f'arena = "{REPO}/arenas/first-build/arena.toml"\n'
            "seed = 27\nmax_attempts = 1\nconcurrent_heats = 1\ndrain_seconds = 5\n"
            '[provider]\nkind = "container"\n[arena_overrides]\nduration_seconds = 240\n'
            '[format]\nkind = "league"\nheats_per_entrant = 1\n' + entrants
            + '[prices."scripted/durable-sqlite"]\ninput_per_mtok = 0.5\noutput_per_mtok = 2.0\n')
        out = root / "out"
        env = {**os.environ, KEY_ENV: key}
        run = subprocess.run([sys.executable, "-m", "aoe_tui.cli", "run", str(season), "--headless",
                              "--output", str(out)], env=env, capture_output=True, text=True, timeout=900)
        requests = srv.requests
    return key, out, run, requests


def test_the_season_ran_against_the_hostile_provider(leaky_season):
    """The season finished, every harness called the model through the proxy with the key,
    and the upstream planted it (so the searches below search something)."""
    key, out, run, requests = leaky_season
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert (out / "season.jsonl").is_file()
    assert requests and all(r["auth_ok"] for r in requests)
    paths = {r["path"].split("?")[0] for r in requests}
    assert {"/v1/chat/completions", "/v1/messages", "/v1/responses"} <= paths, paths
    assert sorted(out.rglob("attempt-*/*.match.json")), "no heat bundle written"


def test_no_piece_of_the_key_in_any_file_of_the_season_folder(leaky_season):
    key, out, _run, _requests = leaky_season
    assert _file_hits(out, key) == []


def test_no_piece_of_the_key_in_what_the_run_printed(leaky_season):
    key, _out, run, _requests = leaky_season
    printed = run.stdout + run.stderr
    assert printed.strip()
    assert [p for p in _pieces(key) if p in printed] == []


async def test_no_piece_of_the_key_on_a_spectators_screens(leaky_season):
    from textual.widgets import DataTable

    from aoe_tui.tui.app import watch_app
    from aoe_tui.tui.screens import ReplayScreen

    key, out, _run, _requests = leaky_season
    app = watch_app(out, follow=False)
    screens = []
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        screens.append(_screen_text(app.export_screenshot()))
        table = app.screen.query_one("#bracket", DataTable)
        for row in range(table.row_count):  # the finished heat: its replay at the end
            table.move_cursor(row=row)
            await pilot.press("enter")
            await pilot.pause()
            if isinstance(app.screen, ReplayScreen):
                screens.append(_screen_text(app.export_screenshot()))
                break
    assert len(screens) == 2, "no heat replay to look at"
    assert any(h in screens[1] for h in HARNESSES), screens[1][:2000]
    assert [p for s in screens for p in _pieces(key) if p in s] == []
