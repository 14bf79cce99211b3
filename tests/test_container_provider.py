"""The ``container`` territory provider against real systemd-nspawn containers, real SSH.

One set of three territories is provisioned per module and shared by the tests that
only read or add state; the teardown check runs last on that set. Needs root,
systemd-nspawn and the guest image (built once per machine by the ``guest_image`` fixture).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import asyncssh
import pytest
import pytest_asyncio

from aoe_tui.fsio import mount_points
from aoe_tui.runtime import netalloc, ssh
from aoe_tui.runtime.container import (
    CONTAINER_DROPINS,
    CONTAINER_MASKED_GENERATORS,
    CONTAINER_MASKED_UNITS,
    ContainerProvider,
    cleanup_stale,
    doctor_checks,
)
from aoe_tui.runtime.provider import HarnessShare, ProvisionError, RebootError, Territory, TerritoryRefusedError, TerritorySpec

pytestmark = [pytest.mark.container]
#: every async test shares the module event loop (the shared heat's supervisor tasks live on it)
amod = pytest.mark.asyncio(loop_scope="module")

NAMES = ("builder-one", "builder-two", "builder-three")
APP = textwrap.dedent(
    """
    import http.server, socketserver
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = b"ready"
            self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
            self.wfile.write(body)
    socketserver.TCPServer.allow_reuse_address = True
    with socketserver.TCPServer(("0.0.0.0", 8080), H) as s:
        s.serve_forever()
    """
)


def _need_container_host() -> None:
    if os.geteuid() != 0:
        pytest.skip("container provider tests need root")
    from shutil import which

    if which("systemd-nspawn") is None:
        pytest.skip("systemd-nspawn not installed (apt-get install systemd-container)")


def specs(names=NAMES) -> list[TerritorySpec]:
    return [TerritorySpec(id=n, password=f"{n}-race", index=i) for i, n in enumerate(names)]


def leftovers(workdir: Path, netns: list[str], veths: list[str]) -> list[str]:
    """Everything of a territory set that still exists on the host (empty = clean)."""
    found: list[str] = []
    wd = str(workdir.resolve())
    for mp in mount_points():
        if mp.startswith(wd):
            found.append(f"mount {mp}")
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            root = os.readlink(f"/proc/{pid}/root")
        except OSError:
            continue
        if (cmd.startswith("/usr/bin/systemd-nspawn") and wd in cmd) or root.startswith(wd):
            found.append(f"process {pid} {cmd[:60]!r}")
    ns_list = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    for ns in netns:
        if ns in ns_list:
            found.append(f"netns {ns}")
    rules = subprocess.run(["ip", "rule", "list"], capture_output=True, text=True).stdout
    for v in veths:
        if f" {v}:" in links or f" {v}@" in links:
            found.append(f"link {v}")
        if f"iif {v} " in rules:
            found.append(f"ip rule iif {v}")
    for d in workdir.glob("*/*"):
        if d.name in ("upper", "work", "root", "disk", "disk.img", "state.json"):
            found.append(f"path {d}")
    return found


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def heat(guest_image, tmp_path_factory):
    """(provider, territories, workdir): three container territories shared by the module."""
    _need_container_host()
    workdir = tmp_path_factory.mktemp("heat")
    provider = ContainerProvider(workdir, image=guest_image, heat_id=f"test-heat-{os.getpid()}")
    t0 = time.monotonic()
    try:
        territories = await provider.provision(specs())
        provider.provision_seconds = time.monotonic() - t0  # type: ignore[attr-defined]
        yield provider, territories, workdir
    finally:
        await provider.teardown()


async def sh(t: Territory, command: str, timeout_s: float = 30) -> ssh.CommandResult:
    return await ssh.run(t.host, t.ssh_port, t.password, command, timeout_s=timeout_s)


# ------------------------------------------------------------------------ shared heat


@amod
async def test_three_territories_root_ssh(heat):
    provider, territories, workdir = heat
    assert [t.id for t in territories] == list(NAMES)
    assert len({t.host for t in territories}) == 3
    for t in territories:
        assert (t.ssh_port, t.service_port) == (22, 8080)
        res = await sh(t, "id -u; hostname; cat /proc/1/comm")
        assert res.exit_status == 0
        assert res.stdout.split() == ["0", t.id, "systemd"]
        cred = t.credential_file
        assert cred == workdir / t.id / "credential.env"
        assert cred.stat().st_mode & 0o777 == 0o600
        assert f"AOE_SSH_PASSWORD={t.password}" in cred.read_text().splitlines()
        state = json.loads((workdir / t.id / "state.json").read_text())
        assert state["owner_pid"] == os.getpid() and state["nspawn_pid"] and state["netns"]
        assert (workdir / t.id / "console.log").stat().st_size > 0
        assert t.password not in (workdir / t.id / "console.log").read_text()
        assert t.password not in (workdir / t.id / "state.json").read_text()
    # guest units a container has no use for are masked in its own layer, not in the image
    # (QEMU guests share the image and keep them)
    t = territories[0]
    res = await sh(t, "systemctl is-enabled console-getty.service systemd-update-utmp.service; pgrep -c agetty")
    assert res.stdout.split() == ["masked", "masked", "0"], res.stdout
    for unit in CONTAINER_MASKED_UNITS:
        assert os.readlink(workdir / t.id / "disk/upper/etc/systemd/system" / unit) == "/dev/null", unit
        assert not (provider.image.rootfs / "etc/systemd/system" / unit).is_symlink(), unit
    for gen in CONTAINER_MASKED_GENERATORS:
        assert os.readlink(workdir / t.id / "disk/upper/etc/systemd/system-generators" / gen) == "/dev/null", gen
        assert (provider.image.rootfs / "usr/lib/systemd/system-generators" / gen).is_file(), gen  # a real one
    for rel in (*CONTAINER_DROPINS, "etc/.updated"):
        assert (workdir / t.id / "disk" / "upper" / rel).is_file() and not (provider.image.rootfs / rel).exists(), rel
    # what the boot skips now: sysusers (its condition), sshd's config pre-check, and the
    # per-user manager a root login used to start; the login session itself is still logind's
    res = await sh(t, "for p in ConditionResult ActiveState; do systemctl show -p $p systemd-sysusers.service; done; "
                      "echo \"pre=[$(systemctl show -p ExecStartPre --value ssh.service)]\"; systemctl show -p ActiveState ssh.service; "
                      "systemctl is-active systemd-logind.service user-runtime-dir@0.service user@0.service; "
                      "for p in Remote Name; do loginctl show-session \"$XDG_SESSION_ID\" -p $p; done; "
                      "ps -eo args= | grep -c '^/lib/systemd/systemd --user'; test -d /run/user/0 && echo runtime-dir")
    out = res.stdout.split()
    assert out[:4] == ["ConditionResult=no", "ActiveState=inactive", "pre=[]", "ActiveState=active"], res.stdout
    assert out[4:7] == ["active", "active", "inactive"], res.stdout
    assert out[7:] == ["Remote=yes", "Name=root", "0", "runtime-dir"], res.stdout
    from aoe_tui.runtime.image import image_users

    assert {str(workdir / t.id / "root") for t in territories} <= set(image_users(provider.image))
    # the password never appears in a process's arguments
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        assert not any(t.password in cmd for t in territories), cmd


@amod
async def test_end_login_sessions_without_user_manager(heat):
    """Without the per-user manager (masked in container territories) logind still tracks
    SSH sessions, so the runner can end what an agent left running in one."""
    _, territories, _ = heat
    t = territories[0]
    conn = await ssh.connect(t.host, t.ssh_port, t.password)
    try:
        res = await conn.run("setsid sleep 600 >/dev/null 2>&1 < /dev/null & echo $XDG_SESSION_ID", check=False)
        session = str(res.stdout).strip()
        assert session, res
        assert (await sh(t, "pgrep -cx sleep")).stdout.strip() == "1"
        ended = await ssh.end_login_sessions(t.host, t.ssh_port, t.password)
        assert session in ended, ended
        for _ in range(50):
            count = (await sh(t, "pgrep -cx sleep")).stdout.strip()
            if count == "0":
                break
            await asyncio.sleep(0.1)
        assert count == "0"
    finally:
        conn.abort()


@amod
async def test_sessions_end_from_the_host_whatever_the_guest_did_to_loginctl(heat):
    """Containment does not rest on the guest: a player who replaced ``loginctl`` (a script
    that lists no session) still has what it left running from its SSH sessions (``setsid``,
    ``nohup``) killed when the referee ends the territory's sessions: the host kills the
    session scopes in the territory's own cgroups (``cgroups.end_sessions``). A service it
    deployed under systemd (``systemd-run``) keeps running."""
    from types import SimpleNamespace

    from aoe_tui.agents.base import AgentRun

    class Run(AgentRun):
        async def wait(self):  # pragma: no cover - not used
            raise NotImplementedError

        async def stop(self) -> None:  # pragma: no cover - not used
            pass

    async def sleeps(t: Territory) -> list[str]:
        """The player's ``sleep 60x`` processes running in the territory (their arguments)."""
        out = (await sh(t, "sleep 0.3; ps -eo args")).stdout.splitlines()
        return [a.removeprefix("/usr/bin/") for a in out if a.removeprefix("/usr/bin/") in
                ("sleep 601", "sleep 602", "sleep 603")]

    _, territories, _ = heat
    t = territories[2]
    assert t.extra["cgroups"]
    lc = (await sh(t, "command -v loginctl")).stdout.strip()
    assert lc, "the guest image has loginctl"
    conn = await ssh.connect(t.host, t.ssh_port, t.password)
    try:
        player = textwrap.dedent(f"""\
            cp {lc} /root/loginctl.orig; printf '#!/bin/sh\\nexit 0\\n' > {lc}
            setsid sleep 601 >/dev/null 2>&1 </dev/null &
            nohup sh -c 'sleep 602; true' >/dev/null 2>&1 </dev/null &
            systemd-run --quiet --unit=player-app sleep 603
            """)
        await asyncio.wait_for(conn.run(player, check=False), 30)
        assert sorted(await sleeps(t)) == ["sleep 601", "sleep 602", "sleep 603"]
        assert (await sh(t, "loginctl list-sessions --no-legend | wc -l")).stdout.strip() == "0"  # the lie
        run = Run(SimpleNamespace(territory=t))  # type: ignore[arg-type]
        await run.end_territory_sessions()
        assert any(line.startswith("ended ") and f"login session(s) left in {t.id}" in line
                   for line in run.activity), list(run.activity)
        assert await sleeps(t) == ["sleep 603"]
    finally:
        conn.abort()
        await sh(t, f"cp /root/loginctl.orig {lc}; systemctl stop player-app 2>/dev/null; true")


