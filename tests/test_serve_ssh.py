"""``aoe serve`` end to end: a real asyncssh client against the spectator server on 127.0.0.1.

The season is live without territories: :class:`~aoe_tui.testing.feeder.SeasonFeeder`
builds a one-heat season folder with the real season log writer and appends the seed
heat's recorded events (``tests/fixtures/seed``) paced by their clock, while each
PTY session runs the real ``aoe watch`` in its own process. Screens are rebuilt with
``pyte``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import random
import re
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import asyncssh
import pyte
import pytest

from aoe_tui.testing.feeder import FOLDER, SeasonFeeder
from aoe_tui.serve.keys import ensure_host_key
from aoe_tui.serve.server import ServeConfig, ServerThread

REPO = Path(__file__).resolve().parent.parent
SEED = REPO / "tests" / "fixtures" / "seed" / "opencode-cup-2026-W37-r1-h2-a1.match.json"
TERRITORIES = ("builder-one", "builder-two", "builder-three")
CLOCK = re.compile(r"(?m)^\s*(\d+):(\d\d)/\d+:\d\d\b")  # the heat header starts with "MM:SS/MM:SS"


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> dict[str, Path]:
    """A spectator key in authorized_keys, a stranger's key, and a host key path."""
    d = tmp_path_factory.mktemp("keys")
    out = {}
    for name in ("spectator", "stranger"):
        k = asyncssh.generate_private_key("ssh-ed25519")
        k.write_private_key(str(d / name))
        out[name] = d / name
        out[name + "_key"] = k
    (d / "authorized_keys").write_bytes(out["spectator_key"].export_public_key())
    out["authorized_keys"] = d / "authorized_keys"
    out["host_key"] = d / "host" / "ssh_host_ed25519_key"
    return out


class LogCapture(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def server_log():
    cap = LogCapture()
    lg = logging.getLogger("aoe_tui.serve")
    lg.addHandler(cap)
    old = lg.level
    lg.setLevel(logging.INFO)
    yield cap
    lg.removeHandler(cap)
    lg.setLevel(old)


def start_server(season: Path, keys, **kw) -> ServerThread:
    cfg = ServeConfig(season_dir=season, host_key=keys["host_key"], authorized_keys=keys["authorized_keys"],
                      port=0, **kw)
    t = ServerThread(cfg)
    t.start()
    return t


@pytest.fixture
def live(tmp_path, keys, server_log):
    """A season folder being appended at 2x real time, and a server serving it."""
    feeder = SeasonFeeder(SEED, tmp_path / "season", speed=2.0)
    feeder.prepare()
    t = start_server(feeder.out, keys)
    feeder.start()
    yield t.server, feeder
    t.stop()
    feeder.stop()


async def connect(port: int, key: Path | None, **kw) -> asyncssh.SSHClientConnection:
    return await asyncssh.connect("127.0.0.1", port, username="cup", known_hosts=None,
                                  client_keys=[str(key)] if key else None, **kw)


class Spectator:
    """A PTY session whose output is fed through a pyte screen."""

    def __init__(self, conn: asyncssh.SSHClientConnection, cols: int = 120, rows: int = 36,
                 term: str = "xterm-256color") -> None:
        self.conn = conn
        self.term = term
        self.screen = pyte.Screen(cols, rows)
        self.stream = pyte.ByteStream(self.screen)
        self.proc: asyncssh.SSHClientProcess | None = None
        self.task: asyncio.Task | None = None
        self.size = (cols, rows)
        self.raw = bytearray()

    async def open(self) -> Spectator:
        self.proc = await self.conn.create_process(term_type=self.term, term_size=self.size, encoding=None)
        self.task = asyncio.create_task(self._read())
        return self

    async def _read(self) -> None:
        assert self.proc is not None
        while True:
            data = await self.proc.stdout.read(65536)
            if not data:
                return
            self.raw.extend(data)
            self.stream.feed(data)

    def text(self) -> str:
        return "\n".join(self.screen.display)

    async def wait_for(self, cond, timeout: float, what: str) -> None:
        end = time.monotonic() + timeout
        while not cond(self.text()):
            if time.monotonic() > end:
                raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}; screen:\n{self.text()}")
            await asyncio.sleep(0.1)

    def resize(self, cols: int, rows: int) -> None:
        assert self.proc is not None
        self.size = (cols, rows)
        self.screen.resize(rows, cols)
        self.proc.change_terminal_size(cols, rows)

    async def open_heat(self, names: tuple[str, ...] = TERRITORIES) -> None:
        """Season screen → the running heat (Enter on the selected attempt row) showing ``names``."""
        await self.wait_for(lambda s: "attempt 1" in s, 30, "the bracket")
        assert self.proc is not None
        deadline = time.monotonic() + 20
        while not all(t in self.text() for t in names):
            assert time.monotonic() < deadline, self.text()
            self.proc.stdin.write(b"\r")
            await asyncio.sleep(1.0)


