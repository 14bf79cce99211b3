"""``aoe doctor [--json] [--provider NAME]``: is this host ready to run territories?

Prints, for each provider, what it needs, what is present and the one command that
fixes what is missing. Exit status 0 when the checked provider (default: ``container``)
is ready, else 1. ``--json`` prints ``{ready, checks:[...]}`` (spec §6.7 shape, extended).

``aoe doctor --cluster ADDRESS`` lists the nodes of a Ray cluster instead: one line per node
(name, address, role, heat slots free/total, ready or why not); exit 0 when a node can take a heat.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

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
    p.add_argument(
        "--cluster",
        default=None,
        metavar="ADDRESS",
        help="instead: list the nodes of the Ray cluster at ADDRESS (HOST:PORT or auto), their heat slots and "
        "readiness (exit 1 when no node can take a heat)",
    )
    p.add_argument("--token-file", type=Path, default=None, metavar="PATH",
                   help="with --cluster: Ray's token file (default: $RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token)")
    p.set_defaults(func=run)


def _names() -> list[str]:
    from aoe_tui.runtime.registry import provider_names

    return provider_names()


def _default() -> str:
    from aoe_tui.runtime.registry import DEFAULT_PROVIDER

    return DEFAULT_PROVIDER


def run(args: argparse.Namespace) -> int:
    """Run the checks and print them; return 0 if ready, 1 otherwise."""
    if args.cluster is not None:
        return _cluster(args)
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


def _cluster(args: argparse.Namespace) -> int:
    """One line per node of the cluster (``aoe_tui.cluster.node.NodeStatus.line``), then a
    summary; ``--json``: ``{address, ready, nodes: [...]}``. 0 when a node can take a heat."""
    from dataclasses import asdict

    from aoe_tui.cluster.node import cluster_status, resolve_address

    address = resolve_address(args.cluster)
    nodes = cluster_status(address, args.token_file)
    ready = [n for n in nodes if n.ready]
    if args.json:
        print(json.dumps({"address": address, "ready": bool(ready),
                          "nodes": [{**asdict(n), "ready": n.ready} for n in nodes]}, indent=2))
    else:
        for n in nodes:
            print(n.line())
        known = [n.slots_free for n in ready if n.slots_free is not None]
        free = sum(known) if len(known) == len(ready) else "?"
        total = sum(n.slots_total for n in ready)
        print(f"cluster {address}: {len(ready)} of {len(nodes)} node(s) ready, {free}/{total} heat slots free")
    return 0 if ready else 1
