"""first-build on real container territories: its starting state, and one heat of the
oracle against two faulty builders.

The heat runs on a copy of the package whose only change is ``stop_on_first_durable =
false`` (and a 25 s clock), so the faulty builders are judged to the end even though the
oracle is durable in seconds: ``scripted:hasty`` answers GET with a JSON wrapper and never
passes ``write-read``; ``scripted:memory`` keeps records in its process and never passes
``service-restart``. The verifiers' failure details say why.
"""

from __future__ import annotations

import json
import shutil

import pytest

from arena_support import ARENAS, booted_territories, guest, run_heat

pytestmark = [pytest.mark.container]

ARENA = ARENAS / "first-build"


async def test_starting_state(tmp_path):
    async with booted_territories(ARENA, tmp_path) as (t,):
        # the slot fails to start about five times in five seconds, then hits the start limit
        rc, out, err = await guest(t, "hostname; for i in $(seq 60); do systemctl is-failed -q builder-app.service "
                                      "&& break; sleep 0.25; done; systemctl is-failed builder-app.service; "
                                      "systemctl is-enabled builder-app.service; test -e /opt/builder/app.py || echo no-app; "
                                      "ss -Hltn 'sport = :8080' | wc -l; readlink /run/current-system/sw; readlink /bin/sh")
        assert out.split("\n")[:7] == ["builder-one", "failed", "enabled", "no-app", "0", "/usr", "bash"], (out, err)


def test_heat_oracle_hasty_memory(tmp_path):
    from aoe_tui.agents.scripted import ScriptedAdapter

    pkg = tmp_path / "first-build"
    shutil.copytree(ARENA, pkg, symlinks=True)
    text = (pkg / "arena.toml").read_text()
    assert "stop_on_first_durable = true" in text
    (pkg / "arena.toml").write_text(text.replace("stop_on_first_durable = true", "stop_on_first_durable = false"))
    memory = ScriptedAdapter("memory", step_delay_s=0.2)
    out = tmp_path / "heat"
    on_disk: dict[str, list[dict]] = {}

    def seen_mid_heat(rec, world) -> None:  # activity.jsonl as it stands when the oracle turns durable
        if rec.event.kind == "durable_deployment_completed" and not on_disk:
            on_disk["at_durable"] = [json.loads(x) for x in (out / "activity.jsonl").read_text().splitlines()]
            on_disk["at_durable"].append({"durable_ms": rec.elapsed_ms})

    world = run_heat(pkg, out, ["oracle", "scripted:hasty", memory], duration_s=25, drain_s=2,
                     on_event=seen_mid_heat)
    terr = world.territories
    assert world.winner == "builder-one" and terr["builder-one"].durable_at_ms is not None
    assert all(v.passed for v in terr["builder-one"].milestones.values())
    hasty = terr["builder-two"].milestones
    assert hasty["service-up"].passed and not hasty["write-read"].passed
    assert "returned a different value than was written" in hasty["write-read"].failure_detail
    mem = terr["builder-three"].milestones
    assert mem["service-up"].passed and mem["write-read"].passed and not mem["service-restart"].passed
    assert "(record lost)" in mem["service-restart"].failure_detail
    assert terr["builder-two"].durable_at_ms is None and terr["builder-three"].durable_at_ms is None
    # issue 16 item 3: the agents' activity was on disk while the heat ran, stamped with the heat clock
    *mid, durable = on_disk["at_durable"]
    agents = {r["agent"] for r in mid}
    assert {"builder-one-agent", "builder-two-agent", "builder-three-agent"} <= agents, agents
    assert all(0 <= r["ms"] <= durable["durable_ms"] for r in mid)
    final = [json.loads(x) for x in (out / "activity.jsonl").read_text().splitlines()]
    assert [r["sequence"] for r in final] == list(range(len(final))) and final[:len(mid)] == mid
    assert all(r["ms"] <= world.elapsed_ms for r in final)
    for seat in ("builder-one-agent", "builder-three-agent"):  # activity.log still written at the end
        tail = (out / "agents" / seat / "activity.log").read_text().splitlines()
        assert tail[-1] == [r["line"] for r in final if r["agent"] == seat][-1]
