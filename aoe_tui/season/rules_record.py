"""What decides a season's results, recorded when it starts: ``season-rules.json`` (ours).

A season's results are only comparable while every heat races the same rules. So the runner
records, in the season folder, the sha256 of everything that decides them and a resume
compares it with the files as they are now:

* every file of each arena package (:func:`aoe_tui.domain.provenance.package_digests`: the
  manifest with its milestones and points, the verifiers and ``verify/lib.sh``, the territory
  recipe, the builders and package adapters, the player's text; not ``README.md``), keyed
  ``arena ID: REL`` and shown as the package path (``arenas/first-build/verify/x.sh``);
* the runner's verifier toolkit the verifiers source (``aoe_tui/referee/kit/verify.sh``),
  keyed ``verifier toolkit``;
* each entrant's adapter on each arena (:meth:`aoe_tui.agents.base.Adapter.sha256`, as in a
  match's ``adapter_sha256``), keyed ``adapter SPEC (ARENA)``;
* each file the season's ``[adapters]`` registers, keyed ``adapter file NAME``.

The file (never a field of an upstream format)::

    {"schema": "aoe-tui.season-rules", "version": 1,
     "files": {KEY: SHA256, ...},           # what the season races with now
     "paths": {KEY: "shown as", ...},
     "accepted": [{"resume": N, "changed": ["arenas/x/verify/y.sh changed", ...],
                   "before": {KEY: SHA256 or null, ...}}]}   # --accept-changed-rules

A resume with any of them changed is refused (:class:`RulesChanged`, one line naming each
changed file) unless ``aoe run --accept-changed-rules``; then the change is appended to
``accepted``, ``files`` becomes the new digests (a later resume compares with those) and the
resume's ``season_resumed`` carries ``rules_changed``, which the standings show. A season
folder an older version started has no such file: the resume records the files as they are
and says it could check nothing.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aoe_tui.errors import AoeError
from aoe_tui.fsio import write_json_atomic

__all__ = ["KIT_KEY", "RULES_FILE", "RulesChanged", "changes", "load_rules", "rules_of", "write_rules"]

#: the record's file name in the season folder
RULES_FILE = "season-rules.json"
SCHEMA = "aoe-tui.season-rules"
#: the record's key of the runner's verifier toolkit
KIT_KEY = "verifier toolkit"


class RulesChanged(AoeError):
    """A resume found the rules changed since the season started; ``changed``: one
    ``path changed|added|removed`` per file."""

    def __init__(self, message: str, changed: list[str]) -> None:
        super().__init__(message)
        self.changed = changed


def _shown(path: Path) -> str:
    """``path`` relative to the working folder when under it, else as given."""
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return str(path)
    return str(path) if rel.startswith("..") else Path(rel).as_posix()


def rules_of(arenas: list[tuple[str, Path]], adapters: Mapping[str, str | None],
             adapter_files: Mapping[str, Path]) -> tuple[dict[str, str], dict[str, str]]:
    """``(digests, paths)`` of what decides the results now: ``arenas`` = ``(arena id,
    package folder)``; ``adapters`` = ``"adapter SPEC (ARENA)"`` → its sha256 (None: the
    adapter names no file; left out); ``adapter_files`` = ``[adapters]`` name → file.
    Raises :class:`aoe_tui.domain.provenance.ProvenanceError` for a file that cannot be read."""
    from aoe_tui.domain.provenance import file_sha256, package_digests

    digests: dict[str, str] = {}
    paths: dict[str, str] = {}
    for arena_id, folder in arenas:
        for rel, sha in package_digests(folder).items():
            key = f"arena {arena_id}: {rel}"
            digests[key] = sha
            paths[key] = _shown(Path(folder) / rel)
    if arenas:  # the runner's verifier toolkit decides every verifier's verdict too
        from aoe_tui.referee.verifier import VERIFY_KIT

        digests[KIT_KEY] = file_sha256(VERIFY_KIT, "the verifier toolkit")
        paths[KIT_KEY] = _shown(VERIFY_KIT)
    for key, sha in adapters.items():
        if sha:
            digests[key] = sha
            paths[key] = key
    for name, path in adapter_files.items():
        key = f"adapter file {name}"
        digests[key] = file_sha256(path, f"adapter {name}")
        paths[key] = _shown(Path(path))
    return dict(sorted(digests.items())), dict(sorted(paths.items()))


def changes(before: Mapping[str, str], now: Mapping[str, str], paths: Mapping[str, str],
            old_paths: Mapping[str, str]) -> list[str]:
    """One ``PATH changed|added|removed`` per key whose digest differs, in key order."""
    out = []
    for key in sorted(set(before) | set(now)):
        if before.get(key) == now.get(key):
            continue
        how = "added" if key not in before else "removed" if key not in now else "changed"
        out.append(f"{paths.get(key) or old_paths.get(key) or key} {how}")
    return out


def load_rules(season_dir: Path) -> dict[str, Any] | None:
    """The season folder's record, or None when it has none (an older version started the
    season). Raises :class:`AoeError` (one line naming the file) when it is not a record."""
    path = Path(season_dir) / RULES_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        raise AoeError(f"{path}: not a season rules record: {err}") from None
    if (not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("files"), dict)
            or not all(isinstance(v, str) for v in data["files"].values())):
        raise AoeError(f"{path}: not a season rules record (schema {SCHEMA!r} with a files table expected)")
    data.setdefault("paths", {})
    data.setdefault("accepted", [])
    return data


def write_rules(season_dir: Path, digests: Mapping[str, str], paths: Mapping[str, str],
                accepted: list[dict[str, Any]] | None = None) -> None:
    """Write the record (atomically; see the module docstring for its shape)."""
    write_json_atomic(Path(season_dir) / RULES_FILE, {
        "schema": SCHEMA, "version": 1, "files": dict(digests), "paths": dict(paths),
        "accepted": list(accepted or [])})
