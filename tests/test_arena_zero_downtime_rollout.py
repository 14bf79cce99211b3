"""The zero-downtime-rollout arena package on real container territories.

* the starting state before any agent acts (units, seeded files, ports, the NixOS
  paths) and what comes back after reboots (seeds every boot, write-if-absent);
* one real heat ``oracle`` / ``scripted:hasty`` / ``scripted:memory``: the oracle is
  durable and wins, hasty fails ``uninterrupted-cutover`` (its proxy restart is an
  outage the continuity monitor records), memory fails ``v2-restart`` (record lost);
* the verifiers run directly against an untouched territory: ``baseline-ready`` passes
  and starts the monitor, the later milestones are refused with the right reason;
* ``scripted:volatile`` driven milestone by milestone: everything passes up to the
  reboot, then ``host-reboot`` fails on the dangling ``/opt/rollout/v2.py`` symlink.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import time
from pathlib import Path

import pytest

from aoe_tui.referee.verifier import end_leftover_verifiers
from arena_support import (ARENAS, booted_territories, deploy, events_of, guest, http, parse_state, passed_view,
                           reboot, run_heat, sh, show, unit_states, verify)

pytestmark = [pytest.mark.container]

ARENA = ARENAS / "zero-downtime-rollout"
PKG = "/usr/lib/aoe-arena/zero-downtime-rollout"
SEEDED = {"customer-alpha-73c": "alpha-original", "customer-beta-a19": "beta-original"}
MILESTONES = ["baseline-ready", "uninterrupted-cutover", "write-new", "v2-restart", "host-reboot"]
UNITS = ["rollout-seed.service", "rollout-v1.service", "rollout-v2.service", "rollout-proxy.service"]
#: timeout of one request to the public endpoint in these tests (s)
HTTP_TIMEOUT_S = 3


def monitors_under(root: Path) -> list[int]:
    """pids of continuity monitors whose audit folder is under ``root`` (not counting the
    short-lived subshells a monitor forks, which have the same command line)."""
    found: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            ppid = int(Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if "continuity-monitor.sh" in cmd and str(root) in cmd:
            found[int(d)] = ppid
    return sorted(pid for pid, ppid in found.items() if ppid not in found)


async def wait_settled(t) -> None:
    """Wait until the v2 slot has given up (start limit) and v1 + proxy answer: the state an
    agent finds on a fresh territory."""
    deadline = time.monotonic() + 30
    while True:
        state = await unit_states(t, UNITS)
        if state["rollout-v2.service"][0] == "failed" and state["rollout-proxy.service"] == ("active", "running"):
            try:
                if http(t, "GET", "/health", timeout=HTTP_TIMEOUT_S) == (200, b"ready"):
                    return
            except OSError:
                pass
        assert time.monotonic() < deadline, f"territory {t.id} did not settle: {state}"
        time.sleep(0.3)


# ---------------------------------------------------------------------------- a. starting state

STATE_SCRIPT = r"""
set -u
for f in /var/lib/rollout /var/lib/rollout/upstream /var/lib/rollout/records.sqlite3 /opt/rollout \
         %(pkg)s/seed.sh %(pkg)s/rollout-v1.py %(pkg)s/rollout-proxy.py; do
  printf 'mode %%s %%s\n' "$f" "$(stat -c '%%a %%U:%%G %%F' "$f" 2>&1)"
