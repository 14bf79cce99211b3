"""Shared pytest fixtures: repository paths, the reference fixtures folder, the guest image."""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

import pytest
from hypothesis import settings

REPO_ROOT = Path(__file__).resolve().parent.parent

# Tests that run an arena's verifiers (or source its verify/lib.sh) by hand give them the
# runner's verifier toolkit as the referee does (aoe_tui.referee.verifier.verifier_env, which
# test_verifier_runner holds to it).
os.environ.setdefault("AOE_TUI_VERIFY_KIT", str(REPO_ROOT / "aoe_tui" / "referee" / "kit" / "verify.sh"))


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


class DemoRun:
    """``seasons/demo.toml`` run locally through the real CLI (``aoe run DEMO --output OUT
    --site OUT/../site``: the cup site kept after every heat; its own process, its output in
    ``OUT/../run.log``), once per test session: :meth:`start`
    starts it (once), :meth:`wait` waits for it (starting it if need be) and returns the
    season folder, checking it exited 0 with ``season finished``. A test can start it, do
    its own work alongside (``tests/test_cluster_season.py`` runs the same season on a
    cluster), then wait."""

    __test__ = False

    def __init__(self, root: Path) -> None:
        self.out = Path(root) / "season"
        #: the season's cup site (``aoe run --site``)
        self.site = Path(root) / "site"
        self.log = Path(root) / "run.log"
        self.proc: subprocess.Popen[bytes] | None = None
        #: wall time of the run (s), once it ended
        self.seconds: float | None = None
        self._reaper: threading.Thread | None = None

    def start(self) -> None:
        if self.proc is not None:
            return
        import sys
        import time

        t0 = time.monotonic()
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "aoe_tui.cli", "run",
                                          str(REPO_ROOT / "seasons" / "demo.toml"), "--output", str(self.out),
                                          "--site", str(self.site)],
                                         cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT)

        def reap(proc: subprocess.Popen[bytes] = self.proc) -> None:
            proc.wait()
            self.seconds = time.monotonic() - t0

        self._reaper = threading.Thread(target=reap, daemon=True)
        self._reaper.start()

    def wait(self, timeout: float = 900) -> Path:
        self.start()
        assert self.proc is not None and self._reaper is not None
        self._reaper.join(timeout)
        if self._reaper.is_alive():
            self.stop()
            self._reaper.join()
        said = self.log.read_text(errors="replace")
        assert self.proc.returncode == 0, f"aoe run demo exited {self.proc.returncode}:\n{said[-3000:]}"
        assert "season finished" in said
        return self.out

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="session")
def demo_local(tmp_path_factory, guest_image):
    """The session's :class:`DemoRun` (not yet started; stopped at the session's end).
    Skips where container territories cannot run (root, systemd-nspawn)."""
    import shutil

    if os.geteuid() != 0 or shutil.which("systemd-nspawn") is None:
        pytest.skip("container seasons need root and systemd-nspawn")
    run = DemoRun(tmp_path_factory.mktemp("demo"))
    yield run
    run.stop()


@pytest.fixture(scope="session")
def demo_run(demo_local: DemoRun) -> Path:
    """The season folder of the session's local run of ``seasons/demo.toml`` (7 entrants,
    league, ``concurrent_heats = 2``; :class:`DemoRun`), run once for every test that needs it."""
    return demo_local.wait()


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