@amod
async def test_builder_app_failed_before_app_exists(heat):
    _, territories, _ = heat
    for t in territories:
        state = ""
        for _ in range(80):  # the start limit (5 starts / 10 s, RestartSec=1) takes a few seconds
            state = (await sh(t, "systemctl is-failed builder-app.service")).stdout.strip()
            if state == "failed":
                break
            await asyncio.sleep(0.25)
        assert state == "failed", f"{t.id}: builder-app.service is {state!r}"
        unit = (await sh(t, "systemctl cat builder-app.service")).stdout
        for line in ("After=network.target", "ExecStart=/usr/bin/python3 /opt/builder/app.py",
                     "Restart=always", "RestartSec=1", "WantedBy=multi-user.target"):
            assert line in unit


def _http_get(url: str, timeout: float = 2.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - test-local URL
        return resp.read().decode()


async def _wait_http(url: str, timeout_s: float = 20.0) -> str:
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            return await asyncio.to_thread(_http_get, url)
        except OSError as exc:
            last = exc
            await asyncio.sleep(0.2)
    raise AssertionError(f"{url} never answered: {last}")


@amod
async def test_app_answers_on_service_port_after_restart(heat):
    _, territories, _ = heat
    t = territories[0]
    res = await ssh.run(t.host, t.ssh_port, t.password,
                        "mkdir -p /opt/builder && cat > /opt/builder/app.py && "
                        "systemctl reset-failed builder-app.service; systemctl restart builder-app.service",
                        input=APP)
    assert res.exit_status == 0, res.stderr
    assert await _wait_http(f"http://{t.host}:{t.service_port}/health") == "ready"
    assert (await sh(t, "systemctl is-active builder-app.service")).stdout.strip() == "active"


@amod
async def test_territories_isolated_from_each_other_and_internet(heat):
    _, territories, _ = heat
    one, two, three = territories
    await _wait_http(f"http://{one.host}:8080/")  # one serves (previous test)
    probe_peer = "timeout 1 bash -c '</dev/tcp/{addr}/{port}' && echo OPEN || echo CLOSED"
    for src, dst in ((two, one), (three, one), (one, two)):
        for port in (22, 8080):
            res = await sh(src, probe_peer.format(addr=dst.host, port=port))
            assert res.stdout.strip().endswith("CLOSED"), f"{src.id} reached {dst.id}:{port}"
    for t in territories:
        routes = (await sh(t, "ip -4 route")).stdout
        assert "default" not in routes, routes
        res = await sh(t, "curl -sS -m 4 -o /dev/null http://deb.debian.org/ && echo ONLINE || echo OFFLINE; "
                          "timeout 3 bash -c '</dev/tcp/151.101.2.132/80' && echo OPEN || echo CLOSED")
        assert "ONLINE" not in res.stdout and "OPEN" not in res.stdout, res.stdout
    # even a guest that adds a default route through the runner's address gets nowhere:
    # the host does not forward packets arriving on a territory's veth
    gw = one.host.rsplit(".", 1)[0] + ".1"
    res = await sh(two, f"ip route add default via {gw} dev arena0 && "
                        f"(timeout 3 bash -c '</dev/tcp/{one.host}/8080' && echo OPEN || echo CLOSED; "
                        "timeout 3 bash -c '</dev/tcp/151.101.2.132/80' && echo OPEN || echo CLOSED); "
                        "ip route del default")
    assert "OPEN" not in res.stdout, res.stdout
    # and still nothing after someone turns on global forwarding on the host (this rewrites
    # every interface's forwarding flag; the provider's per-veth policy rule must hold)
    fwd = Path("/proc/sys/net/ipv4/ip_forward")
    before = fwd.read_text().strip()
    try:
        fwd.write_text("1")
        res = await sh(two, f"ip route add default via {gw} dev arena0 && "
                            f"(timeout 1 bash -c '</dev/tcp/{one.host}/8080' && echo OPEN || echo CLOSED); "
                            "ip route del default")
    finally:
        fwd.write_text(before)
    assert "OPEN" not in res.stdout, res.stdout


@amod
async def test_reboot_keeps_var_lib_state(heat):
    provider, territories, _ = heat
    t = territories[1]
    res = await sh(t, "mkdir -p /var/lib/persist-test && echo token-42 > /var/lib/persist-test/token && sync; "
                      "cat /proc/sys/kernel/random/boot_id")
    boot_before = res.stdout.strip()
    pid_before = t.extra["nspawn_pid"]
    t0 = time.monotonic()
    await provider.reboot(t)
    assert time.monotonic() - t0 < 60
    res = await sh(t, "cat /var/lib/persist-test/token; cat /proc/sys/kernel/random/boot_id; hostname")
    token, boot_after, host = res.stdout.split()
    assert token == "token-42"
    assert boot_after != boot_before
    assert host == t.id
    assert t.extra["nspawn_pid"] != pid_before


@amod
async def test_reboot_is_orderly_and_restarts_units(heat):
    """provider.reboot is a real reboot: units are stopped (their ExecStop runs), the boot
    is new, and systemd starts the enabled units again (the masks and skipped steps of a
    container territory's layer change none of that)."""
    provider, territories, _ = heat
    t = territories[2]
    unit = textwrap.dedent(
        """
        [Unit]
        Description=aoe test: a service with a stop step
        [Service]
        Type=oneshot
        RemainAfterExit=yes
        ExecStart=/bin/sh -c 'echo started >> /var/lib/stop-test/log'
        ExecStop=/bin/sh -c 'echo stopped >> /var/lib/stop-test/log'
        [Install]
        WantedBy=multi-user.target
        """
    )
    res = await sh(t, "mkdir -p /var/lib/stop-test && cat > /etc/systemd/system/stop-test.service <<'EOF'\n"
                      f"{unit}EOF\n"
                      "systemctl daemon-reload && systemctl enable --now stop-test.service 2>&1 && "
                      "cat /proc/sys/kernel/random/boot_id", timeout_s=30)
    assert res.exit_status == 0, res.stdout + res.stderr
    boot_before = res.stdout.split()[-1]
    await provider.reboot(t)
    res = await sh(t, "cat /var/lib/stop-test/log; systemctl is-active stop-test.service; "
                      "cat /proc/sys/kernel/random/boot_id")
    *log_lines, active, boot_after = res.stdout.split()
    assert log_lines == ["started", "stopped", "started"], res.stdout
    assert active == "active" and boot_after != boot_before
    # the journal is persistent: the previous boot's shutdown is still there to read
    res = await sh(t, "journalctl -b -1 --no-pager -o cat -u stop-test.service")
    assert res.exit_status == 0 and "Stopped stop-test.service" in res.stdout, res.stdout + res.stderr


@amod
async def test_guest_initiated_reboot_comes_back(heat):
    provider, territories, _ = heat
    t = territories[2]
    boot_before = (await sh(t, "cat /proc/sys/kernel/random/boot_id")).stdout.strip()
    try:
        await sh(t, "systemd-run --on-active=0.5 /bin/systemctl reboot", timeout_s=10)
    except (asyncssh.Error, OSError, asyncio.TimeoutError):
        pass
    # back with a new boot id (asked until then: a login in the old boot's last moments, or
    # one refused while the new boot's sshd starts, is not the answer)
    deadline = time.monotonic() + 90
    while True:
        try:
            now = (await sh(t, "cat /proc/sys/kernel/random/boot_id", timeout_s=10)).stdout.strip()
        except (asyncssh.Error, OSError, asyncio.TimeoutError):
            now = ""
        if now and now != boot_before:
            break
        assert time.monotonic() < deadline, "the territory did not come back with a new boot id within 90 s"
        await asyncio.sleep(0.5)


STUBBORN = "bash -c \"trap '' TERM HUP INT; while :; do sleep 1; done\""


@amod
async def test_reboot_bounded_with_stuck_ssh_session(heat, guest_image):
    """An open SSH session holding a SIGTERM-ignoring process must not hold the reboot 90 s."""
    provider, territories, workdir = heat
    t = territories[1]
    # the territory's own layer caps the guest's stop timeouts; the shared image is untouched
    for rel in ("etc/systemd/system/user@.service.d/aoe-fast-stop.conf", "etc/systemd/system/session-.scope.d/aoe-fast-stop.conf"):
        assert (workdir / t.id / "disk" / "upper" / rel).is_file(), rel
        assert not (guest_image.rootfs / rel).exists(), rel
    await sh(t, "echo bounded-1 > /var/lib/persist-test/bounded && sync")
    conn = await ssh.connect(t.host, t.ssh_port, t.password)
    try:
        await conn.create_process(STUBBORN)
        res = await sh(t, "systemctl show -p DefaultTimeoutStopUSec; "
                          "for u in $(systemctl list-units --no-legend --plain 'session-*.scope' | awk '{print $1}'); "
                          "do systemctl show -p TimeoutStopUSec $u; done; pgrep -c -f 'while :; do sleep 1'")
        lines = res.stdout.splitlines()
        assert lines[0] == "DefaultTimeoutStopUSec=1min 30s", res.stdout  # agents' own units: Debian's default
        assert "TimeoutStopUSec=5s" in lines[1:-1] and not [x for x in lines[1:-1] if x != "TimeoutStopUSec=5s"], res.stdout
        assert int(lines[-1]) >= 1  # the stubborn process is running in a session scope
        boot_before = (await sh(t, "cat /proc/sys/kernel/random/boot_id")).stdout.strip()
        t0 = time.monotonic()
        await provider.reboot(t)
        elapsed = time.monotonic() - t0
    finally:
        conn.abort()
    assert elapsed < 30, f"reboot took {elapsed:.1f} s"
    res = await sh(t, "cat /var/lib/persist-test/bounded /var/lib/persist-test/token /proc/sys/kernel/random/boot_id")
    bounded, token, boot_after = res.stdout.split()
    assert (bounded, token) == ("bounded-1", "token-42")
    assert boot_after != boot_before


@amod
async def test_reboot_forces_a_guest_that_will_not_stop(heat, monkeypatch):
    """A unit that never stops (no stop timeout, ignores SIGTERM): the reboot is forced."""
    provider, territories, workdir = heat
    t = territories[1]
    monkeypatch.setattr(provider, "reboot_grace_s", 4)
    res = await sh(t, "echo forced-1 > /var/lib/persist-test/forced && sync; "
                      f"systemd-run --unit=stubborn -p TimeoutStopSec=infinity {STUBBORN} && "
                      "systemctl is-active stubborn.service")
    assert res.stdout.split()[-1] == "active", res.stdout + res.stderr
    boot_before = (await sh(t, "cat /proc/sys/kernel/random/boot_id")).stdout.strip()
    console = workdir / t.id / "console.log"
    console_before = console.stat().st_size
    pid_before = t.extra["nspawn_pid"]
    t0 = time.monotonic()
    await provider.reboot(t)
    elapsed = time.monotonic() - t0
    assert elapsed < 30, f"reboot took {elapsed:.1f} s"
    with console.open("rb") as fh:
        fh.seek(console_before)
        tail = fh.read().decode(errors="replace")
    assert "did not finish rebooting; forced reboot (SIGRTMIN+15) sent" in tail
    assert "hard reset (SIGKILL) sent" in tail  # systemd-shutdown waits 90 s for SIGTERM-ignorers
    res = await sh(t, "cat /var/lib/persist-test/forced /proc/sys/kernel/random/boot_id; "
                      "systemctl is-active stubborn.service || true")
    forced, boot_after, unit_state = res.stdout.split()
    assert forced == "forced-1" and boot_after != boot_before and unit_state == "inactive"
    assert t.extra["nspawn_pid"] != pid_before
    state = json.loads((workdir / t.id / "state.json").read_text())
    assert state["nspawn_pid"] == t.extra["nspawn_pid"] and state["leader_pid"] == t.extra["leader_pid"]
    # the supervisor keeps working after a hard reset: an orderly reboot relaunches again
    launches = state["launches"]
    await provider.reboot(t)
    assert json.loads((workdir / t.id / "state.json").read_text())["launches"] == launches + 1
    assert (await sh(t, "cat /var/lib/persist-test/forced")).stdout.strip() == "forced-1"


@amod
async def test_wrong_password_is_refused(heat):
    provider, territories, _ = heat
    t = territories[0]
    bad = Territory(id=t.id, host=t.host, ssh_port=t.ssh_port, service_port=t.service_port,
                    password="not-the-password", credential_file=t.credential_file)
    with pytest.raises(asyncssh.PermissionDenied):
        async with provider.ssh(bad):
            pass
    assert await ssh.probe(t.host, t.ssh_port, "not-the-password") is False


@amod
async def test_second_heat_gets_another_subnet(heat, guest_image, tmp_path):
    provider, territories, _ = heat
    other = ContainerProvider(tmp_path, image=guest_image, heat_id=f"test-heat-b-{os.getpid()}")
    try:
        (t,) = await other.provision(specs(["builder-one"]))
        assert other.subnet != provider.subnet
        assert t.host != territories[0].host
        assert (await sh(t, "hostname")).stdout.strip() == "builder-one"
        # and the first heat's territory with the same id is untouched
        assert (await sh(territories[0], "hostname")).stdout.strip() == "builder-one"
    finally:
        await other.teardown()
    assert leftovers(tmp_path, [b.netns for b in other._boxes.values()],
                     [b.host_veth for b in other._boxes.values()]) == []


@amod
async def test_teardown_leaves_nothing(heat):
    """Runs last in the module: tears the shared heat down and looks for any leftover."""
    provider, territories, workdir = heat
    netns = [str(t.extra["netns"]) for t in territories]
    veths = [str(t.extra["host_veth"]) for t in territories]
    assert leftovers(workdir, netns, veths) != []  # sanity: the check sees a live heat
    t0 = time.monotonic()
    await provider.teardown()
    took = time.monotonic() - t0
    await provider.teardown()  # idempotent
    assert leftovers(workdir, netns, veths) == []
    # no orderly guest shutdown to wait for (the territory is thrown away): its init is
    # SIGKILLed; nspawn's propagation folder (which nspawn itself fails to remove) is gone
    from aoe_tui.runtime.container import NSPAWN_PROPAGATE

    for t in territories:
        console = Path(str(t.extra["console_log"])).read_text(errors="replace").rsplit("=== aoe: launch", 1)[-1]
        assert "terminated by signal KILL" in console and "Halting system" not in console, console[-300:]
        assert not (NSPAWN_PROPAGATE / f"aoe-{str(t.extra['host_veth'])[3:]}").exists()
    assert took < 2.0, f"teardown of {len(territories)} territories took {took:.2f} s"  # ~0.2 s; was 0.5-2.2 s
    assert all(le.owner != provider.heat_id for le in netalloc.NetAllocator().leases())
    for t in territories:  # no relaunch after teardown
        assert await ssh.probe(t.host, t.ssh_port, t.password, connect_timeout_s=1) is False
    await asyncio.sleep(1.5)
    assert leftovers(workdir, netns, veths) == []


# ------------------------------------------------------------------ failures and cleanup


@amod
async def test_missing_image_names_build_command(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "empty-cache"))
    if os.geteuid() != 0:
        pytest.skip("needs root to reach the image check")
    with pytest.raises(ProvisionError, match="aoe image build"):
        await ContainerProvider(tmp_path / "w").provision(specs(["a"]))


