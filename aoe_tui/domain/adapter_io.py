"""Files an adapter writes: ``result.json`` (spec §5.3) and ``usage.json`` (spec §5.5).

Both upstream readers reject unknown keys, so these models use ``extra="forbid"``.
Usage fields are ``None`` when unknown (never 0); ``cost_microusd`` is micro-USD.

Helpers:

- :func:`read_usage_checkpoint` reads a live ``AOE_USAGE_FILE`` and never raises:
  a half-written, stale, foreign or malformed file is simply "no checkpoint".
- :func:`read_result_file` reads ``AOE_RESULT_FILE`` and raises :class:`AdapterFileError`
  (one line, naming the file) for anything wrong with it, including an identity mismatch.

Atomic writes use :func:`aoe_tui.fsio.write_json_atomic`; :class:`aoe_tui.domain.agent_usage.Usage`
is the in-memory form of :class:`UsageReport` (same fields).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from aoe_tui.domain.agent_usage import Usage
from aoe_tui.errors import AoeError
from aoe_tui.fsio import utf8_text, write_json_atomic

__all__ = [
    "AdapterFileError",
    "invalid_json_note",
    "transcript_problem",
    "ResultFile",
    "UsageCheckpoint",
    "UsageReport",
    "read_result_file",
    "read_usage_checkpoint",
    "usage_from_report",
    "usage_to_report",
    "write_result_file",
    "write_usage_file",
]

_U64 = Field(default=None, ge=0)

#: ``status`` values of a result file (spec §5.3); equal to ``AdapterStatus`` values.
ResultStatus = Literal[
    "completed", "failed", "unavailable", "timed_out", "interrupted", "budget_exceeded", "harness_error"
]


class AdapterFileError(AoeError):
    """``result.json`` is missing, unparsable, fails the schema, or names another agent/territory.

    ``str(err)`` is one line naming the file; the command adapter turns it into a
    ``harness_error`` summary (spec §5.4).
    """


class UsageReport(BaseModel):
    """The ``usage`` object of ``result.json`` and ``usage.json`` (spec §5.3, §5.5).

    ``rounds``, ``tool_calls``, ``input_tokens``, ``output_tokens``, ``cost_microusd``:
    optional non-negative integers (absent or ``null`` = unknown); ``resource_units``
    defaults to 0. Unknown keys are rejected.
    """

    model_config = ConfigDict(extra="forbid")

    rounds: int | None = _U64
    tool_calls: int | None = _U64
    input_tokens: int | None = _U64
    output_tokens: int | None = _U64
    cost_microusd: int | None = _U64
    resource_units: int = Field(default=0, ge=0)


class ResultFile(BaseModel):
    """``AOE_RESULT_FILE`` (``agents/<id>/result.json``), spec §5.3. Unknown keys are rejected."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1]
    agent: str
    territory: str
    status: ResultStatus
    summary: str
    usage: UsageReport = Field(default_factory=UsageReport)
    transcript: str | None = None


