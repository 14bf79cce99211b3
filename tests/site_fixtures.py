"""Season folders for the cup site's tests (``aoe site``, issue #28).

Not a test module; ``tests/test_site.py`` and ``benchmarks/site_build.py`` import it.

- :data:`DEMO_SEASON`: ``tests/fixtures/ours/demo-season`` (a real demo season run, read-only).
- :func:`hostile_season`: a copy of it whose agent text is hostile (markup, script-closing
  text, ESC, bidi overrides, U+2028, a 5000-character line) in every place an agent or its
  guest writes text the site shows: activity lines, failure details in ``events.jsonl``
  (the log rewritten through the event log's own encoder, so framing and sequences stay
  valid, and ``world.json`` and the bundle rewritten from it), an agent's result summary,
  transcript and analysis (commands and output excerpts), and an entrant's model name in
  ``season.toml``, ``season.jsonl`` and the heats' ``agent_started`` events.
  The season still loads (``aoe standings`` reads it).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

from aoe_tui.domain.display import printable

FIXTURES = Path(__file__).resolve().parent / "fixtures"
DEMO_SEASON = FIXTURES / "ours" / "demo-season"
OPENCODE_AGENT = FIXTURES / "ours" / "opencode-first-build" / "agents" / "builder-one-agent"

#: markup an agent may print: must show as text, never run or become elements
HOSTILE_MARKUP = (
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(3)>",
    '"]]></script><script>alert(2)</script>',
)
#: characters that must show as visible escapes (ESC, a bidi override, a line separator)
HOSTILE_CHARS = ("\x1b", "\u202e", "\u2028")
#: one line holding every hostile piece (each shows as ``printable(piece)``); the control
#: characters and the first markup come first, within the first 120 characters (a view may
#: cut a long line, as the heat page's one-line event summaries do at 160)
HOSTILE_PIECES = ("esc:\x1b[31mred\x1b[0m", "bidi:\u202eevil\u202c", "ls:a\u2028b") + HOSTILE_MARKUP
HOSTILE_TEXT = "HOSTILE " + " ".join(HOSTILE_PIECES)


def hostile_text(source: str) -> str:
    """:data:`HOSTILE_TEXT` tagged with where it was put (``HOSTILE[activity] …``), so a test
    can tell which of the places shows it."""
    return f"HOSTILE[{source}] " + " ".join(HOSTILE_PIECES)


#: the places :func:`hostile_season` puts hostile text, by tag
SOURCES = {
    "activity": "an activity line (activity.jsonl)",
    "failure-detail": "a milestone_failed detail (events.jsonl; world.json failure_detail)",
    "agent-detail": "an agent_finished detail (events.jsonl)",
    "analysis-command": "an analysis action's command (agents/ID/analysis.json)",
    "analysis-output": "an analysis action's output excerpt",
    "transcript-command": "a transcript tool call's command (agents/ID/transcript.json)",
    "transcript-output": "a transcript tool call's output",
    "transcript-text": "a transcript message's text and result",
    "result-summary": "the agent's result summary (agents/ID/result.json)",
}
#: a 5000-character line (no spaces: it cannot wrap at a word)
LONG_LINE = "LONGLINE-" + "x" * 4991
#: the model name of :data:`HOSTILE_ENTRANT` in the hostile season
HOSTILE_MODEL = "model<script>alert(4)</script>\u202e\x1b[1m"
HOSTILE_ENTRANT = "memory"
#: the heat attempt whose agent text is hostile (``HOSTILE_ENTRANT`` sits on builder-two there)
HOSTILE_ATTEMPT = "round-1/heat-1/attempt-1"


def visible(text: str) -> str:
    """How the site must show agent text: :func:`printable` (``\\x1b``, ``\\u202e``, ``\\u2028``)."""
    return printable(text)


def _rewrite_events(attempt: Path, territory_details: dict[str, str], model: dict[str, str],
                    agent_detail: dict[str, str]) -> None:
    """Rewrite ``attempt/events.jsonl`` through the log's encoder with hostile details
    (every ``milestone_failed`` of a territory in ``territory_details``, ``agent_finished``
    of an agent in ``agent_detail``) and models (``agent_started``), then ``world.json`` and
    the bundle from it."""
    from aoe_tui.domain.world import world_json
    from aoe_tui.replay.bundle import read_bundle, write_bundle
    from aoe_tui.replay.log import dump_record, read_events
    from aoe_tui.replay.reducer import reduce_match

    records = read_events(attempt / "events.jsonl")
    out = []
    for rec in records:
        ev = rec.event
        if ev.kind == "milestone_failed" and ev.territory in territory_details:
            ev = ev.model_copy(update={"detail": territory_details[ev.territory]})
        elif ev.kind == "agent_started" and ev.agent in model:
            ev = ev.model_copy(update={"model": model[ev.agent]})
        elif ev.kind == "agent_finished" and ev.agent in agent_detail:
            ev = ev.model_copy(update={"detail": agent_detail[ev.agent]})
        out.append(rec.model_copy(update={"event": ev}))
    (attempt / "events.jsonl").write_text("".join(dump_record(r) + "\n" for r in out), encoding="utf-8")
    records = read_events(attempt / "events.jsonl")  # the rewritten log reads back
    (attempt / "world.json").write_text(world_json(reduce_match(records)), encoding="utf-8")
    for bundle in attempt.glob("*.match.json"):
        old = read_bundle(bundle).match
        write_bundle(attempt, bundle, name=old.get("name"), slug=old.get("slug"), listed=bool(old.get("listed")))


def _append_activity(attempt: Path, lines_per_agent: list[str]) -> None:
    """Append ``lines_per_agent`` for every agent of ``attempt/activity.jsonl`` (at the last
    line's clock, so a replay at its end has shown them all and they are the latest)."""
    path = attempt / "activity.jsonl"
    recs = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
    agents = sorted({r["agent"] for r in recs})
    seq = recs[-1]["sequence"] + 1 if recs else 0
    ms = recs[-1]["ms"] if recs else 0
    add = []
    for agent in agents:
        for line in lines_per_agent:
            add.append(json.dumps({"sequence": seq, "ms": ms, "agent": agent, "line": line},
                                  ensure_ascii=False, separators=(",", ":")))
            seq += 1
    with open(path, "a", encoding="utf-8") as fh:
        fh.write("".join(a + "\n" for a in add))


def _hostile_agent_files(agent_dir: Path, agent: str, territory: str) -> None:
    """A transcript and an analysis (the opencode fixture's shapes) with hostile commands
    and outputs, and a hostile result summary, for ``agent``."""
    analysis = json.loads((OPENCODE_AGENT / "analysis.json").read_text(encoding="utf-8"))
    analysis.update(agent=agent, territory=territory, model=HOSTILE_MODEL)
    for i, action in enumerate(analysis["actions"]):
        action["command"] = hostile_text("analysis-command") if i % 2 == 0 else LONG_LINE
        action["output_excerpt"] = f"{hostile_text('analysis-output')}\n{LONG_LINE}"
    (agent_dir / "analysis.json").write_text(json.dumps(analysis, indent=2, ensure_ascii=False), encoding="utf-8")
    transcript = json.loads((OPENCODE_AGENT / "transcript.json").read_text(encoding="utf-8"))
    transcript["model"] = HOSTILE_MODEL
    transcript["outcome"]["result"] = hostile_text("transcript-text")
    for msg in transcript["messages"]:
        if isinstance(msg.get("content"), str):
            msg["content"] = f"{hostile_text('transcript-text')}\n{msg['content'][:200]}"
            continue
        for part in msg.get("content") or []:
            if part.get("type") == "tool_use":
                part["input"] = {"command": hostile_text("transcript-command")}
            elif part.get("type") == "tool_result":
                part["content"] = f"{hostile_text('transcript-output')}\n{LONG_LINE}"
            elif part.get("type") == "text":
                part["text"] = hostile_text("transcript-text")
    for call in transcript.get("tool_trace") or []:
        call["input"] = {"command": hostile_text("transcript-command")}
        call["output"] = f"{hostile_text('transcript-output')}\n{LONG_LINE}"
    (agent_dir / "transcript.json").write_text(json.dumps(transcript, indent=2, ensure_ascii=False), encoding="utf-8")
    result_path = agent_dir / "result.json"
    result = json.loads(result_path.read_text(encoding="utf-8"))
    result["summary"] = hostile_text("result-summary")
    result_path.write_text(json.dumps(result, indent=2, ensure_ascii=False), encoding="utf-8")


def _hostile_model(season: Path) -> None:
    """:data:`HOSTILE_MODEL` as :data:`HOSTILE_ENTRANT`'s model in ``season.toml`` and
    ``season.jsonl`` (whose ``season_sha256`` follows the new file)."""
    from aoe_tui.replay.season_log import dump_season_record, read_season_log

    toml = season / "season.toml"
    text = toml.read_text(encoding="utf-8")
    block = re.compile(r'(\[\[entrants\]\]\nid = "' + re.escape(HOSTILE_ENTRANT) + r'"\n(?:[^\[\n][^\n]*\n)*?model = )"[^"\n]*"')
    # a TOML basic string: JSON's \uXXXX and \" escapes are TOML's too
    text, n = block.subn(lambda m: m.group(1) + json.dumps(HOSTILE_MODEL, ensure_ascii=True), text)
    assert n == 1, "season.toml: the hostile entrant's model line was not found"
    toml.write_text(text, encoding="utf-8")
    digest = hashlib.sha256(toml.read_bytes()).hexdigest()
    log = season / "season.jsonl"
    records = read_season_log(log)
    first = records[0]
    models = dict(first.event.models)
    models[HOSTILE_ENTRANT] = HOSTILE_MODEL
    records[0] = first.model_copy(update={"event": first.event.model_copy(update={"models": models,
                                                                                 "season_sha256": digest})})
    log.write_text("".join(dump_season_record(r) + "\n" for r in records), encoding="utf-8")
    read_season_log(log)  # reads back


def hostile_season(tmp_path: Path) -> Path:
    """A copy of :data:`DEMO_SEASON` in ``tmp_path/hostile-season`` with hostile agent text
    (see the module); returns the season folder."""
    season = Path(tmp_path) / "hostile-season"
    shutil.copytree(DEMO_SEASON, season)
    for f in season.glob("standings.*"):  # stale once the model changes; aoe standings rewrites them
        f.unlink()
    _hostile_model(season)
    attempts = sorted(p for p in season.glob("round-*/heat-*/attempt-*") if (p / "events.jsonl").is_file())
    for attempt in attempts:
        _append_activity(attempt, [LONG_LINE, hostile_text("activity")])
    target = season / HOSTILE_ATTEMPT
    world = json.loads((target / "world.json").read_text(encoding="utf-8"))
    by_agent = {t["agent"]: tid for tid, t in world["territories"].items()}
    territory = by_agent[HOSTILE_ENTRANT]
    losers = [tid for tid in world["territories"] if tid != world.get("winner")]
    details = {tid: (hostile_text("failure-detail") if tid == territory else LONG_LINE) for tid in losers}
    _hostile_agent_files(target / "agents" / HOSTILE_ENTRANT, HOSTILE_ENTRANT, territory)
    for attempt in attempts:
        w = json.loads((attempt / "world.json").read_text(encoding="utf-8"))
        agents = {t["agent"] for t in w["territories"].values()}
        _rewrite_events(attempt, details if attempt == target else {},
                        {HOSTILE_ENTRANT: HOSTILE_MODEL} if HOSTILE_ENTRANT in agents else {},
                        {HOSTILE_ENTRANT: hostile_text("agent-detail")} if attempt == target else {})
    return season
