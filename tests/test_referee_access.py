"""Issue #17, "a referee the player cannot fool or lock out", against one real container.

The player is root in its territory. One module-scoped ``container`` territory plays the
player's moves in turn (each test undoes what it changed, the lockout comes last) and the
real first-build verifiers referee it with exactly the §4 environment:

* the player's PATH, rc files, shell functions and environment files do not redirect the
  referee's ``systemctl restart`` (the verifier toolkit's ``guest`` enters the container from the host
  with a fixed environment): an in-memory service fails service-restart — while the same
  moves do fool a plain SSH command;
* a restart that restarts nothing, and a replaced ``/usr/bin/systemctl``, are reported as
  tampering; an honest restart records the main process before and after in the evidence;
* HTTP probes come from outside the guest: a service listening on the guest's loopback only
  does not pass service-up;
* a territory that booted but locks the referee out across the referee's reboot is the
  player's failure (:class:`TerritoryRefusedError`), not an infrastructure failure.

The same rules for every arena's verifiers (the one access block of the runner's verifier
toolkit, ``aoe_tui/referee/kit/verify.sh``, which each ``lib.sh`` sources) are checked without a
territory.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import pytest_asyncio

from aoe_tui.agents.oracle import DURABLE_STORAGE, render_app
from aoe_tui.runtime import ssh
from aoe_tui.runtime.provider import RebootError, Territory, TerritoryRefusedError, TerritorySpec

REPO = Path(__file__).resolve().parent.parent
ARENA = REPO / "arenas" / "first-build"
BLOCK_START = "# --- the referee's access to the territory"
BLOCK_END = "# --- end of the referee's access block"
amod = pytest.mark.asyncio(loop_scope="module")


# ------------------------------------------------------------------ every arena (no territory)


KIT = REPO / "aoe_tui" / "referee" / "kit" / "verify.sh"


def _access_block(lib: Path) -> str:
    text = lib.read_text()
    assert BLOCK_START in text and BLOCK_END in text, f"{lib}: no referee access block"
    return text[text.index(BLOCK_START):text.index(BLOCK_END)]


def test_every_arena_uses_the_same_referee_access():
    """Our verifiers follow the same rules: the runner's verifier toolkit carries the one access
    block, each arena's lib.sh sources it and redefines none of it, no verifier opens its own
    SSH or nsenter session, and no HTTP probe runs in the guest."""
    block = _access_block(KIT)
    libs = sorted(REPO.glob("arenas/*/verify/lib.sh"))
    assert len(libs) >= 5
    from aoe_tui.referee.verifier import SHELL_DEFINITION_RE, kit_names

    kit_names = kit_names()
    assert {"guest", "territory_state", "referee_check", "REFEREE_ENTER", "write_evidence"} <= kit_names
    for lib in libs:
        text = lib.read_text()
        assert BLOCK_START not in text, f"{lib}: carries its own copy of the referee access block"
        assert '. "${AOE_TUI_VERIFY_KIT:?' in text, f"{lib}: does not source the verifier toolkit"
        own = set(SHELL_DEFINITION_RE.findall(text))
        assert not own & kit_names, f"{lib}: redefines the toolkit's {sorted(own & kit_names)}"
    # the host-side entry the verifiers use is the provider's own (no capabilities kept)
    from aoe_tui.runtime.container import ENTER_GUEST

    enter = re.search(r"^REFEREE_ENTER='(.*?)'$", block, re.S | re.M)
    assert enter and enter.group(1) == ENTER_GUEST
    from aoe_tui.runtime.container import ENTER_FLAGS

    assert f'"$REFEREE_PYTHON" {" ".join(ENTER_FLAGS)} -c "$REFEREE_ENTER"' in block
    for script in sorted(REPO.glob("arenas/*/verify/*.sh")):
        text = "\n".join(ln for ln in script.read_text().splitlines() if not ln.lstrip().startswith("#"))
        if script.name != "lib.sh":
            assert not re.search(r"\b(sshpass|ssh|nsenter)\s+-", text), f"{script}: talks to the guest itself"
            # guest in a new shell takes the whole access block along (a missing helper would
            # quietly leave only the SSH path)
            assert not re.search(r"declare -[pf] +(guest|REFEREE_)", text), f"{script}: copies guest's helpers by hand"
        for call in re.findall(r"\bguest\s+(['\"].*)", text):
            assert not re.search(r"\b(curl|wget)\b", call), f"{script}: HTTP probe from inside the guest: {call[:80]}"


@pytest.mark.asyncio
async def test_ssh_login_refusal_tells_a_refusing_guest_from_an_absent_one(tmp_path):
    """What SSH providers (qemu, ssh hosts) see after the reboot: an SSH server rejecting the
    root password, or something that is not an SSH server, on the port = the guest is up
    and refuses the referee; nothing listening = it may not be up (None)."""
    import asyncio
    import socket

    from tests.ssh_support import password_server

    server, port = await password_server(lambda username, password: False)

    async def http_like(reader, writer):
        writer.write(b"HTTP/1.0 400 Bad Request\r\n\r\n")
        await writer.drain()
        writer.close()

    other = await asyncio.start_server(http_like, "127.0.0.1", 0)
    other_port = other.sockets[0].getsockname()[1]
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    try:
        t0 = time.monotonic()
        assert await ssh.login_refusal("127.0.0.1", port, "pw") == f"the SSH server on port {port} refused the root password login"
        assert await ssh.login_refusal("127.0.0.1", other_port, "pw") == f"port {other_port} answered but is not an SSH server"
        assert await ssh.login_refusal("127.0.0.1", closed, "pw") is None
        assert time.monotonic() - t0 < 5
    finally:
        server.close()
        other.close()


# ------------------------------------------------------------------ one container territory


def _need_container_host() -> None:
    from shutil import which

    if os.geteuid() != 0:
        pytest.skip("container tests need root")
    for tool in ("systemd-nspawn", "nsenter", "curl", "jq", "sshpass"):
        if which(tool) is None:
            pytest.skip(f"{tool} not installed (run ./setup.sh)")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def seat(guest_image, tmp_path_factory):
    """(provider, territory, workdir): one container territory for the whole module."""
    _need_container_host()
    from aoe_tui.runtime.container import ContainerProvider

    work = tmp_path_factory.mktemp("referee-access")
    provider = ContainerProvider(work / "territories", image=guest_image, heat_id=f"test-referee-access-{os.getpid()}",
                                 reboot_timeout_s=40)
    try:
        (t,) = await provider.provision([TerritorySpec(id="builder-one", password="builder-one-race")])
        yield provider, t, work
    finally:
        await provider.teardown()


async def sh(t: Territory, command: str, timeout_s: float = 30) -> ssh.CommandResult:
    return await ssh.run(t.host, t.ssh_port, t.password, command, timeout_s=timeout_s)


def _children_cpu_s() -> float:
    """User + system CPU-seconds of this process's reaped descendants (a verifier, and what
    it ran and waited for: bash, curl, the host-side entry and its guest command)."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def chain(t: Territory, evidence_dir: Path, milestones=("service-up", "write-read", "service-restart"),
          took: dict[str, tuple[float, float]] | None = None) -> dict:
    """Run first-build verifiers in order with the §4 environment; {milestone: (rc, stderr,
    evidence or None)}, stopping at the first failure. ``took`` (when given) gets each
    verifier's (wall seconds, CPU-seconds of it and every process it waited for)."""
    evidence_dir.mkdir(parents=True, exist_ok=True)
    previous: dict = {}
    out = {}
    for m in milestones:
        (evidence_dir / "previous.json").write_text(json.dumps({**previous, m: {"evaluating": True}}))
        ev = evidence_dir / f"{m}.json"
        env = dict(os.environ, AOE_TERRITORY_ID=t.id, AOE_HOST=t.host, AOE_SSH_PORT=str(t.ssh_port),
                   AOE_SERVICE_PORT=str(t.service_port), AOE_CREDENTIAL_FILE=str(t.credential_file),
                   AOE_PREVIOUS_EVIDENCE=str(evidence_dir / "previous.json"), AOE_EVIDENCE_FILE=str(ev))
        t0, c0 = time.monotonic(), _children_cpu_s()
        p = subprocess.run([str(ARENA / "verify" / f"{m}.sh")], env=env, capture_output=True, text=True,
                           timeout=60, stdin=subprocess.DEVNULL)
        if took is not None:
            took[m] = (time.monotonic() - t0, _children_cpu_s() - c0)
        data = json.loads(ev.read_text()) if p.returncode == 0 else None
        out[m] = (p.returncode, p.stderr.strip(), data)
        if p.returncode != 0:
            break
        previous[m] = {"passed": True, "evidence": data}
    return out


