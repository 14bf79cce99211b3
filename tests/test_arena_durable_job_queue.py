"""The durable-job-queue arena package (``arenas/durable-job-queue``), on real territories.

* the starting state of a booted territory, checked against upstream's (``arenas/durable-job-queue/README.md``, starting state):
  units and their states, the seeded spool with its exact bytes and modes, the empty
  start-file folder, port 8080 closed, the NixOS paths, no forbidden string under the fog
  scan paths, and the same state again after a reboot (seeds every boot, write-if-absent);
* the verifiers refuse the untouched starting state, each with its reason;
* one real heat: ``oracle`` wins durable, ``scripted:hasty`` fails exactly
  recover-accepted, ``scripted:memory`` fails exactly worker-restart;
* ``scripted:volatile`` passes everything up to worker-restart and fails host-reboot;
* ``aoe arena validate`` rejects a copy of the package whose recipe leaks a forbidden
  string under ``/etc``.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from arena_support import (ARENAS, booted_territories, deploy, events_of, guest, passed_view, reboot, run_heat, sh,
                           show, verify)

ARENA = ARENAS / "durable-job-queue"
MANIFEST = tomllib.loads((ARENA / "arena.toml").read_text())
FORBIDDEN = MANIFEST["fog_of_war"]["guest_leak_audit"]["forbidden_strings"]
SCAN_PATHS = MANIFEST["fog_of_war"]["guest_leak_audit"]["scan_paths"]
TIMEOUTS = {m["id"]: m["timeout_seconds"] for m in MANIFEST["build"]["milestones"]}
ORDER = [m["id"] for m in MANIFEST["build"]["milestones"]]
ACCEPTED = {"accepted-alpha-7d3": "alpha", "accepted-beta-91e": "beta", "accepted-gamma-c42": "gamma"}
UNIT_PATH = "/usr/lib/aoe-arena/durable-job-queue/unit-path"


def spool_bytes(job_id: str) -> bytes:
    """A seeded spool file: Python's default json.dumps, that key order, no newline."""
    return json.dumps({"id": job_id, "payload": ACCEPTED[job_id], "status": "accepted"}).encode()


#: the unit properties the starting-state checks read (``systemctl show``)
UNIT_PROPS = ("LoadState", "ActiveState", "SubState", "Result", "ConditionResult", "UnitFileState", "Type",
              "RemainAfterExit", "Restart", "RestartUSec", "Description", "Requires", "After", "FragmentPath")


#: boot units the starting state depends on (the rest of a boot is the base guest's business)
STATE_UNITS = ("systemd-tmpfiles-setup.service", "accepted-job-spool.service", "ssh.service")


async def settled(t) -> None:
    """Wait for the boot to finish (SSH answers before the boot units are done); the units
    the starting state depends on must not have failed."""
    rc, out, _ = await guest(t, "timeout 60 systemctl is-system-running --wait")
    assert out.strip() in ("running", "degraded"), f"boot of {t.id} did not finish: {out.strip()!r}"
    failed = (await sh(t, "systemctl --failed --no-legend --plain | cut -d' ' -f1")).split()
    bad = [u for u in failed if u in STATE_UNITS or u.startswith(("job-", "accepted-"))]
    assert not bad, f"{t.id}: boot units of the starting state failed: {bad}"
    if failed:  # seen on cgroup-v1 hosts: "Failed at step CGROUP spawning ..." (status 219)
        print(f"note: {t.id} booted with unrelated failed units {failed}")


def port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


async def check_units(t) -> None:
    spool = await show(t, "accepted-job-spool.service", *UNIT_PROPS)
    assert spool["Description"] == "Preserve opaque jobs accepted before the deployment"
    assert (spool["ActiveState"], spool["SubState"], spool["Result"]) == ("active", "exited", "success"), spool
    assert (spool["Type"], spool["RemainAfterExit"], spool["UnitFileState"]) == ("oneshot", "yes", "enabled"), spool
    for unit, desc, start in (
        ("job-api.service", "Player-defined job API lifecycle slot", "/etc/replaybook/job-api-start"),
        ("job-worker.service", "Player-defined job worker lifecycle slot", "/etc/replaybook/job-worker-start"),
    ):
        s = await show(t, unit, *UNIT_PROPS)
        # inactive because the start file is absent (condition unmet), not failed
        assert (s["LoadState"], s["ActiveState"], s["SubState"]) == ("loaded", "inactive", "dead"), (unit, s)
        assert s["ConditionResult"] == "no" and s["Result"] == "success", (unit, s)
        assert s["UnitFileState"] == "enabled" and s["Description"] == desc, (unit, s)
        assert s["Restart"] == "always" and s["RestartUSec"] == "1s", (unit, s)
        assert "accepted-job-spool.service" in s["Requires"].split(), (unit, s)
        after = s["After"].split()
        assert "accepted-job-spool.service" in after, (unit, s)
        assert ("network.target" in after) == (unit == "job-api.service"), (unit, after)
        text = await sh(t, f"systemctl cat {unit}")
        assert f"ConditionPathExists={start}\n" in text, text
        assert f"ExecStart=/bin/sh {start}\n" in text, text
        assert "WantedBy=multi-user.target\n" in text, text
    # first-build's slot is not part of this arena
    gone = await show(t, "builder-app.service", *UNIT_PROPS)
    assert gone["LoadState"] == "not-found", gone