@amod
async def test_missing_nspawn_is_a_clear_error(tmp_path, monkeypatch, guest_image):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ProvisionError, match="systemd-nspawn not found.*apt-get install -y systemd-container"):
        await ContainerProvider(tmp_path / "w", image=guest_image).provision(specs(["a"]))
    checks = {c.name: c for c in doctor_checks()}
    assert checks["systemd-nspawn"].ok is False and "systemd-container" in checks["systemd-nspawn"].fix


@amod
async def test_bad_territory_id(tmp_path, guest_image):
    _need_container_host()
    with pytest.raises(ProvisionError, match="not a valid hostname"):
        await ContainerProvider(tmp_path, image=guest_image).provision(specs(["Bad_Name"]))


@amod
async def test_existing_territory_folder_is_left_alone(tmp_path, guest_image):
    _need_container_host()
    (tmp_path / "builder-one" / "upper").mkdir(parents=True)
    (tmp_path / "builder-one" / "upper" / "theirs").write_text("x")
    with pytest.raises(ProvisionError, match="builder-one: .*upper already exists.*cleanup_stale"):
        await ContainerProvider(tmp_path, image=guest_image).provision(specs(["builder-one"]))
    assert (tmp_path / "builder-one" / "upper" / "theirs").read_text() == "x"


