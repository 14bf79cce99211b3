"""A non-first-build arena's territory recipe on the ``qemu`` provider (TCG on this host).

The durable-job-queue recipe's image layer in its qcow2 form (a delta on the base disk,
built on first use) boots one QEMU guest; its starting state is the arena's, checked
against upstream's NixOS module as the package README describes it: the spool seed
``active (exited)`` with the three accepted jobs written byte for byte, both dormant job
slots ``inactive`` (their start files are absent), nothing on port 8080, the NixOS
python path, and no first-build slot.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from arena_support import ARENAS, guest

pytestmark = [pytest.mark.qemu]

ARENA = ARENAS / "durable-job-queue"
JOBS = {"accepted-alpha-7d3": "alpha", "accepted-beta-91e": "beta", "accepted-gamma-c42": "gamma"}


async def test_job_queue_recipe_boots_on_qemu(tmp_path):
    from aoe_tui.domain.arena import load_manifest
    from aoe_tui.referee.heat import territory_specs
    from aoe_tui.runtime.layers import image_for_arena
    from aoe_tui.runtime.qemu import QemuProvider

    if shutil.which("qemu-system-x86_64") is None:
        pytest.skip("qemu-system-x86_64 not installed (apt-get install qemu-system-x86)")
    image = image_for_arena(ARENA, qemu=True)
    assert image.layers and Path(image.qcow2).name == "layer.qcow2"
    provider = QemuProvider(tmp_path / "territories", image=image)
    try:
        (terr,) = await provider.provision(territory_specs(load_manifest(ARENA / "arena.toml"))[:1])
        rc, out, err = await guest(terr, "hostname; "
                                         "systemctl show -p ActiveState -p SubState accepted-job-spool.service; "
                                         "systemctl is-active job-api.service job-worker.service; "
                                         "systemctl cat builder-app.service >/dev/null 2>&1 && echo slot || echo no-slot; "
                                         "test -x /run/current-system/sw/bin/python3 && echo py; "
                                         "ss -Hltn 'sport = :8080' | wc -l")
        lines = out.split("\n")
        assert lines[:7] == ["queue-one", "ActiveState=active", "SubState=exited", "inactive", "inactive",
                             "no-slot", "py"], (out, err)
        assert lines[7] == "0"  # nothing listens on 8080 before the player deploys
        for job, payload in JOBS.items():
            rc, body, _ = await guest(terr, f"cat /var/lib/accepted-jobs/{job}.json")
            assert rc == 0 and body == json.dumps({"id": job, "payload": payload, "status": "accepted"})
    finally:
        await provider.teardown()