async def check_spool(t) -> None:
    out = await sh(t, "stat -c '%a %U %G %F' /var/lib/accepted-jobs; cd /var/lib/accepted-jobs && "
                      "for f in $(ls -A); do printf '%s %s ' \"$f\" \"$(stat -c '%a %U %G %F' \"$f\" | tr ' ' :)\"; "
                      "base64 -w0 \"$f\"; echo; done")
    lines = out.splitlines()
    assert lines[0] == "755 root root directory", lines[0]
    import base64

    files = {}
    for line in lines[1:]:
        name, meta, b64 = line.split(" ", 2)
        files[name] = (meta, base64.b64decode(b64))
    assert sorted(files) == sorted(f"{j}.json" for j in ACCEPTED), files
    for j in ACCEPTED:
        meta, data = files[f"{j}.json"]
        assert meta == "644:root:root:regular:file", (j, meta)
        assert data == spool_bytes(j), (j, data)


async def check_replaybook_empty(t) -> None:
    out = await sh(t, "stat -c '%a %U %G %F' /etc/replaybook; ls -A /etc/replaybook | wc -l")
    assert out.split("\n")[:2] == ["755 root root directory", "0"], out


async def check_nixos_paths(t) -> None:
    out = await sh(t, "/run/current-system/sw/bin/python3 -c 'import sqlite3, sys; print(sys.version_info[0])'; "
                      "readlink -f /bin/sh")
    assert out.split() == ["3", "/usr/bin/bash"], out
    # the arena's units get NixOS's short unit PATH: core tools, no python3
    env = await sh(t, "systemctl show -p Environment job-api.service job-worker.service accepted-job-spool.service")
    assert env.count(f"PATH={UNIT_PATH}") == 3, env
    rc, _, _ = await guest(t, f"PATH={UNIT_PATH} command -v python3")
    assert rc != 0, "python3 must not be on a unit's PATH (NixOS gives units coreutils, findutils, grep, sed, systemd)"
    await sh(t, f"PATH={UNIT_PATH}; command -v cat install mv find grep sed systemctl >/dev/null")


async def check_closed_ports(t) -> None:
    assert not port_open(t.host, 8080), "nothing may listen on 8080 before an agent acts"
    listening = await sh(t, "ss -Hltn | awk '{print $4}'")
    ports = sorted({a.rsplit(":", 1)[1] for a in listening.split()})
    assert ports == ["22"], listening


async def check_no_leak(t) -> None:
    # the run-time leak audit's search (spec §6.4): regular files < 4 MiB, same filesystem
    for s in FORBIDDEN:
        rc, out, _ = await guest(
            t, "find " + " ".join(SCAN_PATHS) + " -xdev -type f -size -4096k -print0 2>/dev/null | "
               f"xargs -0 -r grep -IlF -- {json.dumps(s)} ; true")
        assert rc == 0 and out.strip() == "", f"forbidden string {s!r} found in: {out.strip()}"


