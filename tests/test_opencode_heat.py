"""The opencode adapter in real heats on container territories (issue 8 acceptance).

Real parts throughout: systemd-nspawn territories, real SSH, the real opencode binary from
npm running inside the guest, the credential proxy reached through an SSH reverse tunnel,
and the scripted OpenAI-compatible model server on the runner (the only stand-in: the model).

* heat 1: ``opencode`` (scripted to deploy the durable sqlite service) vs
  ``scripted:memory`` vs ``scripted:volatile`` — opencode is durable and wins, its token
  totals equal the script's sums, its analysis lists the scripted commands with the right
  kinds, and no file in the match folder or the guest holds the test API key.
* heat 2: an endpoint that answers 429 forever (→ ``provider``), an opencode that gets
  killed (→ ``harness``), and ``scripted:volatile`` that carries on regardless.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
from pathlib import Path

import pytest

from aoe_tui.domain.arena import load_manifest
from aoe_tui.testing.model_server import (
    DURABLE_SCRIPT_KINDS,
    ScriptedModelServer,
    durable_sqlite_script,
    kill_self_script,
    script_totals,
)

pytestmark = [pytest.mark.container]

REPO = Path(__file__).resolve().parent.parent
KEY_ENV = "AOE_TEST_MODEL_KEY"


def need_host() -> None:
    if os.geteuid() != 0:
        pytest.skip("container heats need root")
    if shutil.which("systemd-nspawn") is None:
        pytest.skip("systemd-nspawn not installed (apt-get install systemd-container)")
    if shutil.which("rg") is None:
        pytest.skip("ripgrep missing on the runner (apt-get install ripgrep)")


@pytest.fixture(scope="module")
def opencode_bin():
    from aoe_tui.agents.opencode import ensure_opencode, opencode_binary

    if opencode_binary() is None and shutil.which("npm") is None:
        pytest.skip("opencode not installed and npm missing (apt-get install npm)")
    return ensure_opencode()


def make_arena(dest: Path, *, duration: int, models: list[str]) -> Path:
    shutil.copytree(REPO / "arenas" / "first-build", dest)
    manifest = dest / "arena.toml"
    text = manifest.read_text()
    text = text.replace("duration_seconds = 600", f"duration_seconds = {duration}")
    text = text.replace("recovery_window_seconds = 60", "recovery_window_seconds = 10")
    for model in models:
        text = text.replace('model = "oracle"', f'model = "{model}"\nreasoning_effort = "high"', 1)
    manifest.write_text(text)
    return manifest


class KeyCheckingProvider:
    """Wraps the container provider: before teardown, greps every guest's disk for the key."""

    def __init__(self, inner, key: str) -> None:
        self.inner, self.key, self.name = inner, key, inner.name
        self.key_hits: dict[str, str] = {}
        #: territory → (exit status, output) of writing into the harness share, at teardown
        self.share_write: dict[str, tuple[int | None, str]] = {}
        self.territories = []
        #: territory → ``pgrep -a opencode`` at teardown (every agent finished)
        self.opencode_left: dict[str, str] = {}

    async def provision(self, specs):
        self.territories = await self.inner.provision(specs)
        return self.territories

    async def reboot(self, territory):
        return await self.inner.reboot(territory)

    async def teardown(self):
        for t in self.territories:
            try:
                async with self.inner.ssh(t) as conn:
                    res = await conn.run(
                        "grep -rlaF --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev -- "
                        f"'{self.key}' / 2>/dev/null; journalctl --no-pager 2>/dev/null | grep -cF -- '{self.key}'",
                        check=False,
                    )
                    self.key_hits[t.id] = str(res.stdout)
                    res = await conn.run("ls /opt/aoe-harness/opencode && touch /opt/aoe-harness/opencode/opencode "
                                         "/opt/aoe-harness/opencode/new-file 2>&1", check=False)
                    self.share_write[t.id] = (res.exit_status, str(res.stdout) + str(res.stderr))
                    res = await conn.run("pgrep -ax opencode", check=False)
                    self.opencode_left[t.id] = str(res.stdout or "").strip()
            except Exception as exc:  # noqa: BLE001 - recorded, asserted by the test
                self.key_hits[t.id] = f"ERROR {exc}"
        await self.inner.teardown()

    def ssh(self, territory, **kw):
        return self.inner.ssh(territory, **kw)


