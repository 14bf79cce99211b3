"""Reading TOML source files (arena manifests, season files, suites, territory recipes)
and turning what is wrong with them into :class:`Problem` lines.

Every loader reports errors the same way: ``file:line: field: message`` (one
:class:`Problem` each), raised together as the loader's own error: ``error(problems)``,
where ``error`` is an :class:`~aoe_tui.errors.AoeError` subclass whose constructor takes
``list[Problem]`` (or any callable from ``list[Problem]`` to such an error).

- :func:`read_toml_source`: the file's bytes and UTF-8 text, or one problem (missing,
  a folder, unreadable, not UTF-8 — with the line of the first bad byte).
- :func:`parse_toml`: ``tomllib.loads`` with a syntax error turned into one problem on its
  line; an error at the end of the document (``tomllib`` gives no position then, e.g. an
  unclosed array) is put on the last line.
- :func:`schema_problems`: a pydantic ``ValidationError`` as ``(field path, message)``
  pairs (upstream-style paths such as ``territories[0].id``); the caller adds lines with
  :class:`~aoe_tui.domain.tomlpos.TomlPositions`.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from aoe_tui.errors import AoeError

__all__ = ["ErrorFactory", "Problem", "parse_toml", "read_toml_source", "schema_problems"]

#: Builds a loader's error from its problems: an ``AoeError`` subclass taking ``list[Problem]``.
ErrorFactory = Callable[[list["Problem"]], AoeError]

_AT_RE = re.compile(r"\s*\(at line (\d+), column \d+\)")


@dataclass(frozen=True)
class Problem:
    """One problem of a source file: ``file``, 1-based ``line`` (None if unknown),
    upstream-style ``field`` path (``""`` for a whole-file problem) and ``message``."""

    file: str
    line: int | None
    field: str
    message: str

    def __str__(self) -> str:
        loc = f"{self.file}:{self.line}" if self.line is not None else self.file
        return f"{loc}: {self.field}: {self.message}" if self.field else f"{loc}: {self.message}"


def read_toml_source(path: Path, file: str, error: ErrorFactory, noun: str) -> tuple[bytes, str]:
    """Read a TOML source file as ``(raw bytes, UTF-8 text)`` for a loader.

    Raises:
        error: ``error([Problem(...)])`` naming ``file`` when it is missing, a directory,
            unreadable, or not UTF-8 (with the line of the first bad byte). ``noun``
            names the file's kind in the message ("manifest", "season file").
    """
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise error([Problem(file, None, "", f"{noun} not found")]) from None  # type: ignore[call-arg]
    except IsADirectoryError:
        raise error([Problem(file, None, "", f"is a directory, not a {noun}")]) from None  # type: ignore[call-arg]
    except OSError as err:
        raise error([Problem(file, None, "", f"cannot read: {err.strerror}")]) from None  # type: ignore[call-arg]
    try:
        return raw, raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw[: err.start].count(b"\n") + 1
        raise error([Problem(file, line, "", "not valid UTF-8")]) from None  # type: ignore[call-arg]


def parse_toml(text: str, file: str, error: ErrorFactory) -> dict[str, Any]:
    """``tomllib.loads(text)``; a syntax error raises ``error([Problem(file, line, "",
    "invalid TOML: <tomllib's message without its position>")])`` — ``line`` is the
    error's line, or the last line for an error at the end of the document."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        msg = str(err)
        m = _AT_RE.search(msg)
        line = int(m.group(1)) if m else (text.count("\n") + 1 if "end of document" in msg else None)
        raise error([Problem(file, line, "", f"invalid TOML: {_AT_RE.sub('', msg)}")]) from None  # type: ignore[call-arg]


def _loc_path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            part = "class" if part == "class_" else "from" if part == "from_" else str(part)
            # pydantic puts union/literal tags into loc; skip non-field tags
            out += f".{part}" if out else part
    return out


_TYPE_MSGS = {
    "missing": "missing required field",
    "extra_forbidden": "unknown field",
}


def schema_problems(err: ValidationError) -> list[tuple[str, str]]:
    """``(field path, message)`` for each distinct error of ``err``, in pydantic's order;
    a scalar input is quoted in the message (``... (got 'x')``)."""
    out = []
    seen = set()
    for e in err.errors(include_url=False):
        loc = tuple(p for p in e["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        path = _loc_path(loc)
        msg = _TYPE_MSGS.get(e["type"], e["msg"])
        if e["type"] not in _TYPE_MSGS and "input" in e and not isinstance(e["input"], (dict, list)):
            msg = f"{msg} (got {e['input']!r})"
        if (path, msg) in seen:
            continue
        seen.add((path, msg))
        out.append((path, msg))
    return out
