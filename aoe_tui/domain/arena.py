"""Arena manifests (``arena.toml``) and arena packages — upstream §1.

Models mirror upstream's manifest structs field for field: every table rejects
unknown keys, types are strict (no ``"5"`` → 5 coercion, no bool for int),
defaults as upstream. Semantic validation (§1.1–§1.11) collects **all**
problems, each with an upstream-style path such as
``build.milestones[2].timeout_seconds``.

Entry points:

* :func:`load_manifest` — read + validate a manifest file; problems carry the
  TOML source line (:class:`Problem`), raised together as :class:`ManifestError`.
* :func:`arena_json` — the ``arena.json`` dict (§2.7): every default filled in,
  upstream key order.
* :func:`validate_package` — the package checks of §1.12 (:class:`PackageReport`).

Constructing :class:`ArenaManifest` directly (e.g. ``model_validate(dict)``) also
runs the semantic checks and raises pydantic's ``ValidationError`` listing them.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    model_validator,
)

from aoe_tui.domain.tomlfile import Problem, parse_toml, read_toml_source, schema_problems
from aoe_tui.domain.tomlpos import TomlPositions
from aoe_tui.errors import AoeError

U8 = Annotated[int, Field(ge=0, le=255)]
U16 = Annotated[int, Field(ge=0, le=65535)]
U32 = Annotated[int, Field(ge=0, le=2**32 - 1)]
U64 = Annotated[int, Field(ge=0, le=2**64 - 1)]

_ID_RE = re.compile(r"^[a-z0-9-]+$")


def is_valid_id(value: str) -> bool:
    """Upstream "valid id" (§1.1): non-empty, only ``a-z``, ``0-9`` and ``-``."""
    return bool(_ID_RE.match(value))


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)


class ArenaInfo(_Model):
    """``[arena]`` (§1.3). ``mode`` defaults to ``conquest`` as upstream."""

    id: str
    display_name: str
    category: str | None = None
    mode: Literal["build_race", "conquest"] = "conquest"


class Network(_Model):
    """``[network]`` (§1.4)."""

    cidr: str
    allow_public_internet: bool = False


class Rules(_Model):
    """``[rules]`` (§1.5). ``duration_seconds`` in s, ``tick_ms`` in ms."""

    duration_seconds: U64
    tick_ms: U64
    healthy_resources_per_tick: U64
    minimum_territories: U64


class MilestoneDef(_Model):
    """``[[build.milestones]]`` (§1.6). ``verifier`` is relative to the arena dir;
    ``timeout_seconds`` in s (verifier wall clock only)."""

    id: str
    display_name: str
    depends_on: list[str] = Field(default_factory=list)
    verifier: str
    operation: Literal["observe", "host_reboot"] = "observe"
    timeout_seconds: U64
    points: U64
    required: bool = True


class BuildRules(_Model):
    """``[build]`` (§1.6)."""

    stop_on_first_durable: bool
    completion_milestone: str
    milestones: list[MilestoneDef]


class Resources(_Model):
    """``[classes.resources]`` (§1.7): what each seat of the class gets (the providers enforce
    it: ``runtime/provider.TerritoryResources``)."""

    vcpus: U16
    memory_mib: U64
    disk_mib: U64


class ClassDef(_Model):
    """``[[classes]]`` (§1.7)."""

    id: str
    display_name: str
    strengths: list[str] = Field(default_factory=list)
    weaknesses: list[str] = Field(default_factory=list)
    resources: Resources


class HealthPolicy(_Model):
    """``[territories.service.health]`` (§1.8); conquest only."""

    poll_interval_ms: U64
    consecutive_failures: U32
    recovery_window_seconds: U64


class ServiceDef(_Model):
    """``[territories.service]`` (§1.8); only ``port`` matters in build races."""

    port: U16
    path: str
    expected_status: U16
    expected_body: str
    health: HealthPolicy


class TerritoryDef(_Model):
    """``[[territories]]`` (§1.8). ``class_`` is the TOML key ``class``."""

    id: str
    class_: str = Field(alias="class")
    nixos_config: str
    service: ServiceDef


class Budget(_Model):
    """``[agents.budget]`` (§1.11)."""

    resource_units: U64
    max_cost_microusd: U64 | None = None


class AgentDef(_Model):
    """``[[agents]]`` (§1.11)."""

    id: str
    territory: str
    adapter: str
    model: str
    reasoning_effort: str = "default"
    budget: Budget


class VisualizationNode(_Model):
    """``[[visualization.nodes]]`` (§1.9); ``x``/``y`` are percentages 0–100."""

    id: str
    display_name: str
    kind: Literal["client", "proxy", "service", "worker", "queue", "database", "storage", "host"]
    milestone: str | None = None
    x: U8
    y: U8


class VisualizationLink(_Model):
    """``[[visualization.links]]`` (§1.9)."""

    from_: str = Field(alias="from")
    to: str
    kind: Literal["traffic", "queue", "replication", "storage", "lifecycle"] = "traffic"
    label: str | None = None


class Visualization(_Model):
    """``[visualization]`` (§1.9); reports only."""

    nodes: list[VisualizationNode]
    links: list[VisualizationLink] = Field(default_factory=list)


class GuestLeakAudit(_Model):
    """``[fog_of_war.guest_leak_audit]`` (§1.10)."""

    scan_paths: list[str]
    forbidden_strings: list[str]


class FogOfWar(_Model):
    """``[fog_of_war]`` (§1.10); ``player_brief`` is a package-relative file."""

    player_brief: str
    hide_topology_until_observed: bool = True
    guest_leak_audit: GuestLeakAudit | None = None


class ArenaManifest(_Model):
    """A whole arena manifest (§1.2). Semantic rules run after the schema (see module doc)."""

    schema_version: U32
    arena: ArenaInfo
    network: Network
    rules: Rules
    build: BuildRules | None = None
    visualization: Visualization | None = None
    fog_of_war: FogOfWar | None = None
    classes: list[ClassDef]
    territories: list[TerritoryDef]
    agents: list[AgentDef]

    @model_validator(mode="after")
    def _semantic(self, info: ValidationInfo) -> ArenaManifest:
        if info.context and info.context.get("skip_semantic"):
            return self
        problems = semantic_problems(self)
        if problems:
            raise ValueError("; ".join(f"{p}: {m}" for p, m in problems))
        return self

    @property
    def is_build_race(self) -> bool:
        """True when ``arena.mode`` is ``build_race``."""
        return self.arena.mode == "build_race"

    def milestone(self, milestone_id: str) -> MilestoneDef | None:
        """The build milestone with this id, or None."""
        for m in self.build.milestones if self.build else []:
            if m.id == milestone_id:
                return m
        return None

    def agent_for(self, territory_id: str) -> AgentDef | None:
        """The agent seated on ``territory_id``, or None."""
        return next((a for a in self.agents if a.territory == territory_id), None)


# --------------------------------------------------------------------------- semantic rules


def _blank(s: str) -> bool:
    return not s.strip()


def _cidr_ok(cidr: str) -> bool:
    if cidr.startswith("10.") or cidr.startswith("192.168."):
        return True
    m = re.match(r"^172\.(\d+)\.", cidr)
    return bool(m) and 16 <= int(m.group(1)) <= 31


def semantic_problems(m: ArenaManifest) -> list[tuple[str, str]]:
    """All §1 semantic problems of a schema-valid manifest as ``(path, message)`` pairs."""
    out: list[tuple[str, str]] = []
    add = lambda path, msg: out.append((path, msg))  # noqa: E731

    def check_id(path: str, value: str) -> None:
        if not is_valid_id(value):
            add(path, f"invalid id {value!r}: use only a-z, 0-9 and '-'")

    def check_nonblank(path: str, value: str) -> None:
        if _blank(value):
            add(path, "must not be blank")

    if m.schema_version != 1:
        add("schema_version", f"unsupported schema version {m.schema_version}; expected 1")
    check_id("arena.id", m.arena.id)
    check_nonblank("arena.display_name", m.arena.display_name)
    if m.arena.category is not None:
        check_id("arena.category", m.arena.category)

    if not _cidr_ok(m.network.cidr):
        add("network.cidr", f"{m.network.cidr!r} is not a private range (10., 192.168. or 172.16-31.)")
    if m.network.allow_public_internet:
        add("network.allow_public_internet", "public internet access is forbidden")

    r = m.rules
    if r.duration_seconds == 0:
        add("rules.duration_seconds", "must be greater than 0")
    if r.tick_ms == 0:
        add("rules.tick_ms", "must be greater than 0")
    if r.minimum_territories < 2:
        add("rules.minimum_territories", "must be at least 2")
    if len(m.territories) < r.minimum_territories:
        add(
            "territories",
            f"{len(m.territories)} territories but rules.minimum_territories is {r.minimum_territories}",
        )

    # build
    if m.arena.mode == "build_race":
        if m.build is None:
            add("build", "required when arena.mode is build_race")
    elif m.build is not None:
        add("build", "only allowed when arena.mode is build_race")
    milestone_ids: set[str] = set()
    if m.build is not None:
        b = m.build
        if not b.milestones:
            add("build.milestones", "must not be empty")
        for i, ms in enumerate(b.milestones):
            p = f"build.milestones[{i}]"
            check_id(f"{p}.id", ms.id)
            if ms.id in milestone_ids:
                add(f"{p}.id", f"duplicate milestone id {ms.id!r}")
            milestone_ids.add(ms.id)
            check_nonblank(f"{p}.display_name", ms.display_name)
            check_nonblank(f"{p}.verifier", ms.verifier)
            if ms.timeout_seconds < 1 or ms.timeout_seconds > r.duration_seconds:
                add(
                    f"{p}.timeout_seconds",
                    f"must be between 1 and rules.duration_seconds ({r.duration_seconds})",
                )
            if ms.points == 0:
                add(f"{p}.points", "must be greater than 0")
        for i, ms in enumerate(b.milestones):
            for j, dep in enumerate(ms.depends_on):
                p = f"build.milestones[{i}].depends_on[{j}]"
                if dep == ms.id:
                    add(p, f"milestone {ms.id!r} cannot depend on itself")
                elif dep not in milestone_ids:
                    add(p, f"unknown milestone {dep!r}")
        cycle = _find_cycle(b.milestones)
        if cycle is not None:
            idx = next(i for i, ms in enumerate(b.milestones) if ms.id == cycle)
            add(f"build.milestones[{idx}].depends_on", f"dependency cycle includes {cycle}")
        comp = m.milestone(b.completion_milestone)
        if comp is None:
            add("build.completion_milestone", f"unknown milestone {b.completion_milestone!r}")
        elif not comp.required:
            add("build.completion_milestone", f"milestone {comp.id!r} must be required")

    # classes
    class_ids: set[str] = set()
    for i, c in enumerate(m.classes):
        p = f"classes[{i}]"
        check_id(f"{p}.id", c.id)
        if c.id in class_ids:
            add(f"{p}.id", f"duplicate class id {c.id!r}")
        class_ids.add(c.id)
        check_nonblank(f"{p}.display_name", c.display_name)
        if c.resources.vcpus == 0:
            add(f"{p}.resources.vcpus", "must be greater than 0")
        if c.resources.memory_mib < 128:
            add(f"{p}.resources.memory_mib", "must be at least 128")
        if c.resources.disk_mib < 256:
            add(f"{p}.resources.disk_mib", "must be at least 256")

    # territories
    terr_ids: set[str] = set()
    for i, t in enumerate(m.territories):
        p = f"territories[{i}]"
        check_id(f"{p}.id", t.id)
        if t.id in terr_ids:
            add(f"{p}.id", f"duplicate territory id {t.id!r}")
        terr_ids.add(t.id)
        if t.class_ not in class_ids:
            add(f"{p}.class", f"unknown class {t.class_!r}")
        check_nonblank(f"{p}.nixos_config", t.nixos_config)
        s = t.service
        if not s.path.startswith("/"):
            add(f"{p}.service.path", "must start with '/'")
        if not 100 <= s.expected_status <= 599:
            add(f"{p}.service.expected_status", "must be between 100 and 599")
        h = s.health
        if h.poll_interval_ms == 0:
            add(f"{p}.service.health.poll_interval_ms", "must be greater than 0")
        if h.consecutive_failures == 0:
            add(f"{p}.service.health.consecutive_failures", "must be greater than 0")
        if h.recovery_window_seconds == 0 or h.recovery_window_seconds >= r.duration_seconds:
            add(
                f"{p}.service.health.recovery_window_seconds",
                f"must be greater than 0 and less than rules.duration_seconds ({r.duration_seconds})",
            )

    # agents
    agent_ids: set[str] = set()
    seated: dict[str, int] = {}
    for i, a in enumerate(m.agents):
        p = f"agents[{i}]"
        check_id(f"{p}.id", a.id)
        if a.id in agent_ids:
            add(f"{p}.id", f"duplicate agent id {a.id!r}")
        agent_ids.add(a.id)
        if a.territory not in terr_ids:
            add(f"{p}.territory", f"unknown territory {a.territory!r}")
        elif a.territory in seated:
            add(f"{p}.territory", f"territory {a.territory!r} already has agent agents[{seated[a.territory]}]")
        else:
            seated[a.territory] = i
        check_nonblank(f"{p}.adapter", a.adapter)
        check_nonblank(f"{p}.model", a.model)
        if a.budget.resource_units == 0:
            add(f"{p}.budget.resource_units", "must be greater than 0")
    for i, t in enumerate(m.territories):
        if t.id in terr_ids and t.id not in seated and is_valid_id(t.id):
            add(f"territories[{i}].id", f"territory {t.id!r} has no agent (every territory needs exactly one)")

    # visualization
    if m.visualization is not None:
        v = m.visualization
        if not v.nodes:
            add("visualization.nodes", "must not be empty")
        node_ids: set[str] = set()
        for i, n in enumerate(v.nodes):
            p = f"visualization.nodes[{i}]"
            check_id(f"{p}.id", n.id)
            if n.id in node_ids:
                add(f"{p}.id", f"duplicate node id {n.id!r}")
            node_ids.add(n.id)
            check_nonblank(f"{p}.display_name", n.display_name)
            if n.milestone is not None and n.milestone not in milestone_ids:
                add(f"{p}.milestone", f"unknown milestone {n.milestone!r}")
            if n.x > 100:
                add(f"{p}.x", "must be between 0 and 100")
            if n.y > 100:
                add(f"{p}.y", "must be between 0 and 100")
        for i, ln in enumerate(v.links):
            p = f"visualization.links[{i}]"
            if ln.from_ not in node_ids:
                add(f"{p}.from", f"unknown node {ln.from_!r}")
            if ln.to not in node_ids:
                add(f"{p}.to", f"unknown node {ln.to!r}")
            if ln.from_ == ln.to:
                add(f"{p}.to", "a link must join two different nodes")
            if ln.label is not None and _blank(ln.label):
                add(f"{p}.label", "must not be blank")

    # fog of war
    if m.fog_of_war is not None:
        f = m.fog_of_war
        check_nonblank("fog_of_war.player_brief", f.player_brief)
        if f.guest_leak_audit is not None:
            g = f.guest_leak_audit
            if not g.scan_paths:
                add("fog_of_war.guest_leak_audit.scan_paths", "must not be empty")
            for i, sp in enumerate(g.scan_paths):
                if not sp.startswith("/") or sp.strip() == "/":
                    add(f"fog_of_war.guest_leak_audit.scan_paths[{i}]", "must be an absolute path other than /")
            if not g.forbidden_strings:
                add("fog_of_war.guest_leak_audit.forbidden_strings", "must not be empty")
            for i, fs in enumerate(g.forbidden_strings):
                if _blank(fs):
                    add(f"fog_of_war.guest_leak_audit.forbidden_strings[{i}]", "must not be blank")
    return out


def _find_cycle(milestones: list[MilestoneDef]) -> str | None:
    """DFS over depends_on; return an id on the first cycle found, else None."""
    deps = {m.id: [d for d in m.depends_on if d != m.id] for m in milestones}
    state: dict[str, int] = {}

    def visit(node: str) -> str | None:
        state[node] = 1
        for d in deps.get(node, []):
            if d not in deps:
                continue
            if state.get(d) == 1:
                return d
            if state.get(d) is None:
                found = visit(d)
                if found:
                    return found
        state[node] = 2
        return None

    for m in milestones:
        if state.get(m.id) is None:
            found = visit(m.id)
            if found:
                return found
    return None


# --------------------------------------------------------------------------- loading


class ManifestError(AoeError):
    """A manifest that cannot be loaded; ``.problems`` lists every :class:`Problem`.

    ``str()`` is all problems, one ``file:line: field: message`` per line.
    """

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


@dataclass(frozen=True)
class LoadedManifest:
    """A validated manifest with where it came from.

    ``path`` is the manifest path as given, ``path_text`` the exact string given
    (``./`` kept — it matters for the §7.3 verifier digest), ``arena_dir`` its
    parent, ``raw`` the file bytes.
    """

    manifest: ArenaManifest
    path: Path
    arena_dir: Path
    raw: bytes
    path_text: str = ""

    def __post_init__(self) -> None:
        if not self.path_text:
            object.__setattr__(self, "path_text", str(self.path))

    def verifier_path(self, milestone: MilestoneDef) -> Path:
        """Absolute-or-as-given path of a milestone's verifier (``arena_dir / verifier``)."""
        return self.arena_dir / milestone.verifier


