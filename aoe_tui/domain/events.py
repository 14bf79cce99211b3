"""Typed match events and state enums (upstream §2.1–§2.3, Appendix B).

Every event kind is one pydantic model with a ``kind`` literal and its fields in
upstream declaration order (the order they appear in ``events.jsonl``). Events
*tolerate* unknown keys on read (upstream events are not deny-unknown) but an
unknown ``kind`` is an error.

The envelope (``schema_version``, ``sequence``, ``elapsed_ms``) lives in
:class:`EventRecord`; ``elapsed_ms`` is the match clock in **milliseconds** since
agent launch.

Fields named ``from`` (a Python keyword) are declared as ``from_`` with alias
``"from"``; both names are accepted when constructing::

    MatchStateChanged(from_="preparing", to="running")
    MatchStateChanged.model_validate({"from": "preparing", "to": "running"})
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal, Union, get_args

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter


class FailureSource(StrEnum):
    """Who is to blame for a failure (§2.2)."""

    player = "player"
    harness = "harness"
    provider = "provider"
    arena = "arena"
    controller = "controller"
    unknown = "unknown"


class MatchState(StrEnum):
    """Match lifecycle (§2.3)."""

    preparing = "preparing"
    running = "running"
    finished = "finished"
    aborted = "aborted"


class TerritoryState(StrEnum):
    """Conquest territory lifecycle (§2.3); stays ``provisioning`` in build races."""

    provisioning = "provisioning"
    healthy = "healthy"
    degraded = "degraded"
    recovering = "recovering"
    eliminated = "eliminated"


class CompetitorState(StrEnum):
    """Build-race competitor state (§2.3, §3.2)."""

    preparing = "preparing"
    building = "building"
    verifying = "verifying"
    durable = "durable"
    incomplete = "incomplete"
    unavailable = "unavailable"


class AgentTerminalState(StrEnum):
    """How an agent ended (§2.3 plus ``incomplete`` from Appendix B)."""

    completed = "completed"
    failed = "failed"
    interrupted = "interrupted"
    terminated = "terminated"
    incomplete = "incomplete"


class _Event(BaseModel):
    """Base of every event model: unknown keys ignored, ``from_``/``from`` both accepted.
    Each model narrows ``kind`` to its literal (declared first, so ``kind`` stays the
    first field), after the fields of its group (the classes below)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True, frozen=False)

    kind: str


class _TerritoryEvent(_Event):
    """An event about one territory (its id first)."""

    territory: str


class _MilestoneEvent(_TerritoryEvent):
    """An event about one milestone (§1.6 id) of one territory."""

    milestone: str


class _AgentEvent(_Event):
    """An event about one agent (manifest agent id first)."""

    agent: str


class _AgentStopped(_AgentEvent):
    """An agent stopped by the referee; ``reason`` says why."""

    reason: str


U64 = Annotated[int, Field(ge=0)]


class TerritoryRegistered(_TerritoryEvent):
    """``territory_registered`` — once per territory at t=0, manifest order."""

    kind: Literal["territory_registered"] = "territory_registered"
    class_: str = Field(alias="class")
    agent: str


class MatchStateChanged(_Event):
    """``match_state_changed`` — ``from`` → ``to`` (MatchState)."""

    kind: Literal["match_state_changed"] = "match_state_changed"
    from_: MatchState = Field(alias="from")
    to: MatchState


class TerritoryStateChanged(_TerritoryEvent):
    """``territory_state_changed`` — conquest only."""

    kind: Literal["territory_state_changed"] = "territory_state_changed"
    from_: TerritoryState = Field(alias="from")
    to: TerritoryState
    reason: str


class HealthObserved(_TerritoryEvent):
    """``health_observed`` — conquest probe; ``status`` (HTTP) null means a transport
    error; ``latency_ms`` in ms."""

    kind: Literal["health_observed"] = "health_observed"
    healthy: bool
    status: int | None
    latency_ms: U64
    detail: str


class AgentStarted(_AgentEvent):
    """``agent_started`` — at t=0, manifest agent order."""

    kind: Literal["agent_started"] = "agent_started"
    territory: str
    model: str


class AgentFinished(_AgentEvent):
    """``agent_finished`` — the adapter returned a result (§5.4): ``success`` for status
    ``completed``, else ``source`` is who is blamed (§3.9); ``detail`` is the adapter's
    summary."""

    kind: Literal["agent_finished"] = "agent_finished"
    source: FailureSource
    success: bool
    detail: str


class AgentInterrupted(_AgentEvent):
    """``agent_interrupted`` — adapter result status ``interrupted``."""

    kind: Literal["agent_interrupted"] = "agent_interrupted"
    source: FailureSource
    detail: str


class AgentTerminated(_AgentStopped):
    """``agent_terminated`` — killed at the post-match drain deadline."""

    kind: Literal["agent_terminated"] = "agent_terminated"


class AgentOutraced(_AgentStopped):
    """``agent_outraced`` (Appendix B) — another territory reached durable first."""

    kind: Literal["agent_outraced"] = "agent_outraced"


class UsageCharged(_AgentEvent):
    """``usage_charged`` — the usage **delta** since the last checkpoint (§5.5).

    Token counts and ``cost_microusd`` (micro-USD) are null when the adapter does not
    report them (unknown, not zero); ``resource_units`` is always a number.
    """

    kind: Literal["usage_charged"] = "usage_charged"
    resource_units: U64
    input_tokens: U64 | None = None
    output_tokens: U64 | None = None
    cost_microusd: U64 | None = None


