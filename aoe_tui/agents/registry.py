"""Turning an agent spec into an :class:`~aoe_tui.agents.base.Adapter`.

Specs (``aoe match run --agent SPEC`` or a manifest agent's ``adapter``):

- ``oracle`` — the arena package's ``adapters/oracle.sh`` (a §5 command adapter) when it
  has one, else the built-in first-build oracle (:class:`~aoe_tui.agents.oracle.OracleAdapter`);
- ``scripted:NAME`` — a built-in builder: the package's ``adapters/builders/NAME.sh`` run in
  the territory (:class:`~aoe_tui.agents.scripted.PackageBuilderAdapter`; ``slow`` = its
  ``oracle.sh`` after a delay; a fault ``NAME`` that ``oracle.sh`` declares = ``oracle.sh``
  with ``AOE_FAULT=NAME``, :func:`~aoe_tui.agents.scripted.builder_faults`), else the
  first-build builders ``memory``, ``volatile``, ``slow`` (packages without their own
  ``builders/oracle.sh``);
- ``NAME`` — the package's own ``adapters/NAME.sh`` (e.g. upstream's ``oracle-queue``);
- ``command:PATH`` — an external executable following spec §5 (named after its file);
- ``opencode`` — the built-in opencode agent (:class:`~aoe_tui.agents.opencode.OpencodeAdapter`),
  configured by ``options`` (season ``[[entrants]].options``) or ``AOE_OPENCODE_*`` env vars;
- ``claude-code``, ``codex`` — Claude Code and Codex CLI run in the territory by the harness
  runner (:mod:`aoe_tui.agents.harness`; :data:`HARNESSES`), configured by ``options``
  (:class:`~aoe_tui.agents.harness.HarnessOptions`);
- ``NAME`` registered with upstream's ``--adapter NAME=PATH`` (spec §5.1).

A registered name wins over package adapters and built-ins of the same name, so an
upstream arena whose agents say ``adapter = "oracle"`` runs upstream's ``oracle-build.sh``
when it is registered as ``--adapter oracle=adapters/oracle-build.sh``. Package adapters
(``docs/arena-packages.md``) are found only when the arena folder is given.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from aoe_tui.agents.base import Adapter
from aoe_tui.errors import AoeError, UsageError

__all__ = ["BUILTIN_SPECS", "HARNESSES", "harness_adapters", "UnknownAdapterError", "package_builders", "parse_adapter_registration", "resolve_adapter"]

#: Built-in specs, in the order they are listed to the user.
BUILTIN_SPECS = ("oracle", "scripted:memory", "scripted:volatile", "scripted:slow", "opencode", "claude-code", "codex")

#: In-territory harnesses on the harness runner (:mod:`aoe_tui.agents.harness`): adapter name →
#: ``module:class`` of its :class:`~aoe_tui.agents.harness.HarnessAdapter`. A new harness is a
#: module with a :class:`~aoe_tui.agents.harness.Harness` subclass plus one entry here.
HARNESSES = {
    "claude-code": "aoe_tui.agents.claude_code:ClaudeCodeAdapter",
    "codex": "aoe_tui.agents.codex:CodexAdapter",
}


def harness_adapters() -> list[type]:
    """The :class:`~aoe_tui.agents.harness.HarnessAdapter` classes of :data:`HARNESSES`, in order."""
    import importlib

    out = []
    for target in HARNESSES.values():
        module, cls = target.split(":")
        out.append(getattr(importlib.import_module(module), cls))
    return out


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


_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def package_builders(arena_dir: Path | None) -> list[str]:
    """``scripted:NAME`` specs an arena package provides (``adapters/builders/NAME.sh``,
    ``slow`` when it has ``oracle.sh``), sorted; ``[]`` without a package or builders."""
    if arena_dir is None:
        return []
    from aoe_tui.agents.scripted import builder_faults

    d = Path(arena_dir) / "adapters" / "builders"
    names = {p.stem for p in d.glob("*.sh") if p.is_file() and p.stem != "oracle"} if d.is_dir() else set()
    if (d / "oracle.sh").is_file():
        names.add("slow")
        names.update(builder_faults(d / "oracle.sh"))
    return sorted(f"scripted:{n}" for n in names)


def _package_adapter(spec: str, arena_dir: Path) -> Adapter | None:
    """The arena package's own adapter for ``spec``, or None (see the module docstring).

    Raises:
        UnknownAdapterError: ``scripted:NAME`` that a package with its own builders lacks.
    """
    pkg = Path(arena_dir) / "adapters"
    if spec.startswith("scripted:"):
        name = spec.split(":", 1)[1]
        builders = pkg / "builders"
        if not _NAME_RE.match(name or "-"):
            return None
        from aoe_tui.agents.scripted import PackageBuilderAdapter, builder_faults

        if name != "oracle" and (builders / f"{name}.sh").is_file():
            return PackageBuilderAdapter(name, builders / f"{name}.sh")
        if (builders / "oracle.sh").is_file():
            if name == "slow":
                return PackageBuilderAdapter("slow", builders / "oracle.sh", slow=True)
            if name in builder_faults(builders / "oracle.sh"):
                return PackageBuilderAdapter(name, builders / "oracle.sh", fault=name)
            known = ", ".join(package_builders(arena_dir))
            raise UnknownAdapterError(f"arena {Path(arena_dir).name} has no built-in builder {spec!r} (known: {known})")
        return None
    if spec.startswith("command:") or not _NAME_RE.match(spec):
        return None
    path = pkg / f"{spec}.sh"
    if path.is_file():
        return _command(spec, path, f"arena adapter {spec!r}")
    return None


def resolve_adapter(
    spec: str, registered: Mapping[str, Path] | None = None, options: Mapping[str, object] | None = None,
    arena_dir: Path | None = None,
) -> Adapter:
    """Return a fresh adapter for ``spec`` (see the module docstring for the forms).

    Args:
        spec: ``oracle``, ``scripted:NAME``, ``command:PATH``, a registered name or a
            package adapter's name.
        registered: ``NAME -> PATH`` from ``--adapter NAME=PATH`` (relative paths are
            taken relative to the current directory, as upstream does).
        options: adapter options (season ``[[entrants]].options``); only ``opencode``
            (:class:`~aoe_tui.agents.opencode.OpencodeOptions`) and the harnesses of
            :data:`HARNESSES` (:class:`~aoe_tui.agents.harness.HarnessOptions`) take any,
            the others ignore them.
        arena_dir: the arena package folder of the heat; enables its ``adapters/``.

    Raises:
        UnknownAdapterError: unknown name (the message lists the known ones), unknown
            scripted builder, a command/registered path that is missing or not executable,
            or an invalid opencode or harness option.
    """
    registered = dict(registered or {})
    spec = spec.strip()
    if spec in registered:
        return _command(spec, Path(registered[spec]), f"adapter {spec!r}")
    if arena_dir is not None:
        found = _package_adapter(spec, arena_dir)
        if found is not None:
            return found
    if spec == "oracle":
        from aoe_tui.agents.oracle import OracleAdapter

        return OracleAdapter()
    if spec == "opencode":
        from aoe_tui.agents.opencode import OpencodeAdapter

        try:
            return OpencodeAdapter(dict(options or {}))
        except AoeError as exc:
            raise UnknownAdapterError(str(exc)) from None
    if spec in HARNESSES:
        import importlib

        module, cls = HARNESSES[spec].split(":")
        try:
            return getattr(importlib.import_module(module), cls)(dict(options or {}))
        except AoeError as exc:
            raise UnknownAdapterError(str(exc)) from None
    if spec.startswith("scripted:"):
        from aoe_tui.agents.scripted import ScriptedAdapter

        try:
            return ScriptedAdapter(spec.split(":", 1)[1])
        except AoeError as exc:
            extra = [b for b in package_builders(arena_dir) if b not in str(exc)]
            msg = str(exc)[:-1] + ", " + ", ".join(extra) + ")" if extra and str(exc).endswith(")") else str(exc)
            raise UnknownAdapterError(msg) from None
    if spec.startswith("command:"):
        raw = spec.split(":", 1)[1]
        if not raw:
            raise UnknownAdapterError("agent spec 'command:' needs a path, e.g. command:./adapters/my-adapter.sh")
        path = Path(raw)
        return _command(path.name, path, f"agent spec {spec!r}")
    known = list(BUILTIN_SPECS) + package_builders(arena_dir) + ["command:PATH"] + sorted(registered)
    known = list(dict.fromkeys(known))
    raise UnknownAdapterError(f"unknown adapter {spec!r} (known: {', '.join(known)})")
