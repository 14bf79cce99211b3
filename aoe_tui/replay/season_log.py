"""Append-only ``season.jsonl`` writer and reader (same writer rules as match logs, §2.1).

Rules shared with :class:`aoe_tui.replay.log.EventLogWriter`: contiguous ``sequence``
from 0; one compact JSON line per event, flushed at once; **every** season event is a
lifecycle event and is fsynced (they are rare — a few per heat); a torn last line (no
trailing newline, e.g. after ``kill -9``) is ignored on read and cut off when the writer
resumes (its bytes are kept beside the log, ``season.jsonl.torn-<offset>``). Any other bad line is an error naming ``path:line``.

The line framing, torn-tail and sequence rules are :mod:`aoe_tui.replay.jsonl`'s.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from pydantic import ValidationError

from aoe_tui.domain.season_events import SEASON_EVENT_ADAPTER, SEASON_EVENT_KINDS, SeasonRecord
from aoe_tui.errors import AoeError
from aoe_tui.replay.jsonl import LogAppender, LogFormat, read_log

__all__ = ["SEASON_LOG", "SeasonLogError", "SeasonLogWriter", "dump_season_record", "parse_season_line", "read_season_log"]


class SeasonLogError(AoeError):
    """A bad or refused season log; the message names ``path:line`` where it applies."""


def dump_season_record(rec: SeasonRecord) -> str:
    """One ``season.jsonl`` line (no newline): envelope keys, then the event's fields."""
    data = {"schema_version": 1, "sequence": rec.sequence, "time_unix_ms": rec.time_unix_ms}
    data.update(rec.event.model_dump(mode="json"))
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def parse_season_line(line: str | bytes) -> SeasonRecord:
    """Parse one line; raises ``ValueError`` with a short reason."""
    data = json.loads(line)
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    if data.pop("schema_version", None) != 1:
        raise ValueError("schema_version must be 1")
    seq = data.pop("sequence", None)
    t = data.pop("time_unix_ms", None)
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        raise ValueError(f"sequence must be a non-negative integer, got {seq!r}")
    if not isinstance(t, int) or isinstance(t, bool):
        raise ValueError(f"time_unix_ms must be an integer, got {t!r}")
    if data.get("kind") not in SEASON_EVENT_KINDS:
        raise ValueError(f"unknown season event kind {data.get('kind')!r}")
    try:
        event = SEASON_EVENT_ADAPTER.validate_python(data)
    except ValidationError as err:
        first = err.errors()[0]
        loc = ".".join(str(p) for p in first["loc"][1:]) or data["kind"]
        raise ValueError(f"{data['kind']}: {loc}: {first['msg']}") from None
    return SeasonRecord.model_construct(schema_version=1, sequence=seq, time_unix_ms=t, event=event)


#: How ``season.jsonl`` is read (line rules: :mod:`aoe_tui.replay.jsonl`).
SEASON_LOG = LogFormat(parse=parse_season_line, error=SeasonLogError, noun="season event",
                       what="season log")


def read_season_log(path: Path | str) -> list[SeasonRecord]:
    """All records of a ``season.jsonl`` (missing file → ``[]``; torn last line ignored).

    Raises :class:`SeasonLogError` naming ``path:line`` for any other bad line.
    """
    return read_log(SEASON_LOG, path)


class SeasonLogWriter:
    """Append-only ``season.jsonl`` writer. Resumes an existing log (torn tail cut off).

    :meth:`append` returns the written :class:`SeasonRecord`; every line is flushed and
    fsynced before it returns. ``clock`` (returns Unix ms) is injectable for tests.
    """

    def __init__(self, path: Path | str, *, clock=None) -> None:
        self.path = Path(path)
        self.clock = clock or (lambda: int(time.time() * 1000))
        self._log = LogAppender(SEASON_LOG, self.path)
        #: ``(offset, kept file)`` when opening cut a torn tail (kept beside the log), else None
        self.torn = self._log.torn
        self.records: list[SeasonRecord] = self._log.records

    @property
    def closed(self) -> bool:
        return self._log.closed

    @property
    def next_sequence(self) -> int:
        return len(self.records)

    def append(self, event) -> SeasonRecord:
        """Write one season event (a model from :mod:`aoe_tui.domain.season_events`)."""
        if self._log.closed:
            raise SeasonLogError(f"{self.path}: season log is closed")
        rec = SeasonRecord.model_construct(
            schema_version=1, sequence=len(self.records), time_unix_ms=int(self.clock()), event=event
        )
        self._log.append_line(dump_season_record(rec), "full")
        self.records.append(rec)
        return rec

    def close(self) -> None:
        """Close the log (idempotent)."""
        self._log.close()

    def __enter__(self) -> SeasonLogWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