async def deploy(t: Territory, storage: str) -> None:
    """The player's builder-app.service: the built-in app with ``storage`` (memory or durable)."""
    res = await ssh.run(t.host, t.ssh_port, t.password,
                        "mkdir -p /opt/builder && cat > /opt/builder/app.py && systemctl daemon-reload && "
                        "systemctl enable builder-app.service -q && systemctl restart builder-app.service",
                        input=render_app(storage), timeout_s=30)
    assert res.exit_status == 0, res.stderr
    deadline = time.monotonic() + 60  # a state to wait for, not a speed: seconds on a loaded host
    while time.monotonic() < deadline:
        if (await sh(t, "curl -sf http://127.0.0.1:8080/health || true")).stdout.strip() == "ready":
            return
        await asyncio.sleep(0.1)
    raise AssertionError("builder-app.service did not come up in 60 s")


#: the player's moves that would redirect a `systemctl` run through root's login shell:
#: a fake earlier on PATH (rc files, profile.d, /etc/environment) and a shell function
FAKE_SYSTEMCTL = r"""
mkdir -p /root/bin
printf '#!/bin/sh\ncase "$*" in *restart*) exit 0;; esac\nexec /usr/bin/systemctl "$@"\n' > /root/bin/systemctl
chmod +x /root/bin/systemctl
sed -i '1i export PATH=/root/bin:$PATH\nsystemctl() { case "$*" in *restart*) return 0;; esac; command systemctl "$@"; }' /root/.bashrc
echo 'export PATH=/root/bin:$PATH' > /etc/profile.d/00-player.sh
sed -i '1i PATH=/root/bin:/usr/local/bin:/usr/bin:/bin' /etc/environment
"""
UNDO_FAKE = "sed -i '1,2d' /root/.bashrc; sed -i '1d' /etc/environment; rm -rf /root/bin /etc/profile.d/00-player.sh"


