"""Issue 27 acceptance for the three harnesses, on container territories.

One heat: ``claude-code`` vs ``codex`` vs ``opencode``, each driven by the scripted model
server (:mod:`aoe_tui.testing.model_server`, the durable sqlite script) through the
credential proxy, in the API its CLI speaks (Anthropic Messages, OpenAI Responses, OpenAI chat
completions). Each must deploy first-build durably; its ``usage.json`` must equal what the
server sent (the script's sums); its transcript, analysis and activity lines must exist.

Each harness's ATIF document (``aoe trajectory``, §9.3) is valid and its totals are its
``usage.json``'s.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
from pathlib import Path

import pytest

from test_opencode_heat import need_host  # root, systemd-nspawn, ripgrep (opencode's)

pytestmark = [pytest.mark.container]

REPO = Path(__file__).resolve().parent.parent
KEY_ENV = "AOE_TEST_ACCEPT_KEY"
SEATS = {"builder-one": "claude-code", "builder-two": "codex", "builder-three": "opencode"}
MODEL = "scripted/durable-sqlite"

@pytest.fixture(scope="module")
def accept_heat(tmp_path_factory, guest_image):
    need_host()
    from aoe_tui.agents.registry import harness_adapters, resolve_adapter
    from aoe_tui.domain.arena import load_manifest
    from aoe_tui.referee.heat import run_heat
    from aoe_tui.runtime.container import ContainerProvider
    from aoe_tui.testing.model_server import ScriptedModelServer, durable_sqlite_script

    for cls in harness_adapters():
        if cls.harness.binary() is None:
            pytest.skip(f"{cls.harness.name} is not installed (./setup.sh)")
    key = "sk-aoe-accept-" + secrets.token_hex(16)
    os.environ[KEY_ENV] = key
    root = tmp_path_factory.mktemp("accept")
    shutil.copytree(REPO / "arenas" / "first-build", root / "first-build")
    manifest = root / "first-build" / "arena.toml"
    text = manifest.read_text().replace("duration_seconds = 600", "duration_seconds = 300")
    text = text.replace("recovery_window_seconds = 60", "recovery_window_seconds = 10")
    # every seat must reach durable: the race goes on after the first one does
    text = text.replace("stop_on_first_durable = true", "stop_on_first_durable = false")
    manifest.write_text(text.replace('model = "oracle"', f'model = "{MODEL}"'))
    script = durable_sqlite_script(step_delay_s=1.0)
    with ScriptedModelServer(script, expect_key=key) as srv:
        opts = {"base_url": srv.base_url, "api_key_env": KEY_ENV}
        adapters = {seat: resolve_adapter(name, options=opts) for seat, name in SEATS.items()}
        loaded = load_manifest(manifest)
        by_agent = {a.id: adapters[a.territory] for a in loaded.manifest.agents}
        out = root / "match"
        provider = ContainerProvider(out / "territories", image=guest_image, heat_id=f"ha-{os.getpid()}")
        world = asyncio.run(run_heat(loaded, provider, by_agent, out, drain_seconds=5))
        requests = srv.requests
    return world, out, script, requests, key


@pytest.mark.parametrize("seat", sorted(SEATS))
def test_harness_deploys_first_build_durably(accept_heat, seat):
    world, out, _script, _requests, _key = accept_heat
    result = json.loads((out / "agents" / f"{seat}-agent" / "result.json").read_text())
    assert world.territories[seat].competitor_state.value == "durable", (SEATS[seat], result)


@pytest.mark.parametrize("seat", sorted(SEATS))
def test_usage_equals_what_the_server_sent(accept_heat, seat):
    from aoe_tui.testing.model_server import script_totals

    _world, out, script, requests, _key = accept_heat
    totals = script_totals(script)
    usage = json.loads((out / "agents" / f"{seat}-agent" / "usage.json").read_text())["usage"]
    assert usage["input_tokens"] == totals["prompt_tokens"], (SEATS[seat], usage, totals)
    assert usage["output_tokens"] == totals["completion_tokens"], (SEATS[seat], usage, totals)
    assert usage["tool_calls"] == totals["tool_calls"], (SEATS[seat], usage, totals)
    assert requests and all(r["auth_ok"] for r in requests)


@pytest.mark.parametrize("seat", sorted(SEATS))
def test_transcript_analysis_and_activity_exist(accept_heat, seat):
    _world, out, _script, _requests, _key = accept_heat
    adir = out / "agents" / f"{seat}-agent"
    transcript = json.loads((adir / "transcript.json").read_text())
    assert transcript["tool_trace"], SEATS[seat]
    analysis = json.loads((adir / "analysis.json").read_text())
    assert analysis["actions"] and "builder-app.service" in analysis["architecture"]["service_units"]
    lines = [json.loads(x) for x in (out / "activity.jsonl").read_text().splitlines() if x.strip()]
    assert any(json.dumps(x).find(f"{seat}-agent") >= 0 for x in lines), SEATS[seat]


def test_no_key_in_the_match_folder(accept_heat):
    _world, out, _script, _requests, key = accept_heat
    needle = key.encode()
    assert [str(p) for p in out.rglob("*") if p.is_file() and needle in p.read_bytes()] == []


@pytest.mark.parametrize("seat", sorted(SEATS))
def test_atif_document_is_valid(accept_heat, seat, tmp_path):
    from aoe_tui.domain.atif import validate_trajectory
    from aoe_tui.export.trajectory import export_trajectories

    _world, out, _script, _requests, _key = accept_heat
    report = export_trajectories(out, tmp_path)
    assert report.errors == [], report.errors
    mine = [p for p in report.written if p.stem == f"{seat}-agent"]
    assert len(mine) == 1, (SEATS[seat], report.written, report.skipped)
    doc = validate_trajectory(mine[0].read_bytes())
    usage = json.loads((out / "agents" / f"{seat}-agent" / "usage.json").read_text())["usage"]
    assert doc.steps and doc.final_metrics is not None, SEATS[seat]
    assert doc.final_metrics.total_prompt_tokens == usage["input_tokens"], SEATS[seat]
    assert doc.final_metrics.total_completion_tokens == usage["output_tokens"], SEATS[seat]
