"""Turning an agent spec into an :class:`~aoe_tui.agents.base.Adapter`.

Specs (``aoe match run --agent SPEC`` or a manifest agent's ``adapter``):

- ``oracle`` — the built-in durable oracle (:class:`~aoe_tui.agents.oracle.OracleAdapter`);
- ``scripted:NAME`` — a built-in scripted builder (``memory``, ``volatile``, ``slow``);
- ``command:PATH`` — an external executable following spec §5 (named after its file);
- ``opencode`` — the built-in opencode agent (:class:`~aoe_tui.agents.opencode.OpencodeAdapter`),
  configured by ``options`` (season ``[[entrants]].options``) or ``AOE_OPENCODE_*`` env vars;
- ``NAME`` registered with upstream's ``--adapter NAME=PATH`` (spec §5.1).

A registered name wins over a built-in of the same name, so an upstream arena whose
agents say ``adapter = "oracle"`` runs upstream's ``oracle-build.sh`` when it is
registered as ``--adapter oracle=adapters/oracle-build.sh``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from aoe_tui.agents.base import Adapter
from aoe_tui.errors import AoeError, UsageError

__all__ = ["BUILTIN_SPECS", "UnknownAdapterError", "parse_adapter_registration", "resolve_adapter"]

#: Built-in specs, in the order they are listed to the user.
BUILTIN_SPECS = ("oracle", "scripted:memory", "scripted:volatile", "scripted:slow", "opencode")


class UnknownAdapterError(AoeError):
    """An agent spec names no built-in, no registered adapter, or a missing executable."""


def parse_adapter_registration(text: str) -> tuple[str, Path]:
    """Parse upstream's ``--adapter NAME=PATH``; returns ``(NAME, PATH)`` (PATH not checked).

    Raises:
        UsageError: no ``=``, or an empty name or path.
    """
    name, sep, path = text.partition("=")
    if not sep or not name.strip() or not path.strip():
        raise UsageError(f"--adapter expects NAME=PATH, got {text!r}")
    return name.strip(), Path(path.strip())


def _command(name: str, path: Path, what: str) -> Adapter:
    from aoe_tui.agents.command import CommandAdapter

    if not path.is_file():
        raise UnknownAdapterError(f"{what}: adapter executable {path} does not exist")
    if not os.access(path, os.X_OK):
        raise UnknownAdapterError(f"{what}: adapter {path} is not executable (chmod +x it)")
    return CommandAdapter(name, path)


def resolve_adapter(
    spec: str, registered: Mapping[str, Path] | None = None, options: Mapping[str, object] | None = None
) -> Adapter:
    """Return a fresh adapter for ``spec`` (see the module docstring for the forms).

    Args:
        spec: ``oracle``, ``scripted:NAME``, ``command:PATH`` or a registered name.
        registered: ``NAME -> PATH`` from ``--adapter NAME=PATH`` (relative paths are
            taken relative to the current directory, as upstream does).
        options: adapter options (season ``[[entrants]].options``); only the ``opencode``
            adapter takes any (see :class:`~aoe_tui.agents.opencode.OpencodeOptions`), the
            others ignore them.

    Raises:
        UnknownAdapterError: unknown name (the message lists the known ones), unknown
            scripted builder, a command/registered path that is missing or not executable,
            or an invalid opencode option.
    """
    registered = dict(registered or {})
    spec = spec.strip()
    if spec in registered:
        return _command(spec, Path(registered[spec]), f"adapter {spec!r}")
    if spec == "oracle":
        from aoe_tui.agents.oracle import OracleAdapter

        return OracleAdapter()
    if spec == "opencode":
        from aoe_tui.agents.opencode import OpencodeAdapter

        try:
            return OpencodeAdapter(dict(options or {}))
        except AoeError as exc:
            raise UnknownAdapterError(str(exc)) from None
    if spec.startswith("scripted:"):
        from aoe_tui.agents.scripted import ScriptedAdapter

        try:
            return ScriptedAdapter(spec.split(":", 1)[1])
        except AoeError as exc:
            raise UnknownAdapterError(str(exc)) from None
    if spec.startswith("command:"):
        raw = spec.split(":", 1)[1]
        if not raw:
            raise UnknownAdapterError("agent spec 'command:' needs a path, e.g. command:./adapters/my-adapter.sh")
        path = Path(raw)
        return _command(path.name, path, f"agent spec {spec!r}")
    known = list(BUILTIN_SPECS) + ["command:PATH"] + sorted(registered)
    raise UnknownAdapterError(f"unknown adapter {spec!r} (known: {', '.join(known)})")