def parse_manifest_text(text: str, file: str) -> tuple[ArenaManifest, TomlPositions]:
    """Parse + validate manifest TOML ``text``; raise :class:`ManifestError` with lines."""
    data = parse_toml(text, file, ManifestError)
    pos = TomlPositions(text)
    try:
        manifest = ArenaManifest.model_validate(data, context={"skip_semantic": True})
    except ValidationError as err:
        problems = [Problem(file, pos.line_of(p), p, msg) for p, msg in schema_problems(err)]
        raise ManifestError(problems) from None
    sem = semantic_problems(manifest)
    if sem:
        raise ManifestError([Problem(file, pos.line_of(p), p, msg) for p, msg in sem])
    return manifest, pos


def load_manifest(path: Path | str) -> LoadedManifest:
    """Read and validate an arena manifest file (§1).

    Raises :class:`ManifestError` (an :class:`AoeError`) listing every problem
    with file, line and field path; a missing/unreadable file or non-UTF-8 text
    is a single problem.
    """
    path_text = path if isinstance(path, str) else str(path)
    path = Path(path)
    file = path_text
    raw, text = read_toml_source(path, file, ManifestError, "manifest")
    manifest, _ = parse_manifest_text(text, file)
    return LoadedManifest(manifest=manifest, path=path, arena_dir=path.parent, raw=raw, path_text=path_text)


