"""Build-race standings recomputed from world state (upstream §3.6, Appendix A.10).

Upstream never persists standings; they are derived from a :class:`WorldState`.
Order: durable first, earlier ``durable_at_ms``, more points, more passed
milestones, territory id ascending. The winner is the first entry unless it ties
the second on (``durable_at_ms``, points, passed count) — then there is none.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from aoe_tui.domain.world import WorldState


@dataclass(frozen=True)
class Standing:
    """One row: ``territory`` id, its ``agent`` id (or None), ``durable_at_ms`` (ms or
    None), ``points`` (sum of passed milestone points), ``passed`` (count of passed
    milestones), ``rank`` (1-based; tied rows share a rank)."""

    territory: str
    agent: str | None
    durable_at_ms: int | None
    points: int
    passed: int
    rank: int

    def to_dict(self) -> dict:
        """JSON-ready dict of the row."""
        return asdict(self)


def _key(s: Standing) -> tuple:
    return (s.durable_at_ms is None, s.durable_at_ms or 0, -s.points, -s.passed, s.territory)


def _tie(a: Standing, b: Standing) -> bool:
    return (a.durable_at_ms, a.points, a.passed) == (b.durable_at_ms, b.points, b.passed)


def compute_standings(world: WorldState) -> list[Standing]:
    """Standings of every territory in ``world``, best first (§3.6)."""
    rows = []
    for tid, terr in world.territories.items():
        passed = [m for m in terr.milestones.values() if m.passed]
        rows.append(
            Standing(
                territory=tid,
                agent=terr.agent,
                durable_at_ms=terr.durable_at_ms,
                points=sum(m.points for m in passed),
                passed=len(passed),
                rank=0,
            )
        )
    rows.sort(key=_key)
    out: list[Standing] = []
    for i, row in enumerate(rows):
        rank = out[-1].rank if out and _tie(out[-1], row) else i + 1
        out.append(Standing(**{**asdict(row), "rank": rank}))
    return out


def winner_of(world: WorldState) -> str | None:
    """The winning **territory id** by §3.6, or None when empty or the top two tie."""
    rows = compute_standings(world)
    if not rows:
        return None
    if len(rows) > 1 and _tie(rows[0], rows[1]):
        return None
    return rows[0].territory
