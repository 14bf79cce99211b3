"""``aoe trajectory``: ATIF-v1.7 documents from real match folders (spec §9.3, issue 27 item 6).

Real inputs only: upstream's published matches (``fixtures/upstream/matches``, claux
transcripts in the published flat layout), our own heat's match folder
(``fixtures/ours/opencode-first-build``: a real heat on container territories, the opencode
adapter driven by the scripted model server, copied from ``tests/test_opencode_heat.py``'s
``durable_heat`` without ``territories/``), a season folder built of those, and torn copies.
Every emitted document is validated with ``domain/atif.py`` and, when Harbor's reference
models (``harbor.models.trajectories``) are importable, with them too.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from aoe_tui.domain.atif import ATIF_VERSION, validate_trajectory
from aoe_tui.export.trajectory import TrajectoryError, export_trajectories

FIXTURES = Path(__file__).resolve().parent / "fixtures"
UPSTREAM = FIXTURES / "upstream" / "matches"
OURS = FIXTURES / "ours" / "opencode-first-build"
AOE = Path(sys.executable).parent / "aoe"


def harbor_check(doc: dict) -> None:
    """Validate with Harbor's reference models when installed (Python ≥ 3.12); else nothing."""
    try:
        from harbor.models.trajectories import Trajectory  # type: ignore[import-not-found]
    except Exception:  # noqa: BLE001 - optional independent check
        return
    Trajectory.model_validate(doc)


def load_all(folder: Path) -> dict[str, dict]:
    docs = {}
    for p in sorted(folder.rglob("*.json")):
        doc = json.loads(p.read_text())
        validate_trajectory(doc)
        harbor_check(doc)
        docs[str(p.relative_to(folder))] = doc
    return docs


def test_upstream_published_matches(tmp_path):
    report = export_trajectories(UPSTREAM, tmp_path)
    assert report.errors == []
    docs = load_all(tmp_path)
    # every published transcript with a tool trace, none of the oracles
    published = sorted(p for p in UPSTREAM.rglob("*-transcript.json"))
    assert len(docs) == len(published) == len(report.written)
    assert any("no transcript" in line for line in report.skipped)
    doc = docs["first-build-real-20260814-075912-round-002/deepseek-builder.json"]
    src = json.loads((UPSTREAM / "first-build-real-20260814-075912-round-002" / "deepseek-builder-transcript.json").read_text())
    prov = json.loads((UPSTREAM / "first-build-real-20260814-075912-round-002" / "match.json").read_text())
    assert doc["schema_version"] == ATIF_VERSION == "ATIF-v1.7"
    assert doc["session_id"] == "first-build-real-20260814-075912-round-002/deepseek-builder"
    assert doc["agent"]["name"] == "claux"
    assert doc["agent"]["version"] == prov["adapter_sha256"]["claux"]
    assert doc["agent"]["extra"]["territory"] == "builder-two"
    steps = doc["steps"]
    assert steps[0] == {"step_id": 1, "source": "user", "message": src["messages"][0]["content"]}
    assert len(steps) == len(src["tool_trace"]) + 2
    for step, entry in zip(steps[1:-1], src["tool_trace"]):
        assert step["source"] == "agent" and step["message"] == ""
        assert step["tool_calls"] == [{"tool_call_id": entry["id"], "function_name": entry["name"],
                                       "arguments": entry["input"]}]
        assert step["observation"]["results"] == [{"source_call_id": entry["id"], "content": entry["output"],
                                                   "extra": {"is_error": entry["is_error"]}}]
        assert step["extra"] == {"started_after_ms": entry["started_after_ms"], "duration_ms": entry["duration_ms"],
                                 "read_only": entry["read_only"]}
    assert steps[-1]["extra"] == {"outcome": src["outcome"]["status"]}
    fm = doc["final_metrics"]
    assert fm["total_prompt_tokens"] == src["usage"]["input_tokens"]
    assert fm["total_completion_tokens"] == src["usage"]["output_tokens"]
    assert fm["total_cached_tokens"] == src["usage"]["cache_read_tokens"] + src["usage"]["cache_creation_tokens"]
    assert fm["total_cost_usd"] == src["usage"]["cost_usd"]
    assert fm["total_steps"] == len(steps)
    ie = fm["extra"]["infrastructure_evaluation"]
    assert ie["task"] == {"id": prov["arena_id"], "version": prov["compatibility_key"], "pack": None}
    assert ie["provenance"]["compatibility_key"] == prov["compatibility_key"]
    assert fm["extra"]["model_rounds"] == len(src["timing"]["model_rounds"])
    # per-step metrics (ours): every round's tokens land on one step
    with_metrics = [s for s in steps if "metrics" in s]
    assert sum(s["metrics"]["prompt_tokens"] for s in with_metrics) == sum(
        r["usage"]["input_tokens"] for r in src["timing"]["model_rounds"])


