"""Load a finished or running match from any of its forms.

:func:`load_match` accepts a match folder (``events.jsonl`` + optional
``arena.json``/``match.json``), a bare ``events.jsonl`` (siblings used if
present) or a single-file bundle (``*.match.json``, Appendix B). The world is
always the reduction of the events (§2.4), never a stored ``world.json``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aoe_tui.domain.events import EventRecord
from aoe_tui.domain.world import WorldState
from aoe_tui.errors import AoeError
from aoe_tui.replay.bundle import BundleError, read_bundle
from aoe_tui.replay.log import read_events
from aoe_tui.replay.reducer import reduce_match


class MatchLoadError(AoeError):
    """The path is not a match folder, event log or bundle."""


@dataclass
class LoadedMatch:
    """``records`` (event log), ``world`` (reduced), ``arena`` (arena.json dict or
    None), ``provenance`` (match.json dict or None), ``source`` (the path given)."""

    records: list[EventRecord]
    world: WorldState
    arena: dict[str, Any] | None
    provenance: dict[str, Any] | None
    source: Path


def _opt_json(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise MatchLoadError(f"{path}: cannot read JSON: {err}") from None


def load_match(path: Path | str) -> LoadedMatch:
    """Load a match folder, an ``events.jsonl`` or a bundle; raise an :class:`AoeError` on bad input."""
    path = Path(path)
    if path.is_dir():
        events = path / "events.jsonl"
        if not events.is_file():
            if (path / "season.jsonl").is_file():
                raise MatchLoadError(f"{path}: a season folder, not a match folder: `aoe standings {path}` shows "
                                     f"its standings, `aoe inspect {path}/round-R/heat-H/attempt-A` one heat attempt")
            raise MatchLoadError(f"{path}: not a match folder (no events.jsonl)")
        records = read_events(events)
        return LoadedMatch(
            records=records,
            world=reduce_match(records),
            arena=_opt_json(path / "arena.json"),
            provenance=_opt_json(path / "match.json"),
            source=path,
        )
    if not path.exists():
        raise MatchLoadError(f"{path}: no such file or folder")
    if path.suffix == ".jsonl":
        records = read_events(path)
        return LoadedMatch(
            records=records,
            world=reduce_match(records),
            arena=_opt_json(path.parent / "arena.json"),
            provenance=_opt_json(path.parent / "match.json"),
            source=path,
        )
    try:
        bundle = read_bundle(path)
    except BundleError as err:
        raise MatchLoadError(f"{err} (expected a match folder, events.jsonl or *.match.json)") from None
    return LoadedMatch(
        records=bundle.records,
        world=reduce_match(bundle.records),
        arena=bundle.arena,
        provenance=bundle.provenance,
        source=path,
    )