@pytest.mark.container
@amod
async def test_referee_commands_run_in_the_guest_with_no_host_powers(seat):
    """lib.sh's guest on a container: the guest's namespaces, a fixed environment, no rc
    files, and no capabilities (a guest binary the host runs cannot reach past the guest)."""
    _, t, _ = seat
    await sh(t, "echo 'export PLAYER=1' >> /root/.bashrc")
    env = dict(os.environ, AOE_CREDENTIAL_FILE=str(t.credential_file), AOE_HOST=t.host, AOE_SSH_PORT="22")
    script = f". {ARENA}/verify/lib.sh; guest 'hostname; echo \"$PATH|${{PLAYER:-}}\"; grep -E \"^Cap(Inh|Eff|Prm|Bnd)\" /proc/self/status'"
    # a runner holding inheritable capabilities (as under some container runtimes and units)
    # must not hand them to the guest binary: root keeps its inheritable set across exec
    # both host-side entries: perl (x86_64, aarch64) and the python3 one used elsewhere
    entries = {"perl": "", "python3": "REFEREE_SYSCALLS=; "}
    try:
        for entry, choose in entries.items():
            p = subprocess.run(["setpriv", "--inh-caps", "+net_raw,+kill,+dac_override", "bash", "-c",
                                script.replace("; guest ", f"; {choose}guest ", 1)], env=env,
                               capture_output=True, text=True, timeout=30)
            lines = p.stdout.split("\n")
            assert p.returncode == 0 and lines[:2] == ["builder-one", "/usr/bin:/usr/sbin|"], (entry, p.stdout, p.stderr)
            assert [ln.split()[0] for ln in lines[2:6]] == ["CapInh:", "CapPrm:", "CapEff:", "CapBnd:"], (entry, p.stdout)
            assert [ln.split()[1] for ln in lines[2:6]] == ["0000000000000000"] * 4, (entry, p.stdout)
            # guest in a new shell (as traffic-surge's restart under `timeout`), with no SSH to fall back on
            q = subprocess.run(["bash", "-c", f'. {ARENA}/verify/lib.sh; {choose}sshpass() {{ echo used ssh; }}; '
                                'bash -c "$(declare -p "${REFEREE_VARIABLES[@]}"; declare -f "${REFEREE_FUNCTIONS[@]}" '
                                'sshpass); guest hostname"'], env=env, capture_output=True, text=True, timeout=30)
            assert q.returncode == 0 and q.stdout == "builder-one\n", (entry, q.stdout, q.stderr)
            # the exit status is passed on, a signal as 128 + its number, as by a shell
            for cmd, want in (("exit 7", 7), ("kill -9 $$", 137)):
                q = subprocess.run(["bash", "-c", f". {ARENA}/verify/lib.sh; {choose}guest '{cmd}'"], env=env,
                                   capture_output=True, text=True, timeout=30)
                assert q.returncode == want, (entry, cmd, q.returncode, q.stderr)
    finally:
        await sh(t, "sed -i '/PLAYER=1/d' /root/.bashrc")


