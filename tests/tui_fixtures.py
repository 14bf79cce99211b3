"""Fixture logs for the TUI tests and snapshots (real upstream artifacts in ``tests/fixtures``).

Not a test module; imported by ``tests/test_tui_*.py`` and the snapshot apps.
"""

from __future__ import annotations

import json
from pathlib import Path

from aoe_tui.domain import events as ev
from aoe_tui.domain.events import EventRecord, MatchState
from aoe_tui.replay.matchdir import LoadedMatch, load_match
from aoe_tui.replay.reducer import reduce_match
from aoe_tui.replay.standings import winner_of

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SEED = FIXTURES / "seed" / "opencode-cup-2026-W37-r1-h2-a1.match.json"
MATCHES = FIXTURES / "upstream" / "matches"
#: build race with an arena.json, three seats, partial progress mid-way
PARTIAL_SOURCE = MATCHES / "durable-job-queue-20260814-194238-round-002"
#: the only upstream fixture whose finish_reason is "match timer expired" (conquest)
TIMER_CONQUEST = MATCHES / "first-contact-20260813-074110"
TIMER_REASON = "match timer expired"


def all_fixture_paths() -> list[Path]:
    """Every replayable fixture: each upstream match folder and the seed bundle."""
    paths = sorted(p for p in MATCHES.iterdir() if (p / "events.jsonl").is_file()) if MATCHES.is_dir() else []
    if SEED.is_file():
        paths.append(SEED)
    return paths


def timer_finish_match(cut_ms: int = 220_000) -> LoadedMatch:
    """A build race ended by the match timer, built from a real upstream log.

    Takes :data:`PARTIAL_SOURCE` up to match clock ``cut_ms`` (before anyone is
    durable), then appends what the referee emits at the deadline (§3.6):
    ``match_state_changed`` running→finished and ``match_finished`` with the §3.6
    winner and reason "match timer expired". Ladders are partial at that point.
    """
    loaded = load_match(PARTIAL_SOURCE)
    kept: list[EventRecord] = []
    for rec in loaded.records:
        if rec.elapsed_ms > cut_ms or rec.event.kind in ("durable_deployment_completed", "match_finished"):
            break
        if rec.event.kind == "match_state_changed" and rec.event.to != MatchState.running:
            break
        kept.append(rec)
    world = reduce_match(kept)
    seq = kept[-1].sequence + 1
    at = kept[-1].elapsed_ms
    tail = [
        EventRecord(sequence=seq, elapsed_ms=at,
                    event=ev.MatchStateChanged(from_=MatchState.running, to=MatchState.finished)),
        EventRecord(sequence=seq + 1, elapsed_ms=at,
                    event=ev.MatchFinished(winner=winner_of(world), reason=TIMER_REASON)),
    ]
    records = kept + tail
    return LoadedMatch(records=records, world=reduce_match(records), arena=loaded.arena,
                       provenance=loaded.provenance, source=PARTIAL_SOURCE)


# --------------------------------------------------------------------------- season folder

#: Unix ms of the fixture season's first record; snapshots freeze the app clock at
#: SEASON_T0 + SEASON_NOW_OFFSET_MS.
SEASON_T0 = 1_757_728_758_000
SEASON_NOW_OFFSET_MS = 754_000


def _write_match_folder(folder: Path, loaded: LoadedMatch, records: list[EventRecord] | None = None) -> None:
    from aoe_tui.replay.log import dump_record

    folder.mkdir(parents=True, exist_ok=True)
    if loaded.arena is not None:
        (folder / "arena.json").write_text(json.dumps(loaded.arena, indent=2), encoding="utf-8")
    recs = loaded.records if records is None else records
    (folder / "events.jsonl").write_text("".join(dump_record(r) + "\n" for r in recs), encoding="utf-8")


