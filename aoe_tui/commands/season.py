"""``aoe run SEASON_FILE`` and ``aoe standings SEASON_DIR`` (issue 5).

``aoe run`` runs or resumes a season (see :mod:`aoe_tui.season.runner`); for now it is
always headless — one line per state change on stdout — until the TUI issue lands.
SIGINT/SIGTERM stop it cleanly (territories torn down; the running attempts are
re-run on the next ``aoe run`` of the same file and folder).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
from pathlib import Path

from aoe_tui.errors import AoeError, UsageError


def register(sub: argparse._SubParsersAction) -> None:
    """Register ``aoe run`` and ``aoe standings``."""
    r = sub.add_parser(
        "run", help="run or resume a season (rounds of heats, attempts, standings)",
        description="Run a season file; running it again on the same --output folder resumes it. "
        "Headless for now: the live TUI comes with its own issue, so one line is printed per state change "
        "(--headless is accepted and is the default).",
    )
    r.add_argument("season_file", metavar="SEASON_FILE", help="season file (seasons/*.toml)")
    r.add_argument("--output", "-o", metavar="DIR",
                   help="season folder (default: ./season-<id>-<label>); an existing one is resumed")
    r.add_argument("--headless", action="store_true", help="print one line per state change (currently always on)")
    r.set_defaults(func=_cmd_run)
    s = sub.add_parser("standings", help="export a season's standings (csv, json, md, html)")
    s.add_argument("season_dir", metavar="SEASON_DIR", help="season folder written by aoe run")
    s.add_argument("--format", "-f", default="md", choices=["csv", "json", "md", "html"], help="output format (default md)")
    s.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    s.set_defaults(func=_cmd_standings)


def _cmd_run(args: argparse.Namespace) -> int:
    from aoe_tui.domain.season import load_season
    from aoe_tui.season.runner import SeasonRunner, safe_label

    loaded = load_season(args.season_file)
    out = Path(args.output) if args.output else Path(f"season-{loaded.season.id}-{safe_label(loaded.season.label)}")

    def say(msg: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} {msg}", flush=True)

    runner = SeasonRunner(loaded, out, say=say)

    async def main() -> int:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        stopping = []

        def stop(name: str) -> None:
            if not stopping:
                stopping.append(name)
                say(f"{name}: stopping (territories are torn down; run the same command again to resume)")
                assert task is not None
                task.cancel()

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop, sig.name)
        try:
            state = await runner.run()
        except asyncio.CancelledError:
            if stopping:
                return 130
            raise
        champs = state.finished.champions if state.finished else []
        say(f"standings written to {out}/standings.{{csv,json,md,html}}; champion: {', '.join(champs) or 'none'}")
        return 0

    return asyncio.run(main())


def _cmd_standings(args: argparse.Namespace) -> int:
    from aoe_tui.export.season import render
    from aoe_tui.season.runner import load_season_dir

    season_dir = Path(args.season_dir)
    if not season_dir.is_dir():
        raise UsageError(f"{season_dir}: no such season folder")
    state = load_season_dir(season_dir)
    text = render(state, args.format)
    if args.output:
        try:
            Path(args.output).write_text(text, encoding="utf-8")
        except OSError as err:
            raise AoeError(f"{args.output}: cannot write: {err.strerror}") from None
    else:
        sys.stdout.write(text)
    return 0
