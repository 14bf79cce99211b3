"""`aoe doctor` command (placeholder until its issue lands)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    """Register the `doctor` sub-command."""
    p = sub.add_parser("doctor", help="(not implemented yet)")
    p.set_defaults(func=lambda args: print("doctor: not implemented yet") or 1)