class _SeasonBuilder:
    """Writes a fixture ``season.jsonl`` with the real :class:`SeasonLogWriter` (each record
    7 s after the previous one, from :data:`SEASON_T0`) and the attempt folders it names,
    each holding a real event log."""

    def __init__(self, out: Path) -> None:
        from aoe_tui.replay.season_log import SeasonLogWriter

        self.out = out
        out.mkdir(parents=True)
        self.clock_ms = SEASON_T0
        # the fixture's wall clock and the runner's monotonic clock move together
        self.log = SeasonLogWriter(out / "season.jsonl", clock=lambda: self.clock_ms,
                                   monotonic=lambda: self.clock_ms / 1000)

    def append(self, event) -> None:
        self.log.append(event)
        self.clock_ms += 7_000

    def finish(self, r: int, h: int, a: int, loaded: LoadedMatch, seats: list[str]) -> None:
        """Attempt ``a`` of heat ``r``/``h`` counted, with ``loaded``'s log; ``seats`` = entrant per territory."""
        from aoe_tui.domain import season_events as se
        from aoe_tui.season.attempts import attempt_stats

        rel = f"round-{r}/heat-{h}/attempt-{a}"
        _write_match_folder(self.out / rel, loaded)
        world = reduce_match(loaded.records)
        seat_of = {t["id"]: seats[i] for i, t in enumerate(loaded.arena["territories"])}
        ranks, winner, stats = attempt_stats(world, loaded.records, seat_of)
        fin = se.AttemptFinished(round=r, heat=h, attempt=a, outcome="counted", match_state=world.match_state.value,
                                 finish_reason=world.finish_reason, winner=winner, ranks=ranks, stats=stats,
                                 elapsed_ms=world.elapsed_ms)
        self.append(fin)
        self.append(se.HeatFinished(round=r, heat=h, attempt=a, void=False, ranks=dict(ranks), winner=winner))

    def retry(self, r: int, h: int, detail: str) -> None:
        """Attempt 1 of heat ``r``/``h`` spoiled by the provider (an empty folder), retried."""
        from aoe_tui.domain import season_events as se

        (self.out / f"round-{r}/heat-{h}/attempt-1").mkdir(parents=True)
        self.append(se.AttemptFinished(round=r, heat=h, attempt=1, outcome="retry", failure_source="provider",
                                       detail=detail))

    def racing(self, r: int, h: int, loaded: LoadedMatch, up_to_sequence: int) -> None:
        """Attempt 1 of heat ``r``/``h`` started; its log holds ``loaded``'s records up to ``up_to_sequence``."""
        from aoe_tui.domain import season_events as se

        self.append(se.AttemptStarted(round=r, heat=h, attempt=1, folder=f"round-{r}/heat-{h}/attempt-1"))
        _write_match_folder(self.out / f"round-{r}/heat-{h}/attempt-1", loaded,
                            [rec for rec in loaded.records if rec.sequence <= up_to_sequence])


def seats_of(loaded: LoadedMatch) -> list[str]:
    """The agent ids of a fixture log in territory order."""
    by_terr = {a["territory"]: a["id"] for a in loaded.arena["agents"]}
    return [by_terr[t["id"]] for t in loaded.arena["territories"]]


def build_season_folder(root: Path) -> Path:
    """A deterministic season folder built from real fixture logs (no territories).

    ``season.jsonl`` is written by the real :class:`SeasonLogWriter` with a fixed clock;
    every attempt folder holds a real upstream/seed event log:

    * round 1 heat 1 — the seed heat (kimi, deepseek, glm): deepseek wins, 100 points;
    * round 1 heat 2 — attempt 1 spoiled by the provider (retried), attempt 2 counted:
      the timer-finish log (glm-queue-builder, deepseek-queue-builder, luna-queue-builder);
    * round 1 bye: oracle; round 1 finished;
    * round 2 heat 1 — attempt 1 interrupted (folder kept as ``attempt-1.interrupted-1``),
      re-run and **racing**: the seed log up to sequence 104;
    * round 2 heat 2 — scheduled, no attempt yet (the queue builders); bye: oracle.

    Returns the season folder (``root/season``).
    """
    b = _SeasonBuilder(root / "season")
    _fixture_season(b)
    b.log.close()
    return b.out


