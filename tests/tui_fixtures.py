"""Fixture logs for the TUI tests and snapshots (real upstream artifacts from ``../shared``).

Not a test module; imported by ``tests/test_tui_*.py`` and the snapshot apps.
"""

from __future__ import annotations

from pathlib import Path

from aoe_tui.domain import events as ev
from aoe_tui.domain.events import EventRecord, MatchState
from aoe_tui.replay.matchdir import LoadedMatch, load_match
from aoe_tui.replay.reducer import reduce_match
from aoe_tui.replay.standings import winner_of

SHARED = Path(__file__).resolve().parent.parent.parent / "shared"
FIXTURES = SHARED / "fixtures"
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
