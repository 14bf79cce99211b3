"""`aoe inspect` command (placeholder until its issue lands)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    """Register the `inspect` sub-command."""
    p = sub.add_parser("inspect", help="(not implemented yet)")
    p.set_defaults(func=lambda args: print("inspect: not implemented yet") or 1)
