"""Stand-ins for a heat in season-runner tests that are about the season, not the race.

* :func:`write_timed_out_heat` — what ``referee/heat.run_heat`` leaves of a heat whose match
  timer expired with no winner: ``events.jsonl`` (preparing → running → finished,
  ``match_finished``, all at 0 ms) in the attempt folder, and the world it reduces to.
"""

from __future__ import annotations

from pathlib import Path

from aoe_tui.domain import events as ev
from aoe_tui.domain.events import MatchState
from aoe_tui.domain.world import WorldState
from aoe_tui.replay.log import EventLogWriter
from aoe_tui.replay.reducer import apply_event

__all__ = ["write_timed_out_heat"]


def write_timed_out_heat(folder: Path) -> WorldState:
    """Write ``folder/events.jsonl`` (the folder is made if needed) of a match that ran and
    finished on its timer with no winner; return its world. Raises ``OSError``."""
    folder.mkdir(parents=True, exist_ok=True)
    world = WorldState()
    log = EventLogWriter(folder / "events.jsonl")
    try:
        for e in (ev.MatchStateChanged(from_=MatchState.preparing, to=MatchState.running),
                  ev.MatchStateChanged(from_=MatchState.running, to=MatchState.finished),
                  ev.MatchFinished(winner=None, reason="match timer expired")):
            apply_event(world, log.append(e, 0))
    finally:
        log.close()
    return world
