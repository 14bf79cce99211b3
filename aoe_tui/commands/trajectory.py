"""``aoe trajectory PATH [-o DIR]``: ATIF trajectories of a match's agents (spec §9.3).

PATH is a match folder (a heat attempt's folder, or an upstream match folder, raw or as
published), a season folder (every heat attempt) or any folder holding matches. Writes
``DIR/<match>/<agent>.json`` (default DIR: ``trajectories``, upstream's default) through
:func:`aoe_tui.export.trajectory.export_trajectories`; prints one line per file written and
per agent skipped (no transcript, empty ``tool_trace``). Exit status: 0 when every agent
with a transcript was exported; 1 when PATH holds no match or a transcript or match file is
damaged (one ``aoe: error:`` line per fault, naming the file; the rest is still written).
"""

from __future__ import annotations

import argparse
import sys

from aoe_tui.domain.display import printable


def register(sub: argparse._SubParsersAction) -> None:
    """Register the ``trajectory`` sub-command."""
    p = sub.add_parser(
        "trajectory",
        help="export the agents' trajectories as ATIF documents",
        description="Write one ATIF-v1.7 trajectory document per agent of a match folder, a season folder or a "
                    "folder of matches: DIR/<match>/<agent>.json. Agents without a transcript are skipped.",
    )
    p.add_argument("path", metavar="PATH", help="match folder, season folder or folder holding matches")
    p.add_argument("-o", "--output", default="trajectories", metavar="DIR",
                   help="output folder (default: trajectories)")
    p.set_defaults(func=cmd_trajectory)


def cmd_trajectory(args: argparse.Namespace) -> int:
    """Run ``aoe trajectory``; returns the exit status."""
    from aoe_tui.export.trajectory import export_trajectories

    from aoe_tui.errors import AoeError
    from aoe_tui.fsio import is_no_space

    try:
        report = export_trajectories(args.path, args.output, say=lambda line: print(printable(line)))
    except OSError as err:  # the output folder: one line naming it (a full disk: aoe_tui.cli's own line)
        if is_no_space(err):
            raise
        raise AoeError(f"{err.filename or args.output}: cannot write: {err.strerror or err}") from None
    for line in report.errors:
        print(printable(f"aoe: error: {line}"), file=sys.stderr)
    def count(n: int, one: str, many: str) -> str:
        return f"{n} {one if n == 1 else many}"

    print(f"{count(len(report.written), 'trajectory', 'trajectories')} written, "
          f"{count(len(report.skipped), 'agent', 'agents')} skipped"
          + (f", {count(len(report.errors), 'error', 'errors')}" if report.errors else ""))
    return 1 if report.errors else 0
