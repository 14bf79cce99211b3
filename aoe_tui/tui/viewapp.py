"""What the screens use of the app that shows them (:class:`ViewApp`).

The screens (:mod:`aoe_tui.tui.screens`, :mod:`aoe_tui.tui.season_screens`) are built by
the app (:mod:`aoe_tui.tui.app`), so they must not import it back, not even for a type
hint: imports run one way, app → screens → this module. :class:`~aoe_tui.tui.app.AoeApp`
is a :class:`ViewApp`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # pragma: no cover
    from aoe_tui.tui.viewmodel import HeatModel

__all__ = ["ViewApp"]


class ViewApp(Protocol):
    """The app as a screen sees it (besides Textual's own ``App``: ``size``, ``notify``,
    ``batch_update``…).

    ``heats``: heat models by key (an attempt folder, or ``"replay"``); ``latest_heat``: the
    key of the heat opened last (None before any); ``season``: the season model (a
    :class:`~aoe_tui.tui.seasonmodel.SeasonModel`; None outside season mode) and
    ``season_dir`` its folder; ``read_only``: no key may write into the season folder;
    ``now_ms()``: wall-clock time in ms since the epoch.
    """

    heats: dict[str, HeatModel]
    latest_heat: str | None
    season: Any
    season_dir: Path | None
    read_only: bool
    now_ms: Callable[[], int]
    size: Any

    def heat_clock_ms(self, key: str | None, model: HeatModel) -> int: ...

    def season_log_lines(self) -> list[str]: ...

    def open_attempt(self, folder: str) -> None: ...

    def batch_update(self) -> Any: ...

    def notify(self, message: str, *, title: str = "", severity: str = "information",
               timeout: float | None = None) -> None: ...
