"""``aoe inspect PATH`` and ``aoe bundle MATCH_DIR -o FILE``.

``inspect`` loads a match folder, an ``events.jsonl`` or a ``*.match.json``
bundle, reduces the events (§2.4) and prints the standings (§3.6) and a
milestone matrix as plain text; ``--world`` prints the reduced world as JSON
(``world.json`` format), ``--standings-json`` the standings as a JSON list.

``bundle`` writes the single-file bundle of a match folder (Appendix B).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from aoe_tui.domain.display import fmt_clock, json_printable, printable

if TYPE_CHECKING:  # pragma: no cover
    from aoe_tui.domain.world import WorldState
    from aoe_tui.replay.matchdir import LoadedMatch

# The world, bundle and match-folder modules (the event models) are imported by the
# commands that use them: building ``aoe``'s parser must not pay for them (``aoe --help``
# and every command that does not need them; tests/test_cli_startup.py).


def register(sub: argparse._SubParsersAction) -> None:
    """Register the ``inspect`` and ``bundle`` sub-commands."""
    p = sub.add_parser(
        "inspect",
        help="show standings and milestones of a match",
        description="Show the standings and milestone matrix of a match folder, events.jsonl or bundle.",
    )
    p.add_argument("path", metavar="PATH", help="match folder, events.jsonl or *.match.json bundle")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--world", action="store_true", help="print the reduced world state as JSON")
    g.add_argument("--standings-json", action="store_true", help="print the standings as JSON")
    p.set_defaults(func=cmd_inspect)

    b = sub.add_parser(
        "bundle",
        help="write a single-file match bundle",
        description="Write the single-file *.match.json bundle of a match folder.",
    )
    b.add_argument("match_dir", metavar="MATCH_DIR", help="match folder holding events.jsonl")
    b.add_argument("-o", "--output", required=True, metavar="FILE", help="bundle file to write")
    b.add_argument("--name", help="display name (default: folder name)")
    b.add_argument("--slug", help="slug (default: folder name)")
    b.add_argument("--listed", action="store_true", help="mark the match as listed")
    b.set_defaults(func=cmd_bundle)


def cmd_bundle(args: argparse.Namespace) -> int:
    """Run ``aoe bundle``; prints the written path."""
    from aoe_tui.replay.bundle import write_bundle

    out = write_bundle(Path(args.match_dir), Path(args.output), name=args.name, slug=args.slug, listed=args.listed)
    print(f"wrote {out}")
    return 0


def _milestone_order(match: LoadedMatch) -> list[str]:
    order: list[str] = []
    arena = match.arena or {}
    for ms in ((arena.get("build") or {}).get("milestones") or []):
        if isinstance(ms, dict) and ms.get("id"):
            order.append(ms["id"])
    for rec in match.records:
        mid = getattr(rec.event, "milestone", None)
        if mid and mid not in order:
            order.append(mid)
    return order


def _fmt_ms(ms: int | None) -> str:
    return fmt_clock(ms, "s.d", none="-")


def _cell(world: WorldState, territory: str, milestone: str) -> str:
    view = world.territories[territory].milestones.get(milestone)
    if view is None:
        return "-"
    if view.passed:
        return f"PASS {view.points}"
    if view.evaluating:
        return "eval"
    if view.failure_category:
        return "fail"
    return "-"


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def render_text(match: LoadedMatch) -> str:
    """Plain-text report: summary line, standings table, milestone matrix."""
    from aoe_tui.replay.standings import compute_standings, winner_of

    w = match.world
    winner = winner_of(w)
    lines = [
        f"match {match.source}",
        f"state {w.match_state}  elapsed {_fmt_ms(w.elapsed_ms)}  events {len(match.records)}"
        f"  winner {w.winner or '-'}  reason {w.finish_reason or '-'}",
    ]
    if winner != w.winner:
        lines.append(f"note: standings winner is {winner or 'none (tie)'}")
    standings = compute_standings(w)
    lines.append("")
    lines.append("standings")
    rows = [["rank", "territory", "agent", "model", "durable", "points", "passed", "agent outcome"]]
    for s in standings:
        agent = w.agents.get(s.agent or "")
        outcome = "-"
        model = "-"
        if agent is not None:
            model = agent.model or "-"
            outcome = "running" if agent.running else (agent.terminal_state or "-")
        rows.append(
            [str(s.rank), s.territory, s.agent or "-", model, _fmt_ms(s.durable_at_ms), str(s.points), str(s.passed), str(outcome)]
        )
    lines.extend("  " + line for line in _table(rows))
    milestones = _milestone_order(match)
    if milestones and standings:
        lines.append("")
        lines.append("milestones")
        rows = [["territory", *milestones]]
        for s in standings:
            rows.append([s.territory, *[_cell(w, s.territory, m) for m in milestones]])
        lines.extend("  " + line for line in _table(rows))
    return "\n".join(lines)


def cmd_inspect(args: argparse.Namespace) -> int:
    """Run ``aoe inspect``."""
    from aoe_tui.domain.world import world_json
    from aoe_tui.replay.matchdir import load_match
    from aoe_tui.replay.standings import compute_standings

    match = load_match(args.path)
    if args.world:
        print(json_printable(world_json(match.world)))  # agent text: no raw C1 control
    elif args.standings_json:
        print(json.dumps([s.to_dict() for s in compute_standings(match.world)], indent=2))
    else:
        print(printable(render_text(match), newlines=True))
    return 0
