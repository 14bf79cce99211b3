"""Unit tests of the opencode pieces without territories: §9.2 analysis against the seed,
the credential proxy against the real scripted model server, option parsing, event
folding and failure mapping, and the season file."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from pathlib import Path

import pytest

from aoe_tui.agents.analysis import analyze_trace, classify, command_of
from aoe_tui.agents.proxy import CredentialProxy, ProxyError
from aoe_tui.testing.model_server import ScriptedModelServer, ScriptStep, ToolCall, script_totals

REPO = Path(__file__).resolve().parent.parent
SEED = REPO / "tests" / "fixtures" / "seed" / "opencode-cup-2026-W37-r1-h2-a1.match.json"


def test_analysis_reproduces_seed_metrics_and_architecture():
    analyses = json.loads(SEED.read_text())["analyses"]
    for agent, expected in analyses.items():
        trace = []
        for a in expected["actions"]:
            name = "write" if a["command"].startswith("write {") else "bash"
            trace.append({"id": a["tool_id"], "name": name, "input": {"command": a["command"].rstrip("…")},
                          "output": a["output_excerpt"], "is_error": not a["success"],
                          "started_after_ms": a["started_after_ms"], "duration_ms": a["duration_ms"]})
        got = analyze_trace(trace, agent=agent, territory=expected["territory"], model=expected["model"],
                            outcome=expected["outcome"], source_sha256=expected["source_sha256"])
        assert got["metrics"] == expected["metrics"], agent
        assert got["architecture"] == expected["architecture"], agent
        assert [x["kind"] for x in got["actions"]] == [x["kind"] for x in expected["actions"]]
        assert set(got) == set(expected)


def test_analysis_rules():
    assert command_of("write", {"filePath": "/opt/x", "content": "a"}) == 'write {"content":"a","filePath":"/opt/x"}'
    assert command_of("read", {"file_path": "/etc/x"}) == "read /etc/x"
    assert classify("bash", "systemctl restart x && curl y") == "lifecycle"
    assert classify("bash", "mkdir -p /opt/b") == "mutation"
    assert classify("bash", "curl -s http://x") == "validation"
    assert classify("bash", "ls /") == "discovery"
    trace = [{"id": "1", "name": "TodoWrite", "input": {}}, {"id": "2", "name": "bash", "input": {"command": "x" * 800},
                                                           "output": "  a    b \n" + "y" * 400, "is_error": True}]
    got = analyze_trace(trace, agent="a", territory="t", model="m", outcome="failed", source_sha256="0")
    assert got["metrics"]["tool_calls"] == 1 and got["metrics"]["tool_errors"] == 1
    (act,) = got["actions"]
    assert act["index"] == 1 and len(act["command"]) == 701 and act["command"].endswith("…")
    assert act["output_excerpt"].startswith("a b") and len(act["output_excerpt"]) == 281
    assert analyze_trace([], agent="a", territory="t", model=None, outcome=None, source_sha256="0") is None


async def _post(port: int, body: dict, auth: str | None = "Bearer guest-placeholder",
                path: str = "/v1/chat/completions") -> tuple[int, bytes]:
    def go():
        req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json", **({"Authorization": auth} if auth else {})})
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as err:
            return err.code, err.read()

    return await asyncio.to_thread(go)


async def test_proxy_injects_key_and_counts_tokens():
    steps = [ScriptStep(tool_calls=(ToolCall("bash", {"command": "ls"}),), prompt_tokens=1000, completion_tokens=50,
                        cached_tokens=200, reasoning_tokens=7),
             ScriptStep(text="done", prompt_tokens=1500, completion_tokens=20)]
    with ScriptedModelServer(steps, expect_key="sk-real") as srv:
        async with CredentialProxy(srv.base_url, "sk-real") as proxy:
            assert "sk-real" not in repr(proxy)
            tools = [{"type": "function", "function": {"name": "bash", "parameters": {}}}]
            status, body = await _post(proxy.port, {"model": "m", "stream": True, "tools": tools, "messages": []})
            assert status == 200 and b"data: [DONE]" in body and b'"tool_calls"' in body
            status, body = await _post(proxy.port, {"model": "m", "stream": False, "tools": tools,
                                                     "messages": [{"role": "assistant", "content": "x"}]})
            assert status == 200 and json.loads(body)["choices"][0]["message"]["content"] == "done"
            totals = script_totals(steps)
            assert proxy.stats.prompt_tokens == totals["prompt_tokens"]
            assert proxy.stats.completion_tokens == totals["completion_tokens"]
            assert proxy.stats.cached_tokens == 200 and proxy.stats.reasoning_tokens == 7
        assert all(r["auth_ok"] for r in srv.requests)
        # without the proxy the guest's placeholder key is refused
        status, _ = await _post(srv.port, {"model": "m", "messages": []})
        assert status == 401


async def test_proxy_answers_the_warm_up_itself():
    """Issue 26: opencode's warm-up prompt before the clock (``/aoe-warmup/v1``) is answered by
    the proxy — streamed or not — never forwarded upstream, never counted, and the first real
    request is the one ``first_request_at`` records."""
    from aoe_tui.agents.proxy import WARMUP_PREFIX

    with ScriptedModelServer([ScriptStep(text="done", prompt_tokens=10, completion_tokens=2)], expect_key="sk-real") as srv:
        async with CredentialProxy(srv.base_url, "sk-real") as proxy:
            path = WARMUP_PREFIX + "/v1/chat/completions"
            status, body = await _post(proxy.port, {"model": "warmup", "stream": True, "messages": []}, path=path)
            assert status == 200 and b'"content": "ready"' in body and body.rstrip().endswith(b"data: [DONE]")
            status, body = await _post(proxy.port, {"model": "warmup", "messages": []}, path=path)
            assert status == 200 and json.loads(body)["choices"][0]["message"]["content"] == "ready"
            assert srv.requests == [] and proxy.stats.requests == 0 and proxy.stats.first_request_at is None
            assert proxy.stats.last_activity is None  # not model traffic
            status, _ = await _post(proxy.port, {"model": "m", "tools": [1], "messages": []})
            assert status == 200 and proxy.stats.requests == 1 and proxy.stats.first_request_at is not None
            assert len(srv.requests) == 1


async def test_proxy_counts_errors_and_unreachable():
    with ScriptedModelServer([], mode="429") as srv:
        async with CredentialProxy(srv.base_url, None) as proxy:
            status, _ = await _post(proxy.port, {"model": "m", "tools": [1], "messages": []})
            assert status == 429 and proxy.stats.error_statuses == {429: 1} and proxy.stats.prompt_tokens == 0
    async with CredentialProxy("http://127.0.0.1:9/v1", "k", connect_timeout_s=2) as proxy:
        status, body = await _post(proxy.port, {"model": "m", "messages": []})
        assert status == 502 and proxy.stats.connect_failures == 1 and b"cannot connect" in body
    with pytest.raises(ProxyError):
        CredentialProxy("ftp://x", "k")


def test_options_and_registry(monkeypatch):
    from aoe_tui.agents.opencode import OpencodeAdapter, OpencodeError, OpencodeOptions
    from aoe_tui.agents.registry import UnknownAdapterError, resolve_adapter

    a = resolve_adapter("opencode", options={"base_url": "http://h/v1", "api_key_env": "K", "max_steps": "7"})
    assert isinstance(a, OpencodeAdapter) and a.options.max_steps == 7 and a.options.api_key_env == "K"
    with pytest.raises(UnknownAdapterError, match="nope"):
        resolve_adapter("opencode", options={"nope": 1})
    with pytest.raises(OpencodeError, match="max_steps"):
        OpencodeOptions.from_mapping({"max_steps": "x"})
    monkeypatch.setenv("AOE_OPENCODE_BASE_URL", "http://env/v1")
    assert OpencodeOptions.from_mapping({}).base_url == "http://env/v1"


def _run_for_events(tmp_path):
    """An OpencodeRun without starting its task (only the event folding is exercised)."""
    from aoe_tui.agents.base import AgentContext
    from aoe_tui.agents.opencode import OpencodeAdapter, OpencodeRun
    from aoe_tui.domain.arena import AgentDef, Budget
    from aoe_tui.runtime.provider import Territory

    ctx = AgentContext(
        agent=AgentDef(id="a1", territory="t1", adapter="opencode", model="prov/model-x", budget=Budget(resource_units=1)),
        territory=Territory(id="t1", host="127.0.0.1", ssh_port=1, service_port=8080, password="p", credential_file=tmp_path / "c"),
        agent_dir=tmp_path, instruction_file=tmp_path / "i.md", deadline_s=1, arena_dir=tmp_path,
    )
    run = OpencodeRun.__new__(OpencodeRun)
    from aoe_tui.agents.base import AgentRun

    AgentRun.__init__(run, ctx)
    run.adapter, run.opts = OpencodeAdapter(), OpencodeAdapter().options
    from aoe_tui.agents.opencode import _State

    run.state, run.proxy_stats, run._last_usage, run._prompt = _State(), None, None, "do it"
    return run


def test_event_folding_and_error_mapping(tmp_path):
    run = _run_for_events(tmp_path)
    assert run.model_id == "model-x"
    t = 1_000_000
    run.on_event({"type": "step_start", "timestamp": t, "part": {}})
    run.on_event({"type": "tool_use", "timestamp": t + 50, "part": {"tool": "bash", "callID": "c1", "state": {
        "status": "completed", "input": {"command": "ls /opt"}, "output": "x\n", "time": {"start": t + 10, "end": t + 40}}}})
    run.on_event({"type": "step_finish", "timestamp": t + 60, "part": {"reason": "tool-calls", "cost": 0.0012, "tokens": {
        "input": 900, "output": 45, "reasoning": 5, "cache": {"read": 100, "write": 0}}}})
    u = run.usage()
    assert (u.input_tokens, u.output_tokens, u.cost_microusd, u.rounds, u.tool_calls) == (1000, 50, 1200, 1, 1)
    assert json.loads((tmp_path / "usage.json").read_text())["usage"]["input_tokens"] == 1000
    tr = run.transcript("running")
    assert tr["tool_trace"][0] == {"id": "c1", "name": "bash", "input": {"command": "ls /opt"}, "output": "x\n",
                                   "is_error": False, "read_only": False, "started_after_ms": 10, "duration_ms": 30}
    from aoe_tui.agents.base import AdapterStatus

    err = {"name": "APIError", "data": {"message": "Rate limit", "statusCode": 429, "isRetryable": True}}
    assert run._classify_error(err)[0] == AdapterStatus.UNAVAILABLE
    assert run._classify_error({"name": "APIError", "data": {"message": "Cannot connect to API: x"}})[0] == AdapterStatus.UNAVAILABLE
    assert run._classify_error({"name": "UnknownError", "data": {"message": "Unexpected"}})[0] == AdapterStatus.HARNESS_ERROR
    cfg = run._config(4242)
    assert cfg["provider"]["aoe"]["options"]["baseURL"] == "http://127.0.0.1:4242/v1"
    assert cfg["provider"]["aoe"]["options"]["apiKey"] == "aoe-credential-proxy"


def test_opencode_cup_season_validates(tmp_path, monkeypatch):
    from aoe_tui.agents.opencode import OpencodeAdapter
    from aoe_tui.domain.season_file import load_season
    from aoe_tui.errors import AoeError
    from aoe_tui.season.runner import SeasonRunner

    loaded = load_season(REPO / "seasons" / "opencode-cup.toml")
    # without the model key on the runner the season is refused before any territory exists
    monkeypatch.delenv("OPENCODE_API_KEY", raising=False)
    with pytest.raises(AoeError, match=r"entrants\[0\]\.adapter: environment variable OPENCODE_API_KEY"):
        SeasonRunner(loaded, tmp_path / "season")
    monkeypatch.setenv("OPENCODE_API_KEY", "sk-test-not-a-real-key")
    runner = SeasonRunner(loaded, tmp_path / "season")
    for e in loaded.season.entrants:
        a = runner._make_adapter(e)
        assert isinstance(a, OpencodeAdapter) and a.options.api_key_env == "OPENCODE_API_KEY"
        assert a.options.base_url.startswith("https://")


def _session_messages(sid: str, prompt: str) -> list[dict]:
    """``GET /session/<id>/message`` as opencode 1.18.33's server answers it (trimmed; the
    shape captured from a real ``serve`` + ``run --attach``): the user's message (``info`` keys
    agent, id, model, role, sessionID, summary, time; its one ``text`` part is the prompt) and
    the assistant's (``info.role`` "assistant"; parts step-start, text, step-finish)."""
    user = {"info": {"id": "msg_u1", "sessionID": sid, "role": "user", "time": {"created": 1_000_000},
                     "agent": "build", "model": {"providerID": "aoe", "modelID": "model-x"}},
            "parts": [{"id": "prt_u1", "sessionID": sid, "messageID": "msg_u1", "type": "text", "text": prompt}]}
    assistant = {"info": {"id": "msg_a1", "sessionID": sid, "role": "assistant", "parentID": "msg_u1",
                          "time": {"created": 1_000_010, "completed": 1_000_900}, "modelID": "model-x",
                          "providerID": "aoe", "mode": "build", "cost": 0,
                          "tokens": {"input": 10, "output": 3, "reasoning": 0, "cache": {"read": 0, "write": 0}},
                          "finish": "stop"},
                 "parts": [{"id": "prt_a1", "sessionID": sid, "messageID": "msg_a1", "type": "step-start"},
                           {"id": "prt_a2", "sessionID": sid, "messageID": "msg_a1", "type": "text", "text": "All done.",
                            "time": {"start": 1_000_500, "end": 1_000_800}},
                           {"id": "prt_a3", "sessionID": sid, "messageID": "msg_a1", "type": "step-finish",
                            "reason": "stop", "cost": 0, "tokens": {"input": 10, "output": 3, "reasoning": 0,
                                                                     "cache": {"read": 0, "write": 0}}}]}
    return [user, assistant]


