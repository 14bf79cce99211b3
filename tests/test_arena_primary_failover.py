"""The primary-failover arena package on real container territories.

* the starting state before any agent acts (units, seeded files and modes, what 8080,
  8081 and 8082 answer, the replica's and the proxy's exact behaviour, the NixOS paths)
  and what comes back after reboots (the seed runs every boot, writes what is absent and
  touches ``primary.failed``);
* one real heat ``oracle`` / ``scripted:hasty`` / ``scripted:memory``: the oracle is
  durable and wins, hasty fails ``old-primary-fenced`` (never fenced), memory fails
  ``writes-restored`` (its buffering front answers 202);
* the verifiers run directly against an untouched territory: ``failed-primary-preserved``
  passes, the later milestones are refused with the right reason, and the incident
  check refuses a deleted marker or a listener on 8081;
* ``scripted:volatile`` driven milestone by milestone: everything passes up to the
  reboot, then ``host-reboot`` fails because its bind mounts over the role and upstream
  files are gone.
"""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path

import pytest

from aoe_tui.referee.verifier import end_leftover_verifiers
from arena_support import (ARENAS, booted_territories, deploy, events_of, guest, http, parse_state, passed_view,
                           reboot, run_heat, sh, show, unit_states, verify)

pytestmark = [pytest.mark.container]

ARENA = ARENAS / "primary-failover"
PKG = "/usr/lib/aoe-arena/primary-failover"
STATE = "/var/lib/failover"
ORIGINALS = {"customer-red-4a7": "red-original", "customer-blue-8d2": "blue-original",
             "customer-green-f31": "green-original"}
MILESTONES = ["failed-primary-preserved", "reads-restored", "old-primary-fenced", "writes-restored",
              "service-restart", "host-reboot"]
UNITS = ["failover-seed.service", "failover-replica.service", "failover-proxy.service"]


async def wait_settled(t) -> None:
    """Wait until the seed has run and the replica and the proxy listen (a fresh territory
    as an agent finds it)."""
    deadline = time.monotonic() + 30
    while True:
        status, out, _ = await guest(t, "systemctl is-active failover-seed.service failover-replica.service "
                                        "failover-proxy.service; ss -Hltn")
        if status == 0 and "0.0.0.0:8080 " in out and "127.0.0.1:8082 " in out:
            return
        assert time.monotonic() < deadline, f"territory {t.id} did not settle: {out}"
        time.sleep(0.2)


# ---------------------------------------------------------------------------- a. starting state

STATE_SCRIPT = r"""
set -u
for f in %(state)s %(state)s/upstream %(state)s/replica.role %(state)s/primary.failed %(state)s/records.sqlite3 \
         %(pkg)s/seed.sh %(pkg)s/replica.py %(pkg)s/proxy.py; do
  printf 'mode %%s %%s\n' "$f" "$(stat -c '%%a %%U:%%G %%F' "$f" 2>&1)"
done
for f in upstream replica.role primary.failed; do
  printf 'hex %%s %%s\n' "$f" "$(od -An -tx1 %(state)s/$f | tr -d ' \n')"
done
printf 'fenced %%s\n' "$([ -e %(state)s/primary.fenced ] && echo present || echo absent)"
printf 'entries %%s\n' "$(ls -A %(state)s | tr '\n' ' ')"
printf 'failed-mtime %%s\n' "$(stat -c %%Y %(state)s/primary.failed)"
printf 'schema %%s\n' "$(sqlite3 %(state)s/records.sqlite3 .schema)"
sqlite3 -separator '|' %(state)s/records.sqlite3 'select id, value from records order by rowid' | sed 's/^/row /'
ss -Hltn | awk '{print "listen " $4}'
printf 'python %%s\n' "$(/run/current-system/sw/bin/python3 -c 'print(7*6)')"
printf 'sh %%s\n' "$(readlink -f /bin/sh)"
printf 'hostname %%s\n' "$(hostname)"
printf 'now %%s\n' "$(date +%%s)"
""" % {"pkg": PKG, "state": STATE}


