"""``aoe serve``: watch a season live over SSH (issue 7).

An asyncssh server (:class:`~aoe_tui.serve.server.SpectatorServer`) that gives every
PTY session its own read-only spectator TUI process on a real PTY and every other
session the standings as text. See :mod:`aoe_tui.serve.server` for the policy,
:mod:`aoe_tui.serve.session` for the PTY relay and :mod:`aoe_tui.serve.placement`
for where spectators run on the CPUs. Names are imported lazily, so the CLI does not
load asyncssh unless a server starts.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {
    "ServeConfig": "server",
    "ServerThread": "server",
    "SpectatorServer": "server",
    "configure_logging": "server",
    "watch_argv": "server",
    "ServeError": "keys",
    "ensure_host_key": "keys",
    "load_authorized_keys": "keys",
    "Placement": "placement",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'aoe_tui.serve' has no attribute {name!r}")
    return getattr(importlib.import_module(f"aoe_tui.serve.{home}"), name)