@pytest.mark.container
async def test_starting_state_and_after_reboot(tmp_path: Path) -> None:
    async with booted_territories(ARENA, tmp_path, count=1) as (t,):
        await settled(t)
        assert (await sh(t, "hostname")).strip() == "queue-one"
        await check_units(t)
        await check_spool(t)
        await check_replaybook_empty(t)
        await check_nixos_paths(t)
        await check_closed_ports(t)
        await check_no_leak(t)

        # the seed writes only what is absent, at every boot; tmpfiles recreates the folder
        await sh(t, "rm /var/lib/accepted-jobs/accepted-beta-91e.json; "
                    "printf 'kept' > /var/lib/accepted-jobs/accepted-alpha-7d3.json; rm -rf /etc/replaybook")
        before = (await sh(t, "cat /proc/sys/kernel/random/boot_id")).strip()
        await reboot(t)
        await settled(t)
        assert (await sh(t, "cat /proc/sys/kernel/random/boot_id")).strip() != before
        out = await sh(t, "cat /var/lib/accepted-jobs/accepted-alpha-7d3.json; echo; "
                          "cat /var/lib/accepted-jobs/accepted-beta-91e.json; echo; "
                          "stat -c %a /var/lib/accepted-jobs/accepted-beta-91e.json")
        assert out.split("\n")[:3] == ["kept", spool_bytes("accepted-beta-91e").decode(), "644"], out
        await check_replaybook_empty(t)
        await check_nixos_paths(t)
        await check_closed_ports(t)

        # deleted entirely, the spool comes back whole at the next boot
        await sh(t, "rm -rf /var/lib/accepted-jobs")
        await reboot(t)
        await settled(t)
        await check_spool(t)
        await check_units(t)


# ----------------------------------------------------------------------- verifiers


async def run_one(t, milestone: str, evidence_dir: Path, previous: dict | None = None):
    """``milestone``'s verifier on ``t``; ``previous`` maps passed milestones to their evidence."""
    views = {m: passed_view(ev) for m, ev in (previous or {}).items()}
    views[milestone] = {"evaluating": True, "passed": False, "points": 0, "evidence": None,
                        "failure_category": None, "failure_detail": None}
    return await verify(ARENA, t, milestone, evidence_dir, views)


def assert_fails(outcome, *needles: str) -> str:
    assert not outcome.passed, f"expected a failure, got evidence {outcome.evidence}"
    assert not outcome.timed_out, "the verifier must fail by itself, inside its timeout"
    detail = outcome.detail or ""
    assert "\n" not in detail, f"failure detail must be one line: {detail!r}"
    for n in needles:
        assert n in detail, f"{n!r} not in failure detail {detail!r}"
    return detail


@pytest.mark.container
async def test_verifiers_refuse_the_untouched_territory(tmp_path: Path) -> None:
    fake = {"process-new": {"completed": True, "job": "fresh-0123456789abcdef", "payload": "opaque-" + "ab" * 12}}
    fake["worker-restart"] = {**{k: fake["process-new"][k] for k in ("job", "payload")}, "worker_restart": True}
    async with booted_territories(ARENA, tmp_path / "t", count=1) as (t,):
        ev = tmp_path / "evidence"
        started = time.monotonic()
        up, recover, new, restart, rebooted = await asyncio.gather(
            run_one(t, "service-up", ev / "a"),
            run_one(t, "recover-accepted", ev / "b"),
            run_one(t, "process-new", ev / "c"),
            run_one(t, "worker-restart", ev / "d", {"process-new": fake["process-new"]}),
            run_one(t, "host-reboot", ev / "e", fake),
        )
        took = time.monotonic() - started
        assert_fails(up, "GET /health: no answer", "expected 200 'ready'")
        assert_fails(recover, "pre-existing accepted jobs were not recovered exactly once", " rounds: ",
                     "GET /jobs/accepted-alpha-7d3: no answer")
        assert_fails(new, "POST /jobs/fresh-", "no answer", "expected HTTP 202")
        # the slot's condition is unmet, so the restart itself succeeds; the API is down
        assert_fails(restart, "right after systemctl restart job-worker.service",
                     "GET /jobs/fresh-0123456789abcdef got no answer", "API must stay up")
        assert_fails(rebooted, "after the reboot: GET /health: no answer")
        assert recover.duration_ms > 28_000, "recover-accepted polls its whole window when the API is down"
        assert took < max(TIMEOUTS.values()) + 5
        # no verifier left anything running in the territory or started the slots
        await check_units(t)


# ----------------------------------------------------------------------- builders


def milestone_events(events: list[dict], territory: str, kind: str, milestone: str) -> list[dict]:
    return [e for e in events if e.get("kind") == kind and e.get("territory") == territory
            and e.get("milestone") == milestone]