class UsageCheckpoint(BaseModel):
    """``AOE_USAGE_FILE`` (``agents/<id>/usage.json``), spec §5.5: cumulative usage so far."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1]
    agent: str
    territory: str
    usage: UsageReport = Field(default_factory=UsageReport)


def usage_from_report(report: UsageReport) -> Usage:
    """Convert the file model to :class:`~aoe_tui.domain.agent_usage.Usage`."""
    return Usage(**report.model_dump())


def usage_to_report(usage: Any) -> UsageReport:
    """Convert a :class:`~aoe_tui.domain.agent_usage.Usage` (or any object with its fields) to the file model."""
    return UsageReport(
        rounds=usage.rounds,
        tool_calls=usage.tool_calls,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cost_microusd=usage.cost_microusd,
        resource_units=usage.resource_units,
    )


def _usage_json(usage: Any) -> dict[str, Any]:
    report = usage if isinstance(usage, UsageReport) else usage_to_report(usage)
    # Upstream writes only the known usage fields (e.g. ``{"resource_units": 1}``).
    return report.model_dump(exclude_none=True)


def write_result_file(
    path: Path,
    *,
    agent: str,
    territory: str,
    status: str,
    summary: str,
    usage: Usage | UsageReport | None = None,
    transcript: str | None = None,
) -> ResultFile:
    """Write an upstream ``result.json`` (spec §5.3) atomically and return the model written.

    Key order and shape match upstream (``usage`` lists only known fields,
    ``transcript`` is always present, ``null`` when absent).
    """
    model = ResultFile(
        schema_version=1,
        agent=agent,
        territory=territory,
        status=str(status),
        summary=summary,
        usage=usage if isinstance(usage, UsageReport) else (usage_to_report(usage) if usage is not None else UsageReport()),
        transcript=transcript,
    )
    data = {
        "schema_version": 1,
        "agent": agent,
        "territory": territory,
        "status": model.status,
        "summary": summary,
        "usage": _usage_json(model.usage),
        "transcript": transcript,
    }
    write_json_atomic(path, data)
    return model


def write_usage_file(path: Path, *, agent: str, territory: str, usage: Usage | UsageReport) -> None:
    """Atomically replace the live usage checkpoint ``usage.json`` (spec §5.5; values cumulative)."""
    data = {"schema_version": 1, "agent": agent, "territory": territory, "usage": _usage_json(usage)}
    write_json_atomic(path, data, fsync=False)


def read_usage_checkpoint(path: Path, agent: str, territory: str) -> Usage | None:
    """Read a live usage checkpoint (spec §5.5); ``None`` if there is no usable one.

    Returns ``None`` (never raises) when the file is missing, unreadable, half written,
    not JSON, fails the schema (unknown keys, ``schema_version`` != 1, negative values),
    or names a different agent or territory.
    """
    try:
        raw = Path(path).read_bytes()
        model = UsageCheckpoint.model_validate_json(raw)
    except (OSError, ValueError, ValidationError):
        return None
    if model.agent != agent or model.territory != territory:
        return None
    return usage_from_report(model.usage)


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _clean_strings(value: Any) -> Any:
    """``value`` (parsed JSON) with every string, keys too, made valid UTF-8
    (:func:`~aoe_tui.fsio.utf8_text`: a ``"\\ud800"`` escape's lone surrogate becomes U+FFFD)."""
    if isinstance(value, str):
        return utf8_text(value)
    if isinstance(value, list):
        return [_clean_strings(v) for v in value]
    if isinstance(value, dict):
        return {utf8_text(k): _clean_strings(v) for k, v in value.items()}
    return value


def read_result_file(path: Path, agent: str, territory: str) -> ResultFile:
    """Read and check ``result.json`` (spec §5.3/§5.4).

    What the agent put in its strings never makes the file invalid: bytes that are not
    UTF-8 and lone surrogate escapes (``"\\ud800"``) become U+FFFD, raw control characters
    (NUL, ESC) inside strings are kept as characters (``json.loads(strict=False)``); the
    summary reaches the event log as valid UTF-8 JSON.

    Raises:
        AdapterFileError: missing, unreadable, not JSON, schema error (unknown key, bad
            status, ``schema_version`` != 1), or ``agent``/``territory`` differ from the
            expected identity. The message is one line naming ``path``.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise AdapterFileError(f"adapter result file {path} is missing") from None
    except OSError as exc:
        raise AdapterFileError(f"cannot read adapter result file {path}: {exc.strerror or exc}") from None
    try:
        data = json.loads(raw.decode("utf-8", "replace"), strict=False)  # a stray byte is U+FFFD, not a failure
    except json.JSONDecodeError as exc:
        raise AdapterFileError(_one_line(f"invalid adapter result file {path}: not valid JSON ({exc.msg} at line "
                                         f"{exc.lineno} column {exc.colno})")) from None
    try:
        model = ResultFile.model_validate(_clean_strings(data))
    except ValidationError as exc:
        errs = exc.errors()
        detail = "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ())) or '<root>'}: {e.get('msg', '')}" for e in errs[:3]
        )
        raise AdapterFileError(_one_line(f"invalid adapter result file {path}: {detail}")) from None
    if model.agent != agent:
        raise AdapterFileError(
            _one_line(f"adapter result file {path} names agent {model.agent!r}, expected {agent!r}")
        )
    if model.territory != territory:
        raise AdapterFileError(
            _one_line(f"adapter result file {path} names territory {model.territory!r}, expected {territory!r}")
        )
    return model


def invalid_json_note(raw: bytes) -> str | None:
    """``"invalid JSON at byte N"`` (N = the 0-based byte offset where parsing failed) when
    ``raw`` is not one JSON document, else ``None``."""
    import json

    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        return f"invalid JSON at byte {err.start}"
    try:
        json.loads(text)
    except json.JSONDecodeError as err:
        return f"invalid JSON at byte {len(text[:err.pos].encode('utf-8'))}"
    return None


def transcript_problem(path: Path) -> str | None:
    """``"transcript unavailable (invalid JSON at byte N)"`` for a damaged transcript file
    (e.g. a live transcript copied mid-write), ``None`` when it parses or does not exist.
    Shown in a bundle's ``analyses`` slot and in the TUI instead of a silently missing analysis."""
    try:
        raw = Path(path).read_bytes()
    except OSError:
        return None
    note = invalid_json_note(raw)
    return f"transcript unavailable ({note})" if note else None
