"""Reduced world state — the ``world.json`` shape (upstream §2.3).

Every model rejects unknown keys (upstream is strict). Optional sub-fields may be
missing in older published files; on read they take their defaults, and
:func:`world_json` always writes the full current schema with upstream's key
order: pretty JSON, 2-space indent, non-ASCII written raw, **no trailing
newline** (as serde_json's ``to_string_pretty`` writes it).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from aoe_tui.domain.events import (
    AgentTerminalState,
    CompetitorState,
    FailureSource,
    MatchState,
    TerritoryState,
)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, validate_assignment=False)


class HealthView(_Strict):
    """Last conquest health probe of a territory."""

    healthy: bool
    status: int | None = None
    latency_ms: int = 0
    detail: str = ""


class MilestoneView(_Strict):
    """One milestone of one territory; exists once evaluated at least once."""

    evaluating: bool = False
    passed: bool = False
    points: int = 0
    evidence: Any = None
    failure_category: str | None = None
    failure_detail: str | None = None


class TerritoryView(_Strict):
    """One territory (seat). ``milestones`` keyed by milestone id; ``durable_at_ms`` in ms."""

    class_: str | None = Field(default=None, alias="class")
    agent: str | None = None
    state: TerritoryState = TerritoryState.provisioning
    resources: int = 0
    last_health: HealthView | None = None
    elimination_source: FailureSource | None = None
    elimination_detail: str | None = None
    competitor_state: CompetitorState | None = None
    milestones: dict[str, MilestoneView] = Field(default_factory=dict)
    milestone_points: int = 0
    durable_at_ms: int | None = None


class AgentView(_Strict):
    """One agent: running flag, outcome and summed usage counters."""

    territory: str
    model: str
    running: bool = False
    successful: bool | None = None
    failure_source: FailureSource | None = None
    terminal_state: AgentTerminalState | None = None
    terminal_detail: str | None = None
    resource_units_used: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_microusd: int = 0


class WorldState(_Strict):
    """The whole reduced match state (§2.3). ``elapsed_ms`` is the last event's clock (ms)."""

    match_state: MatchState = MatchState.preparing
    territories: dict[str, TerritoryView] = Field(default_factory=dict)
    agents: dict[str, AgentView] = Field(default_factory=dict)
    winner: str | None = None
    finish_reason: str | None = None
    infrastructure_failures: int = 0
    last_sequence: int | None = None
    elapsed_ms: int = 0


def world_dict(world: WorldState) -> dict[str, Any]:
    """The world as a JSON-ready dict in upstream key order (maps sorted by id)."""
    data = world.model_dump(mode="json", by_alias=True)
    data["territories"] = {k: data["territories"][k] for k in sorted(data["territories"])}
    for terr in data["territories"].values():
        terr["milestones"] = {k: terr["milestones"][k] for k in sorted(terr["milestones"])}
        for view in terr["milestones"].values():
            view["evidence"] = sort_json(view["evidence"])
    data["agents"] = {k: data["agents"][k] for k in sorted(data["agents"])}
    return data


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


def world_json(world: WorldState) -> str:
    """``world.json`` text exactly as upstream writes it (no trailing newline)."""
    return pretty_json(world_dict(world))
