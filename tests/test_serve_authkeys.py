"""``aoe serve`` honours ``authorized_keys`` options as sshd(8) means them (issue 30, item 4).

The grant table is checked on its own (:func:`aoe_tui.serve.keys.grant_for`, real files);
the server against the real OpenSSH client (``ssh``) and asyncssh, on a finished season.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import time
from pathlib import Path

import asyncssh
import pytest

from aoe_tui.serve.keys import AuthorizedKeysFile, KeyGrant, grant_for, parse_expiry
from aoe_tui.serve.server import ServeConfig, ServerThread
from aoe_tui.testing.feeder import SeasonFeeder

REPO = Path(__file__).resolve().parent.parent
SEED = REPO / "tests" / "fixtures" / "seed" / "opencode-cup-2026-W37-r1-h2-a1.match.json"

#: name → the options put before that key's line
OPTIONS = {
    "plain": "",
    "expired": 'expiry-time="20200101"',
    "future": 'expiry-time="29991231Z"',
    "unknown": "frobnicate",
    "nopty": "no-pty",
    "restrict": "restrict",
    "restrictpty": "restrict,pty",
    "forced": 'command="standings --format md"',
    "forcedbad": 'command="sh -c id"',
    "verify": "verify-required",
    "upper": 'FROM="10.9.9.9"',
}


@pytest.fixture(scope="module")
def keyset(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("authkeys")
    out: dict = {"dir": d}
    for name in OPTIONS:
        k = asyncssh.generate_private_key("ssh-ed25519")
        k.write_private_key(str(d / name))
        (d / name).chmod(0o600)
        out[name] = k
    return out


def write_keys(keyset: dict, names, path: Path) -> Path:
    lines = []
    for name in names:
        pub = keyset[name].export_public_key().decode().strip()
        lines.append(f"{OPTIONS[name]} {pub}".strip())
    path.write_text("\n".join(lines) + "\n")
    return path


def test_grants_follow_sshd(keyset, tmp_path):
    ak = write_keys(keyset, OPTIONS, tmp_path / "authorized_keys")
    got = {name: grant_for(ak, keyset[name].convert_to_public(), "127.0.0.1") for name in OPTIONS}
    assert got["plain"][0] == KeyGrant(line=1)
    assert got["expired"][0] is None and "line 2: expired at 2020-01-01" in got["expired"][1]
    assert got["future"][0] is not None and got["future"][0].expires == parse_expiry("29991231Z")
    assert got["unknown"] == (None, "line 4: unknown option 'frobnicate'")
    assert got["nopty"][0] == KeyGrant(line=5, pty=False)
    assert got["restrict"][0] == KeyGrant(line=6, pty=False)
    assert got["restrictpty"][0] == KeyGrant(line=7, pty=True)  # a later pty undoes restrict's no-pty
    assert got["forced"][0] == KeyGrant(line=8, command="standings --format md")
    assert [got[n][0].line for n in ("plain", "nopty", "restrictpty", "forced")] == [1, 5, 7, 8]
    assert got["verify"][0] is None and "verify-required" in got["verify"][1]
    # asyncssh matches from= only when spelled in lower case: another spelling is refused, never ignored
    assert got["upper"] == (None, "line 11: unknown option 'FROM'")
    assert grant_for(ak, asyncssh.generate_private_key("ssh-ed25519").convert_to_public(), "127.0.0.1") == (None, "not in authorized_keys")
    assert parse_expiry("20200101000000Z") == 1577836800.0
    with pytest.raises(ValueError, match="bad expiry-time"):
        parse_expiry("2020-01-01")


def test_an_expired_line_does_not_hide_a_later_one(keyset, tmp_path):
    pub = keyset["plain"].export_public_key().decode().strip()
    ak = tmp_path / "ak"
    ak.write_text(f'expiry-time="20200101" {pub}\nno-pty {pub}\n')
    key = keyset["plain"].convert_to_public()
    assert grant_for(ak, key, "127.0.0.1")[0] == KeyGrant(line=2, pty=False)
    assert grant_for(ak, key, "127.0.0.1")[0].line == 2
    keys = AuthorizedKeysFile(ak)
    assert keys.refresh() and not keys.refresh()  # re-read only when it changed
    ak.write_text(f"{pub}\n")
    ak.touch()
    assert keys.refresh() and keys.grant(key, "127.0.0.1")[0] == KeyGrant(line=1)
    ak.unlink()
    assert keys.refresh() and keys.grant(key, "127.0.0.1") == (None, "not in authorized_keys")


class LogCapture(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def served(tmp_path, keyset):
    cap = LogCapture()
    lg = logging.getLogger("aoe_tui.serve")
    lg.addHandler(cap)
    old = lg.level
    lg.setLevel(logging.INFO)
    feeder = SeasonFeeder(SEED, tmp_path / "season", speed=1000.0)
    feeder.prepare()
    feeder.run()
    ak = write_keys(keyset, OPTIONS, tmp_path / "authorized_keys")
    cfg = ServeConfig(season_dir=feeder.out, host_key=tmp_path / "host" / "key", authorized_keys=ak, port=0)
    t = ServerThread(cfg)
    t.start()
    yield t.server, ak, cap
    t.stop()
    lg.removeHandler(cap)
    lg.setLevel(old)


def ssh(port: int, keyset: dict, name: str, *args: str, tty: bool = False) -> subprocess.CompletedProcess:
    """The real OpenSSH client, with only the key ``name``; ``tty``: its stdin is a terminal,
    so it asks for one as it does for a person at a terminal (no ``-t``: refused, it goes on
    without one; with ``-t`` it would give up on the refusal)."""
    argv = ["ssh", "-p", str(port), "-i", str(keyset["dir"] / name), "-o", "IdentitiesOnly=yes",
            "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
            "-o", "LogLevel=ERROR", *([] if tty else ["-T"]), "cup@127.0.0.1", *args]
    if not tty:
        return subprocess.run(argv, capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    master, slave = os.openpty()
    try:
        return subprocess.run(argv, capture_output=True, timeout=60, stdin=slave, env=dict(os.environ, TERM="xterm"))
    finally:
        os.close(slave)
        os.close(master)


def test_expired_unknown_and_uncheckable_keys_are_refused_with_a_log_line(served, keyset):
    server, _, cap = served
    for name, why in (("expired", "expired at 2020-01-01"), ("unknown", "unknown option 'frobnicate'"),
                      ("verify", "verify-required"), ("upper", "unknown option 'FROM'")):
        r = ssh(server.port, keyset, name, "standings", tty=True)
        assert r.returncode == 255 and b"Permission denied" in r.stderr, (name, r)
        fp = keyset[name].get_fingerprint()
        assert any(line.startswith("auth refused") and fp in line and why in line for line in cap.lines), (name, cap.lines)
    assert ssh(server.port, keyset, "future", "standings").returncode == 0


def test_a_forced_command_runs_whatever_the_client_asks(served, keyset):
    server, _, cap = served
    for asked in (["standings", "--format", "csv"], ["help"], []):
        r = ssh(server.port, keyset, "forced", *asked)
        assert r.returncode == 0 and b"| # | entrant" in r.stdout, (asked, r)
    r = ssh(server.port, keyset, "forced", tty=True)  # a shell on a terminal: still the forced command
    assert r.returncode == 0 and b"| # | entrant" in r.stdout and b"\x1b[?1049h" not in r.stdout
    assert any(line.startswith("forced command") and "'standings --format md'" in line and "asked 'help'" in line
               for line in cap.lines)
    bad = ssh(server.port, keyset, "forcedbad", "standings")  # a forced command we do not offer is not run
    assert bad.returncode == 1 and b"'sh -c id' is not a command here" in bad.stderr


@pytest.mark.parametrize("name", ["nopty", "restrict"])
def test_no_pty_keys_get_no_terminal_and_are_told_in_one_line(served, keyset, name):
    server, _, cap = served
    r = ssh(server.port, keyset, name, tty=True)
    assert b"PTY allocation request failed" in r.stderr, r
    assert r.stderr.count(b"aoe serve: this key may not have a terminal (no-pty in authorized_keys)") == 1
    assert r.returncode == 0 and b"| # | entrant" in r.stdout and b"\x1b[?1049h" not in r.stdout
    assert any(line.startswith("pty refused") and keyset[name].get_fingerprint() in line for line in cap.lines)
    assert server.session_count == 0


def test_restrict_then_pty_gets_the_live_view(served, keyset):
    server, _, _ = served

    async def go() -> bytes:
        async with asyncssh.connect("127.0.0.1", server.port, username="cup", known_hosts=None,
                                    client_keys=[keyset["restrictpty"]]) as conn:
            proc = await conn.create_process(term_type="xterm", term_size=(80, 24), encoding=None)
            data = b""
            end = time.monotonic() + 30
            while b"\x1b[?1049h" not in data and time.monotonic() < end:
                data += await asyncio.wait_for(proc.stdout.read(65536), 30)
            proc.close()
            return data

    assert b"\x1b[?1049h" in asyncio.run(go())


def test_a_key_removed_from_the_file_ends_its_open_sessions(served, keyset):
    server, ak, cap = served

    async def go() -> tuple[bytes, float, int | None]:
        conn = await asyncssh.connect("127.0.0.1", server.port, username="cup", known_hosts=None,
                                      client_keys=[keyset["plain"]])
        other = await asyncssh.connect("127.0.0.1", server.port, username="cup", known_hosts=None,
                                       client_keys=[keyset["restrictpty"]])
        proc = await conn.create_process(term_type="xterm", term_size=(80, 24), encoding=None)
        data = b""
        while b"\x1b[?1049h" not in data:
            data += await asyncio.wait_for(proc.stdout.read(65536), 30)
        write_keys(keyset, [n for n in OPTIONS if n != "plain"], ak)
        t0 = time.monotonic()
        while True:
            chunk = await asyncio.wait_for(proc.stdout.read(65536), 10)
            if not chunk:
                break
            data += chunk
        took = time.monotonic() - t0
        await asyncio.wait_for(conn.wait_closed(), 10)
        # the other key's connection stays
        r = await other.run("standings")
        other.close()
        return data, took, r.exit_status

    data, took, other_rc = asyncio.run(go())
    assert took < 5.0, took
    assert b"aoe serve: your key is no longer authorized here" in data
    assert other_rc == 0
    fp = keyset["plain"].get_fingerprint()
    assert any(line.startswith("key revoked") and fp in line and "not in authorized_keys" in line for line in cap.lines)
    end = time.monotonic() + 5
    while server.session_count and time.monotonic() < end:
        time.sleep(0.1)
    assert server.session_count == 0 and not server.spectator_pids()


@pytest.mark.parametrize("flag", ["-t", "-tt"])
def test_a_client_that_gives_up_on_a_refused_pty_leaves_no_error(served, keyset, flag):
    """``ssh -t`` (what the README tells spectators) with a no-pty key: OpenSSH's client gives
    up on the refused PTY, as it does against sshd; the server logs no failed session and keeps
    no session."""
    server, _, cap = served
    argv = ["ssh", flag, "-p", str(server.port), "-i", str(keyset["dir"] / "nopty"), "-o", "IdentitiesOnly=yes",
            "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
            "-o", "LogLevel=ERROR", "cup@127.0.0.1"]
    master, slave = os.openpty()
    try:
        r = subprocess.run(argv, capture_output=True, timeout=60, stdin=slave, env=dict(os.environ, TERM="xterm"))
    finally:
        os.close(slave)
        os.close(master)
    assert b"PTY allocation request failed" in r.stderr, r
    end = time.monotonic() + 5
    while (server.session_count or not any(line.startswith("pty refused") for line in cap.lines)) \
            and time.monotonic() < end:
        time.sleep(0.1)
    time.sleep(1.0)  # what the session does after the client left
    assert not [line for line in cap.lines if "session failed" in line], cap.lines
    assert server.session_count == 0


def test_a_missing_file_ends_nobody_and_is_logged_once(served, keyset):
    """A rewrite that is not atomic (the file missing for a few seconds) keeps every open
    session and is logged once; the key's removal from the file put back still ends it."""
    server, ak, cap = served

    async def go() -> tuple[bytes, float]:
        conn = await asyncssh.connect("127.0.0.1", server.port, username="cup", known_hosts=None,
                                      client_keys=[keyset["plain"]])
        proc = await conn.create_process(term_type="xterm", term_size=(80, 24), encoding=None)
        data = b""
        while b"\x1b[?1049h" not in data:
            data += await asyncio.wait_for(proc.stdout.read(65536), 30)
        ak.unlink()
        end = time.monotonic() + 4  # four re-checks with the file missing
        while time.monotonic() < end:
            with pytest.raises(asyncio.TimeoutError):  # still open: no end of stream
                while True:
                    chunk = await asyncio.wait_for(proc.stdout.read(65536), 0.5)
                    assert chunk, "the session ended while the file was missing"
                    data += chunk
        write_keys(keyset, [n for n in OPTIONS if n != "plain"], ak)
        t0 = time.monotonic()
        while True:
            chunk = await asyncio.wait_for(proc.stdout.read(65536), 10)
            if not chunk:
                break
            data += chunk
        took = time.monotonic() - t0
        await asyncio.wait_for(conn.wait_closed(), 10)
        return data, took

    data, took = asyncio.run(go())
    skipped = [line for line in cap.lines if "re-check skipped" in line]
    assert len(skipped) == 1 and f"{ak}: missing" in skipped[0], cap.lines
    assert took < 5.0 and b"aoe serve: your key is no longer authorized here" in data