def clock_s(text: str) -> int | None:
    m = CLOCK.search(text)
    return int(m.group(1)) * 60 + int(m.group(2)) if m else None


def pgroup_members(pgid: int) -> list[int]:
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                fields = (p / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                out.append(int(p.name))
    return out


# ------------------------------------------------------------------------------------ tests


async def test_known_key_sees_territories_and_the_heat_clock_advancing(live, keys, server_log):
    server, feeder = live
    async with await connect(server.port, keys["spectator"]) as conn:
        assert conn.get_server_host_key().get_fingerprint() == server.host_key_fingerprint
        spec = await Spectator(conn).open()
        await spec.open_heat()
        await spec.wait_for(lambda s: clock_s(s) is not None, 15, "the heat clock")
        first = clock_s(spec.text())
        await spec.wait_for(lambda s: (clock_s(s) or 0) >= first + 4, 20, f"the clock to pass {first + 4} s")
        text = spec.text()
        assert re.search(r"\d+:\d\d/\d+:\d\d  running", text) and "round 1 heat 1" in text
        spec.proc.close()
    fp = keys["spectator_key"].get_fingerprint()
    assert any(line.startswith("session start") and fp in line and "size=120x36" in line
               and "term=xterm-256color" in line for line in server_log.lines), server_log.lines
    await asyncio.sleep(0.5)
    ends = [line for line in server_log.lines if line.startswith("disconnect") and fp in line]
    assert ends and re.search(r"duration=\d+\.\ds", ends[0])


async def test_resize_changes_the_rendered_width(live, keys):
    server, _ = live
    async with await connect(server.port, keys["spectator"]) as conn:
        spec = await Spectator(conn, 80, 24).open()
        await spec.wait_for(lambda s: "palette" in s, 30, "the footer")

        def footer_end(s: str) -> int:
            line = next(line for line in s.splitlines() if "palette" in line)
            return line.index("palette") + len("palette")

        assert footer_end(spec.text()) <= 80
        spec.resize(132, 30)
        await spec.wait_for(lambda s: "palette" in s and footer_end(s) > 120, 15, "a 132-column render")
        spec.resize(100, 30)
        await spec.wait_for(lambda s: "palette" in s and 90 < footer_end(s) <= 100, 15, "a 100-column render")


async def test_closing_the_client_ends_its_spectator_process_group(live, keys):
    server, _ = live
    conn = await connect(server.port, keys["spectator"])
    spec = await Spectator(conn).open()
    await spec.wait_for(lambda s: "season" in s, 30, "the season screen")
    pids = server.spectator_pids()
    assert len(pids) == 1 and pgroup_members(pids[0]), pids
    # the spectator knows it is one (its palette offers no screenshot saved on the server)
    assert b"AOE_SPECTATOR=1" in Path(f"/proc/{pids[0]}/environ").read_bytes().split(b"\0")
    conn.close()
    await conn.wait_closed()
    end = time.monotonic() + 10
    while pgroup_members(pids[0]) or server.session_count:
        assert time.monotonic() < end, f"spectator group {pids[0]} still has {pgroup_members(pids[0])}"
        await asyncio.sleep(0.1)


async def test_server_shutdown_gives_spectators_their_terminal_back(tmp_path, keys):
    """When the server ends a session (shutdown, season over), the client's terminal
    leaves the alternate screen, shows its cursor, stops mouse reporting, and reads why."""
    from aoe_tui.serve.session import TERMINAL_RESET

    feeder = SeasonFeeder(SEED, tmp_path / "season", speed=1000.0)
    feeder.prepare()
    feeder.run()
    t = start_server(feeder.out, keys)
    async with await connect(t.server.port, keys["spectator"]) as conn:
        spec = await Spectator(conn).open()
        await spec.wait_for(lambda s: "season" in s, 30, "the season screen")
        assert b"\x1b[?1049h" in spec.raw  # the TUI took the alternate screen
        await asyncio.get_running_loop().run_in_executor(None, t.stop)
        await asyncio.wait_for(spec.task, 10)
        tail = bytes(spec.raw[-400:])
        assert TERMINAL_RESET in tail and b"aoe serve: the server is shutting down" in tail
        assert spec.proc.exit_status == 0


def test_input_budget_lets_keys_through_and_drops_floods():
    from aoe_tui.serve.session import InputBudget

    budget = InputBudget(rate=256.0, burst=128.0)
    assert budget.admit(3)  # a key
    assert not budget.admit(260_000)  # a paste: dropped whole, never cut inside a sequence
    assert budget.admit(120) and not budget.admit(9)  # the burst is spent
    budget.at -= 1.0  # a second later
    assert budget.admit(9)


def test_scratch_folders_of_gone_servers_are_swept(tmp_path):
    from aoe_tui.serve.session import sweep_scratch

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    (tmp_path / f"aoe-serve-{dead}-abc").mkdir()
    (tmp_path / f"aoe-serve-{dead}-abc" / "screenshot.svg").write_text("x")
    (tmp_path / f"aoe-serve-{os.getpid()}-def").mkdir()
    (tmp_path / "aoe-serve-old").mkdir()
    assert sweep_scratch(str(tmp_path)) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"aoe-serve-{os.getpid()}-def", "aoe-serve-old"]


