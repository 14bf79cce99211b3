"""`aoe arena` command (placeholder until its issue lands)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    """Register the `arena` sub-command."""
    p = sub.add_parser("arena", help="(not implemented yet)")
    p.set_defaults(func=lambda args: print("arena: not implemented yet") or 1)
