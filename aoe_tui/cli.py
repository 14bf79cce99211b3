"""The ``aoe`` command line.

Each command group lives in its own module under :mod:`aoe_tui.commands` and
exposes ``register(subparsers)``; this module only wires them together and turns
:class:`aoe_tui.errors.AoeError` into a one-line message and an exit code.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from aoe_tui import __version__
from aoe_tui.errors import AoeError

# Command modules, in the order they appear in ``aoe --help``.
COMMAND_MODULES: tuple[str, ...] = (
    "aoe_tui.commands.arena",
    "aoe_tui.commands.inspect",
    "aoe_tui.commands.image",
    "aoe_tui.commands.doctor",
    "aoe_tui.commands.match",
    "aoe_tui.commands.tui",
    "aoe_tui.commands.season",
    "aoe_tui.commands.demo",
    "aoe_tui.commands.serve",
)


def build_parser() -> argparse.ArgumentParser:
    """Return the full ``aoe`` argument parser (one sub-command per registered module)."""
    parser = argparse.ArgumentParser(
        prog="aoe",
        description="Tournament runner for AI-agent build races (agents-of-empires compatible).",
    )
    parser.add_argument("--version", action="version", version=f"aoe-tui {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMAND_MODULES:
        module = importlib.import_module(name)
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``aoe`` console script; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        rc = args.func(args)
    except AoeError as err:
        print(f"aoe: error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("aoe: interrupted", file=sys.stderr)
        return 130
    return int(rc or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
