"""Issue 18 items 4, 5 and 8 (first bullet): what an opencode run's failure is charged to,
the watchdog's liveness and limits, the model preflight, and damaged transcripts.

opencode itself is played by :mod:`aoe_tui.testing.opencode_stub` (a local process replaying
recorded events, stderr, log lines and exit codes) driven through the adapter's real
``_follow`` (reader, watchdog, classification); the model by the scripted model server,
reached through the real credential proxy. No territory is needed.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import sys
import time
from pathlib import Path

import pytest

from aoe_tui.agents.base import AdapterStatus, AgentContext, AgentRun, PreflightError, preflight_entrants
from aoe_tui.agents.opencode import OpencodeAdapter, OpencodeError, OpencodeOptions, OpencodeRun, _State, pending_permission
from aoe_tui.agents.proxy import CredentialProxy
from aoe_tui.testing.model_server import ScriptedModelServer, ScriptStep

REPO = Path(__file__).resolve().parent.parent
T0 = 1_796_000_000_000
SID = "ses_stub"


def ev(kind: str, dt: int = 0, **part) -> dict:
    return {"event": {"type": kind, "timestamp": T0 + dt, "sessionID": SID, "part": part}}


def finish(reason: str, dt: int = 0) -> dict:
    return ev("step_finish", dt, type="step-finish", reason=reason, cost=0,
              tokens={"total": 11, "input": 10, "output": 1, "reasoning": 0, "cache": {"read": 0, "write": 0}})


def bash_call(cmd: str, dt: int = 0) -> dict:
    return ev("tool_use", dt, type="tool", tool="bash", callID=f"c{dt}", state={
        "status": "completed", "input": {"command": cmd}, "output": "ok\n", "time": {"start": T0 + dt, "end": T0 + dt + 5}})


RATE_LIMIT = {"event": {"type": "error", "timestamp": T0 + 50, "sessionID": SID, "error": {
    "name": "APIError", "data": {"message": "Rate limit exceeded", "statusCode": 429, "isRetryable": True}}}}


class _Conn:
    def is_closed(self) -> bool:
        return False


class _Proc:
    """The asyncssh process surface ``_follow`` reads, over a local asyncio subprocess."""

    def __init__(self, p: asyncio.subprocess.Process) -> None:
        self.p, self.stdout, self.stderr = p, p.stdout, p.stderr

    async def wait_closed(self) -> None:
        await self.p.wait()

    @property
    def returncode(self):
        return self.p.returncode

    @property
    def exit_status(self):
        return self.p.returncode if (self.p.returncode or 0) >= 0 else -1

    @property
    def exit_signal(self):
        return ("KILL", False, "", "") if (self.p.returncode or 0) < 0 else None


def make_ctx(tmp_path: Path, model: str = "prov/model-x", deadline_s: float = 60) -> AgentContext:
    from aoe_tui.domain.arena import AgentDef, Budget
    from aoe_tui.runtime.provider import Territory

    (tmp_path / "i.md").write_text("do it")
    return AgentContext(
        agent=AgentDef(id="a1", territory="t1", adapter="opencode", model=model, budget=Budget(resource_units=1)),
        territory=Territory(id="t1", host="127.0.0.1", ssh_port=1, service_port=8080, password="p",
                            credential_file=tmp_path / "c"),
        agent_dir=tmp_path, instruction_file=tmp_path / "i.md", deadline_s=deadline_s, arena_dir=tmp_path,
    )


async def run_stub(tmp_path: Path, actions: list[dict], *, proxy_stats=None, **opts):
    """Run the stub as opencode through ``OpencodeRun._follow``; returns ((status, summary), run, seconds)."""
    run = OpencodeRun.__new__(OpencodeRun)
    AgentRun.__init__(run, make_ctx(tmp_path))
    run.adapter = OpencodeAdapter(**opts)
    run.opts = run.adapter.options
    run.state, run.proxy_stats, run._last_usage, run._prompt, run._conn = _State(), proxy_stats, None, "do it", None
    run._tick_s = 0.05
    script, log = tmp_path / "stub.json", tmp_path / "opencode.stub.log"
    script.write_text(json.dumps(actions))
    env = dict(os.environ, OPENCODE_STUB_LOG=str(log), PYTHONPATH=str(REPO))
    p = await asyncio.create_subprocess_exec(sys.executable, "-m", "aoe_tui.testing.opencode_stub", str(script),
                                             stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env)

    async def kill_scope() -> None:
        if p.returncode is None:
            p.kill()

    async def log_tail() -> str:
        return log.read_text() if log.exists() else ""

    run._kill_scope, run._guest_log_tail = kill_scope, log_tail
    t = time.monotonic()
    result = await run._follow(_Conn(), _Proc(p))
    return result, run, time.monotonic() - t


# --------------------------------------------------------------------------- item 4: classification


async def test_final_answer_after_recovered_error_is_the_players(tmp_path):
    (status, summary), run, _ = await run_stub(tmp_path, [
        ev("step_start"), bash_call("ls"), finish("tool-calls", 10), RATE_LIMIT,
        ev("step_start", 60), ev("text", 70, type="text", text="Deployed the service."), finish("stop", 80),
        {"exit": 1},
    ])
    assert status == AdapterStatus.COMPLETED and status.failure_source == "player"
    assert summary.startswith("Deployed the service.")
    assert "recovered from an error: APIError: Rate limit exceeded" in summary and "exit status 1" in summary


async def test_error_without_a_later_answer_is_still_the_providers(tmp_path):
    (status, summary), _, _ = await run_stub(tmp_path, [ev("step_start"), bash_call("ls"), finish("tool-calls"),
                                                        RATE_LIMIT, {"exit": 1}])
    assert (status, status.failure_source) == (AdapterStatus.UNAVAILABLE, "provider")
    assert "HTTP 429" in summary


async def test_unknown_model_on_stderr_is_the_providers_and_quotes_stderr(tmp_path):
    line = "Error: ProviderModelNotFoundError: Model not found: aoe/model-x"
    (status, summary), _, _ = await run_stub(tmp_path, [{"stderr": "\x1b[91m\x1b[1m" + line + "\x1b[0m"}, {"exit": 0}])
    assert (status, status.failure_source) == (AdapterStatus.UNAVAILABLE, "provider")
    assert "'prov/model-x'" in summary and line in summary and "\x1b" not in summary


async def test_model_unknown_to_the_endpoint_is_the_providers(tmp_path):
    """opencode 1.18.33 against an endpoint answering 404 model_not_found (recorded)."""
    err = {"event": {"type": "error", "timestamp": T0, "sessionID": SID, "error": {"name": "APIError", "data": {
        "message": "The model `model-x` does not exist", "statusCode": 404, "isRetryable": False}}}}
    (status, summary), _, _ = await run_stub(tmp_path, [err, {"exit": 1}])
    assert (status, status.failure_source) == (AdapterStatus.UNAVAILABLE, "provider")
    assert summary == "model 'prov/model-x' is unknown to the provider: The model `model-x` does not exist"


async def test_exit_without_answer_carries_the_stderr_line(tmp_path):
    (status, summary), _, _ = await run_stub(tmp_path, [ev("step_start"), {"stderr": "panic: database is locked"},
                                                        {"exit": 0}])
    assert (status, status.failure_source) == (AdapterStatus.HARNESS_ERROR, "harness")
    assert "(stderr: panic: database is locked)" in summary


PERMISSION_ASK = ('timestamp=2026-12-02T00:57:21.440Z level=INFO run=0db9e3d9 message=evaluated '
                  'permission=external_directory pattern="/etc/builder/*" action.permission=external_directory '
                  'action.action=ask action.pattern=*')


async def test_permission_stall_is_the_harness_and_names_the_permission(tmp_path):
    (status, summary), run, secs = await run_stub(tmp_path, [
        ev("step_start"), {"log": PERMISSION_ASK.replace("action.action=ask", "action.action=allow")},
        {"log": PERMISSION_ASK}, {"hang": True},
    ], idle_timeout_s=1.0)
    assert (status, status.failure_source) == (AdapterStatus.HARNESS_ERROR, "harness")
    assert 'permission prompt (external_directory "/etc/builder/*")' in summary
    assert "idle_timeout_s limit of 1 s fired after 1." in summary and "run time" in summary
    assert secs < 10  # ended by the idle limit, not run to the deadline


def test_pending_permission_reads_only_asks():
    assert pending_permission(PERMISSION_ASK.replace("=ask", "=allow")) is None
    assert pending_permission("") is None
    assert pending_permission(PERMISSION_ASK + "\n" + PERMISSION_ASK.replace("external_directory", "doom_loop")) \
        .startswith("doom_loop")


# --------------------------------------------------------------------------- item 5: liveness, limits


def test_exit_grace_default_is_at_most_ten_seconds():
    assert OpencodeOptions().exit_grace_s <= 10


async def test_no_exit_after_final_answer_is_killed_within_the_grace(tmp_path):
    (status, summary), _, secs = await run_stub(tmp_path, [
        ev("step_start"), ev("text", 5, type="text", text="Done."), finish("stop", 10), {"hang": True}],
        exit_grace_s=0.5)
    assert status == AdapterStatus.COMPLETED
    assert "exit_grace_s limit of 0.5 s fired after 0." in summary and "killed" in summary
    assert secs < 5


async def test_slow_streaming_model_through_the_proxy_is_alive(tmp_path):
    """A model streaming for ~3 s through the credential proxy with a 1.5 s idle limit: not a hang."""
    slow = ScriptStep(text="thinking " * 40, prompt_tokens=10, completion_tokens=50, stream_chunks=6, chunk_delay_s=0.5)
    key = "sk-aoe-test-" + secrets.token_hex(8)
    for sub in ("alive", "dead"):
        (tmp_path / sub).mkdir()
    with ScriptedModelServer([slow], expect_key=key) as srv:
        async with CredentialProxy(srv.base_url, key) as proxy:
            actions = [ev("step_start"), {"chat": f"http://127.0.0.1:{proxy.port}/v1"},
                       ev("text", 3000, type="text", text="Done."), finish("stop", 3010), {"exit": 0}]
            (status, summary), _, secs = await run_stub(tmp_path / "alive", actions, proxy_stats=proxy.stats,
                                                        idle_timeout_s=1.5)
            assert (status, summary) == (AdapterStatus.COMPLETED, "Done."), summary
            assert secs > 2.5
            # the same run without the proxy's traffic counted is killed as hung
            (status, summary), _, _ = await run_stub(tmp_path / "dead", actions, idle_timeout_s=1.5)
            assert (status, status.failure_source) == (AdapterStatus.HARNESS_ERROR, "harness")
            assert "idle_timeout_s limit of 1.5 s fired" in summary and "without an opencode event or model traffic" in summary


async def test_wall_clock_timeout_names_limit_value_and_elapsed(tmp_path):
    class Hanging(OpencodeRun):
        async def _body(self):
            await asyncio.sleep(3600)

        async def _kill_scope(self):
            return None

        async def _guest_log_tail(self):
            return ""

    run = Hanging(make_ctx(tmp_path, deadline_s=0.4), OpencodeAdapter())
    out = await run.wait()
    assert out.status == AdapterStatus.TIMED_OUT
    assert out.summary.startswith("agent exceeded its deadline (wall_clock_s limit of 0.4 s fired after 0.4 s")
    assert json.loads((tmp_path / "result.json").read_text())["summary"] == out.summary


# --------------------------------------------------------------------------- item 4: preflight


async def test_preflight_names_model_and_never_the_key(monkeypatch):
    key = "sk-aoe-test-" + secrets.token_hex(12)
    monkeypatch.setenv("AOE_TEST_PREFLIGHT_KEY", key)
    with ScriptedModelServer([], expect_key=key, served={"good-model"}) as srv:
        good = OpencodeAdapter(base_url=srv.base_url, api_key_env="AOE_TEST_PREFLIGHT_KEY")
        await good.preflight_model("prov/good-model", timeout_s=10)
        with pytest.raises(PreflightError) as unknown:
            await good.preflight_model("prov/no-such-model", timeout_s=10)
        monkeypatch.setenv("AOE_TEST_WRONG_KEY", "sk-wrong-" + secrets.token_hex(12))
        wrong = OpencodeAdapter(base_url=srv.base_url, api_key_env="AOE_TEST_WRONG_KEY")
        with pytest.raises(PreflightError) as refused:
            await preflight_entrants([("entrant alice", good, "prov/good-model"),
                                      ("entrant bob", wrong, "prov/good-model")], timeout_s=10)
        served = [r for r in srv.requests if r["model"] == "good-model"]
        assert served and all(r["max_tokens"] == 1 for r in served)
    assert "'no-such-model' unknown to 127.0.0.1" in str(unknown.value) and "HTTP 404" in str(unknown.value)
    assert str(refused.value).startswith("entrant bob (model prov/good-model): credentials refused")
    assert refused.value.failure_source == "provider"
    with pytest.raises(PreflightError, match="did not answer|failed the preflight"):
        gone = OpencodeAdapter(base_url="http://127.0.0.1:9/v1", api_key_env="AOE_TEST_PREFLIGHT_KEY")
        await gone.preflight_model("prov/good-model", timeout_s=10)
    for err in (unknown.value, refused.value):
        assert key not in str(err) and os.environ["AOE_TEST_WRONG_KEY"] not in str(err)


def test_failed_preflight_spoils_the_attempt_with_its_source():
    from aoe_tui.season.attempts import judge_attempt

    v = judge_attempt(None, [], PreflightError("entrant bob (model p/m): credentials refused by h (HTTP 401)"))
    assert (v.spoiled, v.source, v.retryable) == (True, "provider", True)
    assert "entrant bob (model p/m)" in v.detail


async def test_season_records_a_failed_preflight_as_the_providers_before_provisioning(tmp_path):
    """The season runner asks each entrant's model before it builds the heat's provider; a failure
    spoils the attempt with source ``provider`` and never reaches a territory or the player."""
    from aoe_tui.agents.oracle import OracleAdapter
    from aoe_tui.domain.season_file import load_season
    from aoe_tui.season.runner import SeasonRunner

    class BadKey(OracleAdapter):
        async def preflight_model(self, model, *, timeout_s=30.0):
            raise PreflightError("credentials refused by models.example (HTTP 401: invalid API key)")

    provisioned: list[str] = []

    def provider_factory(*args):
        provisioned.append(str(args[0]))
        raise AssertionError("provisioned despite a failed preflight")

    season = tmp_path / "cup.toml"
    season.write_text(
        f'id = "pf-cup"\nlabel = "w1"\narenas = ["{REPO}/arenas/first-build"]\nmax_attempts = 2\n'
        "drain_seconds = 1\n[format]\nkind = \"league\"\nheats_per_entrant = 1\n"
        '[[entrants]]\nid = "alice"\nadapter = "oracle"\nmodel = "oracle"\n'
        '[[entrants]]\nid = "carol"\nadapter = "oracle"\nmodel = "oracle"\n'
        '[[entrants]]\nid = "bob"\nadapter = "badkey"\nmodel = "prov/m-bob"\n'
        '[adapters]\nbadkey = "/bin/true"\n')
    runner = SeasonRunner(load_season(season), tmp_path / "out", provider_factory=provider_factory,
                          adapter_factory=lambda spec: BadKey() if spec == "badkey" else OracleAdapter())
    state = await runner.run()
    heat = state.rounds[1].heats[1]
    assert provisioned == [] and heat.result.void and [a.attempt for a in heat.attempts] == [1, 2]
    fin = heat.attempts[-1].finished
    assert fin.failure_source == "provider"
    assert "entrant bob (model prov/m-bob): credentials refused by models.example (HTTP 401" in fin.detail


# --------------------------------------------------------------------------- item 8: damaged transcript


UPSTREAM = REPO / "tests" / "fixtures" / "upstream" / "matches" / "durable-job-queue-20260814-194238-round-002"


def test_damaged_live_transcript_is_said_in_bundle_and_tui(tmp_path):
    from aoe_tui.agents.analysis import write_analysis
    from aoe_tui.replay.bundle import collect_analyses
    from aoe_tui.tui.viewmodel import folder_activity

    folder = tmp_path / "match"
    shutil.copytree(UPSTREAM, folder)
    good = (folder / "luna-queue-builder-transcript.json").read_bytes()
    (folder / "luna-queue-builder-analysis.json").unlink()
    (folder / "luna-queue-builder-transcript.json").unlink()
    cut = 4096
    (folder / "luna-queue-builder-transcript.live.json").write_bytes(good[:cut] + b'\x00{"torn' + good[cut + 9:])
    note = f"transcript unavailable (invalid JSON at byte {cut})"
    analyses = collect_analyses(folder)
    assert analyses["luna-queue-builder"]["unavailable"] == note
    assert "metrics" in analyses["glm-queue-builder"]  # the others keep their analyses
    lines = folder_activity(folder)("luna-queue-builder")
    assert list(lines)[-1] == note
    # our own adapters write the note where the analysis would be
    made = write_analysis(folder / "luna-queue-builder-transcript.live.json", tmp_path / "analysis.json",
                          agent="a", territory="t", model="m", outcome="running")
    assert made is not None and made["unavailable"] == note
    assert json.loads((tmp_path / "analysis.json").read_text())["unavailable"] == note


async def test_staging_an_unreachable_territory_fails_and_leaves_nothing_open(tmp_path, monkeypatch):
    """Issue 26: staging before the clock (``OpencodeAdapter.stage``) that cannot reach its
    territory raises one line naming it (the supervisor makes it that seat's harness failure at
    clock 0) and closes the credential proxy it had started."""
    from aoe_tui.agents import opencode
    from aoe_tui.agents.proxy import CredentialProxy

    monkeypatch.setattr(opencode, "ensure_opencode", lambda *a, **k: tmp_path / "opencode")
    monkeypatch.setattr(opencode, "_rg_binary", lambda: tmp_path / "rg")
    closed = []
    real_close = CredentialProxy.close

    async def close(self):
        closed.append(self)
        await real_close(self)

    monkeypatch.setattr(CredentialProxy, "close", close)
    adapter = OpencodeAdapter(api_key_env=None)
    with pytest.raises(OpencodeError, match="cannot reach territory t1 over SSH"):
        await adapter.stage(make_ctx(tmp_path))
    assert len(closed) == 1


class _RecordingConn:
    """An SSH connection that records the commands run; ``closed`` as asked."""

    def __init__(self, closed: bool = False) -> None:
        self.closed, self.commands = closed, []

    def is_closed(self) -> bool:
        return self.closed

    async def run(self, cmd: str, check: bool = False):
        from types import SimpleNamespace

        self.commands.append(cmd)
        return SimpleNamespace(stdout="", stderr="", exit_status=0)

    def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize("conn_open", [True, False])
async def test_a_completed_warm_run_ends_its_opencode_server(tmp_path, conn_open):
    """Issue 26 review: a warm run that completes leaves no ``opencode serve`` (about 400 MB of
    the seat's memory) in the territory while its service is verified — the run's connection
    open or not — and kills only the ``opencode`` processes of its scope (the player's
    processes stay, as after a cold run)."""
    run = OpencodeRun.__new__(OpencodeRun)
    AgentRun.__init__(run, make_ctx(tmp_path))
    run.adapter = OpencodeAdapter()
    run.opts = run.adapter.options
    run.state, run.proxy_stats, run._last_usage, run._prompt = _State(), None, None, "do it"
    run.stopped, run._tick_s = False, 0.05
    run._conn = conn = _RecordingConn(closed=not conn_open)
    fresh = _RecordingConn()

    async def connect():
        return fresh

    async def body():
        run._warm = True
        return AdapterStatus.COMPLETED, "done"

    run._connect, run._body = connect, body
    outcome = await run._supervise()
    assert outcome.status == AdapterStatus.COMPLETED
    used = conn if conn_open else fresh
    kills = [c for c in used.commands if "kill -KILL" in c]
    assert len(kills) == 1, used.commands
    assert "serve.pid" in kills[0] and "pgrep -x opencode" in kills[0] and f"/{run._scope}.scope" in kills[0]
    assert not any("systemctl kill" in c for c in conn.commands + fresh.commands)
    assert fresh.closed if not conn_open else not fresh.commands


async def test_staging_a_territory_that_stops_answering_fails_in_its_step_bound(tmp_path, monkeypatch):
    """Review of issue 26 item 4: a territory whose SSH logs in but never answers a command
    fails its staging within ``stage_step_timeout_s``, one line naming the territory and the
    step, not after the supervisor's backstop; the credential proxy is closed. The adapter's
    backstop (``stage_timeout_s``) is the sum of its own bounds plus a margin."""
    import asyncssh

    from aoe_tui.agents import opencode
    from tests.ssh_support import password_server

    (tmp_path / "opencode").write_bytes(b"x")
    (tmp_path / "rg").write_bytes(b"y")
    monkeypatch.setattr(opencode, "ensure_opencode", lambda *a, **k: tmp_path / "opencode")
    monkeypatch.setattr(opencode, "_rg_binary", lambda: tmp_path / "rg")

    async def wedged(process: asyncssh.SSHServerProcess) -> None:
        await asyncio.Event().wait()  # the command never answers

    server, port = await password_server(lambda user, password: password == "p", process_factory=wedged)
    try:
        ctx = make_ctx(tmp_path)
        ctx.territory.ssh_port = port
        adapter = OpencodeAdapter(api_key_env=None, stage_step_timeout_s=0.5)
        assert adapter.stage_timeout_s() == 15 + 2 * 300 + 180 + 6 * 0.5 + 60
        assert OpencodeAdapter().stage_timeout_s() == 1035
        t = time.monotonic()
        with pytest.raises(OpencodeError) as err:
            await asyncio.wait_for(adapter.stage(ctx), 30)
        assert time.monotonic() - t < 10
        assert str(err.value) == ("staging in territory t1: preparing the run folder got no answer within 0.5 s "
                                  "(stage_step_timeout_s)")
    finally:
        server.close()
