"""Map TOML field paths to source line numbers (tomllib keeps no positions).

A small line scanner: it tracks ``[table]`` and ``[[array]]`` headers (with the
index of each array-of-tables element) and ``key = value`` lines, and records
the 1-based line of every path it sees, in upstream's path notation, e.g.
``build.milestones[2].timeout_seconds``. Multi-line strings and arrays are
skipped over. Inline tables are mapped to the line of their key.
"""

from __future__ import annotations

import re

_BARE = r"[A-Za-z0-9_-]+"
_KEYPART = rf'(?:{_BARE}|"(?:[^"\\]|\\.)*"|\'[^\']*\')'
_DOTTED = rf"{_KEYPART}(?:\s*\.\s*{_KEYPART})*"
_HEADER_RE = re.compile(rf"^\s*(\[\[?)\s*({_DOTTED})\s*\]\]?\s*(?:#.*)?$")
_KEY_RE = re.compile(rf"^\s*({_DOTTED})\s*=")
_PART_RE = re.compile(_KEYPART)


def _split(dotted: str) -> list[str]:
    parts = []
    for m in _PART_RE.finditer(dotted):
        p = m.group(0)
        if p[0] in "\"'":
            p = p[1:-1]
        parts.append(p)
    return parts


def _strip_strings(line: str) -> str:
    """Remove single-line string literals and comments (to count brackets)."""
    line = re.sub(r'"(?:[^"\\]|\\.)*"', '""', line)
    line = re.sub(r"'[^']*'", "''", line)
    return line.split("#", 1)[0]


class TomlPositions:
    """Path → 1-based line index of one TOML document.

    ``line_of("build.milestones[2].timeout_seconds")`` returns the line of that
    key; if the key is absent (a missing required field) it falls back to the
    closest enclosing table header that exists, and finally ``None``.
    """

    def __init__(self, text: str) -> None:
        self.lines: dict[str, int] = {}
        counters: dict[str, int] = {}
        # resolved path prefix of each array-of-tables: "build.milestones" -> "build.milestones[2]"
        current_elem: dict[str, str] = {}
        table = ""
        in_ml: str | None = None  # multi-line string delimiter
        depth = 0  # open brackets of a multi-line array
        for lineno, line in enumerate(text.splitlines(), start=1):
            if in_ml:
                if in_ml in line:
                    in_ml = None
                continue
            if depth > 0:
                s = _strip_strings(line)
                depth += s.count("[") + s.count("{") - s.count("]") - s.count("}")
                continue
            m = _HEADER_RE.match(line)
            if m:
                parts = _split(m.group(2))
                resolved = self._resolve(parts, current_elem)
                if m.group(1) == "[[":
                    idx = counters.get(resolved, 0)
                    counters[resolved] = idx + 1
                    # a new element resets nested arrays below it
                    for k in [k for k in counters if k.startswith(resolved + "[")]:
                        del counters[k]
                    for k in [k for k in current_elem if k.startswith(resolved + ".")]:
                        del current_elem[k]
                    self.lines.setdefault(resolved, lineno)
                    elem = f"{resolved}[{idx}]"
                    current_elem[".".join(parts)] = elem
                    table = elem
                else:
                    table = resolved
                self.lines.setdefault(table, lineno)
                continue
            m = _KEY_RE.match(line)
            if m:
                parts = _split(m.group(1))
                path = ".".join(([table] if table else []) + parts)
                self.lines.setdefault(path, lineno)
                rest = line[m.end():]
                for delim in ('"""', "'''"):
                    if rest.count(delim) == 1:
                        in_ml = delim
                        break
                if not in_ml:
                    s = _strip_strings(rest)
                    depth = max(0, s.count("[") + s.count("{") - s.count("]") - s.count("}"))

    @staticmethod
    def _resolve(parts: list[str], current_elem: dict[str, str]) -> str:
        """Resolve a header's dotted name, mapping array-of-tables prefixes to their element."""
        out = ""
        for i in range(len(parts)):
            raw = ".".join(parts[: i + 1])
            if raw in current_elem and i < len(parts) - 1:
                out = current_elem[raw]
            else:
                out = f"{out}.{parts[i]}" if out else parts[i]
        return out

    def line_of(self, path: str) -> int | None:
        """Line of ``path`` or of its nearest existing ancestor; ``None`` if nothing matches."""
        p = path
        while p:
            if p in self.lines:
                return self.lines[p]
            # strip the last ".key" or "[n]"
            cut = max(p.rfind("."), p.rfind("["))
            if cut <= 0:
                break
            p = p[:cut]
        if p in self.lines:
            return self.lines[p]
        return None
