"""``aoe trajectory``: one ATIF document per agent of a match (spec §9.3).

**Input.** A match folder, a season folder or any folder holding matches; it is walked
recursively. A match is a folder with ``world.json`` or ``events.jsonl`` and either an
``agents/`` folder (ours and upstream's ``run --output``: ``agents/<id>/transcript.json``)
or published per-agent files (upstream's report site: ``<id>-transcript.json``). Its world
is rebuilt from ``events.jsonl`` when there is one (§2.4), else read from ``world.json``.
The agents are the world's; each one's facts come from our records: ``agent_started``
(territory, model), ``arena.json`` (adapter, reasoning effort, budget), ``aoe-extra.json``
``agents[id].adapter`` (the adapter that really ran, ours), ``match.json``
``adapter_sha256`` (the version) and the transcript.

**Transcript.** Any transcript in upstream's shape (§2.7: ``model``, ``outcome``, ``usage``,
``messages``, ``tool_trace``, ``timing``), whoever wrote it (claux, our opencode adapter,
any harness writing that shape): ``transcript.json``, or ``transcript.live.json`` when the
first is missing or not valid JSON (as the analysis does, §9.2). Nothing in it is run or
interpreted: strings are copied as they are into JSON.

**Output.** ``OUT/<match name>/<agent>.json``, written atomically
(:func:`aoe_tui.fsio.write_atomic`). The match name is the match folder's name when PATH is
the match, else its path under PATH joined with ``-`` (``round-1-heat-2-attempt-1`` in a
season). Every document is validated (:func:`aoe_tui.domain.atif.validate_trajectory`)
before it is written.

**Skipped agents** (upstream skips and counts them; ATIF needs at least one step, so a
document without steps is not valid ATIF): an agent with no transcript (an oracle, a
scripted builder) or whose ``tool_trace`` is empty. A transcript that exists but is not a
usable transcript (torn JSON, not an object) is an **error**: the agent is skipped and the
export reports it (``aoe trajectory`` exits 1 after writing the others); so is an agent id
that cannot name a file (a separator or a leading dot: ids are never used as paths).

**Document** (§9.3, field for field): ``schema_version`` ``"ATIF-v1.7"``; ``session_id``
``"<match>/<agent>"``; ``agent`` ``{name: adapter, version: its sha256 from match.json,
model_name, extra: {reasoning_effort, territory}}``; ``steps``: the first user message,
one agent step per tool call (``tool_calls``, ``observation`` with ``extra.is_error``,
``extra`` ``{started_after_ms, duration_ms, read_only}``, ms since the agent's start), a
final agent step (``outcome.result`` or ``outcome.message``, ``extra.outcome``);
``notes``; ``final_metrics`` (tokens, ``total_cost_usd`` in USD, ``total_steps``, ``extra``
with ``cache_read_tokens``, ``cache_creation_tokens``, ``model_rounds``,
``total_duration_ms`` and ``infrastructure_evaluation``).

**Ours, where §9.3 says nothing:** per-step ``metrics`` from the transcript's
``timing.model_rounds[].usage`` (``prompt_tokens`` = ``input_tokens``, ``cached_tokens`` =
``cache_read_tokens``, ``extra.cache_creation_tokens``, ``cost_usd`` in USD), with
``llm_call_count`` 1 on each step that has them. When there is one more round than tool
calls (one call per round, then the final answer) round *k* goes to tool step *k* and the
last to the final step; otherwise each round goes to the first tool call that started at or
after the round's end (start + duration) and before the next round's end (the last round,
with none, to the final step); a round that leads to no step has its figures only in the
totals; ``arguments`` that are not a JSON object are
wrapped as ``{"input": value}`` (ATIF requires an object); ``agent.version`` is
``"unknown"`` when match.json has no digest for the adapter (ATIF requires a string).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from aoe_tui.domain.adapter_io import invalid_json_note
from aoe_tui.domain.atif import ATIF_VERSION, validate_trajectory
from aoe_tui.errors import AoeError
from aoe_tui.fsio import write_atomic

__all__ = ["DEFAULT_OUTPUT", "NOTES", "ExportReport", "TrajectoryError", "TranscriptError", "build_trajectory",
           "export_trajectories", "find_matches", "load_match_facts", "read_transcript"]

#: ``-o`` default (upstream's ``--output`` default, §8.1)
DEFAULT_OUTPUT = "trajectories"

#: the fixed root ``notes`` (§9.3: private reasoning is excluded)
NOTES = ("Exported from an agents-of-empires match transcript. Private reasoning and message text other than the "
         "first user message and the final outcome are excluded; one agent step per tool call.")

#: agent ids that may name ``<agent>.json`` and ``agents/<agent>/`` (no separator, no leading dot)
_SAFE_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@+-]{0,127}")

_PRODUCER = "agents-of-empires"
_SUITE = "agents-of-empires-match"


class TrajectoryError(AoeError):
    """PATH holds no match, or a match folder cannot be read (one line naming the file)."""


class TranscriptError(AoeError):
    """A transcript file exists but is not a usable transcript (one line naming the file)."""


@dataclass
class MatchFacts:
    """What one match folder tells about its agents (see the module docstring)."""

    folder: Path
    name: str
    world: Any  # aoe_tui.domain.world.WorldState
    arena: dict[str, Any] | None
    provenance: dict[str, Any] | None
    extra: dict[str, Any] | None
    flat: bool  # upstream's published layout: <agent>-transcript.json beside world.json
    started: dict[str, dict[str, Any]] = field(default_factory=dict)  # agent → agent_started fields

    def arena_agent(self, agent: str) -> dict[str, Any]:
        for entry in (self.arena or {}).get("agents") or []:
            if isinstance(entry, dict) and entry.get("id") == agent:
                return entry
        return {}

    def transcript_paths(self, agent: str) -> tuple[Path, Path]:
        """``transcript.json`` and its live copy, in this folder's layout."""
        if self.flat:
            return self.folder / f"{agent}-transcript.json", self.folder / f"{agent}-transcript.live.json"
        base = self.folder / "agents" / agent
        return base / "transcript.json", base / "transcript.live.json"

    def instruction(self, agent: str) -> str | None:
        path = self.folder / "agents" / agent / "instruction.md"
        try:
            return path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None


