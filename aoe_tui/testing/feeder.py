"""A season folder that grows in real time from a recorded heat (tests, benchmarks, demos).

:class:`SeasonFeeder` writes a one-heat season into ``out`` the way ``aoe run`` does
(``season.jsonl`` through the real :class:`~aoe_tui.replay.season_log.SeasonLogWriter`,
the heat's ``arena.json`` and ``events.jsonl`` in ``round-1/heat-1/attempt-1``), then
appends the recorded heat's events one line at a time, paced by their ``elapsed_ms``
divided by ``speed``, and closes the season (attempt/heat/round/season finished).
A spectator (``aoe watch``) following ``out`` sees a live heat without any territory.

``written`` maps each event ``sequence`` to the ``time.monotonic()`` at which its line
was flushed (used for update-latency measurements).

``activity``: ``(ms, agent, line)`` tuples written to the heat's ``activity.jsonl`` through
the referee's :class:`~aoe_tui.replay.activity.ActivityWriter`, each at its ``ms`` among
the events (``activity_written``: activity ``sequence`` → ``time.monotonic()`` flushed).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from aoe_tui.replay.activity import ACTIVITY_FILE, ActivityWriter
from aoe_tui.replay.jsonl import LogAppender
from aoe_tui.replay.log import EVENT_LOG, dump_record
from aoe_tui.replay.matchdir import LoadedMatch, load_match

__all__ = ["SeasonFeeder"]

FOLDER = "round-1/heat-1/attempt-1"


class SeasonFeeder:
    """Replay the heat at ``source`` (match folder, ``events.jsonl`` or bundle; it must carry
    an ``arena.json`` with ``territories`` and ``agents``) into a fresh season folder ``out``.

    ``speed``: match-clock ms per wall-clock ms (4.0 = four times real time);
    ``max_gap_s``: longest sleep between two lines (seconds); ``finish``: write the
    closing season records after the last event. Raises :class:`~aoe_tui.errors.AoeError`
    (from :func:`load_match`) on a bad source and ``ValueError`` if it has no arena.
    """

    def __init__(self, source: Path, out: Path, *, speed: float = 4.0, max_gap_s: float = 1.0,
                 finish: bool = True, season_id: str = "spectator-cup", label: str = "live",
                 activity: list[tuple[int, str, str]] | None = None) -> None:
        self.loaded: LoadedMatch = load_match(source)
        if not self.loaded.arena or not self.loaded.arena.get("territories"):
            raise ValueError(f"{source}: no arena.json with territories")
        self.out = Path(out)
        self.speed = speed
        self.max_gap_s = max_gap_s
        self.finish = finish
        self.season_id = season_id
        self.label = label
        self.written: dict[int, float] = {}
        self.activity = sorted(activity or (), key=lambda a: a[0])
        self.activity_written: dict[int, float] = {}
        self.done = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        by_terr = {a["territory"]: a["id"] for a in self.loaded.arena.get("agents", [])}
        self.territories = [t["id"] for t in self.loaded.arena["territories"]]
        self.seats = [by_terr.get(t, t) for t in self.territories]

    def prepare(self) -> Path:
        """Write the season header, the heat folder with ``arena.json`` and an empty
        ``events.jsonl``; returns ``out``."""
        from aoe_tui.domain import season_events as se
        from aoe_tui.replay.season_log import SeasonLogWriter

        self.out.mkdir(parents=True, exist_ok=True)
        self.log = SeasonLogWriter(self.out / "season.jsonl")
        self.log.append(se.SeasonStarted(
            season=self.season_id, label=self.label, arena_id=str(self.loaded.arena.get("id", "arena")),
            format={"kind": "league", "heats_per_entrant": 1}, entrants=list(self.seats), seed=1,
            heat_size=len(self.seats), min_heat_size=2, max_attempts=1, season_sha256="0" * 64,
            milestones=[m.get("id") for m in (self.loaded.arena.get("build") or {}).get("milestones", [])
                        if isinstance(m, dict)],
            models={s: s for s in self.seats}))
        self.log.append(se.RoundScheduled(round=1, heats=[se.HeatSeats(heat=1, seats=list(self.seats))]))
        heat = self.out / FOLDER
        heat.mkdir(parents=True, exist_ok=True)
        (heat / "arena.json").write_text(json.dumps(self.loaded.arena, indent=2), encoding="utf-8")
        (heat / "events.jsonl").write_bytes(b"")
        self.log.append(se.AttemptStarted(round=1, heat=1, attempt=1, folder=FOLDER))
        return self.out

    def run(self) -> None:
        """Append every event (paced), then the closing records if ``finish``. Blocking."""
        from aoe_tui.domain import season_events as se
        from aoe_tui.replay.reducer import reduce_match
        from aoe_tui.season.attempts import attempt_stats

        path = self.out / FOLDER / "events.jsonl"
        prev_ms = 0
        done = []
        log = LogAppender(EVENT_LOG, path)
        acts = ActivityWriter(self.out / FOLDER / ACTIVITY_FILE) if self.activity else None
        timeline: list[tuple[int, int, object]] = [(r.elapsed_ms, 0, r) for r in self.loaded.records]
        timeline += [(a[0], 1, a) for a in self.activity]
        timeline.sort(key=lambda item: (item[0], item[1]))
        try:
            for ms, kind, item in timeline:
                gap = max(0.0, (ms - prev_ms) / 1000.0 / self.speed)
                prev_ms = ms
                if self._stop.wait(min(gap, self.max_gap_s)):
                    break
                if kind == 1 and acts is not None:
                    seq = acts.written
                    acts.add(*item)  # type: ignore[misc]
                    acts.flush()
                    self.activity_written[seq] = time.monotonic()
                    continue
                rec = item
                log.append_line(dump_record(rec), "full")  # type: ignore[arg-type]
                self.written[rec.sequence] = time.monotonic()  # type: ignore[attr-defined]
                done.append(rec)
        finally:
            log.close()
            if acts is not None:
                acts.close()
        if self.finish and not self._stop.is_set() and done:
            world = reduce_match(done)
            seat_of = dict(zip(self.territories, self.seats))
            ranks, winner, stats = attempt_stats(world, done, seat_of)
            self.log.append(se.AttemptFinished(round=1, heat=1, attempt=1, outcome="counted",
                                               match_state=world.match_state.value,
                                               finish_reason=world.finish_reason, winner=winner, ranks=ranks,
                                               stats=stats, elapsed_ms=world.elapsed_ms))
            self.log.append(se.HeatFinished(round=1, heat=1, attempt=1, ranks=dict(ranks), winner=winner))
            self.log.append(se.RoundFinished(round=1))
            self.log.append(se.SeasonFinished(champions=[winner] if winner else [], rounds=1))
        self.log.close()
        self.done.set()

    def start(self) -> SeasonFeeder:
        """``prepare()`` if needed, then :meth:`run` on a daemon thread."""
        if not (self.out / "season.jsonl").exists():
            self.prepare()
        self._thread = threading.Thread(target=self.run, name="season-feeder", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop appending (no closing records) and join the thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
