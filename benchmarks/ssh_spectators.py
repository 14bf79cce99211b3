"""Benchmark: 20 and 100 SSH spectators on a running season (issues 7 and 16).

Prints, honestly, what it measured on this machine:

0. **Join time of a lone spectator**: connect to first screen, three times in turn
   (target <= 1 s), once the server's warm zygote is ready (:mod:`aoe_tui.serve.zygote`;
   the zygote is made once when the server starts; its time is in the server's log).
1. **Referee tick lateness** of a real ``aoe run SEASON --headless`` (default
   ``seasons/demo.toml``, container territories) without spectators, then of a second
   run of the same season while ``aoe serve`` gives N spectators (default 20) the live
   TUI. Lateness of a tick = ``elapsed_ms`` of the first ``milestone_evaluation_started``
   of a territory in that tick minus the tick's scheduled start (``k * tick_ms``), for
   ticks the territory entered idle (its previous verifier result came before the
   tick). Target: p99 with spectators within +10 ms of p99 without.
2. **Update latency, season events**: during run 2, a poller (10 ms) stamps each new
   ``season.jsonl`` line; each client stamps when its text (``rRhHaA started`` /
   ``... finished``) first shows in its session's output. Target p95 <= 250 ms (issue 16).
   Also the **join time** of each of the N spectators connecting at once (connect to first
   screen; target p95 <= 3 s).
3. **Update latency, heat events**: a recorded heat (``tests/fixtures`` seed log) is
   appended to a fresh season folder at half its real pace by
   :class:`~aoe_tui.testing.feeder.SeasonFeeder` (write time known exactly); N clients
   open the heat screen and stamp when ``#<sequence>`` first shows. Events merged into
   an earlier line or scrolled away before a frame are not counted. Target p95 <= 250 ms.
4. **100 spectators** (``--hundred N``): a season run with N spectators; prints their
   join times, the referee's tick lateness (against part 1), the CPU of each part and the
   memory of the server and of its spectator processes (RSS, and PSS, which counts the
   pages the forked spectators share once). Once all N are on screen, spectator N + 1
   connects: the line the server's cap gives it is printed, and the N others' missed
   season events say whether anybody else noticed.

Update latencies count only events written after every client showed its first
screen; the time 20 spectators took to start is printed on its own line.

The SSH clients (asyncssh; each scans its session's output for the tokens, about 1 %
of a CPU for 20) stand in for spectators on other machines. They run in one child
process of this script at idle priority on the CPUs the spectators do not use (all
CPUs on a one-CPU machine; :mod:`aoe_tui.serve.placement`): like remote clients they
do not queue behind the spectators, and idle priority keeps them out of the runner's
way. Write times are stamped by this process.
Also printed: the CPU time each part used (runner and its verifiers, server,
spectators, clients), read from ``/proc/PID/stat`` of those processes only. While a
season runs, this process does the same in runs with and without spectators (polls
``season.jsonl`` every 10 ms, samples CPU every 0.5 s), so its own CPU use weighs on
both alike. (It used to scan all of ``/proc`` in the spectator runs only: about 50 ms
of CPU at normal priority every 0.5 s, which ``perf`` showed delaying the runner.)
The runner is started as a user would start it: its referee thread is real-time when
this runs as root (:mod:`aoe_tui.runtime.realtime`).

Usage: ``.venv/bin/python benchmarks/ssh_spectators.py [--sessions 20] [--season FILE]
[--runs 2] [--cpus LIST] [--priority idle|low|normal] [--skip-baseline] [--skip-season]
[--skip-feeder] [--skip-lone] [--hundred 100] [--term TERM]``. ``--runs`` alternates runs without and with spectators (a demo
season gives about 70 ticks, too few for a stable p99 from one run). Needs root,
systemd-nspawn and the guest image for the season runs (``--skip-baseline
--skip-season`` runs only part 3).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import asyncssh

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from aoe_tui.domain.display import sanitize_line  # noqa: E402
from aoe_tui.testing.feeder import SeasonFeeder  # noqa: E402
from aoe_tui.testing.lateness import pct, summary, tick_lateness  # noqa: E402

SEED = REPO / "tests" / "fixtures" / "seed" / "opencode-cup-2026-W37-r1-h2-a1.match.json"
#: priority of the SSH client process (``--clients-priority``): idle as in issue 7; on a machine
#: that other work keeps busy, idle clients are starved and measure their own wait
CLIENTS_PRIORITY = "idle"
#: the clients' terminal type (``--term``)
CLIENT_TERM = "xterm-256color"
#: update latency target (issue 16), ms
TARGET_MS = 250
#: where ``aoe serve`` puts its spectators (``--cpus`` / ``--priority``; default: its own default)
PLACEMENT = None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


TOKEN = re.compile(rb"r\d+h\d+a\d+ (?:started|finished)|#\d+\s")


class Client:
    """One spectator: a PTY session whose output is scanned as it arrives; stamps
    (monotonic s) the first sighting of each token (``#<sequence>`` on the heat screen,
    ``rRhHaA started|finished`` on the season screen). Textual writes each token as one
    run of text, so scanning the byte stream (with a carry-over for tokens split between
    two reads) sees what a terminal would show, at a fraction of a terminal emulator's
    cost."""

    def __init__(self) -> None:
        self.seen: dict[str, float] = {}
        self.words: set[str] = set()
        self._tail = b""
        self.proc = None
        #: seconds from connecting to the first screen (the season screen), or None
        self.join_s: float | None = None

    def on_data(self, data: bytes, watch: tuple[bytes, ...]) -> None:
        now = time.monotonic()
        chunk = self._tail + data
        for m in TOKEN.finditer(chunk):
            self.seen.setdefault(m.group(0).decode().strip(), now)
        for w in watch:
            if w in chunk:
                self.words.add(w.decode())
        self._tail = chunk[-48:]

    async def run(self, port: int, key: Path, stop: asyncio.Event, ready: asyncio.Event, open_heat: bool,
                  size: tuple[int, int] = (120, 40)) -> None:
        t0 = time.monotonic()
        async with asyncssh.connect("127.0.0.1", port, username="bench", client_keys=[str(key)],
                                    known_hosts=None) as conn:
            self.proc = await conn.create_process(term_type=CLIENT_TERM, term_size=size, encoding=None)
            want = "builder-one" if open_heat else "season"
            watch = (want.encode(), b"attempt 1", b"season")

            async def read() -> None:
                while True:
                    data = await self.proc.stdout.read(65536)
                    if not data:
                        return
                    self.on_data(data, watch)

            reader = asyncio.create_task(read())
            t_end = time.monotonic() + 180
            while want not in self.words and time.monotonic() < t_end:
                if self.join_s is None and ("season" in self.words or "attempt 1" in self.words):
                    self.join_s = time.monotonic() - t0
                if open_heat and "attempt 1" in self.words:
                    self.proc.stdin.write(b"\r")
                # like a person: Enter, then a look (2 s) before pressing again
                await asyncio.sleep(2.0 if open_heat and "attempt 1" in self.words else 0.02)
            if self.join_s is None and want in self.words:
                self.join_s = time.monotonic() - t0
            ready.set()
            await stop.wait()
            self.proc.close()
            reader.cancel()


async def clients_main(port: int, key: Path, sessions: int, open_heat: bool, distinct: bool = False) -> None:
    """The client process: start ``sessions`` clients, print ``ready`` once all show their
    first screen, run until a line arrives on stdin, then print the sightings as JSON."""
    from aoe_tui.serve.placement import Placement

    # like clients on other machines: they neither queue behind the spectators nor take the runner's CPU
    others = frozenset(os.sched_getaffinity(0)) - (PLACEMENT.cpus or frozenset())
    Placement(others or None, CLIENTS_PRIORITY).apply_to_self()
    clients = [Client() for _ in range(sessions)]
    stop = asyncio.Event()
    readies = [asyncio.Event() for _ in clients]
    # distinct: every client a terminal size of its own, so none shares a view (the worst case)
    sizes = [(100 + i % 50, 36 + i // 50) if distinct else (120, 40) for i in range(sessions)]
    tasks = [asyncio.create_task(c.run(port, key, stop, r, open_heat, sz))
             for c, r, sz in zip(clients, readies, sizes)]
    await asyncio.gather(*(r.wait() for r in readies))
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    print(json.dumps({"seen": [c.seen for c in clients], "join": [c.join_s for c in clients]}), flush=True)


class Clients:
    """The client child process seen from the benchmark (see :func:`clients_main`)."""

    def __init__(self, port: int, key: Path, sessions: int, open_heat: bool, distinct: bool = False) -> None:
        self.t_start = time.monotonic()
        self.proc = subprocess.Popen([sys.executable, __file__, "--clients", str(port), "--key", str(key),
                                      "--sessions", str(sessions), "--cpus", PLACEMENT.cpu_text,
                                      "--priority", PLACEMENT.priority, "--clients-priority", CLIENTS_PRIORITY,
                                      "--term", CLIENT_TERM]
                                     + (["--open-heat"] if open_heat else [])
                                     + (["--distinct"] if distinct else []),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO)
        self.t_ready: float | None = None
        threading.Thread(target=self._wait_ready, daemon=True).start()

    def _wait_ready(self) -> None:
        if self.proc.stdout.readline().strip() == "ready":
            self.t_ready = time.monotonic()

    def finish(self) -> list[dict[str, float]]:
        """Stop the clients; returns each one's sightings (``join_s`` then holds their
        seconds from connecting to the first screen)."""
        self.proc.stdin.write("stop\n")
        self.proc.stdin.flush()
        out = self.proc.stdout.readline()
        self.proc.wait(120)
        got = json.loads(out) if out.strip() else {"seen": [], "join": []}
        self.join_s = [j for j in got["join"] if j is not None]
        return got["seen"]


def _cpu(pid: int) -> tuple[float, float]:
    """(own, reaped children's) CPU seconds, user + system, of ``pid``; (0, 0) once it is gone."""
    try:
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0, 0.0
    hz = os.sysconf("SC_CLK_TCK")
    return (int(f[11]) + int(f[12])) / hz, (int(f[13]) + int(f[14])) / hz


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for t in tasks:
        try:
            out += [int(c) for c in Path(f"/proc/{pid}/task/{t}/children").read_text().split()]
        except OSError:
            pass
    return out


def _tree(pid: int) -> list[int]:
    """``pid``'s descendants (children first)."""
    out: list[int] = []
    todo = _children(pid)
    while todo:
        c = todo.pop()
        out.append(c)
        todo += _children(c)
    return out


def _mem_kb(pid: int) -> tuple[int, int]:
    """(RSS, PSS) of ``pid`` in KiB (PSS splits shared pages among their sharers); (0, 0) once gone."""
    rss = pss = 0
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Rss:"):
                rss = int(line.split()[1])
            elif line.startswith("Pss:"):
                pss = int(line.split()[1])
    except OSError:
        pass
    return rss, pss


def memory_line(serve_pid: int) -> str:
    """Memory of ``aoe serve`` itself and of its spectators (the warm zygote and every
    spectator process: RSS summed, and PSS summed, which counts the pages they share
    through ``fork`` once)."""
    own = _mem_kb(serve_pid)
    kids = [_mem_kb(p) for p in _tree(serve_pid)]
    n = max(1, len(kids))
    rss, pss = sum(k[0] for k in kids), sum(k[1] for k in kids)
    return (f"memory: server RSS {own[0] / 1024:.0f} MiB; spectators ({len(kids)} processes incl. the zygote) "
            f"RSS {rss / 1024:.0f} MiB summed, PSS {pss / 1024:.0f} MiB ({pss / 1024 / n:.1f} MiB each)")


class Parts:
    """The processes whose CPU time is reported, by PID. Reading a few ``/proc/PID/stat``
    files costs well under a millisecond; scanning all of ``/proc`` (as this benchmark did
    before) cost about 50 ms of CPU at normal priority every sample, enough to delay the
    runner it measures (seen with ``perf sched``)."""

    def __init__(self) -> None:
        self.runner: int | None = None
        self.serve: int | None = None
        self.clients: int | None = None

    def cpu_seconds(self) -> dict[str, float]:
        """CPU seconds by part: runner (and its reaped children: verifiers, agents),
        server (``aoe serve`` itself), spectators (the server's children, live and reaped),
        clients (the SSH client process)."""
        out: dict[str, float] = {}
        if self.runner:
            out["runner"] = sum(_cpu(self.runner))
        if self.serve:
            own, reaped = _cpu(self.serve)
            out["server"] = own
            # the zygote's reaped children are in its own reaped time; live ones are read each
            out["spectators"] = reaped + sum(sum(_cpu(c)) if c in direct else _cpu(c)[0]
                                             for direct in [set(_children(self.serve))]
                                             for c in _tree(self.serve))
        if self.clients:
            out["clients"] = sum(_cpu(self.clients))
        return out


def cpu_line(before: dict[str, float], after: dict[str, float], seconds: float) -> str:
    parts = [f"{k} {after.get(k, 0) - before.get(k, 0):.0f} s ({(after.get(k, 0) - before.get(k, 0)) / seconds:.0%} of a CPU)"
             for k in ("runner", "server", "spectators", "clients") if k in after or k in before]
    return f"CPU over {seconds:.0f} s: " + ", ".join(parts)


def make_keys(d: Path) -> tuple[Path, Path]:
    key = asyncssh.generate_private_key("ssh-ed25519")
    key.write_private_key(str(d / "client"))
    (d / "authorized_keys").write_bytes(key.export_public_key())
    return d / "client", d / "authorized_keys"


def start_serve(season: Path, port: int, auth: Path, tmp: Path, sessions: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "aoe_tui.cli", "serve", str(season), "--port", str(port),
                             "--host-key", str(tmp / "host_key"), "--authorized-keys", str(auth),
                             "--max-sessions", str(sessions), "--max-per-address", str(sessions + 2),
                             "--cpus", PLACEMENT.cpu_text, "--priority", PLACEMENT.priority],
                            stderr=open(tmp / f"serve-{port}.log", "w"), cwd=REPO)
    end = time.monotonic() + 20
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    else:
        raise SystemExit(f"aoe serve did not listen on {port}; see {tmp}/serve-{port}.log")
    # the warm zygote is made once, when the server starts (a server's start-up, not a join)
    end = time.monotonic() + 120
    while time.monotonic() < end and "spectator zygote ready" not in (tmp / f"serve-{port}.log").read_text():
        time.sleep(0.1)
    return proc


