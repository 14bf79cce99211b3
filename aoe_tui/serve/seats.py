"""The spectator seats of ``aoe serve``: at most ``capacity`` spectator TUIs at once.

The server owns one :class:`SeatPool`; each PTY session takes a seat before it starts its
spectator process and releases it when the process has ended.
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["SeatPool"]

log = logging.getLogger("aoe_tui.serve")


class SeatPool:
    """Up to ``capacity`` seated sessions (any objects with ``conn.addr``, ``conn.key_fp``
    and ``child``), keyed by identity. Not thread-safe: used on the server's event loop."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._seated: dict[int, Any] = {}

    def take(self, session: Any) -> str | None:
        """Seat ``session``; returns ``None``, or the one-line refusal (ending in a
        newline) to show the client when every seat is taken."""
        if len(self._seated) >= self.capacity:
            log.warning("session refused addr=%s key=%s: all %d spectator seats taken", session.conn.addr,
                        session.conn.key_fp, self.capacity)
            return (f"aoe serve: all {self.capacity} spectator seats are taken; "
                    "try again later (or `ssh HOST standings`)\n")
        self._seated[id(session)] = session
        return None

    def release(self, session: Any) -> None:
        """Free ``session``'s seat (idempotent)."""
        self._seated.pop(id(session), None)

    def sessions(self) -> list[Any]:
        """The seated sessions, in the order they sat down."""
        return list(self._seated.values())

    def __len__(self) -> int:
        return len(self._seated)
