"""Referee tick lateness read back from heat logs, and percentile lines (benchmarks).

The lateness of a tick is the ``elapsed_ms`` of a territory's first
``milestone_evaluation_started`` in that tick minus the tick's scheduled start
(``k * tick_ms``), counted only for ticks the territory entered idle (its previous
verifier result came before the tick), so a verifier still running from an earlier tick
is not counted as lateness. Used by ``benchmarks/ssh_spectators.py`` and
``benchmarks/concurrent_heats.py``.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable
from pathlib import Path

__all__ = ["log_tick_lateness", "pct", "summary", "tick_lateness"]


def pct(values: Iterable[float], p: float) -> float:
    """The ``p``-th percentile (0-100, nearest rank) of ``values``; NaN when empty."""
    v = sorted(values)
    if not v:
        return float("nan")
    return v[min(len(v) - 1, max(0, round(p / 100 * (len(v) - 1))))]


def summary(name: str, values: list[float], unit: str = "ms") -> str:
    """One line: ``name: n=.. p50=.. p95=.. p99=.. max=.. mean=..`` (``unit`` after each figure)."""
    if not values:
        return f"{name}: no samples"
    return (f"{name}: n={len(values)} p50={pct(values, 50):.0f}{unit} p95={pct(values, 95):.0f}{unit} "
            f"p99={pct(values, 99):.0f}{unit} max={max(values):.0f}{unit} mean={statistics.mean(values):.0f}{unit}")


def log_tick_lateness(events_jsonl: Path, tick_ms: int | None = None) -> list[float]:
    """Lateness (ms) of the idle-entered territory ticks of one heat's ``events.jsonl``.

    ``tick_ms``: the heat's tick (ms); default ``rules.tick_ms`` of the ``arena.json``
    beside the log. Raises ``OSError``/``ValueError`` for an unreadable log or arena.
    """
    log = Path(events_jsonl)
    if tick_ms is None:
        tick_ms = int(json.loads((log.parent / "arena.json").read_text())["rules"]["tick_ms"])
    out: list[float] = []
    last_result: dict[str, int] = {}
    counted: set[tuple[str, int]] = set()
    for line in log.read_text().splitlines():
        r = json.loads(line)
        kind, t, terr = r["kind"], r["elapsed_ms"], r.get("territory")
        if kind in ("milestone_passed", "milestone_failed"):
            last_result[terr] = t
        elif kind == "milestone_evaluation_started":
            k = t // tick_ms
            if k >= 1 and (terr, k) not in counted and last_result.get(terr, -1) < k * tick_ms:
                counted.add((terr, k))
                out.append(t - k * tick_ms)
    return out


def tick_lateness(season_dir: Path) -> list[float]:
    """Lateness (ms) of idle-entered territory ticks over every heat log of a season folder
    (``round-*/heat-*/attempt-*/events.jsonl``)."""
    out: list[float] = []
    for log in sorted(Path(season_dir).glob("round-*/heat-*/attempt-*/events.jsonl")):
        out += log_tick_lateness(log)
    return out