def run_season(season_file: Path, out: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "aoe_tui.cli", "run", str(season_file), "--headless",
                             "--output", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, cwd=REPO)


def season_markers(rec: dict) -> str | None:
    if rec["kind"] in ("attempt_started", "attempt_finished"):
        verb = "started" if rec["kind"] == "attempt_started" else "finished"
        return f"r{rec['round']}h{rec['heat']}a{rec['attempt']} {verb}"
    return None


def observe(runner: subprocess.Popen, out: Path, parts: Parts) -> tuple[dict[str, float], str]:
    """What this process does while a season runs, the same with and without spectators
    (so its own CPU use weighs on both runs alike): every 10 ms, stamp (monotonic s) new
    ``season.jsonl`` markers; every 0.5 s, sample CPU (the last sample before the runner
    exits still holds its reaped verifiers). Returns the stamps and the CPU line."""
    written: dict[str, float] = {}
    offset = 0
    cpu0, t0 = parts.cpu_seconds(), time.monotonic()
    cpu1, sampled = cpu0, t0
    while runner.poll() is None:
        with open(out / "season.jsonl", "rb") as fh:
            fh.seek(offset)
            raw = fh.read()
        cut = raw.rfind(b"\n") + 1
        now = time.monotonic()
        for line in raw[:cut].splitlines():
            m = season_markers(json.loads(line))
            if m:
                written.setdefault(m, now)
        offset += cut
        if now - sampled >= 0.5:
            cpu1, sampled = parts.cpu_seconds(), now
        time.sleep(0.01)
    return written, cpu_line(cpu0, cpu1, sampled - t0)