def _fixture_season(b: _SeasonBuilder) -> tuple[LoadedMatch, list[str], list[str]]:
    """Write :func:`build_season_folder`'s season into ``b`` (log left open); returns the
    seed match and the seats of round 2's heats 1 and 2."""
    from aoe_tui.domain import season_events as se

    out = b.out
    seed = load_match(SEED)
    timer = timer_finish_match()
    s1, s2 = seats_of(seed), seats_of(timer)
    entrants = s1 + s2 + ["oracle"]
    b.append(se.SeasonStarted(season="fixture-cup", label="2026-W37", arena_id="first-build",
                              format={"kind": "league", "heats_per_entrant": 2}, entrants=entrants, seed=7,
                              heat_size=3, min_heat_size=2, max_attempts=2, season_sha256="0" * 64,
                              milestones=["service-up", "write-read", "service-restart", "host-reboot"],
                              models={e: e for e in entrants}))
    b.append(se.RoundScheduled(round=1, heats=[se.HeatSeats(heat=1, seats=s1), se.HeatSeats(heat=2, seats=s2)],
                               byes=["oracle"]))
    b.append(se.AttemptStarted(round=1, heat=1, attempt=1, folder="round-1/heat-1/attempt-1"))
    b.append(se.AttemptStarted(round=1, heat=2, attempt=1, folder="round-1/heat-2/attempt-1"))
    b.retry(1, 2, "provider:container: builder-two did not answer SSH within 90 s")
    b.finish(1, 1, 1, seed, s1)
    b.append(se.AttemptStarted(round=1, heat=2, attempt=2, folder="round-1/heat-2/attempt-2"))
    b.finish(1, 2, 2, timer, s2)
    b.append(se.RoundFinished(round=1))
    b.append(se.RoundScheduled(round=2, heats=[se.HeatSeats(heat=1, seats=s1), se.HeatSeats(heat=2, seats=s2)],
                               byes=["oracle"]))
    b.append(se.AttemptStarted(round=2, heat=1, attempt=1, folder="round-2/heat-1/attempt-1"))
    _write_match_folder(out / "round-2/heat-1/attempt-1.interrupted-1", seed, seed.records[:40])
    b.append(se.SeasonResumed(pid=4242, detail="1 attempt(s) interrupted"))
    b.append(se.AttemptInterrupted(round=2, heat=1, attempt=1, renamed_to="round-2/heat-1/attempt-1.interrupted-1"))
    b.racing(2, 1, seed, 104)
    return seed, s1, s2


#: Unix ms of :func:`build_stopped_season_folder`'s ``season_stopped`` (its last record
#: unless ``resumed``) and of its ``season_resumed`` (an hour later)
STOPPED_AT = SEASON_T0 + 17 * 7_000
RESUMED_AT = STOPPED_AT + 3_600_000


def build_stopped_season_folder(root: Path, resumed: bool = False) -> Path:
    """:func:`build_season_folder`'s season, then round 2 heat 2 starts (provisioning: its
    folder holds ``arena.json``, no event log yet) and the runner is stopped by SIGINT
    (``aoe run``'s Ctrl+C): round 2 heat 1's log ends with the abort the runner writes
    (match aborted, "operator interrupt") and ``season_stopped`` names both open attempts,
    at :data:`STOPPED_AT`.

    ``resumed``: an hour later (:data:`RESUMED_AT`) the same ``aoe run`` resumes it as the
    runner does: ``season_resumed``, round 2 heat 1 attempt 1 kept as
    ``attempt-1.interrupted-2`` and heat 2's as ``attempt-1.interrupted-1``, then both re-run:
    heat 1 racing again (the seed log up to sequence 60), heat 2 provisioning.

    Returns the season folder (``root/season``).
    """
    from aoe_tui.domain import season_events as se
    from aoe_tui.domain.events import MatchFinished, MatchStateChanged

    b = _SeasonBuilder(root / "season")
    seed, _s1, _s2 = _fixture_season(b)
    timer = timer_finish_match()
    b.append(se.AttemptStarted(round=2, heat=2, attempt=1, folder="round-2/heat-2/attempt-1"))
    (b.out / "round-2/heat-2/attempt-1").mkdir(parents=True)
    (b.out / "round-2/heat-2/attempt-1/arena.json").write_text(json.dumps(timer.arena, indent=2), encoding="utf-8")
    kept = [rec for rec in seed.records if rec.sequence <= 104]
    at, seq = kept[-1].elapsed_ms + 1_500, kept[-1].sequence + 1
    aborted = kept + [  # what rules.abort writes for a stopped runner (§3.6 "operator interrupt")
        EventRecord(sequence=seq, elapsed_ms=at, event=MatchStateChanged(from_=MatchState.running, to=MatchState.aborted)),
        EventRecord(sequence=seq + 1, elapsed_ms=at, event=MatchFinished(winner=None, reason="operator interrupt")),
    ]
    _write_match_folder(b.out / "round-2/heat-1/attempt-1", seed, aborted)
    assert b.clock_ms == STOPPED_AT
    b.append(se.SeasonStopped(reason="SIGINT", pid=4343, open_attempts=["r2h1a1", "r2h2a1"]))
    if resumed:
        b.clock_ms = RESUMED_AT
        b.append(se.SeasonResumed(pid=4444, detail="2 attempt(s) interrupted"))
        for h, kept_as in ((1, "round-2/heat-1/attempt-1.interrupted-2"), (2, "round-2/heat-2/attempt-1.interrupted-1")):
            (b.out / f"round-2/heat-{h}/attempt-1").rename(b.out / kept_as)
            b.append(se.AttemptInterrupted(round=2, heat=h, attempt=1, renamed_to=kept_as))
        b.racing(2, 1, seed, 60)
        b.append(se.AttemptStarted(round=2, heat=2, attempt=1, folder="round-2/heat-2/attempt-1"))
    b.log.close()
    return b.out


