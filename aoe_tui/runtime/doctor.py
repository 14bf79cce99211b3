"""``aoe doctor``: what each territory provider needs, what is present, and how to fix it.

Collects :class:`~aoe_tui.runtime.provider.DoctorCheck` lines from the ``doctor`` of
every registered provider (:mod:`aoe_tui.runtime.registry`, in registration order). The
host is *ready* when every check of the default provider (``container``) passes; the other
providers are reported for information. Upstream's ``doctor`` (spec §6.7) only checks
``nix``/``qemu-system-x86_64``/``ssh`` on PATH; its JSON shape ``{ready, checks:[...]}``
is kept, each check carrying upstream's ``name``/``available``/``detail`` plus
``provider`` and ``fix``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aoe_tui.runtime.provider import DoctorCheck
from aoe_tui.runtime import registry
from aoe_tui.runtime.registry import DEFAULT_PROVIDER


@dataclass(frozen=True)
class DoctorReport:
    """All doctor checks plus the verdict.

    Attributes:
        checks: every check, grouped by provider in registration order.
        default_provider: the provider whose readiness decides ``ready``.
    """

    checks: tuple[DoctorCheck, ...]
    default_provider: str = DEFAULT_PROVIDER

    def provider_ready(self, provider: str) -> bool:
        """True if ``provider`` has at least one check and all of them pass."""
        mine = [c for c in self.checks if c.provider == provider]
        return bool(mine) and all(c.ok for c in mine)

    @property
    def ready(self) -> bool:
        """True when the default provider is ready (the exit status of ``aoe doctor``)."""
        return self.provider_ready(self.default_provider)

    def to_json(self) -> dict[str, object]:
        """``{ready, default_provider, providers: {name: bool}, checks: [{provider, name, available, ok, detail, fix}]}``."""
        providers = []
        for c in self.checks:
            if c.provider not in providers:
                providers.append(c.provider)
        return {
            "ready": self.ready,
            "default_provider": self.default_provider,
            "providers": {p: self.provider_ready(p) for p in providers},
            "checks": [
                {"provider": c.provider, "name": c.name, "available": c.ok, "ok": c.ok, "detail": c.detail, "fix": c.fix}
                for c in self.checks
            ],
        }

    def to_text(self) -> str:
        """A plain-text table: provider, check, status, detail, fix; then one verdict line."""
        header = ("PROVIDER", "CHECK", "STATUS", "DETAIL", "FIX")
        rows = [(c.provider, c.name, "ok" if c.ok else "MISSING", c.detail, c.fix or "-") for c in self.checks]
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
        lines = []
        for r in [header, *rows]:
            lines.append("  ".join(r[i].ljust(widths[i]) for i in range(4)) + "  " + r[4])
        lines.append("")
        for p in dict.fromkeys(c.provider for c in self.checks):
            lines.append(f"{p}: {'ready' if self.provider_ready(p) else 'not ready'}")
        which = "default provider" if self.default_provider == DEFAULT_PROVIDER else "provider"
        verdict = (
            f"host is ready to run an arena ({which}: {self.default_provider})"
            if self.ready
            else f"host is not ready to run an arena: the {which} ({self.default_provider}) is missing something"
        )
        lines.append(verdict)
        return "\n".join(lines)


def _module_checks(provider: str, target: Any) -> list[DoctorCheck]:
    """The checks of one provider; ``target`` is a callable, ``"module:function"`` or a
    module name (its ``doctor_checks``); ``None``: the provider registered no checks (one
    passing line says so). Failures become failed checks, never exceptions."""
    if target is None:
        return [DoctorCheck(provider, "checks", True, "none registered (nothing to check)", "")]
    try:
        fn = registry.resolve_lazy(target, "doctor_checks")
    except ImportError as err:
        return [DoctorCheck(provider, "provider module", False, f"{target} unavailable: {err}", "./setup.sh")]
    except AttributeError:
        return [DoctorCheck(provider, "provider module", False, f"{target}: no such doctor checks function", "")]
    try:
        return list(fn())
    except Exception as err:  # noqa: BLE001 - the doctor reports, it never crashes
        return [DoctorCheck(provider, "doctor", False, f"check failed: {type(err).__name__}: {err}", "")]


def run_checks(
    providers: Sequence[tuple[str, Any]] | None = None, default_provider: str = DEFAULT_PROVIDER
) -> DoctorReport:
    """Run the doctor checks of ``providers`` (``(name, target)`` pairs as
    :func:`_module_checks` takes; default: every registered provider);
    modules are imported lazily and an absent one is a failed check."""
    if providers is None:
        providers = [(e.name, e.doctor) for e in registry.providers()]
    checks: list[DoctorCheck] = []
    for provider, target in providers:
        checks.extend(_module_checks(provider, target))
    return DoctorReport(tuple(checks), default_provider)


__all__ = ["DEFAULT_PROVIDER", "DoctorReport", "run_checks"]