def resolve_manifest_path(path: Path | str) -> Path:
    """A package folder resolves to ``DIR/arena.toml``; a file path is returned as is."""
    p = Path(path)
    return p / "arena.toml" if p.is_dir() else p


# --------------------------------------------------------------------------- arena.json


def arena_json(manifest: ArenaManifest) -> dict[str, Any]:
    """The ``arena.json`` dict (§2.7): defaults filled, upstream key order, ``class``/``from`` keys.

    Optional tables that are absent are written as ``null`` (as the newest
    upstream controller does, see the seed bundle).
    """
    return manifest.model_dump(mode="json", by_alias=True)


def manifest_from_arena_json(data: dict[str, Any]) -> ArenaManifest:
    """Read an ``arena.json`` dict back into a manifest (strict, unknown keys rejected).

    Raises ``pydantic.ValidationError``.
    """
    return ArenaManifest.model_validate(data, context={"skip_semantic": True})


# --------------------------------------------------------------------------- packages


@dataclass
class PackageReport:
    """Result of :func:`validate_package` (§1.12). ``to_json()`` gives upstream's report keys."""

    valid: bool
    arena: str | None
    schema_version: int | None
    root: str
    manifest: str
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    loaded: LoadedManifest | None = None

    def to_json(self) -> dict[str, Any]:
        """``{valid, arena, schema_version, root, manifest, errors, warnings}``."""
        return {
            "valid": self.valid,
            "arena": self.arena,
            "schema_version": self.schema_version,
            "root": self.root,
            "manifest": self.manifest,
            "errors": list(self.errors),
            "warnings": list(self.warnings),
        }


