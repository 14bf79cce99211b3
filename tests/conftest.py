"""Shared pytest fixtures: repository paths, the reference fixtures folder, the guest image."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

REPO_ROOT = Path(__file__).resolve().parent.parent


def _on_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


# Property tests: CI runs hypothesis derandomized (the same examples on every run, no
# example database), so a red CI run names a real, reproducible case and an unrelated
# change cannot turn CI red by chance. Local runs keep exploring new examples and replay
# failures from .hypothesis/. HYPOTHESIS_PROFILE=ci reproduces CI's choice locally.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("dev", print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if _on_ci() else "dev"))


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The repository root (holds ``arenas/``, ``verify/``, ``seasons/``)."""
    return REPO_ROOT


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    """``tests/fixtures``: published upstream match artifacts and the seed bundle (read-only)."""
    return REPO_ROOT / "tests" / "fixtures"


@pytest.fixture(scope="session")
def guest_image():
    """The Debian territory guest image, built once and cached (``aoe image build``).

    Returns an ``aoe_tui.runtime.image.GuestImage``. Building takes about two
    minutes the first time on a new machine; later runs reuse the cache.
    """
    from aoe_tui.runtime.image import ensure_image

    return ensure_image()


# Skips that are about the machine, not about the test: on CI (CI=true, where setup.sh has
# installed everything and we run as root) a test that would skip for a missing tool, root or
# image has not proved anything, so it fails instead. Skips that describe the host's hardware
# (e.g. "not a kvm_pvm host") stay skips everywhere.
_HARDWARE_SKIPS = ("kvm_pvm",)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not report.skipped or not _on_ci():
        return
    if hasattr(report, "wasxfail"):
        return
    reason = str(report.longrepr[2]) if isinstance(report.longrepr, tuple) else str(report.longrepr)
    if any(h in reason for h in _HARDWARE_SKIPS):
        return
    report.outcome = "failed"
    report.longrepr = f"skipped on CI, where every requirement must be present: {reason}"


@pytest.fixture(scope="session", autouse=True)
def _verifier_scratch_removed():
    """Tests that call ``run_verifier`` outside a heat never reach the heat end that removes
    the verifiers' ``TMPDIR``; remove this test process's folders when the session ends."""
    yield
    import shutil
    import tempfile

    from aoe_tui.referee.verifier import TMPDIR_PREFIX

    for d in Path(tempfile.gettempdir()).glob(f"{TMPDIR_PREFIX}{os.getpid()}-*"):
        shutil.rmtree(d, ignore_errors=True)
