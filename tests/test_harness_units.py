"""The harness runner and the ``claude-code`` / ``codex`` adapters, without territories (issue 27).

The streams in ``tests/fixtures/harnesses/`` were recorded by running the real Claude Code
2.1.332 and Codex 0.171.0 binaries against ``tests/harness_fake.py`` (``ok``: one shell call
then an answer; ``500``: the server fails every request; ``stall``: headers and the first
event, then silence, killed after 8 s). :func:`test_recording_matches_a_fresh_run` records
``ok`` again when the binaries are installed (``./setup.sh``) and checks they still parse the
same. Usage per response in the fake server: input 1111, cache write 222, cache read 333,
output 44, reasoning 5.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from aoe_tui.agents.base import AdapterStatus
from aoe_tui.agents.claude_code import ClaudeCode, ClaudeCodeAdapter
from aoe_tui.agents.codex import Codex, CodexAdapter
from aoe_tui.agents.harness import HarnessError, HarnessOptions, HarnessRun, fold_stream, provider_status

FIX = Path(__file__).resolve().parent / "fixtures" / "harnesses"
HARNESSES = {"claude-code": ClaudeCode(), "codex": Codex()}


def lines(name: str) -> list[str]:
    return (FIX / f"{name}.jsonl").read_text().splitlines()


# ----------------------------------------------------------------------------- stream parsing


def test_claude_code_ok_stream():
    s, act = fold_stream(ClaudeCode(), lines("claude-code-ok"))
    # the result line's usage: 2 requests of input 1111 + write 222 + read 333, output 44
    assert (s.input_tokens, s.output_tokens, s.cache_read, s.cache_write) == (3332, 88, 666, 444)
    assert (s.rounds, s.tool_calls, s.final, s.failure) == (2, 1, True, None)
    assert s.final_text == "Done: probe.txt holds hello."
    assert s.trace[0]["name"] == "Bash" and s.trace[0]["input"] == {"command": "echo hello > probe.txt && cat probe.txt"}
    assert s.trace[0]["output"] == "hello" and s.trace[0]["is_error"] is False
    assert "Bash: echo hello > probe.txt && cat probe.txt" in act
    assert "says: Done: probe.txt holds hello." in act
    assert s.harness_cost_usd > 0  # the CLI's list price is kept apart, never reported


def test_claude_code_live_usage_before_the_result():
    """Before the final ``result``, checkpoints come from each message's ``message_start`` usage."""
    s, _ = fold_stream(ClaudeCode(), lines("claude-code-ok")[:-1])
    assert (s.input_tokens, s.cache_read, s.cache_write, s.rounds) == (3332, 666, 444, 2)
    assert s.final is False


def test_claude_code_server_error_is_the_providers():
    s, act = fold_stream(ClaudeCode(), lines("claude-code-500"))
    assert s.final is False and s.rounds == 0  # the synthetic error message is no model turn
    assert s.failure is not None and s.failure[0] == AdapterStatus.UNAVAILABLE
    assert "HTTP 500" in s.failure[1]
    assert any(a.startswith("API retry 1/1 (HTTP 500)") for a in act)


def test_codex_ok_stream():
    s, act = fold_stream(Codex(), lines("codex-ok"))
    # turn.completed sums 2 requests: input 1111 (cached included), cached 333, written 222, output 44
    assert (s.input_tokens, s.output_tokens, s.cache_read, s.cache_write, s.reasoning) == (2222, 88, 666, 444, 10)
    assert (s.rounds, s.tool_calls, s.final, s.failure) == (2, 1, True, None)
    assert s.final_text == "Done: probe.txt holds hello."
    assert s.trace[0]["name"] == "exec_command" and "echo hello > probe.txt" in s.trace[0]["input"]["command"]
    assert s.trace[0]["output"] == "hello\n"
    assert any(a.startswith("exec_command: /bin/bash -lc") for a in act)
    assert any(a.startswith("Codex warning: Model metadata") for a in act)  # non-fatal


def test_codex_server_error_is_the_providers():
    s, act = fold_stream(Codex(), lines("codex-500"))
    assert s.failure is not None and s.failure[0] == AdapterStatus.UNAVAILABLE
    assert sum(a.startswith("Codex: Reconnecting") for a in act) == 5


