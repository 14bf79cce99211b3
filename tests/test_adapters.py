"""Adapters without a territory: result/usage file models, prompt assembly, the command
adapter contract (spec §5.4) with real processes, the registry, scripted usage.

Territory-backed adapter runs (oracle, scripted builders, tiny external adapter) are in
``tests/test_verifiers.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import stat
import textwrap
import time
from pathlib import Path

import pytest

from aoe_tui.agents.base import AdapterStatus, AgentContext
from aoe_tui.domain.agent_usage import Usage
from aoe_tui.agents.command import (
    BUDGET_SUMMARY,
    DEADLINE_SUMMARY,
    CommandAdapter,
    CommandRun,
    adapter_environment,
    exit_status_text,
)
from aoe_tui.agents.instruction import InstructionError, build_instruction
from aoe_tui.agents.registry import UnknownAdapterError, parse_adapter_registration, resolve_adapter
from aoe_tui.agents.scripted import ScriptedAdapter, scripted_usage
from aoe_tui.domain.adapter_io import (
    AdapterFileError,
    ResultFile,
    read_result_file,
    read_usage_checkpoint,
    write_json_atomic,
    write_result_file,
    write_usage_file,
)
from aoe_tui.domain.arena import AgentDef, Budget, load_manifest
from aoe_tui.errors import AoeError, UsageError
from aoe_tui.runtime.provider import Territory, write_credential_file

REPO = Path(__file__).resolve().parent.parent
ARENA = REPO / "arenas" / "first-build"


# ----------------------------------------------------------------------- adapter_io


def test_result_file_rejects_unknown_keys_and_bad_status():
    good = {"schema_version": 1, "agent": "a", "territory": "t", "status": "completed", "summary": "ok"}
    model = ResultFile.model_validate(good)
    assert model.usage.resource_units == 0 and model.usage.input_tokens is None and model.transcript is None
    with pytest.raises(Exception):
        ResultFile.model_validate({**good, "extra": 1})
    with pytest.raises(Exception):
        ResultFile.model_validate({**good, "status": "done"})
    with pytest.raises(Exception):
        ResultFile.model_validate({**good, "schema_version": 2})
    with pytest.raises(Exception):
        ResultFile.model_validate({**good, "usage": {"tokens": 3}})


def test_write_result_file_matches_upstream_oracle_shape(tmp_path, fixtures_dir):
    fixture = fixtures_dir / "upstream/matches/first-build-oracle-20260813-154733/builder-one-agent-result.json"
    path = tmp_path / "result.json"
    write_result_file(
        path, agent="builder-one-agent", territory="builder-one", status="completed",
        summary="oracle deployed durable service", usage=Usage(resource_units=1),
    )
    assert json.loads(path.read_text()) == json.loads(fixture.read_text())
    # and upstream's own file reads back through our strict reader
    model = read_result_file(fixture, "builder-one-agent", "builder-one")
    assert model.status == "completed" and model.usage.resource_units == 1


def test_read_result_file_errors_are_one_line_and_name_the_file(tmp_path):
    path = tmp_path / "result.json"
    with pytest.raises(AdapterFileError, match="missing"):
        read_result_file(path, "a", "t")
    path.write_text("{not json")
    with pytest.raises(AdapterFileError) as err:
        read_result_file(path, "a", "t")
    assert str(path) in str(err.value) and "\n" not in str(err.value)
    write_result_file(path, agent="b", territory="t", status="completed", summary="x")
    with pytest.raises(AdapterFileError, match="names agent 'b', expected 'a'"):
        read_result_file(path, "a", "t")
    write_result_file(path, agent="a", territory="u", status="completed", summary="x")
    with pytest.raises(AdapterFileError, match="territory"):
        read_result_file(path, "a", "t")


@pytest.mark.parametrize(
    "content",
    [
        None,  # missing
        "",  # empty (torn)
        '{"schema_version": 1, "agent": "a", "territory": "t", "usage": {"input_tok',  # half written
        '{"schema_version": 2, "agent": "a", "territory": "t", "usage": {}}',
        '{"schema_version": 1, "agent": "x", "territory": "t", "usage": {}}',
        '{"schema_version": 1, "agent": "a", "territory": "x", "usage": {}}',
        '{"schema_version": 1, "agent": "a", "territory": "t", "usage": {"bogus": 1}}',
        '{"schema_version": 1, "agent": "a", "territory": "t", "usage": {"input_tokens": -5}}',
        "[1, 2]",
        "\x00\xff garbage",
    ],
)
def test_read_usage_checkpoint_never_raises_on_bad_files(tmp_path, content):
    path = tmp_path / "usage.json"
    if content is not None:
        path.write_text(content)
    assert read_usage_checkpoint(path, "a", "t") is None


def test_usage_checkpoint_roundtrip(tmp_path):
    path = tmp_path / "usage.json"
    write_usage_file(path, agent="a", territory="t", usage=Usage(input_tokens=10, output_tokens=2, resource_units=1))
    assert json.loads(path.read_text()) == {
        "schema_version": 1, "agent": "a", "territory": "t",
        "usage": {"input_tokens": 10, "output_tokens": 2, "resource_units": 1},
    }
    assert read_usage_checkpoint(path, "a", "t") == Usage(input_tokens=10, output_tokens=2, resource_units=1)


def test_write_json_atomic_replaces_without_leftovers(tmp_path):
    path = tmp_path / "sub" / "x.json"
    write_json_atomic(path, {"a": 1})
    write_json_atomic(path, {"a": 2})
    assert json.loads(path.read_text()) == {"a": 2}
    assert sorted(p.name for p in path.parent.iterdir()) == ["x.json"]


# ---------------------------------------------------------------------- instruction


def test_build_race_instruction_has_seat_paragraph_and_contract():
    loaded = load_manifest(ARENA / "arena.toml")
    text = build_instruction(loaded, "builder-two")
    seat = (ARENA / "instructions/builder-two.md").read_text().rstrip()
    contract = (ARENA / "CONTRACT.md").read_text().rstrip()
    assert text.startswith(seat)
    head, _, tail = text.partition("\n# Service contract\n")
    assert tail.strip() == contract
    assert "600 seconds" in head and "only authority" in head
    assert "oracle" not in text  # model identity is never in the prompt


def test_fog_instruction_uses_player_brief_only(tmp_path, fixtures_dir):
    pkg = tmp_path / "fog"
    pkg.mkdir()
    shutil.copy(fixtures_dir / "upstream/arenas/durable-job-queue/arena.toml", pkg / "arena.toml")
    (pkg / "brief.md").write_text("Find the queue and make it durable.\n")
    loaded = load_manifest(pkg / "arena.toml")
    text = build_instruction(loaded, loaded.manifest.territories[0].id)
    assert text.startswith("Find the queue and make it durable.\n\n")
    assert f"{loaded.manifest.rules.duration_seconds} seconds" in text
    assert "# Service contract" not in text


def test_conquest_instruction_is_seat_file_only(tmp_path, fixtures_dir):
    pkg = tmp_path / "conq"
    (pkg / "instructions").mkdir(parents=True)
    shutil.copy(fixtures_dir / "upstream/arenas/first-contact/arena.toml", pkg / "arena.toml")
    loaded = load_manifest(pkg / "arena.toml")
    tid = loaded.manifest.territories[0].id
    (pkg / "instructions" / f"{tid}.md").write_text("Hold the hill.\n")
    assert build_instruction(loaded, tid) == "Hold the hill.\n"


def test_missing_seat_instructions_is_a_one_line_error(tmp_path):
    pkg = tmp_path / "pkg"
    shutil.copytree(ARENA, pkg, symlinks=True)
    (pkg / "instructions/builder-three.md").unlink()
    loaded = load_manifest(pkg / "arena.toml")
    with pytest.raises(InstructionError, match="builder-three.md"):
        build_instruction(loaded, "builder-three")


# ------------------------------------------------------------------ command adapter


def script(tmp_path: Path, body: str, name: str = "adapter.sh") -> Path:
    path = tmp_path / name
    path.write_text("#!/usr/bin/env bash\n" + textwrap.dedent(body))
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def make_ctx(tmp_path: Path, deadline_s: float = 20.0, budget: Budget | None = None) -> AgentContext:
    agent = AgentDef(
        id="builder-one-agent", territory="builder-one", adapter="tiny", model="test/model",
        reasoning_effort="high", budget=budget or Budget(resource_units=5),
    )
    cred = write_credential_file(tmp_path / "cred" / "builder-one.env", "s3cret-pw")
    territory = Territory(
        id="builder-one", host="10.78.9.10", ssh_port=2222, service_port=8080, password="s3cret-pw", credential_file=cred
    )
    agent_dir = tmp_path / "match" / "agents" / agent.id
    agent_dir.mkdir(parents=True)
    (agent_dir / "instruction.md").write_text("build it\n")
    return AgentContext(
        agent=agent, territory=territory, agent_dir=agent_dir, instruction_file=agent_dir / "instruction.md",
        deadline_s=deadline_s, arena_dir=ARENA,
    )


WRITE_RESULT = """
write_result() {  # status summary usage-json [agent]
  printf '{"schema_version":1,"agent":"%s","territory":"%s","status":"%s","summary":"%s","usage":%s,"transcript":null}\\n' \\
    "${4:-$AOE_AGENT_ID}" "$AOE_TERRITORY_ID" "$1" "$2" "$3" > "$AOE_RESULT_FILE"
}
"""


async def run_script(tmp_path: Path, body: str, **ctx_kw) -> tuple[AgentContext, CommandRun, object]:
    ctx = make_ctx(tmp_path, **ctx_kw)
    adapter = CommandAdapter("tiny", script(tmp_path, WRITE_RESULT + body))
    run = await adapter.start(ctx)
    outcome = await asyncio.wait_for(run.wait(), 60)
    return ctx, run, outcome


async def test_command_adapter_environment_and_logs(tmp_path):
    ctx, run, outcome = await run_script(
        tmp_path,
        """
        env | grep '^AOE_' | sort > "$(dirname "$AOE_RESULT_FILE")/env.txt"
        if read -r line; then echo "stdin had data"; fi
        echo "hello from stdout"; echo "hello from stderr" >&2
        write_result completed "all good" '{"input_tokens":7,"resource_units":1}'
        """,
    )
    assert outcome.status == AdapterStatus.COMPLETED and outcome.summary == "all good"
    assert outcome.usage == Usage(input_tokens=7, resource_units=1)
    env = dict(line.split("=", 1) for line in (ctx.agent_dir / "env.txt").read_text().splitlines())
    assert env == {
        "AOE_AGENT_ID": "builder-one-agent",
        "AOE_TERRITORY_ID": "builder-one",
        "AOE_TERRITORY_HOST": "10.78.9.10",
        "AOE_SSH_PORT": "2222",
        "AOE_MODEL": "test/model",
        "AOE_REASONING_EFFORT": "high",
        "AOE_INSTRUCTION_FILE": str(ctx.instruction_file.absolute()),
        "AOE_RESULT_FILE": str(ctx.result_file.absolute()),
        "AOE_USAGE_FILE": str(ctx.usage_file.absolute()),
        "AOE_STDOUT_FILE": str(ctx.stdout_file.absolute()),
        "AOE_STDERR_FILE": str(ctx.stderr_file.absolute()),
        "AOE_CREDENTIAL_FILE": str(ctx.territory.credential_file.absolute()),
    }
    assert ctx.stdout_file.read_text() == "hello from stdout\n"  # stdin was /dev/null
    assert ctx.stderr_file.read_text() == "hello from stderr\n"
    assert "hello from stdout" in run.activity and "stderr: hello from stderr" in run.activity
    assert run.returncode == 0


def test_adapter_environment_drops_inherited_credential_when_territory_has_none(tmp_path):
    ctx = make_ctx(tmp_path)
    ctx.territory.credential_file = None  # type: ignore[assignment]
    env = adapter_environment(ctx, base={"AOE_CREDENTIAL_FILE": "/stale", "PATH": "/bin"})
    assert "AOE_CREDENTIAL_FILE" not in env and env["PATH"] == "/bin"


async def test_exit_zero_without_result_is_harness_error(tmp_path):
    _, _, outcome = await run_script(tmp_path, "exit 0\n")
    assert outcome.status == AdapterStatus.HARNESS_ERROR and outcome.status.failure_source == "harness"
    assert "result file" in outcome.summary and "missing" in outcome.summary


async def test_nonzero_exit_without_result_names_exit_status(tmp_path):
    _, _, outcome = await run_script(tmp_path, "echo boom >&2; exit 7\n")
    assert outcome.status == AdapterStatus.HARNESS_ERROR
    assert outcome.summary == "adapter exited with exit status: 7"


async def test_nonzero_exit_with_result_uses_its_status(tmp_path):
    _, _, outcome = await run_script(tmp_path, "write_result failed 'model gave up' '{\"resource_units\":1}'; exit 3\n")
    assert (outcome.status, outcome.summary) == (AdapterStatus.FAILED, "model gave up")


async def test_invalid_result_json_is_harness_error(tmp_path):
    _, _, outcome = await run_script(tmp_path, 'echo "{oops" > "$AOE_RESULT_FILE"\n')
    assert outcome.status == AdapterStatus.HARNESS_ERROR and "not valid JSON" in outcome.summary


async def test_result_with_unknown_key_is_harness_error(tmp_path):
    body = (
        "printf '{\"schema_version\":1,\"agent\":\"%s\",\"territory\":\"%s\",\"status\":\"completed\","
        "\"summary\":\"x\",\"mood\":\"happy\"}' \"$AOE_AGENT_ID\" \"$AOE_TERRITORY_ID\" > \"$AOE_RESULT_FILE\"\n"
    )
    _, _, outcome = await run_script(tmp_path, body)
    assert outcome.status == AdapterStatus.HARNESS_ERROR and "mood" in outcome.summary


async def test_identity_mismatch_is_harness_error(tmp_path):
    _, _, outcome = await run_script(tmp_path, "write_result completed ok '{}' someone-else\n")
    assert outcome.status == AdapterStatus.HARNESS_ERROR
    assert "someone-else" in outcome.summary and "builder-one-agent" in outcome.summary


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0); treat it as dead
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


async def test_deadline_kills_whole_process_group(tmp_path):
    t0 = time.monotonic()
    ctx, run, outcome = await run_script(
        tmp_path,
        """
        trap '' TERM   # ignore SIGTERM: the runner must escalate to SIGKILL
        sleep 300 &
        echo $! > "$(dirname "$AOE_RESULT_FILE")/child.pid"
        (sleep 300; echo never) &
        echo $! >> "$(dirname "$AOE_RESULT_FILE")/child.pid"
        echo $$ >> "$(dirname "$AOE_RESULT_FILE")/child.pid"
        wait
        """,
        deadline_s=1.0,
    )
    elapsed = time.monotonic() - t0
    assert outcome.status == AdapterStatus.TIMED_OUT and outcome.summary == DEADLINE_SUMMARY
    assert outcome.transcript == str(ctx.stdout_file)
    assert run.timed_out
    assert elapsed < 10
    pids = [int(p) for p in (ctx.agent_dir / "child.pid").read_text().split()]
    assert len(pids) == 3
    await asyncio.sleep(0.2)
    assert [p for p in pids if _alive(p)] == []


async def test_deadline_with_result_file_forces_timed_out_keeps_usage(tmp_path):
    _, _, outcome = await run_script(
        tmp_path,
        "write_result completed 'early' '{\"input_tokens\":99,\"resource_units\":1}'\nsleep 30\n",
        deadline_s=1.0,
    )
    assert (outcome.status, outcome.summary) == (AdapterStatus.TIMED_OUT, DEADLINE_SUMMARY)
    assert outcome.usage.input_tokens == 99


async def test_budget_resource_units_exceeded(tmp_path):
    _, _, outcome = await run_script(
        tmp_path, "write_result completed ok '{\"resource_units\":6}'\n", budget=Budget(resource_units=5)
    )
    assert (outcome.status, outcome.summary) == (AdapterStatus.BUDGET_EXCEEDED, BUDGET_SUMMARY)
    assert outcome.usage.resource_units == 6 and outcome.status.failure_source == "player"


async def test_budget_cost_exceeded_only_when_both_set(tmp_path):
    body = "write_result completed ok '{\"resource_units\":1,\"cost_microusd\":501}'\n"
    _, _, outcome = await run_script(tmp_path / "a", body, budget=Budget(resource_units=1, max_cost_microusd=500))
    assert outcome.status == AdapterStatus.BUDGET_EXCEEDED
    _, _, outcome = await run_script(tmp_path / "b", body, budget=Budget(resource_units=1))
    assert outcome.status == AdapterStatus.COMPLETED


async def test_stop_kills_the_tree_and_reports_interrupted(tmp_path):
    ctx = make_ctx(tmp_path)
    adapter = CommandAdapter("tiny", script(tmp_path, 'sleep 300 & echo $! > "$(dirname "$AOE_RESULT_FILE")/child.pid"; wait\n'))
    run = await adapter.start(ctx)
    pidfile = ctx.agent_dir / "child.pid"
    for _ in range(100):
        if pidfile.exists() and pidfile.read_text().strip():
            break
        await asyncio.sleep(0.05)
    child = int(pidfile.read_text())
    await run.stop()
    await run.stop()  # idempotent
    outcome = await run.wait()
    assert run.stopped and outcome.status == AdapterStatus.INTERRUPTED
    await asyncio.sleep(0.1)
    assert not _alive(child) and not _alive(run.pid)


async def test_unstartable_adapter_is_harness_error(tmp_path):
    ctx = make_ctx(tmp_path)
    path = tmp_path / "not-exec.sh"
    path.write_text("#!/bin/sh\nexit 0\n")
    run = await CommandAdapter("x", path).start(ctx)
    outcome = await run.wait()
    assert outcome.status == AdapterStatus.HARNESS_ERROR and str(path) in outcome.summary


def test_command_adapter_sha256(tmp_path):
    import hashlib

    path = script(tmp_path, "exit 0\n")
    assert CommandAdapter("x", path).sha256() == hashlib.sha256(path.read_bytes()).hexdigest()
    assert CommandAdapter("x", tmp_path / "nope").sha256() is None


def test_exit_status_text():
    assert exit_status_text(3) == "exit status: 3"
    assert exit_status_text(-9) == "signal: 9 (SIGKILL)"


# ------------------------------------------------------------------------- registry


def test_registry_resolves_every_spec_form(tmp_path):
    path = script(tmp_path, "exit 0\n", name="my-adapter.sh")
    assert resolve_adapter("oracle").name == "oracle"
    assert resolve_adapter("scripted:memory").name == "scripted:memory"
    cmd = resolve_adapter(f"command:{path}")
    assert isinstance(cmd, CommandAdapter) and cmd.name == "my-adapter.sh" and cmd.path == path
    reg = resolve_adapter("claux", {"claux": path})
    assert isinstance(reg, CommandAdapter) and reg.name == "claux"
    # a registered name wins over the built-in (upstream arenas say adapter = "oracle")
    assert isinstance(resolve_adapter("oracle", {"oracle": path}), CommandAdapter)


def test_registry_errors_are_one_line(tmp_path):
    with pytest.raises(UnknownAdapterError) as err:
        resolve_adapter("claux", {"other": tmp_path / "x"})
    msg = str(err.value)
    assert "unknown adapter 'claux'" in msg and "scripted:volatile" in msg and "other" in msg and "\n" not in msg
    with pytest.raises(UnknownAdapterError, match="scripted:nope"):
        resolve_adapter("scripted:nope")
    with pytest.raises(UnknownAdapterError, match="does not exist"):
        resolve_adapter(f"command:{tmp_path / 'missing.sh'}")
    noexec = tmp_path / "noexec.sh"
    noexec.write_text("#!/bin/sh\n")
    with pytest.raises(UnknownAdapterError, match="not executable"):
        resolve_adapter(f"command:{noexec}")
    assert isinstance(err.value, AoeError)


def test_parse_adapter_registration():
    assert parse_adapter_registration("claux=adapters/claux.sh") == ("claux", Path("adapters/claux.sh"))
    with pytest.raises(UsageError):
        parse_adapter_registration("claux")


def test_scripted_usage_is_deterministic_and_cumulative(monkeypatch):
    steps = [scripted_usage(i) for i in range(1, 5)]
    assert steps == [scripted_usage(i) for i in range(1, 5)]
    for a, b in zip(steps, steps[1:]):
        assert b.input_tokens > a.input_tokens and b.output_tokens > a.output_tokens
        assert b.cost_microusd > a.cost_microusd
    assert all(s.resource_units == 1 for s in steps)
    monkeypatch.setenv("AOE_SCRIPTED_SLOW_DELAY_S", "2.5")
    assert ScriptedAdapter("slow").start_delay_s == 2.5
    assert ScriptedAdapter("memory").start_delay_s == 0


# --------------------------------------------------------------------------- a package builder's SSH session


class _BuilderGuest:
    """A real SSH server (asyncssh, in this process, on a real TCP port) that takes the
    builder's ``bash -s`` and answers with ``lines``; then exits 0, or (``drop``) drops the
    connection without closing the session, as a guest's sshd killed by a reboot does, or
    (``signal``) ends the session with ``exit-signal TERM``, as a shutdown killing the
    builder's shell does while sshd lives on for a moment."""

    def __init__(self, lines: str, drop: bool = False, signal: bool = False) -> None:
        self.lines, self.drop, self.signal = lines, drop, signal

    async def start(self) -> int:
        from tests.ssh_support import password_server

        guest = self

        async def process(proc) -> None:
            await proc.stdin.read()  # the script, to its end
            proc.stdout.write(guest.lines)
            await proc.stdout.drain()
            if guest.drop:
                proc.get_extra_info("connection").abort()
                return
            if guest.signal:
                proc.exit_with_signal("TERM")
                return
            proc.exit(0)

        self.server, port = await password_server(lambda user, password: (user, password) == ("root", "s3cret-pw"),
                                                  process_factory=process, encoding="utf-8")
        return port

    def close(self) -> None:
        self.server.close()


