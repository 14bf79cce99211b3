"""ATIF (Agent Trajectory Interchange Format) documents, as ``aoe trajectory`` writes them (spec §9.3).

Upstream's ``trajectory`` export writes ``schema_version`` ``"ATIF-v1.7"``. The format is
defined by Harbor's RFC 0001 "Agent Trajectory Interchange Format" (v1.7, April 2026) and
its reference implementation, the pydantic models of Harbor's
``harbor.models.trajectories`` (PyPI ``harbor``); there is no published JSON Schema. These
models mirror that definition field for field for v1.7 (unknown keys rejected,
``extra="forbid"``, as the reference models do) with its validators:

- ``steps`` is non-empty and ``step_id`` runs 1, 2, 3… in order;
- ``model_name``, ``reasoning_effort``, ``reasoning_content``, ``tool_calls`` and
  ``metrics`` appear only on ``source: "agent"`` steps;
- an agent step with ``llm_call_count == 0`` has no ``metrics`` or ``reasoning_content``;
- every ``observation.results[].source_call_id`` names a ``tool_call_id`` of its own step;
- ``timestamp`` is ISO 8601; a ``ContentPart`` of type ``text`` has ``text`` and no
  ``source``, of type ``image`` a ``source`` and no ``text``;
- a ``SubagentTrajectoryRef`` sets ``trajectory_id`` or ``trajectory_path``; embedded
  ``subagent_trajectories`` each have a unique ``trajectory_id``.

Units, as ATIF defines them: token counts are tokens (``prompt_tokens`` includes cached
tokens, ``cached_tokens`` is a subset of it), ``cost_usd`` / ``total_cost_usd`` are US
dollars (floats, not our µUSD). :func:`validate_trajectory` raises
:class:`pydantic.ValidationError` on a document that breaks any rule.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "ATIF_VERSION",
    "Agent",
    "ContentPart",
    "FinalMetrics",
    "ImageSource",
    "Metrics",
    "Observation",
    "ObservationResult",
    "Step",
    "SubagentTrajectoryRef",
    "ToolCall",
    "Trajectory",
    "validate_trajectory",
]

#: The ATIF version ``aoe trajectory`` writes (spec §9.3: upstream's export writes it).
ATIF_VERSION = "ATIF-v1.7"

SchemaVersion = Literal["ATIF-v1.0", "ATIF-v1.1", "ATIF-v1.2", "ATIF-v1.3", "ATIF-v1.4", "ATIF-v1.5", "ATIF-v1.6",
                        "ATIF-v1.7"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ImageSource(_Strict):
    """An image stored beside the trajectory (v1.6): MIME type and a path or URL."""

    media_type: Literal["image/jpeg", "image/png", "image/gif", "image/webp"]
    path: str


class ContentPart(_Strict):
    """One part of a multimodal message or observation (v1.6): ``text`` or ``image``."""

    type: Literal["text", "image"]
    text: str | None = None
    source: ImageSource | None = None

    @model_validator(mode="after")
    def _by_type(self) -> ContentPart:
        if self.type == "text" and (self.text is None or self.source is not None):
            raise ValueError("a 'text' content part has 'text' and no 'source'")
        if self.type == "image" and (self.source is None or self.text is not None):
            raise ValueError("an 'image' content part has 'source' and no 'text'")
        return self


class SubagentTrajectoryRef(_Strict):
    """A delegated subagent's trajectory: embedded (``trajectory_id``) or a file (``trajectory_path``)."""

    trajectory_id: str | None = None
    session_id: str | None = None
    trajectory_path: str | None = None
    extra: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _resolvable(self) -> SubagentTrajectoryRef:
        if self.trajectory_id is None and self.trajectory_path is None:
            raise ValueError("a subagent trajectory ref sets trajectory_id or trajectory_path")
        return self


class ToolCall(_Strict):
    """One tool call of an agent step; ``arguments`` is a JSON object (may be ``{}``)."""

    tool_call_id: str
    function_name: str
    arguments: dict[str, Any]
    extra: dict[str, Any] | None = None


class ObservationResult(_Strict):
    """What one tool call (``source_call_id``) or action gave back."""

    source_call_id: str | None = None
    content: str | list[ContentPart] | None = None
    subagent_trajectory_ref: list[SubagentTrajectoryRef] | None = None
    extra: dict[str, Any] | None = None