def run_heat(root: Path, guest_image, adapters: dict, models: list[str], key: str, duration: int,
             end_when=None):
    """Run one heat on container territories; ``end_when(world)``: once it holds (checked
    after every event), the heat ends as at its timer (``HeatSupervisor.expire_timer``), so a
    heat nothing can win lasts as long as what the test waits for, not a guessed clock."""
    from aoe_tui.agents.registry import resolve_adapter
    from aoe_tui.referee.heat import run_heat as run_one_heat
    from aoe_tui.runtime.container import ContainerProvider

    manifest = make_arena(root / "first-build", duration=duration, models=models)
    loaded = load_manifest(manifest)
    by_agent = {}
    for agent in loaded.manifest.agents:
        spec = adapters[agent.territory]
        by_agent[agent.id] = spec if not isinstance(spec, str) else resolve_adapter(spec)
    out = root / "match"
    inner = ContainerProvider(out / "territories", image=guest_image, heat_id=f"oc-{os.getpid()}-{root.name[-4:]}")
    provider = KeyCheckingProvider(inner, key)
    sup = []

    def on_event(_rec, world) -> None:
        if end_when is not None and sup and end_when(world):
            sup[0].expire_timer()

    world = asyncio.run(run_one_heat(loaded, provider, by_agent, out, drain_seconds=5,
                                     on_event=on_event, on_supervisor=sup.append))
    return world, out, provider


def no_key_in_folder(folder: Path, key: str) -> list[str]:
    hits = []
    needle = key.encode()
    for p in folder.rglob("*"):
        if p.is_file() and not p.is_symlink():
            try:
                if needle in p.read_bytes():
                    hits.append(str(p))
            except OSError:
                pass
    return hits


@pytest.fixture(scope="module")
def durable_heat(tmp_path_factory, guest_image, opencode_bin):
    need_host()
    from aoe_tui.agents.opencode import OpencodeAdapter

    key = "sk-aoe-test-" + secrets.token_hex(16)
    os.environ[KEY_ENV] = key
    # 1 s per model turn: opencode, staged warm, starts within a second of the clock and would
    # otherwise finish its six turns before the referee's usage polling saw more than one checkpoint
    script = durable_sqlite_script(step_delay_s=1.0)
    with ScriptedModelServer(script, expect_key=key) as srv:
        oc = OpencodeAdapter({"base_url": srv.base_url, "api_key_env": KEY_ENV})
        world, out, provider = run_heat(
            tmp_path_factory.mktemp("ocheat"), guest_image,
            {"builder-one": oc, "builder-two": "scripted:memory", "builder-three": "scripted:volatile"},
            ["scripted/durable-sqlite", "memory", "volatile"], key, duration=240,
        )
        requests = srv.requests
    return world, out, provider, requests, script, key


def test_opencode_entrant_is_durable_and_wins(durable_heat):
    world, out, _provider, requests, _script, _key = durable_heat
    terr = world.territories
    assert world.winner == "builder-one", (world.finish_reason, (out / "agents/builder-one-agent/result.json").read_text())
    assert terr["builder-one"].competitor_state.value == "durable"
    result = json.loads((out / "agents" / "builder-one-agent" / "result.json").read_text())
    assert result["status"] == "completed", result
    # every request went through the proxy with the real key injected, reasoning effort set
    assert requests and all(r["auth_ok"] for r in requests)
    assert all(r["reasoning_effort"] == "high" and r["model"] == "durable-sqlite" for r in requests if r["has_tools"])
    arena = json.loads((out / "arena.json").read_text())
    assert arena["agents"][0]["adapter"] == "opencode"


def test_opencode_tokens_equal_script_sums(durable_heat):
    world, out, _provider, _requests, script, _key = durable_heat
    totals = script_totals(script)
    agent = world.agents["builder-one-agent"]
    # world usage (sum of usage_charged deltas) equals what the model server billed
    assert agent.input_tokens == totals["prompt_tokens"]
    assert agent.output_tokens == totals["completion_tokens"]
    usage = json.loads((out / "agents" / "builder-one-agent" / "usage.json").read_text())
    assert usage["usage"]["input_tokens"] == totals["prompt_tokens"]
    assert usage["usage"]["rounds"] == totals["steps"] and usage["usage"]["tool_calls"] == totals["tool_calls"]
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    charges = [e for e in events if e.get("kind") == "usage_charged" and e.get("agent") == "builder-one-agent"]
    assert len(charges) >= 2, "live checkpoints should produce several usage_charged deltas"
    assert sum(c.get("input_tokens") or 0 for c in charges) == totals["prompt_tokens"]