@amod
async def test_boot_timeout_tears_down_and_names_territory(tmp_path, guest_image):
    _need_container_host()
    provider = ContainerProvider(tmp_path, image=guest_image, ready_timeout_s=0.01)
    with pytest.raises(ProvisionError, match=r"territory builder-one: no root SSH login .*console:"):
        await provider.provision(specs(["builder-one"]))
    boxes = list(provider._boxes.values())
    assert leftovers(tmp_path, [b.netns for b in boxes], [b.host_veth for b in boxes]) == []


@amod
async def test_cancel_during_provision_tears_down(tmp_path, guest_image):
    _need_container_host()
    provider = ContainerProvider(tmp_path, image=guest_image)
    task = asyncio.create_task(provider.provision(specs(["builder-one", "builder-two"])))
    await asyncio.sleep(0.4)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    boxes = list(provider._boxes.values())
    assert boxes, "cancelled too early to prove anything"
    assert leftovers(tmp_path, [b.netns for b in boxes], [b.host_veth for b in boxes]) == []


@amod
async def test_reboot_with_sshd_disabled_is_the_players_lockout(tmp_path, guest_image, monkeypatch):
    """Issue #17: the player masks sshd before the referee's reboot. The container boots (its
    systemd, asked from the host, finished the boot) but nothing answers on port 22: the
    provider says TerritoryRefusedError (the player's failure), not an infrastructure
    RebootError, REFUSED_AFTER_S after the boot rather than at ``reboot_timeout_s``."""
    from aoe_tui.runtime import container

    _need_container_host()
    monkeypatch.setattr(container, "REFUSED_AFTER_S", 2.0)
    provider = ContainerProvider(tmp_path, image=guest_image, reboot_timeout_s=40)
    try:
        (t,) = await provider.provision(specs(["builder-one"]))
        await sh(t, "systemctl mask ssh.service ssh.socket >/dev/null 2>&1")
        t0 = time.monotonic()
        with pytest.raises(TerritoryRefusedError, match=r"^territory builder-one refused the referee after the "
                                                          r"reboot: no root SSH login on port 22 2 s after its boot finished"):
            await provider.reboot(t)
        assert time.monotonic() - t0 < 30
        stranger = Territory(id="nope", host=t.host, ssh_port=22, service_port=8080, password="x",
                             credential_file=t.credential_file)
        with pytest.raises(RebootError, match="nope: not provisioned"):
            await provider.reboot(stranger)
    finally:
        await provider.teardown()
    boxes = list(provider._boxes.values())
    assert leftovers(tmp_path, [b.netns for b in boxes], [b.host_veth for b in boxes]) == []


