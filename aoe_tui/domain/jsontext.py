"""Upstream's JSON text: serde_json's pretty form and key order (``world.json``,
``arena.json``, ``match.json``, evidence; upstream writes them with serde_json).

A module of its own, without models, so a writer of ``arena.json`` / ``match.json``
need not import the event and world models (:mod:`aoe_tui.referee.heat` writes them
before it provisions the territories); :mod:`aoe_tui.domain.world` re-exports both.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["pretty_json", "sort_json"]


def sort_json(value: Any) -> Any:
    """Return ``value`` with every object's keys sorted (serde_json ``Value`` order)."""
    if isinstance(value, dict):
        return {k: sort_json(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [sort_json(v) for v in value]
    return value


def pretty_json(data: Any) -> str:
    """serde_json ``to_string_pretty`` equivalent: indent 2, raw UTF-8, no trailing newline.

    Key order is kept as given; callers sort free-form JSON with :func:`sort_json`.
    """
    return json.dumps(data, indent=2, ensure_ascii=False)