def test_opencode_transcript_and_analysis(durable_heat):
    _world, out, _provider, _requests, _script, _key = durable_heat
    adir = out / "agents" / "builder-one-agent"
    transcript = json.loads((adir / "transcript.json").read_text())
    trace = transcript["tool_trace"]
    assert [t["name"] for t in trace] == ["bash", "bash", "bash", "write", "bash"]
    for entry in trace:
        assert set(entry) == {"id", "name", "input", "output", "is_error", "read_only", "started_after_ms", "duration_ms"}
    assert not any(t["is_error"] for t in trace), trace
    analysis = json.loads((adir / "analysis.json").read_text())
    assert set(analysis) == {"schema_version", "analyzer", "source_sha256", "agent", "territory", "model", "outcome",
                             "metrics", "architecture", "actions"}
    assert [a["kind"] for a in analysis["actions"]] == [k for _, k in DURABLE_SCRIPT_KINDS]
    cmds = [a["command"] for a in analysis["actions"]]
    for (cmd, _kind), got in zip(DURABLE_SCRIPT_KINDS, cmds):
        if cmd.startswith("write "):
            assert got.startswith('write {"content":"')
        else:
            assert got == cmd
    assert analysis["metrics"]["tool_calls"] == 5 and analysis["metrics"]["lifecycle_actions"] == 1 and analysis["metrics"]["validations"] == 1
    assert "builder-app.service" in analysis["architecture"]["service_units"]
    assert "/var/lib/builder" in analysis["architecture"]["persistent_paths"]
    assert {"Python", "SQLite", "systemd"} <= set(analysis["architecture"]["technologies"])
    bundle = next(out.glob("*.match.json"))
    assert json.loads(bundle.read_text())["analyses"]["builder-one-agent"]["actions"] == analysis["actions"]


def test_no_key_anywhere(durable_heat):
    _world, out, provider, _requests, _script, key = durable_heat
    assert no_key_in_folder(out, key) == []
    assert set(provider.key_hits) == {"builder-one", "builder-two", "builder-three"}
    for tid, hits in provider.key_hits.items():
        assert hits.strip() == "0", f"{tid}: key found in guest: {hits!r}"


#: Clock bound of the failures heat (s). Nothing in it can become durable (volatile fails
#: host-reboot), so it would run to its timer; it ends instead once what the test asserts has
#: happened (:func:`failures_settled`): both opencode runs ended (429 given up after its
#: retries; the self-kill), about 20 s in on 2 cores, and volatile's builder ended with its
#: service-restart passed, about 5 s in. A fixed 50 s timer cut a slow run short on a busy
#: machine (the 429 seat then ended terminated by the drain, not as the provider's failure).
FAILURES_HEAT_S = 900


def failures_settled(world) -> bool:
    """Every seat's agent has ended and builder-three passed service-restart."""
    agents = [world.agents.get(a) for a in ("builder-one-agent", "builder-two-agent", "builder-three-agent")]
    terr = world.territories.get("builder-three")
    m = terr.milestones.get("service-restart") if terr else None
    return all(a is not None and not a.running for a in agents) and m is not None and m.passed


def test_provider_and_harness_failures(tmp_path_factory, guest_image, opencode_bin):
    need_host()
    from aoe_tui.agents.opencode import OpencodeAdapter

    key = "sk-aoe-test-" + secrets.token_hex(16)
    os.environ[KEY_ENV] = key
    with ScriptedModelServer([], mode="429", expect_key=key) as limited, \
            ScriptedModelServer(kill_self_script(), expect_key=key) as killer:
        world, out, provider = run_heat(
            tmp_path_factory.mktemp("ocfail"), guest_image,
            {"builder-one": OpencodeAdapter(base_url=limited.base_url, api_key_env=KEY_ENV),
             "builder-two": OpencodeAdapter(base_url=killer.base_url, api_key_env=KEY_ENV),
             "builder-three": "scripted:volatile"},
            ["scripted/limited", "scripted/killer", "volatile"], key, duration=FAILURES_HEAT_S,
            end_when=failures_settled,
        )
        assert len(limited.requests) >= 2  # opencode retried before giving up
    assert world.finish_reason == "match timer expired" and world.elapsed_ms < FAILURES_HEAT_S * 1000
    a = world.agents
    one = json.loads((out / "agents/builder-one-agent/result.json").read_text())
    two = json.loads((out / "agents/builder-two-agent/result.json").read_text())
    assert (one["status"], a["builder-one-agent"].failure_source) == ("unavailable", "provider"), one
    assert (two["status"], a["builder-two-agent"].failure_source) == ("harness_error", "harness"), two
    assert "signal" in two["summary"] or "crashed" in two["summary"], two
    # the third seat was not disturbed: its builder ran to its own end (its self-check may
    # race the referee's service-restart check, so completed or failed — a player outcome)
    three = json.loads((out / "agents/builder-three-agent/result.json").read_text())
    assert three["status"] in ("completed", "failed"), three
    assert a["builder-three-agent"].failure_source in (None, "player")
    assert world.territories["builder-three"].milestones["service-restart"].passed
    assert world.territories["builder-one"].competitor_state.value == "unavailable"
    assert no_key_in_folder(out, key) == []
    for tid, hits in provider.key_hits.items():
        assert hits.strip() == "0", f"{tid}: key found in guest: {hits!r}"