def hexes(s: dict[str, list[str]]) -> dict[str, str]:
    return dict(h.split(" ", 1) if " " in h else (h, "") for h in s["hex"])


# raw answers of the replica (inside the guest: it listens on 127.0.0.1 only)
RAW_SCRIPT = r"""
ask() { curl -s -i --max-time 3 "$@" | tr -d '\r'; printf '\n~~~\n'; }
ask http://127.0.0.1:8082/health
ask http://127.0.0.1:8082/role
ask http://127.0.0.1:8082/records/customer-red-4a7
ask http://127.0.0.1:8082/records/never-written
ask http://127.0.0.1:8082/elsewhere
ask -X PUT --data-binary probe-value http://127.0.0.1:8082/records/probe-1
ask -X PUT --data-binary probe-value http://127.0.0.1:8082/elsewhere
ask -X POST --data-binary x http://127.0.0.1:8080/records/probe-1
ask -X DELETE http://127.0.0.1:8080/records/probe-1
"""


def parse_raw(text: str) -> list[tuple[str, list[str], str]]:
    """(status line, header names, body) per answer of RAW_SCRIPT."""
    out = []
    for chunk in text.split("\n~~~\n")[:-1]:
        head, _, body = chunk.partition("\n\n")
        lines = head.splitlines()
        out.append((lines[0], sorted(ln.split(":", 1)[0].lower() for ln in lines[1:]), body))
    return out


