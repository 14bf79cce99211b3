"""Territory providers by name: the one list read by the CLI, season files, doctor and cleanup.

A provider is registered with one :func:`register_provider` call; from then on it is an
``aoe match run --provider`` choice (and in its help), a season file's ``[provider] kind``
(validated against its config model; ``seasons=False`` providers are refused there), a
group of ``aoe doctor`` lines and a step of ``aoe cleanup``. The built-in providers are
registered at the bottom of this module; their modules are imported only when a territory
is built, a doctor check runs or a cleanup runs, so ``aoe --help`` stays fast. Code outside
the package registers its own from a plugin module (:mod:`aoe_tui.plugins`, ``AOE_PLUGINS``).

Importing this module installs the ``[provider]`` kind table into
:func:`aoe_tui.domain.season_file.install_kinds` (the domain layer names no provider).

Example (a plugin module)::

    from aoe_tui.runtime.registry import ProviderContext, register_provider

    def make(ctx: ProviderContext) -> TerritoryProvider:
        return MyProvider(ctx.workdir, hosts=ctx.config.hosts)

    register_provider("mine", make, config=MyOptions, doctor=my_checks, cleanup=my_cleanup,
                      help="my hosts")
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from aoe_tui.domain.season_file import DEFAULT_PROVIDER_KIND, SectionConfig, install_kinds
from aoe_tui.domain.tomlfile import schema_problems
from aoe_tui.errors import UsageError

if TYPE_CHECKING:  # pragma: no cover
    from aoe_tui.domain.arena import LoadedManifest
    from aoe_tui.runtime.provider import TerritoryProvider

__all__ = [
    "DEFAULT_PROVIDER",
    "IMAGE_FLAVOURS",
    "ProviderContext",
    "ProviderEntry",
    "ProviderOptions",
    "build_provider",
    "get_provider",
    "provider_config",
    "provider_names",
    "providers",
    "register_provider",
    "season_provider_factory",
    "unregister_provider",
]

#: Provider used by ``aoe demo``, tests, ``aoe match run`` without ``--provider``, a season
#: file without ``[provider]`` and the exit status of ``aoe doctor``.
DEFAULT_PROVIDER = DEFAULT_PROVIDER_KIND

#: ``image=`` values of :func:`register_provider`.
IMAGE_FLAVOURS = (None, "rootfs", "qcow2")

#: A callable or its lazy form ``"module:attribute"`` (imported on first use).
Lazy = Any


@dataclass(frozen=True)
class ProviderContext:
    """What a provider factory gets to build the territories of one heat.

    Attributes:
        workdir: the heat's ``territories/`` folder (state the provider leaves goes here).
        arena: the heat's arena (:class:`aoe_tui.domain.arena.LoadedManifest`).
        config: the validated options (an instance of the entry's ``config`` model): the
            season file's ``[provider]`` table, or ``aoe match run``'s flags.
        image: the arena's guest image (:func:`aoe_tui.runtime.layers.image_for_arena`) for a
            provider with ``image`` set, else None.
        heat_id: the season heat (``round-R-heat-H-attempt-A``), None for ``aoe match run``.
        cli: True when built for ``aoe match run`` (errors then name flags, not fields).
    """

    workdir: Path
    arena: LoadedManifest
    config: Any
    image: Any = None
    heat_id: str | None = None
    cli: bool = False

    def options(self, *names: str) -> dict[str, Any]:
        """``{name: value}`` of the config fields ``names`` that are set (not None)."""
        return {n: getattr(self.config, n) for n in names if getattr(self.config, n, None) is not None}


@dataclass(frozen=True)
class ProviderEntry:
    """One registered provider (see :func:`register_provider` for the fields)."""

    name: str
    factory: Lazy
    config: type[SectionConfig]
    doctor: Lazy = None
    cleanup: Lazy = None
    image: str | None = None
    seasons: bool = True
    help: str = ""
    cpu_weights: Lazy = None
    host_cpus: bool = False

    def make(self, ctx: ProviderContext) -> TerritoryProvider:
        """Build the provider for one heat (the factory's errors pass through)."""
        return resolve_lazy(self.factory)(ctx)

    def cleanup_stale(self, workdir: Path) -> list[str]:
        """Tear down what a dead runner left in ``workdir``; returns the territory ids removed."""
        return list(resolve_lazy(self.cleanup)(Path(workdir))) if self.cleanup is not None else []

    def cpu_weight_problem(self) -> str | None:
        """Why this provider cannot weigh its heats' CPU on this host (a few words), or None
        when it can or is trusted to (no ``cpu_weights`` hook: ``run_heat`` weighs where the
        provider has ``set_cpu_weight``)."""
        return resolve_lazy(self.cpu_weights)() if self.cpu_weights is not None else None


_PROVIDERS: dict[str, ProviderEntry] = {}


def resolve_lazy(target: Lazy, default_attr: str = "") -> Callable[..., Any]:
    """A callable as it is, or ``"module:attribute"`` imported now (``"module"`` alone names
    its ``default_attr``). Raises ``ImportError`` / ``AttributeError`` when it is not there."""
    if not isinstance(target, str):
        return target
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr or default_attr)


def register_provider(
    name: str,
    factory: Lazy,
    *,
    config: type[SectionConfig] | None = None,
    doctor: Lazy = None,
    cleanup: Lazy = None,
    image: str | None = None,
    seasons: bool = True,
    help: str = "",
    cpu_weights: Lazy = None,
    host_cpus: bool = False,
) -> ProviderEntry:
    """Register a territory provider under ``name`` (listed after those registered before).

    Args:
        name: the ``--provider`` / ``[provider] kind`` value (a-z, 0-9, '-').
        factory: ``(ProviderContext) -> TerritoryProvider``, or ``"module:function"``.
        config: its options model, a :class:`~aoe_tui.domain.season_file.SectionConfig` subclass
            (``extra="forbid"``); default :class:`ProviderOptions` (the two timeouts).
        doctor: ``() -> list[DoctorCheck]`` (or ``"module:function"``); None = no checks.
        cleanup: ``(workdir: Path) -> list[str]`` removing what a killed runner left in a
            ``territories/`` folder and returning the territory ids (or ``"module:function"``);
            None = it leaves nothing behind.
        image: the arena guest image to build before a run and hand the factory
            (``ProviderContext.image``): ``"rootfs"`` (a directory tree, as containers boot)
            or ``"qcow2"`` (a VM disk); None = the provider boots no guest image of ours.
        seasons: whether season files may name it.
        help: a few words for ``aoe match run --help``.
        cpu_weights: ``() -> str | None`` (or ``"module:function"``): why ``AOE_CPU_WEIGHTS``
            cannot take effect with this provider on this host (a few words), None when it
            can; None = trusted (weighed where the provider has ``set_cpu_weight``).
        host_cpus: whether its territories run on this host's CPUs (so concurrent heats
            share them: ``aoe run`` says when their vCPUs outnumber the host's CPUs).

    Registering the same entry again is a no-op. Raises ValueError: a bad name, or the name
    taken by another entry.
    """
    if not name or not all(c.isalnum() or c == "-" for c in name) or name != name.lower():
        raise ValueError(f"provider name {name!r}: use only a-z, 0-9 and '-'")
    if image not in IMAGE_FLAVOURS:
        raise ValueError(f"provider {name!r}: image must be one of {IMAGE_FLAVOURS}, got {image!r}")
    entry = ProviderEntry(name, factory, config or ProviderOptions, doctor, cleanup, image, seasons, help, cpu_weights,
                          host_cpus)
    old = _PROVIDERS.get(name)
    if old is not None and old != entry:
        raise ValueError(f"provider {name!r} is already registered")
    _PROVIDERS[name] = entry
    return entry


def unregister_provider(name: str) -> None:
    """Forget a provider (plugins' tests); unknown names are ignored."""
    _PROVIDERS.pop(name, None)


def providers() -> list[ProviderEntry]:
    """Every registered provider, in registration order (the built-ins first)."""
    return list(_PROVIDERS.values())


def provider_names(*, seasons: bool = False) -> list[str]:
    """Registered names in order; ``seasons=True``: only those season files may name."""
    return [e.name for e in _PROVIDERS.values() if e.seasons or not seasons]


def get_provider(name: str) -> ProviderEntry:
    """The entry of ``name``.

    Raises:
        UsageError: unknown name (the message lists the known ones).
    """
    entry = _PROVIDERS.get(name)
    if entry is None:
        raise UsageError(f"unknown provider {name!r} (known: {', '.join(_PROVIDERS)})")
    return entry


def provider_config(name: str, options: Any = None) -> SectionConfig:
    """The validated config of provider ``name`` from a ``[provider]`` model or a dict of
    options (unset = defaults; dict keys the model lacks are dropped, as CLI flags that
    other providers take).

    Raises:
        UsageError: unknown provider, or options its model refuses (one line per problem).
    """
    entry = get_provider(name)
    if isinstance(options, entry.config):
        return options
    if isinstance(options, BaseModel):
        data = options.model_dump()
    else:
        data = {k: v for k, v in dict(options or {}).items() if k in entry.config.model_fields and v is not None}
    try:
        return entry.config.model_validate({**data, "kind": name})
    except ValidationError as err:
        raise UsageError("; ".join(f"provider.{p}: {m}" for p, m in schema_problems(err))) from None


def build_provider(name: str, options: Any, workdir: Path, arena: LoadedManifest, *, heat_id: str | None = None,
                   cli: bool = False, build_image: bool = True) -> TerritoryProvider:
    """The provider ``name`` for one heat with its workdir ``workdir`` (see
    :class:`ProviderContext`); ``options`` as :func:`provider_config`. ``build_image``: build
    a missing arena image layer (False: it must exist, see ``aoe image build``).

    Raises:
        UsageError: unknown provider or bad options; whatever the factory raises.
    """
    entry = get_provider(name)
    config = provider_config(name, options)
    image = None
    if entry.image is not None:
        from aoe_tui.runtime.layers import image_for_arena

        image = image_for_arena(arena.arena_dir, qemu=entry.image == "qcow2", build=build_image)
    provider = entry.make(ProviderContext(Path(workdir), arena, config, image, heat_id, cli))
    if not getattr(provider, "name", ""):
        provider.name = name  # a plugin's class need not repeat its registered name (logs, failures)
    return provider


def season_provider_factory(config: Any) -> Callable[[Path, str, LoadedManifest], TerritoryProvider]:
    """``(workdir, heat_id, arena) -> provider`` for a season file's ``[provider]`` model
    (validated now, so a bad table fails before any heat).

    Raises:
        UsageError: unknown provider or options its model refuses.
    """
    name = config.kind
    config = provider_config(name, config)

    def make(workdir: Path, heat_id: str, arena: LoadedManifest) -> TerritoryProvider:
        return build_provider(name, config, workdir, arena, heat_id=heat_id)  # image cached: built before the season

    return make


install_kinds("provider", lambda: {e.name: e.config for e in _PROVIDERS.values() if e.seasons},
              refused=lambda: {e.name: "is for `aoe match run --provider` only" for e in _PROVIDERS.values()
                               if not e.seasons})


# ---------------------------------------------------------------------------- built-ins


class ProviderOptions(SectionConfig):
    """``[provider]`` options of ``container`` (and the default model): boot and reboot
    timeouts in seconds (None = the provider's default)."""

    ready_timeout_s: float | int | None = None
    reboot_timeout_s: float | int | None = None


class QemuOptions(ProviderOptions):
    """``[provider]`` options of ``qemu``: the timeouts, and ``memory_mib``: guest memory (MiB)
    for every territory, overriding the seats' classes (a line in the heat's notes says so;
    unset: each seat's class, spec §1.7)."""

    memory_mib: int | None = None


class SshOptions(SectionConfig):
    """Options of ``ssh``: the host inventory TOML (``--inventory FILE``)."""

    inventory: str | None = None


def _container(ctx: ProviderContext) -> TerritoryProvider:
    from aoe_tui.runtime.container import ContainerProvider

    return ContainerProvider(ctx.workdir, image=ctx.image, cidr=ctx.arena.manifest.network.cidr, heat_id=ctx.heat_id,
                             **ctx.options("ready_timeout_s", "reboot_timeout_s"))


def _qemu(ctx: ProviderContext) -> TerritoryProvider:
    from aoe_tui.runtime.qemu import QemuProvider

    return QemuProvider(ctx.workdir, image=ctx.image, **ctx.options("ready_timeout_s", "reboot_timeout_s", "memory_mib"))


def _ssh(ctx: ProviderContext) -> TerritoryProvider:
    if not ctx.config.inventory:
        raise UsageError("--provider ssh needs --inventory FILE" if ctx.cli else "provider.inventory: missing (FILE)")
    from aoe_tui.runtime.sshhosts import SshHostsProvider

    return SshHostsProvider(Path(ctx.config.inventory), ctx.workdir)


def _nixos(ctx: ProviderContext) -> TerritoryProvider:
    from aoe_tui.runtime.nixos import NixosProvider

    return NixosProvider(ctx.arena.arena_dir, ctx.workdir)


def _qemu_cpu_weights() -> str:
    return "the qemu provider does not weigh CPU (only the container provider does)"


register_provider("container", _container, config=ProviderOptions, image="rootfs",
                  doctor="aoe_tui.runtime.container:doctor_checks", cleanup="aoe_tui.runtime.container:cleanup_stale",
                  cpu_weights="aoe_tui.runtime.container:cpu_weight_problem", host_cpus=True,
                  help="systemd-nspawn containers on this host")
register_provider("qemu", _qemu, config=QemuOptions, image="qcow2",
                  doctor="aoe_tui.runtime.qemu:doctor_checks", cleanup="aoe_tui.runtime.qemu:cleanup_unless_live",
                  cpu_weights=_qemu_cpu_weights, host_cpus=True, help="QEMU virtual machines")
register_provider("ssh", _ssh, config=SshOptions, seasons=False, doctor="aoe_tui.runtime.sshhosts:doctor_checks",
                  help="hosts you already run (--inventory FILE)")
register_provider("nixos", _nixos, config=SectionConfig, seasons=False, doctor="aoe_tui.runtime.nixos:doctor_checks",
                  help="NixOS guests built from the arena's flake")
