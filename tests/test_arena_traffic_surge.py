"""The traffic-surge arena package (fog of war) on real container territories.

* the package itself: the upstream manifest bytes, the brief keeps the fog (no forbidden
  string, no verifier or milestone name), the static leak check of the recipe;
* the starting state before any agent acts: units (seed active (exited), the
  single-threaded service running, no first-build slot), the seeded files with their
  exact bytes and modes, what port 8080 answers, the NixOS paths, the leak audit over
  the scan paths, and what comes back after reboots (seed every boot, write-if-absent);
* the verifiers run directly against an untouched territory: baseline-ready passes,
  the three surge milestones are refused with the reason, while the restart and reboot
  checks pass on the pristine (slow but durable) service;
* one real heat ``oracle`` / ``scripted:hasty`` / ``scripted:memory``: the oracle is
  durable and wins, hasty fails ``priority-first-surge`` (its single-threaded server
  queues the write behind the optional work), memory fails ``bounded-optional`` (its
  unbounded queue lets optional requests time out);
* ``oracle`` and ``scripted:volatile`` driven milestone by milestone: the oracle passes
  all six; volatile passes up to the reboot, then ``host-reboot`` fails (its ledger was
  on /run).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import re
import time
import tomllib
from pathlib import Path

import pytest

from arena_support import (ARENAS, booted_territories, deploy, events_of, guest, http, passed_view, reboot, run_heat, sh,
                           show, verify)

pytestmark = [pytest.mark.container]

ARENA = ARENAS / "traffic-surge"
PKG = "/usr/lib/aoe-arena/traffic-surge"
PRISTINE = ARENA / "territory/files/usr/lib/aoe-arena/traffic-surge/app.py"
HISTORY = {"history-amber-a91": "ledger-alpha", "history-cobalt-f73": "ledger-beta",
           "history-umber-2d4": "ledger-gamma"}
SEEDED_LEDGER = (b'{"history-amber-a91":"ledger-alpha","history-cobalt-f73":"ledger-beta",'
                 b'"history-umber-2d4":"ledger-gamma"}\n')
MILESTONES = ["baseline-ready", "priority-first-surge", "bounded-optional", "recover-peak",
              "restart-under-load", "host-reboot"]
MANIFEST = tomllib.loads((ARENA / "arena.toml").read_text())
FORBIDDEN = MANIFEST["fog_of_war"]["guest_leak_audit"]["forbidden_strings"]
SCAN_PATHS = MANIFEST["fog_of_war"]["guest_leak_audit"]["scan_paths"]
#: sha256 of upstream's traffic-surge arena.toml and agents-real.toml (bb55442), copied byte for byte
ARENA_TOML_SHA256 = "4103652c417af93301362e258617af8da3b7a0dc84f627ec676660e25abdf5e4"
AGENTS_REAL_SHA256 = "188a09abca38e59e5696010287ad89266ad148ec58f8c3e1beb220eb72525c75"


async def ahttp(t, method: str, path: str, body: bytes | None = None, timeout: float = 5) -> tuple[int, bytes]:
    return await asyncio.to_thread(http, t, method, path, body, timeout)


async def file_facts(t, path: str) -> tuple[str, bytes]:
    """(octal mode, bytes) of a guest file."""
    out = await sh(t, f"stat -c %a {path} && base64 -w0 {path}")
    mode, b64 = out.split("\n", 1)
    import base64

    return mode.strip(), base64.b64decode(b64.strip())


async def deploy_checked(t, builder: str) -> str:
    """Run the builder ``builder`` in ``t`` (up to 120 s) as ``scripted:NAME`` does: ``builders/oracle.sh``
    after a first line ``AOE_FAULT=NAME`` (:func:`arena_support.deploy`); it reports 3 to 6 steps."""
    out = await deploy(ARENA, t, builder, timeout_s=120)
    assert 3 <= out.count("aoe-step:") <= 6, out
    return out


# --- the package --------------------------------------------------------------------


@pytest.mark.parametrize("name,digest", [("arena.toml", ARENA_TOML_SHA256), ("agents-real.toml", AGENTS_REAL_SHA256)])
def test_upstream_manifests_are_byte_identical(name, digest):
    assert hashlib.sha256((ARENA / name).read_bytes()).hexdigest() == digest


def test_brief_keeps_the_fog():
    brief = (ARENA / "brief.md").read_text()
    for s in FORBIDDEN:
        assert s not in brief
    for m in MILESTONES[1:5]:  # every verifier name and milestone id except the generic host-reboot
        assert m not in brief and f"{m}.sh" not in brief
    assert "verify" not in brief.lower() and "oracle" not in brief.lower()
    for needle in ("traffic-surge.service", "GET /health", "PUT /priority/<id>", "GET /optional/<id>", "429", "503",
                   "204", "900 seconds"):
        assert needle in brief, needle
    # the brief keeps the seeded paths and the historical ids hidden
    for hidden in ("/opt/traffic-surge", "/var/lib/traffic-surge", "priority.json", "history-", "/etc/replaybook"):
        assert hidden not in brief, hidden


def test_package_validates_and_recipe_has_no_leak():
    from aoe_tui.agents.scripted import builder_faults
    from aoe_tui.domain.arena import validate_package
    from aoe_tui.domain.recipe import leak_problems, load_recipe

    report = validate_package(ARENA)
    assert report.valid, report.errors
    assert leak_problems(load_recipe(ARENA / "territory"), SCAN_PATHS, FORBIDDEN) == []
    # stricter than the static check: no recipe file at all (the seed copies some of them
    # under the scan paths at boot) contains a forbidden string
    for f in (ARENA / "territory").rglob("*"):
        if f.is_file():
            text = f.read_text()
            assert not [s for s in FORBIDDEN if s in text], f
    assert (ARENA / "adapters/oracle.sh").is_symlink()
    assert (ARENA / "adapters/oracle.sh").readlink() == Path("oracle-surge.sh")
    agents = {a["adapter"] for a in MANIFEST["agents"]}
    assert agents == {"oracle-surge"}
    assert (ARENA / "adapters/builders/oracle.sh").stat().st_mode & 0o111
    assert set(builder_faults(ARENA / "adapters/builders/oracle.sh")) == {"hasty", "memory", "volatile"}


def test_pristine_app_is_the_described_one():
    src = PRISTINE.read_text()
    assert src.startswith("#!/usr/bin/env python3\n")
    assert "ThreadingHTTPServer" not in src and "Thread" not in src
    assert 'HTTPServer(("0.0.0.0", 8080), Handler).serve_forever()' in src
    assert "OPTIONAL_COST_SECONDS = 0.45" in src and "time.sleep(OPTIONAL_COST_SECONDS)" in src
    assert "sort_keys=True" in src and "priority.tmp" in src and "os.replace(LEDGER_TMP, LEDGER)" in src


# --- the starting state -------------------------------------------------------------


async def test_starting_state_and_reboots(tmp_path):
    async with booted_territories(ARENA, tmp_path / "wd", count=1) as (t,):
        # units
        seed = await show(t, "traffic-surge-seed.service", "ActiveState", "SubState", "Type", "RemainAfterExit",
                          "Result", "Description", "Before", "UnitFileState", "FragmentPath")
        before = seed.pop("Before").split()
        assert "traffic-surge.service" in before
        # merged /usr: systemd may name /lib/systemd/system, the same folder
        assert seed.pop("FragmentPath").removeprefix("/usr") == "/lib/systemd/system/traffic-surge-seed.service"
        assert seed == {"ActiveState": "active", "SubState": "exited", "Type": "oneshot", "RemainAfterExit": "yes",
                        "Result": "success", "Description": "Seed historical priority traffic and editable service",
                        "UnitFileState": "enabled"}
        svc = await show(t, "traffic-surge.service", "ActiveState", "SubState", "Description", "Requires", "After",
                         "Restart", "RestartUSec", "UnitFileState", "WantedBy", "NRestarts", "ExecStart",
                         "FragmentPath")
        assert (svc["ActiveState"], svc["SubState"], svc["NRestarts"]) == ("active", "running", "0")
        assert svc["Description"] == "Traffic surge service"
        assert "traffic-surge-seed.service" in svc["Requires"].split()
        assert {"network.target", "traffic-surge-seed.service"} <= set(svc["After"].split())
        assert (svc["Restart"], svc["RestartUSec"], svc["UnitFileState"]) == ("always", "1s", "enabled")
        assert "argv[]=/run/current-system/sw/bin/python3 /opt/traffic-surge/app.py " in svc["ExecStart"]
        assert svc["FragmentPath"].removeprefix("/usr") == "/lib/systemd/system/traffic-surge.service"
        assert "multi-user.target" in (await sh(t, "systemctl list-dependencies --reverse --plain traffic-surge.service"))
        slot = await show(t, "builder-app.service", "LoadState")
        assert slot["LoadState"] == "not-found"
        assert (await sh(t, "systemctl --failed --no-legend --plain | wc -l")).strip() == "0"
        # seeded files, exact bytes and modes
        assert await file_facts(t, "/opt/traffic-surge/app.py") == ("755", PRISTINE.read_bytes())
        assert await file_facts(t, "/var/lib/traffic-surge/priority.json") == ("644", SEEDED_LEDGER)
        assert await file_facts(t, f"{PKG}/app.py") == ("644", PRISTINE.read_bytes())
        modes = await sh(t, "stat -c '%a %U %n' /opt/traffic-surge /var/lib/traffic-surge /etc/replaybook")
        assert modes.split("\n")[:3] == ["755 root /opt/traffic-surge", "755 root /var/lib/traffic-surge",
                                         "755 root /etc/replaybook"]
        assert (await sh(t, "ls -A /opt/traffic-surge; echo --; ls -A /var/lib/traffic-surge; echo --; ls -A /etc/replaybook")
                ) == "app.py\n--\npriority.json\n--\n"
        # NixOS paths
        assert (await sh(t, "/run/current-system/sw/bin/python3 -c 'import sqlite3, sys; print(sys.version_info[0])'")
                ).strip() == "3"
        assert (await sh(t, "readlink -f /bin/sh")).strip().endswith("/bash")
        # who listens: only sshd and the single python3 on 8080, all interfaces
        ss = await sh(t, "ss -ltnpH")
        listeners = sorted({(line.split()[3], re.search(r'"([^"]+)"', line).group(1)) for line in ss.splitlines()})
        assert ("0.0.0.0:8080", "python3") in listeners
        assert {addr.rsplit(":", 1)[1] for addr, _ in listeners} == {"22", "8080"}
        # leak audit (spec §6.4) as upstream runs it: no forbidden string under the scan paths
        for s in FORBIDDEN:
            status, out, _ = await guest(t, f"find {' '.join(SCAN_PATHS)} -xdev -type f -size -4M -print0 2>/dev/null"
                                            f" | xargs -0 grep -IlF -e {json.dumps(s)} 2>/dev/null")
            assert out.strip() == "", f"{s!r} found in {out.strip()}"
        # the arena's own files name no verifier, oracle or milestone
        arena_files = ("/opt/traffic-surge/app.py /var/lib/traffic-surge/priority.json "
                       f"{PKG}/seed.sh {PKG}/app.py /usr/lib/systemd/system/traffic-surge*.service "
                       "/usr/lib/tmpfiles.d/traffic-surge.conf")
        for word in ["oracle", "verif", "milestone", *MILESTONES]:
            status, out, _ = await guest(t, f"grep -il -e {word} {arena_files}")
            assert status == 1 and out == "", f"{word!r} in {out.strip()}"

        # what port 8080 answers: the pristine, serial service
        assert await ahttp(t, "GET", "/health") == (200, b"ready")
        for k, v in HISTORY.items():
            assert await ahttp(t, "GET", f"/priority/{k}") == (200, v.encode())
        assert (await ahttp(t, "GET", "/priority/no-such-record"))[0] == 404
        assert (await ahttp(t, "GET", "/nothing-here"))[0] == 404
        t0 = time.monotonic()
        assert await ahttp(t, "GET", "/optional/probe-1") == (200, b"optional:probe-1")
        assert time.monotonic() - t0 >= 0.45
        # two optional requests at once are served one after the other (single-threaded)
        t0 = time.monotonic()
        both = await asyncio.gather(ahttp(t, "GET", "/optional/a"), ahttp(t, "GET", "/optional/b"))
        assert both == [(200, b"optional:a"), (200, b"optional:b")]
        assert time.monotonic() - t0 >= 0.9
        assert (await ahttp(t, "PUT", "/priority/written-1", b"value-1"))[0] == 204
        assert await ahttp(t, "GET", "/priority/written-1") == (200, b"value-1")
        mode, ledger = await file_facts(t, "/var/lib/traffic-surge/priority.json")
        expected = dict(HISTORY, **{"written-1": "value-1"})
        assert mode == "644" and ledger == json.dumps(expected, sort_keys=True).encode()
        assert (await sh(t, "ls -A /var/lib/traffic-surge")) == "priority.json\n"  # priority.tmp renamed over

        # reboot 1: an edited program and ledger are kept (write-if-absent), /etc/replaybook comes back
        await sh(t, "echo '# edited' >> /opt/traffic-surge/app.py && rm -rf /etc/replaybook")
        edited = PRISTINE.read_bytes() + b"# edited\n"
        await reboot(t)
        assert await file_facts(t, "/opt/traffic-surge/app.py") == ("755", edited)
        assert (await file_facts(t, "/var/lib/traffic-surge/priority.json"))[1] == json.dumps(expected, sort_keys=True).encode()
        assert (await sh(t, "stat -c %a /etc/replaybook; ls -A /etc/replaybook")) == "755\n"
        assert (await show(t, "traffic-surge-seed.service", "SubState"))["SubState"] == "exited"
        assert await ahttp(t, "GET", "/priority/written-1") == (200, b"value-1")

        # reboot 2: a deleted program and ledger are seeded again, exactly
        await sh(t, "rm -f /opt/traffic-surge/app.py /var/lib/traffic-surge/priority.json")
        await reboot(t)
        assert await file_facts(t, "/opt/traffic-surge/app.py") == ("755", PRISTINE.read_bytes())
        assert await file_facts(t, "/var/lib/traffic-surge/priority.json") == ("644", SEEDED_LEDGER)
        svc = await show(t, "traffic-surge.service", "ActiveState", "SubState")
        assert svc == {"ActiveState": "active", "SubState": "running"}
        assert await ahttp(t, "GET", "/health") == (200, b"ready")
        assert (await ahttp(t, "GET", "/priority/written-1"))[0] == 404


# --- the verifiers against the untouched starting state -----------------------------


async def test_verifiers_on_the_untouched_territory(tmp_path):
    ev = tmp_path / "evidence"
    async with booted_territories(ARENA, tmp_path / "wd", count=1) as (t,):
        out = await verify(ARENA, t, "baseline-ready", ev)
        assert out.passed, out.detail
        assert out.evidence == {"health": "ready", "historical_records": 3}

        out = await verify(ARENA, t, "priority-first-surge", ev)
        assert not out.passed
        assert re.fullmatch(r"PUT /priority/surge-[0-9a-f]{16} got no answer within 1\.5 s while 8 optional requests "
                            r"were in flight \(expected 204 at once: the priority write waited behind optional work\)",
                            out.detail), out.detail
        assert 1.5 <= out.duration_ms / 1000 < 6, out.duration_ms
        await asyncio.sleep(4)  # let the serial service work off that load

        out = await verify(ARENA, t, "bounded-optional", ev)
        assert not out.passed
        # one request at a time, 0.45 s each: about 4 answered within 2 s, the rest time out
        # (how many more get in depends on how far apart the 16 curls start on a loaded
        # machine: each has its own 2 s; at least half time out, where a bounded service
        # lets none)
        m = re.match(r"of 16 concurrent GET /optional/bounded-N, (\d+) timed out after 2 s \(served (\d+), shed 0\); "
                     r"each must be 200 'optional:bounded-N' or shed with 429/503 within 2 s: optional load is not bounded$",
                     out.detail)
        assert m, out.detail
        assert int(m.group(1)) >= 8 and int(m.group(1)) + int(m.group(2)) == 16, out.detail
        await asyncio.sleep(6)

        out = await verify(ARENA, t, "recover-peak", ev)
        assert not out.passed
        assert re.fullmatch(r"write ([1-4]) of 4 at the optional peak: PUT /priority/peak-\1-[0-9a-f]{12}: no answer within 2 s "
                            r"\(24 optional requests in flight; expected 204\)", out.detail), out.detail
        await asyncio.sleep(8)

        # host-reboot needs the restart-under-load record
        out = await verify(ARENA, t, "host-reboot", ev, {"host-reboot": {"evaluating": True}})
        assert not out.passed and out.detail.startswith("no restart-under-load evidence")

        # the pristine service is slow, not fragile: a restart and a reboot keep its ledger
        out = await verify(ARENA, t, "restart-under-load", ev)
        assert out.passed, out.detail
        assert set(out.evidence) == {"record", "restart_under_load", "value"}
        assert re.fullmatch(r"restart-[0-9a-f]{16}", out.evidence["record"])
        assert re.fullmatch(r"durable-[0-9a-f]{24}", out.evidence["value"])
        assert (await show(t, "traffic-surge.service", "NRestarts"))["NRestarts"] == "0"  # restarted by systemctl, not crashed
        await reboot(t)
        out2 = await verify(ARENA, t, "host-reboot", ev, {"restart-under-load": passed_view(out.evidence)})
        assert out2.passed, out2.detail
        assert out2.evidence == {"historical_records": 3, "reboot": True, "record": out.evidence["record"],
                                 "value": out.evidence["value"]}

        # a lost historical record is refused by baseline-ready with the reason
        await sh(t, "printf '%s\\n' '{\"history-amber-a91\":\"ledger-alpha\"}' > /var/lib/traffic-surge/priority.json")
        out = await verify(ARENA, t, "baseline-ready", ev)
        assert not out.passed
        assert out.detail == "GET /priority/history-cobalt-f73 returned HTTP 404 (historical record is missing)"
        await sh(t, "systemctl stop traffic-surge.service")
        out = await verify(ARENA, t, "baseline-ready", ev)
        assert not out.passed and out.detail.startswith("GET /health: no answer (curl: (7)"), out.detail


# --- one heat -----------------------------------------------------------------------


def test_heat_oracle_hasty_memory(tmp_path):
    out = tmp_path / "heat"
    t0 = time.monotonic()
    world = run_heat(ARENA, out, ["oracle", "scripted:hasty", "scripted:memory"])
    wall = time.monotonic() - t0
    assert wall < 120, wall
    terr = world.territories
    assert world.winner == "surge-one"
    assert terr["surge-one"].durable_at_ms is not None
    assert all(terr["surge-one"].milestones[m].passed for m in MILESTONES)
    assert terr["surge-one"].milestone_points == 100

    events = events_of(out)

    def finished(agent: str) -> dict:
        (e,) = [e for e in events if e["kind"] == "agent_finished" and e["agent"] == agent]
        assert e["success"] is True, e
        return e

    def target_runs(territory: str, milestone: str) -> tuple[list[dict], list[dict]]:
        starts = [e for e in events if e["kind"] == "milestone_evaluation_started"
                  and e["territory"] == territory and e["milestone"] == milestone]
        fails = [e for e in events if e["kind"] == "milestone_failed"
                 and e["territory"] == territory and e["milestone"] == milestone]
        return starts, fails

    # hasty: baseline-ready passed; priority-first-surge never did, always for the same reason,
    # also after its own (single-threaded, sqlite) program was deployed
    hasty = terr["surge-two"].milestones
    assert hasty["baseline-ready"].passed
    assert not hasty["priority-first-surge"].passed
    assert set(hasty) == {"baseline-ready", "priority-first-surge"}
    starts, fails = target_runs("surge-two", "priority-first-surge")
    assert fails and not [e for e in events if e["kind"] == "milestone_passed" and e["territory"] == "surge-two"
                          and e["milestone"] == "priority-first-surge"]
    deployed = finished("surge-two-agent")["elapsed_ms"]
    assert any(s["elapsed_ms"] >= deployed for s in starts), (deployed, starts)
    for e in fails:
        assert re.fullmatch(r"PUT /priority/surge-[0-9a-f]{16} got no answer within 1\.5 s while 8 optional requests "
                            r"were in flight \(expected 204 at once: the priority write waited behind optional work\)",
                            e["detail"]), e["detail"]
    assert hasty["priority-first-surge"].failure_detail == fails[-1]["detail"]

    # memory: baseline-ready and priority-first-surge passed; bounded-optional never did
    memory = terr["surge-three"].milestones
    assert memory["baseline-ready"].passed and memory["priority-first-surge"].passed
    assert memory["priority-first-surge"].evidence["optional_pressure"] == 8
    assert not memory["bounded-optional"].passed
    assert set(memory) == {"baseline-ready", "priority-first-surge", "bounded-optional"}
    starts, fails = target_runs("surge-three", "bounded-optional")
    # memory reached bounded-optional; whether a check of it ended before the oracle's durable
    # pass finished the heat is a race (a check still running at the finish earns nothing,
    # §3): every one that ended failed, for the reason the pristine program gives
    assert starts
    assert len(fails) >= len(starts) - 1
    for e in fails:
        m = re.match(r"of 16 concurrent GET /optional/bounded-N, (\d+) timed out after 2 s \(served (\d+), shed 0\); "
                     r"each must be 200 'optional:bounded-N' or shed with 429/503 within 2 s: optional load is not bounded$",
                     e["detail"])
        assert m, e["detail"]
        assert int(m.group(1)) >= 8 and int(m.group(1)) + int(m.group(2)) == 16
    if fails:
        assert memory["bounded-optional"].failure_detail == fails[-1]["detail"]


# --- oracle and volatile, milestone by milestone ------------------------------------


async def run_chain(t, ev: Path) -> dict:
    """All six verifiers in order (the referee's reboot before host-reboot); stops at the
    first failure. Returns milestone -> VerifierOutcome."""
    views: dict = {}
    results = {}
    for m in MILESTONES:
        if m == "host-reboot":
            await reboot(t)
        out = await verify(ARENA, t, m, ev, dict(views, **{m: {"evaluating": True}}))
        results[m] = out
        if not out.passed:
            if m == "host-reboot":  # say why the service is not back (units, their journal)
                _, diag, _ = await guest(t, "systemctl status --no-pager traffic-surge-seed.service traffic-surge.service"
                                            " 2>&1 | head -30; journalctl -b --no-pager -o cat -u traffic-surge-seed"
                                            " -u traffic-surge 2>&1 | tail -20")
                out = dataclasses.replace(out, detail=f"{out.detail}\n--- guest diagnostics ---\n{diag}")
                results[m] = out
            break
        views[m] = passed_view(out.evidence)
    return results


async def test_oracle_and_volatile_milestone_by_milestone(tmp_path):
    async with booted_territories(ARENA, tmp_path / "wd", count=2) as (a, b):
        await asyncio.gather(deploy_checked(a, "oracle"), deploy_checked(b, "volatile"))
        oracle, volatile = await asyncio.gather(run_chain(a, tmp_path / "ev-a"), run_chain(b, tmp_path / "ev-b"))

        assert [m for m, o in oracle.items() if o.passed] == MILESTONES, "\n".join(
            f"{m}: {o.detail}" for m, o in oracle.items() if not o.passed)
        assert oracle["bounded-optional"].evidence["bounded"] is True
        assert oracle["bounded-optional"].evidence["served"] + oracle["bounded-optional"].evidence["shed"] == 16
        # four slots of 0.45 s: a burst of 16 sheds some (how many depends on how close together
        # the verifier's requests land; 12 on an idle machine, 6 seen on a loaded one)
        assert oracle["bounded-optional"].evidence["shed"] >= 1
        assert len(oracle["recover-peak"].evidence["records"]) == 4
        assert oracle["host-reboot"].evidence["record"] == oracle["restart-under-load"].evidence["record"]
        # the durable ledger is on the disk
        assert {"priority.json", "priority.sqlite3"} <= set((await sh(a, "ls /var/lib/traffic-surge")).split())

        assert [m for m, o in volatile.items() if o.passed] == MILESTONES[:5]
        detail = volatile["host-reboot"].detail
        record = volatile["restart-under-load"].evidence["record"]
        assert detail.split("\n--- guest")[0] == (f"after the reboot, GET /priority/{record} returned HTTP 404 (the record acknowledged after "
                          "the restart under load is missing) for 5 s while /health was ready: record lost"), detail
        # the historical records did come back (seeded again from priority.json)
        for k, v in HISTORY.items():
            assert await ahttp(b, "GET", f"/priority/{k}") == (200, v.encode())
