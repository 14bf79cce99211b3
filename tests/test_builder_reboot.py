"""A built-in builder whose SSH session the referee's own host reboot cuts is
``interrupted`` (failure source ``arena``), as upstream's adapters report it (§3.4, §5.6),
never ``unavailable`` (source ``provider``), which would spoil a finished heat and re-run it.

Real parts: container territories, the first-build verifiers, the referee's reboot, and
:class:`~aoe_tui.agents.scripted.PackageBuilderAdapter` running a guest script over SSH.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from aoe_tui.agents.command import REBOOT_SUMMARY
from aoe_tui.agents.oracle import DURABLE_STORAGE, deploy_script, render_app
from aoe_tui.agents.scripted import PackageBuilderAdapter
from aoe_tui.replay.log import read_events
from aoe_tui.season.attempts import judge_attempt
from tests.arena_support import ARENAS, run_heat

pytestmark = pytest.mark.usefixtures("guest_image")


def lingering_script(tmp: Path) -> Path:
    """A guest script that deploys a durable records service, then stays in its SSH
    session (as an agent still checking its work does) until the referee reboots the guest."""
    app = render_app(DURABLE_STORAGE)
    assert "AOE_APP_EOF" not in app
    text = (
        "set -euo pipefail\n"
        'echo "aoe-step: deploying the records service"\n'
        "bash -c " + shlex.quote(deploy_script()) + " <<'AOE_APP_EOF'\n" + app + "\nAOE_APP_EOF\n"
        'echo "aoe-step: watching the service"\n'
        "sleep 300\n"
    )
    path = tmp / "lingering.sh"
    path.write_text(text)
    return path


def test_a_builder_cut_off_by_the_referees_reboot_is_interrupted_and_the_heat_counts(tmp_path):
    lingering = PackageBuilderAdapter("lingering", lingering_script(tmp_path))
    out = tmp_path / "heat"
    world = run_heat(ARENAS / "first-build", out, [lingering, "scripted:memory", "scripted:memory"], drain_s=3)

    assert world.winner == "builder-one", world.winner
    agent_id, agent = next((k, a) for k, a in world.agents.items() if a.territory == "builder-one")
    # the session ended at the referee's reboot, before the match finished
    assert (agent.terminal_state.value, agent.failure_source.value, agent.terminal_detail) == \
        ("interrupted", "arena", REBOOT_SUMMARY)
    assert (out / "agents" / agent_id / "referee-reboot").read_text().strip() == "host-reboot"
    records = read_events(out / "events.jsonl")
    kinds = [(r.event.kind, getattr(r.event, "agent", None)) for r in records]
    assert ("agent_interrupted", agent_id) in kinds
    ended = next(r for r in records if r.event.kind == "agent_interrupted" and r.event.agent == agent_id)
    finished = next(r for r in records if r.event.kind == "match_finished")
    assert ended.sequence < finished.sequence, "the reboot, not the finish, ended the builder"
    assert str(ended.event.source) in ("arena", "FailureSource.arena") and ended.event.detail == REBOOT_SUMMARY
    # nothing says the infrastructure failed: the season keeps this attempt
    assert not any(r.event.kind == "agent_finished" and str(r.event.source).endswith("provider") for r in records)
    verdict = judge_attempt(world, records)
    assert not verdict.spoiled, verdict