#: the arenas of :func:`build_multi_arena_season_folder`, in season order (4, 5 and 6 milestones)
MULTI_ARENAS = (
    ("first-build", "First Build", "service-delivery",
     ["service-up", "write-read", "service-restart", "host-reboot"]),
    ("durable-job-queue", "Durable Job Queue", "stateful-recovery",
     ["service-up", "recover-accepted", "process-new", "worker-restart", "host-reboot"]),
    ("traffic-surge", "Traffic Surge", "traffic-and-saturation",
     ["baseline-ready", "priority-first-surge", "bounded-optional", "recover-peak", "restart-under-load",
      "host-reboot"]),
)
#: where :func:`build_multi_arena_season_folder`'s racing heat is
MULTI_RACING = "round-4/heat-1/attempt-1"


def build_multi_arena_season_folder(root: Path) -> Path:
    """A deterministic cup across three arenas (:data:`MULTI_ARENAS`; rounds cycle through
    them), four entrants (kimi, deepseek, glm, oracle), from real fixture logs:

    * round 1 · first-build — the seed heat (kimi, deepseek, glm): deepseek wins (durable
      at 43.2 s, usage recorded); bye oracle;
    * round 2 · durable-job-queue — attempt 1 spoiled by the provider (retried), attempt 2:
      the full durable-job-queue log with glm, deepseek, oracle on queue-one/two/three:
      oracle wins (durable at 227.9 s), everyone's usage recorded; bye kimi;
    * round 3 · traffic-surge — the oracle smoke log with oracle, kimi, glm on
      surge-one/two/three: oracle wins (durable at 20.7 s), **no usage** recorded; bye deepseek;
    * round 4 · first-build — heat 1 (kimi, deepseek, glm) **racing**: the seed log up to
      sequence 104; bye oracle.

    Returns the season folder (``root/season``).
    """
    from aoe_tui.domain import season_events as se

    out = root / "season"
    b = _SeasonBuilder(out)
    seed = load_match(SEED)
    queue = load_match(PARTIAL_SOURCE)
    surge = load_match(MATCHES / "traffic-surge-oracle-smoke")
    entrants = ["kimi", "deepseek", "glm", "oracle"]
    arenas = [se.SeasonArena(id=i, display_name=n, milestones=ms, category=c, path=f"../arenas/{i}/arena.toml")
              for i, n, c, ms in MULTI_ARENAS]
    b.append(se.SeasonStarted(season="cross-cup", label="2026-W38", arena_id=arenas[0].id,
                              format={"kind": "league", "heats_per_entrant": 3}, entrants=entrants, seed=11,
                              heat_size=3, min_heat_size=2, max_attempts=2, season_sha256="1" * 64,
                              milestones=list(arenas[0].milestones), models={e: e for e in entrants},
                              arenas=arenas))
    fb, djq, ts = (a.id for a in arenas)
    s1, s2, s3 = ["kimi", "deepseek", "glm"], ["glm", "deepseek", "oracle"], ["oracle", "kimi", "glm"]
    b.append(se.RoundScheduled(round=1, heats=[se.HeatSeats(heat=1, seats=s1)], byes=["oracle"], arena=fb))
    b.append(se.AttemptStarted(round=1, heat=1, attempt=1, folder="round-1/heat-1/attempt-1"))
    b.finish(1, 1, 1, seed, s1)
    b.append(se.RoundFinished(round=1))
    b.append(se.RoundScheduled(round=2, heats=[se.HeatSeats(heat=1, seats=s2)], byes=["kimi"], arena=djq))
    b.append(se.AttemptStarted(round=2, heat=1, attempt=1, folder="round-2/heat-1/attempt-1"))
    b.retry(2, 1, "provider:container: queue-two did not answer SSH within 90 s")
    b.append(se.AttemptStarted(round=2, heat=1, attempt=2, folder="round-2/heat-1/attempt-2"))
    b.finish(2, 1, 2, queue, s2)
    b.append(se.RoundFinished(round=2))
    b.append(se.RoundScheduled(round=3, heats=[se.HeatSeats(heat=1, seats=s3)], byes=["deepseek"], arena=ts))
    b.append(se.AttemptStarted(round=3, heat=1, attempt=1, folder="round-3/heat-1/attempt-1"))
    b.finish(3, 1, 1, surge, s3)
    b.append(se.RoundFinished(round=3))
    b.append(se.RoundScheduled(round=4, heats=[se.HeatSeats(heat=1, seats=s1)], byes=["oracle"], arena=fb))
    b.racing(4, 1, seed, 104)
    b.log.close()
    return out