async def test_unknown_key_password_and_keyboard_interactive_are_refused(live, keys, server_log):
    server, _ = live
    with pytest.raises(asyncssh.PermissionDenied):
        await connect(server.port, keys["stranger"])
    with pytest.raises(asyncssh.PermissionDenied):
        await connect(server.port, None, password="hunter2-secret", kbdint_auth=True)
    assert any("auth refused" in line and keys["stranger_key"].get_fingerprint() in line for line in server_log.lines)
    assert not any("hunter2" in line for line in server_log.lines)


async def test_only_fixed_commands_no_sftp_no_forwarding(live, keys, server_log):
    server, feeder = live
    async with await connect(server.port, keys["spectator"]) as conn:
        marker = feeder.out.parent / "was-run"
        for cmd in ("sh", f"sh -c 'touch {marker}'", "scp -t /tmp", "standings; sh", "watch --evil"):
            r = await conn.run(cmd)  # never run: one line naming the command, and what is offered
            assert r.exit_status == 1 and f"{cmd[:80]!r} is not a command here" in r.stderr, (cmd, r.stderr)
            assert "standings [--format" in r.stderr
        assert not marker.exists()
        with pytest.raises(asyncssh.ChannelOpenError):
            await conn.start_sftp_client()
        with pytest.raises(asyncssh.ChannelOpenError) as ei:  # ssh -L: said to be forbidden, not "refused"
            await conn.create_connection(asyncssh.SSHTCPSession, "127.0.0.1", server.port)
        assert ei.value.code == asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED, ei.value
        with pytest.raises(asyncssh.ChannelListenError):
            await conn.forward_remote_port("127.0.0.1", 0, "127.0.0.1", server.port)
        # the fixed commands work, without a PTY
        md = await conn.run("standings --format md")
        assert md.exit_status == 0 and "| # | entrant" in md.stdout and "kimi" in md.stdout
        js = await conn.run("standings --format json")
        assert js.exit_status == 0 and json.loads(js.stdout)
        plain = await conn.run()  # a shell request without a PTY: standings as text
        assert plain.exit_status == 0 and "| # | entrant" in plain.stdout
    assert any(line.startswith("exec refused") and "'sh'" in line for line in server_log.lines)


