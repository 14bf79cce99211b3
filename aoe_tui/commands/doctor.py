"""``aoe doctor [--json] [--provider NAME]``: is this host ready to run territories?

Prints, for each provider, what it needs, what is present and the one command that
fixes what is missing. Exit status 0 when the checked provider (default: ``container``)
is ready, else 1. ``--json`` prints ``{ready, checks:[...]}`` (spec §6.7 shape, extended).
"""

from __future__ import annotations

import argparse
import json

from aoe_tui.errors import UsageError


def register(sub: argparse._SubParsersAction) -> None:
    """Register the ``doctor`` sub-command."""
    p = sub.add_parser(
        "doctor",
        help="check what each territory provider needs and how to fix what is missing",
        description="Check binaries, kernel features and the guest image for each territory provider.",
    )
    p.add_argument("--json", action="store_true", help="print JSON {ready, checks:[...]} instead of a table")
    p.add_argument(
        "--provider",
        default=None,
        metavar="NAME",
        help="decide the exit status by this provider (one of: %s; default %s)" % (", ".join(_names()), _default()),
    )
    p.set_defaults(func=run)


def _names() -> list[str]:
    from aoe_tui.runtime.registry import provider_names

    return provider_names()


def _default() -> str:
    from aoe_tui.runtime.registry import DEFAULT_PROVIDER

    return DEFAULT_PROVIDER


def run(args: argparse.Namespace) -> int:
    """Run the checks and print them; return 0 if ready, 1 otherwise."""
    from aoe_tui.runtime.doctor import run_checks

    provider = args.provider or _default()
    names = _names()
    if provider not in names:
        raise UsageError(f"doctor: unknown provider {provider!r} (expected one of: {', '.join(names)})")
    report = run_checks(None, provider)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print(report.to_text())
    return 0 if report.ready else 1
