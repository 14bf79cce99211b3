"""``aoe doctor``: what each territory provider needs, what is present, and how to fix it.

Collects :class:`~aoe_tui.runtime.provider.DoctorCheck` lines from every provider
module's ``doctor_checks()`` (``container``, ``qemu``, ``ssh``, ``nixos``). The host is
*ready* when every check of the default provider (``container``) passes; the other
providers are reported for information. Upstream's ``doctor`` (spec §6.7) only checks
``nix``/``qemu-system-x86_64``/``ssh`` on PATH; its JSON shape ``{ready, checks:[...]}``
is kept, each check carrying upstream's ``name``/``available``/``detail`` plus
``provider`` and ``fix``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from aoe_tui.runtime.provider import DoctorCheck

#: Provider used by ``aoe demo``, tests and ``aoe match run`` without ``--provider``.
DEFAULT_PROVIDER = "container"
#: ``(provider name, module)`` in report order.
PROVIDER_MODULES: tuple[tuple[str, str], ...] = (
    ("container", "aoe_tui.runtime.container"),
    ("qemu", "aoe_tui.runtime.qemu"),
    ("ssh", "aoe_tui.runtime.sshhosts"),
    ("nixos", "aoe_tui.runtime.nixos"),
)


@dataclass(frozen=True)
class DoctorReport:
    """All doctor checks plus the verdict.

    Attributes:
        checks: every check, grouped by provider in :data:`PROVIDER_MODULES` order.
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
        which = "default provider" if self.default_provider == "container" else "provider"
        verdict = (
            f"host is ready to run an arena ({which}: {self.default_provider})"
            if self.ready
            else f"host is not ready to run an arena: the {which} ({self.default_provider}) is missing something"
        )
        lines.append(verdict)
        return "\n".join(lines)


def _module_checks(provider: str, module_name: str) -> list[DoctorCheck]:
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        return [DoctorCheck(provider, "provider module", False, f"{module_name} unavailable: {err}", "./setup.sh")]
    fn: Callable[[], list[DoctorCheck]] | None = getattr(module, "doctor_checks", None)
    if fn is None:
        return [DoctorCheck(provider, "provider module", False, f"{module_name} has no doctor_checks()", "")]
    try:
        return list(fn())
    except Exception as err:  # noqa: BLE001 - the doctor reports, it never crashes
        return [DoctorCheck(provider, "doctor", False, f"check failed: {type(err).__name__}: {err}", "")]


def run_checks(
    providers: Sequence[tuple[str, str]] = PROVIDER_MODULES, default_provider: str = DEFAULT_PROVIDER
) -> DoctorReport:
    """Run every provider's ``doctor_checks()`` (modules imported lazily; absence is a failed check)."""
    checks: list[DoctorCheck] = []
    for provider, module_name in providers:
        checks.extend(_module_checks(provider, module_name))
    return DoctorReport(tuple(checks), default_provider)


__all__ = ["DEFAULT_PROVIDER", "PROVIDER_MODULES", "DoctorReport", "run_checks"]
