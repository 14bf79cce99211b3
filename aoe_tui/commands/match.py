"""`aoe match` command (placeholder until its issue lands)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    """Register the `match` sub-command."""
    p = sub.add_parser("match", help="(not implemented yet)")
    p.set_defaults(func=lambda args: print("match: not implemented yet") or 1)