async def test_starting_state_and_reboots(tmp_path: Path) -> None:
    async with booted_territories(ARENA, tmp_path / "territories", count=1) as (t,):
        assert t.id == "failover-one"
        await wait_settled(t)
        assert await unit_states(t, UNITS) == {
            "failover-seed.service": ("active", "exited"),
            "failover-replica.service": ("active", "running"),
            "failover-proxy.service": ("active", "running"),
        }
        # unit definitions: descriptions, ordering and requirement edges, restart policy
        seed = await show(t, "failover-seed.service", "Description", "Type", "RemainAfterExit", "Before",
                          "UnitFileState", "WantedBy", "FragmentPath", "ExecStart")
        assert seed["Description"] == "Seed failed-primary topology and replicated state"
        assert seed["Type"] == "oneshot" and seed["RemainAfterExit"] == "yes"
        assert {"failover-replica.service", "failover-proxy.service"} <= set(seed["Before"].split())
        assert seed["UnitFileState"] == "enabled" and "multi-user.target" in seed["WantedBy"].split()
        assert f"{PKG}/seed.sh" in seed["ExecStart"]
        expect = {
            "failover-replica.service": ("Healthy read-only failover replica", f"{PKG}/replica.py"),
            "failover-proxy.service": ("Public proxy stranded on failed primary", f"{PKG}/proxy.py"),
        }
        for unit, (description, program) in expect.items():
            p = await show(t, unit, "Description", "Requires", "After", "Restart", "RestartUSec", "UnitFileState",
                           "WantedBy", "ExecStart", "FragmentPath")
            assert p["Description"] == description, unit
            assert "failover-seed.service" in p["Requires"].split(), (unit, p["Requires"])
            assert "failover-seed.service" in p["After"].split(), (unit, p["After"])
            assert p["Restart"] == "always" and p["RestartUSec"] == "1s", unit
            assert p["UnitFileState"] == "enabled" and "multi-user.target" in p["WantedBy"].split(), unit
            assert program in p["ExecStart"], p["ExecStart"]
        for unit in UNITS:
            path = (await show(t, unit, "FragmentPath"))["FragmentPath"]
            assert path.startswith(("/usr/lib/systemd/system/", "/lib/systemd/system/")), path
        # first-build's slot is gone; there is no old-primary unit at all
        assert (await show(t, "builder-app.service", "LoadState"))["LoadState"] == "not-found"
        units = await sh(t, "systemctl list-unit-files --no-legend 'failover-*' | awk '{print $1}'")
        assert sorted(units.split()) == sorted(UNITS)

        s = parse_state(await sh(t, STATE_SCRIPT))
        modes = dict(m.split(" ", 1) for m in s["mode"])
        assert modes[STATE] == "755 root:root directory"
        for f in ("upstream", "replica.role", "records.sqlite3"):
            assert modes[f"{STATE}/{f}"] == "644 root:root regular file", f
        assert modes[f"{STATE}/primary.failed"] == "644 root:root regular empty file"
        assert modes[f"{PKG}/seed.sh"] == "555 root:root regular file"
        assert modes[f"{PKG}/replica.py"] == "444 root:root regular file"
        assert modes[f"{PKG}/proxy.py"] == "444 root:root regular file"
        assert hexes(s) == {"upstream": "383038310a", "replica.role": "7265706c6963610a", "primary.failed": ""}
        assert s["fenced"] == ["absent"]
        assert s["entries"] == ["primary.failed records.sqlite3 replica.role upstream "]
        assert s["schema"] == ["CREATE TABLE records (id TEXT PRIMARY KEY, value TEXT NOT NULL);"]
        assert s["row"] == [f"{k}|{v}" for k, v in ORIGINALS.items()]
        listen = set(s["listen"])
        assert listen >= {"0.0.0.0:8080", "127.0.0.1:8082"}
        assert not any(a.endswith(":8081") for a in listen), listen
        assert not any(a.endswith(":8082") and a != "127.0.0.1:8082" for a in listen), listen
        assert s["python"] == ["42"] and s["sh"][0].endswith("/bash")
        assert s["hostname"] == ["failover-one"]
        # the programs are the package's, kept out of the scanned folders (as in NixOS's store)
        for name in ("seed.sh", "replica.py", "proxy.py"):
            inside = await sh(t, f"cat {PKG}/{name}")
            assert inside == (ARENA / "territory/files" / PKG.lstrip("/") / name).read_text()
        scanned = await guest(t, "find /etc /opt /root /var/lib -xdev -type f -size -4M -print0 2>/dev/null "
                                 "| xargs -0 -r grep -l -I -e ThreadingHTTPServer -e replica.role")
        assert scanned[1].strip() == "", scanned[1]
        # nothing in the territory names the referee's side
        words = ["oracle", "verif", "milestone", "referee", "incident-confirmed", "reads-restored",
                 "old-primary-fenced", "writes-restored", "host-reboot"]
        pattern = " ".join(f"-e {w}" for w in words)
        leak = await guest(t, f"find {PKG} /usr/lib/systemd/system/failover-* {STATE} -xdev -type f -print0 "
                              f"2>/dev/null | xargs -0 -r grep -l -I {pattern}")
        assert leak[1].strip() == "", f"arena files naming the referee's side: {leak[1]}"

        # the public endpoint as the referee sees it: every request fails with an empty 502
        for method, path, body in (("GET", "/health", None), ("GET", "/role", None),
                                   ("GET", "/records/customer-red-4a7", None), ("PUT", "/records/x", b"v")):
            assert http(t, method, path, body) == (502, b""), (method, path)
        # the replica is not reachable from outside (bound to 127.0.0.1), 8081 is closed
        for port in (8081, 8082):
            with pytest.raises(OSError):
                urllib.request.urlopen(f"http://{t.host}:{port}/health", timeout=3)

        # the replica's and the proxy's exact answers: HTTP/1.0, only Content-Length set
        raw = parse_raw(await sh(t, RAW_SCRIPT))
        assert [(r[0], r[2]) for r in raw] == [
            ("HTTP/1.0 200 OK", "ready"),
            ("HTTP/1.0 200 OK", "replica"),
            ("HTTP/1.0 200 OK", "red-original"),
            ("HTTP/1.0 404 Not Found", ""),
            ("HTTP/1.0 404 Not Found", ""),
            ("HTTP/1.0 503 Service Unavailable", "read-only"),
            ("HTTP/1.0 404 Not Found", ""),
            ("HTTP/1.0 501 Unsupported method ('POST')", raw[7][2]),
            ("HTTP/1.0 501 Unsupported method ('DELETE')", raw[8][2]),
        ], raw
        for status, headers, _ in raw[:7]:
            assert headers == ["content-length", "date", "server"], (status, headers)

        # per request, the proxy re-reads upstream and the replica re-reads its role
        await sh(t, f"printf '8082\\n' > {STATE}/upstream")
        assert http(t, "GET", "/role") == (200, b"replica")
        assert http(t, "GET", "/records/customer-green-f31") == (200, b"green-original")
        assert http(t, "GET", "/records/never-written") == (404, b"")
        assert http(t, "PUT", "/records/probe-2", b"two") == (503, b"read-only")
        await sh(t, f"printf 'primary\\n' > {STATE}/replica.role")
        assert http(t, "GET", "/role") == (200, b"primary")
        assert http(t, "PUT", "/records/probe-2", b"two") == (204, b"")
        assert http(t, "GET", "/records/probe-2") == (200, b"two")
        assert http(t, "PUT", "/records/probe-2", b"2") == (204, b"")
        assert http(t, "GET", "/records/probe-2") == (200, b"2")
        # an upstream that accepts but never answers: 502 after the proxy's 2 s timeout
        await sh(t, "nohup python3 -c 'import socket,time; s=socket.socket(); "
                    "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((\"127.0.0.1\", 8093)); "
                    "s.listen(8); c=[]; [c.append(s.accept()) for _ in range(8)]; time.sleep(60)' "
                    ">/dev/null 2>&1 & echo $! > /tmp/hang.pid; sleep 0.5")
        await sh(t, f"printf '8093\\n' > {STATE}/upstream")
        t0 = time.monotonic()
        assert http(t, "GET", "/health") == (502, b"")
        assert 1.7 < time.monotonic() - t0 < 4, time.monotonic() - t0
        await sh(t, f"printf 'not-a-port\\n' > {STATE}/upstream")
        assert http(t, "GET", "/health") == (502, b"")
        await sh(t, f"kill $(cat /tmp/hang.pid); printf '8081\\n' > {STATE}/upstream; "
                    f"printf 'replica\\n' > {STATE}/replica.role; "
                    f"sqlite3 {STATE}/records.sqlite3 \"delete from records where id like 'probe-%'\"")

        # reboot 1: write-if-absent; upstream, the marker and a deleted row come back; a changed
        # role, a changed record and a fence are kept; the marker is touched at every boot
        await sh(t, f"rm -f {STATE}/upstream {STATE}/primary.failed; printf 'primary\\n' > {STATE}/replica.role; "
                    f"touch {STATE}/primary.fenced; "
                    f"sqlite3 {STATE}/records.sqlite3 \"delete from records where id='customer-blue-8d2'; "
                    f"update records set value='red-changed' where id='customer-red-4a7'; "
                    f"insert into records values('kept-7','kept')\"")
        await reboot(t)
        await wait_settled(t)
        s = parse_state(await sh(t, STATE_SCRIPT))
        assert hexes(s) == {"upstream": "383038310a", "replica.role": "7072696d6172790a", "primary.failed": ""}
        assert s["fenced"] == ["present"]
        assert sorted(s["row"]) == sorted(["customer-red-4a7|red-changed", "customer-blue-8d2|blue-original",
                                           "customer-green-f31|green-original", "kept-7|kept"])
        assert dict(m.split(" ", 1) for m in s["mode"])[f"{STATE}/primary.failed"] == "644 root:root regular empty file"
        assert await unit_states(t, UNITS) == {
            "failover-seed.service": ("active", "exited"),
            "failover-replica.service": ("active", "running"),
            "failover-proxy.service": ("active", "running"),
        }
        assert http(t, "GET", "/health") == (502, b"")  # still routed to the dead 8081

        # reboot 2: an existing marker is touched again (mtime), a removed state folder is
        # rebuilt from scratch with the original bytes
        await sh(t, f"touch -d '2001-01-01 00:00:00' {STATE}/primary.failed")
        await reboot(t)
        await wait_settled(t)
        s = parse_state(await sh(t, STATE_SCRIPT))
        assert int(s["failed-mtime"][0]) > int(s["now"][0]) - 600, s["failed-mtime"]
        await sh(t, f"rm -rf {STATE}")
        await reboot(t)
        await wait_settled(t)
        s = parse_state(await sh(t, STATE_SCRIPT))
        assert hexes(s) == {"upstream": "383038310a", "replica.role": "7265706c6963610a", "primary.failed": ""}
        assert s["fenced"] == ["absent"]
        assert s["row"] == [f"{k}|{v}" for k, v in ORIGINALS.items()]
        assert dict(m.split(" ", 1) for m in s["mode"])[STATE] == "755 root:root directory"

        # the edges: the replica and the proxy need the seed (stopping it stops them)
        await sh(t, "systemctl stop failover-seed.service")
        assert (await show(t, "failover-proxy.service", "ActiveState"))["ActiveState"] == "inactive"
        assert (await show(t, "failover-replica.service", "ActiveState"))["ActiveState"] == "inactive"
        await sh(t, "systemctl start failover-proxy.service failover-replica.service")
        assert await unit_states(t, UNITS) == {
            "failover-seed.service": ("active", "exited"),
            "failover-replica.service": ("active", "running"),
            "failover-proxy.service": ("active", "running"),
        }