async def test_connection_and_session_limits_say_why(tmp_path, keys):
    feeder = SeasonFeeder(SEED, tmp_path / "season", speed=1000.0)
    feeder.prepare()
    feeder.run()
    t = start_server(feeder.out, keys, max_sessions=1, max_per_address=2)
    try:
        port = t.server.port
        a = await connect(port, keys["spectator"])
        b = await connect(port, keys["spectator"])
        with pytest.raises(asyncssh.DisconnectError, match="too many connections from 127.0.0.1"):
            await connect(port, keys["spectator"])
        first = await Spectator(a).open()
        await first.wait_for(lambda s: "season" in s, 30, "the first spectator")
        second = await b.create_process(term_type="xterm", term_size=(80, 24), encoding=None)
        out = await asyncio.wait_for(second.stderr.read(), 10)
        await second.wait_closed()
        assert b"spectator seats are taken" in out and second.exit_status == 1
        a.close()
        b.close()
    finally:
        t.stop()


def season_snapshot(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


async def test_random_input_changes_nothing_and_spares_other_sessions(live, keys):
    server, feeder = live
    async with await connect(server.port, keys["spectator"]) as ca, \
            await connect(server.port, keys["spectator"]) as cb:
        victim = await Spectator(ca).open()
        other = await Spectator(cb).open()
        await other.open_heat()
        await victim.wait_for(lambda s: "season" in s, 30, "the victim's screen")
        rng = random.Random(7)
        junk = bytes(rng.randrange(256) for _ in range(1000))
        for i in range(0, len(junk), 50):
            if victim.proc.stdin.is_closing():
                break
            victim.proc.stdin.write(junk[i:i + 50])
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)
        # the other session still follows the heat
        before = clock_s(other.text())
        await other.wait_for(lambda s: (clock_s(s) or 0) > (before or 0), 20, "the other session's clock")
        # the server still serves new clients
        r = await ca.run("standings --format csv") if not ca.is_closed() else None
    async with await connect(server.port, keys["spectator"]) as cc:
        assert (await cc.run("standings --format csv")).exit_status == 0
    if r is not None:
        assert r.exit_status == 0
    assert feeder.done.wait(60), "the feeder did not finish"
    # the season folder holds exactly what the feeder wrote
    snap = season_snapshot(feeder.out)
    assert set(snap) == {"season.jsonl", f"{FOLDER}/arena.json", f"{FOLDER}/events.jsonl"}, snap
    from aoe_tui.replay.log import dump_record

    expected = "".join(dump_record(rec) + "\n" for rec in feeder.loaded.records)
    assert (feeder.out / FOLDER / "events.jsonl").read_text(encoding="utf-8") == expected
    kinds = [json.loads(line)["kind"] for line in (feeder.out / "season.jsonl").read_text().splitlines()]
    assert kinds == ["season_started", "round_scheduled", "attempt_started", "attempt_finished", "heat_finished",
                     "round_finished", "season_finished"]