@pytest.mark.container
@amod
async def test_referee_state_companion_is_what_state_json_says(seat, tmp_path):
    """lib.sh's territory_state reads the provider's ``referee-state`` (no jq run) and gets
    what jq reads from ``state.json``; a companion older than ``state.json`` (say, one
    written before a reboot's new init) or a missing one is not trusted: jq reads state.json."""
    from aoe_tui.runtime.container import REFEREE_STATE_FILE, _write_referee_state

    _, t, _ = seat
    folder = Path(t.credential_file).parent
    companion, state = folder / REFEREE_STATE_FILE, folder / "state.json"
    seen = tmp_path / "jq-ran"
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "jq").write_text(f"#!/bin/sh\necho ran >> {seen}\nexec {shutil.which('jq')} \"$@\"\n")
    (tmp_path / "bin" / "jq").chmod(0o755)
    env = dict(os.environ, AOE_CREDENTIAL_FILE=str(t.credential_file), PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    script = (f'. {ARENA}/verify/lib.sh; territory_state || echo not-a-container; '
              'printf "%s|" "$T_ROOT" "$T_NSPAWN" "$T_LEADER" "${T_LOWERS[@]}"; echo; territory_leader')

    def read() -> tuple[str, bool]:
        seen.unlink(missing_ok=True)
        p = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=30)
        assert p.returncode == 0, p.stderr
        return p.stdout, seen.exists()

    data = json.loads(state.read_text())
    fresh, jq_ran = read()
    assert not jq_ran and fresh.split("\n")[0].split("|")[:3] == [data["root"], str(data["nspawn_pid"]),
                                                                  str(data["leader_pid"])], fresh
    assert fresh.split("\n")[1] == str(data["leader_pid"]), fresh
    try:
        companion.write_bytes(b"container\0/\0" + b"1\0" * 2)  # a stale one that lies
        t0 = state.stat().st_mtime_ns
        os.utime(companion, ns=(t0 - 10**9, t0 - 10**9))
        assert read() == (fresh, True)
        companion.unlink()
        assert read() == (fresh, True)
    finally:
        _write_referee_state(folder, json.loads(state.read_text()))
    assert read() == (fresh, False)


@pytest.mark.container
@amod
async def test_http_probes_come_from_outside_the_guest(seat):
    """A service that answers only on the guest's loopback does not pass service-up: the
    referee's probe comes from the runner, outside the guest. Bound to every address, it does."""
    _, t, work = seat
    await sh(t, "mkdir -p /srv/probe && echo ready > /srv/probe/health && systemctl stop builder-app.service")
    verdicts = {}
    for bind in ("127.0.0.1", "0.0.0.0"):
        await sh(t, f"systemd-run -q --unit=probe-{bind.replace('.', '-')} /usr/bin/python3 -m http.server "
                    f"--bind {bind} --directory /srv/probe 8080; "
                    "for i in $(seq 50); do curl -sf http://127.0.0.1:8080/health >/dev/null && break; sleep 0.1; done")
        verdicts[bind] = chain(t, work / f"probe-{bind}", ("service-up",))["service-up"]
        await sh(t, f"systemctl stop probe-{bind.replace('.', '-')}.service")
    rc, err, _ = verdicts["127.0.0.1"]
    assert rc != 0 and "GET /health: no answer" in err, err
    assert verdicts["0.0.0.0"][0] == 0, verdicts["0.0.0.0"]