# ---------------------------------------------------------------------------- b. one heat

def test_heat_oracle_hasty_memory(tmp_path: Path) -> None:
    out = tmp_path / "heat"
    started = time.monotonic()
    world = run_heat(ARENA, out, ["oracle", "scripted:hasty", "scripted:memory"])
    wall = time.monotonic() - started
    assert wall < 120, f"heat took {wall:.0f} s"
    assert world.winner == "failover-one"
    one, two, three = (world.territories[t] for t in ("failover-one", "failover-two", "failover-three"))
    assert one.durable_at_ms is not None
    assert all(one.milestones[m].passed for m in MILESTONES)
    assert one.milestones["old-primary-fenced"].evidence == {"old_port": 8081, "old_primary": "fenced",
                                                             "promoted_port": 8082}
    assert one.milestones["host-reboot"].evidence["reboot"] is True
    assert (one.milestones["host-reboot"].evidence["boot_id"]
            != one.milestones["service-restart"].evidence["boot_id"])

    # hasty: reads are back through the promoted replica, but it never fenced the old primary
    for m in ("failed-primary-preserved", "reads-restored"):
        assert two.milestones[m].passed, m
    fenced = two.milestones["old-primary-fenced"]
    assert not fenced.passed
    assert fenced.failure_detail == ("/var/lib/failover/primary.fenced is missing: the old primary was never "
                                     "fenced (it must exist before writes are restored)"), fenced.failure_detail
    assert "writes-restored" not in two.milestones or not two.milestones["writes-restored"].passed

    # memory: fenced, promoted and switched, but its front proxy acknowledges writes with 202
    for m in ("failed-primary-preserved", "reads-restored", "old-primary-fenced"):
        assert three.milestones[m].passed, m
    writes = three.milestones["writes-restored"]
    assert not writes.passed
    assert writes.failure_detail and "HTTP 202 'queued', expected HTTP 204" in writes.failure_detail, \
        writes.failure_detail
    assert writes.failure_detail.startswith("PUT /records/post-failover-")
    assert "service-restart" not in three.milestones or not three.milestones["service-restart"].passed

    events = events_of(out)
    passed = {(e["territory"], e["milestone"]) for e in events if e["kind"] == "milestone_passed"}
    failed = [e for e in events if e["kind"] == "milestone_failed"]
    assert ("failover-two", "old-primary-fenced") not in passed
    assert ("failover-three", "writes-restored") not in passed
    assert not any(t != "failover-one" and m in ("service-restart", "host-reboot") for t, m in passed)
    hasty = [e for e in failed if e["territory"] == "failover-two" and e["milestone"] == "old-primary-fenced"]
    memory = [e for e in failed if e["territory"] == "failover-three" and e["milestone"] == "writes-restored"]
    assert hasty and memory
    # every attempt fails for the same reason: the flaw is deterministic
    assert all("primary.fenced is missing" in e["detail"] for e in hasty), hasty
    assert all("HTTP 202 'queued', expected HTTP 204" in e["detail"] for e in memory), memory
    # the faulty builders did finish their own deployment (the referee caught the flaw)
    for agent in ("failover-two-agent", "failover-three-agent"):
        steps = (out / "agents" / agent / "activity.log").read_text()
        assert "service restored" in steps, steps


