""""How they fought": a transcript's ``tool_trace`` → ``analysis.json`` (spec §9.2, schema 1).

Rules (spec §9.2, checked against the seed bundle's ``analyses``):

- meta tools ``TodoWrite`` / ``plan`` (case-insensitive) are skipped, but ``index`` keeps
  counting them;
- the command is ``input.command`` / ``input.cmd`` / ``input.script``, else
  ``"<tool> <file_path>"``, else ``"<tool> <input JSON>"`` (compact, sorted keys — so
  opencode's ``write`` with ``filePath`` becomes ``write {"content":…,"filePath":…}`` as in
  the seed);
- ``kind``: mutation tool names → ``mutation``; lifecycle phrase → ``lifecycle``; mutation
  phrase → ``mutation``; validation phrase → ``validation``; else ``discovery``;
- ``command`` in actions: runs of spaces/tabs collapsed, truncated to 700 chars + ``…``;
  ``output_excerpt``: trimmed, spaces collapsed, truncated to 280 chars + ``…``;
- ``architecture``: technologies by substring over lowercased command + output (in the
  spec's order), ``service_units`` = command tokens ending in ``.service`` (trimmed of
  non-alphanumerics at both ends, sorted), ``persistent_paths`` = command tokens under
  ``/etc/ /opt/ /srv/ /var/lib/`` (trailing ``/`` removed), sorted, first 20. Tokens come
  from the displayed (truncated) command, split on whitespace, quotes, backslashes and
  shell punctuation.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from aoe_tui.domain.adapter_io import transcript_problem
from aoe_tui.fsio import write_json_atomic

__all__ = ["ANALYZER", "analyze_trace", "classify", "command_of", "write_analysis"]

try:
    from aoe_tui import __version__ as _VERSION
except Exception:  # pragma: no cover
    _VERSION = "0"

#: The ``analyzer`` value we write (upstream writes ``aoe-controller/<version>``).
ANALYZER = f"aoe-tui/{_VERSION}"

_META = {"todowrite", "plan"}
_MUTATION_TOOLS = {"write", "edit", "multiedit", "notebookedit", "apply_patch"}
_LIFECYCLE = ("systemctl start", "systemctl restart", "systemctl enable", "systemctl daemon-reload",
              "systemctl reboot", " reboot", "shutdown")
_MUTATION = ("cat >", "cat <<", "tee ", "sed -i", "install -d", "mkdir ", "chmod ", "chown ", "cp ", "mv ", "rm ",
             "touch ", "sqlite3 ", "nixos-rebuild", "apt install", "dnf install", "pip install", "npm install", " > /")
_VALIDATION = ("curl ", "wget ", "systemctl status", "systemctl is-active", "journalctl", "ss ", "netstat", "pytest",
               "cargo test", "npm test")
_TECH = (
    ("Python", ("python",)),
    ("SQLite", ("sqlite",)),
    ("PostgreSQL", ("postgres", "psql")),
    ("Redis", ("redis",)),
    ("Nginx", ("nginx",)),
    ("Node.js", ("node.js", "nodejs", "node ", "npm ")),
    ("systemd", ("systemd", "systemctl")),
    ("Gunicorn", ("gunicorn",)),
    ("Ruby", ("ruby",)),
    ("Rails", ("rails",)),
    ("Rust", ("rustc", "cargo ", "rust")),
)
_PATH_PREFIXES = ("/etc/", "/opt/", "/srv/", "/var/lib/")
_SPLIT = re.compile(r"[\s\"'`\\;|&()<>,{}\[\]=]+")
_SPACES = re.compile(r"[ \t\f\v]+")


def command_of(name: str, inp: Any) -> str:
    """The command string of one trace entry (spec §9.2 step 2)."""
    if isinstance(inp, dict):
        for key in ("command", "cmd", "script"):
            if isinstance(inp.get(key), str):
                return inp[key]
        if "file_path" in inp:
            return f"{name} {inp['file_path']}"
    if inp is None:
        return name
    return f"{name} {json.dumps(inp, sort_keys=True, separators=(',', ':'), ensure_ascii=False)}"


def classify(name: str, command: str) -> str:
    """``mutation`` / ``lifecycle`` / ``validation`` / ``discovery`` (spec §9.2 step 3, first match wins)."""
    if name.lower() in _MUTATION_TOOLS:
        return "mutation"
    if any(p in command for p in _LIFECYCLE):
        return "lifecycle"
    if any(p in command for p in _MUTATION):
        return "mutation"
    if any(p in command for p in _VALIDATION):
        return "validation"
    return "discovery"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def _collapse(text: str) -> str:
    return "\n".join(_SPACES.sub(" ", line) for line in text.split("\n"))


def _int(v: Any) -> int:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0


def analyze_trace(
    tool_trace: list[dict[str, Any]], *, agent: str, territory: str, model: str | None, outcome: str | None,
    source_sha256: str,
) -> dict[str, Any] | None:
    """Build the §9.2 ``analysis.json`` object; ``None`` if ``tool_trace`` is empty.

    Each entry: ``{id, name, input, output (str), is_error (bool), started_after_ms, duration_ms}``
    (spec §2.7). Keys of the result are sorted like the seed bundle's.
    """
    if not tool_trace:
        return None
    actions: list[dict[str, Any]] = []
    techs: set[str] = set()
    units: set[str] = set()
    paths: set[str] = set()
    counts = {"discovery": 0, "mutation": 0, "lifecycle": 0, "validation": 0}
    errors = 0
    first_mut: int | None = None
    last_seen: int | None = None
    for index, entry in enumerate(tool_trace):
        name = str(entry.get("name") or "")
        if name.lower() in _META:
            continue
        raw = command_of(name, entry.get("input"))
        kind = classify(name, raw)
        counts[kind] += 1
        output = entry.get("output")
        output = output if isinstance(output, str) else ("" if output is None else json.dumps(output))
        is_error = bool(entry.get("is_error"))
        errors += is_error
        start, dur = _int(entry.get("started_after_ms")), _int(entry.get("duration_ms"))
        if kind in ("mutation", "lifecycle") and first_mut is None:
            first_mut = start
        last_seen = max(last_seen or 0, start + dur)
        command = _clip(_collapse(raw), 700)
        low = (raw + "\n" + output).lower()
        for tech, needles in _TECH:
            if any(n in low for n in needles):
                techs.add(tech)
        for tok in _SPLIT.split(command):
            unit = re.sub(r"^[^0-9A-Za-z]+|[^0-9A-Za-z]+$", "", tok)
            if unit.endswith(".service"):
                units.add(unit)
            if tok.startswith(_PATH_PREFIXES):
                p = tok.rstrip("/.:")
                if p and p not in ("/etc", "/opt", "/srv", "/var/lib"):
                    paths.add(p)
        desc = entry.get("input", {}).get("description") if isinstance(entry.get("input"), dict) else None
        actions.append({
            "command": command,
            "description": desc if isinstance(desc, str) else None,
            "duration_ms": dur,
            "index": index,
            "kind": kind,
            "output_excerpt": _clip(_collapse(output.strip()), 280),
            "started_after_ms": start,
            "success": not is_error,
            "tool_id": str(entry.get("id") or ""),
        })
    order = [t for t, _ in _TECH]
    return {
        "actions": actions,
        "agent": agent,
        "analyzer": ANALYZER,
        "architecture": {
            "persistent_paths": sorted(paths)[:20],
            "service_units": sorted(units),
            "technologies": sorted(techs, key=order.index),
        },
        "metrics": {
            "discoveries": counts["discovery"],
            "first_mutation_after_ms": first_mut,
            "last_observed_after_ms": last_seen,
            "lifecycle_actions": counts["lifecycle"],
            "mutations": counts["mutation"],
            "tool_calls": len(actions),
            "tool_errors": errors,
            "validations": counts["validation"],
        },
        "model": model,
        "outcome": outcome,
        "schema_version": 1,
        "source_sha256": source_sha256,
        "territory": territory,
    }


def write_analysis(
    transcript_file: Path, analysis_file: Path, *, agent: str, territory: str, model: str | None,
    outcome: str | None = None,
) -> dict[str, Any] | None:
    """Read ``transcript_file`` (a transcript with ``tool_trace``, §2.7), write ``analysis_file`` (§9.2).

    ``outcome`` defaults to the transcript's ``outcome.status``. Returns the analysis, or
    ``None`` (nothing written) when the transcript is missing/unreadable or its trace is
    empty. A transcript that is not valid JSON is not skipped silently (upstream does): the
    analysis written is a stub whose ``unavailable`` says ``"transcript unavailable (invalid
    JSON at byte N)"``.
    """
    try:
        raw = Path(transcript_file).read_bytes()
    except OSError:
        return None
    problem = transcript_problem(Path(transcript_file))
    if problem is not None:  # said, not skipped: the bundle's slot and the TUI show it
        result = {"schema_version": 1, "analyzer": ANALYZER, "source_sha256": hashlib.sha256(raw).hexdigest(),
                  "agent": agent, "territory": territory, "model": model, "outcome": outcome, "unavailable": problem}
        write_json_atomic(Path(analysis_file), result)
        return result
    data = json.loads(raw)
    trace = data.get("tool_trace") if isinstance(data, dict) else None
    if not isinstance(trace, list) or not trace:
        return None
    if outcome is None:
        oc = data.get("outcome")
        outcome = oc.get("status") if isinstance(oc, dict) else None
    result = analyze_trace(
        [e for e in trace if isinstance(e, dict)], agent=agent, territory=territory,
        model=model if model is not None else data.get("model"), outcome=outcome,
        source_sha256=hashlib.sha256(raw).hexdigest(),
    )
    if result is not None:
        write_json_atomic(Path(analysis_file), result)
    return result
