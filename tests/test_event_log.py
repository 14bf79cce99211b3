"""events.jsonl writer and reader (§2.1–§2.2) against every upstream fixture log."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from aoe_tui.domain.events import (
    AgentOutraced,
    DurableDeploymentCompleted,
    EventRecord,
    InfrastructureFailure,
    MatchFinished,
    MatchStateChanged,
    MilestonePassed,
    UsageCharged,
    is_lifecycle,
)
from aoe_tui.replay.log import EventLogError, EventLogWriter, dump_record, iter_events_from, read_events


def _logs(fixtures_dir: Path) -> list[Path]:
    logs = sorted((fixtures_dir / "upstream/matches").glob("*/events.jsonl"))
    assert len(logs) >= 19
    return logs


def test_fixture_logs_round_trip_line_by_line(fixtures_dir: Path) -> None:
    for log in _logs(fixtures_dir):
        lines = log.read_text(encoding="utf-8").splitlines()
        records = read_events(log)
        assert len(records) == len(lines)
        for rec, line in zip(records, lines):
            assert dump_record(rec) == line, f"{log}:{rec.sequence + 1}"


def test_writer_reproduces_fixture_bytes(fixtures_dir: Path, tmp_path: Path) -> None:
    for log in _logs(fixtures_dir)[:6]:
        records = read_events(log)
        out = tmp_path / log.parent.name / "events.jsonl"
        with EventLogWriter(out) as w:
            for rec in records:
                assert w.append(rec.event, rec.elapsed_ms).sequence == rec.sequence
        assert out.read_bytes() == log.read_bytes()


def test_durable_duplicate_key_both_values_kept(tmp_path: Path) -> None:
    line = (
        '{"schema_version":1,"sequence":0,"elapsed_ms":56051,"kind":"durable_deployment_completed",'
        '"territory":"failover-one","elapsed_ms":56000}'
    )
    p = tmp_path / "events.jsonl"
    p.write_text(line + "\n")
    (rec,) = read_events(p)
    assert rec.elapsed_ms == 56051
    assert rec.event.elapsed_ms == 56000
    assert dump_record(rec) == line


def test_torn_tail_at_random_byte_is_ignored(fixtures_dir: Path, tmp_path: Path) -> None:
    rng = random.Random(1234)
    for log in _logs(fixtures_dir):
        raw = log.read_bytes()
        last_start = raw.rstrip(b"\n").rfind(b"\n") + 1
        for _ in range(3):
            cut = rng.randrange(last_start + 1, len(raw) - 1)  # inside the last line, newline lost
            p = tmp_path / "torn.jsonl"
            p.write_bytes(raw[:cut])
            records = read_events(p)
            assert len(records) == raw.count(b"\n") - 1, (log, cut)


def test_corrupt_middle_line_names_its_line(fixtures_dir: Path, tmp_path: Path) -> None:
    log = _logs(fixtures_dir)[0]
    lines = log.read_text().splitlines(keepends=True)
    lines[6] = lines[6][: len(lines[6]) // 2] + "\n"
    p = tmp_path / "events.jsonl"
    p.write_text("".join(lines))
    with pytest.raises(EventLogError, match=rf"^{p}:7: invalid event"):
        read_events(p)


@pytest.mark.parametrize(
    "line,reason",
    [
        ('{"schema_version":1,"sequence":0,"elapsed_ms":0,"kind":"teleported","agent":"a"}', "unknown event kind"),
        ('{"schema_version":2,"sequence":0,"elapsed_ms":0,"kind":"match_finished","winner":null,"reason":"x"}',
         "schema_version"),
        ('{"schema_version":1,"sequence":5,"elapsed_ms":0,"kind":"match_finished","winner":null,"reason":"x"}',
         "sequence 5 but expected 0"),
        ('{"schema_version":1,"sequence":0,"elapsed_ms":0,"kind":"milestone_passed","territory":"t"}', "milestone"),
        ("[1,2]", "not a JSON object"),
    ],
)
def test_bad_lines_are_errors(tmp_path: Path, line: str, reason: str) -> None:
    p = tmp_path / "events.jsonl"
    p.write_text(line + "\n")
    with pytest.raises(EventLogError, match=reason) as err:
        read_events(p)
    assert str(err.value).startswith(f"{p}:1:")


def test_blank_lines_and_missing_file(tmp_path: Path) -> None:
    assert read_events(tmp_path / "none.jsonl") == []
    p = tmp_path / "events.jsonl"
    rec = EventRecord(sequence=0, elapsed_ms=0, event=MatchStateChanged(from_="preparing", to="running"))
    p.write_text("\n" + dump_record(rec) + "\n\n")
    assert len(read_events(p)) == 1


def test_unknown_event_keys_tolerated(tmp_path: Path) -> None:
    p = tmp_path / "events.jsonl"
    p.write_text('{"schema_version":1,"sequence":0,"elapsed_ms":3,"kind":"agent_outraced","agent":"a","reason":"r","x":1}\n')
    (rec,) = read_events(p)
    assert rec.event == AgentOutraced(agent="a", reason="r")


def test_writer_rules(tmp_path: Path) -> None:
    p = tmp_path / "m" / "events.jsonl"
    w = EventLogWriter(p)
    r0 = w.append(MatchStateChanged(from_="preparing", to="running"), 0)
    r1 = w.append(MilestonePassed(territory="t", milestone="m", points=10, evidence={"z": 1, "a": "é"}), 1500)
    r2 = w.append(DurableDeploymentCompleted(territory="t", elapsed_ms=1500), 1500)
    assert (r0.sequence, r1.sequence, r2.sequence, w.next_sequence) == (0, 1, 2, 3)
    with pytest.raises(EventLogError, match="backwards"):
        w.append(UsageCharged(agent="a", resource_units=1), 1499)
    w.append(UsageCharged(agent="a", resource_units=1), 1500)
    w.close()
    lines = p.read_text(encoding="utf-8").splitlines()
    assert lines[0] == '{"schema_version":1,"sequence":0,"elapsed_ms":0,"kind":"match_state_changed","from":"preparing","to":"running"}'
    assert lines[1].endswith('"points":10,"evidence":{"a":"é","z":1}}')
    assert lines[2] == (
        '{"schema_version":1,"sequence":2,"elapsed_ms":1500,"kind":"durable_deployment_completed",'
        '"territory":"t","elapsed_ms":1500}'
    )
    assert lines[3].endswith('"resource_units":1,"input_tokens":null,"output_tokens":null,"cost_microusd":null}')
    # refuses to overwrite a non-empty log; resume continues the sequence
    with pytest.raises(EventLogError, match="already exists"):
        EventLogWriter(p)
    with open(p, "ab") as fh:
        fh.write(b'{"schema_version":1,"seq')  # torn tail from a crash
    with EventLogWriter(p, resume=True) as w2:
        assert w2.next_sequence == 4
        w2.append(MatchFinished(winner="t", reason="first durable deployment"), 1500)
    assert [r.sequence for r in read_events(p)] == [0, 1, 2, 3, 4]
    # an empty existing file is fine
    q = tmp_path / "empty.jsonl"
    q.write_text("")
    EventLogWriter(q).close()


def test_lifecycle_kinds() -> None:
    assert is_lifecycle(MatchFinished(winner=None, reason="x"))
    assert is_lifecycle(InfrastructureFailure(component="c", source="provider", detail="d"))
    assert not is_lifecycle(UsageCharged(agent="a", resource_units=0))


def test_event_models_accept_from_alias() -> None:
    a = MatchStateChanged.model_validate({"from": "running", "to": "finished"})
    b = MatchStateChanged(from_="running", to="finished")
    assert a == b and a.model_dump(by_alias=True)["from"] == "running"


def test_tail_reader(tmp_path: Path) -> None:
    p = tmp_path / "events.jsonl"
    w = EventLogWriter(p)
    w.append(MatchStateChanged(from_="preparing", to="running"), 0)
    recs, off = iter_events_from(p, 0)
    assert len(recs) == 1
    with open(p, "ab") as fh:
        fh.write(b'{"schema_version":1,"sequence":1,"elapsed_ms":5,"kind":"match_fin')
    recs2, off2 = iter_events_from(p, off, next_sequence=1)
    assert recs2 == [] and off2 == off
    w.close()
    data = json.dumps({"winner": None})
    assert data