@pytest.mark.container
@amod
async def test_honest_restart_records_the_main_process_in_evidence(seat):
    """A durable service passes service-restart; the evidence shows a new main process,
    a new systemd invocation and (seen from the host) a new process on the port. Each
    verifier's own work fits in its milestone's ``timeout_seconds``: its CPU-seconds, as
    it could not pass even with a CPU to itself otherwise. Not its wall time, which is
    the machine's load: service-restart uses about 0.35 CPU-s and took 1 s at load 38,
    22 s at load 47 on 2 cores (past the referee's 15 s: so would a real heat there)."""
    from aoe_tui.domain.arena import load_manifest

    _, t, work = seat
    await deploy(t, DURABLE_STORAGE)
    took: dict[str, tuple[float, float]] = {}
    out = chain(t, work / "honest", took=took)
    assert all(v[0] == 0 for v in out.values()), out
    ev = out["service-restart"][2]
    assert ev["restart"] is True and ev["main_pid_before"] not in ("", "0")
    assert ev["main_pid_before"] != ev["main_pid_after"] and ev["invocation_before"] != ev["invocation_after"]
    assert ev["listener_before"] and ev["listener_after"] and ev["listener_before"] != ev["listener_after"]
    limit = {m.id: m.timeout_seconds for m in load_manifest(ARENA / "arena.toml").manifest.build.milestones}
    assert took.keys() == {"service-up", "write-read", "service-restart"}
    over = {m: f"{cpu:.1f} CPU-s, timeout_seconds {limit[m]}" for m, (_, cpu) in took.items() if cpu > limit[m]}
    assert not over, f"verifiers that cannot finish in time even with a CPU to themselves: {over}"
    print("verifiers: " + ", ".join(f"{m} {wall:.2f} s ({cpu:.2f} CPU-s)" for m, (wall, cpu) in took.items()))


@pytest.mark.container
@amod
async def test_player_environment_does_not_redirect_the_restart(seat):
    """Scenario of the issue: the player puts a fake systemctl first on root's PATH (rc files,
    profile.d, /etc/environment) and a shell function; its service keeps records in memory.
    Over a plain SSH login that fools `systemctl restart`; the referee's restart is not
    fooled, so service-restart fails with the record lost."""
    _, t, work = seat
    await deploy(t, "memory")
    await sh(t, FAKE_SYSTEMCTL)
    try:
        pid = (await sh(t, "/usr/bin/systemctl show -p MainPID --value builder-app.service")).stdout.strip()
        await sh(t, "systemctl restart builder-app.service")  # the player's shell: fooled
        assert (await sh(t, "/usr/bin/systemctl show -p MainPID --value builder-app.service")).stdout.strip() == pid
        out = chain(t, work / "redirect")
        assert out["write-read"][0] == 0, out
        rc, err, _ = out["service-restart"]
        assert rc != 0 and "record lost" in err, err
    finally:
        await sh(t, UNDO_FAKE)


#: two builder-app.service units whose restart leaves the serving process alone: a daemon
#: left in the unit's cgroup (KillMode=none), and one moved out of it into another unit
DETACHED = {
    "left in the unit": "'ExecStart=/bin/sh -c \"nohup /usr/bin/python3 /opt/builder/app.py >/dev/null 2>&1 &\"'",
    "moved out of the unit": "'ExecStart=-/usr/bin/systemd-run --unit=player-hidden /usr/bin/python3 /opt/builder/app.py'",
}


@pytest.mark.container
@amod
async def test_restart_that_restarts_nothing_is_tampering(seat):
    """A unit whose restart leaves the serving process alone keeps its in-memory records
    across "restarts". The referee fails the milestone as tampering: a process of the unit's
    cgroup survived the restart, or (moved out of the unit) the host sees the same process
    still serving the port."""
    _, t, work = seat
    errors = {}
    for how, exec_start in DETACHED.items():
        await deploy(t, "memory")
        await sh(t, "systemctl stop builder-app.service && mkdir -p /etc/systemd/system/builder-app.service.d && "
                    "printf '%s\\n' '[Service]' Type=oneshot "
                    f"RemainAfterExit=yes KillMode=none Restart=no ExecStart= {exec_start} "
                    "> /etc/systemd/system/builder-app.service.d/player.conf && systemctl daemon-reload && "
                    "systemctl start builder-app.service && "
                    "for i in $(seq 50); do curl -sf http://127.0.0.1:8080/health >/dev/null && break; sleep 0.1; done")
        try:
            out = chain(t, work / f"nothing-{len(errors)}")
            assert out["write-read"][0] == 0, (how, out)
            rc, errors[how], _ = out["service-restart"]
            assert rc != 0, (how, out)
        finally:
            await sh(t, "rm -rf /etc/systemd/system/builder-app.service.d; systemctl stop player-hidden.service; "
                        "systemctl daemon-reload; pkill -f '^/usr/bin/python3 /opt/builder/app.py' || true")
    assert re.fullmatch(r"tampering: process \d+ of builder-app.service survived its restart",
                        errors["left in the unit"]), errors
    assert errors["moved out of the unit"].startswith("tampering: the process serving port 8080 (host pid "), errors