@dataclass
class ExportReport:
    """What an export did: files ``written``, ``skipped`` lines (not errors), ``errors`` lines."""

    written: list[Path] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def _is_match(folder: Path) -> bool:
    if not ((folder / "world.json").is_file() or (folder / "events.jsonl").is_file()):
        return False
    if (folder / "agents").is_dir():
        return True
    return any(folder.glob("*-transcript.json")) or any(folder.glob("*-result.json"))


def find_matches(root: Path) -> list[tuple[Path, str]]:
    """Every match folder under ``root`` (``root`` itself included), sorted, with its name.

    Raises:
        TrajectoryError: ``root`` does not exist, is not a folder, or holds no match.
    """
    root = Path(root)
    if not root.exists():
        raise TrajectoryError(f"{root}: no such file or folder")
    if not root.is_dir():
        raise TrajectoryError(f"{root}: not a folder (give a match folder or a season folder)")
    found: list[tuple[Path, str]] = []
    if _is_match(root):
        here = root.resolve()
        parts = [here.parent.parent.name, here.parent.name, here.name]
        if parts[0].startswith("round-") and parts[1].startswith("heat-") and parts[2].startswith("attempt-"):
            return [(root, "-".join(parts))]  # a season's heat attempt: named as in the season's export
        return [(root, here.name)]
    for dirpath, dirnames, _files in os.walk(root):
        dirnames.sort()
        here = Path(dirpath)
        if here != root and _is_match(here):
            found.append((here, "-".join(here.relative_to(root).parts)))
            dirnames[:] = [d for d in dirnames if d not in ("agents", "territories", "evidence")]
        else:
            dirnames[:] = [d for d in dirnames if d not in ("territories", "evidence")]
    if not found:
        raise TrajectoryError(f"{root}: not a match folder and holds none (a match folder has events.jsonl or "
                              "world.json and agents/)")
    seen: dict[str, int] = {}
    named: list[tuple[Path, str]] = []
    for here, name in found:  # a-b/c and a/b-c join to one name: the later ones get a suffix
        seen[name] = seen.get(name, 0) + 1
        named.append((here, name if seen[name] == 1 else f"{name}~{seen[name]}"))
    return named


