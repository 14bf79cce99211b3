"""``aoe serve SEASON_DIR``: let spectators watch a season over SSH (issue 7).

``ssh -t -p PORT HOST`` gives a known key the live, read-only spectator TUI
(``aoe watch``) in its own process and PTY; ``ssh -p PORT HOST standings
[--format md|csv|json|html]`` prints the standings. Public-key auth only.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from contextlib import contextmanager
from pathlib import Path

from aoe_tui.errors import UsageError

DEFAULT_HOST_KEY_NAME = "serve_host_ed25519_key"


def default_host_key() -> Path:
    """``<user config dir>/aoe-tui/serve_host_ed25519_key`` (platformdirs)."""
    from platformdirs import user_config_dir

    return Path(user_config_dir("aoe-tui")) / DEFAULT_HOST_KEY_NAME


def add_limit_args(p: argparse.ArgumentParser) -> None:
    """The options ``aoe serve`` and ``aoe run --serve-ssh`` share."""
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--host-key", type=Path, default=None, metavar="FILE",
                   help="private host key; created (Ed25519, mode 0600) if missing "
                        f"(default: <user config>/aoe-tui/{DEFAULT_HOST_KEY_NAME})")
    p.add_argument("--max-sessions", type=int, default=20, metavar="N",
                   help="spectator TUIs at once, all clients together (default 20)")
    p.add_argument("--max-per-address", type=int, default=4, metavar="N",
                   help="SSH connections at once per client address (default 4)")


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``aoe serve``."""
    p = sub.add_parser("serve", help="serve a season's live spectator view over SSH",
                       description="Serve a read-only live view of SEASON_DIR over SSH: a PTY session gets the "
                                   "spectator TUI (aoe watch), `standings [--format md|csv|json|html]` prints "
                                   "the standings. Public-key authentication only.")
    p.add_argument("season_dir", metavar="SEASON_DIR", type=Path, help="season folder holding season.jsonl")
    p.add_argument("--port", type=int, default=2222, help="TCP port (default 2222)")
    p.add_argument("--authorized-keys", type=Path, required=True, metavar="FILE",
                   help="OpenSSH authorized_keys file of the spectators' public keys")
    add_limit_args(p)
    p.set_defaults(func=_cmd_serve)


def make_config(season_dir: Path, port: int, args: argparse.Namespace):
    """A :class:`~aoe_tui.serve.server.ServeConfig` from parsed options (raises UsageError)."""
    from aoe_tui.serve.server import ServeConfig

    if not 0 <= port <= 65535:
        raise UsageError(f"--port {port}: not a TCP port")
    if args.max_sessions < 1 or args.max_per_address < 1:
        raise UsageError("--max-sessions and --max-per-address must be at least 1")
    return ServeConfig(season_dir=Path(season_dir), host_key=args.host_key or default_host_key(),
                       authorized_keys=args.authorized_keys, host=args.host, port=port,
                       max_sessions=args.max_sessions, max_per_address=args.max_per_address)


def _cmd_serve(args: argparse.Namespace) -> int:
    from aoe_tui.serve.server import SpectatorServer, configure_logging

    config = make_config(args.season_dir, args.port, args)
    configure_logging()

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await SpectatorServer(config).serve_forever(stop)

    asyncio.run(main())
    return 0


def add_run_args(p: argparse.ArgumentParser) -> None:
    """Add ``--serve-ssh PORT`` (+ ``--authorized-keys`` and the limits) to ``aoe run``."""
    g = p.add_argument_group("spectators over SSH (aoe serve inside the runner)")
    g.add_argument("--serve-ssh", type=int, default=None, metavar="PORT",
                   help="also serve the live spectator view over SSH on PORT (needs --authorized-keys)")
    g.add_argument("--authorized-keys", type=Path, default=None, metavar="FILE",
                   help="OpenSSH authorized_keys file of the spectators' public keys")
    add_limit_args(g)


@contextmanager
def serving(args: argparse.Namespace, season_dir: Path, *, headless: bool):
    """Run the spectator server around a block when ``args.serve_ssh`` is set (else no-op).

    The server runs on its own thread (:class:`~aoe_tui.serve.server.ServerThread`) and
    is stopped, with every spectator process, when the block ends. Log lines go to
    stderr when ``headless``, else to ``<user log dir>/aoe-tui/serve-ssh.log`` (the TUI
    owns the terminal). Raises :class:`UsageError` without ``--authorized-keys``.
    """
    port = getattr(args, "serve_ssh", None)
    if port is None:
        yield None
        return
    from aoe_tui.serve.server import ServerThread, configure_logging

    if args.authorized_keys is None:
        raise UsageError("--serve-ssh needs --authorized-keys FILE")
    config = make_config(season_dir, port, args)
    config.allow_missing_season = True
    if headless:
        configure_logging()
    else:
        from platformdirs import user_log_dir

        log_path = Path(user_log_dir("aoe-tui")) / "serve-ssh.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        print(f"aoe: spectator SSH server log: {log_path}", file=sys.stderr)
        configure_logging(open(log_path, "a", encoding="utf-8"))  # noqa: SIM115 - lives as long as the process
    thread = ServerThread(config)
    server = thread.start()
    print(f"aoe: spectators: ssh -t -p {server.port} {config.host}  (host key {server.host_key_fingerprint})",
          file=sys.stderr, flush=True)
    try:
        yield server
    finally:
        thread.stop()
