"""``aoe replay`` and ``aoe watch``: the Textual views of finished and running matches.

``aoe replay PATH`` opens a match folder, an ``events.jsonl`` or a ``*.match.json``
bundle (§0, Appendix B) in the replay screen. ``aoe watch SEASON_DIR`` is the
read-only season view of a season another process is running: it catches up from
``season.jsonl`` and the running heats' ``events.jsonl``, then follows them
(:mod:`aoe_tui.tui.watch`); it has no key that writes into the season folder.

Both run through :func:`aoe_tui.tui.app.run_in_terminal`: SIGINT, SIGTERM and SIGHUP close
the view with the terminal restored (exit ``128 + signum``); a stdin at EOF or not a
terminal leaves the view idle (it cannot be typed to; a signal closes it).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from aoe_tui.errors import AoeError, UsageError


def register(sub: argparse._SubParsersAction) -> None:
    """Register the ``replay`` and ``watch`` sub-commands."""
    p = sub.add_parser(
        "replay",
        help="replay a match in the TUI",
        description="Replay a match folder, events.jsonl or *.match.json bundle: "
        "space play/pause, +/- speed, arrows step, g go to a sequence number, ? help.",
    )
    p.add_argument("path", metavar="PATH", help="match folder, events.jsonl or *.match.json bundle")
    p.add_argument("--speed", type=int, default=10, metavar="N", help="start speed ×N (1…100; default 10)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--at", type=int, metavar="SEQ", help="start paused at sequence SEQ")
    g.add_argument("--end", action="store_true", help="start paused at the final state")
    p.add_argument("--paused", action="store_true", help="start paused at the beginning")
    p.add_argument("--light", action="store_true", help="light theme")
    p.set_defaults(func=cmd_replay)

    w = sub.add_parser(
        "watch",
        help="follow a season another process is running",
        description="Read-only view of a season folder: catches up from season.jsonl and the "
        "heats' events.jsonl, then follows them.",
    )
    w.add_argument("season_dir", metavar="SEASON_DIR", help="season folder holding season.jsonl")
    w.add_argument("--light", action="store_true", help="light theme")
    w.set_defaults(func=cmd_watch)


def cmd_replay(args: argparse.Namespace) -> int:
    """Run ``aoe replay``; bad paths/logs raise :class:`AoeError` (one-line message)."""
    from aoe_tui.replay.matchdir import load_match
    from aoe_tui.tui.app import DARK_THEME, LIGHT_THEME, AoeApp

    if not 1 <= args.speed <= 100:
        raise UsageError(f"--speed must be between 1 and 100, got {args.speed}")
    loaded = load_match(Path(args.path))
    if not loaded.records:
        raise AoeError(f"{args.path}: the event log is empty; nothing to replay")
    app = AoeApp.replay(
        loaded,
        speed=args.speed,
        playing=not args.paused,
        at_sequence=args.at,
        at_end=args.end,
        theme=LIGHT_THEME if args.light else DARK_THEME,
    )
    return _run_view(app, "replay", f"`aoe inspect {args.path}` prints the match as text")


def cmd_watch(args: argparse.Namespace) -> int:
    """Run ``aoe watch`` (see :func:`aoe_tui.tui.app.watch_app`)."""
    from aoe_tui.tui.app import DARK_THEME, LIGHT_THEME, watch_app

    season_dir = Path(args.season_dir)
    if not season_dir.is_dir():
        raise AoeError(f"{season_dir}: no such season folder")

    app = watch_app(season_dir, theme=LIGHT_THEME if args.light else DARK_THEME)
    return _run_view(app, "watch", f"`aoe standings {season_dir}` prints its standings as text")


def _run_view(app, command: str, instead: str) -> int:
    """Run a read-only view (:func:`aoe_tui.tui.app.run_in_terminal`): SIGINT, SIGTERM and
    SIGHUP close it with the terminal restored; exit code 0 after ``q``, ``128 + signum``
    after a signal. A stdin at EOF or not a terminal leaves it idle, not spinning.

    Raises:
        AoeError: stdout is not a terminal (a file or a pipe would get screen-drawing
            escape sequences); ``instead`` names the text command to use.
    """
    import signal
    import sys

    if not sys.stdout.isatty():
        raise AoeError(f"aoe {command} draws a terminal view and stdout is not a terminal; {instead}")

    from aoe_tui.tui.app import run_in_terminal

    _result, sig = run_in_terminal(app)
    return 0 if sig is None else 128 + signal.Signals[sig].value
