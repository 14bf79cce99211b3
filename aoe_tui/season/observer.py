"""The live-view hooks of the season runner (:class:`SeasonObserver`).

Views (``tui/live.FeedObserver``) subclass it; they import this small module, not the
season orchestrator (:mod:`aoe_tui.season.runner`).
"""

from __future__ import annotations

from typing import Any

__all__ = ["SeasonObserver"]


class SeasonObserver:
    """Optional live-view hooks of :class:`SeasonRunner` (all no-ops here; subclass it).

    Called from the runner's event loop (whatever thread runs :meth:`SeasonRunner.run`);
    implementations must be quick and thread-safe (e.g. append to a locked inbox) and
    must not raise — exceptions are swallowed so a view can never stop the season.
    ``folder`` is an attempt folder relative to the season folder (``round-R/heat-H/attempt-A``).
    """

    def season_record(self, record: Any) -> None:
        """A ``season.jsonl`` record (:class:`aoe_tui.domain.season_events.SeasonRecord`) was appended."""

    def attempt_started(self, folder: str, arena: dict[str, Any], title: str) -> None:
        """An attempt starts; ``arena`` is the heat's manifest as ``arena.json`` dict (§1)."""

    def heat_event(self, folder: str, record: Any) -> None:
        """One event record (§2) of the attempt in ``folder``."""

    def supervisor_ready(self, folder: str, supervisor: Any) -> None:
        """The attempt's :class:`aoe_tui.referee.supervisor.HeatSupervisor` exists (activity source)."""

    def heat_activity(self, folder: str, records: list[Any]) -> None:
        """Activity lines the attempt in ``folder`` appended to its ``activity.jsonl``
        (:class:`aoe_tui.replay.activity.ActivityRecord`, file order). Only for a heat on a
        worker node (``aoe run --cluster``), which has no local supervisor to read them from."""
