"""Load a season folder's state (the reader side of :mod:`aoe_tui.season.runner`'s folder)."""

from __future__ import annotations

from pathlib import Path

from aoe_tui.errors import AoeError
from aoe_tui.replay.season_log import read_season_log
from aoe_tui.replay.season_reducer import SeasonState, reduce_season

__all__ = ["load_season_dir"]


def load_season_dir(season_dir: Path) -> SeasonState:
    """Reduce ``season_dir/season.jsonl`` (raises :class:`AoeError` naming the folder if
    the log is absent, or naming the file and line if it is bad)."""
    log = Path(season_dir) / "season.jsonl"
    if not log.is_file():
        raise AoeError(f"{season_dir}: not a season folder (no season.jsonl)")
    return reduce_season(read_season_log(log))
