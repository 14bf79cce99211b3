"""Issue 30 item 6, agent runs: a wall-clock step (±1 h) between the match clock's start
and an agent's first tool call moves neither ``first_tool_call_ms`` (aoe-extra.json) below 0
nor by the step. The real clock cannot be stepped in a test: the run's real monotonic clock
runs, and opencode's event stamps (its wall clock, Unix ms) are written as a clock stepped
by ``step_s`` would write them."""

from __future__ import annotations

import asyncio
import time

import pytest

from aoe_tui.agents.base import AgentContext
from aoe_tui.agents.opencode import OpencodeAdapter, OpencodeRun
from aoe_tui.domain.arena import AgentDef, Budget
from aoe_tui.runtime.provider import Territory


def _ctx(tmp_path, clock_started: float) -> AgentContext:
    return AgentContext(
        agent=AgentDef(id="a1", territory="t1", adapter="opencode", model="prov/model-x", budget=Budget(resource_units=1)),
        territory=Territory(id="t1", host="127.0.0.1", ssh_port=1, service_port=8080, password="p",
                            credential_file=tmp_path / "c"),
        agent_dir=tmp_path, instruction_file=tmp_path / "i.md", deadline_s=60, arena_dir=tmp_path,
        clock_started=clock_started)


@pytest.mark.parametrize("step_s", [-3600.0, 3600.0, 0.0])
def test_opencode_first_tool_call_ms_ignores_a_wall_clock_step(tmp_path, monkeypatch, step_s):
    async def idle(self):  # the run's task: not started here (only its clock arithmetic is)
        return None

    monkeypatch.setattr(OpencodeRun, "_supervise", idle)

    async def scenario() -> dict:
        run = OpencodeRun(_ctx(tmp_path, clock_started=time.monotonic() - 2.0), OpencodeAdapter())
        # the match started 2 s ago; since then the wall clock was stepped by step_s
        now = int((time.time() + step_s) * 1000)
        run.on_event({"type": "tool_use", "timestamp": now, "part": {"tool": "bash", "callID": "c1", "state": {
            "status": "completed", "input": {"command": "ls"}, "output": "", "time": {"start": now - 300, "end": now}}}})
        await asyncio.sleep(0)
        return run.start_detail() or {}

    detail = asyncio.run(scenario())
    # started 300 ms before its event arrived, 2 s (and the test's own run time) after the clock
    assert 1700 <= detail["first_tool_call_ms"] < 1700 + 30_000, detail
