"""Serve layer, ``aoe serve``: an asyncssh server giving every PTY session a read-only
spectator TUI on a real PTY (``session``; one process per view, shared by the sessions that
show it: ``views``; forked from a warm ``zygote``), other sessions the standings as text
(``server`` policy, ``placement`` CPUs). A view: may import every layer but ``commands``; names load
lazily, so the CLI loads asyncssh only when a server starts. Terminal facts:
``docs/serving.md``; layers: ``docs/architecture.md``.
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
