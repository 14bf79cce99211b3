"""`aoe image` command (placeholder until its issue lands)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    """Register the `image` sub-command."""
    p = sub.add_parser("image", help="(not implemented yet)")
    p.set_defaults(func=lambda args: print("image: not implemented yet") or 1)
