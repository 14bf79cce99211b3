"""The data of one heat attempt's page: a match folder (ours or upstream's, §2.6/§9.1) →
:class:`HeatPage` (what the template shows) whose ``payload`` the page's replay script reads.

The replay never reduces anything itself: every event goes through the one reducer
(:func:`aoe_tui.replay.reducer.apply_event`) here, and after each event the page's *view*
(a flat ``{key: value}`` map, :func:`view_of`) is compared with the one before; the changed
keys are that event's frame. The script applies frames 0…i to :data:`payload` ``initial``
to show the race after event *i* — so the page, ``aoe watch``, replay and standings show
the same reduced state.

View keys (all values JSON scalars):

- ``match``: the match state; ``winner``: the winner's territory id or None;
- ``t/T``: territory T's state (``provisioning``, ``ready``, ``eliminated`` …);
  ``c/T``: its competitor state or None; ``p/T``: milestone points; ``d/T``: durable-at ms
  or None;
- ``m/T/M``: milestone M of territory T as the service map colours it: ``unknown`` (fog of
  war, §1.10: not yet evaluated), ``pending``, ``verifying``, ``healthy`` (passed),
  ``failed`` (its last evaluation failed), ``durable`` (passed and T is durable);
  ``f/T/M``: while M is ``failed``, its last failure detail (the verifier's words, at most
  :data:`MAX_FAIL_TEXT` characters), else ``""``;
- ``a/A``: agent A's status (``waiting``, ``running``, or its terminal state);
  ``i/A``, ``o/A``: input/output tokens; ``$/A``: cost in **micro-USD**.

Payload (JSON; strings are made visible and escaped by :func:`render.script_json`)::

    {"match": {"name", "slug", "arena", "fog", "final_ms", "winner", "finish_reason",
               "log_events": events in the log, "thinned": bool (fit_replay folded events into steps)},
     "territories": [{"id", "agent", "entrant", "model", "adapter", "reasoning", "usage"}],
                                          # usage: the log has a usage_charged with a token
                                          # or cost figure for the agent (else "n/a", §9.1)
     "milestones": [{"id", "name", "points"}],
     "visualization": {"nodes": [...], "links": [...]} | null,   # manifest §1.9
     "initial": {view key: value},
     "events": [{"ms", "seq", "kind", "t", "text", "tone", "raw"[, "folded"]}],  # raw: the §2.1 record
                                          # (flattened) or null past RAW_BUDGET
     "frames": [{view key: value}, ...],    # one per event, same order
     "activity": {agent: [[ms, line], ...]}}
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aoe_tui.domain.display import summarize_event
from aoe_tui.domain.world import WorldState
from aoe_tui.replay.activity import read_activity
from aoe_tui.replay.bundle import collect_analyses, read_bundle, record_to_flat
from aoe_tui.replay.matchdir import LoadedMatch, load_match
from aoe_tui.replay.reducer import apply_event
from aoe_tui.replay.standings import compute_standings

__all__ = ["HeatPage", "heat_page", "slugify", "usage_recorded", "view_of"]

#: the most activity lines a page carries per agent (the last ones; the full log is an artifact)
MAX_ACTIVITY_LINES = 400
#: the longest failure detail a milestone ladder shows (characters; the event keeps it whole)
MAX_FAIL_TEXT = 300
#: the longest raw string field kept in an event's inspector copy (characters)
MAX_RAW_TEXT = 2000
#: characters of raw event JSON a page carries for its inspector; past it, only the events
#: that change the race (milestones, agents, the match) keep theirs — the page stays under
#: 500 kB for long conquest logs (the full log is the ``events.jsonl`` artifact)
RAW_BUDGET = 120_000
#: characters the replay's events and frames may take in a page (JSON); a longer log is
#: thinned (:func:`fit_replay`) so every page stays under 500 kB
REPLAY_BUDGET = 300_000
#: kinds a thinned replay may fold into one step (checks and usage ticks; never a
#: milestone passing, an agent or the match changing)
_FOLDABLE = frozenset({"milestone_failed", "milestone_evaluation_started", "usage_charged", "health_observed",
                       "resources_changed"})
_ALWAYS_RAW = frozenset({"milestone_passed", "milestone_failed", "milestone_revoked", "durable_deployment_completed",
                         "agent_started", "agent_finished", "agent_interrupted", "agent_terminated",
                         "agent_outraced", "match_finished", "match_state_changed", "territory_eliminated",
                         "infrastructure_failure", "competitor_state_changed"})


def slugify(name: str) -> str:
    """Upstream's slug rule (§9.1): every character other than ASCII letters, digits, ``-``
    and ``_`` becomes ``-``; ``-`` trimmed from the ends."""
    return re.sub(r"[^A-Za-z0-9_-]", "-", name).strip("-") or "match"


def _node_state(world: WorldState, tid: str, mid: str, fog: bool) -> str:
    t = world.territories.get(tid)
    m = t.milestones.get(mid) if t else None
    if m is None:
        return "unknown" if fog else "pending"
    if m.evaluating:
        return "verifying"
    if m.passed:
        return "durable" if t.durable_at_ms is not None else "healthy"
    if m.failure_category or m.failure_detail:
        return "failed"
    return "pending"


def view_of(world: WorldState, milestones: list[str], fog: bool) -> dict[str, Any]:
    """The page's flat view of ``world`` (keys in the module docstring)."""
    v: dict[str, Any] = {"match": str(world.match_state), "winner": world.winner}
    for tid, t in world.territories.items():
        v[f"t/{tid}"] = str(t.state)
        v[f"c/{tid}"] = None if t.competitor_state is None else str(t.competitor_state)
        v[f"p/{tid}"] = t.milestone_points
        v[f"d/{tid}"] = t.durable_at_ms
        for mid in milestones:
            state = v[f"m/{tid}/{mid}"] = _node_state(world, tid, mid, fog)
            m = t.milestones.get(mid)
            detail = (m.failure_detail or "") if state == "failed" and m is not None else ""
            v[f"f/{tid}/{mid}"] = detail if len(detail) <= MAX_FAIL_TEXT else detail[:MAX_FAIL_TEXT] + "…"
    for aid, a in world.agents.items():
        v[f"a/{aid}"] = "running" if a.running else (str(a.terminal_state) if a.terminal_state else "waiting")
        v[f"i/{aid}"] = a.input_tokens
        v[f"o/{aid}"] = a.output_tokens
        v[f"$/{aid}"] = a.cost_microusd
    return v