def test_host_key_is_created_0600_and_kept(tmp_path):
    path = tmp_path / "cfg" / "host_key"
    key, created = ensure_host_key(path)
    assert created and stat.S_IMODE(path.stat().st_mode) == 0o600
    again, created2 = ensure_host_key(path)
    assert not created2 and again.get_fingerprint() == key.get_fingerprint()
    path.chmod(0o644)
    from aoe_tui.serve.keys import ServeError, load_authorized_keys

    with pytest.raises(ServeError, match="chmod 600"):
        ensure_host_key(path)
    # a folder where a file is wanted: said as such (not as a mode problem), nothing written
    with pytest.raises(ServeError, match=r"cfg: is a folder; --host-key wants a key file .*cfg/host_key"):
        ensure_host_key(tmp_path / "cfg")
    with pytest.raises(ServeError, match="is a folder; --authorized-keys wants an OpenSSH authorized_keys file"):
        load_authorized_keys(tmp_path / "cfg")
    assert sorted(p.name for p in (tmp_path / "cfg").iterdir()) == ["host_key"]


def test_cli_serves_and_a_killed_server_leaves_no_orphans(tmp_path, keys):
    """``aoe serve`` as a process: listens, logs without secrets; SIGKILL of the server
    still ends the spectator (SIGHUP from its controlling PTY)."""
    feeder = SeasonFeeder(SEED, tmp_path / "season", speed=1000.0)
    feeder.prepare()
    feeder.run()
    host_key = tmp_path / "hk"
    # a bad authorized_keys file: one line, no traceback
    bad = subprocess.run([sys.executable, "-m", "aoe_tui.cli", "serve", str(feeder.out), "--port", "0",
                          "--host-key", str(host_key), "--authorized-keys", str(tmp_path / "nope")],
                         capture_output=True, text=True, timeout=30)
    assert bad.returncode == 1 and bad.stderr.strip().count("\n") == 0 and "authorized_keys file not found" in bad.stderr
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "aoe_tui.cli", "serve", str(feeder.out), "--port", str(port),
                             "--host-key", str(host_key), "--authorized-keys", str(keys["authorized_keys"])],
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        if "scratch folder(s) of spectator servers that are gone" in line:  # an earlier server's, SIGKILLed
            line = proc.stderr.readline()
        assert "listening host=127.0.0.1" in line and "(new)" in line, line
        assert stat.S_IMODE(host_key.stat().st_mode) == 0o600

        async def spectate() -> int:
            async with await connect(port, keys["spectator"]) as conn:
                spec = await Spectator(conn).open()
                await spec.wait_for(lambda s: "season" in s, 30, "the season screen")
                children = [int(p) for p in subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True,
                                                           text=True).stdout.split()]
                assert len(children) == 1
                os.kill(proc.pid, signal.SIGKILL)
                return children[0]

        child = asyncio.run(spectate())
        end = time.monotonic() + 10
        while pgroup_members(child):
            assert time.monotonic() < end, f"orphaned spectator {child} survives its killed server"
            time.sleep(0.1)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


RUNNER = """\
import argparse, sys, time
from pathlib import Path
from aoe_tui.commands.serve import ServerProcess
from aoe_tui.errors import AoeError
args = argparse.Namespace(host="127.0.0.1", host_key=Path(sys.argv[2]), authorized_keys=Path(sys.argv[3]),
                          max_sessions=4, max_per_address=4, cpus=None, priority="idle")
try:
    server = ServerProcess.for_args(Path(sys.argv[1]), 0, args).start()
except AoeError as err:
    print("failed", err, flush=True)
    sys.exit(1)
print(server.port, server.proc.pid, flush=True)
time.sleep(600)
"""


def sched_of(pid: int) -> tuple[int, set[int]]:
    return os.sched_getscheduler(pid), os.sched_getaffinity(pid)