# ---------------------------------------------------------------------------- c. untouched territory

async def test_verifiers_refuse_the_starting_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ev = tmp_path / "evidence" / "failover-one"
    try:
        async with booted_territories(ARENA, tmp_path / "territories", count=1) as (t,):
            await wait_settled(t)
            inc = await verify(ARENA, t, "failed-primary-preserved", ev)
            assert inc.passed, inc.detail
            assert inc.evidence == {"failed_primary": 8081, "listening": False, "preserved": True}

            rr = await verify(ARENA, t, "reads-restored", ev)
            assert not rr.passed
            assert rr.detail == "GET /health through the public endpoint: HTTP 502 (empty body), expected 200 'ready'"

            fe = await verify(ARENA, t, "old-primary-fenced", ev)
            assert not fe.passed
            assert fe.detail.startswith("/var/lib/failover/primary.fenced is missing"), fe.detail

            wr = await verify(ARENA, t, "writes-restored", ev)
            assert not wr.passed
            assert wr.detail.startswith("PUT /records/post-failover-") and \
                wr.detail.endswith("through the public endpoint: HTTP 502 (empty body), expected HTTP 204"), wr.detail

            prev = {"writes-restored": passed_view({"record": "post-failover-0123456789abcdef",
                                                    "value": "opaque-0123456789abcdef01234567", "writes": True})}
            monkeypatch.setenv("RESTART_DEADLINE_MS", "3000")
            sr = await verify(ARENA, t, "service-restart", ev, prev)
            assert not sr.passed
            assert sr.detail == ("after restarting failover-replica.service and failover-proxy.service, "
                                 "GET /role: HTTP 502 (empty body), expected 200 'primary'"), sr.detail
            assert await unit_states(t, UNITS) == {
                "failover-seed.service": ("active", "exited"),
                "failover-replica.service": ("active", "running"),
                "failover-proxy.service": ("active", "running"),
            }

            # host-reboot (without a reboot, shortened poll): the guest state says why
            monkeypatch.setenv("REBOOT_DEADLINE_MS", "2000")
            hr = await verify(ARENA, t, "host-reboot", ev, {**prev, "service-restart": passed_view(
                {"record": "post-failover-0123456789abcdef", "restart": True,
                 "value": "opaque-0123456789abcdef01234567"})})
            assert not hr.passed
            assert hr.detail == ("after the reboot, GET /health: HTTP 502 (empty body), expected 200 'ready' "
                                 "(territory state: upstream '8081', replica.role 'replica')"), hr.detail

            # promoted and switched: reads pass, but the fence is still missing
            await sh(t, f"printf 'primary\\n' > {STATE}/r.new && mv {STATE}/r.new {STATE}/replica.role && "
                        f"printf '8082\\n' > {STATE}/u.new && mv {STATE}/u.new {STATE}/upstream")
            rr = await verify(ARENA, t, "reads-restored", ev)
            assert rr.passed, rr.detail
            assert rr.evidence == {"reads": True, "records": list(ORIGINALS), "role": "primary"}
            fe = await verify(ARENA, t, "old-primary-fenced", ev)
            assert not fe.passed and "primary.fenced is missing" in fe.detail
            # a changed original is refused by the reads check
            await sh(t, f"sqlite3 {STATE}/records.sqlite3 \"update records set value='blue-lost' "
                        f"where id='customer-blue-8d2'\"")
            rr = await verify(ARENA, t, "reads-restored", ev)
            assert not rr.passed
            assert rr.detail == ("GET /records/customer-blue-8d2 through the public endpoint returned 'blue-lost', "
                                 "expected 'blue-original' (a record replicated before the failure)"), rr.detail

            # a revived old primary (anything on 8081) or a removed marker breaks the incident check
            await sh(t, "nohup python3 -m http.server 8081 --bind 127.0.0.1 >/dev/null 2>&1 & echo $! > /tmp/old.pid; "
                        "for i in $(seq 50); do ss -Hltn | grep -q ':8081 ' && break; sleep 0.1; done")
            inc = await verify(ARENA, t, "failed-primary-preserved", ev)
            assert not inc.passed
            assert inc.detail.startswith("something listens on port 8081 again (ss -lnt: LISTEN "), inc.detail
            assert "127.0.0.1:8081" in inc.detail and inc.detail.endswith("the failed primary's port must stay closed")
            await sh(t, f"touch {STATE}/primary.fenced")
            fe = await verify(ARENA, t, "old-primary-fenced", ev)
            assert not fe.passed and fe.detail.startswith("something listens on port 8081 again"), fe.detail
            await sh(t, "kill $(cat /tmp/old.pid); for i in $(seq 50); do ss -Hltn | grep -q ':8081 ' || break; "
                        "sleep 0.1; done")
            fe = await verify(ARENA, t, "old-primary-fenced", ev)
            assert fe.passed, fe.detail
            await sh(t, f"rm {STATE}/primary.failed")
            inc = await verify(ARENA, t, "failed-primary-preserved", ev)
            assert not inc.passed
            assert inc.detail == ("/var/lib/failover/primary.failed is missing: the failed primary's incident "
                                  "marker must be kept"), inc.detail
            # no evidence of a refused milestone is left behind
            assert not (ev / "failed-primary-preserved.json").exists()
            assert not (ev / "service-restart.json").exists() and not (ev / "host-reboot.json").exists()
    finally:
        end_leftover_verifiers(tmp_path)