done
printf 'upstream-hex %%s\n' "$(od -An -tx1 /var/lib/rollout/upstream | tr -d ' \n')"
printf 'opt-entries %%s\n' "$(ls -A /opt/rollout | wc -l)"
printf 'v2py %%s\n' "$([ -e /opt/rollout/v2.py ] || [ -L /opt/rollout/v2.py ] && echo present || echo absent)"
printf 'schema %%s\n' "$(sqlite3 /var/lib/rollout/records.sqlite3 .schema)"
sqlite3 -separator '|' /var/lib/rollout/records.sqlite3 'select id, value from records order by id' | sed 's/^/row /'
ss -Hltn | awk '{print "listen " $4}'
printf 'python %%s\n' "$(/run/current-system/sw/bin/python3 -c 'print(7*6)')"
printf 'sh %%s\n' "$(readlink -f /bin/sh)"
printf 'hostname %%s\n' "$(hostname)"
printf 'v2-direct %%s\n' "$(curl -s -o /dev/null -w '%%{http_code}' http://127.0.0.1:8082/health)"
printf 'v1-direct %%s\n' "$(curl -s http://127.0.0.1:8081/version)"
""" % {"pkg": PKG}


async def test_starting_state_and_reboots(tmp_path: Path) -> None:
    async with booted_territories(ARENA, tmp_path / "territories", count=1) as (t,):
        assert t.id == "rollout-one"
        await wait_settled(t)
        assert await unit_states(t, UNITS) == {
            "rollout-seed.service": ("active", "exited"),
            "rollout-v1.service": ("active", "running"),
            "rollout-v2.service": ("failed", "failed"),
            "rollout-proxy.service": ("active", "running"),
        }
        # unit definitions: descriptions, ordering and requirement edges, restart policy
        seed = await show(t, "rollout-seed.service", "Description", "Type", "RemainAfterExit", "Before",
                          "UnitFileState", "WantedBy")
        assert seed["Description"] == "Seed live v1 state"
        assert seed["Type"] == "oneshot" and seed["RemainAfterExit"] == "yes"
        assert {"rollout-v1.service", "rollout-v2.service", "rollout-proxy.service"} <= set(seed["Before"].split())
        assert seed["UnitFileState"] == "enabled" and "multi-user.target" in seed["WantedBy"].split()
        expect = {
            "rollout-v1.service": ("Existing rollout v1 service", {"rollout-seed.service"}),
            "rollout-v2.service": ("Agent-built rollout v2 slot", {"rollout-seed.service"}),
            "rollout-proxy.service": ("Stable public rollout proxy", {"rollout-seed.service", "rollout-v1.service"}),
        }
        for unit, (description, deps) in expect.items():
            p = await show(t, unit, "Description", "Requires", "After", "Restart", "RestartUSec", "UnitFileState",
                           "WantedBy", "ExecStart", "FragmentPath")
            assert p["Description"] == description, unit
            assert deps <= set(p["Requires"].split()) and deps <= set(p["After"].split()), (unit, p)
            assert p["Restart"] == "always" and p["RestartUSec"] == "1s", unit
            assert p["UnitFileState"] == "enabled" and "multi-user.target" in p["WantedBy"].split(), unit
            assert p["FragmentPath"].startswith(("/usr/lib/systemd/system/", "/lib/systemd/system/")), p["FragmentPath"]
        assert "/opt/rollout/v2.py" in (await show(t, "rollout-v2.service", "ExecStart"))["ExecStart"]
        assert "rollout-v1.service" not in (await show(t, "rollout-v2.service", "Requires"))["Requires"].split()
        # first-build's slot is gone
        assert (await show(t, "builder-app.service", "LoadState"))["LoadState"] == "not-found"

        s = parse_state(await sh(t, STATE_SCRIPT))
        modes = dict(m.split(" ", 1) for m in s["mode"])
        assert modes["/var/lib/rollout"] == "755 root:root directory"
        assert modes["/opt/rollout"] == "755 root:root directory"
        assert modes["/var/lib/rollout/upstream"] == "644 root:root regular file"
        assert modes["/var/lib/rollout/records.sqlite3"] == "644 root:root regular file"
        assert modes[f"{PKG}/seed.sh"] == "755 root:root regular file"
        assert modes[f"{PKG}/rollout-v1.py"].endswith("root:root regular file")
        assert s["upstream-hex"] == ["383038310a"]  # "8081\n"
        assert s["opt-entries"] == ["0"] and s["v2py"] == ["absent"]
        assert s["schema"] == ["CREATE TABLE records (id TEXT PRIMARY KEY, value TEXT NOT NULL);"]
        assert s["row"] == ["customer-alpha-73c|alpha-original", "customer-beta-a19|beta-original"]
        listen = set(s["listen"])
        assert {"127.0.0.1:8081", "0.0.0.0:8080"} <= listen
        assert not any(a.endswith(":8082") for a in listen) and "0.0.0.0:8081" not in listen
        assert s["python"] == ["42"] and s["sh"][0].endswith("/bash")
        assert s["hostname"] == ["rollout-one"]
        assert s["v2-direct"] == ["000"] and s["v1-direct"] == ["v1"]
        # the proxy and v1 code are the upstream programs, kept out of the scanned folders
        for name in ("rollout-v1.py", "rollout-proxy.py"):
            inside = await sh(t, f"cat {PKG}/{name}")
            assert inside == (ARENA / "territory/files" / PKG.lstrip("/") / name).read_text()
        assert "ThreadingHTTPServer((\"127.0.0.1\", 8081)" in await sh(t, f"cat {PKG}/rollout-v1.py")
        # nothing in the territory names the referee's side
        words = ["oracle", "verif", "milestone", "referee", "continuity", "baseline-ready", "uninterrupted-cutover",
                 "write-new", "v2-restart", "host-reboot"]
        pattern = " ".join(f"-e {shlex.quote(w)}" for w in words)
        leak = await guest(t, f"find {PKG} /usr/lib/systemd/system/rollout-* /var/lib/rollout /opt/rollout -xdev "
                              f"-type f -print0 2>/dev/null | xargs -0 -r grep -l {pattern}")
        assert leak[1].strip() == "", f"arena files naming the referee's side: {leak[1]}"
        # the pre-arena programs are not under the scanned folders (as in NixOS's store)
        scanned = await guest(t, "find /etc /opt /root /var/lib -xdev -type f -size -4M -print0 2>/dev/null "
                                 "| xargs -0 -r grep -l -I -e ThreadingHTTPServer -e rollout-v1.py")
        assert scanned[1].strip() == "", scanned[1]

        # the public endpoint as the referee sees it: v1 through the proxy
        assert http(t, "GET", "/health", timeout=HTTP_TIMEOUT_S) == (200, b"ready")
        assert http(t, "GET", "/version", timeout=HTTP_TIMEOUT_S) == (200, b"v1")
        for rid, value in SEEDED.items():
            assert http(t, "GET", f"/records/{rid}", timeout=HTTP_TIMEOUT_S) == (200, value.encode())
        assert http(t, "GET", "/records/never-written", timeout=HTTP_TIMEOUT_S) == (404, b"")
        assert http(t, "GET", "/nothing-here", timeout=HTTP_TIMEOUT_S) == (404, b"")

        # reboot 1: seeds write only what is absent; /opt/rollout and a deleted row come back,
        # a changed upstream and a changed record are kept
        await sh(t, "printf '8082\\n' > /var/lib/rollout/upstream.new && mv /var/lib/rollout/upstream.new /var/lib/rollout/upstream; "
                    "sqlite3 /var/lib/rollout/records.sqlite3 \"delete from records where id='customer-beta-a19'; "
                    "update records set value='alpha-changed' where id='customer-alpha-73c'; "
                    "insert into records values('kept-7','kept')\"; rmdir /opt/rollout")
        await reboot(t)
        await sh(t, "for i in $(seq 100); do systemctl is-active --quiet rollout-seed.service && break; sleep 0.1; done")
        s = parse_state(await sh(t, STATE_SCRIPT))
        assert s["upstream-hex"] == ["383038320a"]  # kept: "8082\n"
        assert s["row"] == ["customer-alpha-73c|alpha-changed", "customer-beta-a19|beta-original", "kept-7|kept"]
        assert dict(m.split(" ", 1) for m in s["mode"])["/opt/rollout"] == "755 root:root directory"
        # with upstream 8082 and no v2, the proxy is up but answers 502
        deadline = time.monotonic() + 20
        while http_or_none(t, "/health") != 502:
            assert time.monotonic() < deadline, "proxy did not answer 502 with upstream 8082 and no v2"
            time.sleep(0.2)

        # reboot 2: an absent upstream file is written again as "8081\n"; v1 serves again
        await sh(t, "rm -f /var/lib/rollout/upstream")
        await reboot(t)
        await wait_settled(t)
        s = parse_state(await sh(t, STATE_SCRIPT))
        assert s["upstream-hex"] == ["383038310a"]
        assert s["v2py"] == ["absent"] and s["opt-entries"] == ["0"]
        assert await unit_states(t, UNITS) == {
            "rollout-seed.service": ("active", "exited"),
            "rollout-v1.service": ("active", "running"),
            "rollout-v2.service": ("failed", "failed"),
            "rollout-proxy.service": ("active", "running"),
        }
        assert http(t, "GET", "/version", timeout=HTTP_TIMEOUT_S) == (200, b"v1")

        # the proxy depends on v1: restarting v1 restarts the proxy, stopping v1 stops it
        before = (await show(t, "rollout-proxy.service", "MainPID"))["MainPID"]
        await sh(t, "systemctl restart rollout-v1.service")
        after = await show(t, "rollout-proxy.service", "MainPID", "ActiveState")
        assert after["ActiveState"] == "active" and after["MainPID"] != before
        await sh(t, "systemctl stop rollout-v1.service")
        assert (await show(t, "rollout-proxy.service", "ActiveState"))["ActiveState"] == "inactive"
        assert http_or_none(t, "/health") is None
        await sh(t, "systemctl start rollout-proxy.service")
        assert (await show(t, "rollout-v1.service", "ActiveState"))["ActiveState"] == "active"


def http_or_none(t, path: str) -> int | None:
    try:
        return http(t, "GET", path, timeout=HTTP_TIMEOUT_S)[0]
    except OSError:
        return None


# ---------------------------------------------------------------------------- b. one heat

def test_heat_oracle_hasty_memory(tmp_path: Path) -> None:
    out = tmp_path / "heat"
    # the manifest's oracle adapter, 5 s late: memory's v2-restart (its own restart, then the
    # record's 404) must fail before the oracle's durable ends the heat; on time, the oracle
    # finished ~0.6 s after memory's v2-restart began in a loaded CI run
    late = tmp_path / "late-oracle.sh"
    late.write_text(f"#!/bin/sh\nsleep 5\nexec {ARENA / 'adapters' / 'oracle-rollout.sh'}\n")
    late.chmod(0o755)
    started = time.monotonic()
    world = run_heat(ARENA, out, [f"command:{late}", "scripted:hasty", "scripted:memory"])
    wall = time.monotonic() - started
    assert wall < 120, f"heat took {wall:.0f} s"
    assert world.winner == "rollout-one"
    one, two, three = (world.territories[t] for t in ("rollout-one", "rollout-two", "rollout-three"))
    assert one.durable_at_ms is not None
    assert all(one.milestones[m].passed for m in MILESTONES)
    assert one.milestones["uninterrupted-cutover"].evidence["samples"] >= 3
    assert one.milestones["uninterrupted-cutover"].evidence["uninterrupted"] is True

    # hasty: baseline passed; the proxy restart is a recorded outage, never credited
    assert two.milestones["baseline-ready"].passed
    cut = two.milestones["uninterrupted-cutover"]
    assert not cut.passed
    assert "visible outage during the rollout" in cut.failure_detail, cut.failure_detail
    # The proxy's restart is seen as a connection-level failure or an empty answer; which one is
    # the clock's call: refused while nothing listens (curl 7), reset/empty for a request in
    # flight at the kill (56, 52), or an empty body from a process caught mid-restart (seen with
    # the territories held to one CPU, issue 26).
    assert re.search(r"no answer \(curl: \((7|52|56)\) |returned '', expected ", cut.failure_detail), cut.failure_detail
    assert "write-new" not in two.milestones or not two.milestones["write-new"].passed

    # memory: correct cutover and write, but the record dies with the v2 process
    for m in ("baseline-ready", "uninterrupted-cutover", "write-new"):
        assert three.milestones[m].passed, m
    v2r = three.milestones["v2-restart"]
    assert not v2r.passed
    assert v2r.failure_detail and "record lost across the v2 restart" in v2r.failure_detail, v2r.failure_detail
    record = three.milestones["write-new"].evidence["record"]
    assert f"GET /records/{record} returned HTTP 404" in v2r.failure_detail

    events = events_of(out)
    passed = {(e["territory"], e["milestone"]) for e in events if e["kind"] == "milestone_passed"}
    failed = [e for e in events if e["kind"] == "milestone_failed"]
    assert ("rollout-two", "uninterrupted-cutover") not in passed
    assert ("rollout-three", "v2-restart") not in passed and ("rollout-three", "host-reboot") not in passed
    hasty_failed = [e for e in failed if e["territory"] == "rollout-two" and e["milestone"] == "uninterrupted-cutover"]
    assert hasty_failed
    # every hasty attempt says the same thing: the outage is permanent
    assert all(e["detail"].startswith("visible outage during the rollout") for e in hasty_failed), hasty_failed
    assert any(e["territory"] == "rollout-three" and e["milestone"] == "v2-restart" for e in failed)

    audit = out / "evidence" / "rollout-two" / "continuity-audit"
    failures = (audit / "failures").read_text().splitlines()
    assert failures and all("GET /" in line for line in failures)
    assert (audit / "saw-v2").exists()
    # no continuity monitor outlives the heat
    assert monitors_under(out) == []


# ---------------------------------------------------------------------------- c. untouched territory

async def test_verifiers_refuse_the_starting_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ev = tmp_path / "evidence" / "rollout-one"
    try:
        async with booted_territories(ARENA, tmp_path / "territories", count=1) as (t,):
            await wait_settled(t)
            base = await verify(ARENA, t, "baseline-ready", ev)
            assert base.passed, base.detail
            assert base.evidence == {"baseline": "v1", "records": ["customer-alpha-73c", "customer-beta-a19"]}
            audit = ev / "continuity-audit"
            pid = int((audit / "pid").read_text())
            assert monitors_under(tmp_path) == [pid]
            time.sleep(1.0)
            samples = (audit / "samples").read_text().splitlines()
            assert len(samples) >= 3 and all(" version=200:v1 " in s for s in samples), samples[:3]
            assert (audit / "failures").read_text() == "" and not (audit / "saw-v2").exists()

            # still on v1: the cutover cannot be credited (shortened wait; the monitor keeps running)
            monkeypatch.setenv("CUTOVER_WAIT_POLLS", "5")
            cut = await verify(ARENA, t, "uninterrupted-cutover", ev)
            assert not cut.passed
            assert cut.detail.startswith("public endpoint never cut over to v2: GET /version through the proxy "
                                         "did not answer v2 within 1 s"), cut.detail
            assert "version=200:v1" in cut.detail
            assert monitors_under(tmp_path) == [pid]

            # the monitor ended without seeing v2: refused at once, for good
            os.kill(pid, signal.SIGTERM)
            for _ in range(40):
                if not monitors_under(tmp_path):
                    break
                time.sleep(0.05)
            monkeypatch.delenv("CUTOVER_WAIT_POLLS")
            t0 = time.monotonic()
            cut = await verify(ARENA, t, "uninterrupted-cutover", ev)
            assert not cut.passed and time.monotonic() - t0 < 3
            assert "the continuity monitor ended after" in cut.detail and "without GET /version answering v2" in cut.detail

            # a baseline that is not v1 any more is refused
            await sh(t, "printf '8082\\n' > /var/lib/rollout/upstream.new && mv /var/lib/rollout/upstream.new /var/lib/rollout/upstream")
            b2 = await verify(ARENA, t, "baseline-ready", tmp_path / "evidence-b2")
            assert not b2.passed and b2.detail == "live v1 baseline: GET /health returned HTTP 502, expected 200 'ready'"
            assert monitors_under(tmp_path / "evidence-b2") == []
            await sh(t, "printf '8081\\n' > /var/lib/rollout/upstream.new && mv /var/lib/rollout/upstream.new /var/lib/rollout/upstream")

            # write-new is gated behind the cutover in the manifest; on v1 it would pass
            wn = await verify(ARENA, t, "write-new", ev)
            assert wn.passed, wn.detail
            assert set(wn.evidence) == {"record", "value"} and wn.evidence["record"].startswith("rollout-")
            prev = {"write-new": passed_view(wn.evidence)}

            # v2-restart: the slot has no program, the public endpoint still answers v1
            vr = await verify(ARENA, t, "v2-restart", ev, prev)
            assert not vr.passed
            assert vr.detail == ("after systemctl restart rollout-v2.service, 20 checks over 10 s never passed; "
                                 "last: GET /version returned 'v1', expected 'v2'"), vr.detail

            # host-reboot (without a reboot, shortened poll): not v2, and the guest says why
            monkeypatch.setenv("REBOOT_POLL_SECONDS", "2")
            hr = await verify(ARENA, t, "host-reboot", ev, {**prev, "v2-restart": passed_view(
                {"record": wn.evidence["record"], "v2_restart": True, "value": wn.evidence["value"]})})
            assert not hr.passed
            assert "last: GET /version returned 'v1', expected 'v2'" in hr.detail, hr.detail
            assert "upstream 8081" in hr.detail and "/opt/rollout/v2.py missing" in hr.detail, hr.detail
            # no evidence of a refused milestone is left behind
            assert not (ev / "v2-restart.json").exists() and not (ev / "host-reboot.json").exists()
    finally:
        end_leftover_verifiers(tmp_path)
        for pid in monitors_under(tmp_path):
            os.kill(pid, signal.SIGKILL)


# ---------------------------------------------------------------------------- volatile, step by step

async def test_volatile_fails_only_host_reboot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ev = tmp_path / "evidence" / "rollout-one"
    views: dict[str, dict] = {}
    try:
        async with booted_territories(ARENA, tmp_path / "territories", count=1) as (t,):
            await wait_settled(t)
            base = await verify(ARENA, t, "baseline-ready", ev)
            assert base.passed, base.detail
            views["baseline-ready"] = passed_view(base.evidence)
            # the builder switches only once it sees the monitor's traffic
            out = await deploy(ARENA, t, "volatile")
            assert [line for line in out.splitlines() if line.startswith("aoe-step:")], out
            for m in ("uninterrupted-cutover", "write-new", "v2-restart"):
                res = await verify(ARENA, t, m, ev, views)
                assert res.passed, f"{m}: {res.detail}"
                views[m] = passed_view(res.evidence)
            assert views["uninterrupted-cutover"]["evidence"]["samples"] >= 3
            assert (await sh(t, "readlink /opt/rollout/v2.py")).strip() == "/run/rollout-build/v2.py"
            await reboot(t)
            monkeypatch.setenv("REBOOT_POLL_SECONDS", "6")
            hr = await verify(ARENA, t, "host-reboot", ev, views)
            assert not hr.passed
            assert "GET /health returned HTTP 502" in hr.detail, hr.detail
            assert "rollout-v2.service failed" in hr.detail or "rollout-v2.service activating" in hr.detail, hr.detail
            assert "/opt/rollout/v2.py is a dangling symlink to /run/rollout-build/v2.py" in hr.detail, hr.detail
            assert "upstream 8082" in hr.detail
    finally:
        end_leftover_verifiers(tmp_path)
