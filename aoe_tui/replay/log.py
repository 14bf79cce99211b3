"""Append-only ``events.jsonl`` writer and reader (upstream §2.1).

Line format: compact JSON, keys ``schema_version, sequence, elapsed_ms, kind``
then the event's fields in declaration order, UTF-8 written raw, one ``\\n`` per
line. ``durable_deployment_completed`` carries ``elapsed_ms`` twice (envelope,
then its own field) — written by hand here and read back with both values kept.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from aoe_tui.domain.events import (
    EVENT_KINDS,
    DurableDeploymentCompleted,
    Event,
    EventRecord,
    is_lifecycle,
)
from aoe_tui.domain.world import sort_json
from aoe_tui.errors import AoeError
from aoe_tui.replay.jsonl import LogAppender, LogFormat, LogTail, read_log

__all__ = [
    "EVENT_LOG",
    "EventLogError",
    "EventLogWriter",
    "dump_record",
    "parse_line",
    "read_events",
    "iter_events_from",
]


class EventLogError(AoeError):
    """A bad or refused event log; the message names ``path:line`` where it applies."""


def _enc(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def dump_record(rec: EventRecord) -> str:
    """One ``events.jsonl`` line for ``rec`` (no trailing newline), in upstream key order.

    ``evidence`` objects are written with sorted keys, as upstream's
    ``serde_json::Value`` does.
    """
    fields = rec.event.model_dump(mode="json", by_alias=True)
    parts = [
        f'"schema_version":{rec.schema_version}',
        f'"sequence":{rec.sequence}',
        f'"elapsed_ms":{rec.elapsed_ms}',
    ]
    for key, value in fields.items():
        if key == "evidence":
            value = sort_json(value)
        parts.append(f"{_enc(key)}:{_enc(value)}")
    return "{" + ",".join(parts) + "}"


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """object_pairs_hook: keep the first top-level ``elapsed_ms`` as the envelope's."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key == "elapsed_ms" and key in out:
            out["\0event_elapsed_ms"] = value
            continue
        out[key] = value
    return out


_DECODER = json.JSONDecoder(object_pairs_hook=_pairs)


def parse_line(line: str | bytes) -> EventRecord:
    """Parse one ``events.jsonl`` line into an :class:`EventRecord`.

    Raises ``ValueError`` (with a short reason) for invalid JSON, a wrong
    ``schema_version``, an unknown ``kind`` or bad fields.
    """
    if isinstance(line, bytes):
        line = line.decode("utf-8")
    data = _DECODER.decode(line)
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    if data.get("schema_version") != 1:
        raise ValueError(f"schema_version must be 1, got {data.get('schema_version')!r}")
    kind = data.get("kind")
    model = EVENT_KINDS.get(kind)  # type: ignore[arg-type]
    if model is None:
        raise ValueError(f"unknown event kind {kind!r}")
    seq = data.pop("sequence", None)
    elapsed = data.pop("elapsed_ms", None)
    data.pop("schema_version")
    own = data.pop("\0event_elapsed_ms", None)
    if model is DurableDeploymentCompleted:
        data["elapsed_ms"] = own if own is not None else elapsed
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        raise ValueError(f"sequence must be a non-negative integer, got {seq!r}")
    if not isinstance(elapsed, int) or isinstance(elapsed, bool) or elapsed < 0:
        raise ValueError(f"elapsed_ms must be a non-negative integer, got {elapsed!r}")
    try:
        event = model.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        loc = ".".join(str(p) for p in first["loc"]) or kind
        raise ValueError(f"{kind}: {loc}: {first['msg']}") from None
    return EventRecord.model_construct(schema_version=1, sequence=seq, elapsed_ms=elapsed, event=event)


#: How ``events.jsonl`` is read (line rules: :mod:`aoe_tui.replay.jsonl`).
EVENT_LOG = LogFormat(parse=parse_line, error=EventLogError, noun="event", what="event log")


def read_events(path: Path | str) -> list[EventRecord]:
    """Load a whole ``events.jsonl`` (§2.1 loader rules).

    A missing file is an empty log; blank lines are skipped; an invalid last line
    without a trailing newline is a torn append and ignored. Any other invalid
    line, a wrong schema version, an unknown kind or a sequence that differs from
    the record's index raises :class:`EventLogError` naming ``path:line``.
    """
    return read_log(EVENT_LOG, path)


def iter_events_from(
    path: Path | str, offset: int = 0, *, next_sequence: int = 0, first_line: int = 1
) -> tuple[list[EventRecord], int]:
    """Tail helper: parse complete lines from byte ``offset`` on.

    Returns ``(records, new_offset)``; only lines ending in ``\\n`` are consumed,
    so a partially written last line is picked up by the next call. Pass the
    expected ``next_sequence`` (and ``first_line`` for error messages). Raises
    :class:`EventLogError` on a bad complete line.
    """
    tail = LogTail(EVENT_LOG, path, offset=offset, line=first_line - 1, next_sequence=next_sequence)
    return tail.read(), tail.offset


class EventLogWriter:
    """Append-only writer of ``events.jsonl`` (§2.1).

    ``EventLogWriter(path)`` refuses a non-empty existing log (raise
    :class:`EventLogError`) unless ``resume=True``, in which case it continues
    from the last sequence + 1 (a torn tail is cut off first and kept beside the log:
    :attr:`torn`). Each
    :meth:`append` writes one line and flushes; lifecycle kinds are also fsynced.
    Usable as a context manager.
    """

    def __init__(self, path: Path | str, *, resume: bool = False) -> None:
        self.path = Path(path)
        self.next_sequence = 0
        self.last_elapsed_ms = 0
        if self.path.exists() and self.path.stat().st_size > 0 and not resume:
            raise EventLogError(f"{self.path}: event log already exists and is not empty")
        self._log = LogAppender(EVENT_LOG, self.path)
        #: ``(offset, kept file)`` when resuming cut a torn tail (kept beside the log), else None
        self.torn = self._log.torn
        if self._log.records:
            self.next_sequence = self._log.records[-1].sequence + 1
            self.last_elapsed_ms = self._log.records[-1].elapsed_ms
        self._log.records = []  # not kept: the referee folds records as they come

    def append(self, event: Event, elapsed_ms: int) -> EventRecord:
        """Write ``event`` at match clock ``elapsed_ms`` (ms) and return its record.

        Raises :class:`EventLogError` if the writer is closed or ``elapsed_ms``
        is lower than the previous event's.
        """
        if self._log.closed:
            raise EventLogError(f"{self.path}: event log is closed")
        if elapsed_ms < self.last_elapsed_ms:
            raise EventLogError(
                f"{self.path}: elapsed_ms went backwards ({elapsed_ms} < {self.last_elapsed_ms})"
            )
        rec = EventRecord.model_construct(
            schema_version=1, sequence=self.next_sequence, elapsed_ms=int(elapsed_ms), event=event
        )
        self._log.append_line(dump_record(rec), "data" if is_lifecycle(event) else "none")
        self.next_sequence += 1
        self.last_elapsed_ms = int(elapsed_ms)
        return rec

    def close(self) -> None:
        """Flush, fsync and close the log (idempotent)."""
        self._log.close(fsync=True)

    def __enter__(self) -> EventLogWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
