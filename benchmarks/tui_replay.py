"""TUI replay and live-feed benchmark (issue 6). Prints figures; asserts nothing.

Frame time is the CPU time of one playback frame: the reducer step, the widget
updates and Textual's layout/composite/paint to the headless driver (measured
with ``time.process_time`` around ``_tick()`` + ``pilot.pause()``, so the idle
wait for Textual's next 60 fps refresh slot is excluded; the wall figure that
includes it is printed too).

1. Replay: the largest fixture event log (by bytes) in the replay screen, headless,
   at maximum speed (×100, one playback frame = 1/30 s of wall time = 3.3 s of
   match time), every frame forced through the reducer, the widgets and a full
   repaint. Reports median and p95 frame time (target: median ≤ 16 ms), and the
   same for single-event stepping.
2. Live: 10 simulated concurrent heats (30 territories) each run a referee-like
   tick loop in the app's event loop (tick 250 ms) that posts that heat's events
   (replayed from fixture logs, ~10 per tick) through :class:`LiveFeed` while the
   heat screen of one of them is shown. Reports tick lateness p50/p99/max
   (target: p99 < 50 ms).

Run: ``.venv/bin/python benchmarks/tui_replay.py`` (reads the fixture logs in ``tests/fixtures``).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from pathlib import Path

from aoe_tui.replay.matchdir import load_match
from aoe_tui.tui.app import AoeApp
from aoe_tui.tui.live import LiveFeed
from aoe_tui.tui.screens import FRAME_S

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
MATCHES = FIXTURES / "upstream" / "matches"
SEED = FIXTURES / "seed" / "opencode-cup-2026-W37-r1-h2-a1.match.json"


def pct(values: list[float], p: float) -> float:
    """Nearest-rank percentile of ``values`` (p in 0…100)."""
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(p / 100 * len(s) + 0.5) - 1))]


async def bench_replay(path: Path, size=(160, 48)) -> None:
    loaded = load_match(path)
    app = AoeApp.replay(loaded, playing=False, speed=100)
    frames: list[float] = []
    cpu: list[float] = []
    steps: list[float] = []
    async with app.run_test(size=size) as pilot:
        screen = app.screen
        await pilot.pause()
        screen.playing = True  # drive _tick by hand: no timer jitter in the figures
        while not screen.cursor.at_end:
            t0, c0 = time.perf_counter(), time.process_time()
            screen._tick()
            await pilot.pause()
            frames.append((time.perf_counter() - t0) * 1000)
            cpu.append((time.process_time() - c0) * 1000)
        screen.action_start()
        await pilot.pause()
        for _ in range(min(400, screen.cursor.total)):
            c0 = time.process_time()
            screen.action_step()
            await pilot.pause()
            steps.append((time.process_time() - c0) * 1000)
    print(f"replay {path.parent.name if path.name == 'events.jsonl' else path.name}: "
          f"{len(loaded.records)} events, terminal {size[0]}x{size[1]}")
    print(f"  x100 frames: {len(frames)}  CPU per frame median {statistics.median(cpu):.2f} ms  "
          f"p95 {pct(cpu, 95):.2f} ms  max {max(cpu):.2f} ms  (target median <= 16 ms)")
    print(f"    wall incl. Textual's 60 fps refresh wait: median {statistics.median(frames):.2f} ms  "
          f"p95 {pct(frames, 95):.2f} ms")
    print(f"  single steps: {len(steps)}  CPU median {statistics.median(steps):.2f} ms  "
          f"p95 {pct(steps, 95):.2f} ms")


async def bench_live(heats: int = 10, tick_s: float = 0.25, seconds: float = 8.0) -> None:
    logs = [load_match(p) for p in sorted(MATCHES.iterdir()) if (p / "events.jsonl").is_file()]
    logs = [m for m in logs if m.arena or len(m.world.territories) == 3][: heats] or logs
    feed = LiveFeed()
    app = AoeApp.live(feed)
    lateness: list[float] = []

    async def heat(i: int) -> None:
        m = logs[i % len(logs)]
        key = f"r1-h{i + 1}-a1"
        feed.open_heat(key, arena=m.arena, title=key, activity=lambda aid: [f"{aid} working"])
        recs = m.records
        per_tick = max(1, len(recs) // int(seconds / tick_s))
        pos = 0
        nxt = time.perf_counter()
        while pos < len(recs):
            nxt += tick_s
            await asyncio.sleep(max(0.0, nxt - time.perf_counter()))
            lateness.append((time.perf_counter() - nxt) * 1000)
            for rec in recs[pos:pos + per_tick]:
                feed.post_record(rec, key)  # what run_heat(on_event=...) does
            pos += per_tick

    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        await asyncio.gather(*(heat(i) for i in range(heats)))
        await pilot.pause()
        applied = sum(h.applied for h in app.heats.values())
    print(f"live: {heats} heats ({heats * 3} territories), tick {tick_s * 1000:.0f} ms, "
          f"{feed.posted} events posted, {applied} applied by the UI")
    print(f"  tick lateness: p50 {pct(lateness, 50):.2f} ms  p99 {pct(lateness, 99):.2f} ms  "
          f"max {max(lateness):.2f} ms  (target p99 < 50 ms)")


def main() -> int:
    if not MATCHES.is_dir():
        print(f"fixtures not found at {MATCHES}", file=sys.stderr)
        return 1
    largest = max((p / "events.jsonl" for p in MATCHES.iterdir() if (p / "events.jsonl").is_file()),
                  key=lambda p: p.stat().st_size)
    print(f"frame interval {FRAME_S * 1000:.1f} ms; python {sys.version.split()[0]}")
    asyncio.run(bench_replay(largest))
    asyncio.run(bench_replay(largest, size=(80, 24)))
    if SEED.is_file():
        asyncio.run(bench_replay(SEED))
    asyncio.run(bench_live())
    return 0


if __name__ == "__main__":
    sys.exit(main())
