"""``aoe serve``: watch a season live over SSH (issue 7).

An asyncssh server (:class:`~aoe_tui.serve.server.SpectatorServer`) that gives every
PTY session its own read-only spectator TUI process on a real PTY and every other
session the standings as text. See :mod:`aoe_tui.serve.server` for the policy and
:mod:`aoe_tui.serve.session` for the PTY relay.
"""

from aoe_tui.serve.keys import ServeError, ensure_host_key, load_authorized_keys
from aoe_tui.serve.server import ServeConfig, ServerThread, SpectatorServer, configure_logging, watch_argv

__all__ = [
    "ServeConfig",
    "ServeError",
    "ServerThread",
    "SpectatorServer",
    "configure_logging",
    "ensure_host_key",
    "load_authorized_keys",
    "watch_argv",
]
