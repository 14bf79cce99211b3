"""Issue 30 item 9: no agent output, whatever its bytes, turns a finished run into a
harness failure or voids a heat, and every artifact stays valid UTF-8 JSON.

A real ``command:`` adapter (a shell script, spec §5) writes bytes hypothesis draws —
invalid UTF-8, lone surrogates (as JSON ``\\udXXX`` escapes and as their CESU bytes), NUL,
terminal control sequences, lines past the 64 KiB tail chunk — to its stdout, stderr,
transcript and the summary of its ``result.json``, and reports ``completed``. It runs in a
real heat supervisor (fake territories: ``tests/test_referee.supervise``) which writes
the real ``events.jsonl``, ``activity.jsonl`` and ``activity.log``; then the heat's
``world.json``, ``aoe-extra.json`` and bundle are written as ``run_heat`` writes them."""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aoe_tui.agents.command import CommandAdapter
from aoe_tui.domain.adapter_io import AdapterFileError, read_result_file
from aoe_tui.domain.world import world_json
from aoe_tui.fsio import write_atomic
from aoe_tui.replay.bundle import write_bundle

from test_referee import supervise

AGENT, TERRITORY = "builder-two-agent", "builder-two"

#: byte pieces agents really emit, mixed with arbitrary bytes
NASTY = [
    b"\xff", b"\xfe\xfd", b"\xc3", b"\xe2\x82", b"\xed\xa0\x80", b"\xed\xb2\x80",  # invalid UTF-8, CESU surrogates
    b"\x00", b"\x1b[2J\x1b[31m", b"\x1b]0;title\x07", b"\r", b"\x7f", b"\xc2\x9b", b"\xe2\x80\xae",
    b"\\ud800", b"\\udfff", b'"', b"\\", b"\n", b"x" * 70_000,
]
chunks = st.lists(st.one_of(st.sampled_from(NASTY), st.binary(max_size=64)), max_size=8).map(b"".join)
#: summary text with lone surrogates and controls (written with JSON escapes)
summaries = st.text(st.characters(exclude_categories=()), max_size=40) | st.sampled_from(
    ["\ud800", "a\udfffb", "\x00\x1b[31mred", "\ud83d", "ok"])

SCRIPT = """#!/bin/sh
d="$(dirname "$0")"
cat "$d/stdout.bin"
cat "$d/stderr.bin" >&2
cp "$d/transcript.bin" "$(dirname "$AOE_RESULT_FILE")/transcript.json"
cp "$d/result.bin" "$AOE_RESULT_FILE"
"""


def result_bytes(summary: bytes) -> bytes:
    head = {"schema_version": 1, "agent": AGENT, "territory": TERRITORY, "status": "completed"}
    return json.dumps(head)[:-1].encode() + b', "summary": "' + summary + b'"}'


def raw_summary(data: bytes) -> bytes:
    """``data`` as the inside of a JSON string written by a careless agent: raw bytes
    (invalid UTF-8, controls) but its quotes and backslashes escaped, so the file is JSON."""
    return data.replace(b"\\", b"\\\\").replace(b'"', b'\\"')


def assert_utf8_json(path: Path) -> None:
    text = path.read_bytes().decode("utf-8")  # raises on invalid UTF-8
    if path.suffix == ".jsonl":
        for line in text.split("\n")[:-1]:  # records end in \n; never str.splitlines (U+0085, U+2028 are text)
            json.loads(line)
        assert text.endswith("\n") or not text, path
    else:
        json.loads(text)


async def run_one(root: Path, stdout: bytes, stderr: bytes, transcript: bytes, result: bytes):
    adapter_dir = root / "adapter"
    adapter_dir.mkdir()
    for name, data in (("stdout.bin", stdout), ("stderr.bin", stderr), ("transcript.bin", transcript),
                       ("result.bin", result)):
        (adapter_dir / name).write_bytes(data)
    script = adapter_dir / "agent.sh"
    script.write_text(SCRIPT)
    script.chmod(0o755)
    keep: dict = {}
    world, records, out, _ = await supervise(root, [{}, {}, {}], duration=1, drain=0.5, keep=keep,
                                             adapters={AGENT: CommandAdapter("bytes", script)})
    # what run_heat writes after the supervisor: world.json, aoe-extra.json, the bundle
    write_atomic(out / "world.json", world_json(world))
    write_atomic(out / "aoe-extra.json", json.dumps(keep["supervisor"].extra(), indent=2, sort_keys=True))
    write_bundle(out, out / "heat.match.json")
    return world, records, out


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stdout=chunks, stderr=chunks, transcript=chunks,
       summary=st.one_of(summaries.map(lambda s: json.dumps(s)[1:-1].encode()), chunks.map(raw_summary)))
def test_agent_bytes_never_fail_a_finished_run_and_artifacts_stay_utf8_json(stdout, stderr, transcript, summary):
    root = Path(tempfile.mkdtemp(prefix="aoe-bytes-"))
    try:
        world, records, out = asyncio.run(run_one(root, stdout, stderr, transcript, result_bytes(summary)))
        finished = [r.event for r in records if r.event.kind == "agent_finished" and r.event.agent == AGENT]
        assert len(finished) == 1, [r.event for r in records if getattr(r.event, "agent", None) == AGENT]
        # judged as with clean output: a completed run, the player's success
        assert finished[0].success is True, finished[0]
        assert world.agents[AGENT].terminal_state.value == "completed"
        assert world.match_state.value == "finished"
        assert not [r for r in records if r.event.kind == "infrastructure_failure"]
        # its summary arrives as the agent meant it, made valid text
        expected = read_result_file(out / "agents" / AGENT / "result.json", AGENT, TERRITORY).summary
        assert finished[0].detail == expected
        expected.encode("utf-8")
        # every artifact we wrote is valid UTF-8 JSON (the agent's own files aside)
        own = {out / "agents" / AGENT / n for n in ("result.json", "transcript.json", "stdout.log", "stderr.log")}
        ours = [p for p in out.rglob("*") if p.is_file() and p not in own]
        for p in ours:
            if p.suffix in (".json", ".jsonl"):
                assert_utf8_json(p)
            else:
                p.read_bytes().decode("utf-8")  # activity.log, instruction.md: valid UTF-8 text
        assert (out / "activity.jsonl").is_file() and (out / "heat.match.json").is_file()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_a_result_file_with_a_lone_surrogate_or_a_bad_byte_is_read(tmp_path):
    """The two cases that made a completed run a harness error before (pydantic refused them)."""
    for summary, want in ((b"\\ud800 done", "\ufffd done"), (b"caf\xe9 \x00\x1b[0m", "caf\ufffd \x00\x1b[0m")):
        p = tmp_path / "result.json"
        p.write_bytes(result_bytes(summary))
        assert read_result_file(p, AGENT, TERRITORY).summary == want
    p.write_bytes(b'{"schema_version": 1, "agent": ')
    try:
        read_result_file(p, AGENT, TERRITORY)
    except AdapterFileError as err:
        assert "not valid JSON" in str(err) and str(p) in str(err)
    else:
        raise AssertionError("a torn result file must be refused")
