"""The seam between the match/season engine and the TUI.

The engine never touches widgets and never waits for rendering. It hands each
event record to a :class:`LiveFeed` (``post_record`` — a locked list append plus
one coalescing message, safe from any thread or from the app's own event loop).
The app drains the inbox when it gets to it and advances its own
:class:`~aoe_tui.tui.viewmodel.HeatModel` per heat with ``apply_event``; if the
UI falls behind, many records are applied in one go and drawn once.

Typical live wiring (same process, the engine in a Textual worker)::

    feed = LiveFeed()
    app = AoeApp.live(feed)
    feed.open_heat("r1-h1-a1", arena=arena_dict, title="round 1 heat 1 · attempt 1")
    await run_heat(..., on_event=feed.on_event("r1-h1-a1"))
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from textual.message import Message

from aoe_tui.domain.events import EventRecord
from aoe_tui.domain.world import WorldState
from aoe_tui.season.observer import SeasonObserver
from aoe_tui.tui.viewmodel import ActivitySource, ArenaView


class RecordsPending(Message):
    """New records wait in a :class:`LiveFeed`; coalesces (one queued at most)."""

    def can_replace(self, message: Message) -> bool:
        """A newer ``RecordsPending`` replaces a queued one (Toolong's pattern)."""
        return isinstance(message, RecordsPending)


@dataclass
class HeatOpened:
    """A heat announced by the engine: key, arena manifest dict, title, activity source."""

    key: str
    arena: ArenaView
    title: str | None
    activity: ActivitySource | None


class LiveFeed:
    """Thread-safe inbox of event records for one or many heats.

    Engine side: :meth:`open_heat`, :meth:`post_record` / :meth:`on_event`; a tailer of
    files (``aoe watch``) also posts activity records (:meth:`post_activity`) and when the
    last record it read was written (:meth:`post_written`).
    App side: :meth:`attach` (a zero-arg notifier, called after each post),
    :meth:`drain`, :meth:`drain_activity` and :meth:`drain_written`.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._opened: list[HeatOpened] = []
        self._pending: list[tuple[str, EventRecord]] = []
        self._season: list[Any] = []
        self._activity: list[tuple[str, Any]] = []
        self._written: dict[str, float] = {}
        self._notify: Callable[[], Any] | None = None
        self.posted = 0

    def attach(self, notify: Callable[[], Any] | None) -> None:
        """Set the notifier (``lambda: app.post_message(RecordsPending())``)."""
        self._notify = notify

    def open_heat(self, key: str, *, arena: Mapping[str, Any] | ArenaView | None = None,
                  title: str | None = None, activity: ActivitySource | None = None) -> None:
        """Announce heat ``key`` before its first record (arena = ``arena.json`` dict)."""
        info = arena if isinstance(arena, ArenaView) else ArenaView.from_arena(arena)
        with self._lock:
            self._opened.append(HeatOpened(key, info, title, activity))
        self._ping()

    def post_record(self, record: EventRecord, heat: str = "heat") -> None:
        """Queue one record of ``heat`` (O(1); never blocks on the UI)."""
        with self._lock:
            self._pending.append((heat, record))
            self.posted += 1
        self._ping()

    def on_event(self, heat: str = "heat") -> Callable[[EventRecord, WorldState], None]:
        """A ``run_heat(on_event=...)`` callback posting records of ``heat``."""

        def _cb(record: EventRecord, _world: WorldState) -> None:
            self.post_record(record, heat)

        return _cb

    def post_activity(self, records: Sequence[Any], heat: str = "heat") -> None:
        """Queue ``activity.jsonl`` records of ``heat``
        (:class:`aoe_tui.replay.activity.ActivityRecord`: ``sequence``, ``ms``, ``agent``,
        ``line``), file order."""
        if not records:
            return
        with self._lock:
            self._activity.extend((heat, r) for r in records)
            self.posted += len(records)
        self._ping()

    def post_written(self, heat: str, unix_s: float) -> None:
        """The last record posted for ``heat`` was written to its log at ``unix_s``
        (wall-clock seconds, e.g. the log's mtime): the heat clock counts from then."""
        with self._lock:
            self._written[heat] = unix_s

    def drain_activity(self) -> list[tuple[str, Any]]:
        """Take the (heat, activity record) pairs queued so far."""
        with self._lock:
            acts, self._activity = self._activity, []
        return acts

    def drain_written(self) -> dict[str, float]:
        """Take the write times posted since the last call (heat → Unix seconds)."""
        with self._lock:
            written, self._written = self._written, {}
        return written

    def post_season_record(self, record: Any) -> None:
        """Queue one ``season.jsonl`` record (:class:`aoe_tui.domain.season_events.SeasonRecord`)."""
        with self._lock:
            self._season.append(record)
            self.posted += 1
        self._ping()

    def drain_season(self) -> list[Any]:
        """Take the season records queued so far (sequence order)."""
        with self._lock:
            season, self._season = self._season, []
        return season

    def drain(self) -> tuple[list[HeatOpened], list[tuple[str, EventRecord]]]:
        """Take everything queued so far: (opened heats, (heat, record) pairs)."""
        with self._lock:
            opened, self._opened = self._opened, []
            pending, self._pending = self._pending, []
        return opened, pending

    def _ping(self) -> None:
        notify = self._notify
        if notify is not None:
            try:
                notify()
            except Exception:  # the UI may be closing; the engine must not care
                pass


class FeedObserver(SeasonObserver):
    """The :class:`~aoe_tui.season.observer.SeasonObserver` of ``aoe run``'s TUI: posts the
    season's records and every attempt's events to a :class:`LiveFeed` (heat key = attempt
    folder, ``round-R/heat-H/attempt-A``), and serves live agent activity from the
    referee's seats (``AgentRun.activity``, newest last); a heat on a worker node of a
    cluster has no local seats: its ``activity.jsonl`` records are posted as they arrive
    (:meth:`LiveFeed.post_activity`, as ``aoe watch`` does)."""

    def __init__(self, feed: LiveFeed) -> None:
        self.feed = feed
        self._supervisors: dict[str, Any] = {}

    def season_record(self, record: Any) -> None:
        self.feed.post_season_record(record)

    def attempt_started(self, folder: str, arena: dict[str, Any], title: str) -> None:
        self.feed.open_heat(folder, arena=arena, title=title,
                            activity=lambda agent, f=folder: self.activity(f, agent))

    def heat_event(self, folder: str, record: Any) -> None:
        self.feed.post_record(record, folder)

    def supervisor_ready(self, folder: str, supervisor: Any) -> None:
        self._supervisors[folder] = supervisor

    def heat_activity(self, folder: str, records: list[Any]) -> None:
        self.feed.post_activity(records, folder)

    def activity(self, folder: str, agent: str) -> Sequence[str]:
        """Latest activity lines of ``agent`` in attempt ``folder`` (``()`` before it starts)."""
        ref = self._supervisors.get(folder)
        if ref is None:
            return ()
        for seat in getattr(ref, "seats", ()):
            if seat.agent.id == agent and seat.run is not None:
                try:
                    return list(seat.run.activity)
                except RuntimeError:  # mutated while copying (engine thread); next poll
                    return ()
        return ()