def _cut(obj: Any) -> Any:
    if isinstance(obj, str):
        return obj if len(obj) <= MAX_RAW_TEXT else obj[:MAX_RAW_TEXT] + f"… ({len(obj)} characters)"
    if isinstance(obj, dict):
        return {k: _cut(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_cut(v) for v in obj]
    return obj


@dataclass
class HeatPage:
    """One heat attempt's page: ``slug`` (its folder under ``heats/``), ``title``,
    ``loaded`` (the match: records, reduced world, arena.json, match.json), ``analyses``
    (agent id → analysis.json, §9.2), ``payload`` (the replay's data, module docstring),
    ``artifacts`` (file name → source path, copied next to the page),
    ``standings`` (§3.6 order), ``entrants`` (territory → entrant id; empty outside a season)."""

    slug: str
    title: str
    loaded: LoadedMatch
    analyses: dict[str, Any]
    payload: dict[str, Any]
    artifacts: dict[str, Path]
    standings: list[Any]
    entrants: dict[str, str] = field(default_factory=dict)
    season: dict[str, Any] = field(default_factory=dict)


def _activity(folder: Path | None, analyses: dict[str, Any]) -> dict[str, list[list[Any]]]:
    """Agent id → the last :data:`MAX_ACTIVITY_LINES` ``[ms, line]`` of ``activity.jsonl``
    (ours, in ``folder``); else, from upstream's analyses, one line per analysed tool action."""
    out: dict[str, list[list[Any]]] = {}
    path = folder / "activity.jsonl" if folder is not None else None
    if path is not None and path.is_file():
        records, _torn = read_activity(path)
        for r in records:
            out.setdefault(r.agent, []).append([r.ms, r.line])
    else:
        for aid, an in analyses.items():
            for act in (an.get("actions") or []) if isinstance(an, dict) else []:
                line = act.get("command") or act.get("description") or ""
                out.setdefault(aid, []).append([int(act.get("started_after_ms") or 0), f"$ {line}"])
    return {aid: lines[-MAX_ACTIVITY_LINES:] for aid, lines in out.items()}


def heat_page(folder: Path, *, slug: str | None = None, title: str | None = None,
              seated: Iterable[str] = (), season: dict[str, Any] | None = None) -> HeatPage:
    """Load the match folder ``folder`` (events.jsonl + optional arena.json, match.json,
    analyses, activity.jsonl, bundle) — or a single-file bundle (``*.match.json``,
    Appendix B), or a bare ``events.jsonl`` — into a :class:`HeatPage`. Raises
    :class:`aoe_tui.errors.AoeError` (naming the file) for a folder that is not a match or
    a torn/invalid event log. ``seated``: in a season, the heat's entrants (each entrant's
    agent in ``arena.json`` carries its id, so the page names the entrant on its territory)."""
    folder = Path(folder)
    if folder.is_file() and folder.suffix == ".jsonl":  # a bare events.jsonl: its folder
        folder = folder.parent
    loaded = load_match(folder)
    arena = loaded.arena if isinstance(loaded.arena, dict) else {}
    bundle_match: dict[str, Any] = {}
    if folder.is_file():  # a single-file bundle (Appendix B): everything is inside it
        bundle = read_bundle(folder)
        bundle_match, analyses, artifacts = bundle.match or {}, dict(bundle.analyses or {}), {folder.name: folder}
        if bundle.visualization and not arena.get("visualization"):
            arena = {**arena, "visualization": bundle.visualization}
        name = folder.name.removesuffix(".match.json")
    else:
        bundle_files = sorted(folder.glob("*.match.json"))
        if bundle_files:
            try:
                stored = json.loads(bundle_files[0].read_text(encoding="utf-8"))
            except (OSError, ValueError):
                stored = {}
            bundle_match = stored.get("match") or {} if isinstance(stored, dict) else {}
            if not arena and isinstance(stored, dict) and isinstance(stored.get("arena"), dict):
                arena = stored["arena"]  # arena.json lost: the bundle holds the same manifest
        analyses = collect_analyses(folder)
        artifacts = {n: folder / n for n in ("events.jsonl", "world.json", "match.json", "arena.json")
                     if (folder / n).is_file()}
        for b in bundle_files[:1]:
            artifacts[b.name] = b
        name = folder.name
    slug = slug or bundle_match.get("slug") or slugify(name)
    title = title or bundle_match.get("name") or name
    fog = bool(bundle_match.get("fog_of_war", arena.get("fog_of_war") is not None))
    milestones = [{"id": m["id"], "name": m.get("display_name") or m["id"], "points": m.get("points", 0)}
                  for m in (arena.get("build") or {}).get("milestones") or []]
    if not milestones:  # upstream folders without arena.json: the milestones the log names
        seen: dict[str, None] = {}
        for t in loaded.world.territories.values():
            seen.update(dict.fromkeys(t.milestones))
        milestones = [{"id": m, "name": m, "points": 0} for m in seen]
    mids = [m["id"] for m in milestones]
    agents = {a.get("territory"): a for a in arena.get("agents") or [] if isinstance(a, dict)}
    seated = set(seated)
    entrants = {tid: a["id"] for tid, a in agents.items() if a.get("id") in seated}
    territories = []
    for tid, t in loaded.world.territories.items():
        spec = agents.get(tid, {})
        agent = loaded.world.agents.get(t.agent or spec.get("id") or "")
        territories.append({"id": tid, "agent": t.agent or spec.get("id"),
                            "entrant": (entrants or {}).get(tid),
                            "model": agent.model if agent else spec.get("model"),
                            "adapter": spec.get("adapter"), "reasoning": spec.get("reasoning_effort")})

    usage = usage_recorded(loaded.records)
    for t in territories:
        t["usage"] = t["agent"] in usage

    world = WorldState()
    initial = view_of(world, mids, fog)
    prev = dict(initial)
    events: list[dict[str, Any]] = []
    frames: list[dict[str, Any]] = []
    raw_left = RAW_BUDGET
    for rec in loaded.records:
        apply_event(world, rec)
        view = view_of(world, mids, fog)
        frames.append({k: v for k, v in view.items() if prev.get(k, ...) != v})
        prev = view
        line = summarize_event(rec.event, "feed")
        ev = rec.event
        raw = _cut(record_to_flat(rec))
        size = len(json.dumps(raw, ensure_ascii=False))
        if raw_left >= size or ev.kind in _ALWAYS_RAW:
            raw_left -= size
        else:
            raw = None  # the inspector points at the events.jsonl artifact
        events.append({"ms": rec.elapsed_ms, "seq": rec.sequence, "kind": ev.kind,
                       "t": getattr(ev, "territory", None) or _territory_of(world, getattr(ev, "agent", None)),
                       "text": line.text if line else ev.kind.replace("_", " "),
                       "tone": line.tone if line else "dim", "raw": raw})
    events, frames, thinned = fit_replay(events, frames)
    payload = {"match": {"name": title, "slug": slug, "arena": arena.get("arena", {}).get("id")
                         or (loaded.provenance or {}).get("arena_id"),
                         "fog": fog, "final_ms": loaded.world.elapsed_ms, "winner": loaded.world.winner,
                         "finish_reason": loaded.world.finish_reason,
                         "log_events": len(loaded.records), "thinned": thinned},
               "territories": territories, "milestones": milestones,
               "visualization": arena.get("visualization"),
               "initial": initial, "events": events, "frames": frames,
               "activity": _activity(folder if folder.is_dir() else None, analyses)}
    return HeatPage(slug=slug, title=title, loaded=loaded, analyses=analyses, payload=payload,
                    artifacts=artifacts, standings=compute_standings(loaded.world),
                    entrants=entrants, season=dict(season or {}))


def _size(obj: Any) -> int:
    return len(json.dumps(obj, ensure_ascii=False, separators=(",", ":")))


def _fold(run: list[tuple[dict[str, Any], dict[str, Any]]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Consecutive foldable events → one step: the last one's clock and sequence, the
    frames applied in order, a line counting what it holds."""
    if len(run) == 1:
        return run[0]
    frame: dict[str, Any] = {}
    for _, f in run:
        frame.update(f)
    last = run[-1][0]
    kinds = Counter(e["kind"] for e, _ in run)
    ts = {e["t"] for e, _ in run}
    what = ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in kinds.most_common())
    return ({"ms": last["ms"], "seq": last["seq"], "kind": last["kind"] if len(kinds) == 1 else "events",
             "t": ts.pop() if len(ts) == 1 else None, "text": f"{len(run)} events: {what}", "tone": "dim",
             "raw": None, "folded": len(run)}, frame)


def fit_replay(events: list[dict[str, Any]], frames: list[dict[str, Any]],
               budget: int = REPLAY_BUDGET) -> tuple[list[dict[str, Any]], list[dict[str, Any]], bool]:
    """``(events, frames, folded)`` whose JSON fits ``budget`` characters: first the raw
    copies go (the inspector then points at ``events.jsonl``), then runs of consecutive
    :data:`_FOLDABLE` events fold into steps of 2, 4, 8 … events (the state after a step is
    the state after its last event, so the replay still shows the one reducer's state).
    A log that fits is returned as it is; ``folded``: some steps hold several events."""
    if _size(events) + _size(frames) <= budget:
        return events, frames, False
    events = [{**e, "raw": None} for e in events]
    group = 1
    out_e, out_f = events, frames
    while _size(out_e) + _size(out_f) > budget and group < len(events):
        group *= 2
        out_e, out_f = [], []
        run: list[tuple[dict[str, Any], dict[str, Any]]] = []
        for e, f in zip(events, frames):
            if e["kind"] in _FOLDABLE:
                run.append((e, f))
                if len(run) == group:
                    fe, ff = _fold(run)
                    out_e.append(fe)
                    out_f.append(ff)
                    run = []
                continue
            if run:
                fe, ff = _fold(run)
                out_e.append(fe)
                out_f.append(ff)
                run = []
            out_e.append(e)
            out_f.append(f)
        if run:
            fe, ff = _fold(run)
            out_e.append(fe)
            out_f.append(ff)
    return out_e, out_f, len(out_e) < len(events)


def usage_recorded(records: list[Any]) -> set[str]:
    """The agents for which the log has a ``usage_charged`` event with a non-null token or
    cost field (§9.1: usage of any other agent shows "n/a")."""
    out = set()
    for rec in records:
        ev = rec.event
        if ev.kind == "usage_charged" and any(getattr(ev, f, None) is not None
                                              for f in ("input_tokens", "output_tokens", "cost_microusd")):
            out.add(ev.agent)
    return out


def _territory_of(world: WorldState, agent: str | None) -> str | None:
    a = world.agents.get(agent) if agent else None
    return a.territory if a else None