def _json_file(path: Path) -> dict[str, Any] | None:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as err:
        raise TrajectoryError(f"{path}: cannot read: {err.strerror or err}") from None
    note = invalid_json_note(raw)
    if note:
        raise TrajectoryError(f"{path}: {note}")
    data = json.loads(raw)
    if not isinstance(data, dict):
        raise TrajectoryError(f"{path}: not a JSON object")
    return data


def load_match_facts(folder: Path, name: str) -> MatchFacts:
    """Read one match folder: its world (rebuilt from ``events.jsonl``, else ``world.json``),
    ``arena.json``, ``match.json``, ``aoe-extra.json`` and the ``agent_started`` events.

    Raises:
        TrajectoryError: a file of the match is unreadable or invalid (one line naming it).
    """
    from aoe_tui.domain.world import WorldState
    from aoe_tui.replay.log import read_events
    from aoe_tui.replay.reducer import reduce_match

    folder = Path(folder)
    started: dict[str, dict[str, Any]] = {}
    events = folder / "events.jsonl"
    if events.is_file():
        try:
            records = read_events(events)
        except AoeError as err:
            raise TrajectoryError(str(err)) from None
        except (OSError, ValueError) as err:
            raise TrajectoryError(f"{events}: {err}") from None
        world = reduce_match(records)
        for rec in records:
            ev = rec.event
            if getattr(ev, "kind", None) == "agent_started":
                started[ev.agent] = {"territory": ev.territory, "model": ev.model}
    else:
        data = _json_file(folder / "world.json")
        try:
            world = WorldState.model_validate(data)
        except ValidationError as err:
            first = err.errors()[0] if err.errors() else {}
            where = ".".join(str(p) for p in first.get("loc", ())) or "<root>"
            raise TrajectoryError(f"{folder / 'world.json'}: {where}: {first.get('msg', 'invalid')}") from None
    extra = None
    try:
        extra = _json_file(folder / "aoe-extra.json")
    except TrajectoryError:
        extra = None  # ours, informational: a damaged one only loses the adapter name
    return MatchFacts(
        folder=folder, name=name, world=world, arena=_json_file(folder / "arena.json"),
        provenance=_json_file(folder / "match.json"), extra=extra,
        flat=not (folder / "agents").is_dir(), started=started,
    )


def read_transcript(paths: tuple[Path, Path]) -> tuple[dict[str, Any], Path, str | None] | None:
    """The transcript of ``paths`` (``transcript.json``, then the live copy): ``(data, file,
    note)``; ``note`` says why the live copy was used. ``None`` when neither file exists.

    Raises:
        TranscriptError: a transcript exists but neither file is a usable JSON object
            (the message names the file and the byte where its JSON breaks).
    """
    problems: list[str] = []
    for path in paths:
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            continue
        except OSError as err:
            problems.append(f"{path}: cannot read: {err.strerror or err}")
            continue
        note = invalid_json_note(raw)
        if note:
            problems.append(f"{path}: {note}")
            continue
        data = json.loads(raw)
        if not isinstance(data, dict):
            problems.append(f"{path}: not a transcript (not a JSON object)")
            continue
        if problems:
            return data, path, f"used {path.name}: {problems[0]}"
        return data, path, None
    if problems:
        raise TranscriptError("; ".join(problems))
    return None


def _first_user_message(messages: Any) -> str | None:
    for msg in messages if isinstance(messages, list) else ():
        if not isinstance(msg, dict) or msg.get("role") != "user":
            continue
        content = msg.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            texts = [p.get("text") for p in content
                     if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)]
            if texts:
                return "\n".join(texts)
    return None


def _int(v: Any) -> int | None:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _text(v: Any) -> str | None:
    if v is None or isinstance(v, str):
        return v
    return json.dumps(v, ensure_ascii=False)