def test_our_opencode_heat(tmp_path):
    report = export_trajectories(OURS, tmp_path)
    assert report.errors == []
    docs = load_all(tmp_path)
    assert list(docs) == ["opencode-first-build/builder-one-agent.json"]
    assert sorted(report.skipped) == ["skipped opencode-first-build/builder-three-agent: no transcript",
                                      "skipped opencode-first-build/builder-two-agent: no transcript"]
    doc = docs["opencode-first-build/builder-one-agent.json"]
    prov = json.loads((OURS / "match.json").read_text())
    usage = json.loads((OURS / "agents" / "builder-one-agent" / "usage.json").read_text())["usage"]
    transcript = json.loads((OURS / "agents" / "builder-one-agent" / "transcript.json").read_text())
    assert doc["agent"] == {"name": "opencode", "version": prov["adapter_sha256"]["opencode"],
                            "model_name": "scripted/durable-sqlite",
                            "extra": {"reasoning_effort": "high", "territory": "builder-one"}}
    assert doc["steps"][0]["message"] == (OURS / "agents" / "builder-one-agent" / "instruction.md").read_text()
    fm = doc["final_metrics"]
    # the transcript, usage.json and ATIF agree on the totals (cached tokens inside prompt tokens)
    assert fm["total_prompt_tokens"] == usage["input_tokens"] == transcript["usage"]["input_tokens"]
    assert fm["total_completion_tokens"] == usage["output_tokens"]
    assert fm["total_steps"] == len(doc["steps"]) == len(transcript["tool_trace"]) + 2
    # one round per tool call, then the answer: each step its own round, in order
    rounds = transcript["timing"]["model_rounds"]
    assert [s["metrics"]["prompt_tokens"] for s in doc["steps"][1:]] == [r["usage"]["input_tokens"] for r in rounds]
    assert all(s["llm_call_count"] == 1 for s in doc["steps"][1:])
    assert sum(s["metrics"]["prompt_tokens"] for s in doc["steps"][1:]) == fm["total_prompt_tokens"]
    assert all(s["metrics"]["cached_tokens"] <= s["metrics"]["prompt_tokens"] for s in doc["steps"][1:])
    ie = fm["extra"]["infrastructure_evaluation"]
    assert ie["outcome"]["winner"] is True and ie["outcome"]["durable"] is True
    assert ie["outcome"]["status"] == "completed"
    assert ie["outcome"]["reward"] == 100
    assert ie["execution"]["territory"] == "builder-one"
    assert doc["steps"][-1]["extra"] == {"outcome": "completed"}
    assert doc["steps"][-1]["message"] == transcript["outcome"]["result"]


