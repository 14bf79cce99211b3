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

__all__ = ["SEASON_LOG", "SeasonClock", "SeasonLogError", "SeasonLogWriter", "dump_season_record", "parse_season_line", "read_season_log"]


class SeasonLogError(AoeError):
    """A bad or refused season log; the message names ``path:line`` where it applies."""


def dump_season_record(rec: SeasonRecord) -> str:
    """One ``season.jsonl`` line (no newline): envelope keys, then the event's fields."""
    data: dict = {"schema_version": 1, "sequence": rec.sequence, "time_unix_ms": rec.time_unix_ms}
    if rec.season_clock_ms is not None:
        data["season_clock_ms"] = rec.season_clock_ms
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
    clock = data.pop("season_clock_ms", None)
    if clock is not None and (not isinstance(clock, int) or isinstance(clock, bool) or clock < 0):
        raise ValueError(f"season_clock_ms must be a non-negative integer, got {clock!r}")
    if data.get("kind") not in SEASON_EVENT_KINDS:
        raise ValueError(f"unknown season event kind {data.get('kind')!r}")
    try:
        event = SEASON_EVENT_ADAPTER.validate_python(data)
    except ValidationError as err:
        first = err.errors()[0]
        loc = ".".join(str(p) for p in first["loc"][1:]) or data["kind"]
        raise ValueError(f"{data['kind']}: {loc}: {first['msg']}") from None
    return SeasonRecord.model_construct(schema_version=1, sequence=seq, time_unix_ms=t, event=event,
                                        season_clock_ms=clock)


class SeasonClock:
    """The season clock at each record, folded record by record (sequence order).

    The season clock counts running time only: a run session starts at ``season_started`` or
    ``season_resumed`` and ends at the last record written before the next
    ``season_resumed``, so the time between a stop and its resume is not counted. A record's
    clock is its ``season_clock_ms`` (monotonic, written by :class:`SeasonLogWriter`); an
    older record without one gets the wall-clock rule: the ended sessions' running time plus
    ``time_unix_ms`` minus its session's first ``time_unix_ms`` (never below 0).
    :attr:`at_ms` is the clock at the last record folded (ms; 0 before any).
    """

    def __init__(self) -> None:
        self.at_ms = 0
        self._closed_ms = 0
        self._session_unix_ms: int | None = None

    def fold(self, record: SeasonRecord) -> int:
        """Fold one record in; returns its season clock (ms)."""
        t = record.time_unix_ms
        if self._session_unix_ms is None:
            self._session_unix_ms = t
        elif record.event.kind == "season_resumed":
            self._closed_ms = self.at_ms
            self._session_unix_ms = t
        if record.season_clock_ms is not None:
            self.at_ms = int(record.season_clock_ms)
        else:
            self.at_ms = self._closed_ms + max(0, t - self._session_unix_ms)
        return self.at_ms


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
    fsynced before it returns. Each record gets the wall time (``time_unix_ms``, for people)
    and the season clock (``season_clock_ms``): the clock at the log's last record when this
    writer opened it (:class:`SeasonClock`) plus the **monotonic** time since this run
    session's first record (a ``season_resumed`` appended starts a new session at the clock
    of the record before it), so a wall-clock step neither freezes nor jumps it. ``clock``
    (returns Unix ms) and ``monotonic`` (returns s) are injectable for tests.
    """

    def __init__(self, path: Path | str, *, clock=None, monotonic=None) -> None:
        self.path = Path(path)
        self.clock = clock or (lambda: int(time.time() * 1000))
        self.monotonic = monotonic or time.monotonic
        self._log = LogAppender(SEASON_LOG, self.path)
        #: ``(offset, kept file)`` when opening cut a torn tail (kept beside the log), else None
        self.torn = self._log.torn
        self.records: list[SeasonRecord] = self._log.records
        self._clock = SeasonClock()  # the season clock at the log's last record
        for rec in self.records:
            self._clock.fold(rec)
        #: the season clock (ms) this run session started at, and its monotonic start (s)
        self._session_base_ms = self._clock.at_ms
        self._session_mono: float | None = None

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
        now = float(self.monotonic())
        if self._session_mono is None or (event.kind == "season_resumed" and self.records):
            self._session_base_ms = self._clock.at_ms  # a new run session goes on from the last record
            self._session_mono = now
        rec = SeasonRecord.model_construct(
            schema_version=1, sequence=len(self.records), time_unix_ms=int(self.clock()), event=event,
            season_clock_ms=self.season_clock_ms(now),
        )
        self._log.append_line(dump_season_record(rec), "full")
        self.records.append(rec)
        self._clock.fold(rec)
        return rec

    def season_clock_ms(self, now_mono: float | None = None) -> int:
        """The season clock (ms) at monotonic time ``now_mono`` (s; default now): the clock
        this session started at plus the monotonic time since (never below the start)."""
        if self._session_mono is None:
            return self._session_base_ms
        now = float(self.monotonic()) if now_mono is None else now_mono
        return self._session_base_ms + max(0, int((now - self._session_mono) * 1000))

    def close(self) -> None:
        """Close the log (idempotent)."""
        self._log.close()

    def __enter__(self) -> SeasonLogWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
