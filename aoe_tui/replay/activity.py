"""``activity.jsonl`` (ours): the agents' activity lines of one heat, appended as they happen.

Upstream has no live activity file (docs/formats.md §0), so this is our own file in the
match folder, next to ``events.jsonl`` and never inside it. One JSON object per line::

    {"sequence": 0, "ms": 1234, "agent": "builder-one", "line": "$ systemctl start app"}

- ``sequence``: 0, 1, 2, … (the framing, torn-tail and sequence rules of
  :mod:`aoe_tui.replay.jsonl`, like ``events.jsonl``);
- ``ms``: the heat clock when the adapter produced the line (**ms** since agent launch, the
  ``elapsed_ms`` of ``events.jsonl``; frozen at the finish, so drain lines carry the
  finish time);
- ``agent``: the manifest agent id; ``line``: the adapter's text, as it wrote it (at most
  :data:`MAX_LINE_CHARS` characters, ``…`` marks a cut). It is agent text: views pass it
  through :func:`aoe_tui.domain.display.sanitize_line` before showing it.

:class:`ActivityWriter` is the heat supervisor's writer: :meth:`~ActivityWriter.add` only
buffers (cheap, any thread), :meth:`~ActivityWriter.flush` appends the buffer in one write
(no fsync: a live view aid, not a durable record). Each agent may write at most
:data:`MAX_AGENT_LINES` lines and :data:`MAX_AGENT_BYTES` bytes per heat; past that one
line says so and the rest is counted in :attr:`ActivityWriter.dropped`, so an agent that
prints megabytes fills neither the disk nor the views.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path

from aoe_tui.errors import AoeError
from aoe_tui.replay.jsonl import LogAppender, LogFormat, LogTail

__all__ = ["ACTIVITY_FILE", "ACTIVITY_LOG", "ActivityError", "ActivityRecord", "ActivityWriter",
           "MAX_AGENT_BYTES", "MAX_AGENT_LINES", "MAX_LINE_CHARS", "dump_activity", "parse_activity",
           "read_activity", "tail_activity"]

#: the file's name in a match folder
ACTIVITY_FILE = "activity.jsonl"
#: longest ``line`` kept (characters; longer ones are cut and end in ``…``)
MAX_LINE_CHARS = 400
#: lines one agent may write per heat (the cap line comes on top)
MAX_AGENT_LINES = 20_000
#: bytes (of the JSON lines) one agent may write per heat
MAX_AGENT_BYTES = 4 << 20


class ActivityError(AoeError):
    """A bad line in an ``activity.jsonl`` (``path:line: invalid activity line: reason``)."""


@dataclass(frozen=True)
class ActivityRecord:
    """One activity line: ``sequence``, ``ms`` (heat clock, ms), ``agent`` id, ``line`` text."""

    sequence: int
    ms: int
    agent: str
    line: str


def parse_activity(raw: bytes) -> ActivityRecord:
    """One line of the file → :class:`ActivityRecord`; ``ValueError`` naming what is wrong."""
    obj = json.loads(raw)
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    seq, ms, agent, line = obj.get("sequence"), obj.get("ms"), obj.get("agent"), obj.get("line")
    for name, value, kind in (("sequence", seq, int), ("ms", ms, int), ("agent", agent, str), ("line", line, str)):
        if not isinstance(value, kind) or isinstance(value, bool):
            raise ValueError(f"{name}: expected {kind.__name__}")
    if ms < 0:
        raise ValueError("ms: negative")
    return ActivityRecord(seq, ms, agent, line)


def dump_activity(rec: ActivityRecord) -> str:
    """The JSON line (no newline) of ``rec``."""
    return json.dumps({"sequence": rec.sequence, "ms": rec.ms, "agent": rec.agent, "line": rec.line},
                      ensure_ascii=False, separators=(",", ":"))


#: the :class:`~aoe_tui.replay.jsonl.LogFormat` of ``activity.jsonl``
ACTIVITY_LOG: LogFormat[ActivityRecord] = LogFormat(parse_activity, ActivityError, "activity line", "activity log")


def read_activity(path: Path | str) -> tuple[list[ActivityRecord], str | None]:
    """The records of ``path`` (a missing file: none) and the problem that cut them short,
    if any (one line naming ``path:line``): the good lines before a bad one are kept, so a
    damaged file still replays up to the damage."""
    tail = LogTail(ACTIVITY_LOG, path)
    records: list[ActivityRecord] = []
    try:
        records = tail.read()
        if records:
            tail.read()  # raises for a bad line after the good ones
    except ActivityError as err:
        return records, str(err)
    return records, None


def tail_activity(path: Path | str, last_bytes: int = 256 * 1024) -> LogTail[ActivityRecord]:
    """A :class:`~aoe_tui.replay.jsonl.LogTail` of ``path`` that starts at the first whole
    line of its last ``last_bytes`` bytes (with that line's sequence and line number), so a
    view that joins a long heat reads its latest lines, not the whole file (a view keeps
    only the last few per agent). A missing or short file, or a first line there that does
    not parse, is tailed from the start (a bad line is then reported as usual)."""
    path = Path(path)
    whole = LogTail(ACTIVITY_LOG, path)
    try:
        size = path.stat().st_size
        if size <= last_bytes:
            return whole
        with open(path, "rb") as fh:
            fh.seek(size - last_bytes)
            chunk = fh.read(last_bytes)
            nl = chunk.find(b"\n")
            end = chunk.find(b"\n", nl + 1)
            if nl < 0 or end < 0:
                return whole
            seq = parse_activity(chunk[nl + 1:end]).sequence
            start = size - last_bytes + nl + 1
            fh.seek(0)
            lines, left = 0, start
            while left > 0:
                block = fh.read(min(left, 1 << 20))
                if not block:
                    return whole
                lines += block.count(b"\n")
                left -= len(block)
    except (OSError, ValueError, UnicodeDecodeError):
        return whole
    return LogTail(ACTIVITY_LOG, path, offset=start, line=lines, next_sequence=seq)


def _clean(text: str) -> str:
    """``text`` as valid UTF-8 (lone surrogates replaced)."""
    return text if text.isascii() else text.encode("utf-8", "replace").decode("utf-8")


_encode_str = json.JSONEncoder(ensure_ascii=False).encode


class ActivityWriter:
    """Appends activity lines to ``path`` (see the module docstring for the bounds).

    ``add(ms, agent, line)`` only queues the line (thread-safe, about a microsecond: the
    heat's loop pays nothing more per line; an agent past its line cap is dropped here).
    ``flush(max_lines)`` numbers, encodes and caps up to ``max_lines`` queued lines
    (all: None) and appends them with one ``write``; it returns how many lines it wrote.
    Flushes are serialized (any thread), so the file stays in sequence order. An
    ``OSError`` from the write propagates; the file is then left without a half line and
    the lines stay queued for the next flush. Raises :class:`ActivityError` when an
    existing ``path`` holds a bad line.
    """

    def __init__(self, path: Path | str, *, max_lines: int = MAX_AGENT_LINES,
                 max_bytes: int = MAX_AGENT_BYTES) -> None:
        self.path = Path(path)
        self.max_lines = max_lines
        self.max_bytes = max_bytes
        self._log = LogAppender(ACTIVITY_LOG, self.path)
        self._seq = len(self._log.records)
        self._lock = threading.Lock()  # the queue and the line counts
        self._flushing = threading.Lock()  # one flush at a time (file order = sequence order)
        self._queue: list[tuple[int, str, str | None]] = []  # (ms, agent, line; None: the cap line)
        self._queued: dict[str, int] = {}  # lines queued per agent (the line cap, in add)
        self._bytes: dict[str, int] = {}  # bytes written per agent (the byte cap, in flush)
        self._capped: set[str] = set()  # agents whose cap line is written
        #: lines not kept because their agent reached its cap
        self.dropped = 0
        #: lines written so far (this writer)
        self.written = 0

    def _cap_line(self) -> str:
        return (f"… activity cap reached ({self.max_lines} lines or {self.max_bytes // 1024} KiB "
                "per agent and heat): later lines are not kept")

    def add(self, ms: int, agent: str, text: str) -> None:
        """Queue one line of ``agent`` at heat clock ``ms`` (ms)."""
        line: str | None = str(text)
        if len(line) > MAX_LINE_CHARS:
            line = line[:MAX_LINE_CHARS - 1] + "…"
        with self._lock:
            n = self._queued.get(agent, 0) + 1
            if n > self.max_lines:
                self.dropped += 1
                if n > self.max_lines + 1:
                    return
                line = None  # the cap line, queued once in place of this line
            self._queued[agent] = n
            self._queue.append((ms, agent, line))

    def flush(self, max_lines: int | None = None) -> int:
        """Append up to ``max_lines`` queued lines (None: all; one write, no fsync);
        returns how many lines it wrote."""
        with self._flushing:
            with self._lock:
                if max_lines is None or max_lines >= len(self._queue):
                    queued, self._queue = self._queue, []
                else:
                    queued, self._queue = self._queue[:max_lines], self._queue[max_lines:]
            if not queued or self._log.closed:
                return 0
            sizes, capped, seq, dropped, out = dict(self._bytes), set(self._capped), self._seq, 0, []
            agents: dict[str, str] = {}
            cap = _encode_str(self._cap_line())
            for ms, agent, line in queued:
                if agent in capped:
                    dropped += 1
                    continue
                name = agents.get(agent) or agents.setdefault(agent, _encode_str(_clean(agent)))
                head = f'{{"sequence":{seq},"ms":{max(0, int(ms))},"agent":{name},"line":'
                text = head + (cap if line is None else _encode_str(_clean(line))) + "}"
                size = sizes.get(agent, 0) + len(text) + 1  # characters: bytes for ASCII, close enough otherwise
                if line is None or size > self.max_bytes:
                    capped.add(agent)
                    if line is not None:
                        dropped += 1
                        text = head + cap + "}"
                sizes[agent] = size
                seq += 1
                out.append(text)
            if out:
                try:
                    self._log.append_line("\n".join(out))
                except OSError:  # nothing was kept (no half line): try these again next time, in order
                    with self._lock:
                        self._queue[:0] = queued
                    raise
            self._bytes, self._capped, self._seq = sizes, capped, seq
            self.dropped += dropped
            self.written += len(out)
            return len(out)

    def pending(self) -> int:
        """Lines queued and not yet written."""
        with self._lock:
            return len(self._queue)

    def close(self) -> None:
        """Flush what is queued (best effort) and close the file (idempotent)."""
        try:
            self.flush()
        except OSError:
            pass
        with self._flushing:
            self._log.close()