@pytest.mark.container
def test_heat_oracle_wins_hasty_and_memory_fail_their_milestones(tmp_path: Path) -> None:
    out = tmp_path / "heat"
    started = time.monotonic()
    # the oracle is durable within seconds; the deadline only bounds a broken run
    world = run_heat(ARENA, out, ["oracle", "scripted:hasty", "scripted:memory"], duration_s=60)
    wall = time.monotonic() - started
    events = events_of(out)
    one, hasty, memory = (world.territories[t] for t in ("queue-one", "queue-two", "queue-three"))

    agents = {e["agent"]: e for e in events if e["kind"] == "agent_finished"}
    assert agents["queue-one-agent"]["success"], agents["queue-one-agent"]
    assert world.winner == "queue-one", (world.winner, [e for e in events if e["kind"] == "match_finished"])
    assert one.durable_at_ms is not None and all(one.milestones[m].passed for m in ORDER), one.milestones
    assert json.loads((out / "evidence/queue-one/recover-accepted.json").read_text()) == {
        "accepted_jobs": sorted(ACCEPTED), "recovered": True}

    # hasty: up, but the jobs accepted before it arrived are unknown to its API
    assert hasty.milestones["service-up"].passed
    assert not hasty.milestones["recover-accepted"].passed
    failed = milestone_events(events, "queue-two", "milestone_failed", "recover-accepted")
    assert failed and not milestone_events(events, "queue-two", "milestone_passed", "recover-accepted"), failed
    for e in failed:
        assert "pre-existing accepted jobs were not recovered exactly once" in e["detail"], e
        assert "HTTP 404 twice" in e["detail"] and "does not know this accepted job" in e["detail"], e
    assert hasty.durable_at_ms is None

    # memory: everything up to process-new, then the restart hands the finished job back
    for m in ("service-up", "recover-accepted", "process-new"):
        assert memory.milestones[m].passed, (m, memory.milestones[m])
    assert not memory.milestones["worker-restart"].passed
    failed = milestone_events(events, "queue-three", "milestone_failed", "worker-restart")
    assert failed and not milestone_events(events, "queue-three", "milestone_passed", "worker-restart"), failed
    job = memory.milestones["process-new"].evidence["job"]
    for e in failed:  # later attempts may also meet systemd's start limit (the referee restarts every tick)
        assert "job-worker.service" in e["detail"], e
    # the first restart finds the finished job handed back (queued) or already redone (attempts 2)
    first = failed[0]["detail"]
    assert f"right after systemctl restart job-worker.service, job {job} is no longer completed exactly once" \
        in first, first
    assert ('status "queued"' in first and "went back to the queue" in first) or \
        ("attempts 2 " in first and "processed the finished job again" in first), first
    assert memory.durable_at_ms is None
    assert wall < 150, f"the heat took {wall:.0f} s"
    print(f"heat wall time {wall:.1f} s; oracle durable at {one.durable_at_ms} ms on the match clock")


@pytest.mark.container
async def test_volatile_builder_fails_only_host_reboot(tmp_path: Path) -> None:
    async with booted_territories(ARENA, tmp_path / "t", count=1) as (t,):
        out = await deploy(ARENA, t, "volatile")
        assert 2 <= sum(line.startswith("aoe-step: ") for line in out.splitlines()) <= 6, out
        ev = tmp_path / "evidence"
        passed: dict = {}
        for m in ORDER[:-1]:
            outcome = await run_one(t, m, ev, passed)
            assert outcome.passed, (m, outcome.detail)
            passed[m] = outcome.evidence
        await reboot(t)
        outcome = await run_one(t, "host-reboot", ev, passed)
        job = passed["process-new"]["job"]
        assert_fails(outcome, f"after the reboot, GET /jobs/{job} returned HTTP 404", "the completed job was lost")


# ----------------------------------------------------------------------- package


def test_package_validates() -> None:
    r = subprocess.run([sys.executable, "-m", "aoe_tui.cli", "arena", "validate", str(ARENA)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    brief = (ARENA / "brief.md").read_text()
    for s in [*FORBIDDEN, "/etc/replaybook", "replaybook", "/var/lib/accepted-jobs", "accepted-jobs",
              *ACCEPTED, *(f"{m}.sh" for m in ORDER)]:
        assert s not in brief, f"the brief names the hidden clue {s!r}"
    assert "job-worker.service" in brief and "GET /jobs/<id>" in brief


def test_validate_rejects_a_forbidden_string_under_etc(tmp_path: Path) -> None:
    pkg = tmp_path / "durable-job-queue"
    shutil.copytree(ARENA, pkg, symlinks=True)
    leak = pkg / "territory/files/etc/job-queue-notes/hint.txt"
    leak.parent.mkdir(parents=True)
    leak.write_text(f"operators: the referee runs {FORBIDDEN[1]} after deploys\n")
    r = subprocess.run([sys.executable, "-m", "aoe_tui.cli", "arena", "validate", str(pkg)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stdout + r.stderr
    assert str(leak) in r.stderr, r.stderr
    assert f"'{FORBIDDEN[1]}'" in r.stderr and "/etc/job-queue-notes/hint.txt" in r.stderr, r.stderr