# ---------------------------------------------------------------------------- volatile, step by step

async def test_volatile_fails_only_host_reboot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ev = tmp_path / "evidence" / "failover-one"
    try:
        async with booted_territories(ARENA, tmp_path / "territories", count=1) as (t,):
            await wait_settled(t)
            out = await deploy(ARENA, t, "volatile")
            assert out.count("aoe-step: ") >= 3
            previous: dict = {}
            for m in MILESTONES[:-1]:
                res = await verify(ARENA, t, m, ev, previous)
                assert res.passed, (m, res.detail)
                previous[m] = passed_view(res.evidence)
            assert "boot_id" in previous["service-restart"]["evidence"]
            await reboot(t)
            monkeypatch.setenv("REBOOT_DEADLINE_MS", "8000")  # the reads never come back: no need to wait 29 s
            res = await verify(ARENA, t, "host-reboot", ev, previous)
            assert not res.passed
            assert res.detail.startswith("after the reboot, GET /health: HTTP 502 (empty body), expected 200 'ready'")
            assert res.detail.endswith("(territory state: upstream '8081', replica.role 'replica')"), res.detail
            # the fence was on disk and survived; the promotion and the switch were not
            s = parse_state(await sh(t, STATE_SCRIPT))
            assert s["fenced"] == ["present"]
            assert hexes(s)["upstream"] == "383038310a" and hexes(s)["replica.role"] == "7265706c6963610a"
    finally:
        end_leftover_verifiers(tmp_path)
