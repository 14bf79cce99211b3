"""The ``aoe arena validate``, ``aoe inspect`` and ``aoe bundle`` commands, run as real processes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SEED = "seed/opencode-cup-2026-W37-r1-h2-a1.match.json"


def aoe(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "aoe_tui.cli", *args], capture_output=True, text=True, cwd=cwd, timeout=60
    )


def test_validate_fixture_manifests_and_suite(fixtures_dir: Path) -> None:
    up = fixtures_dir / "upstream"
    for path in [*sorted((up / "arenas").glob("*/*.toml")), up / "arenas/first-build"]:
        r = aoe("arena", "validate", "--schema-only", str(path))
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith("ok: manifest ") and r.stdout.count("\n") == 1
    r = aoe("arena", "validate", str(up / "suites/infra-core.toml"))
    assert r.returncode == 0, r.stderr
    assert "infra-core, 4 arenas" in r.stdout


@pytest.mark.parametrize(
    "old,new,expect",
    [
        ("points = 20", "points = 0", ":36: build.milestones[1].points: must be greater than 0"),
        ('schema_version = 1\n', 'schema_version = 1\nbogus = 1\n', ":2: bogus: unknown field"),
        ('depends_on = ["write-read"]', 'depends_on = ["host-reboot"]', "dependency cycle includes"),
        ('display_name = "Service Up"', 'display_name = "Service Up', ":25: invalid TOML"),
    ],
)
def test_validate_broken_manifest_through_cli(fixtures_dir: Path, tmp_path: Path, old: str, new: str, expect: str) -> None:
    text = (fixtures_dir / "upstream/arenas/first-build/arena.toml").read_text().replace(old, new, 1)
    p = tmp_path / "arena.toml"
    p.write_text(text)
    r = aoe("arena", "validate", "--schema-only", str(p))
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    assert expect in r.stderr, r.stderr
    assert r.stdout == ""
    assert all(line.startswith(str(p)) or line.startswith("aoe: ") for line in r.stderr.splitlines())


def test_validate_package_and_json(fixtures_dir: Path, tmp_path: Path) -> None:
    up = fixtures_dir / "upstream/arenas/first-build"
    r = aoe("arena", "validate", str(up), cwd=tmp_path)
    assert r.returncode == 1 and "verifier verify/service-up.sh is missing" in r.stderr
    assert ":26: build.milestones[0].verifier" in r.stderr
    r = aoe("arena", "validate", "--json", str(up), cwd=tmp_path)
    report = json.loads(r.stdout)
    assert r.returncode == 1 and report["valid"] is False and report["arena"] == "first-build"
    r = aoe("arena", "validate", str(tmp_path / "missing"))
    assert r.returncode == 1 and "manifest not found" in r.stderr and "Traceback" not in r.stderr


def test_inspect_seed_bundle(fixtures_dir: Path) -> None:
    r = aoe("inspect", str(fixtures_dir / SEED))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    row = next(line for line in lines if line.strip().startswith("1 "))
    assert "builder-two" in row and "deepseek" in row and "100" in row
    assert any("host-reboot" in line for line in lines)
    r = aoe("inspect", "--standings-json", str(fixtures_dir / SEED))
    rows = json.loads(r.stdout)
    assert rows[0] == {"territory": "builder-two", "agent": "deepseek", "durable_at_ms": 43224,
                       "points": 100, "passed": 4, "rank": 1}


def test_inspect_world_equals_world_json(fixtures_dir: Path) -> None:
    d = fixtures_dir / "upstream/matches/primary-failover-real-20260813-174631"
    for target in (d, d / "events.jsonl"):
        r = aoe("inspect", "--world", str(target))
        assert r.returncode == 0, r.stderr
        assert r.stdout == (d / "world.json").read_text() + "\n"


def test_bundle_command(fixtures_dir: Path, tmp_path: Path) -> None:
    d = fixtures_dir / "upstream/matches/traffic-surge-oracle-smoke"
    out = tmp_path / "ts.match.json"
    r = aoe("bundle", str(d), "-o", str(out), "--name", "smoke", "--listed")
    assert r.returncode == 0, r.stderr
    data = json.loads(out.read_text())
    assert data["match"] == {"fog_of_war": True, "listed": True, "name": "smoke", "slug": d.name}
    r = aoe("inspect", str(out))
    assert r.returncode == 0 and "surge-" in r.stdout
    r = aoe("bundle", str(tmp_path), "-o", str(out))
    assert r.returncode == 1 and r.stderr.startswith("aoe: error: ") and "Traceback" not in r.stderr


def test_inspect_bad_log_names_line(fixtures_dir: Path, tmp_path: Path) -> None:
    src = (fixtures_dir / "upstream/matches/first-build-20260813-085352/events.jsonl").read_text()
    lines = src.splitlines(keepends=True)
    lines[3] = "garbage\n"
    (tmp_path / "events.jsonl").write_text("".join(lines))
    r = aoe("inspect", str(tmp_path))
    assert r.returncode == 1
    assert f"{tmp_path / 'events.jsonl'}:4: invalid event" in r.stderr and "Traceback" not in r.stderr


def test_inspect_on_a_season_folder_points_to_standings(tmp_path: Path) -> None:
    (tmp_path / "season.jsonl").write_text("")
    r = aoe("inspect", str(tmp_path))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.strip() == (f"aoe: error: {tmp_path}: a season folder, not a match folder: `aoe standings {tmp_path}` "
                                f"shows its standings, `aoe inspect {tmp_path}/round-R/heat-H/attempt-A` one heat attempt")
