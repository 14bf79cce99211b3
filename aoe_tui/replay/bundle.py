"""Single-file match bundle (``*.match.json``) — upstream Appendix B.

Shape (every object's keys sorted, as the seed bundle)::

    {"analyses": {agent_id: analysis.json, ...},
     "arena": arena.json, "artifact_type": "agents-of-empires.match",
     "events": [flattened event records, keys sorted],
     "match": {"fog_of_war": bool, "listed": bool, "name": str, "slug": str},
     "provenance": match.json + {"player_artifacts_sha256": {}} | null,
     "schema_version": 1, "visualization": arena.visualization | null,
     "world": world.json}

Formatting matches the seed byte for byte: one line, ``{ "k": v, ... }`` with a
space inside non-empty brackets, raw UTF-8, no trailing newline.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from aoe_tui.domain.adapter_io import transcript_problem
from aoe_tui.domain.events import EVENT_KINDS, DurableDeploymentCompleted, EventRecord
from aoe_tui.domain.world import WorldState, sort_json, world_dict
from aoe_tui.errors import AoeError
from aoe_tui.fsio import write_atomic
from aoe_tui.replay.log import EventLogError, read_events
from aoe_tui.replay.reducer import reduce_match

ARTIFACT_TYPE = "agents-of-empires.match"


class BundleError(AoeError):
    """A bundle that cannot be written or read; names the file and the problem."""


def dumps_bundle(data: dict[str, Any]) -> str:
    """Serialize like the seed bundle: sorted keys, single line, ``{ "a": 1 }`` spacing."""
    return json.dumps(data, sort_keys=True, ensure_ascii=False, indent=0).replace("\n", " ")


def record_to_flat(rec: EventRecord) -> dict[str, Any]:
    """A record as one flat JSON object (envelope + event fields; one ``elapsed_ms``)."""
    fields = rec.event.model_dump(mode="json", by_alias=True)
    out = {"schema_version": rec.schema_version, "sequence": rec.sequence, "elapsed_ms": rec.elapsed_ms}
    for k, v in fields.items():
        if k == "elapsed_ms":
            continue
        out[k] = v
    return out


def flat_to_record(obj: dict[str, Any]) -> EventRecord:
    """Inverse of :func:`record_to_flat`; raises ``ValueError`` on a bad object."""
    data = dict(obj)
    if data.pop("schema_version", None) != 1:
        raise ValueError("schema_version must be 1")
    kind = data.get("kind")
    model = EVENT_KINDS.get(kind)  # type: ignore[arg-type]
    if model is None:
        raise ValueError(f"unknown event kind {kind!r}")
    seq = data.pop("sequence")
    elapsed = data.pop("elapsed_ms")
    if model is DurableDeploymentCompleted:
        data["elapsed_ms"] = elapsed
    try:
        event = model.model_validate(data)
    except ValidationError as err:
        raise ValueError(f"{kind}: {err.errors()[0]['msg']}") from None
    return EventRecord.model_construct(schema_version=1, sequence=seq, elapsed_ms=elapsed, event=event)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise BundleError(f"{path}: cannot read JSON: {err}") from None


def collect_analyses(match_dir: Path) -> dict[str, Any]:
    """``agents/<id>/analysis.json`` and ``<id>-analysis.json`` files, keyed by agent id."""
    out: dict[str, Any] = {}
    agents = match_dir / "agents"
    if agents.is_dir():
        for p in sorted(agents.glob("*/analysis.json")):
            out[p.parent.name] = _read_json(p)
    for p in sorted(match_dir.glob("*-analysis.json")):
        out.setdefault(p.name[: -len("-analysis.json")], _read_json(p))
    for aid, problem in damaged_transcripts(match_dir).items():
        out.setdefault(aid, {"agent": aid, "unavailable": problem})
    return out


def damaged_transcripts(match_dir: Path) -> dict[str, str]:
    """Agent id → ``"transcript unavailable (invalid JSON at byte N)"`` for each agent whose
    transcript does not parse: ``agents/<id>/transcript.json`` or upstream's
    ``<id>-transcript.json``, else (no final one) the live ``transcript.live.json`` /
    ``<id>-transcript.live.json``."""
    match_dir = Path(match_dir)
    found: dict[str, str] = {}
    finals = {p.parent.name: p for p in (match_dir / "agents").glob("*/transcript.json")}
    finals.update({p.name[: -len("-transcript.json")]: p for p in match_dir.glob("*-transcript.json")})
    lives = {p.parent.name: p for p in (match_dir / "agents").glob("*/transcript.live.json")}
    lives.update({p.name[: -len("-transcript.live.json")]: p for p in match_dir.glob("*-transcript.live.json")})
    for aid in sorted(set(finals) | set(lives)):
        problem = transcript_problem(finals.get(aid) or lives[aid])  # the final one when there is one
        if problem is not None:
            found[aid] = problem
    return found


def write_bundle(
    match_dir: Path,
    out: Path,
    *,
    name: str | None = None,
    slug: str | None = None,
    listed: bool = False,
) -> Path:
    """Write the single-file bundle of ``match_dir`` to ``out`` (atomically); return ``out``.

    Needs ``events.jsonl``; ``arena.json`` and ``match.json`` are included when
    present (``arena``/``provenance``/``visualization`` null otherwise). The world
    is the reduction of the events (current schema). ``name`` and ``slug``
    default to the folder name. Raises :class:`BundleError` / ``EventLogError``.
    """
    match_dir = Path(match_dir)
    out = Path(out)
    events_path = match_dir / "events.jsonl"
    if not events_path.is_file():
        raise BundleError(f"{events_path}: no event log in {match_dir}")
    records = read_events(events_path)
    world = reduce_match(records)
    arena = _read_json(match_dir / "arena.json") if (match_dir / "arena.json").is_file() else None
    provenance = None
    if (match_dir / "match.json").is_file():
        provenance = dict(_read_json(match_dir / "match.json"))
        provenance.setdefault("player_brief_sha256", None)
        provenance.setdefault("player_artifacts_sha256", {})
    data = {
        "schema_version": 1,
        "artifact_type": ARTIFACT_TYPE,
        "match": {
            "name": name or match_dir.resolve().name,
            "slug": slug or match_dir.resolve().name,
            "listed": bool(listed),
            "fog_of_war": bool(arena and arena.get("fog_of_war")),
        },
        "arena": arena,
        "provenance": provenance,
        "events": [sort_json(record_to_flat(r)) for r in records],
        "world": world_dict(world),
        "analyses": collect_analyses(match_dir),
        "visualization": arena.get("visualization") if arena else None,
    }
    text = dumps_bundle(data)
    if out.is_dir():
        raise BundleError(f"{out}: is a directory; give the bundle's file name (e.g. {out / (match_dir.resolve().name + '.match.json')})")
    out.parent.mkdir(parents=True, exist_ok=True)
    return write_atomic(out, text, mode=0o644)  # a published artifact, not a secret


@dataclass
class Bundle:
    """A read bundle: the raw dict plus typed ``records`` and the stored ``world``."""

    path: Path
    raw: dict[str, Any]
    records: list[EventRecord]
    world: WorldState
    arena: dict[str, Any] | None
    provenance: dict[str, Any] | None
    match: dict[str, Any]
    analyses: dict[str, Any]
    visualization: dict[str, Any] | None


def read_bundle(path: Path | str) -> Bundle:
    """Read a ``*.match.json`` bundle; raise :class:`BundleError` naming the file and part."""
    path = Path(path)
    data = _read_json(path)
    if not isinstance(data, dict) or data.get("artifact_type") != ARTIFACT_TYPE:
        raise BundleError(f"{path}: not an agents-of-empires match bundle (artifact_type)")
    if data.get("schema_version") != 1:
        raise BundleError(f"{path}: unsupported bundle schema_version {data.get('schema_version')!r}")
    records = []
    for i, obj in enumerate(data.get("events") or []):
        try:
            rec = flat_to_record(obj)
        except (ValueError, KeyError, TypeError) as err:
            raise BundleError(f"{path}: events[{i}]: {err}") from None
        if rec.sequence != i:
            raise BundleError(f"{path}: events[{i}]: sequence {rec.sequence} but expected {i}")
        records.append(rec)
    try:
        world = WorldState.model_validate(data["world"]) if data.get("world") else reduce_match(records)
    except ValidationError as err:
        raise BundleError(f"{path}: world: {err.errors()[0]['msg']}") from None
    return Bundle(
        path=path,
        raw=data,
        records=records,
        world=world,
        arena=data.get("arena"),
        provenance=data.get("provenance"),
        match=data.get("match") or {},
        analyses=data.get("analyses") or {},
        visualization=data.get("visualization"),
    )


__all__ = [
    "ARTIFACT_TYPE",
    "Bundle",
    "BundleError",
    "EventLogError",
    "dumps_bundle",
    "read_bundle",
    "write_bundle",
    "record_to_flat",
    "flat_to_record",
]
