"""JSON Lines logs: the framing, torn-tail and sequence rules shared by ``events.jsonl``
(:mod:`aoe_tui.replay.log`) and ``season.jsonl`` (:mod:`aoe_tui.replay.season_log`), §2.1.

- One record per ``\\n``-terminated line, contiguous ``sequence`` from 0; blank lines are
  skipped (they still count for line numbers).
- A bad last line without its ``\\n`` is a torn append (``kill -9`` mid-write): readers
  ignore it, a writer resuming the log cuts it off and keeps its bytes beside the log
  (``<log>.torn-<offset>``). A good last line without its ``\\n``
  is kept (a writer resuming the log adds the ``\\n``).
- Any other bad line, or a sequence gap, raises the format's error naming ``path:line``.

A :class:`LogFormat` says how to parse one line and how to word errors; :func:`read_log`
reads a whole log, :class:`LogTail` follows a growing one (complete lines only), and
:class:`LogAppender` appends lines with the durability each log needs.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Generic, Literal, TypeVar

from aoe_tui.errors import AoeError
from aoe_tui.fsio import utf8_bytes, write_atomic

__all__ = ["LogAppender", "LogFormat", "LogTail", "parse_log_bytes", "read_log"]

R = TypeVar("R")

#: ``"none"``: flush only; ``"data"``: ``fdatasync`` (the data, not the metadata);
#: ``"full"``: ``fsync``.
Sync = Literal["none", "data", "full"]


@dataclass(frozen=True)
class LogFormat(Generic[R]):
    """How one kind of log is read.

    ``parse(line_bytes) -> record`` raises ``ValueError`` / ``UnicodeDecodeError`` with a
    short reason; the record has an int ``sequence``. ``error`` is raised with one line
    (``path:line: invalid <noun>: reason``, ``path: cannot read <what>: ...``).
    """

    parse: Callable[[bytes], R]
    error: type[AoeError]
    noun: str  # "event", "season event"
    what: str  # "event log", "season log"


def _lines(raw: bytes) -> Iterator[tuple[bytes, bool]]:
    """Yield (line without newline, had_newline)."""
    start, n = 0, len(raw)
    while start < n:
        end = raw.find(b"\n", start)
        if end == -1:
            yield raw[start:], False
            return
        yield raw[start:end], True
        start = end + 1


def _parse(fmt: LogFormat[R], path: Path, raw: bytes, next_sequence: int,
           first_line: int) -> tuple[list[R], int, int, AoeError | None]:
    """:func:`parse_log_bytes`, but a bad line ends the parse and is returned as the error
    (the records before it and what they consumed are kept)."""
    records: list[R] = []
    consumed = lines = 0
    for i, (line, had_nl) in enumerate(_lines(raw)):
        if not line.strip():
            if had_nl:
                consumed += len(line) + 1
                lines += 1
            continue
        try:
            rec = fmt.parse(line)
        except (ValueError, UnicodeDecodeError) as err:
            if not had_nl:
                break  # torn tail: ignore
            reason = str(err).splitlines()[0] if str(err) else type(err).__name__
            return records, consumed, lines, fmt.error(f"{path}:{first_line + i}: invalid {fmt.noun}: {reason}")
        seq: Any = getattr(rec, "sequence", None)
        if seq != next_sequence:
            return records, consumed, lines, fmt.error(
                f"{path}:{first_line + i}: sequence {seq} but expected {next_sequence}")
        next_sequence += 1
        records.append(rec)
        consumed += len(line) + (1 if had_nl else 0)
        lines += 1 if had_nl else 0
    return records, consumed, lines, None


def parse_log_bytes(fmt: LogFormat[R], path: Path, raw: bytes, *, next_sequence: int = 0,
                    first_line: int = 1) -> tuple[list[R], int, int]:
    """Parse ``raw`` (the log from some line on): returns ``(records, bytes consumed,
    newline-terminated lines consumed)``. A torn tail (bad, no newline) or a blank tail is
    not consumed. ``next_sequence``: the sequence the first record must have;
    ``first_line``: the 1-based line number of ``raw``'s first line (for errors).
    Raises ``fmt.error`` for a bad complete line or a sequence gap."""
    records, consumed, lines, error = _parse(fmt, path, raw, next_sequence, first_line)
    if error is not None:
        raise error
    return records, consumed, lines


def read_log(fmt: LogFormat[R], path: Path | str) -> list[R]:
    """Every record of the log at ``path`` (a missing file is an empty log; a torn last
    line is ignored). Raises ``fmt.error`` for an unreadable file or a bad line."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as err:
        raise fmt.error(f"{path}: cannot read {fmt.what}: {err.strerror}") from None
    return parse_log_bytes(fmt, path, raw)[0]


