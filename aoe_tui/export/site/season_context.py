"""The contexts of ``home.html`` and ``leaderboard.html``."""

from __future__ import annotations

from typing import Any

from aoe_tui.export.site.heat import HeatPage

__all__ = ["home_context", "leaderboard_context", "matches_context"]


def home_context(state: Any, rows: list[Any], heats: list[HeatPage]) -> dict[str, Any]:
    """A season's home page: ``state`` (:class:`SeasonState`), ``rows`` (season standings)."""
    title = f"{state.info.season} · {state.info.label}" if state.info else "season"
    return {"title": title, "state": state, "rows": rows, "heats": heats}


def matches_context(heats: list[HeatPage]) -> dict[str, Any]:
    """The home page of ``aoe site --match``: the matches."""
    return {"title": "Matches", "state": None, "rows": [], "heats": heats}


def leaderboard_context(heats: list[HeatPage]) -> dict[str, Any]:
    """The leaderboard across arenas, per model configuration."""
    return {"title": "Leaderboard", "heats": heats}
