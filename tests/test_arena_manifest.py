"""Arena manifests (§1), suites (§1.13), arena.json (§2.7), packages (§1.12), provenance (§7.3)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from aoe_tui.domain.arena import (
    ArenaManifest,
    ManifestError,
    arena_json,
    load_manifest,
    manifest_from_arena_json,
    validate_package,
)
from aoe_tui.domain.provenance import (
    MatchProvenance,
    compute_provenance,
    evaluation_manifest_text,
    legacy_compatibility_key,
    verifier_digest,
)
from aoe_tui.domain.suite import load_suite

# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def upstream(fixtures_dir: Path) -> Path:
    return fixtures_dir / "upstream"


@pytest.fixture(scope="module")
def first_build_text(upstream: Path) -> str:
    return (upstream / "arenas" / "first-build" / "arena.toml").read_text()


def test_every_fixture_manifest_validates(upstream: Path) -> None:
    manifests = sorted((upstream / "arenas").glob("*/*.toml"))
    assert len(manifests) >= 11
    for path in manifests:
        loaded = load_manifest(path)
        m = loaded.manifest
        assert loaded.raw == path.read_bytes()
        assert loaded.arena_dir == path.parent
        if m.arena.id == "first-contact":
            assert m.arena.mode == "conquest" and m.build is None
        else:
            assert m.arena.mode == "build_race"
            assert sum(ms.points for ms in m.build.milestones) == 100
            assert m.build.milestones[-1].operation == "host_reboot"


def test_every_fixture_suite_validates(upstream: Path) -> None:
    suites = sorted((upstream / "suites").glob("*.toml"))
    assert suites
    for path in suites:
        s = load_suite(path)
        assert s.suite.suite.id == "infra-core"
        assert [a.manifest.arena.id for a in s.arenas] == [
            "first-build-real",
            "durable-job-queue",
            "zero-downtime-rollout",
            "primary-failover",
        ]
        assert s.rounds_for(0) == 3


def test_defaults_and_aliases(first_build_text: str, tmp_path: Path) -> None:
    p = tmp_path / "arena.toml"
    p.write_text(first_build_text)
    m = load_manifest(p).manifest
    ms = m.build.milestones[0]
    assert ms.depends_on == [] and ms.operation == "observe" and ms.required is True
    assert m.agents[0].reasoning_effort == "default"
    assert m.agents[0].budget.max_cost_microusd is None
    assert m.territories[0].class_ == "builder"
    assert m.visualization.links[0].kind == "traffic"
    # mode defaults to conquest
    text = first_build_text.replace('mode = "build_race"\n', "")
    p.write_text(text)
    with pytest.raises(ManifestError) as err:
        load_manifest(p)
    assert any(pr.field == "build" and "build_race" in pr.message for pr in err.value.problems)


def test_constructing_model_runs_semantic_checks(upstream: Path) -> None:
    data = json.loads((upstream / "matches/traffic-surge-oracle-smoke/arena.json").read_text())
    ArenaManifest.model_validate(data)
    data["build"]["completion_milestone"] = "nope"
    with pytest.raises(Exception, match="build.completion_milestone"):
        ArenaManifest.model_validate(data)


def _line_of(text: str, marker: str | tuple[str, int]) -> int:
    """1-based line where ``marker`` starts (plus an offset when given as ``(marker, offset)``)."""
    offset = 0
    if isinstance(marker, tuple):
        marker, offset = marker
    idx = text.index(marker)
    return text.count("\n", 0, idx) + 1 + offset


# (id, old, new, occurrence (1-based), expected field, marker in new text for the line)
BROKEN = [
    ("unknown-top-key", "schema_version = 1\n", "schema_version = 1\ncolour = 1\n", 1, "colour", "colour"),
    ("unknown-milestone-key", 'verifier = "verify/write-read.sh"', 'verifier = "verify/write-read.sh"\nretryable = true', 1,
     "build.milestones[1].retryable", "retryable"),
    ("unknown-health-key", "poll_interval_ms = 1000", "poll_interval_ms = 1000\njitter_ms = 5", 2,
     "territories[1].service.health.jitter_ms", "jitter_ms"),
    ("schema-version", "schema_version = 1", "schema_version = 2", 1, "schema_version", "schema_version = 2"),
    ("bad-arena-id", 'id = "first-build"', 'id = "First_Build"', 1, "arena.id", "First_Build"),
    ("blank-display-name", 'display_name = "First Build"', 'display_name = "   "', 1, "arena.display_name", '"   "'),
    ("bad-category", 'category = "service-delivery"', 'category = "Service Delivery"', 1, "arena.category", "Service Delivery"),
    ("bad-mode", 'mode = "build_race"', 'mode = "battle"', 1, "arena.mode", "battle"),
    ("public-cidr", 'cidr = "10.78.0.0/24"', 'cidr = "8.8.8.0/24"', 1, "network.cidr", "8.8.8.0"),
    ("public-internet", "allow_public_internet = false", "allow_public_internet = true", 1,
     "network.allow_public_internet", "allow_public_internet = true"),
    ("zero-duration", "duration_seconds = 600", "duration_seconds = 0", 1, "rules.duration_seconds", "duration_seconds = 0"),
    ("string-tick", "tick_ms = 2000", 'tick_ms = "2000"', 1, "rules.tick_ms", 'tick_ms = "2000"'),
    ("min-territories", "minimum_territories = 3", "minimum_territories = 4", 1, "territories", "[[territories]]"),
    ("dependency-cycle", 'id = "service-up"\ndisplay_name = "Service Up"',
     'id = "service-up"\ndisplay_name = "Service Up"\ndepends_on = ["host-reboot"]', 1,
     "build.milestones[0].depends_on", 'depends_on = ["host-reboot"]'),
    ("unknown-dependency", 'depends_on = ["write-read"]', 'depends_on = ["write-reed"]', 1,
     "build.milestones[2].depends_on[0]", "write-reed"),
    ("self-dependency", 'depends_on = ["service-up"]', 'depends_on = ["write-read"]', 1,
     "build.milestones[1].depends_on[0]", 'depends_on = ["write-read"]'),
    ("duplicate-milestone", 'id = "service-restart"', 'id = "write-read"', 1, "build.milestones[2].id",
     'id = "write-read"\ndisplay_name = "Service Restart"'),
    ("timeout-over-duration", "timeout_seconds = 30", "timeout_seconds = 601", 1,
     "build.milestones[3].timeout_seconds", "timeout_seconds = 601"),
    ("zero-points", "points = 20", "points = 0", 1, "build.milestones[1].points", "points = 0"),
    ("negative-points", "points = 40", "points = -40", 1, "build.milestones[3].points", "points = -40"),
    ("bad-operation", 'operation = "host_reboot"', 'operation = "reboot"', 1, "build.milestones[3].operation",
     'operation = "reboot"'),
    ("missing-verifier", 'verifier = "verify/service-restart.sh"\n', "", 1, "build.milestones[2].verifier",
     ('id = "service-restart"', -1)),
    ("unknown-completion", 'completion_milestone = "host-reboot"', 'completion_milestone = "host-rebooted"', 1,
     "build.completion_milestone", "host-rebooted"),
    ("completion-not-required", 'operation = "host_reboot"', 'operation = "host_reboot"\nrequired = false', 1,
     "build.completion_milestone", "completion_milestone"),
    ("unknown-class", 'class = "builder"', 'class = "wizard"', 2, "territories[1].class", "wizard"),
    ("duplicate-territory", 'id = "builder-three"\nclass', 'id = "builder-two"\nclass', 1, "territories[2].id",
     ('nixos_config = "./arenas/first-build#nixosConfigurations.builder-three', -2)),
    ("bad-path", 'path = "/health"', 'path = "health"', 3, "territories[2].service.path", 'path = "health"'),
    ("bad-status", "expected_status = 200", "expected_status = 700", 1, "territories[0].service.expected_status",
     "expected_status = 700"),
    ("port-too-big", "port = 8080", "port = 80800", 1, "territories[0].service.port", "port = 80800"),
    ("recovery-window", "recovery_window_seconds = 60", "recovery_window_seconds = 600", 1,
     "territories[0].service.health.recovery_window_seconds", "recovery_window_seconds = 600"),
    ("missing-port", "port = 8080\n", "", 2, "territories[1].service.port", "[territories.service]\npath"),
    ("small-memory", "memory_mib = 768", "memory_mib = 64", 1, "classes[0].resources.memory_mib", "memory_mib = 64"),
    ("agent-unknown-territory", 'territory = "builder-two"', 'territory = "builder-five"', 1, "agents[1].territory",
     "builder-five"),
    ("agent-territory-twice", 'territory = "builder-three"', 'territory = "builder-two"', 1, "agents[2].territory",
     ('id = "builder-three-agent"', 1)),
    ("bad-agent-id", 'id = "builder-one-agent"', 'id = "Builder-One"', 1, "agents[0].id", "Builder-One"),
    ("blank-adapter", 'adapter = "oracle"', 'adapter = ""', 3, "agents[2].adapter", 'adapter = ""'),
    ("zero-budget", "resource_units = 1", "resource_units = 0", 2, "agents[1].budget.resource_units",
     "resource_units = 0"),
    ("bool-budget", "resource_units = 1", "resource_units = true", 1, "agents[0].budget.resource_units",
     "resource_units = true"),
    ("viz-unknown-milestone", 'milestone = "write-read"', 'milestone = "write-reed"', 1,
     "visualization.nodes[2].milestone", "write-reed"),
    ("viz-x-range", "x = 72\ny = 74", "x = 172\ny = 74", 1, "visualization.nodes[4].x", "x = 172"),
    ("viz-link-node", 'from = "client"', 'from = "browser"', 1, "visualization.links[0].from", "browser"),
    ("viz-link-kind", 'kind = "storage"\n\n', 'kind = "pipe"\n\n', 1, "visualization.links[1].kind", 'kind = "pipe"'),
    ("bad-toml", 'display_name = "Write and Read"', 'display_name = "Write and Read', 1, "", '"Write and Read\n'),
]


@pytest.mark.parametrize("case", BROKEN, ids=[c[0] for c in BROKEN])
def test_broken_variant_reports_field_and_line(case, first_build_text: str, tmp_path: Path) -> None:
    _id, old, new, occurrence, field, marker = case
    parts = first_build_text.split(old)
    assert len(parts) > occurrence, f"fixture lacks occurrence {occurrence} of {old!r}"
    text = old.join(parts[:occurrence]) + new + old.join(parts[occurrence:])
    p = tmp_path / "arena.toml"
    p.write_text(text)
    with pytest.raises(ManifestError) as err:
        load_manifest(p)
    expected_line = _line_of(text, marker)
    problems = [(pr.field, pr.line) for pr in err.value.problems]
    assert (field, expected_line) in problems, f"{problems} lacks {(field, expected_line)}"
    assert f"{p}:{expected_line}: " in str(err.value)
    for line in str(err.value).splitlines():
        assert line.startswith(f"{p}:")


def test_all_problems_collected(first_build_text: str, tmp_path: Path) -> None:
    text = first_build_text.replace("points = 20", "points = 0").replace('class = "builder"', 'class = "x"', 1)
    p = tmp_path / "arena.toml"
    p.write_text(text)
    with pytest.raises(ManifestError) as err:
        load_manifest(p)
    fields = {pr.field for pr in err.value.problems}
    assert {"build.milestones[1].points", "territories[0].class"} <= fields


def test_missing_manifest_is_one_problem(tmp_path: Path) -> None:
    with pytest.raises(ManifestError) as err:
        load_manifest(tmp_path / "nope.toml")
    assert "manifest not found" in str(err.value)


# --------------------------------------------------------------------------- arena.json


def test_arena_json_round_trips_fixture_files(upstream: Path) -> None:
    files = sorted((upstream / "matches").glob("*/arena.json"))
    assert files
    for f in files:
        data = json.loads(f.read_text())
        out = arena_json(manifest_from_arena_json(data))
        assert list(out) == [
            "schema_version", "arena", "network", "rules", "build", "visualization", "fog_of_war",
            "classes", "territories", "agents",
        ]

        def same(exp, got, path=""):
            if isinstance(exp, dict):
                for k in exp:
                    assert k in got, f"{f}: {path}{k} missing"
                    same(exp[k], got[k], f"{path}{k}.")
                # key order of shared keys equals upstream's
                assert [k for k in got if k in exp] == list(exp), f"{f}: order at {path}"
            elif isinstance(exp, list):
                assert len(exp) == len(got)
                for i, (a, b) in enumerate(zip(exp, got)):
                    same(a, b, f"{path}[{i}].")
            else:
                assert exp == got, f"{f}: {path}"

        same(data, out)


def test_arena_json_from_toml_fills_defaults(upstream: Path) -> None:
    m = load_manifest(upstream / "arenas/first-build/arena.toml").manifest
    out = arena_json(m)
    ms = out["build"]["milestones"][0]
    assert ms == {
        "id": "service-up", "display_name": "Service Up", "depends_on": [], "verifier": "verify/service-up.sh",
        "operation": "observe", "timeout_seconds": 5, "points": 10, "required": True,
    }
    assert out["agents"][0]["budget"] == {"resource_units": 1, "max_cost_microusd": None}
    assert out["territories"][0]["class"] == "builder"
    assert out["visualization"]["links"][1] == {"from": "app", "to": "state", "kind": "storage", "label": None}
    assert list(out["arena"]) == ["id", "display_name", "category", "mode"]


def test_arena_json_rejects_unknown_keys(upstream: Path) -> None:
    data = json.loads((upstream / "matches/traffic-surge-oracle-smoke/arena.json").read_text())
    data["rules"]["speed"] = 2
    with pytest.raises(Exception, match="speed"):
        manifest_from_arena_json(data)


# --------------------------------------------------------------------------- packages


def _make_package(upstream: Path, dest: Path) -> Path:
    shutil.copy(upstream / "arenas/first-build/arena.toml", dest / "arena.toml")
    text = (dest / "arena.toml").read_text().replace("./arenas/first-build#", ".#")
    (dest / "arena.toml").write_text(text)
    (dest / "CONTRACT.md").write_text("contract\n")
    (dest / "instructions").mkdir()
    for t in ("builder-one", "builder-two", "builder-three"):
        (dest / "instructions" / f"{t}.md").write_text(t)
    (dest / "verify").mkdir()
    for v in ("service-up", "write-read", "service-restart", "host-reboot"):
        p = dest / "verify" / f"{v}.sh"
        p.write_text("#!/bin/sh\necho '{}'\n")
        p.chmod(0o755)
    return dest


def test_package_valid_with_flake_warning(upstream: Path, tmp_path: Path) -> None:
    pkg = _make_package(upstream, tmp_path)
    report = validate_package(pkg)
    assert report.valid, report.errors
    assert any("flake.nix" in w for w in report.warnings)
    assert report.to_json()["arena"] == "first-build"
    assert set(report.to_json()) == {"valid", "arena", "schema_version", "root", "manifest", "errors", "warnings"}


def test_package_verifier_problems(upstream: Path, tmp_path: Path) -> None:
    pkg = _make_package(upstream, tmp_path)
    (pkg / "verify/write-read.sh").chmod(0o644)
    (pkg / "verify/host-reboot.sh").unlink()
    text = (pkg / "arena.toml").read_text().replace('"verify/service-up.sh"', '"../outside.sh"')
    (pkg / "arena.toml").write_text(text)
    (pkg / "instructions/builder-two.md").unlink()
    report = validate_package(pkg / "arena.toml")
    assert not report.valid
    by_field = {p.field: p for p in report.problems}
    assert "not executable" in by_field["build.milestones[1].verifier"].message
    assert by_field["build.milestones[1].verifier"].line == _line_of(text, '"verify/write-read.sh"')
    assert "missing" in by_field["build.milestones[3].verifier"].message
    assert "escapes" in by_field["build.milestones[0].verifier"].message
    assert "instructions/builder-two.md" in by_field["territories[1].id"].message


# --------------------------------------------------------------------------- provenance


def test_legacy_compatibility_key_matches_published_match_json(upstream: Path) -> None:
    checked = 0
    for f in sorted((upstream / "matches").glob("*/match.json")):
        prov = MatchProvenance.model_validate_json(f.read_text())
        if prov.player_brief_sha256 is not None or prov.controller_version != "0.1.0":
            continue
        key = legacy_compatibility_key(prov.arena_id, prov.manifest_sha256, prov.verifier_sha256)
        assert key == prov.compatibility_key, f
        checked += 1
    assert checked >= 8


def test_match_json_is_strict(upstream: Path) -> None:
    text = (upstream / "matches/traffic-surge-oracle-smoke/match.json").read_text()
    prov = MatchProvenance.model_validate_json(text)
    assert json.dumps(prov.to_json(), indent=2) == text
    data = json.loads(text)
    data["extra"] = 1
    with pytest.raises(Exception):
        MatchProvenance.model_validate(data)


def test_evaluation_text_strips_only_arena_category() -> None:
    text = '[arena]\nid = "x"\n  category  = "a"\n[other]\ncategory = "keep"\n'
    assert evaluation_manifest_text(text) == '[arena]\nid = "x"\n[other]\ncategory = "keep"\n'


def test_compute_provenance(upstream: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pkg").mkdir()
    pkg = _make_package(upstream, tmp_path / "pkg")
    adapter = tmp_path / "oracle.sh"
    adapter.write_bytes(b"#!/bin/sh\n")
    monkeypatch.chdir(tmp_path)
    loaded = load_manifest("pkg/arena.toml")
    prov = compute_provenance(loaded, {"oracle": adapter}, "0.1.0", None)
    raw = (pkg / "arena.toml").read_bytes()
    assert prov.manifest_sha256 == hashlib.sha256(raw).hexdigest()
    assert prov.arena_mode == "buildrace" and prov.player_brief_sha256 is None
    assert prov.adapter_sha256 == {"oracle": hashlib.sha256(b"#!/bin/sh\n").hexdigest()}
    # verifier digest: sorted "<parent>/<verifier>" strings, path NUL bytes NUL
    h = hashlib.sha256()
    for name in sorted(f"pkg/verify/{v}.sh" for v in ("service-up", "write-read", "service-restart", "host-reboot")):
        h.update(name.encode() + b"\0" + Path(name).read_bytes() + b"\0")
    assert prov.verifier_sha256 == h.hexdigest()
    # path dependence: ./pkg gives a different digest (upstream behaviour)
    assert verifier_digest("./pkg/arena.toml", ["verify/service-up.sh"]) != verifier_digest(
        "pkg/arena.toml", ["verify/service-up.sh"]
    )
    assert load_manifest("./pkg/arena.toml").path_text == "./pkg/arena.toml"
    # category does not change the key; anything else does
    text = raw.decode()
    (pkg / "arena.toml").write_text(text.replace('category = "service-delivery"', 'category = "stateful-recovery"'))
    prov2 = compute_provenance(load_manifest("pkg/arena.toml"), {"oracle": adapter}, "0.1.0", None)
    assert prov2.manifest_sha256 != prov.manifest_sha256
    assert prov2.compatibility_key == prov.compatibility_key
    (pkg / "arena.toml").write_text(text.replace("duration_seconds = 600", "duration_seconds = 601"))
    prov3 = compute_provenance(load_manifest("pkg/arena.toml"), {"oracle": adapter}, "0.1.0", None)
    assert prov3.compatibility_key != prov.compatibility_key