class _FakeConn:
    """``conn.run`` answers the session's messages for the ``curl``; records every command."""

    def __init__(self, messages: list[dict]) -> None:
        self.messages, self.commands = messages, []

    def is_closed(self) -> bool:
        return False

    async def run(self, cmd: str, check: bool = False):
        self.commands.append(cmd)
        from types import SimpleNamespace

        return SimpleNamespace(stdout=json.dumps(self.messages) if "curl" in cmd else "", exit_status=0)


@pytest.mark.parametrize("printed", [False, True])
async def test_recover_parts_folds_only_the_assistants_parts(tmp_path, printed):
    """Warm start: the parts the attached run did not print are read back from the server; the
    user's message (the prompt, never printed by ``run --format json``) is not one of them."""
    run = _run_for_events(tmp_path)
    prompt = "Build the service on port 8080 and make it durable."
    run._prompt = prompt
    sid = "ses_abc"
    t = 1_000_000
    run.on_event({"type": "step_start", "timestamp": t, "sessionID": sid, "part": {"id": "prt_a1", "type": "step-start"}})
    if printed:  # the run printed the answer itself: nothing to recover, the answer stays
        run.on_event({"type": "text", "timestamp": t + 800, "sessionID": sid,
                      "part": {"id": "prt_a2", "type": "text", "text": "All done."}})
    conn = _FakeConn(_session_messages(sid, prompt))
    await run._recover_parts(conn)
    assert run.state.final_text == "All done."
    assert run.state.last_reason == "stop"
    assert not any(prompt[:40] in line for line in run.activity), run.activity
    assert [p for p in run.state.parts if p.get("type") == "text"] == [{"type": "text", "text": "All done."}]
    assert "prt_u1" not in run.state.seen_parts