def world_rebooted(world, territory: str) -> bool:
    return world.territories[territory].milestones["host-reboot"].passed


def test_seats_start_equal(durable_heat):
    """Issue 26 item 4: every seat's harness is in place before ``match_started``. Each seat's
    staging is timed in ``aoe-extra.json``; opencode's binary was shared read-only into its
    container (nothing uploaded) and staged before the clock; its first model request and
    first tool call are recorded in match-clock ms."""
    _world, out, _provider, _requests, _script, _key = durable_heat
    extra = json.loads((out / "aoe-extra.json").read_text())
    agents = ("builder-one-agent", "builder-two-agent", "builder-three-agent")
    staging = extra["timings"]["staging_s"]
    assert set(staging) == set(agents) and all(isinstance(v, (int, float)) and v >= 0 for v in staging.values())
    assert extra["timings"]["staging_wall_s"] >= max(staging.values())
    one = extra["agents"]["builder-one-agent"]
    assert one["staging"]["harness"] == "shared" and one["staging"]["uploaded_bytes"] == 0, one["staging"]
    assert set(one["staging"]["steps_s"]) == {"install", "connect", "harness", "tunnel", "launcher", "warm"}
    assert one["staging"]["warm_start"] is True
    # the scripted builders stage nothing: they start at the clock
    assert set(extra["agents"]["builder-two-agent"]["staging"]) == {"seconds"}
    # the share is read-only in the territory, and still mounted after the guest's reboot
    # (builder-one passed host-reboot before the teardown wrote into it)
    assert world_rebooted(_world, "builder-one")
    status, output = _provider.share_write["builder-one"]
    assert status not in (0, None) and "opencode" in output and "Read-only file system" in output, (status, output)
    first, tool = one.get("first_model_request_ms"), one.get("first_tool_call_ms")
    print(f"opencode: staging {staging['builder-one-agent']:.2f} s, first model request at {first} ms, "
          f"first tool call at {tool} ms after match_started")
    assert isinstance(first, int), f"no model request recorded for opencode: {one}"
    # the scripted model's first answer is a tool call (durable_sqlite_script), so there is one
    assert isinstance(tool, int), f"opencode made no tool call (first model request at {first} ms): {one}"
    assert 0 <= first <= tool, (first, tool)
    # The target (within 1000 ms of match_started) is measured by benchmarks/opencode_start.py on a
    # quiet machine (0.3-0.6 s); a test does not time a loaded CI host. What it asserts: the harness was
    # warm before the clock — a cold opencode at the clock takes 6-7 s to its first request here.
    assert first <= 3000, (f"opencode's first model request came {first} ms after match_started, over 3000 ms: "
                           "it was not started warm (a cold start takes 6-7 s here; the 1.0 s target itself "
                           "is measured by benchmarks/opencode_start.py on a quiet machine)")
    # the warm run's answer is the model's, not the prompt read back from the server (review item 1)
    transcript = json.loads((out / "agents/builder-one-agent/transcript.json").read_text())
    prompt = transcript["messages"][0]["content"]
    said = [p["text"] for m in transcript["messages"][1:] for p in m["content"] if p.get("type") == "text"]
    result = json.loads((out / "agents/builder-one-agent/result.json").read_text())
    print(f"opencode's answer: {transcript['outcome'].get('result')!r}; summary {result['summary'][:120]!r}")
    assert prompt and prompt not in said and transcript["outcome"].get("result") != prompt, said
    assert prompt[:60] not in result["summary"], result["summary"]
    # no opencode process (the warm server) was left in builder-one's territory once its run ended
    # (a weak check here: the guest rebooted for host-reboot after the run; the unit test
    # test_a_completed_warm_run_ends_its_opencode_server checks the run's own cleanup)
    assert _provider.opencode_left.get("builder-one") == "", _provider.opencode_left


def test_opencode_atif_trajectory(durable_heat, tmp_path):
    """``aoe trajectory`` of the heat (§9.3): opencode's transcript gives a valid ATIF document
    whose totals are usage.json's; the scripted seats have no transcript and are skipped."""
    from aoe_tui.domain.atif import validate_trajectory
    from aoe_tui.export.trajectory import export_trajectories

    _world, out, _provider, _requests, _script, _key = durable_heat
    report = export_trajectories(out, tmp_path)
    assert report.errors == [] and len(report.written) == 1 and len(report.skipped) == 2
    doc = validate_trajectory(report.written[0].read_bytes())
    usage = json.loads((out / "agents/builder-one-agent/usage.json").read_text())["usage"]
    assert doc.agent.name == "opencode" and doc.final_metrics is not None
    assert doc.final_metrics.total_prompt_tokens == usage["input_tokens"]
    assert doc.final_metrics.total_completion_tokens == usage["output_tokens"]
    assert len(doc.steps) == 5 + 2