class LogTail(Generic[R]):
    """Follows a growing log: each :meth:`read` returns the records of the complete lines
    appended since the last call (a half-written last line waits for the next call).

    ``offset`` (bytes), ``line`` (lines consumed) and ``next_sequence`` say how far it got.
    Raises ``fmt.error`` for an unreadable file or a bad complete line: the good records
    before a bad line are returned first, and the tail stays before that line, so the next
    call raises (and every later one, until the line is mended).
    """

    def __init__(self, fmt: LogFormat[R], path: Path | str, *, offset: int = 0, line: int = 0,
                 next_sequence: int = 0) -> None:
        self.fmt = fmt
        self.path = Path(path)
        self.offset = offset
        self.line = line
        self.next_sequence = next_sequence

    def grown(self) -> bool:
        """Whether the file holds bytes past :attr:`offset` (False when it does not exist)."""
        try:
            return os.stat(self.path).st_size > self.offset
        except OSError:
            return False

    def read(self) -> list[R]:
        """The new complete records (``[]`` while the file does not exist)."""
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                raw = fh.read()
        except FileNotFoundError:
            return []
        except OSError as err:
            raise self.fmt.error(f"{self.path}: cannot read {self.fmt.what}: {err.strerror}") from None
        raw = raw[: raw.rfind(b"\n") + 1]
        records, consumed, lines, error = _parse(self.fmt, self.path, raw, self.next_sequence, self.line + 1)
        if error is not None and not records:
            raise error
        self.offset += consumed
        self.line += lines
        self.next_sequence += len(records)
        return records


class LogAppender(Generic[R]):
    """Appends lines to a log, resuming an existing one.

    Opening reads the existing log (:attr:`records`), ends a complete last line that lacks
    its newline, and cuts off a torn tail — its bytes are kept beside the log first, in
    ``<log name>.torn-<offset>`` (``offset``: the byte offset in the log where the tail
    began; ``-2``, ``-3``, … appended when that name holds other bytes; :attr:`torn` =
    ``(offset, kept file)``, else None) — then opens the file for
    appending (the parent folder is created). Raises ``fmt.error`` for a bad line of the
    existing log, or when the torn tail cannot be kept (it is then left in place).

    A failed append (a full disk: ``ENOSPC``) truncates the log back to where that line
    began, so the log never ends in the half line a full disk wrote.
    """

    def __init__(self, fmt: LogFormat[R], path: Path | str) -> None:
        self.path = Path(path)
        self.records: list[R] = []
        self.torn: tuple[int, Path] | None = None
        if self.path.exists():
            raw = self.path.read_bytes()
            self.records, consumed, _ = parse_log_bytes(fmt, self.path, raw)
            if consumed < len(raw):
                kept = self.path.with_name(f"{self.path.name}.torn-{consumed}")
                k = 1
                while kept.exists() and kept.read_bytes() != raw[consumed:]:  # never replace other torn bytes
                    k += 1
                    kept = self.path.with_name(f"{self.path.name}.torn-{consumed}-{k}")
                try:
                    write_atomic(kept, raw[consumed:])
                except OSError as err:
                    raise fmt.error(f"{kept}: cannot keep the torn tail of {fmt.what} {self.path} "
                                    f"({len(raw) - consumed} bytes at offset {consumed}): {err.strerror}") from None
                with open(self.path, "r+b") as fh:
                    fh.truncate(consumed)
                self.torn = (consumed, kept)
            elif raw and not raw.endswith(b"\n"):
                with open(self.path, "ab") as fh:  # complete last line without newline
                    fh.write(b"\n")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh: IO[bytes] | None = open(self.path, "ab", buffering=0)

    @property
    def closed(self) -> bool:
        return self._fh is None

    def append_line(self, line: str, sync: Sync = "none") -> None:
        """Write ``line`` (no newline; UTF-8, lone surrogates as U+FFFD) plus ``\\n`` and sync as asked; several lines
        joined by ``\\n`` go in the same single write (all or none are kept). Raises
        ``ValueError`` if closed, ``OSError`` if the write fails (the log is then truncated
        back to where the line began: no half line is left)."""
        if self._fh is None:
            raise ValueError(f"{self.path}: log is closed")
        data = utf8_bytes(line + "\n")  # an agent's lone surrogate never makes the log invalid UTF-8
        fd = self._fh.fileno()
        start = os.lseek(fd, 0, os.SEEK_END)
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            if sync == "data":
                os.fdatasync(fd)
            elif sync == "full":
                os.fsync(fd)
        except OSError:
            try:
                os.ftruncate(fd, start)
            except OSError:
                pass
            raise

    def close(self, *, fsync: bool = False) -> None:
        """(``fsync`` and) close the file (idempotent)."""
        if self._fh is not None:
            if fsync:
                try:
                    os.fsync(self._fh.fileno())
                except OSError:
                    pass
            self._fh.close()
            self._fh = None
