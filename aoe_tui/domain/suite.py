"""Benchmark suite manifests (``suites/*.toml``) — upstream §1.13.

``load_suite(path)`` parses the suite (unknown keys rejected), loads every arena
manifest it lists (paths relative to the suite file's folder unless absolute)
and applies the load-time checks: no manifest listed twice, every arena a
``build_race``, arena ids unique, one fleet identity across arenas. Problems are
reported like manifest problems (:class:`~aoe_tui.domain.arena.ManifestError`,
``file:line: field: message``).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from aoe_tui.domain.arena import (
    LoadedManifest,
    ManifestError,
    load_manifest,
)
from aoe_tui.domain.tomlfile import Problem, parse_toml, read_toml_source, schema_problems
from aoe_tui.domain.tomlpos import TomlPositions

_SUITE_ID_RE = re.compile(r"^[A-Za-z0-9_-]+$")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class SuiteInfo(_Model):
    """``[suite]``: ``id`` (letters of either case, digits, ``-``, ``_``), ``rounds`` > 0."""

    id: str
    rounds: Annotated[int, Field(ge=0)]


class SuiteArena(_Model):
    """``[[arenas]]``: ``manifest`` path, optional ``rounds`` override (> 0)."""

    manifest: str
    rounds: Annotated[int, Field(ge=0)] | None = None


class SuiteManifest(_Model):
    """A whole suite file (§1.13)."""

    schema_version: Annotated[int, Field(ge=0)]
    suite: SuiteInfo
    arenas: list[SuiteArena]


@dataclass(frozen=True)
class LoadedSuite:
    """A validated suite with its arenas loaded (in file order)."""

    suite: SuiteManifest
    path: Path
    arenas: list[LoadedManifest]

    def rounds_for(self, index: int) -> int:
        """Rounds to play for the arena at ``index`` (override or suite default)."""
        r = self.suite.arenas[index].rounds
        return r if r is not None else self.suite.suite.rounds


def fleet_identity(loaded: LoadedManifest) -> list[tuple[str, str, str]]:
    """Sorted (model, adapter, reasoning_effort) over the manifest's agents."""
    return sorted((a.model, a.adapter, a.reasoning_effort) for a in loaded.manifest.agents)


def load_suite(path: Path | str) -> LoadedSuite:
    """Load and check a suite file; raise :class:`ManifestError` listing every problem."""
    path_text = str(path)
    path = Path(path)
    _raw, text = read_toml_source(path, path_text, ManifestError, "suite")
    data = parse_toml(text, path_text, ManifestError)
    pos = TomlPositions(text)

    def prob(field: str, msg: str) -> Problem:
        return Problem(path_text, pos.line_of(field), field, msg)

    try:
        suite = SuiteManifest.model_validate(data)
    except ValidationError as err:
        raise ManifestError([prob(p, m) for p, m in schema_problems(err)]) from None
    problems: list[Problem] = []
    if suite.schema_version != 1:
        problems.append(prob("schema_version", f"unsupported schema version {suite.schema_version}; expected 1"))
    if not _SUITE_ID_RE.match(suite.suite.id):
        problems.append(prob("suite.id", f"invalid suite id {suite.suite.id!r}"))
    if suite.suite.rounds == 0:
        problems.append(prob("suite.rounds", "must be greater than 0"))
    if not suite.arenas:
        problems.append(prob("arenas", "must not be empty"))
    seen_paths: set[str] = set()
    seen_ids: dict[str, int] = {}
    loaded: list[LoadedManifest] = []
    fleet0 = None
    for i, a in enumerate(suite.arenas):
        fp = f"arenas[{i}].manifest"
        if a.rounds is not None and a.rounds == 0:
            problems.append(prob(f"arenas[{i}].rounds", "must be greater than 0"))
        mpath = a.manifest if os.path.isabs(a.manifest) else os.path.join(os.path.dirname(path_text), a.manifest)
        norm = os.path.normpath(mpath)
        if norm in seen_paths:
            problems.append(prob(fp, f"manifest {a.manifest!r} is listed twice"))
            continue
        seen_paths.add(norm)
        try:
            lm = load_manifest(mpath)
        except ManifestError as err:
            problems.append(prob(fp, f"manifest {a.manifest!r} does not load"))
            problems.extend(err.problems)
            continue
        if lm.manifest.arena.mode != "build_race":
            problems.append(prob(fp, f"arena {lm.manifest.arena.id!r} is not a build_race"))
        aid = lm.manifest.arena.id
        if aid in seen_ids:
            problems.append(prob(fp, f"duplicate arena id {aid!r} (also arenas[{seen_ids[aid]}])"))
        seen_ids.setdefault(aid, i)
        fleet = fleet_identity(lm)
        if fleet0 is None:
            fleet0 = fleet
        elif fleet != fleet0:
            problems.append(prob(fp, f"arena {aid!r} has a different fleet identity than arenas[0]"))
        loaded.append(lm)
    if problems:
        raise ManifestError(problems)
    return LoadedSuite(suite=suite, path=path, arenas=loaded)