@pytest.mark.parametrize("name", ["claude-code", "codex"])
def test_stalled_stream_has_no_answer_and_no_failure(name):
    s, _ = fold_stream(HARNESSES[name], lines(f"{name}-stall"))
    assert s.final is False and s.failure is None  # the runner's idle limit decides


def test_provider_status_rule():
    assert provider_status(429, "") and provider_status(503, "") and provider_status(401, "")
    assert provider_status(None, "API Error: Connection refused")
    assert not provider_status(400, "invalid tool schema")
    assert not provider_status(None, "Missing environment variable: `X`.")


# ----------------------------------------------------------------------------- the run


class _Stream:
    """Gives ``data``, then EOF — or, with ``hang``, nothing until the process is killed."""

    def __init__(self, data: list[bytes], hang: bool, killed: asyncio.Event) -> None:
        self.data, self.hang, self.killed = list(data), hang, killed

    async def readline(self) -> bytes:
        if self.data:
            await asyncio.sleep(0)
            return self.data.pop(0)
        if self.hang:
            await self.killed.wait()
        return b""

    async def read(self, n: int) -> bytes:
        if self.data:
            return self.data.pop(0)
        if self.hang:
            await self.killed.wait()
        return b""


class _Proc:
    """An asyncssh-like process replaying a recorded stream; ``hang``: never exits (killed)."""

    def __init__(self, out: list[str], rc: int | None = 0, hang: bool = False, stderr: bytes = b"") -> None:
        self.killed = asyncio.Event()
        self.stdout = _Stream([(x + "\n").encode() for x in out], hang, self.killed)
        self.stderr = _Stream([stderr] if stderr else [], hang, self.killed)
        self.rc, self.hang = rc, hang
        self.returncode = self.exit_status = None
        self.exit_signal = None

    async def wait_closed(self) -> None:
        if self.hang:
            await self.killed.wait()
            self.exit_signal = ("KILL", False, "", "")
            self.returncode = -9
            return
        while self.stdout.data:
            await asyncio.sleep(0.01)
        self.returncode = self.exit_status = self.rc


class _Conn:
    def __init__(self, proc: _Proc) -> None:
        self.proc, self.commands = proc, []

    def is_closed(self) -> bool:
        return False

    async def run(self, cmd: str, check: bool = False):
        self.commands.append(cmd)
        if "systemctl kill" in cmd:
            self.proc.killed.set()


def _run(tmp_path: Path, adapter, **opts) -> HarnessRun:
    from aoe_tui.agents.base import AgentContext
    from aoe_tui.domain.arena import AgentDef, Budget
    from aoe_tui.runtime.provider import Territory

    for k, v in opts.items():
        setattr(adapter.options, k, v)
    ctx = AgentContext(
        agent=AgentDef(id="a1", territory="t1", adapter=adapter.name, model="prov/probe-model",
                       budget=Budget(resource_units=1)),
        territory=Territory(id="t1", host="127.0.0.1", ssh_port=1, service_port=8080, password="p",
                            credential_file=tmp_path / "c"),
        agent_dir=tmp_path, instruction_file=tmp_path / "i.md", deadline_s=60, arena_dir=tmp_path,
    )
    run = HarnessRun.__new__(HarnessRun)
    run.setup(ctx, adapter)
    run.prompt = "Build it."
    run.tick_s = 0.05
    return run


def _adapter(name: str):
    return (ClaudeCodeAdapter if name == "claude-code" else CodexAdapter)({"api_key_env": ""})