def _escapes(rel: str) -> bool:
    return os.path.isabs(rel) or ".." in Path(rel).parts


def validate_package(path: Path | str) -> PackageReport:
    """Check an arena package folder or manifest file (§1.12).

    Errors (package invalid): the manifest is missing or fails the schema;
    ``CONTRACT.md`` missing (build race without fog); the fog player brief
    missing; ``instructions/<territory>.md`` missing (non-fog); a local flake
    path missing or escaping the package; a verifier missing, escaping the
    package, or not executable.

    Deviation from upstream: a missing ``flake.nix`` is a **warning**, not an
    error. Our runner's default territory providers (containers, QEMU with our
    own guest image) do not build NixOS VMs, so packages written for aoe-tui
    ship no flake. A ``nixos_config`` that names a *local* flake path
    (``./x#...`` other than the package root) is still checked: missing, it is an error
    when the package has a ``flake.nix`` and a warning when it has none. Warnings also
    cover README.md, adapters/oracle.sh, tests/smoke.sh and flake.lock.

    Ours, beyond upstream: a ``territory/`` recipe (``docs/arena-packages.md``) is checked
    (:func:`aoe_tui.domain.recipe.load_recipe`), and in a fog arena no file it puts under a
    scan path may contain a forbidden string.

    Every error is also a :class:`Problem` (with the manifest line where one
    applies) in ``report.problems``. Never raises for bad input.
    """
    mpath = resolve_manifest_path(path)
    root = mpath.parent
    report = PackageReport(valid=False, arena=None, schema_version=None, root=str(root), manifest=str(mpath))
    file = str(mpath)

    def err(problem: Problem) -> None:
        report.problems.append(problem)
        report.errors.append(str(problem))

    try:
        raw = mpath.read_bytes()
        loaded = load_manifest(mpath)
    except FileNotFoundError:
        err(Problem(file, None, "", "manifest not found"))
        return report
    except ManifestError as e:
        for p in e.problems:
            err(p)
        return report
    except OSError as e:
        err(Problem(file, None, "", f"cannot read: {e.strerror}"))
        return report
    report.loaded = loaded
    m = loaded.manifest
    report.arena = m.arena.id
    report.schema_version = m.schema_version
    pos = TomlPositions(raw.decode("utf-8"))

    def warn(msg: str) -> None:
        report.warnings.append(f"{root}: {msg}")

    if not (root / "flake.nix").is_file():
        warn("flake.nix is missing (fine for aoe-tui providers; required to run on upstream's Nix VMs)")
    elif not (root / "flake.lock").is_file():
        warn("flake.lock is missing: pin dependencies before publishing")
    for name in ("README.md", "adapters/oracle.sh", "tests/smoke.sh"):
        if not (root / name).exists():
            warn(f"{name} is missing")
    if not re.fullmatch(r"(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.0/24", m.network.cidr) or any(
        int(x) > 255 for x in m.network.cidr.split("/")[0].split(".")
    ):
        line = pos.line_of("network.cidr")
        warn(f"{file}:{line}: network.cidr: {m.network.cidr!r} passes the schema's prefix check, but territories "
             "need the form a.b.c.0/24 (spec §6.2): no provider can run this arena")

    fog = m.fog_of_war
    if fog is not None:
        brief = fog.player_brief
        if _escapes(brief):
            err(Problem(file, pos.line_of("fog_of_war.player_brief"), "fog_of_war.player_brief", "escapes the package"))
        elif not (root / brief).is_file():
            err(Problem(file, pos.line_of("fog_of_war.player_brief"), "fog_of_war.player_brief", f"player brief {brief} is missing"))
    else:
        if m.is_build_race and not (root / "CONTRACT.md").is_file():
            err(Problem(str(root / "CONTRACT.md"), None, "", "CONTRACT.md is missing"))
        for i, t in enumerate(m.territories):
            rel = f"instructions/{t.id}.md"
            if not (root / rel).is_file():
                err(Problem(file, pos.line_of(f"territories[{i}].id"), f"territories[{i}].id", f"{rel} is missing"))

    for i, t in enumerate(m.territories):
        flake_ref = t.nixos_config.split("#", 1)[0]
        if "#" not in t.nixos_config or not (flake_ref.startswith(".") or flake_ref.startswith("/")):
            continue
        fp = f"territories[{i}].nixos_config"
        if flake_ref in (".", "./") or Path(flake_ref).name == root.resolve().name:
            # the package's own flake, also in upstream's cwd-relative spelling
            # ./arenas/<package> (warned above when flake.nix is missing)
            continue
        if _escapes(flake_ref):
            # upstream resolves cwd-relative refs like ./arenas/first-contact; only a ref that
            # climbs out (..) or is absolute escapes
            err(Problem(file, pos.line_of(fp), fp, f"flake path {flake_ref!r} escapes the package"))
            continue
        if not (root / flake_ref).exists() and not Path(flake_ref).exists():
            if not (root / "flake.nix").is_file():
                # a package without any flake (ours) runs on aoe-tui's providers; only the
                # nixos provider needs the path, so it is a warning, like the missing flake.nix
                warn(f"{file}:{pos.line_of(fp)}: {fp}: flake path {flake_ref!r} is missing "
                     "(only the nixos provider needs it)")
                continue
            err(Problem(file, pos.line_of(fp), fp, f"flake path {flake_ref!r} is missing"))

    for i, ms in enumerate(m.build.milestones if m.build else []):
        fp = f"build.milestones[{i}].verifier"
        line = pos.line_of(fp)
        if _escapes(ms.verifier):
            err(Problem(file, line, fp, f"verifier {ms.verifier!r} escapes the package"))
            continue
        vp = root / ms.verifier
        if not vp.is_file():
            err(Problem(file, line, fp, f"verifier {ms.verifier} is missing"))
        elif not os.stat(vp).st_mode & 0o111:
            err(Problem(file, line, fp, f"verifier {ms.verifier} is not executable"))

    _check_recipe(root, m, err)
    _check_brief(root, m, err)
    report.valid = not report.errors
    return report