@amod
async def test_lockout_record_names_what_the_player_changed(tmp_path, guest_image, monkeypatch):
    """Issue #30 item 10: the player turns root's SSH login off in the image's sshd drop-in
    and adds a login hook before the referee's reboot. The refusal (the seat's record) names
    each file and how it differs from the image: the changed lines, the added hook."""
    from aoe_tui.runtime import container

    _need_container_host()
    monkeypatch.setattr(container, "REFUSED_AFTER_S", 2.0)
    provider = ContainerProvider(tmp_path, image=guest_image, reboot_timeout_s=40)
    try:
        (t,) = await provider.provision(specs(["builder-one"]))
        await sh(t, "sed -i 's/^PermitRootLogin yes$/PermitRootLogin no/' /etc/ssh/sshd_config.d/aoe.conf && "
                    "echo 'alias systemctl=true' > /etc/profile.d/zz-player.sh")
        with pytest.raises(TerritoryRefusedError) as info:
            await provider.reboot(t)
        msg = str(info.value)
        assert msg.startswith("territory builder-one refused the referee after the reboot: "), msg
        assert msg.endswith("; changed from the image: "
                            "/etc/profile.d/zz-player.sh: added (not in the image): 'alias systemctl=true'; "
                            "/etc/ssh/sshd_config.d/aoe.conf: line 'PermitRootLogin no' added, "
                            "line 'PermitRootLogin yes' removed"), msg
    finally:
        await provider.teardown()
    boxes = list(provider._boxes.values())
    assert leftovers(tmp_path, [b.netns for b in boxes], [b.host_veth for b in boxes]) == []


