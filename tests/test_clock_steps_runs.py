"""Issue 30 item 6, agent runs: a wall-clock step (±1 h) between the match clock's start
and an agent's first tool call moves neither ``first_tool_call_ms`` (aoe-extra.json) below 0
nor by the step. The real clock cannot be stepped in a test: the run's real monotonic clock
runs, and opencode's event stamps (its wall clock, Unix ms) are written as a clock stepped
by ``step_s`` would write them."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from aoe_tui.agents.base import AgentContext
from aoe_tui.agents.opencode import OpencodeAdapter, OpencodeRun
from aoe_tui.domain.arena import AgentDef, Budget
from aoe_tui.replay.matchdir import load_match
from aoe_tui.runtime.provider import Territory
from aoe_tui.tui.app import AoeApp
from aoe_tui.tui.live import LiveFeed
from aoe_tui.tui.viewmodel import ArenaView


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



SEED = Path(__file__).resolve().parent / "fixtures" / "seed" / "opencode-cup-2026-W37-r1-h2-a1.match.json"


@pytest.mark.parametrize("step_s", [3600.0, -3600.0], ids=["forward-1h", "back-1h"])
async def test_a_watched_heat_clock_neither_jumps_nor_stands_through_a_wall_step(step_s):
    """``aoe watch`` of a running heat: the tailer posts each batch with its log's mtime (the
    wall clock at the write). The age read from the wall clock when the view joins puts the
    heat clock where the referee's is; after that the clock runs on the monotonic clock from
    each batch's arrival. Before the fix every batch re-read the wall age, so a +1 h step
    between a write and the poll jumped the heat clock by 15 min (the live cap)."""
    loaded = load_match(SEED)
    records = loaded.records
    assert records[104].elapsed_ms > records[99].elapsed_ms
    clock = {"wall_s": 1_757_728_758.0, "mono_s": 1_000.0}
    feed = LiveFeed()
    app = AoeApp.live(feed)
    app.now_ms = lambda: int(clock["wall_s"] * 1000)
    app.monotonic = lambda: clock["mono_s"]

    def advance(seconds: float) -> None:
        clock["wall_s"] += seconds
        clock["mono_s"] += seconds

    async with app.run_test(size=(120, 40)) as pilot:
        # the view joins: 100 records, the last written 2 s ago
        feed.open_heat("heat", arena=ArenaView.from_arena(loaded.arena), title="heat")
        for rec in records[:100]:
            feed.post_record(rec, "heat")
        feed.post_written("heat", clock["wall_s"] - 2.0)
        await pilot.pause(0.1)
        model = app.heats["heat"]
        assert model.ticking()
        assert app.heat_clock_ms("heat", model) == records[99].elapsed_ms + 2_000
        advance(3)
        written = clock["wall_s"]  # the referee writes 5 more records: the log's mtime
        clock["wall_s"] += step_s  # then the wall clock is stepped, before the tailer's poll
        advance(0.25)
        for rec in records[100:105]:
            feed.post_record(rec, "heat")
        feed.post_written("heat", written)
        await pilot.pause(0.1)
        shown = app.heat_clock_ms("heat", model)
        assert shown == records[104].elapsed_ms, shown  # from the arrival: no jump, no stand
        advance(10)
        assert app.heat_clock_ms("heat", model) == records[104].elapsed_ms + 10_000