@pytest.mark.parametrize("name", ["claude-code", "codex"])
def test_run_writes_usage_transcript_analysis_and_result(tmp_path, name):
    from aoe_tui.domain.prices import PriceRates

    adapter = _adapter(name)
    adapter.price = PriceRates(input=1_000_000, output=2_000_000, cache_read=100_000, cache_write=1_250_000)
    run = _run(tmp_path, adapter)
    proc = _Proc(lines(f"{name}-ok"))
    conn = _Conn(proc)
    status, summary = asyncio.run(run.follow(conn, proc))
    assert status == AdapterStatus.COMPLETED and summary == "Done: probe.txt holds hello."
    out = run._finish(status, summary)
    usage = json.loads((tmp_path / "usage.json").read_text())["usage"]
    s = run.state
    assert usage["input_tokens"] == s.input_tokens and usage["output_tokens"] == 88
    # cost from [prices] only: uncached input, cache reads, cache writes, output
    uncached = s.input_tokens - 666 - 444
    assert usage["cost_microusd"] == uncached * 1 + 88 * 2 + round(666 * 0.1) + round(444 * 1.25)
    assert run.usage_detail()["cost_source"] == "price table"
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["status"] == "completed" and result["transcript"]
    tr = json.loads((tmp_path / "transcript.json").read_text())
    assert tr["harness"]["name"] == name and tr["outcome"]["result"] == summary
    assert tr["messages"][0] == {"role": "user", "content": "Build it."}
    assert tr["tool_trace"][0]["input"] and len(tr["timing"]["model_rounds"]) == 2
    analysis = json.loads((tmp_path / "analysis.json").read_text())
    assert analysis["agent"] == "a1" and analysis["actions"]
    assert out.usage.input_tokens == s.input_tokens
    assert (tmp_path / "stdout.log").read_text().count("\n") == len(lines(f"{name}-ok"))


@pytest.mark.parametrize("name", ["claude-code", "codex"])
def test_unpriced_cost_is_zero_not_the_clis(tmp_path, name):
    run = _run(tmp_path, _adapter(name))
    proc = _Proc(lines(f"{name}-ok"))
    asyncio.run(run.follow(_Conn(proc), proc))
    assert run.usage().cost_microusd == 0
    assert run.usage_detail()["cost_source"] == "unpriced"


@pytest.mark.parametrize("name", ["claude-code", "codex"])
def test_server_errors_are_the_providers(tmp_path, name):
    run = _run(tmp_path, _adapter(name))
    proc = _Proc(lines(f"{name}-500"), rc=1)
    status, summary = asyncio.run(run.follow(_Conn(proc), proc))
    assert status == AdapterStatus.UNAVAILABLE and status.failure_source == "provider"
    assert "model provider unavailable" in summary


@pytest.mark.parametrize("name", ["claude-code", "codex"])
def test_stalled_stream_is_killed_by_the_idle_limit(tmp_path, name):
    run = _run(tmp_path, _adapter(name), idle_timeout_s=0.3)
    proc = _Proc(lines(f"{name}-stall"), hang=True)
    conn = _Conn(proc)
    t = time.monotonic()
    status, summary = asyncio.run(run.follow(conn, proc))
    assert time.monotonic() - t < 5
    assert status == AdapterStatus.HARNESS_ERROR and status.failure_source == "harness"
    assert "idle_timeout_s limit of 0.3 s fired" in summary
    assert any("systemctl kill -s KILL aoe-" + name + "-a1.scope" in c for c in conn.commands)


def test_stalled_stream_with_only_failing_endpoint_is_the_providers(tmp_path):
    from types import SimpleNamespace

    run = _run(tmp_path, _adapter("codex"), idle_timeout_s=0.3)
    run.proxy_stats = SimpleNamespace(prompt_tokens=0, completion_tokens=0, responses_with_usage=0, connect_failures=3,
                                      error_statuses={}, last_error="upstream connection refused", last_activity=None)
    proc = _Proc(lines("codex-stall")[:2], hang=True)
    status, summary = asyncio.run(run.follow(_Conn(proc), proc))
    assert status == AdapterStatus.UNAVAILABLE and "connection refused" in summary


def test_a_crash_without_an_answer_is_the_harness(tmp_path):
    run = _run(tmp_path, _adapter("codex"))
    proc = _Proc([], rc=1, stderr=b"Error: config.toml: wire_api = \"chat\" is no longer supported\n")
    status, summary = asyncio.run(run.follow(_Conn(proc), proc))
    assert status == AdapterStatus.HARNESS_ERROR and "wire_api" in summary