def _step_metrics(usage: Any) -> dict[str, Any] | None:
    """One model round's usage (§2.7 shape) as ATIF step ``metrics`` (tokens; USD)."""
    if not isinstance(usage, dict):
        return None
    metrics: dict[str, Any] = {}
    for key, src in (("prompt_tokens", "input_tokens"), ("completion_tokens", "output_tokens"),
                     ("cached_tokens", "cache_read_tokens")):
        if _int(usage.get(src)) is not None:
            metrics[key] = _int(usage.get(src))
    if _num(usage.get("cost_usd")) is not None:
        metrics["cost_usd"] = _num(usage.get("cost_usd"))
    if _int(usage.get("cache_creation_tokens")) is not None:
        metrics["extra"] = {"cache_creation_tokens": _int(usage.get("cache_creation_tokens"))}
    return metrics or None


def _round_targets(rounds: list[dict[str, Any]], starts: list[int | None]) -> dict[int, dict[str, Any]]:
    """Step index (0-based among the tool steps; ``len(starts)`` = the final step) → the
    metrics of the model round that led to it (see the module docstring)."""
    ordered = sorted((r for r in rounds if isinstance(r, dict) and _int(r.get("started_after_ms")) is not None),
                     key=lambda r: _int(r["started_after_ms"]))
    out: dict[int, dict[str, Any]] = {}
    if len(ordered) == len(starts) + 1:  # one tool call per round, then the final answer: by order
        for j, rnd in enumerate(ordered):
            metrics = _step_metrics(rnd.get("usage"))
            if metrics is not None:
                out[j] = metrics
        return out
    ends = [_int(r["started_after_ms"]) + (_int(r.get("duration_ms")) or 0) for r in ordered]
    for i, rnd in enumerate(ordered):
        target = None
        for j, start in enumerate(starts):  # the first call after the round's answer, before the next one's
            if j not in out and start is not None and start >= ends[i] and (i + 1 == len(ordered) or start < ends[i + 1]):
                target = j
                break
        if target is None and i + 1 == len(ordered):
            target = len(starts)
        metrics = _step_metrics(rnd.get("usage"))
        if target is not None and metrics is not None and target not in out:
            out[target] = metrics
    return out


def _infrastructure_evaluation(facts: MatchFacts, agent: str, territory: str | None, model: str | None,
                               effort: Any, duration_ms: int | None) -> dict[str, Any]:
    """The ``infrastructure_evaluation`` extension (schema_version 1, §9.3)."""
    world = facts.world
    prov = facts.provenance
    view = world.agents.get(agent)
    terr = world.territories.get(territory or "") if territory else None
    verification: dict[str, Any] = {}
    failure_category = None
    if terr is not None:
        for mid, ms in terr.milestones.items():
            verification[mid] = {"passed": ms.passed, "evaluating": ms.evaluating, "points": ms.points,
                                 "failure_category": ms.failure_category, "failure_detail": ms.failure_detail}
            if failure_category is None and ms.failure_category:
                failure_category = ms.failure_category
    budget = facts.arena_agent(agent).get("budget")
    seconds = duration_ms / 1000 if duration_ms is not None else world.elapsed_ms / 1000
    return {
        "schema_version": 1,
        "producer": {"name": _PRODUCER, "version": (prov or {}).get("controller_version"),
                     "revision": (prov or {}).get("source_revision")},
        "task": {"id": (prov or {}).get("arena_id") or ((facts.arena or {}).get("arena") or {}).get("id"),
                 "version": (prov or {}).get("compatibility_key"), "pack": None},
        "execution": {"agent": agent, "model": model, "reasoning_effort": effort, "timeout_seconds": None,
                      "duration_seconds": seconds, "suite": _SUITE, "territory": territory,
                      "budget_resource_units": budget.get("resource_units") if isinstance(budget, dict) else None},
        "outcome": {
            "status": _enum(view.terminal_state) if view is not None else None,
            "reward": terr.milestone_points if terr is not None else None,
            "failure_category": failure_category,
            "verification": verification,
            "durable": bool(terr is not None and terr.durable_at_ms is not None),
            "durable_at_ms": terr.durable_at_ms if terr is not None else None,
            "winner": bool(territory is not None and world.winner == territory),
            "match_state": _enum(world.match_state),
            "finish_reason": world.finish_reason,
        },
        "provenance": None if prov is None else {k: prov.get(k) for k in
                                                 ("manifest_sha256", "verifier_sha256", "adapter_sha256",
                                                  "compatibility_key")},
    }


