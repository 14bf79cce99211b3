"""``aoe worker start`` / ``aoe worker stop``: this machine as a node of a Ray cluster (issue 15).

``aoe worker start --address HOST:PORT [--slots N]`` joins the cluster offering ``N`` heat
slots; ``--head`` starts the cluster's head node instead (``--slots 0``: it only
coordinates). Both first run the provider's doctor checks and tear down what this node's
lost heats left behind (:mod:`aoe_tui.cluster.node`). Without ``--block`` the node runs on
in the background until ``aoe worker stop``; with it, it lives as long as this command.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    """Register the ``worker`` sub-command group."""
    p = sub.add_parser(
        "worker",
        help="run this machine as a node of a Ray cluster that runs heats (needs the [cluster] extra)",
        description="Join this machine to a Ray cluster as a node offering heat slots, or leave it.",
    )
    wsub = p.add_subparsers(dest="worker_command", metavar="ACTION")
    wsub.required = True
    s = wsub.add_parser(
        "start",
        help="join the cluster (or start its head) offering N heat slots",
        description="Check this machine can host territories (aoe doctor), tear down territories this node's "
        "lost heats left, then start a Ray node offering N heat slots (the aoe_heat_slot resource), with "
        "Ray's token authentication. The node runs in the background until `aoe worker stop` (or, with "
        "--block, until this command ends).",
    )
    where = s.add_mutually_exclusive_group(required=True)
    where.add_argument("--address", metavar="HOST:PORT", help="the head node's address (printed by --head)")
    where.add_argument("--head", action="store_true", help="start the cluster's head node")
    s.add_argument("--slots", type=int, default=None, metavar="N",
                   help="heat slots this node offers (default: 1 for a worker, 0 for the head)")
    s.add_argument("--name", default=None, help="the node's name in the season screen and doctor (default: host name)")
    s.add_argument("--workdir", type=Path, default=None, metavar="DIR",
                   help="the node's state folder (default: ~/.local/state/aoe-tui/worker); one per node")
    s.add_argument("--port", type=int, default=None, metavar="PORT",
                   help="--head only: the cluster's port (default 6379; 0 picks a free one)")
    s.add_argument("--node-ip-address", default=None, metavar="IP",
                   help="the (private) address this node announces to the cluster")
    s.add_argument("--token-file", type=Path, default=None, metavar="PATH",
                   help="Ray's token file (default: $RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token); --head creates "
                   "it if missing; a worker needs the head's copy (mode 0600)")
    s.add_argument("--provider", default="container", metavar="NAME",
                   help="the territory provider whose doctor checks the node must pass (default container)")
    s.add_argument("--block", action="store_true", help="stay in the foreground; the node stops with this command")
    s.set_defaults(func=_cmd_start)
    t = wsub.add_parser(
        "stop",
        help="leave the cluster (only this node's processes)",
        description="Stop the node started from DIR (only its processes, never other Ray nodes on this machine), "
        "then tear down the territories its heats left.",
    )
    t.add_argument("--workdir", type=Path, default=None, metavar="DIR", help="the node's state folder")
    t.set_defaults(func=_cmd_stop)


def _cmd_start(args: argparse.Namespace) -> int:
    from aoe_tui.cluster.node import DEFAULT_PORT, default_workdir, start_node, wait_node
    from aoe_tui.errors import UsageError

    if args.port is not None and not args.head:
        raise UsageError("worker start: --port is for --head (a worker joins the head's --address)")
    slots = args.slots if args.slots is not None else (0 if args.head else 1)
    workdir = args.workdir or default_workdir()
    try:  # a file in the way: one line naming the option, not a traceback from start_node
        workdir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UsageError(f"--workdir {workdir}: cannot use it as the node's state folder: "
                         f"{'not a folder' if isinstance(err, FileExistsError) else err.strerror}") from None
    record = start_node(workdir, head=args.head, address=args.address,
                        port=DEFAULT_PORT if args.port is None else args.port, slots=slots, name=args.name,
                        token_file=args.token_file, provider=args.provider, node_ip=args.node_ip_address,
                        block=args.block, say=lambda line: print(line, flush=True))
    plural = "slot" if record.slots == 1 else "slots"
    if record.head:
        print(f"head node {record.name} started: cluster address {record.address}, {record.slots} heat {plural}")
        print(f"token: {record.token_file} (mode 0600; Ray reads it, it is never printed): copy it to each worker "
              "and to the runner's machine, as ~/.ray/auth_token or a file named by --token-file / RAY_AUTH_TOKEN_PATH")
        print(f"add a worker: aoe worker start --address {record.address} --slots N")
        print(f"run a season: aoe run SEASON --cluster {record.address}")
    else:
        print(f"node {record.name} joined {record.address} with {record.slots} heat {plural}")
    print(f"workdir {record.workdir}, Ray logs under {record.temp_dir}; "
          + ("stops with this command" if args.block else f"stop: aoe worker stop --workdir {record.workdir}"),
          flush=True)
    if args.block:
        return wait_node(record)
    return 0


def _cmd_stop(args: argparse.Namespace) -> int:
    from aoe_tui.cluster.node import default_workdir, stop_node

    workdir = args.workdir or default_workdir()
    record, removed = stop_node(workdir)
    for folder, ident in removed:
        print(f"removed {ident} ({folder})")
    if record is None:
        print(f"no node recorded in {workdir}")
        return 0
    print(f"node {record.name} stopped")
    return 0
