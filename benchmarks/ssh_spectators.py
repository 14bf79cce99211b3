"""Benchmark: 20 SSH spectators on a running season (issue 7).

Prints, honestly, what it measured on this machine:

1. **Referee tick lateness** of a real ``aoe run SEASON --headless`` (default
   ``seasons/demo.toml``, container territories) without spectators, then of a second
   run of the same season while ``aoe serve`` gives N spectators (default 20) the live
   TUI. Lateness of a tick = ``elapsed_ms`` of the first ``milestone_evaluation_started``
   of a territory in that tick minus the tick's scheduled start (``k * tick_ms``), for
   ticks the territory entered idle (its previous verifier result came before the
   tick). Target: p99 with spectators within +10 ms of p99 without.
2. **Update latency, season events**: during run 2, a poller (10 ms) stamps each new
   ``season.jsonl`` line; each client stamps when its text (``rRhHaA started`` /
   ``... finished``) first shows on its pyte screen. Target p95 <= 1 s.
3. **Update latency, heat events**: a recorded heat (``../shared`` seed log) is
   appended to a fresh season folder at half its real pace by
   :class:`~aoe_tui.serve.feeder.SeasonFeeder` (write time known exactly); N clients
   open the heat screen and stamp when ``#<sequence>`` first shows. Events merged into
   an earlier line or scrolled away before a frame are not counted.

The SSH clients (asyncssh + pyte) run in this process, on the same 2 cores as the
runner and the server: the figures include their cost.

Usage: ``.venv/bin/python benchmarks/ssh_spectators.py [--sessions 20] [--season FILE]
[--skip-baseline] [--skip-season] [--skip-feeder]``. Needs root + systemd-nspawn and the
guest image for the season runs (``--skip-baseline --skip-season`` runs only part 3).
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
import pyte

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from aoe_tui.serve.feeder import SeasonFeeder  # noqa: E402

SEED = REPO.parent / "shared" / "fixtures" / "seed" / "opencode-cup-2026-W37-r1-h2-a1.match.json"
SEQ = re.compile(rb"#(\d+)\s")


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, max(0, round(p / 100 * (len(v) - 1))))]


def summary(name: str, values: list[float], unit: str = "ms") -> str:
    if not values:
        return f"{name}: no samples"
    return (f"{name}: n={len(values)} p50={pct(values, 50):.0f}{unit} p95={pct(values, 95):.0f}{unit} "
            f"p99={pct(values, 99):.0f}{unit} max={max(values):.0f}{unit} mean={statistics.mean(values):.0f}{unit}")


def tick_lateness(season_dir: Path) -> list[float]:
    """Lateness (ms) of idle-entered territory ticks over every heat log under ``season_dir``."""
    out: list[float] = []
    for log in sorted(season_dir.glob("round-*/heat-*/attempt-*/events.jsonl")):
        arena = json.loads((log.parent / "arena.json").read_text())
        tick = int(arena["rules"]["tick_ms"])
        last_result: dict[str, int] = {}
        counted: set[tuple[str, int]] = set()
        for line in log.read_text().splitlines():
            r = json.loads(line)
            kind, t, terr = r["kind"], r["elapsed_ms"], r.get("territory")
            if kind in ("milestone_passed", "milestone_failed"):
                last_result[terr] = t
            elif kind == "milestone_evaluation_started":
                k = t // tick
                if k >= 1 and (terr, k) not in counted and last_result.get(terr, -1) < k * tick:
                    counted.add((terr, k))
                    out.append(t - k * tick)
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Client:
    """One spectator: PTY session fed through pyte; stamps when marker strings first appear."""

    def __init__(self, cols: int = 120, rows: int = 40) -> None:
        self.screen = pyte.Screen(cols, rows)
        self.stream = pyte.ByteStream(self.screen)
        self.seen_text: dict[str, float] = {}
        self.seen_seq: dict[int, float] = {}
        self.watch_text: set[str] = set()
        self.proc = None

    def on_frame(self) -> None:
        now = time.monotonic()
        text = "\n".join(self.screen.display)
        for w in list(self.watch_text):
            if w in text and w not in self.seen_text:
                self.seen_text[w] = now
        for m in SEQ.finditer(text.encode()):
            self.seen_seq.setdefault(int(m.group(1)), now)

    async def run(self, port: int, key: Path, stop: asyncio.Event, open_heat: bool) -> None:
        async with asyncssh.connect("127.0.0.1", port, username="bench", client_keys=[str(key)],
                                    known_hosts=None) as conn:
            self.proc = await conn.create_process(term_type="xterm-256color", term_size=(120, 40), encoding=None)

            async def read() -> None:
                while True:
                    data = await self.proc.stdout.read(65536)
                    if not data:
                        return
                    self.stream.feed(data)
                    self.on_frame()

            reader = asyncio.create_task(read())
            if open_heat:
                t_end = time.monotonic() + 60
                while "builder-one" not in "\n".join(self.screen.display) and time.monotonic() < t_end:
                    if "attempt 1" in "\n".join(self.screen.display):
                        self.proc.stdin.write(b"\r")
                    await asyncio.sleep(0.5)
            await stop.wait()
            self.proc.close()
            reader.cancel()


def make_keys(d: Path) -> tuple[Path, Path]:
    key = asyncssh.generate_private_key("ssh-ed25519")
    key.write_private_key(str(d / "client"))
    (d / "authorized_keys").write_bytes(key.export_public_key())
    return d / "client", d / "authorized_keys"


def start_serve(season: Path, port: int, auth: Path, tmp: Path, sessions: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "aoe_tui.cli", "serve", str(season), "--port", str(port),
                             "--host-key", str(tmp / "host_key"), "--authorized-keys", str(auth),
                             "--max-sessions", str(sessions), "--max-per-address", str(sessions + 2)],
                            stderr=open(tmp / f"serve-{port}.log", "w"), cwd=REPO)
    end = time.monotonic() + 20
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return proc
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"aoe serve did not listen on {port}; see {tmp}/serve-{port}.log")


def run_season(season_file: Path, out: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "aoe_tui.cli", "run", str(season_file), "--headless",
                             "--output", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, cwd=REPO)


def season_markers(rec: dict) -> str | None:
    if rec["kind"] in ("attempt_started", "attempt_finished"):
        verb = "started" if rec["kind"] == "attempt_started" else "finished"
        return f"r{rec['round']}h{rec['heat']}a{rec['attempt']} {verb}"
    return None


async def spectate_season(args, tmp: Path, key: Path, auth: Path) -> tuple[list[float], list[float], int]:
    out = tmp / "with-spectators"
    runner = run_season(args.season, out)
    while not (out / "season.jsonl").is_file():
        if runner.poll() is not None:
            raise SystemExit("aoe run exited before writing season.jsonl")
        await asyncio.sleep(0.1)
    port = free_port()
    serve = start_serve(out, port, auth, tmp, args.sessions)
    written: dict[str, float] = {}
    clients = [Client() for _ in range(args.sessions)]
    done = threading.Event()

    def poll() -> None:
        offset = 0
        while not done.is_set():
            with open(out / "season.jsonl", "rb") as fh:
                fh.seek(offset)
                raw = fh.read()
            cut = raw.rfind(b"\n") + 1
            now = time.monotonic()
            for line in raw[:cut].splitlines():
                m = season_markers(json.loads(line))
                if m:
                    written.setdefault(m, now)
                    for c in clients:
                        c.watch_text.add(m)
            offset += cut
            time.sleep(0.01)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    stop = asyncio.Event()
    tasks = [asyncio.create_task(c.run(port, key, stop, open_heat=False)) for c in clients]
    while runner.poll() is None:
        await asyncio.sleep(0.5)
    await asyncio.sleep(2)
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    done.set()
    serve.send_signal(signal.SIGTERM)
    serve.wait(30)
    lat = [(c.seen_text[m] - t) * 1000 for c in clients for m, t in written.items() if m in c.seen_text]
    missed = sum(1 for c in clients for m in written if m not in c.seen_text)
    return tick_lateness(out), lat, missed


async def spectate_feeder(args, tmp: Path, key: Path, auth: Path) -> tuple[list[float], int, float]:
    feeder = SeasonFeeder(SEED, tmp / "fed", speed=0.5, max_gap_s=5.0)
    feeder.prepare()
    port = free_port()
    serve = start_serve(feeder.out, port, auth, tmp, args.sessions)
    feeder.start()  # the heat must be running before a spectator can open it
    clients = [Client() for _ in range(args.sessions)]
    stop = asyncio.Event()
    t_start = time.monotonic()
    tasks = [asyncio.create_task(c.run(port, key, stop, open_heat=True)) for c in clients]

    def on_heat() -> int:
        return sum("builder-one" in "\n".join(c.screen.display) for c in clients)

    while on_heat() < len(clients) and not feeder.done.is_set():
        await asyncio.sleep(0.2)
    t_ready = time.monotonic()
    print(f"  {on_heat()}/{len(clients)} clients on the heat screen after {t_ready - t_start:.1f} s")
    while not feeder.done.is_set():
        await asyncio.sleep(0.2)
    await asyncio.sleep(2)
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    serve.send_signal(signal.SIGTERM)
    serve.wait(30)
    fresh = {s: t for s, t in feeder.written.items() if t >= t_ready}
    lat = [(c.seen_seq[s] - t) * 1000 for c in clients for s, t in fresh.items() if s in c.seen_seq]
    return lat, len(fresh), t_ready - t_start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=20)
    ap.add_argument("--season", type=Path, default=REPO / "seasons" / "demo.toml")
    ap.add_argument("--skip-baseline", action="store_true")
    ap.add_argument("--skip-season", action="store_true")
    ap.add_argument("--skip-feeder", action="store_true")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="aoe-ssh-bench-"))
    key, auth = make_keys(tmp)
    print(f"ssh spectators benchmark: {args.sessions} sessions, {os.cpu_count()} cores, work dir {tmp}")
    base: list[float] = []
    if not args.skip_baseline:
        t = time.monotonic()
        r = run_season(args.season, tmp / "baseline")
        rc = r.wait()
        base = tick_lateness(tmp / "baseline")
        print(f"[1] season without spectators ({time.monotonic() - t:.0f} s, exit {rc})")
        print("    " + summary("tick lateness", base))
    if not args.skip_season:
        t = time.monotonic()
        with_spec, lat, missed = asyncio.run(spectate_season(args, tmp, key, auth))
        print(f"[2] season with {args.sessions} spectators ({time.monotonic() - t:.0f} s)")
        print("    " + summary("tick lateness", with_spec))
        if base and with_spec:
            d = pct(with_spec, 99) - pct(base, 99)
            print(f"    p99 tick lateness change: {d:+.0f} ms (target <= +10 ms): {'OK' if d <= 10 else 'MISSED'}")
        print("    " + summary("update latency, season events (season.jsonl -> client screen)", lat))
        print(f"    season-event sightings missed (not on screen before the season ended): {missed}")
        if lat:
            print(f"    p95 target <= 1000 ms: {'OK' if pct(lat, 95) <= 1000 else 'MISSED'}")
    if not args.skip_feeder:
        lat, n, ready_s = asyncio.run(spectate_feeder(args, tmp, key, auth))
        print(f"[3] recorded heat replayed at half pace to {args.sessions} heat screens; {n} events written "
              f"after all were on it ({ready_s:.0f} s to start {args.sessions} spectators)")
        print("    " + summary("update latency, heat events (events.jsonl -> client screen)", lat))
        if lat:
            print(f"    p95 target <= 1000 ms: {'OK' if pct(lat, 95) <= 1000 else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