def test_season_folder_exports_every_attempt(tmp_path):
    season = tmp_path / "season"
    for rel in ("round-1/heat-1/attempt-1", "round-1/heat-1/attempt-2", "round-2/heat-1/attempt-1"):
        shutil.copytree(OURS, season / rel)
    (season / "season.jsonl").write_text("")
    out = tmp_path / "out"
    report = export_trajectories(season, out)
    assert report.errors == []
    assert sorted(str(p.relative_to(out)) for p in report.written) == [
        "round-1-heat-1-attempt-1/builder-one-agent.json",
        "round-1-heat-1-attempt-2/builder-one-agent.json",
        "round-2-heat-1-attempt-1/builder-one-agent.json",
    ]
    docs = load_all(out)
    assert docs["round-2-heat-1-attempt-1/builder-one-agent.json"]["session_id"] == \
        "round-2-heat-1-attempt-1/builder-one-agent"


def test_torn_transcript_is_an_error_and_the_live_copy_is_used(tmp_path):
    match = tmp_path / "m"
    shutil.copytree(OURS, match)
    agent_dir = match / "agents" / "builder-one-agent"
    raw = (agent_dir / "transcript.json").read_bytes()
    (agent_dir / "transcript.json").write_bytes(raw[: len(raw) // 2])
    lines: list[str] = []
    report = export_trajectories(match, tmp_path / "out", say=lines.append)
    assert report.errors == []  # the live copy stands in, and says so
    assert any("used transcript.live.json" in line and "invalid JSON at byte" in line for line in lines)
    load_all(tmp_path / "out")
    (agent_dir / "transcript.live.json").write_bytes(b'{"tool_trace": [')
    report = export_trajectories(match, tmp_path / "out2")
    assert report.written == []
    assert len(report.errors) == 1
    assert "transcript.json: invalid JSON at byte" in report.errors[0]
    assert "transcript.live.json: invalid JSON at byte 16" in report.errors[0]


def test_hostile_text_is_kept_verbatim(tmp_path):
    match = tmp_path / "m"
    shutil.copytree(OURS, match)
    agent_dir = match / "agents" / "builder-one-agent"
    data = json.loads((agent_dir / "transcript.json").read_text())
    nasty = "\x1b]52;c;ZWNobyBwd25lZA==\x07\u202e$(rm -rf /)`id`\x9b31m\"}\\ \ud800 </script>\u2028"
    data["tool_trace"][0]["output"] = nasty
    data["tool_trace"][0]["input"] = {"command": nasty}
    data["tool_trace"][1]["input"] = nasty  # not an object: wrapped
    data["outcome"]["result"] = nasty
    (agent_dir / "transcript.json").write_text(json.dumps(data))
    (agent_dir / "transcript.live.json").unlink()
    report = export_trajectories(match, tmp_path / "out")
    assert report.errors == [] and len(report.written) == 1
    raw = report.written[0].read_bytes()
    assert raw.isascii()  # every non-ASCII character and control escaped
    doc = json.loads(raw)
    validate_trajectory(doc)
    assert doc["steps"][1]["observation"]["results"][0]["content"] == nasty
    assert doc["steps"][1]["tool_calls"][0]["arguments"] == {"command": nasty}
    assert doc["steps"][2]["tool_calls"][0]["arguments"] == {"input": nasty}
    assert doc["steps"][-1]["message"] == nasty


def test_not_a_match(tmp_path):
    with pytest.raises(TrajectoryError, match="no such file or folder"):
        export_trajectories(tmp_path / "nope", tmp_path / "out")
    (tmp_path / "empty").mkdir()
    with pytest.raises(TrajectoryError, match="not a match folder and holds none"):
        export_trajectories(tmp_path / "empty", tmp_path / "out")
    with pytest.raises(TrajectoryError, match="not a folder"):
        export_trajectories(OURS / "match.json", tmp_path / "out")


def test_damaged_event_log_is_one_error(tmp_path):
    match = tmp_path / "m"
    shutil.copytree(OURS, match)
    lines = (match / "events.jsonl").read_bytes().splitlines(keepends=True)
    (match / "events.jsonl").write_bytes(b"".join(lines[:3]) + b"{not json}\n" + b"".join(lines[3:]))
    report = export_trajectories(match, tmp_path / "out")
    assert report.written == [] and len(report.errors) == 1
    assert "events.jsonl" in report.errors[0]


def run_aoe(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(AOE), *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_cli(tmp_path):
    res = run_aoe("trajectory", str(OURS), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    written = tmp_path / "trajectories" / "opencode-first-build" / "builder-one-agent.json"
    assert f"wrote {Path('trajectories') / 'opencode-first-build' / 'builder-one-agent.json'}" in res.stdout
    assert "1 trajectory written, 2 agents skipped" in res.stdout
    validate_trajectory(written.read_bytes())
    res = run_aoe("trajectory", str(UPSTREAM / "first-build-real-20260814-075912-round-002"), "-o", "x", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "x" / "first-build-real-20260814-075912-round-002" / "deepseek-builder.json").is_file()

    torn = tmp_path / "torn"
    shutil.copytree(UPSTREAM / "first-build-real-20260814-075912-round-002", torn)
    (torn / "deepseek-builder-transcript.json").write_bytes(b'{"model": "x", "tool_trace": [{"id"')
    res = run_aoe("trajectory", str(torn), "-o", "y", cwd=tmp_path)
    assert res.returncode == 1
    err = res.stderr.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in res.stderr
    assert err[0].startswith("aoe: error: torn/deepseek-builder: ") and "deepseek-builder-transcript.json" in err[0]
    assert "invalid JSON at byte 35" in err[0]

    res = run_aoe("trajectory", str(tmp_path / "missing"), cwd=tmp_path)
    assert res.returncode == 1 and res.stderr.startswith("aoe: error: ") and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1

    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the output folder should be")
    res = run_aoe("trajectory", str(OURS), "-o", str(blocker), cwd=tmp_path)
    assert res.returncode == 1 and "Traceback" not in res.stderr and res.stderr.startswith("aoe: error: ")


def test_agent_id_that_is_a_path_is_refused(tmp_path):
    match = tmp_path / "m"
    shutil.copytree(OURS, match)
    arena = json.loads((match / "arena.json").read_text())
    arena["agents"][0]["id"] = "../../escape"
    (match / "arena.json").write_text(json.dumps(arena))
    report = export_trajectories(match, tmp_path / "out")
    assert any("agent id '../../escape' cannot name a file" in line for line in report.errors)
    assert not (tmp_path / "escape.json").exists()
    assert [p.name for p in report.written] == ["builder-one-agent.json"]  # from the event log's agents



def test_two_matches_whose_paths_join_to_one_name_get_two_names(tmp_path):
    """``a-b/c`` and ``a/b-c`` both join to ``a-b-c``: the second is ``a-b-c~2``, never an overwrite."""
    from aoe_tui.export.trajectory import find_matches

    for rel in ("a-b/c", "a/b-c"):
        d = tmp_path / rel
        (d / "agents").mkdir(parents=True)
        (d / "events.jsonl").write_text("")
    assert sorted(name for _p, name in find_matches(tmp_path)) == ["a-b-c", "a-b-c~2"]



def test_a_heat_attempt_given_alone_is_named_as_in_its_season(tmp_path):
    """``aoe trajectory SEASON/round-1/heat-2/attempt-1`` writes ``round-1-heat-2-attempt-1/``,
    as the season's export names it, so two heats exported one by one never collide."""
    from aoe_tui.export.trajectory import find_matches

    d = tmp_path / "round-1" / "heat-2" / "attempt-1"
    (d / "agents").mkdir(parents=True)
    (d / "events.jsonl").write_text("")
    assert [name for _p, name in find_matches(d)] == ["round-1-heat-2-attempt-1"]
    assert [name for _p, name in find_matches(tmp_path)] == ["round-1-heat-2-attempt-1"]
