"""Season files (``seasons/*.toml``): who races, on which arena and provider, in which format.

Seasons are ours (upstream has no tournaments, spec §10.2). A season file::

    id = "demo"                     # valid id (a-z, 0-9, '-')
    label = "2026-W37"              # free text without '/' (ISO week, date, ...)
    arena = "../arenas/first-build/arena.toml"   # relative to the season file
    # or, a cup across arenas (exactly one of arena / arenas / suite):
    # arenas = ["../arenas/first-build", "../arenas/durable-job-queue"]   # round r races
    #                                 # arenas[(r - 1) % len(arenas)]
    # suite = "../suites/infra-core.toml"   # an upstream suite file (§1.13) as it is: each
    #                                 # arena for its `rounds` rounds in a row, in order
    seed = 7                        # draws are reproducible for the same seed
    max_attempts = 2                # attempts per heat (infrastructure retries), >= 1
    concurrent_heats = 2            # heats run at once, >= 1 (default 2)
    drain_seconds = 30              # post-match drain window (s), optional

    [provider]
    kind = "container"              # a registered provider (aoe_tui.runtime.registry)
    ready_timeout_s = 60            # that provider's options (its config model, s)

    [arena_overrides]               # optional, documented deviations from the arena
    duration_seconds = 90           # rules.duration_seconds for every heat (s)
    minimum_territories = 2         # lets 2-entrant heats run on a 3-territory arena

    [adapters]                      # optional upstream-style NAME = PATH registrations
    tiny = "../tests/adapters/tiny-adapter.sh"

    [cluster]                       # optional: heats on the worker nodes of a Ray cluster
    address = "auto"                # as Ray takes it (aoe run --cluster ADDRESS overrides)
    agent_memory_gb = 0.6           # a heat's Ray memory need: per agent (GB) ...
    referee_memory_gb = 0.5         # ... plus the referee's (GB)

    [format]
    kind = "league"                 # a registered format (aoe_tui.season.formats.FORMATS)
    heats_per_entrant = 3           # league only
    # advance = 2                   # knockout only: top N of each heat go on

    [prices."opencode-go/kimi-k3"]  # optional, per model: USD per 1M tokens (aoe_tui.domain.prices)
    input_per_mtok = 0.60           # uncached input
    output_per_mtok = 2.50          # output (reasoning included)
    cache_read_per_mtok = 0.15      # input read from the cache (default: the input price)
    cache_write_per_mtok = 0.60     # input written to the cache (default: the input price)

    [budget]                        # optional live limits per entrant, enforced at the credential proxy
    heat_max_tokens = 2_000_000     # tokens (input + output) per heat
    heat_max_requests = 400         # model requests per heat
    season_max_cost_microusd = 20_000_000   # µUSD over the whole season (priced at [prices])
    season_max_tokens = 50_000_000  # tokens over the whole season
    season_max_requests = 5_000     # model requests over the whole season

    [[entrants]]
    id = "oracle"
    adapter = "oracle"              # oracle | scripted:NAME | command:PATH | registered NAME
    model = "oracle"
    reasoning_effort = "default"
    [entrants.budget]
    resource_units = 1
    [entrants.options]              # adapter options (free-form scalars), kept for adapters
    temperature = 0.2

Every table rejects unknown keys and types are strict. :func:`load_season` reports
**every** problem as ``file:line: field: message`` (lines from
:class:`aoe_tui.domain.tomlpos.TomlPositions`) in one :class:`SeasonFileError`.

Kinds: this layer lists no provider and no format (it knows the default provider kind,
:data:`DEFAULT_PROVIDER_KIND`, and holds the built-in formats' models). ``[provider]`` and
``[format]`` are validated against the kind tables that the layers owning them install
with :func:`install_kinds` when they are imported (:mod:`aoe_tui.runtime.registry`: providers,
:mod:`aoe_tui.season.formats`: formats); ``kind`` must be one of the installed names and
the rest of the table that kind's config model (a :class:`SectionConfig`). With no table
installed (this module used alone) a section keeps its raw shape (:class:`AnySection`:
``kind`` plus the given options); the provider registry and :func:`make_format` validate
such a section when they build from it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from aoe_tui.domain.arena import Budget, is_valid_id
from aoe_tui.domain.prices import ModelPrice
from aoe_tui.domain.spend import SpendCap
from aoe_tui.domain.tomlfile import Problem, parse_toml, read_toml_source, schema_problems
from aoe_tui.domain.tomlpos import TomlPositions
from aoe_tui.errors import AoeError

__all__ = [
    "DEFAULT_PROVIDER_KIND",
    "AnySection",
    "ArenaOverrides",
    "ClusterConfig",
    "Entrant",
    "KnockoutFormat",
    "SeasonBudget",
    "LeagueFormat",
    "LoadedSeason",
    "SectionConfig",
    "SeasonFile",
    "SeasonFileError",
    "changed_fields",
    "install_kinds",
    "load_season",
    "parse_season_text",
    "section_problems",
]

#: ``[provider] kind`` when the season file has no ``[provider]`` table.
DEFAULT_PROVIDER_KIND = "container"

PosInt = Annotated[int, Field(ge=1)]
Scalar = Union[str, int, float, bool]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class Entrant(_Model):
    """``[[entrants]]``: one agent configuration that races in the season.

    ``id`` becomes the agent id in every heat's manifest; ``adapter`` is an agent spec
    (see :func:`aoe_tui.agents.registry.resolve_adapter`); ``budget`` as ``[agents.budget]``
    (§1.11); ``options`` are adapter options, recorded in the season folder and given to
    adapters that accept them.
    """

    id: str
    adapter: str
    model: str
    reasoning_effort: str = "default"
    budget: Budget = Field(default_factory=lambda: Budget(resource_units=1))
    options: dict[str, Scalar] = Field(default_factory=dict)


class SeasonBudget(_Model):
    """``[budget]``: live spend limits for **each** entrant, enforced by the credential proxy as
    the agent spends (issue 27; :class:`aoe_tui.domain.spend.SpendCap`). Not upstream's: upstream
    checks ``[agents.budget]`` only after an agent ends (§1.11, §5.4). A heat's cost limit is
    the entrant's ``budget.max_cost_microusd`` (µUSD); these add tokens and requests per heat,
    and cost (µUSD), tokens and requests summed over all of an entrant's heats in the season.
    Any left out is no limit. Past one, the next model call is refused, the harness is ended
    and the seat's result is ``budget_exceeded``."""

    heat_max_tokens: PosInt | None = None
    heat_max_requests: PosInt | None = None
    season_max_cost_microusd: PosInt | None = None
    season_max_tokens: PosInt | None = None
    season_max_requests: PosInt | None = None

    def heat_cap(self, max_cost_microusd: int | None) -> SpendCap:
        """The per-heat cap with the entrant's cost limit (µUSD)."""
        return SpendCap(max_cost_microusd, self.heat_max_tokens, self.heat_max_requests, "heat")

    def season_cap(self) -> SpendCap:
        """The season-wide cap (empty when no season field is set)."""
        return SpendCap(self.season_max_cost_microusd, self.season_max_tokens, self.season_max_requests, "season")