def start_season(season: Path, out: Path) -> subprocess.Popen:
    """``aoe run SEASON --headless``, returned once its ``season.jsonl`` exists."""
    runner = run_season(season, out)
    while not (out / "season.jsonl").is_file():
        if runner.poll() is not None:
            raise SystemExit("aoe run exited before writing season.jsonl")
        time.sleep(0.1)
    return runner


class MemorySampler:
    """Samples :func:`memory_line` of the server once every client shows its first screen
    (and 5 s later, the line kept is the later one: spectators have settled)."""

    def __init__(self, clients: Clients, serve_pid: int) -> None:
        self.line = "memory: not sampled (the spectators never all showed their screen)"
        self._clients, self._pid = clients, serve_pid
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        end = time.monotonic() + 300
        while self._clients.t_ready is None and time.monotonic() < end:
            time.sleep(0.2)
        if self._clients.t_ready is not None:
            self.line = memory_line(self._pid) + " (all on screen)"
            time.sleep(5)
            self.line = memory_line(self._pid) + " (all on screen, 5 s later)"


def slowest_events(by_event: dict[str, float], n: int = 4) -> str:
    """``by_event``: season marker -> median update latency over the spectators (ms). Names
    the slowest ``n``: a heat's start (its territories boot) or finish (teardown, the next
    heat's boot) tells where a spectator waited."""
    worst = sorted(by_event.items(), key=lambda kv: -kv[1])[:n]
    return ("slowest season events (median over spectators): "
            + (", ".join(f"{m} {ms:.0f} ms" for m, ms in worst) or "none"))