@amod
async def test_relaunch_that_exits_at_once_fails_the_reboot_fast(tmp_path, guest_image):
    """Issue #18 item 8: the relaunch after a reboot exits at once (its network namespace is
    gone, so nspawn cannot start); the reboot fails as soon as that happens — not at the
    SSH timeout — with the exit status and the console's last lines."""
    _need_container_host()
    provider = ContainerProvider(tmp_path, image=guest_image, reboot_timeout_s=20)
    try:
        (t,) = await provider.provision(specs(["builder-one"]))
        netns = t.extra["netns"]
        # the running guest keeps its namespace alive; only the relaunch needs /run/netns/<ns>
        subprocess.run(["ip", "netns", "delete", netns], check=True)
        t0 = time.monotonic()
        with pytest.raises(RebootError) as info:
            await provider.reboot(t)
        took = time.monotonic() - t0
        msg = str(info.value)
        assert not isinstance(info.value, TerritoryRefusedError)  # never came up: the infrastructure's
        assert took < 8, f"noticed after {took:.1f} s: {msg}"
        assert msg.startswith("territory builder-one: container exited with status 1 right after its relaunch"), msg
        assert "console:" in msg and netns in msg  # nspawn's own error names the namespace
    finally:
        await provider.teardown()
    boxes = list(provider._boxes.values())
    assert leftovers(tmp_path, [b.netns for b in boxes], [b.host_veth for b in boxes]) == []