def test_runner_server_process_is_placed_apart_and_dies_with_its_runner(tmp_path, keys):
    """``aoe run --serve-ssh``'s server is its own process; it and its spectators run on
    the spectator CPUs at idle priority; a bad input is one line, and SIGKILL of the
    runner still ends the server and every spectator."""
    from aoe_tui.serve.placement import default_cpus

    feeder = SeasonFeeder(SEED, tmp_path / "season", speed=1000.0)
    feeder.prepare()
    feeder.run()
    bad = subprocess.run([sys.executable, "-c", RUNNER, str(feeder.out), str(tmp_path / "hk"), str(tmp_path / "nope")],
                         capture_output=True, text=True, timeout=60, cwd=REPO)
    assert bad.returncode == 1 and bad.stdout.strip() == f"failed {tmp_path / 'nope'}: authorized_keys file not found"
    runner = subprocess.Popen([sys.executable, "-c", RUNNER, str(feeder.out), str(tmp_path / "hk"),
                               str(keys["authorized_keys"])], stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        port, server_pid = (int(x) for x in runner.stdout.readline().split())
        assert server_pid != runner.pid and sched_of(server_pid) == (os.SCHED_IDLE, set(default_cpus()))

        async def spectate() -> int:
            async with await connect(port, keys["spectator"]) as conn:
                spec = await Spectator(conn).open()
                await spec.wait_for(lambda s: "season" in s, 60, "the season screen")
                children = [int(p) for p in subprocess.run(["pgrep", "-P", str(server_pid)], capture_output=True,
                                                           text=True).stdout.split()]
                assert len(children) == 1
                assert sched_of(children[0]) == (os.SCHED_IDLE, set(default_cpus()))
                runner.kill()
                return children[0]

        child = asyncio.run(spectate())
        end = time.monotonic() + 15
        while pgroup_members(child) or pgroup_members(server_pid):
            assert time.monotonic() < end, "the server or its spectator outlived the killed runner"
            time.sleep(0.1)
    finally:
        if runner.poll() is None:
            runner.kill()
        runner.wait(10)


MINI = """\
id = "mini"
label = "serve-test"
arena = "{arena}"
seed = 11
max_attempts = 1
concurrent_heats = 1
drain_seconds = 2

[provider]
kind = "container"
ready_timeout_s = 90

[arena_overrides]
duration_seconds = 40
minimum_territories = 2

[format]
kind = "league"
heats_per_entrant = 1

[[entrants]]
id = "slow"
adapter = "scripted:slow"
model = "scripted-slow"

[[entrants]]
id = "volatile"
adapter = "scripted:volatile"
model = "scripted-volatile"
"""


@pytest.mark.container
async def test_run_serve_ssh_on_a_real_season(tmp_path, keys, guest_image):
    """``aoe run --headless --serve-ssh``: a spectator follows a real container heat."""
    import shutil

    if os.geteuid() != 0 or shutil.which("systemd-nspawn") is None:
        pytest.skip("container seasons need root and systemd-nspawn")
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    season_file = tmp_path / "mini.toml"
    season_file.write_text(MINI.format(arena=REPO / "arenas" / "first-build" / "arena.toml"))
    out = tmp_path / "season"
    proc = subprocess.Popen([sys.executable, "-m", "aoe_tui.cli", "run", str(season_file), "--headless",
                             "--output", str(out), "--serve-ssh", str(port), "--host-key", str(tmp_path / "hk"),
                             "--authorized-keys", str(keys["authorized_keys"])],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO,
                            env=dict(os.environ, XDG_STATE_HOME=str(tmp_path / "state")))
    try:
        end = time.monotonic() + 120
        while not (out / "round-1/heat-1/attempt-1/events.jsonl").is_file():
            assert proc.poll() is None, proc.stdout.read()
            assert time.monotonic() < end, "the heat never started"
            await asyncio.sleep(0.2)
        async with await connect(port, keys["spectator"]) as conn:
            spec = await Spectator(conn).open()
            await spec.open_heat(("builder-one", "builder-two"))
            await spec.wait_for(lambda s: clock_s(s) is not None, 30, "the heat clock")
            first = clock_s(spec.text())
            await spec.wait_for(lambda s: (clock_s(s) or 0) >= first + 3, 30, "the clock advancing")
            assert "builder-one" in spec.text() and "builder-two" in spec.text()
            spec.proc.close()
        assert proc.wait(240) == 0
        # the run's output holds its own lines; the server's log lines are in its log file
        output = proc.stdout.read()
        log = tmp_path / "state" / "aoe-tui" / "log" / "serve-ssh.log"
        assert f"aoe: spectator SSH server log: {log}" in output
        assert not re.search(r"(?m)^\d{4}-\d\d-\d\d [\d:,]+ (INFO|WARNING|ERROR) ", output), output
        assert "INFO session start" in log.read_text()
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(120)


def test_runner_restarts_a_dead_server_and_keeps_the_final_view(tmp_path, keys):
    """``aoe run --serve-ssh``: a server that dies mid-season is reported and restarted on
    the same port; when the season finished, spectators keep the final view for a while
    (3 s here), then are told why the session ends."""
    import argparse

    from aoe_tui.commands.serve import ServerProcess

    feeder = SeasonFeeder(SEED, tmp_path / "season", speed=1000.0)
    feeder.prepare()
    feeder.run()
    args = argparse.Namespace(host="127.0.0.1", host_key=tmp_path / "hk", authorized_keys=keys["authorized_keys"],
                              max_sessions=4, max_per_address=4, cpus=None, priority="idle")
    said: list[str] = []
    server = ServerProcess.for_args(feeder.out, 0, args, say=said.append)
    server.argv += ["--final-view-s", "3"]
    server.start()
    try:
        port, first = server.port, server.proc.pid
        os.kill(first, signal.SIGKILL)
        end = time.monotonic() + 60
        import socket

        def listening() -> bool:
            try:
                socket.create_connection(("127.0.0.1", port), 0.5).close()
                return True
            except OSError:
                return False

        while server.proc.pid == first or server.proc.poll() is not None or not said or not listening():
            assert time.monotonic() < end, "the dead server was not restarted"
            time.sleep(0.1)
        assert server.port == port and said == ["the spectator SSH server stopped (exit -9); restarting it (1/3)"]

        async def spectate() -> Spectator:
            async with await connect(port, keys["spectator"]) as conn:
                spec = await Spectator(conn).open()
                await spec.wait_for(lambda s: "season" in s, 60, "the season screen")
                assert server.stop(finished=True) is None  # returns at once
                await asyncio.sleep(1.5)
                assert not spec.task.done() and server.proc.poll() is None  # the final view stays up
                await asyncio.wait_for(spec.task, 15)
                return spec

        spec = asyncio.run(spectate())
        assert b"aoe serve: the season finished; thanks for watching" in bytes(spec.raw[-300:])
        assert server.proc.wait(15) == 0
    finally:
        if server.proc.poll() is None:
            server.proc.kill()


async def test_headless_serve_ssh_keeps_the_server_log_out_of_the_run_output(tmp_path, keys, monkeypatch, capfd):
    """``aoe run --headless --serve-ssh`` (its ``serving`` block, with the real server child):
    the server's INFO lines (listening, connect, auth, session, view) go to its log file, not
    to the run's output, which only gets the runner's own ``aoe: ...`` lines (where the log
    is, the ssh command): headless output stays one line per change."""
    import argparse

    from aoe_tui.commands.serve import server_log_path, serving

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    feeder = SeasonFeeder(SEED, tmp_path / "season", speed=1000.0)
    feeder.prepare()
    feeder.run()
    args = argparse.Namespace(serve_ssh=0, host="127.0.0.1", host_key=tmp_path / "hk",
                              authorized_keys=keys["authorized_keys"], max_sessions=4, max_per_address=4, cpus=None,
                              priority="idle")
    with serving(args, feeder.out, headless=True) as server:
        async with await connect(server.port, keys["spectator"]) as conn:
            spec = await Spectator(conn).open()
            await spec.wait_for(lambda s: "season" in s, 60, "the season screen")
            spec.proc.close()
            await asyncio.wait_for(spec.task, 15)
    out, err = capfd.readouterr()
    log = server_log_path()
    assert log == tmp_path / "state" / "aoe-tui" / "log" / "serve-ssh.log"
    assert out == ""
    assert err.splitlines() == [f"aoe: spectator SSH server log: {log}",
                                f"aoe: spectators: ssh -t -p {server.port} cup@127.0.0.1  "
                                f"(host key {server.host_key_fingerprint})"], err
    text = log.read_text()
    for what in ("INFO listening host=127.0.0.1", "INFO auth ok", "INFO session start", "INFO view start"):
        assert what in text, (what, text)


def test_run_refuses_serve_options_without_serve_ssh(tmp_path):
    r = subprocess.run([sys.executable, "-m", "aoe_tui.cli", "run", str(REPO / "seasons" / "demo.toml"),
                        "--headless", "--output", str(tmp_path / "out"), "--cpus", "1",
                        "--authorized-keys", str(tmp_path / "k")], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert r.returncode == 2 and r.stderr.strip() == "aoe: error: --authorized-keys, --cpus only apply with --serve-ssh PORT"
    assert not (tmp_path / "out").exists()


async def test_spectator_survives_the_issue_bytes_and_10000_fuzzed_sequences(live, keys, monkeypatch,
                                                                              record_property):
    """No byte sequence on input ends a spectator's session (issue #17): the issue's bytes
    (an X10 click past column 95, a lone 0xFF 0xFE, truncated UTF-8, a Latin-1 paste…)
    and 10,000 fuzzed sequences (``tests/input_fuzz.py``) reach the spectator's ``aoe
    watch``; it stays alive and answers ``?`` with the help screen. The input budget
    (``InputBudget``, tested above) is lifted so the fuzz reaches the TUI instead of being
    dropped at 256 B/s; a batch the PTY could not take is sent again."""
    from input_fuzz import fuzz_sequences
    from test_tui_input import HELP_MARK, ISSUE_BYTES

    from aoe_tui.serve import session as session_mod

    monkeypatch.setattr(session_mod.InputBudget, "admit", lambda self, n: True)
    server, _feeder = live
    async with await connect(server.port, keys["spectator"]) as conn:
        view = await Spectator(conn).open()
        await view.wait_for(lambda s: "attempt 1" in s, 30, "the season screen")
        [sess] = list(server.seats.sessions())
        pid = sess.child.pid

        def alive() -> bool:
            return not view.proc.stdin.is_closing() and sess.child is not None and os.path.exists(f"/proc/{pid}")

        async def answers_help(timeout: float) -> float:
            view.proc.stdin.write(b"\x1b[201~")
            for _ in range(4):
                view.proc.stdin.write(b"\x1b")
                await asyncio.sleep(0.3)
            t0 = time.monotonic()
            view.proc.stdin.write(b"?")
            await view.wait_for(lambda s: HELP_MARK in s, timeout, "the help screen")
            took = time.monotonic() - t0
            view.proc.stdin.write(b"\x1b")
            await view.wait_for(lambda s: HELP_MARK not in s, timeout, "the help screen to close")
            return took

        for name, data in ISSUE_BYTES.items():
            view.proc.stdin.write(data)
            await asyncio.sleep(0.3)
            assert alive(), f"{name} ended the spectator's session:\n{view.text()}"
        await answers_help(30)
        seqs = fuzz_sequences(10_000, 18, *view.size)
        t0, resent = time.monotonic(), 0
        for i in range(0, len(seqs), 100):
            batch = b"".join(seqs[i:i + 100])
            for _ in range(50):
                dropped = sess.dropped_input
                view.proc.stdin.write(batch)
                await view.proc.stdin.drain()
                await asyncio.sleep(0.02)
                if sess.dropped_input == dropped:
                    break
                resent += 1
                await asyncio.sleep(0.2)  # the TUI is behind: let it read
            assert alive(), f"fuzz batch {i // 100} ended the spectator's session:\n{view.text()}"
        sent_s = time.monotonic() - t0
        took = await answers_help(60)
        record_property("fuzz_send_s", round(sent_s, 1))
        record_property("batches_resent", resent)
        record_property("help_after_fuzz_s", round(took, 1))
        assert alive(), view.text()