@pytest.mark.parametrize("reboot", [False, True], ids=["no reboot", "after the referee's reboot"])
async def test_a_package_builder_tells_a_lost_session_from_its_own_usage_file_failing(tmp_path, reboot):
    """``PackageBuilderRun`` over a real SSH session: a session the guest drops mid-script is
    ``unavailable`` (source provider: the attempt is re-run), or ``interrupted`` with the
    reboot summary once ``agents/<id>/referee-reboot`` exists; a script killed by a signal is
    the player's ``failed``, or ``interrupted`` after the referee's reboot; a failure to write our own
    ``usage.json`` (here: a folder in its place) is a harness error naming the file, never
    taken for a lost session nor for the referee's reboot."""
    import dataclasses

    from aoe_tui.agents.command import REBOOT_SUMMARY
    from aoe_tui.agents.scripted import PackageBuilderAdapter

    script = tmp_path / "builder.sh"
    script.write_text("echo 'aoe-step: deploy'\n")
    outcomes = {}
    for case in ("dropped", "killed by a signal", "usage.json unwritable"):
        guest = _BuilderGuest("aoe-step: deploying\nworking\n", drop=case == "dropped",
                              signal=case == "killed by a signal")
        port = await guest.start()
        try:
            ctx = make_ctx(tmp_path / case.replace(" ", "-"))
            ctx.territory = dataclasses.replace(ctx.territory, host="127.0.0.1", ssh_port=port)
            if reboot:
                ctx.reboot_marker.write_text("host-reboot\n")
            if case == "usage.json unwritable":
                ctx.usage_file.mkdir()
            run = await PackageBuilderAdapter("probe", script).start(ctx)
            outcomes[case] = await asyncio.wait_for(run.wait(), 30)
        finally:
            guest.close()
    dropped, killed, unwritable = (outcomes[k] for k in ("dropped", "killed by a signal", "usage.json unwritable"))
    if reboot:
        assert (dropped.status, dropped.summary) == (AdapterStatus.INTERRUPTED, REBOOT_SUMMARY)
        assert (killed.status, killed.summary) == (AdapterStatus.INTERRUPTED, REBOOT_SUMMARY)
    else:
        assert dropped.status == AdapterStatus.UNAVAILABLE
        assert dropped.summary.startswith("SSH session to builder-one lost: "), dropped.summary
        assert killed.status == AdapterStatus.FAILED, killed
        assert killed.summary.endswith("deployment failed: killed by SIGTERM"), killed.summary
    assert unwritable.status == AdapterStatus.HARNESS_ERROR, unwritable
    assert "usage.json" in unwritable.summary and "SSH" not in unwritable.summary, unwritable.summary