async def one_more(port: int, key: Path) -> tuple[str, float]:
    """Connect one more spectator than the server's cap and read what it is told (its
    session's stderr, then stdout) until the server ends the session (at most 15 s).
    Returns ``(text without escape sequences, seconds from connecting to the end)``."""
    t0 = time.monotonic()
    async with asyncssh.connect("127.0.0.1", port, username="bench", client_keys=[str(key)],
                                known_hosts=None) as conn:
        proc = await conn.create_process(term_type=CLIENT_TERM, term_size=(120, 40), encoding=None)
        data = b""

        async def drain(stream) -> bytes:
            got = b""
            while chunk := await stream.read(65536):
                got += chunk
            return got

        try:
            async with asyncio.timeout(15):
                # the server's reason comes on the session's stderr (aoe_tui/serve/seats.py)
                data = b"".join(await asyncio.gather(drain(proc.stderr), drain(proc.stdout)))
        except TimeoutError:
            proc.close()
    return sanitize_line(data, limit=400, collapse=True), time.monotonic() - t0


def spectate_season(args, tmp: Path, key: Path, auth: Path, run: int, sessions: int | None = None,
                    distinct: bool = False, probe: bool = False) -> dict:
    """A season run with ``sessions`` spectators (default ``--sessions``). Returns tick lateness
    (``ticks``), update latencies (``lat``, ms), ``missed`` sightings, ``ready_s`` (all on
    screen), per-client ``join`` seconds and the ``memory`` line; with ``probe``, also
    ``refused``: what one spectator over the cap (``sessions`` + 1, connecting once all are
    on screen) was told, and in how many seconds (:func:`one_more`)."""
    sessions = sessions or args.sessions
    out = tmp / f"with-{sessions}-spectators-{run}{'-distinct' if distinct else ''}"
    runner = start_season(args.season, out)
    port = free_port()
    serve = start_serve(out, port, auth, tmp, sessions)
    clients = Clients(port, key, sessions, open_heat=False, distinct=distinct)
    refused: list[tuple[str, float]] = []

    def probe_over_the_cap() -> None:
        end = time.monotonic() + 300
        while clients.t_ready is None and time.monotonic() < end:
            time.sleep(0.1)
        if clients.t_ready is not None:
            try:
                refused.append(asyncio.run(one_more(port, key)))
            except (OSError, asyncssh.Error) as exc:
                refused.append((f"connection failed: {exc}", 0.0))

    prober = threading.Thread(target=probe_over_the_cap, daemon=True) if probe else None
    if prober is not None:
        prober.start()
    mem = MemorySampler(clients, serve.pid)
    parts = Parts()
    parts.runner, parts.serve, parts.clients = runner.pid, serve.pid, clients.proc.pid
    written, cpu = observe(runner, out, parts)
    time.sleep(2)
    seen = clients.finish()
    serve.send_signal(signal.SIGTERM)
    serve.wait(60)
    print("    " + cpu)
    print("    " + mem.line)
    ready = clients.t_ready
    fresh = {m: t for m, t in written.items() if ready is not None and t >= ready}
    lat = [(c[m] - t) * 1000 for c in seen for m, t in fresh.items() if m in c]
    missed = sum(1 for c in seen for m in fresh if m not in c)
    by_event = {m: statistics.median([(c[m] - t) * 1000 for c in seen if m in c])
                for m, t in fresh.items() if any(m in c for c in seen)}
    if prober is not None:
        prober.join(30)
    return {"ticks": tick_lateness(out), "lat": lat, "missed": missed, "by_event": by_event,
            "ready_s": (ready - clients.t_start) if ready else None, "join": clients.join_s,
            "refused": refused[0] if refused else None}


