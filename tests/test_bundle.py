"""Single-file match bundle (Appendix B) and match loading from every form."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aoe_tui.domain.world import world_dict
from aoe_tui.replay.bundle import BundleError, read_bundle, write_bundle
from aoe_tui.replay.log import dump_record
from aoe_tui.replay.matchdir import MatchLoadError, load_match

SEED = "seed/opencode-cup-2026-W37-r1-h2-a1.match.json"


@pytest.fixture(scope="module")
def seed_match_dir(fixtures_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A match folder rebuilt from the seed bundle (events.jsonl, arena.json, match.json, analyses)."""
    b = read_bundle(fixtures_dir / SEED)
    d = tmp_path_factory.mktemp("seed-match")
    (d / "events.jsonl").write_text("".join(dump_record(r) + "\n" for r in b.records), encoding="utf-8")
    (d / "arena.json").write_text(json.dumps(b.arena, indent=2, ensure_ascii=False), encoding="utf-8")
    prov = dict(b.provenance)
    prov.pop("player_artifacts_sha256")
    (d / "match.json").write_text(json.dumps(prov, indent=2), encoding="utf-8")
    for agent, analysis in b.analyses.items():
        (d / "agents" / agent).mkdir(parents=True)
        (d / "agents" / agent / "analysis.json").write_text(json.dumps(analysis), encoding="utf-8")
    return d


def test_bundle_reproduces_seed_byte_for_byte(fixtures_dir: Path, seed_match_dir: Path, tmp_path: Path) -> None:
    seed = read_bundle(fixtures_dir / SEED)
    out = write_bundle(
        seed_match_dir, tmp_path / "out.match.json", name=seed.match["name"], slug=seed.match["slug"], listed=False
    )
    assert out.read_bytes() == (fixtures_dir / SEED).read_bytes()


def test_bundle_of_upstream_match_folder(fixtures_dir: Path, tmp_path: Path) -> None:
    d = fixtures_dir / "upstream/matches/durable-job-queue-20260814-194238-round-002"
    out = write_bundle(d, tmp_path / "b.match.json")
    b = read_bundle(out)
    assert b.raw["artifact_type"] == "agents-of-empires.match"
    assert sorted(b.analyses) == ["deepseek-queue-builder", "glm-queue-builder", "luna-queue-builder"]
    assert b.provenance["player_artifacts_sha256"] == {}
    assert b.visualization == b.arena["visualization"]
    assert b.match == {"name": d.name, "slug": d.name, "listed": False, "fog_of_war": False}
    assert world_dict(b.world) == json.loads((d / "world.json").read_text())
    text = out.read_text()
    assert "\n" not in text and text.startswith('{ "analyses": {')


def test_load_match_all_forms(fixtures_dir: Path, seed_match_dir: Path) -> None:
    folder = load_match(seed_match_dir)
    log = load_match(seed_match_dir / "events.jsonl")
    bundle = load_match(fixtures_dir / SEED)
    for m in (folder, log, bundle):
        assert m.world.winner == "builder-two"
        assert len(m.records) == 126
        assert m.arena["arena"]["id"] == "first-build-real"
        assert m.provenance["arena_mode"] == "buildrace"
    assert world_dict(folder.world) == world_dict(bundle.world)


def test_bad_inputs(tmp_path: Path) -> None:
    with pytest.raises(MatchLoadError, match="no events.jsonl"):
        load_match(tmp_path)
    (tmp_path / "x.json").write_text('{"artifact_type": "other"}')
    with pytest.raises(MatchLoadError, match="not an agents-of-empires match bundle"):
        load_match(tmp_path / "x.json")
    with pytest.raises(BundleError, match="no event log"):
        write_bundle(tmp_path, tmp_path / "o.json")
    (tmp_path / "y.match.json").write_text("{broken")
    with pytest.raises(MatchLoadError, match="cannot read JSON"):
        load_match(tmp_path / "y.match.json")
