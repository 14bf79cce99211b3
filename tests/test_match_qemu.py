"""One real heat on the ``qemu`` provider (TCG here: slow, several minutes).

The oracle on two seats of our first-build arena (third seat removed,
``minimum_territories = 2``): both guests boot under QEMU, the oracle deploys over
SSH, the referee reboots a guest OS through the provider and the first durable seat
wins. Run through the real CLI in a subprocess.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from aoe_tui.domain.world import world_json
from aoe_tui.replay.log import read_events
from aoe_tui.replay.reducer import reduce_match

pytestmark = [pytest.mark.qemu]

REPO = Path(__file__).resolve().parent.parent


def two_seat_arena(dest: Path) -> Path:
    """``arenas/first-build`` without ``builder-three`` (territory and agent)."""
    shutil.copytree(REPO / "arenas" / "first-build", dest)
    manifest = dest / "arena.toml"
    text = manifest.read_text()
    text = text.replace("minimum_territories = 3", "minimum_territories = 2")
    blocks = re.split(r"(?m)^(?=\[\[territories\]\]|\[\[agents\]\])", text)
    kept = [b for b in blocks if not (b.startswith(("[[territories]]", "[[agents]]")) and '"builder-three' in b)]
    text = "".join(kept)
    assert "builder-three" not in text and text.count("[[territories]]") == 2
    manifest.write_text(text)
    return manifest


def test_qemu_heat_oracle_two_seats(tmp_path, guest_image):
    if shutil.which("qemu-system-x86_64") is None:
        pytest.skip("qemu-system-x86_64 not installed (apt-get install qemu-system-x86 qemu-utils)")
    manifest = two_seat_arena(tmp_path / "first-build")
    out = tmp_path / "match"
    res = subprocess.run(
        [sys.executable, "-m", "aoe_tui.cli", "match", "run", str(manifest), "--provider", "qemu",
         "--agent", "oracle", "--drain-seconds", "5", "--output", str(out)],
        capture_output=True, text=True, timeout=900, cwd=REPO,
    )
    assert res.returncode == 0, res.stderr[-3000:] + res.stdout[-3000:]
    records = read_events(out / "events.jsonl")
    world = json.loads((out / "world.json").read_text())
    assert (out / "world.json").read_text() == world_json(reduce_match(records))
    assert world["match_state"] == "finished" and world["finish_reason"] == "first durable deployment"
    winner = world["winner"]
    assert winner in ("builder-one", "builder-two")
    terr = world["territories"][winner]
    assert terr["competitor_state"] == "durable" and terr["milestone_points"] == 100
    assert terr["milestones"]["host-reboot"]["evidence"]["reboot"] is True
    # the guest really rebooted: QEMU forwards ports on 127.0.0.1
    assert (out / "agents" / f"{winner}-agent" / "referee-reboot").read_text() == "host-reboot"
    # each guest held to the class (first-build: 1 vCPU, 768 MiB, 2048 MiB = the image's disk)
    extra = json.loads((out / "aoe-extra.json").read_text())
    assert "territory_notes" not in extra
    for tid in ("builder-one", "builder-two"):
        assert extra["territories"][tid] == {
            "resources": {"vcpus": 1, "memory_mib": 768, "disk_mib": 2048, "tasks": 512},
            "limits": {"vcpus": 1, "memory_mib": 768, "disk_mib": 2048, "enforced": ["cpu", "memory", "disk"],
                       "not_enforced": {"tasks": "the guest kernel's own (no limit set by the provider)"}},
        }
    assert not [p for p in Path("/proc").iterdir() if p.name.isdigit() and _is_qemu_of(p, out)]


def _is_qemu_of(proc: Path, out: Path) -> bool:
    try:
        cmd = (proc / "cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False
    return "qemu-system" in cmd and str(out) in cmd