def lone_joins(args, tmp: Path, key: Path, auth: Path, times: int = 3) -> list[float]:
    """Seconds to the first screen of one spectator joining alone, ``times`` times in turn,
    on a finished (fed) season, once the server's zygote is warm."""
    feeder = SeasonFeeder(SEED, tmp / "lone", speed=1000.0)
    feeder.prepare()
    feeder.run()
    port = free_port()
    serve = start_serve(feeder.out, port, auth, tmp, 4)
    out: list[float] = []
    for _ in range(times):
        clients = Clients(port, key, 1, open_heat=False)
        end = time.monotonic() + 60
        while clients.t_ready is None and time.monotonic() < end:
            time.sleep(0.05)
        clients.finish()
        out += clients.join_s
    serve.send_signal(signal.SIGTERM)
    serve.wait(30)
    return out


def spectate_feeder(args, tmp: Path, key: Path, auth: Path) -> tuple[list[float], int, float | None]:
    feeder = SeasonFeeder(SEED, tmp / "fed", speed=0.5, max_gap_s=5.0)
    feeder.prepare()
    port = free_port()
    serve = start_serve(feeder.out, port, auth, tmp, args.sessions)
    feeder.start()  # the heat must be running before a spectator can open it
    clients = Clients(port, key, args.sessions, open_heat=True)
    parts = Parts()
    parts.serve, parts.clients = serve.pid, clients.proc.pid
    while clients.t_ready is None and not feeder.done.is_set():
        time.sleep(0.1)
    cpu0, t0 = parts.cpu_seconds(), time.monotonic()  # from the moment every client is on the heat
    cpu1, t1 = cpu0, t0
    while not feeder.done.is_set():
        cpu1, t1 = parts.cpu_seconds(), time.monotonic()
        time.sleep(0.5)
    time.sleep(2)
    seen = clients.finish()
    serve.send_signal(signal.SIGTERM)
    serve.wait(30)
    print("    " + cpu_line(cpu0, cpu1, t1 - t0))
    ready = clients.t_ready
    fresh = {f"#{s}": t for s, t in feeder.written.items() if ready is not None and t >= ready}
    lat = [(c[s] - t) * 1000 for c in seen for s, t in fresh.items() if s in c]
    print("    " + summary("join time, season screen (connect -> first screen)", [j * 1000 for j in clients.join_s]))
    return lat, len(fresh), (ready - clients.t_start) if ready else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=20)
    ap.add_argument("--season", type=Path, default=REPO / "seasons" / "demo.toml")
    ap.add_argument("--runs", type=int, default=2, help="season runs without and with spectators (default 2)")
    ap.add_argument("--skip-baseline", action="store_true")
    ap.add_argument("--skip-season", action="store_true")
    ap.add_argument("--skip-feeder", action="store_true")
    ap.add_argument("--skip-lone", action="store_true")
    ap.add_argument("--hundred", type=int, default=100, metavar="N",
                    help="then a season with N spectators: memory, CPU, tick lateness (0 skips it; default 100)")
    ap.add_argument("--cpus", default=None, help="aoe serve --cpus (default: its default)")
    ap.add_argument("--priority", default="idle", help="aoe serve --priority (default idle)")
    ap.add_argument("--clients-priority", default="idle", choices=("idle", "low", "normal"),
                    help="priority of the SSH clients' process (default idle; normal on a machine other work "
                         "keeps busy, where idle clients are starved and measure their own wait)")
    ap.add_argument("--term", default="xterm-256color",
                    help="the spectators' terminal type (default xterm-256color; e.g. screen, tmux-256color)")
    ap.add_argument("--clients", type=int, default=None, metavar="PORT", help=argparse.SUPPRESS)
    ap.add_argument("--key", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--open-heat", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--distinct", action="store_true",
                    help="part 4 only: every spectator a terminal size of its own (no shared views, the worst case)")
    args = ap.parse_args()
    global PLACEMENT, CLIENTS_PRIORITY, CLIENT_TERM
    from aoe_tui.serve.placement import Placement, default_cpus, parse_cpus

    PLACEMENT = Placement(default_cpus() if args.cpus is None else parse_cpus(args.cpus), args.priority)
    CLIENTS_PRIORITY = args.clients_priority
    CLIENT_TERM = args.term
    if args.clients is not None:
        asyncio.run(clients_main(args.clients, args.key, args.sessions, args.open_heat, args.distinct))
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="aoe-ssh-bench-"))
    key, auth = make_keys(tmp)
    print(f"ssh spectators benchmark: {args.sessions} sessions, {os.cpu_count()} cores, "
          f"spectators on {PLACEMENT.describe()}, clients at {CLIENTS_PRIORITY} priority, TERM={CLIENT_TERM}, "
          f"load average {os.getloadavg()[0]:.1f}, work dir {tmp}", flush=True)
    if not args.skip_lone:
        joins = lone_joins(args, tmp, key, auth)
        print("[0] one spectator joining alone, 3 times: " + ", ".join(f"{j * 1000:.0f} ms" for j in joins)
              + f" (target <= 1000 ms: {'OK' if joins and max(joins) <= 1.0 else 'MISSED'})", flush=True)
    base: list[float] = []
    with_spec: list[float] = []
    lat: list[float] = []
    joins: list[float] = []
    missed = 0
    for run in range(1, args.runs + 1):  # alternate, so drift of the machine hits both alike
        if not args.skip_baseline:
            t = time.monotonic()
            r = start_season(args.season, tmp / f"baseline-{run}")
            parts = Parts()
            parts.runner = r.pid
            _, cpu = observe(r, tmp / f"baseline-{run}", parts)
            got = tick_lateness(tmp / f"baseline-{run}")
            base += got
            print(f"[1.{run}] season without spectators ({time.monotonic() - t:.0f} s, exit {r.wait()})")
            print("    " + cpu)
            print("    " + summary("tick lateness", got), flush=True)
        if not args.skip_season:
            t = time.monotonic()
            print(f"[2.{run}] season with {args.sessions} spectators")
            res = spectate_season(args, tmp, key, auth, run)
            with_spec += res["ticks"]
            lat += res["lat"]
            missed += res["missed"]
            joins += res["join"]
            print(f"    {time.monotonic() - t:.0f} s; "
                  + (f"{res['ready_s']:.1f} s until all {args.sessions} showed the season" if res["ready_s"] is not None
                     else "the spectators never all showed the season"))
            print("    " + summary("join time (connect -> first screen)", [j * 1000 for j in res["join"]]))
            print("    " + summary("tick lateness", res["ticks"]), flush=True)
            print("    " + slowest_events(res["by_event"]), flush=True)
    if args.runs > 1 or (base and with_spec):
        print(f"[1+2] all {args.runs} run(s)")
        if base:
            print("    " + summary("tick lateness without spectators", base))
        if with_spec:
            print("    " + summary(f"tick lateness with {args.sessions} spectators", with_spec))
        if base and with_spec:
            d = pct(with_spec, 99) - pct(base, 99)
            print(f"    p99 tick lateness change: {d:+.0f} ms (target <= +10 ms): {'OK' if d <= 10 else 'MISSED'}")
    if not args.skip_season:
        print("    " + summary("update latency, season events after all were on screen "
                               "(season.jsonl -> client screen)", lat))
        print(f"    season-event sightings missed (not on screen before the season ended): {missed}")
        if lat:
            print(f"    p95 target <= {TARGET_MS} ms: {'OK' if pct(lat, 95) <= TARGET_MS else 'MISSED'}", flush=True)
        if joins:
            print("    " + summary(f"join time, {args.sessions} connecting at once", [j * 1000 for j in joins])
                  + f"; p95 target <= 3000 ms: {'OK' if pct(joins, 95) <= 3.0 else 'MISSED'}", flush=True)
    if not args.skip_feeder:
        print(f"[3] recorded heat replayed at half pace to {args.sessions} heat screens")
        lat, n, ready_s = spectate_feeder(args, tmp, key, auth)
        print(f"    {n} events written after all were on it "
              + (f"({ready_s:.1f} s until all {args.sessions} showed the heat)" if ready_s is not None
                 else "(the spectators never all showed the heat)"))
        print("    " + summary("update latency, heat events (events.jsonl -> client screen)", lat))
        if lat:
            print(f"    p95 target <= {TARGET_MS} ms: {'OK' if pct(lat, 95) <= TARGET_MS else 'MISSED'}")
    if args.hundred:
        t = time.monotonic()
        print(f"[4] season with {args.hundred} spectators"
              + (", each a terminal size of its own (a view each)" if args.distinct else ", one terminal size"))
        res = spectate_season(args, tmp, key, auth, 1, sessions=args.hundred, distinct=args.distinct, probe=True)
        print(f"    {time.monotonic() - t:.0f} s; "
              + (f"{res['ready_s']:.1f} s until all {args.hundred} showed the season" if res["ready_s"] is not None
                 else "the spectators never all showed the season"))
        print("    " + summary("join time (connect -> first screen)", [j * 1000 for j in res["join"]]))
        print("    " + summary(f"tick lateness with {args.hundred} spectators", res["ticks"]))
        if base:
            d = pct(res["ticks"], 99) - pct(base, 99)
            print(f"    p99 tick lateness change against the runs without spectators: {d:+.0f} ms")
        print("    " + summary("update latency, season events", res["lat"]) + f"; missed {res['missed']}", flush=True)
        print("    " + slowest_events(res["by_event"]), flush=True)
        if res["refused"] is None:
            print(f"    spectator {args.hundred + 1}: not tried (the {args.hundred} never all showed the season)")
        else:
            said, secs = res["refused"]
            print(f"    spectator {args.hundred + 1}, once all {args.hundred} were on screen: told {said!r} "
                  f"and let go in {secs * 1000:.0f} ms; the {args.hundred} others missed {res['missed']} "
                  "season events", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