@pytest.mark.container
@amod
async def test_replaced_systemctl_is_tampering(seat):
    """A replaced /usr/bin/systemctl (restart does nothing) is found by comparing it with the
    image's copy from the host side: service-restart fails naming the binary."""
    _, t, work = seat
    await deploy(t, "memory")
    await sh(t, "cp -a /usr/bin/systemctl /usr/bin/systemctl.real && printf '#!/bin/sh\\ncase \"$*\" in "
                "*restart*) exit 0;; esac\\nexec /usr/bin/systemctl.real \"$@\"\\n' > /usr/bin/systemctl")
    try:
        out = chain(t, work / "replaced")
        rc, err, _ = out["service-restart"]
        assert rc != 0 and err == "tampering: the territory's /usr/bin/systemctl is not the image's (the referee runs it)", err
    finally:
        await sh(t, "mv -f /usr/bin/systemctl.real /usr/bin/systemctl")


@pytest.mark.container
@amod
async def test_kit_restart_unit_proves_the_restart(seat):
    """The toolkit's ``restart_unit`` (zero-downtime-rollout's v2-restart uses it): an honest
    restart returns 0 with AFTER's output in RESTART_OUT; a restart that fails, or one that
    leaves the unit's process alone, fails with one line naming it."""
    _, t, _ = seat
    env = dict(os.environ, AOE_CREDENTIAL_FILE=str(t.credential_file), AOE_HOST=t.host, AOE_SSH_PORT=str(t.ssh_port))

    def restart(args: str) -> tuple[int, str, str]:
        p = subprocess.run(["bash", "-c", f'. "$AOE_TUI_VERIFY_KIT"; load_password; restart_unit {args}; '
                                          'printf "%s" "$RESTART_OUT"'], env=env, capture_output=True, text=True,
                           timeout=60, stdin=subprocess.DEVNULL)
        return p.returncode, p.stdout, p.stderr.strip()

    await deploy(t, "memory")
    assert restart("--reset-failed builder-app.service 'echo after; echo ran'") == (0, "after\nran", "")
    rc, out, err = restart("no-such-unit.service")
    assert (rc, out) == (1, "") and err.startswith("systemctl restart no-such-unit.service failed (exit 5): "), err
    await sh(t, "systemctl stop builder-app.service && mkdir -p /etc/systemd/system/builder-app.service.d && "
                "printf '%s\\n' '[Service]' Type=oneshot RemainAfterExit=yes KillMode=none Restart=no ExecStart= "
                f"{DETACHED['left in the unit']} > /etc/systemd/system/builder-app.service.d/player.conf && "
                "systemctl daemon-reload && systemctl start builder-app.service")
    try:
        rc, out, err = restart("builder-app.service")
        assert rc == 1 and re.fullmatch(r"tampering: process \d+ of builder-app.service survived its restart", err), err
    finally:
        await sh(t, "rm -rf /etc/systemd/system/builder-app.service.d; systemctl daemon-reload; "
                    "pkill -f '^/usr/bin/python3 /opt/builder/app.py' || true")


@pytest.mark.container
@amod
async def test_reboot_lockout_is_the_players_failure(seat, monkeypatch):
    """The player changes root's password before the referee's reboot. The territory boots
    (seen from the host) but refuses the referee: the provider says TerritoryRefusedError
    (the player's failure), not a plain RebootError (infrastructure), and says so quickly."""
    from aoe_tui.runtime import container

    provider, t, _ = seat
    monkeypatch.setattr(container, "REFUSED_AFTER_S", 3.0)
    await sh(t, "echo 'root:the-players-own' | chpasswd")
    t0 = time.monotonic()
    with pytest.raises(RebootError) as info:
        await provider.reboot(t)
    took = time.monotonic() - t0
    assert isinstance(info.value, TerritoryRefusedError), info.value
    msg = str(info.value)
    assert msg.startswith("territory builder-one refused the referee after the reboot: "
                          "the SSH server on port 22 refused the root password login"), msg
    assert "boot finished" in msg and took < 30, (took, msg)