@amod
async def test_teardown_during_stuck_reboot_is_not_raced(tmp_path, guest_image):
    """Teardown begun while a reboot waits out its grace: the reboot never signals the guest."""
    _need_container_host()
    provider = ContainerProvider(tmp_path, image=guest_image, reboot_timeout_s=2, reboot_grace_s=3)
    try:
        (t,) = await provider.provision(specs(["builder-one"]))
        await sh(t, f"systemd-run --unit=stubborn -p TimeoutStopSec=infinity {STUBBORN}")
        reboot = asyncio.create_task(provider.reboot(t))
        await asyncio.sleep(1.5)  # systemctl reboot issued; the guest is stuck stopping the unit
        await provider.teardown()
        with pytest.raises(RebootError, match="builder-one: SSH unavailable after reboot"):
            await reboot
    finally:
        await provider.teardown()
    console = (tmp_path / "builder-one" / "console.log").read_text(errors="replace")
    assert "did not finish rebooting" not in console
    assert "launch 2 of builder-one" not in console
    boxes = list(provider._boxes.values())
    assert leftovers(tmp_path, [b.netns for b in boxes], [b.host_veth for b in boxes]) == []


KILLED_RUNNER = """
import asyncio, os, sys
from pathlib import Path
from aoe_tui.runtime.container import ContainerProvider
from aoe_tui.runtime.provider import TerritorySpec
async def main():
    p = ContainerProvider(Path(sys.argv[1]), heat_id="killed-runner-%d" % os.getpid())
    (t,) = await p.provision([TerritorySpec(id="builder-one", password="builder-one-race")])
    print(t.host, t.extra["netns"], t.extra["host_veth"], flush=True)
    os.kill(os.getpid(), 9)
asyncio.run(main())
"""


#: a folder name with every character that has broken a provider's command line (issue #30)
ODD_NAME = "a b,c:d'\"\u00e9"


@amod
async def test_odd_output_path_gets_an_overlay_and_its_shares(tmp_path, guest_image, caplog):
    """Issue #30 item 3: an output folder with ',' and ':' (overlayfs's and nspawn --bind's
    separators), quotes, a space and non-ASCII. The territory's root is still an overlay (no
    copy fallback), a harness share from such a folder is bound, and teardown leaves nothing
    (the mount table's escaped, non-ASCII mount points are recognised)."""
    _need_container_host()
    workdir = tmp_path / ODD_NAME / "territories"
    share = tmp_path / ODD_NAME / "share"
    share.mkdir(parents=True)
    (share / "tool").write_text("shared-tool\n")
    provider = ContainerProvider(workdir, image=guest_image)
    spec = TerritorySpec(id="builder-one", password="builder-one-race", index=0,
                         shares=(HarnessShare(str(share), "/opt/aoe-harness/odd"),))
    try:
        (t,) = await provider.provision([spec])
        r = await sh(t, "findmnt -n -o FSTYPE /; cat /opt/aoe-harness/odd/tool")
        assert r.stdout.split() == ["overlay", "shared-tool"], r.stdout
        assert provider.notes == []
        assert "overlayfs unusable" not in caplog.text
    finally:
        await provider.teardown()
    boxes = list(provider._boxes.values())
    assert leftovers(workdir, [b.netns for b in boxes], [b.host_veth for b in boxes]) == []