class SectionConfig(_Model):
    """Base of a ``[provider]`` / ``[format]`` config model: ``kind`` plus the options of
    that kind, declared by subclasses (unknown keys refused, strict types)."""

    kind: str


class AnySection(BaseModel):
    """A ``[provider]`` / ``[format]`` table before its kind's model is known: ``kind`` and
    the given options as extra attributes (see the module docstring, "Kinds")."""

    model_config = ConfigDict(extra="allow", strict=True)

    kind: str


#: ``() -> {kind: config model}`` of one section, in the order they are listed to users.
KindModels = Callable[[], Mapping[str, type[BaseModel]]]
_KINDS: dict[str, KindModels] = {}
#: ``() -> {kind: why a season file may not name it}`` per section (kinds that exist but
#: are refused here, e.g. providers for ``aoe match run`` only).
_REFUSED: dict[str, Callable[[], Mapping[str, str]]] = {}


def install_kinds(section: str, models: KindModels, refused: Callable[[], Mapping[str, str]] | None = None) -> None:
    """Validate ``[section]`` (``"provider"`` or ``"format"``) against ``models()``: called
    once by the layer that owns the section's registry (replaces an earlier table).
    ``refused()`` names kinds that exist but that a season file may not use, each with the
    reason given in the error line instead of "unknown"."""
    _KINDS[section] = models
    if refused is None:
        _REFUSED.pop(section, None)
    else:
        _REFUSED[section] = refused