def test_claude_max_turns_is_budget_exceeded(tmp_path):
    run = _run(tmp_path, _adapter("claude-code"))
    result = {"type": "result", "subtype": "error_max_turns", "is_error": True, "terminal_reason": "max_turns",
              "num_turns": 3, "usage": {"input_tokens": 5, "output_tokens": 1}}
    proc = _Proc(lines("claude-code-ok")[:-1] + [json.dumps(result)], rc=1)
    status, _ = asyncio.run(run.follow(_Conn(proc), proc))
    assert status == AdapterStatus.BUDGET_EXCEEDED


# ----------------------------------------------------------------------------- options, launcher


def test_options_errors_name_the_field():
    with pytest.raises(HarnessError, match=r"options\.idle_timeout_s: expected a number"):
        HarnessOptions.from_mapping({"idle_timeout_s": "soon"}, Codex())
    with pytest.raises(HarnessError, match=r"options\.nope: unknown codex option"):
        HarnessOptions.from_mapping({"nope": 1}, Codex())
    with pytest.raises(HarnessError, match="base_url must be an http"):
        HarnessOptions.from_mapping({"base_url": "ftp://x"}, ClaudeCode())


def test_registry_resolves_both_harnesses():
    from aoe_tui.agents.registry import BUILTIN_SPECS, HARNESSES, UnknownAdapterError, resolve_adapter

    assert {"claude-code", "codex"} <= set(BUILTIN_SPECS) and set(HARNESSES) == {"claude-code", "codex"}
    assert isinstance(resolve_adapter("claude-code"), ClaudeCodeAdapter)
    assert resolve_adapter("codex", options={"api_key_env": "MY_KEY"}).credential_names() == ["MY_KEY"]
    with pytest.raises(UnknownAdapterError, match="max_turns"):
        resolve_adapter("codex", options={"max_turns": 0})