class Observation(_Strict):
    """The environment's feedback after a step's actions."""

    results: list[ObservationResult]


class Metrics(_Strict):
    """One step's LLM figures: tokens (``prompt_tokens`` includes ``cached_tokens``), ``cost_usd`` in USD."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    cost_usd: float | None = None
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    extra: dict[str, Any] | None = None


class Step(_Strict):
    """One turn: a ``system`` prompt, a ``user`` message or an ``agent`` turn."""

    step_id: int = Field(ge=1)
    timestamp: str | None = None
    source: Literal["system", "user", "agent"]
    model_name: str | None = None
    reasoning_effort: str | float | None = None
    message: str | list[ContentPart]
    reasoning_content: str | None = None
    tool_calls: list[ToolCall] | None = None
    observation: Observation | None = None
    metrics: Metrics | None = None
    is_copied_context: bool | None = None
    llm_call_count: int | None = Field(default=None, ge=0)
    extra: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _rules(self) -> Step:
        if self.timestamp is not None:
            try:
                datetime.fromisoformat(self.timestamp.replace("Z", "+00:00"))
            except ValueError as err:
                raise ValueError(f"timestamp is not ISO 8601: {err}") from None
        if self.source != "agent":
            for name in ("model_name", "reasoning_effort", "reasoning_content", "tool_calls", "metrics"):
                if getattr(self, name) is not None:
                    raise ValueError(f"'{name}' is only allowed on agent steps, not on a '{self.source}' step")
        elif self.llm_call_count == 0:
            for name in ("metrics", "reasoning_content"):
                if getattr(self, name) is not None:
                    raise ValueError(f"'{name}' must be absent on an agent step with llm_call_count 0")
        return self


class Agent(_Strict):
    """The agent system: ``name`` and ``version`` (both required), the default model."""

    name: str
    version: str
    model_name: str | None = None
    tool_definitions: list[dict[str, Any]] | None = None
    extra: dict[str, Any] | None = None


class FinalMetrics(_Strict):
    """Totals of the trajectory: tokens, ``total_cost_usd`` in USD, ``total_steps``."""

    total_prompt_tokens: int | None = None
    total_completion_tokens: int | None = None
    total_cached_tokens: int | None = None
    total_cost_usd: float | None = None
    total_steps: int | None = Field(default=None, ge=0)
    extra: dict[str, Any] | None = None


class Trajectory(_Strict):
    """One ATIF document (root object)."""

    schema_version: SchemaVersion = ATIF_VERSION
    session_id: str | None = None
    trajectory_id: str | None = None
    agent: Agent
    steps: list[Step] = Field(min_length=1)
    notes: str | None = None
    final_metrics: FinalMetrics | None = None
    continued_trajectory_ref: str | None = None
    extra: dict[str, Any] | None = None
    subagent_trajectories: list[Trajectory] | None = None

    @model_validator(mode="after")
    def _document_rules(self) -> Trajectory:
        for i, step in enumerate(self.steps):
            if step.step_id != i + 1:
                raise ValueError(f"steps[{i}].step_id: expected {i + 1} (sequential from 1), got {step.step_id}")
            if step.observation is not None:
                ids = {tc.tool_call_id for tc in step.tool_calls or ()}
                for result in step.observation.results:
                    if result.source_call_id is not None and result.source_call_id not in ids:
                        raise ValueError(f"step {step.step_id}: observation source_call_id {result.source_call_id!r} "
                                         "is not one of the step's tool_calls")
        seen: set[str] = set()
        for i, sub in enumerate(self.subagent_trajectories or ()):
            if sub.trajectory_id is None or sub.trajectory_id in seen:
                raise ValueError(f"subagent_trajectories[{i}].trajectory_id must be set and unique")
            seen.add(sub.trajectory_id)
        return self


def validate_trajectory(data: dict[str, Any] | str | bytes) -> Trajectory:
    """Validate one ATIF document (a parsed object or JSON text) against these models.

    Raises:
        pydantic.ValidationError: the document breaks the schema or one of its rules.
    """
    if isinstance(data, (str, bytes)):
        return Trajectory.model_validate_json(data)
    return Trajectory.model_validate(data)