def section_problems(section: str, raw: Any) -> tuple[BaseModel | None, list[tuple[str, str]]]:
    """Validate one ``[section]`` table ``raw`` (a dict) against the installed kind table.

    Returns ``(model, problems)``: the kind's config model instance (None when there is no
    table, the table is not a dict or has problems) and ``(field path, message)`` pairs, e.g.
    ``("provider.kind", "unknown provider kind 'x' (known: container, qemu)")``. A missing
    or non-string ``kind`` is left to the season file's schema to report.
    """
    table = _KINDS.get(section)
    if table is None or not isinstance(raw, dict):
        return None, []
    kind = raw.get("kind", DEFAULT_PROVIDER_KIND if section == "provider" else None)
    if not isinstance(kind, str):
        return None, []
    models = table()
    model = models.get(kind)
    if model is None:
        known = ", ".join(models) or "none"
        why = _REFUSED[section]().get(kind) if section in _REFUSED else None
        if why:
            return None, [(f"{section}.kind", f"{section} kind {kind!r} {why}; a season file takes: {known}")]
        return None, [(f"{section}.kind", f"unknown {section} kind {kind!r} (known: {known})")]
    try:
        return model.model_validate({**raw, "kind": kind}), []
    except ValidationError as err:
        return None, [(f"{section}.{p}" if p else section, m) for p, m in schema_problems(err)]


class ArenaOverrides(_Model):
    """``[arena_overrides]``: deviations from the arena's ``[rules]`` for every heat.

    ``duration_seconds`` (s) shortens heats (demo/CI); ``minimum_territories`` (>= 2)
    allows heats with empty seats on arenas that demand more territories.
    """

    duration_seconds: PosInt | None = None
    minimum_territories: Annotated[int, Field(ge=2)] | None = None


class ClusterConfig(_Model):
    """``[cluster]``: run every heat on a worker node of a Ray cluster (``aoe run
    --cluster ADDRESS`` does the same and wins over the table).

    ``address`` as Ray takes it (``"auto"``, ``"HOST:PORT"``); a heat's actor declares
    ``agent_memory_gb`` (GB) per seated agent plus ``referee_memory_gb`` (GB) as its Ray
    memory need, so Ray places it on a node with that much and its out-of-memory killer
    accounts for it."""

    address: str
    agent_memory_gb: Annotated[float | int, Field(gt=0)] = 0.6
    referee_memory_gb: Annotated[float | int, Field(ge=0)] = 0.5


class KnockoutFormat(SectionConfig):
    """``[format] kind = "knockout"``: heats; the top ``advance`` of each go on, until a final."""

    kind: Literal["knockout"]
    advance: PosInt = 2


class LeagueFormat(SectionConfig):
    """``[format] kind = "league"``: every entrant races ``heats_per_entrant`` heats
    against rotating opponents; the standings decide."""

    kind: Literal["league"]
    heats_per_entrant: PosInt = 3


class SeasonFile(_Model):
    """A whole season file (see the module docstring for every key)."""

    id: str
    label: str
    arena: str | None = None
    arenas: list[str] | None = None
    suite: str | None = None
    seed: int = 0
    max_attempts: PosInt = 2
    #: heats run at once; 2 by default: a first-build heat keeps about 0.7-0.9 of a CPU busy,
    #: so two fit a 2-core host and four double the oracle's time to durable (docs/territories.md,
    #: "Many heats on one machine"; raise it on bigger hosts)
    concurrent_heats: PosInt = 2
    drain_seconds: Annotated[float | int, Field(ge=0)] = 30
    provider: AnySection = Field(default_factory=lambda: AnySection(kind=DEFAULT_PROVIDER_KIND))
    arena_overrides: ArenaOverrides = Field(default_factory=ArenaOverrides)
    adapters: dict[str, str] = Field(default_factory=dict)
    format: AnySection
    entrants: list[Entrant]
    #: heats on a Ray cluster's worker nodes (None: on this machine)
    cluster: ClusterConfig | None = None
    #: model (as entrants name it) → its prices; a priced entrant's cost is ours, not its
    #: adapter's (see :mod:`aoe_tui.domain.prices`)
    prices: dict[str, ModelPrice] = Field(default_factory=dict)
    #: live spend limits per entrant, per heat and per season (None: only the budgets' cost)
    budget: SeasonBudget | None = None