def _enum(value: Any) -> Any:
    return getattr(value, "value", value)


def build_trajectory(facts: MatchFacts, agent: str, transcript: dict[str, Any]) -> dict[str, Any] | None:
    """The ATIF document of ``agent`` from its ``transcript`` (§9.3); ``None`` when the
    transcript's ``tool_trace`` is empty or missing (upstream skips such an agent).
    The document is not validated here (:func:`export_trajectories` does)."""
    trace = [e for e in transcript.get("tool_trace") or [] if isinstance(e, dict)] \
        if isinstance(transcript.get("tool_trace"), list) else []
    if not trace:
        return None
    world = facts.world
    view = world.agents.get(agent)
    arena_agent = facts.arena_agent(agent)
    started = facts.started.get(agent, {})
    territory = started.get("territory") or (view.territory if view is not None else None) or arena_agent.get("territory")
    t_model = transcript.get("model") if isinstance(transcript.get("model"), str) else None
    model = started.get("model") or (view.model if view is not None else None) or arena_agent.get("model") or t_model
    effort = arena_agent.get("reasoning_effort")
    adapter = (((facts.extra or {}).get("agents") or {}).get(agent) or {}).get("adapter") or arena_agent.get("adapter")
    hashes = (facts.provenance or {}).get("adapter_sha256") or {}
    if not adapter and len(hashes) == 1:
        adapter = next(iter(hashes))
    adapter = str(adapter) if adapter else "unknown"
    version = hashes.get(adapter) if isinstance(hashes, dict) else None

    first = _first_user_message(transcript.get("messages"))
    if first is None:
        first = facts.instruction(agent) or ""
    steps: list[dict[str, Any]] = [{"step_id": 1, "source": "user", "message": first}]
    step_model = t_model or model
    starts: list[int | None] = []
    for index, entry in enumerate(trace):
        call_id = entry.get("id")
        call_id = call_id if isinstance(call_id, str) and call_id else f"call-{index + 1}"
        args = entry.get("input")
        arguments = args if isinstance(args, dict) else ({} if args is None else {"input": args})
        start = _int(entry.get("started_after_ms"))
        starts.append(start)
        steps.append({
            "step_id": len(steps) + 1,
            "source": "agent",
            "model_name": step_model,
            "message": "",
            "tool_calls": [{"tool_call_id": call_id, "function_name": str(entry.get("name") or ""),
                            "arguments": arguments}],
            "observation": {"results": [{"source_call_id": call_id, "content": _text(entry.get("output")),
                                         "extra": {"is_error": bool(entry.get("is_error"))}}]},
            "extra": {"started_after_ms": start, "duration_ms": _int(entry.get("duration_ms")),
                      "read_only": entry.get("read_only") if isinstance(entry.get("read_only"), bool) else None},
        })
    outcome = transcript.get("outcome") if isinstance(transcript.get("outcome"), dict) else {}
    final_text = outcome.get("result") if isinstance(outcome.get("result"), str) else outcome.get("message")
    steps.append({"step_id": len(steps) + 1, "source": "agent",
                  "message": final_text if isinstance(final_text, str) else "",
                  "extra": {"outcome": outcome.get("status")}})
    timing = transcript.get("timing") if isinstance(transcript.get("timing"), dict) else {}
    rounds = timing.get("model_rounds") if isinstance(timing.get("model_rounds"), list) else []
    for j, metrics in _round_targets(rounds, starts).items():
        steps[j + 1]["metrics"] = metrics
        steps[j + 1]["llm_call_count"] = 1

    usage = transcript.get("usage") if isinstance(transcript.get("usage"), dict) else {}
    prompt = _int(usage.get("input_tokens"))
    completion = _int(usage.get("output_tokens"))
    cost = _num(usage.get("cost_usd"))
    if view is not None:  # §9.3: the totals fall back to the world's counters
        prompt = view.input_tokens if prompt is None else prompt
        completion = view.output_tokens if completion is None else completion
        cost = view.cost_microusd / 1e6 if cost is None else cost
    read, creation = _int(usage.get("cache_read_tokens")), _int(usage.get("cache_creation_tokens"))
    duration = _int(timing.get("total_duration_ms"))
    return {
        "schema_version": ATIF_VERSION,
        "session_id": f"{facts.name}/{agent}",
        "agent": {"name": adapter, "version": version if isinstance(version, str) else "unknown",
                  "model_name": model, "extra": {"reasoning_effort": effort, "territory": territory}},
        "steps": steps,
        "notes": NOTES,
        "final_metrics": {
            "total_prompt_tokens": prompt,
            "total_completion_tokens": completion,
            "total_cached_tokens": read + creation if read is not None and creation is not None else None,
            "total_cost_usd": cost,
            "total_steps": len(steps),
            "extra": {
                "cache_read_tokens": read,
                "cache_creation_tokens": creation,
                "model_rounds": len(rounds),
                "total_duration_ms": duration,
                "infrastructure_evaluation": _infrastructure_evaluation(
                    facts, agent, territory, model, effort, duration),
            },
        },
    }


