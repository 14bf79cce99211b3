"""Errors that reach the user as one clear line (never a traceback).

Every layer raises a subclass of :class:`AoeError` for bad input or a failed
environment; ``aoe_tui.cli.main`` prints ``aoe: error: <message>`` and exits
with :attr:`AoeError.exit_code`.
"""

from __future__ import annotations


class AoeError(Exception):
    """A user-facing failure. ``str(err)`` is one line naming the file/field at fault."""

    exit_code: int = 1


class UsageError(AoeError):
    """Bad command-line usage (exit 2)."""

    exit_code = 2