def _check_brief(root: Path, m: ArenaManifest, err: Any) -> None:
    """Fog arenas (ours): the player brief itself must not contain a forbidden string, since
    every agent is given it (the guest leak audit only searches the territories)."""
    fog = m.fog_of_war
    if fog is None or fog.guest_leak_audit is None or _escapes(fog.player_brief):
        return
    try:
        text = (root / fog.player_brief).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return  # reported as a missing brief
    for s in fog.guest_leak_audit.forbidden_strings:
        if s and s in text:
            line = text[: text.index(s)].count("\n") + 1
            err(Problem(str(root / fog.player_brief), line, "",
                        f"the player brief contains the forbidden string {s!r} (fog_of_war.guest_leak_audit)"))


def _check_recipe(root: Path, m: ArenaManifest, err: Any) -> None:
    """Recipe checks of :func:`validate_package` (ours, ``docs/arena-packages.md``): the
    recipe itself, and (fog) no forbidden string in a file it puts under a scan path."""
    from aoe_tui.domain.recipe import RecipeError, find_recipe, leak_problems, load_recipe

    rdir = find_recipe(root)
    if rdir is None:
        if (root / "territory").is_dir():
            err(Problem(str(root / "territory"), None, "", "territory/ has no recipe.toml"))
        return
    try:
        recipe = load_recipe(rdir)
    except RecipeError as e:
        for p in e.problems:
            err(p)
        return
    audit = m.fog_of_war.guest_leak_audit if m.fog_of_war else None
    if audit is not None:
        for p in leak_problems(recipe, audit.scan_paths, audit.forbidden_strings):
            err(p)


def sha256_hex(data: bytes) -> str:
    """Lowercase hex sha256 of ``data``."""
    return hashlib.sha256(data).hexdigest()