@amod
async def test_copy_fallback_is_said_once(tmp_path, guest_image, caplog):
    """Where overlayfs cannot take the image's own path (a ',' in it), every territory's root
    is a full copy, and that is said once for the heat, not once per territory."""
    import dataclasses
    import logging

    _need_container_host()
    link = tmp_path / "image,1"
    link.symlink_to(guest_image.rootfs)
    image = dataclasses.replace(guest_image, rootfs=link)
    provider = ContainerProvider(tmp_path / "territories", image=image)
    caplog.set_level(logging.INFO, logger="aoe_tui.runtime.container")
    try:
        territories = await provider.provision(specs(["builder-one", "builder-two"]))
        for t in territories:
            r = await sh(t, "findmnt -n -o FSTYPE /")
            assert r.stdout.strip() != "overlay"
        said = [rec.getMessage() for rec in caplog.records if "overlayfs unusable" in rec.getMessage()]
        assert len(said) == 1, said
        # the operator reads the heat's note; nothing of it reaches stderr as a warning
        assert not [rec for rec in caplog.records if rec.levelno >= logging.WARNING and "overlayfs" in rec.getMessage()]
        assert [n for n in provider.notes if "overlayfs unusable" in n] == [
            f"overlayfs unusable (the image's path {link} has ','): each territory's root is a full copy of the image"]
    finally:
        await provider.teardown()
    boxes = list(provider._boxes.values())
    assert leftovers(tmp_path / "territories", [b.netns for b in boxes], [b.host_veth for b in boxes]) == []


@amod
async def test_cleanup_stale_after_killed_runner(tmp_path, guest_image):
    _need_container_host()
    proc = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-c", KILLED_RUNNER, str(tmp_path)], capture_output=True, text=True, timeout=90
    )
    assert proc.returncode == -9, proc.stderr
    host, ns, veth = proc.stdout.split()
    assert leftovers(tmp_path, [ns], [veth]) != []  # the killed runner left a live territory
    assert await ssh.probe(host, 22, "builder-one-race")
    # its own disk (loop-mounted disk.img) and its limit groups are left behind too
    state = json.loads((tmp_path / "builder-one" / "state.json").read_text())
    image = Path(state["disk"]["image"])
    assert image == tmp_path / "builder-one" / "disk.img" and image.exists()
    assert subprocess.run(["losetup", "-j", str(image)], capture_output=True, text=True).stdout.strip()
    groups = list(state["limit_groups"]["groups"].values())
    assert groups and all(Path(g).is_dir() for g in groups)
    foreign = tmp_path / "vm-one"
    (foreign / "disk").mkdir(parents=True)
    (foreign / "state.json").write_text(json.dumps({"provider": "qemu", "owner_pid": 1, "dirs": [str(foreign / "disk")]}))
    assert cleanup_stale(tmp_path) == ["builder-one"]
    assert (foreign / "disk").is_dir() and (foreign / "state.json").exists()  # not ours: untouched
    (foreign / "state.json").unlink()
    (foreign / "disk").rmdir()  # (not a territory's own disk: the other provider's folder)
    assert leftovers(tmp_path, [ns], [veth]) == []
    assert not image.exists() and not (tmp_path / "builder-one" / "disk").exists()
    assert subprocess.run(["losetup", "-j", str(image)], capture_output=True, text=True).stdout.strip() == ""
    assert [g for g in groups if Path(g).exists()] == []
    assert cleanup_stale(tmp_path) == []


# ------------------------------------------------------------------------ netalloc units


def test_netalloc_blocks_and_stale_entries(tmp_path):
    # 10.97.x: no arena uses it, so live heats of other tests or runs leave it free
    alloc = netalloc.NetAllocator(tmp_path)
    a = alloc.allocate_subnet("heat-a", "10.97.0.0/24")
    b = alloc.allocate_subnet("heat-b", "10.97.0.0/24")
    assert str(a) == "10.97.0.0/24" and str(b) == "10.97.1.0/24"
    assert alloc.allocate_subnet("heat-a", "10.97.0.0/24") == a  # idempotent per owner
    # a lease held by a dead process is dropped
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    alloc.allocate_subnet("heat-dead", "10.97.5.0/24", pid=int(dead.stdout))
    assert {le.owner for le in alloc.leases()} == {"heat-a", "heat-b"}
    alloc.release("heat-a")
    assert str(alloc.allocate_subnet("heat-c", "10.97.0.0/24")) == "10.97.0.0/24"
    # a subnet that overlaps a host route is skipped
    busy = netalloc.host_routes()
    if busy:
        net = next(n for n in busy if n.prefixlen <= 24 or True)
        pref = f"{net.network_address}/24".rsplit(".", 1)[0] + ".0/24"
        got = alloc.allocate_subnet("heat-d", pref)
        assert not any(got.overlaps(r) for r in busy)
    with pytest.raises(netalloc.AllocationError, match="must be a /24"):
        alloc.allocate_subnet("heat-e", "10.97.0.0/16")


def test_netalloc_ports_skip_taken(tmp_path):
    import socket

    alloc = netalloc.NetAllocator(tmp_path)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        block = alloc.allocate_ports("heat-a", 2, base=port)
        assert port not in block and len(block) == 2
    other = alloc.allocate_ports("heat-b", 2, base=block.start)
    assert not set(other) & set(block)
    assert "heat-a" in (tmp_path / "netalloc.json").read_text()
