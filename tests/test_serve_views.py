"""``aoe serve`` at scale (issue 16): spectators share view processes, start from a warm
zygote, and the seat cap turns one more away in one line while the others go on.

Real parts: an asyncssh client per spectator against the server on 127.0.0.1, a season
folder growing from the seed heat (:class:`~aoe_tui.testing.feeder.SeasonFeeder`), real
``aoe watch`` processes on real PTYs, screens rebuilt with ``pyte``.
"""

from __future__ import annotations

import asyncio

import asyncssh
from test_serve_ssh import SEED, TERRITORIES, Spectator, clock_s, connect, start_server
from test_serve_ssh import keys as keys  # noqa: F401 (the fixture)
from test_serve_ssh import server_log as server_log  # noqa: F401 (the fixture)

from aoe_tui.serve.views import is_passive_input
from aoe_tui.testing.feeder import SeasonFeeder


def test_terminal_chatter_is_passive_and_keys_are_not():
    assert is_passive_input(b"\x1b[<35;10;5M\x1b[<35;11;5M")  # pointer motion
    assert is_passive_input(b"\x1b[?64;1;2c\x1b[12;40R\x1b[?2026;2$y")  # DA, CPR, DECRPM replies
    assert is_passive_input(b"\x1b]11;rgb:0000/0000/0000\x1b\\")  # a colour reply
    for active in (b"\r", b"q", b"\x1b[A", b"\x1b[<0;10;5M", b"\x1b[<35;10;5Mx", b""):
        assert not is_passive_input(active), active


async def test_shared_views_a_key_moves_one_session_and_the_cap_refuses_one_more(tmp_path, keys, server_log):
    """Three spectators of one terminal size share one process (joiners get the whole
    screen); one pressing Enter moves alone to its own heat screen; a fourth is told in one
    line that every seat is taken, and the three others' screens keep following the heat."""
    feeder = SeasonFeeder(SEED, tmp_path / "season", speed=2.0)
    feeder.prepare()
    t = start_server(feeder.out, keys, max_sessions=3, max_per_address=8)
    feeder.start()
    conns: list[asyncssh.SSHClientConnection] = []
    try:
        port = t.server.port
        specs = []
        for _ in range(3):
            conns.append(await connect(port, keys["spectator"]))
            spec = await Spectator(conns[-1]).open()
            await spec.wait_for(lambda s: "attempt 1" in s, 30, "the season screen")
            specs.append(spec)
        assert len(t.server.spectator_pids()) == 1, "three 120x36 spectators share one view process"
        assert any("(fork)" in line and "session start" in line for line in server_log.lines), server_log.lines
        a, b, c = specs
        await a.open_heat()  # Enter: a moves to a view of its own; b and c stay on the season
        await a.wait_for(lambda s: clock_s(s) is not None, 15, "a's heat clock")
        assert len(t.server.spectator_pids()) == 2
        assert all(n not in b.text() for n in TERRITORIES) and "attempt 1" in b.text()
        # the cap: a fourth spectator is refused with one line; nobody else notices
        conns.append(await connect(port, keys["spectator"]))
        fourth = await conns[-1].create_process(term_type="xterm-256color", term_size=(120, 36), encoding=None)
        err = await asyncio.wait_for(fourth.stderr.read(), 10)
        await fourth.wait_closed()
        assert fourth.exit_status == 1 and err.count(b"\n") == 1 and b"all 3 spectator seats are taken" in err, err
        before = clock_s(a.text())
        await a.wait_for(lambda s: (clock_s(s) or 0) > (before or 0), 20, "a's heat clock to move on")
        await b.wait_for(lambda s: "finished" in s.split("attempt 1", 1)[-1].split("\n", 1)[0], 60,
                         "b's season screen to show the attempt finished")
        await c.wait_for(lambda s: s == b.text(), 10, "c to show what b shows")
        assert t.server.session_count == 3
    finally:
        for conn in conns:
            conn.close()
        t.stop()
        feeder.stop()