def semantic_problems(s: SeasonFile) -> list[tuple[str, str]]:
    """Rules beyond the schema, as ``(field path, message)`` pairs."""
    out: list[tuple[str, str]] = []
    if not is_valid_id(s.id):
        out.append(("id", f"invalid id {s.id!r}: use only a-z, 0-9 and '-'"))
    if not s.label.strip():
        out.append(("label", "must not be blank"))
    elif "/" in s.label or "\\" in s.label or "\n" in s.label:
        out.append(("label", "must not contain '/', '\\' or a newline"))
    given = [k for k in ("arena", "arenas", "suite") if getattr(s, k) is not None]
    if not given:
        out.append(("arena", "missing: name the arena (arena = PATH), a cup across arenas "
                             "(arenas = [PATH, ...]) or an upstream suite (suite = PATH)"))
    elif len(given) > 1:
        out.append((given[1], f"give only one of arena, arenas and suite (also got {given[0]})"))
    if s.arena is not None and not s.arena.strip():
        out.append(("arena", "must not be blank"))
    if s.suite is not None and not s.suite.strip():
        out.append(("suite", "must not be blank"))
    if s.arenas is not None:
        if not s.arenas:
            out.append(("arenas", "must name at least one arena"))
        seen_arenas: dict[str, int] = {}
        for i, a in enumerate(s.arenas):
            key = a.strip().rstrip("/").removesuffix("/arena.toml")
            if not key:
                out.append((f"arenas[{i}]", "must not be blank"))
            elif key in seen_arenas:
                out.append((f"arenas[{i}]", f"{a!r} is listed twice (also arenas[{seen_arenas[key]}]); "
                                            "rounds already cycle through the list"))
            else:
                seen_arenas[key] = i
    if s.cluster is not None and not s.cluster.address.strip():
        out.append(("cluster.address", "must not be blank (a Ray address: \"auto\" or HOST:PORT)"))
    if len(s.entrants) < 2:
        out.append(("entrants", f"a season needs at least 2 entrants, got {len(s.entrants)}"))
    seen: dict[str, int] = {}
    for i, e in enumerate(s.entrants):
        p = f"entrants[{i}]"
        if not is_valid_id(e.id):
            out.append((f"{p}.id", f"invalid id {e.id!r}: use only a-z, 0-9 and '-'"))
        elif e.id in seen:
            out.append((f"{p}.id", f"duplicate entrant id {e.id!r} (first at entrants[{seen[e.id]}])"))
        else:
            seen[e.id] = i
        if not e.adapter.strip():
            out.append((f"{p}.adapter", "must not be blank"))
        if not e.model.strip():
            out.append((f"{p}.model", "must not be blank"))
        if e.budget.resource_units == 0:
            out.append((f"{p}.budget.resource_units", "must be greater than 0"))
    models = {e.model for e in s.entrants}
    for model in s.prices:
        if model not in models:
            out.append((f"prices.{model}", f"no entrant races model {model!r} "
                                           f"(entrants' models: {', '.join(sorted(models)) or 'none'})"))
    for name, path in s.adapters.items():
        if not name.strip() or not path.strip():
            out.append((f"adapters.{name}", "needs a non-empty NAME = PATH"))
    return out


