"""The context of ``heat.html`` (one heat attempt's page) from a :class:`HeatPage`.

Everything the template shows without the script is worked out here (the hero, the
territories, agents, provenance, artifacts and "How they fought" tables, the service maps'
geometry and their final states); the replay script then rewinds the maps, ladders and
terminals to the clock it shows (``assets/site.js``, ``initHeat``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from aoe_tui.domain.display import fmt_clock, fmt_cost
from aoe_tui.export.site.heat import HeatPage

__all__ = ["clock", "heat_context", "map_geometry", "node_state", "usd"]

#: the map's SVG coordinate space (manifest x, y are % of it)
MAP_W, MAP_H = 600, 300
NODE_W, NODE_H = 112, 46
#: actions per agent in a "How they fought" card (§9.2)
CARD_ACTIONS = 16
_PROVENANCE = [("Engine", "controller_version"), ("Source revision", "source_revision"), ("Arena", "arena_id"),
               ("Mode", "arena_mode"), ("Schema", "schema_version"), ("Compatibility key", "compatibility_key"),
               ("Manifest", "manifest_sha256"), ("Player brief", "player_brief_sha256"),
               ("Verifier", "verifier_sha256")]
_DIGESTS = {"source_revision", "compatibility_key", "manifest_sha256", "player_brief_sha256", "verifier_sha256"}


def clock(ms: int | None) -> str:
    """``ms`` as ``mm:ss.d`` (the replay's clock, :func:`fmt_clock`); ``"–"`` for None."""
    return fmt_clock(ms, "mm:ss.d", none="–")


def usd(microusd: int | None) -> str:
    """micro-USD → ``$0.1234`` (:func:`fmt_cost`); ``n/a`` for None."""
    return fmt_cost(microusd)


def _size(n: int) -> str:
    return f"{n} B" if n < 1024 else f"{n / 1024:.1f} kB" if n < 1024 * 1024 else f"{n / 1048576:.1f} MB"


def node_state(view: dict[str, Any], tid: str, milestone: str | None, mids: list[str]) -> str:
    """A service-map node's state in ``view``: its milestone's ``m/T/M``; a node without
    one: ``durable`` (T durable), ``failed`` (T eliminated), ``healthy`` (a milestone of T
    passed), else ``unknown`` when every milestone is still fogged, else ``pending``.
    (``initHeat``'s ``nodeState`` is the same rule.)"""
    if milestone:
        return view.get(f"m/{tid}/{milestone}") or "unknown"
    if view.get(f"d/{tid}") is not None:
        return "durable"
    if view.get(f"t/{tid}") == "eliminated":
        return "failed"
    states = [view.get(f"m/{tid}/{m}") for m in mids]
    if any(s in ("healthy", "durable") for s in states):
        return "healthy"
    if states and all(s in (None, "unknown") for s in states):
        return "unknown"
    return "pending"


def map_geometry(vis: dict[str, Any] | None) -> dict[str, Any] | None:
    """The manifest's ``[visualization]`` → SVG geometry: nodes (centre ``cx, cy``, box
    ``x, y``) and links (``x1…y2``; a replication link also its second, offset line)."""
    if not vis or not vis.get("nodes"):
        return None
    nodes, where = [], {}
    for n in vis["nodes"]:
        # x, y (0…100) span the map inside a margin of half a node, so no box leaves it
        px, py = NODE_W / 2 + 4, NODE_H / 2 + 4
        cx = px + min(max(float(n.get("x") or 0), 0), 100) * (MAP_W - 2 * px) / 100
        cy = py + min(max(float(n.get("y") or 0), 0), 100) * (MAP_H - 2 * py) / 100
        where[n["id"]] = (cx, cy)
        nodes.append({"id": n["id"], "name": n.get("display_name") or n["id"], "kind": n.get("kind") or "service",
                      "milestone": n.get("milestone"), "cx": round(cx, 1), "cy": round(cy, 1),
                      "x": round(cx - NODE_W / 2, 1), "y": round(cy - NODE_H / 2, 1)})
    links = []
    for ln in vis.get("links") or []:
        if ln.get("from") not in where or ln.get("to") not in where:
            continue
        (x1, y1), (x2, y2) = where[ln["from"]], where[ln["to"]]
        my = (y1 + y2) / 2 - 5
        label = ln.get("label")
        if label and abs(y2 - y1) < NODE_H and abs(x2 - x1) - NODE_W < 7 * len(label) + 8:
            my = min(y1, y2) - NODE_H / 2 - 5  # no room between the boxes: above them
        links.append({"kind": ln.get("kind") or "traffic", "label": ln.get("label"),
                      "x1": round(x1, 1), "y1": round(y1, 1), "x2": round(x2, 1), "y2": round(y2, 1),
                      "mx": round((x1 + x2) / 2, 1), "my": round(my, 1)})
    return {"w": MAP_W, "h": MAP_H, "nw": NODE_W, "nh": NODE_H, "nodes": nodes, "links": links}


def _final_view(payload: dict[str, Any]) -> dict[str, Any]:
    view = dict(payload["initial"])
    for frame in payload["frames"]:
        view.update(frame)
    return view


def _pill(state: str | None) -> str:
    return {"completed": "good", "durable": "good", "healthy": "good", "interrupted": "warn", "running": "",
            "failed": "bad", "terminated": "bad", "eliminated": "bad", "incomplete": "warn"}.get(state or "", "")


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _fought(page: HeatPage) -> list[dict[str, Any]]:
    """One row per analysed agent (§9.2); ``unavailable`` carries the reason instead."""
    rows = []
    terr = {t["agent"]: t["id"] for t in page.payload["territories"]}
    for aid, an in sorted(page.analyses.items()):
        if not isinstance(an, dict):
            continue
        if an.get("unavailable"):
            rows.append({"agent": aid, "territory": terr.get(aid), "unavailable": str(an["unavailable"])})
            continue
        m = an.get("metrics") or {}
        arch = an.get("architecture") or {}
        seen = [*(arch.get("technologies") or []), *(arch.get("service_units") or [])]
        actions = [a for a in an.get("actions") or [] if isinstance(a, dict)]
        rows.append({"agent": aid, "territory": an.get("territory") or terr.get(aid), "unavailable": None,
                     "model": an.get("model"), "outcome": an.get("outcome"),
                     "first_change": clock(m["first_mutation_after_ms"])
                     if m.get("first_mutation_after_ms") is not None else "–",
                     "discovery": m.get("discoveries", 0), "changes": m.get("mutations", 0),
                     "lifecycle": m.get("lifecycle_actions", 0), "checks": m.get("validations", 0),
                     "errors": m.get("tool_errors", 0), "calls": m.get("tool_calls", 0),
                     "seen": ", ".join(str(s) for s in seen), "paths": arch.get("persistent_paths") or [],
                     "actions": [{"index": a.get("index"), "kind": a.get("kind") or "",
                                  "at": clock(a.get("started_after_ms")),
                                  "command": a.get("command") or a.get("description") or "",
                                  "description": a.get("description") or "",
                                  "output": a.get("output_excerpt") or "",
                                  "ok": a.get("success") is not False} for a in actions]})
    return rows


def heat_context(page: HeatPage) -> dict[str, Any]:
    """The context of ``heat.html``: ``page``, ``title``, ``payload`` and the tables worked
    out here (``hero``, ``season``, ``territories``, ``agents``, ``provenance``,
    ``artifacts``, ``fought``, ``map``, ``final``)."""
    p = page.payload
    world = page.loaded.world
    final = _final_view(p)
    mids = [m["id"] for m in p["milestones"]]
    terr = {t["id"]: t for t in p["territories"]}
    # the winner only once the match finished: a heat still running has none yet ("racing");
    # a season attempt that ended without its match finishing (interrupted, spoiled) is over
    ended = str(world.match_state) in ("finished", "aborted") or (
        bool(page.season) and page.season.get("status") not in (None, "running"))
    winner = world.winner if str(world.match_state) == "finished" else None
    wt = terr.get(winner or "", {})
    usage_any = any(t.get("usage") for t in p["territories"])
    recorded = [world.agents[t["agent"]] for t in p["territories"] if t.get("usage") and t["agent"] in world.agents]
    hero = {"winner": winner, "entrant": wt.get("entrant"), "model": wt.get("model"),
            "durable_in": clock(p["match"]["final_ms"]),
            "winner_durable": clock(world.territories[winner].durable_at_ms)
            if winner in world.territories and world.territories[winner].durable_at_ms is not None else None,
            "cost": usd(sum(a.cost_microusd for a in recorded)) if usage_any else "n/a",
            "tokens": f"{sum(a.input_tokens + a.output_tokens for a in recorded):,}" if usage_any else "n/a",
            "finish_reason": world.finish_reason or ("–" if ended else "still racing"),
            "match_state": str(world.match_state), "ended": ended,
            # the winner card: "no winner" only for a match that ended without one
            "winner_text": winner or ("no winner" if ended else "racing"),
            "clock_label": "Final clock" if ended else "Clock so far",
            "arena": p["match"].get("arena")}

    territories = []
    for tid, t in world.territories.items():
        seen = [m for m in t.milestones.values() if m.passed or m.failure_category or m.failure_detail
                or m.evidence is not None]
        passed = [m for m in t.milestones.values() if m.passed]
        territories.append({"id": tid, "state": str(t.state), "pill": _pill(str(t.state)),
                            "competitor": str(t.competitor_state) if t.competitor_state else "–",
                            # passed of the arena's milestones (seen: those evaluated so far)
                            "passed": len(passed), "seen": max(len(seen), len(passed)),
                            "milestones": max(len(mids), len(passed)),
                            "points": t.milestone_points, "durable_at": clock(t.durable_at_ms),
                            "entrant": terr.get(tid, {}).get("entrant"), "winner": tid == winner,
                            "elimination": " · ".join(str(x) for x in (t.elimination_source, t.elimination_detail)
                                                      if x)})

    agents = []
    for t in p["territories"]:
        a = world.agents.get(t["agent"] or "")
        status = ("running" if a.running else str(a.terminal_state) if a.terminal_state else "waiting") if a else "–"
        usage = bool(t.get("usage")) and a is not None
        agents.append({"id": t["agent"] or "–", "territory": t["id"], "entrant": t.get("entrant"),
                       "model": t.get("model") or "–", "adapter": t.get("adapter") or "–",
                       "reasoning": t.get("reasoning") or "–", "outcome": status, "pill": _pill(status),
                       "detail": " · ".join(str(x) for x in (a.failure_source, a.terminal_detail) if x) if a else "",
                       "input": f"{a.input_tokens:,}" if usage else "n/a",
                       "output": f"{a.output_tokens:,}" if usage else "n/a",
                       "cost": usd(a.cost_microusd) if usage else "n/a"})

    prov = page.loaded.provenance
    provenance = []
    if prov:
        for label, key in _PROVENANCE:
            v = prov.get(key)
            if v is None:
                continue
            v = str(v)
            provenance.append({"label": label, "short": v[:12] if key in _DIGESTS else v, "full": v})
        for name, digest in sorted((prov.get("adapter_sha256") or {}).items()):
            provenance.append({"label": f"Adapter {name}", "short": str(digest)[:12], "full": str(digest)})

    extra = _read_json(page.loaded.source / "aoe-extra.json") if page.loaded.source.is_dir() else None
    extras = []
    for aid, e in sorted(((extra or {}).get("agents") or {}).items()):
        if not isinstance(e, dict):
            continue
        staging = e.get("staging") or {}
        usage = e.get("usage") or {}
        extras.append({"agent": aid, "adapter": e.get("adapter") or "–",
                       "staging": f"{staging['seconds']:.1f} s" if isinstance(staging.get("seconds"), (int, float))
                       else "–",
                       "first_request": clock(e.get("first_model_request_ms"))
                       if e.get("first_model_request_ms") is not None else "–",
                       "first_tool": clock(e.get("first_tool_call_ms"))
                       if e.get("first_tool_call_ms") is not None else "–",
                       "cache": f"{usage['cache_read_tokens']:,}" if isinstance(usage.get("cache_read_tokens"), int)
                       else "–",
                       "cost_source": usage.get("cost_source") or "–"})

    artifacts = []
    for name, src in page.artifacts.items():
        try:
            size = _size(src.stat().st_size)
        except OSError:
            size = "?"
        artifacts.append({"name": name, "size": size})

    fought = _fought(page)
    geometry = map_geometry(p.get("visualization"))
    maps = {}
    if geometry:
        for tid in terr:
            maps[tid] = {n["id"]: node_state(final, tid, n["milestone"], mids) for n in geometry["nodes"]}
    ladders = {tid: [{"id": m["id"], "name": m["name"], "points": m["points"],
                      "state": final.get(f"m/{tid}/{m['id']}") or "unknown",
                      "failure": final.get(f"f/{tid}/{m['id']}") or ""} for m in p["milestones"]]
               for tid in terr}
    return {"page": page, "title": page.title, "payload": p, "hero": hero, "season": page.season,
            "territories": territories, "agents": agents, "provenance": provenance, "extras": extras,
            "artifacts": artifacts, "fought": fought, "card_actions": CARD_ACTIONS,
            "map": geometry, "map_states": maps, "ladders": ladders, "final": final,
            "lanes": p["territories"], "n_events": len(p["events"]), "clock": clock,
            # a build race never changes a territory's state (it stays "provisioning", §3):
            # shown only where the log changes it (conquest)
            "territory_states": any(r.event.kind == "territory_state_changed" for r in page.loaded.records),
            # without activity.jsonl the terminals' lines are the analyses' actions (shown already)
            "activity_logs": p["activity"] if (page.loaded.source / "activity.jsonl").is_file() else {}}