def test_launchers_reach_the_model_only_through_the_proxy(tmp_path):
    from aoe_tui.agents.harness import PLACEHOLDER_KEY, HarnessStaged

    for name in ("claude-code", "codex"):
        run = _run(tmp_path, _adapter(name))
        staged = HarnessStaged(run.ctx, run.adapter)
        staged.guest_port, staged.bin_dir = 40123, f"/opt/aoe-harness/{name}"
        text = staged.launcher()
        assert text.startswith("#!/bin/sh\n") and "exec env -i " in text and "/prompt.md" in text
        files = run.harness.files(staged.run_dir, 40123, "probe-model", run.opts, run.ctx)
        joined = text + "".join(files.values())
        assert "127.0.0.1:40123" in joined and PLACEHOLDER_KEY in joined
        assert "api.anthropic.com" not in joined and "api.openai.com" not in joined
    cc = ClaudeCode().env("/r", 40123, "m", run.opts, run.ctx)
    assert cc["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:40123" and cc["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
    cfg = Codex().files("/r", 40123, "m", run.opts, run.ctx)["/r/home/.codex/config.toml"]
    import tomllib

    parsed = tomllib.loads(cfg)
    assert parsed["model_providers"]["aoe"]["wire_api"] == "responses"
    assert parsed["model_providers"]["aoe"]["base_url"] == "http://127.0.0.1:40123/v1"
    assert parsed["analytics"]["enabled"] is False and parsed["features"]["plugins"] is False


# ----------------------------------------------------------------------------- fresh recordings


@pytest.mark.parametrize("name", ["claude-code", "codex"])
def test_recording_matches_a_fresh_run(tmp_path, name):
    """Run the real binary (no network: the fake server on 127.0.0.1) and parse its stream."""
    from harness_fake import record

    h = HARNESSES[name]
    binary = h.binary()
    if binary is None:
        pytest.skip(f"{name} {h.version} is not installed (./setup.sh installs it from npm)")
    rc, out, err = record(h, binary, "ok", tmp_path, timeout_s=60)
    assert rc == 0, err[-500:]
    fresh, _ = fold_stream(h, out)
    recorded, _ = fold_stream(h, lines(f"{name}-ok"))
    for f in ("input_tokens", "output_tokens", "cache_read", "cache_write", "rounds", "tool_calls", "final",
              "final_text"):
        assert getattr(fresh, f) == getattr(recorded, f), f
    assert (tmp_path / "cwd" / "probe.txt").read_text() == "hello\n"


def test_shipped_harnesses_season_needs_no_key():
    """``seasons/harnesses.toml``: opencode, Claude Code and Codex against the same scripted
    model on 127.0.0.1, no key variable, priced from ``[prices]``."""
    from aoe_tui.agents.registry import resolve_adapter
    from aoe_tui.season.runner import load_season_file

    season = load_season_file(Path(__file__).resolve().parent.parent / "seasons" / "harnesses.toml").season
    assert [e.adapter for e in season.entrants] == ["opencode", "claude-code", "codex"]
    assert len({e.model for e in season.entrants}) == 1
    for e in season.entrants:
        adapter = resolve_adapter(e.adapter, options=e.options)
        assert adapter.credential_names() == [] and adapter.options.base_url.startswith("http://127.0.0.1:")
        adapter.preflight()  # no key needed
    assert season.entrants[0].model in season.prices


def test_preflight_names_the_missing_key_variable(monkeypatch):
    monkeypatch.delenv("AOE_TEST_NO_SUCH_KEY", raising=False)
    adapter = ClaudeCodeAdapter({"api_key_env": "AOE_TEST_NO_SUCH_KEY"})
    with pytest.raises(HarnessError, match="environment variable AOE_TEST_NO_SUCH_KEY .* not set on the runner"):
        adapter.preflight()
    adapter.credentials = {"AOE_TEST_NO_SUCH_KEY": "sk-secret-value"}
    adapter.preflight()
    assert adapter.credential_names() == ["AOE_TEST_NO_SUCH_KEY"]
    assert "sk-secret-value" not in repr(adapter.options)


def test_wall_clock_limit_is_timed_out_and_kills_the_scope(tmp_path):
    """``wall_clock_s`` bounds the whole run (staging at the clock included): ``timed_out``, the
    scope killed, every artifact written."""
    run = _run(tmp_path, _adapter("codex"), wall_clock_s=0.2)
    killed = []

    async def body():
        await asyncio.sleep(30)

    async def kill():
        killed.append(True)

    run._body, run.kill = body, kill

    async def go():
        run._task = asyncio.ensure_future(run._supervise())
        return await run.wait()

    out = asyncio.run(go())
    assert out.status == AdapterStatus.TIMED_OUT and "wall_clock_s limit of 0.2 s fired" in out.summary
    assert killed and json.loads((tmp_path / "result.json").read_text())["status"] == "timed_out"
    assert (tmp_path / "usage.json").exists() and (tmp_path / "transcript.json").exists()


def test_a_staging_error_is_the_harness(tmp_path):
    run = _run(tmp_path, _adapter("claude-code"))

    async def body():
        raise HarnessError("cannot reach territory t1 over SSH: refused")

    run._body = body

    async def go():
        run._task = asyncio.ensure_future(run._supervise())
        return await run.wait()

    out = asyncio.run(go())
    assert out.status == AdapterStatus.HARNESS_ERROR and out.status.failure_source == "harness"
    assert "cannot reach territory t1" in out.summary


@pytest.mark.parametrize("name", ["claude-code", "codex"])
def test_a_proxy_refusal_past_a_live_limit_ends_the_run_as_budget_exceeded(tmp_path, name):
    """Issue 27: once the credential proxy refuses a call past a spend limit, the watchdog ends
    the CLI (its scope killed) and the seat's record is ``budget_exceeded`` naming the limit and
    the amount spent, whatever the CLI made of the 402 (an API error, a retry, a hang)."""
    from types import SimpleNamespace

    run = _run(tmp_path, _adapter(name), idle_timeout_s=30)
    refused = "budget exceeded: spent 2400 µUSD of 2000 µUSD"
    run.proxy_stats = SimpleNamespace(prompt_tokens=0, completion_tokens=0, responses_with_usage=4, connect_failures=0,
                                      error_statuses={402: 1}, last_error=None, last_activity=None, refused=refused)
    proc = _Proc(lines(f"{name}-stall")[:2], hang=True)
    conn = _Conn(proc)
    t = time.monotonic()
    status, summary = asyncio.run(run.follow(conn, proc))
    assert time.monotonic() - t < 5  # the next watchdog tick, not the idle limit
    assert status == AdapterStatus.BUDGET_EXCEEDED and status.failure_source == "player"
    assert summary == f"{refused}; the credential proxy refused the next model call"
    assert any("systemctl kill -s KILL aoe-" + name + "-a1.scope" in c for c in conn.commands)
    run._finish(status, summary)
    assert json.loads((tmp_path / "result.json").read_text())["status"] == "budget_exceeded"


def test_usage_never_reports_less_than_the_proxy_priced_and_enforced(tmp_path):
    """A run cut before its CLI's final usage event: ``usage.json`` takes the proxy's counts
    (cache included) and the proxy's cost, the figure the live limits enforced."""
    from types import SimpleNamespace

    from aoe_tui.domain.prices import PriceRates

    adapter = _adapter("claude-code")
    adapter.price = PriceRates(input=1_000_000, output=2_000_000, cache_read=100_000, cache_write=1_250_000)
    run = _run(tmp_path, adapter)
    run.proxy_stats = SimpleNamespace(prompt_tokens=5_000, completion_tokens=100, cached_tokens=4_000,
                                      cache_write_tokens=500, responses_with_usage=3, cost_microusd=2_450)
    u = run.usage()
    assert (u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_write_tokens) == (5_000, 100, 4_000, 500)
    assert u.cost_microusd == max(2_450, 500 * 1 + 100 * 2 + 400 + 625)
    detail = run.usage_detail()  # what aoe-extra.json and the standings' cache column show
    assert (detail["cache_read_tokens"], detail["cache_write_tokens"]) == (4_000, 500)


@pytest.mark.parametrize("name, path", [("claude-code", "/v1/messages"), ("codex", "/v1/responses")])
def test_preflight_checks_the_key_in_the_harnesss_own_api_before_any_territory(name, path, monkeypatch):
    """A refused key is the provider's, found before a territory boots (as opencode's), in the
    API the CLI speaks, never after a whole race (Claude Code retries a 401 for minutes)."""
    from aoe_tui.agents.base import PreflightError
    from aoe_tui.testing.model_server import ScriptedModelServer, durable_sqlite_script

    good = "sk-aoe-good-" + "k" * 12
    with ScriptedModelServer(durable_sqlite_script(), expect_key=good) as srv:
        adapter = (ClaudeCodeAdapter if name == "claude-code" else CodexAdapter)(
            {"base_url": srv.base_url, "api_key_env": "AOE_TEST_PF_KEY"})
        monkeypatch.setenv("AOE_TEST_PF_KEY", good)
        asyncio.run(adapter.preflight_model("scripted/durable-sqlite"))
        monkeypatch.setenv("AOE_TEST_PF_KEY", "sk-aoe-wrong-" + "w" * 12)
        with pytest.raises(PreflightError, match=r"^credentials refused by 127\.0\.0\.1:\d+ \(HTTP 401") as err:
            asyncio.run(adapter.preflight_model("scripted/durable-sqlite"))
        assert err.value.failure_source == "provider" and "wrong" not in str(err.value)
        assert [r["path"].split("?")[0] for r in srv.requests] == [path, path]


def test_npm_installs_keep_the_ca_settings_and_nothing_secret(monkeypatch):
    """``npm install --prefix DIR`` reads DIR/etc/npmrc, not the system's global npmrc (where a
    TLS-inspecting proxy's cafile is set), so the CA variables must reach npm; keys must not."""
    from aoe_tui.agents.harness import tool_environment

    monkeypatch.setenv("NODE_EXTRA_CA_CERTS", "/etc/ssl/certs/proxy.pem")
    monkeypatch.setenv("SSL_CERT_FILE", "/etc/ssl/certs/ca-certificates.crt")
    monkeypatch.setenv("npm_config_registry", "http://127.0.0.1:4873/")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-secret")
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-or-secret")
    env = tool_environment()
    assert env["NODE_EXTRA_CA_CERTS"] == "/etc/ssl/certs/proxy.pem"
    assert env["SSL_CERT_FILE"] == "/etc/ssl/certs/ca-certificates.crt"
    assert env["npm_config_registry"] == "http://127.0.0.1:4873/"
    assert "ANTHROPIC_API_KEY" not in env and "OPENROUTER_API_KEY" not in env