def _agents(facts: MatchFacts) -> Iterator[str]:
    seen: list[str] = []
    for entry in (facts.arena or {}).get("agents") or []:
        if isinstance(entry, dict) and isinstance(entry.get("id"), str):
            seen.append(entry["id"])
    for agent in [*facts.started, *facts.world.agents]:
        if agent not in seen:
            seen.append(agent)
    yield from seen


def export_trajectories(path: Path | str, out_dir: Path | str,
                        say: Callable[[str], None] | None = None) -> ExportReport:
    """Write ``out_dir/<match>/<agent>.json`` for every agent with a tool trace under ``path``.

    ``say`` gets one line per file written and per agent skipped. Agents and matches that
    fail go to ``report.errors`` (one line each) and the others are still written.

    Raises:
        TrajectoryError: ``path`` holds no match (nothing to do at all).
        OSError: ``out_dir`` cannot be written (a full disk included).
    """
    say = say or (lambda _line: None)
    report = ExportReport()
    out_dir = Path(out_dir)
    for folder, name in find_matches(Path(path)):
        try:
            facts = load_match_facts(folder, name)
        except TrajectoryError as err:
            report.errors.append(str(err))
            continue
        for agent in _agents(facts):
            if not _SAFE_ID.fullmatch(agent):  # it names files: never a path out of the folders
                report.errors.append(f"{name}: agent id {agent!r} cannot name a file; not exported")
                continue
            try:
                found = read_transcript(facts.transcript_paths(agent))
            except TranscriptError as err:
                report.errors.append(f"{name}/{agent}: {err}")
                continue
            if found is None:
                line = f"skipped {name}/{agent}: no transcript"
                report.skipped.append(line)
                say(line)
                continue
            data, source, note = found
            if note:
                say(f"{name}/{agent}: {note}")
            doc = build_trajectory(facts, agent, data)
            if doc is None:
                line = f"skipped {name}/{agent}: {source} has an empty tool_trace"
                report.skipped.append(line)
                say(line)
                continue
            try:
                validate_trajectory(doc)
            except ValidationError as err:  # a bug of ours, said as one line rather than a bad file
                first = err.errors()[0] if err.errors() else {}
                report.errors.append(f"{name}/{agent}: {source}: the ATIF document would be invalid: "
                                     f"{'.'.join(str(p) for p in first.get('loc', ()))}: {first.get('msg')}")
                continue
            target = out_dir / name / f"{agent}.json"
            target.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(target, json.dumps(doc, indent=2) + "\n")
            report.written.append(target)
            say(f"wrote {target} ({len(doc['steps'])} steps)")
    return report