class PostMatchDrainStarted(_Event):
    """``post_match_drain_started`` — the race is over; agents still running get
    ``timeout_ms`` (ms, 30000 upstream) to finish; ``pending_agents`` of them are."""

    kind: Literal["post_match_drain_started"] = "post_match_drain_started"
    timeout_ms: U64
    pending_agents: U64


class PostMatchDrainFinished(_Event):
    """``post_match_drain_finished`` — of the pending agents, ``captured_agents`` reported a
    result within the drain and ``terminated_agents`` were killed at its deadline."""

    kind: Literal["post_match_drain_finished"] = "post_match_drain_finished"
    captured_agents: U64
    terminated_agents: U64


class CompetitorStateChanged(_TerritoryEvent):
    """``competitor_state_changed`` — build-race competitor transition (§3.2)."""

    kind: Literal["competitor_state_changed"] = "competitor_state_changed"
    from_: CompetitorState = Field(alias="from")
    to: CompetitorState
    reason: str


class MilestoneEvaluationStarted(_MilestoneEvent):
    """``milestone_evaluation_started`` — one verifier attempt begins."""

    kind: Literal["milestone_evaluation_started"] = "milestone_evaluation_started"


class MilestonePassed(_MilestoneEvent):
    """``milestone_passed`` — verifier succeeded; ``evidence`` is any JSON."""

    kind: Literal["milestone_passed"] = "milestone_passed"
    points: U64
    evidence: Any = None


class MilestoneFailed(_MilestoneEvent):
    """``milestone_failed`` — ``category`` is ``verification_failed`` upstream."""

    kind: Literal["milestone_failed"] = "milestone_failed"
    category: str = "verification_failed"
    detail: str
    retryable: bool = True


class MilestoneRevoked(_MilestoneEvent):
    """``milestone_revoked`` — declared and reduced upstream, never emitted."""

    kind: Literal["milestone_revoked"] = "milestone_revoked"
    reason: str


class DurableDeploymentCompleted(_TerritoryEvent):
    """``durable_deployment_completed`` — its own ``elapsed_ms`` (ms) duplicates the envelope key."""

    kind: Literal["durable_deployment_completed"] = "durable_deployment_completed"
    elapsed_ms: U64


class ResourcesChanged(_TerritoryEvent):
    """``resources_changed`` — conquest only: ``delta`` (signed) applied, ``remaining``
    after it; ``reason`` names the cause (``healthy tick`` for the periodic income)."""

    kind: Literal["resources_changed"] = "resources_changed"
    delta: int
    remaining: U64
    reason: str


class TerritoryEliminated(_TerritoryEvent):
    """``territory_eliminated`` — conquest only."""

    kind: Literal["territory_eliminated"] = "territory_eliminated"
    source: FailureSource
    detail: str


class InfrastructureFailure(_Event):
    """``infrastructure_failure`` — counted in ``world.infrastructure_failures``;
    ``component`` names what failed (e.g. ``territory:<id>``), ``source`` who is to blame."""

    kind: Literal["infrastructure_failure"] = "infrastructure_failure"
    component: str
    source: FailureSource
    detail: str


class MatchFinished(_Event):
    """``match_finished`` — ``winner`` is a **territory id** (or null)."""

    kind: Literal["match_finished"] = "match_finished"
    winner: str | None
    reason: str


Event = Annotated[
    Union[
        TerritoryRegistered,
        MatchStateChanged,
        TerritoryStateChanged,
        HealthObserved,
        AgentStarted,
        AgentFinished,
        AgentInterrupted,
        AgentTerminated,
        AgentOutraced,
        UsageCharged,
        PostMatchDrainStarted,
        PostMatchDrainFinished,
        CompetitorStateChanged,
        MilestoneEvaluationStarted,
        MilestonePassed,
        MilestoneFailed,
        MilestoneRevoked,
        DurableDeploymentCompleted,
        ResourcesChanged,
        TerritoryEliminated,
        InfrastructureFailure,
        MatchFinished,
    ],
    Field(discriminator="kind"),
]

#: every event model, in declaration order (derived from :data:`Event`)
EVENT_TYPES: tuple[type[_Event], ...] = get_args(get_args(Event)[0])

#: kind string → model class
EVENT_KINDS: dict[str, type[_Event]] = {
    t.model_fields["kind"].default: t for t in EVENT_TYPES
}


EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)

#: Kinds after which the writer fsyncs (§2.1).
LIFECYCLE_KINDS: frozenset[str] = frozenset(
    {
        "match_state_changed",
        "territory_state_changed",
        "territory_eliminated",
        "infrastructure_failure",
        "match_finished",
    }
)


def is_lifecycle(event: _Event) -> bool:
    """True for the kinds upstream fsyncs after writing (§2.1)."""
    return event.kind in LIFECYCLE_KINDS  # type: ignore[attr-defined]


def event_fields(event: _Event) -> dict[str, Any]:
    """The event's own fields as JSON values, ``kind`` first, then declaration order."""
    return event.model_dump(mode="json", by_alias=True)


class EventRecord(BaseModel):
    """One line of ``events.jsonl``: the envelope plus one event (§2.1).

    ``sequence`` starts at 0 and is contiguous; ``elapsed_ms`` is the match clock
    in milliseconds and never decreases.
    """

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = 1
    sequence: U64
    elapsed_ms: U64
    event: Event