class SeasonFileError(AoeError):
    """A season file that cannot be loaded; ``.problems`` lists every :class:`Problem`
    (``str()`` is one ``file:line: field: message`` per line)."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


@dataclass(frozen=True)
class LoadedSeason:
    """A validated season file: ``season`` (model), ``path`` (as given), ``raw`` (bytes),
    ``sha256`` (hex of ``raw``), ``arena_paths`` (the arena manifests of ``arena`` or
    ``arenas``, resolved against the season file's folder; a package folder means
    ``DIR/arena.toml``) and ``suite_path`` (the suite file of ``suite``, resolved the same
    way). ``arena_path`` is the first arena manifest (None for a suite)."""

    season: SeasonFile
    path: Path
    raw: bytes
    sha256: str
    arena_paths: tuple[Path, ...] = ()
    suite_path: Path | None = None

    @property
    def arena_path(self) -> Path | None:
        """The (first) arena manifest of ``arena`` / ``arenas``; None for a suite."""
        return self.arena_paths[0] if self.arena_paths else None


def parse_season_text(text: str, file: str) -> SeasonFile:
    """Parse + validate season TOML ``text``; raise :class:`SeasonFileError` naming lines."""
    data = parse_toml(text, file, SeasonFileError)
    pos = TomlPositions(text)
    sections: dict[str, BaseModel] = {}
    found: list[tuple[str, str]] = []
    for name in ("provider", "format"):
        model, bad = section_problems(name, data.get(name, {} if name == "provider" else None))
        found += bad
        if model is not None:
            sections[name] = model
    try:
        season = SeasonFile.model_validate(data)
    except ValidationError as err:
        found = schema_problems(err) + found
    if found:
        raise SeasonFileError([Problem(file, pos.line_of(p), p, m) for p, m in found])
    season = season.model_copy(update=sections)
    sem = semantic_problems(season)
    if sem:
        raise SeasonFileError([Problem(file, pos.line_of(p), p, m) for p, m in sem])
    return season


def load_season(path: Path | str) -> LoadedSeason:
    """Read and validate a season file.

    Raises :class:`SeasonFileError` (an :class:`AoeError`) for a missing/unreadable file,
    non-UTF-8 text, broken TOML, or any schema/semantic problem (all listed, with lines).
    The arena manifest itself is not loaded here (see :mod:`aoe_tui.season.runner`).
    ``[provider]`` / ``[format]`` are checked against the kinds installed so far; with none
    installed they stay raw tables (module docstring, "Kinds"): commands load season files
    with :func:`aoe_tui.season.runner.load_season_file`, which installs them first.
    """
    file = str(path)
    path = Path(path)
    raw, text = read_toml_source(path, file, SeasonFileError, "season file")
    season = parse_season_text(text, file)

    def resolve(text: str, manifest: bool) -> Path:
        p = Path(text)
        if not p.is_absolute():
            p = path.parent / p
        return p / "arena.toml" if manifest and p.is_dir() else p

    names = [season.arena] if season.arena is not None else list(season.arenas or [])
    return LoadedSeason(season=season, path=path, raw=raw, sha256=hashlib.sha256(raw).hexdigest(),
                        arena_paths=tuple(resolve(a, True) for a in names),
                        suite_path=resolve(season.suite, False) if season.suite is not None else None)


def _flatten(value: Any, path: str, out: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _flatten(v, f"{path}.{k}" if path else str(k), out)
        if not value and path:
            out[path] = {}
    elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        for i, v in enumerate(value):
            _flatten(v, f"{path}[{i}]", out)
    else:
        out[path] = value


def changed_fields(old_text: str, new_text: str) -> list[str]:
    """The fields (dotted paths such as ``max_attempts``, ``format.advance``,
    ``entrants[2].model``) whose values differ between two season file texts, sorted;
    added and removed keys count. ``[]`` when only comments or layout differ. A text that
    is not TOML counts as the one field ``(not TOML)``."""
    import tomllib

    try:
        old, new = tomllib.loads(old_text), tomllib.loads(new_text)
    except tomllib.TOMLDecodeError:
        return ["(not TOML)"]
    a: dict[str, Any] = {}
    b: dict[str, Any] = {}
    _flatten(old, "", a)
    _flatten(new, "", b)
    return sorted(k for k in a.keys() | b.keys() if a.get(k, _MISSING) != b.get(k, _MISSING))


_MISSING = object()
