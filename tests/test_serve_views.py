"""``aoe serve`` at scale (issue 16): spectators share view processes, start from a warm
zygote, and the seat cap turns one more away in one line while the others go on.

Real parts: an asyncssh client per spectator against the server on 127.0.0.1, a season
folder growing from the seed heat (:class:`~aoe_tui.testing.feeder.SeasonFeeder`), real
``aoe watch`` processes on real PTYs, screens rebuilt with ``pyte``.
"""

from __future__ import annotations

import asyncio
import time

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


def _proc_state(pid: int) -> tuple[str, int]:
    """``(state letter, utime + stime in clock ticks)`` of ``pid`` (``("gone", 0)`` once reaped)."""
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        return "gone", 0
    return fields[0], int(fields[11]) + int(fields[12])


async def _until(cond, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, f"timed out after {timeout:.0f} s waiting for {what}"
        await asyncio.sleep(0.05)


async def test_the_spare_view_sleeps_until_taken_then_shows_what_came_meanwhile(tmp_path, keys):
    """The spare view (a process drawn ahead with nobody watching) is stopped once drawn: a
    whole heat and the season's end go by without it using any CPU. The first spectator
    takes it: the same process, running again, shows the season as it is now; a new spare
    is stopped behind it; stopping the server ends both, the stopped one included."""
    feeder = SeasonFeeder(SEED, tmp_path / "season", speed=200.0, max_gap_s=0.05)
    feeder.prepare()
    t = start_server(feeder.out, keys, max_sessions=4)
    pids: list[int] = []
    conn = None
    try:
        views = t.server.views
        await _until(lambda: views.spare is not None and views.spare.paused, 60, "the spare to be drawn and stopped")
        spare = views.spare
        pid = spare.child.pid
        pids.append(pid)
        state, cpu = _proc_state(pid)
        assert state == "T", state
        feeder.start()
        await _until(feeder.done.is_set, 60, "the feeder to write the heat and the season's end")
        await asyncio.sleep(1.5)  # a running spectator would have tailed and drawn all of it by now
        assert _proc_state(pid) == ("T", cpu), "a stopped spare uses no CPU"
        conn = await connect(t.server.port, keys["spectator"])
        spec = await Spectator(conn, 80, 24).open()
        await spec.wait_for(lambda s: "finished" in s.split("attempt 1", 1)[-1].split("\n", 1)[0], 30,
                            "the season screen to show the attempt finished")
        assert t.server.spectator_pids() == [pid], "the spectator took the spare's process"
        assert _proc_state(pid)[0] != "T"
        await _until(lambda: views.spare is not None and views.spare is not spare and views.spare.paused, 60,
                     "a new spare, stopped")
        pids.append(views.spare.child.pid)
        assert _proc_state(pids[1])[0] == "T"
    finally:
        if conn is not None:
            conn.close()
        t.stop()
        feeder.stop()
    await _until(lambda: all(_proc_state(p)[0] in ("gone", "Z") for p in pids), 15,
                 f"the view processes {pids} to end with the server")


def _zygote_children(server) -> list[int]:
    """The view processes forked from the server's zygote (its children), spare included."""
    import subprocess

    z = server.zygote
    assert z is not None and z.proc is not None
    out = subprocess.run(["pgrep", "-P", str(z.proc.pid)], capture_output=True, text=True).stdout
    return sorted(int(p) for p in out.split())


async def test_the_spare_view_follows_the_newest_spectators_terminal_type(tmp_path, keys, server_log):
    """A ``screen`` spectator cannot take the ``xterm-256color`` spare: it gets a view of its
    own, and the spare is replaced by one for ``screen`` at its size (the old one ends: one
    spare at a time); the next ``screen`` spectator, at another size, takes that spare (the
    same process, resized), and the spare behind it is for ``screen`` at that size."""
    feeder = SeasonFeeder(SEED, tmp_path / "season", speed=1000.0)
    feeder.prepare()
    feeder.run()
    t = start_server(feeder.out, keys, max_sessions=4)
    conn = None
    try:
        views = t.server.views
        await _until(lambda: views.spare is not None and views.spare.paused, 60, "the first spare, stopped")
        first = views.spare
        assert first.key == ("xterm-256color", 80, 24, b"")
        conn = await connect(t.server.port, keys["spectator"])
        a = await Spectator(conn, 100, 30, term="screen").open()
        await a.wait_for(lambda s: "season" in s, 60, "the screen spectator's season screen")
        # a view forked for it runs the CLI in-process: nothing of Python's own on its terminal
        # (runpy's "found in sys.modules" RuntimeWarning was, before the full-screen view)
        assert b"Warning" not in a.raw and b"Traceback" not in a.raw, bytes(a.raw[:300])
        [a_pid] = t.server.spectator_pids()
        assert a_pid != first.child.pid, "a screen spectator cannot show an xterm-256color spare"
        await _until(lambda: views.spare is not None and views.spare is not first and views.spare.paused, 60,
                     "a new spare, stopped")
        second = views.spare
        assert second.key == ("screen", 100, 30, b"")
        # reaped, not only ended: a zombie is still the zygote's child (pgrep -P lists it)
        await _until(lambda: _proc_state(first.child.pid)[0] == "gone", 15, "the xterm spare to end, reaped")
        assert _zygote_children(t.server) == sorted([a_pid, second.child.pid]), "one view and one spare"
        assert any(f"view start pid={second.child.pid} (fork) term=screen size=100x30" in line
                   for line in server_log.lines), server_log.lines
        b = await Spectator(conn, 90, 28, term="screen").open()
        await b.wait_for(lambda s: "season" in s, 60, "the second screen spectator's season screen")
        assert sorted(t.server.spectator_pids()) == sorted([a_pid, second.child.pid]), "b took the screen spare"
        await _until(lambda: views.spare is not None and views.spare is not second and views.spare.paused, 60,
                     "the spare behind it, stopped")
        assert views.spare.key == ("screen", 90, 28, b"")
        assert _zygote_children(t.server) == sorted([a_pid, second.child.pid, views.spare.child.pid])
    finally:
        if conn is not None:
            conn.close()
        t.stop()
