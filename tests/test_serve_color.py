"""A spectator's colour depth follows what its SSH client says (issue 30, item 5).

The real OpenSSH client (``ssh -tt``, ``TERM`` set, ``-o SetEnv=…``) against a real ``aoe
serve`` on a finished season; the SGR colour parameters of its first screen are counted:
truecolor (``38;2;…``), 256 (``38;5;…``) and the 16 basic ones (30–37, 90–97 and their
backgrounds). :func:`aoe_tui.tui.driver.color_depth` is checked against this machine's
terminfo on its own.
"""

from __future__ import annotations

import os
import re
import select
import subprocess
import time
from pathlib import Path

import asyncssh
import pytest

from aoe_tui.serve.server import ServeConfig, ServerThread
from aoe_tui.serve.session import terminal_env, terminal_key
from aoe_tui.testing.feeder import SeasonFeeder
from aoe_tui.tui.driver import color_depth

REPO = Path(__file__).resolve().parent.parent
SEED = REPO / "tests" / "fixtures" / "seed" / "opencode-cup-2026-W37-r1-h2-a1.match.json"
_SGR = re.compile(rb"\x1b\[([\d;:]*)m")


def sgr_colours(data: bytes) -> dict[str, int]:
    """How many colours of each depth the SGR sequences in ``data`` set."""
    counts = {"truecolor": 0, "256": 0, "16": 0}
    for m in _SGR.finditer(data):
        params = [int(p) if p.isdigit() else 0 for p in re.split(rb"[;:]", m.group(1))] if m.group(1) else [0]
        i = 0
        while i < len(params):
            p = params[i]
            if p in (38, 48) and i + 1 < len(params):
                if params[i + 1] == 2:
                    counts["truecolor"] += 1
                    i += 5
                    continue
                if params[i + 1] == 5:
                    counts["256"] += 1
                    i += 3
                    continue
            if 30 <= p <= 37 or 40 <= p <= 47 or 90 <= p <= 97 or 100 <= p <= 107:
                counts["16"] += 1
            i += 1
    return counts


def test_color_depth_follows_term_colorterm_and_no_color():
    assert color_depth({"TERM": "xterm-256color"}) == "256"
    assert color_depth({"TERM": "xterm-256color", "COLORTERM": "truecolor"}) == "truecolor"
    assert color_depth({"TERM": "xterm-256color", "COLORTERM": "24bit"}) == "truecolor"
    assert color_depth({"TERM": "linux"}) == "16"
    assert color_depth({"TERM": "screen"}) == "16"
    assert color_depth({"TERM": "vt100"}) == "none"  # terminfo: no colours
    assert color_depth({"TERM": "dumb", "COLORTERM": "truecolor"}) == "none"
    assert color_depth({"TERM": "xterm-256color", "COLORTERM": "truecolor", "NO_COLOR": "1"}) == "none"
    assert color_depth({"TERM": "xterm-256color", "NO_COLOR": ""}) == "256"  # empty: not set (no-color.org)
    assert color_depth({"TERM": "nosuch-256color"}) == "256"  # unknown to terminfo: the name decides
    assert color_depth({"TERM": "nosuch"}) == "16"
    assert color_depth({"TERM": "nosuch-direct"}) == "truecolor"
    # the server keys views by the terminal and the colour variables its client sent
    key = terminal_key("xterm", {b"COLORTERM": b"truecolor", "NO_COLOR": "yes", "LANG": "C"})
    assert key == "xterm COLORTERM=truecolor NO_COLOR=1"
    assert terminal_env(key) == ("xterm", {"COLORTERM": "truecolor", "NO_COLOR": "1"})
    assert terminal_key("xterm", {"COLORTERM": "true color; rm"}) == "xterm"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = tmp_path_factory.mktemp("colour")
    key = asyncssh.generate_private_key("ssh-ed25519")
    key.write_private_key(str(d / "id"))
    (d / "id").chmod(0o600)
    (d / "authorized_keys").write_bytes(key.export_public_key())
    feeder = SeasonFeeder(SEED, d / "season", speed=1000.0)
    feeder.prepare()
    feeder.run()
    t = ServerThread(ServeConfig(season_dir=feeder.out, host_key=d / "host_key", authorized_keys=d / "authorized_keys",
                                 port=0))
    t.start()
    yield t.server, d / "id"
    t.stop()


def first_screen(port: int, key: Path, term: str, *setenv: str) -> bytes:
    """What ``ssh -tt`` with ``TERM=term`` and ``-o SetEnv="A=x B=y"`` receives up to the first whole
    screen (the footer's ``palette``)."""
    argv = ["ssh", "-tt", "-p", str(port), "-i", str(key), "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
            "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
            *(["-o", "SetEnv=" + " ".join(setenv)] if setenv else []), "cup@127.0.0.1"]  # one SetEnv: ssh keeps the first
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=dict(os.environ, TERM=term))
    out = b""
    try:
        end = time.monotonic() + 60
        while b"palette" not in out and time.monotonic() < end:
            ready, _, _ = select.select([proc.stdout], [], [], 1.0)
            if ready:
                chunk = os.read(proc.stdout.fileno(), 65536)
                if not chunk:
                    break
                out += chunk
    finally:
        proc.kill()
        proc.communicate()
    assert b"palette" in out, (term, setenv, out[-500:])
    return out


@pytest.mark.parametrize(("term", "setenv", "depth"), [
    ("xterm-256color", (), "256"),
    ("xterm-256color", ("COLORTERM=truecolor",), "truecolor"),
    ("linux", (), "16"),
    ("screen", (), "16"),
    ("vt100", (), "none"),
    ("dumb", (), "none"),
    ("xterm-256color", ("COLORTERM=truecolor", "NO_COLOR=1"), "none"),
])
def test_a_spectator_gets_the_colour_depth_its_client_says(server, term, setenv, depth):
    srv, key = server
    counts = sgr_colours(first_screen(srv.port, key, term, *setenv))
    others = {k: v for k, v in counts.items() if k != depth}
    assert not any(others.values()), (depth, counts)
    if depth != "none":
        assert counts[depth] > 20, (depth, counts)
