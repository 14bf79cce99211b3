"""A fresh install is reproducible and quiet (issue 30, first part).

- ``requirements.lock`` pins every dependency of ``pyproject.toml`` (its ``[test,cluster]``
  extras and the transitive ones too), each with hashes, and ``setup.sh`` installed exactly it;
- no ``aoe`` command prints a Python warning: every module imports under ``-W error`` and real
  ``aoe`` commands, one of them with a plugin that warns at import, leave no warning on stderr.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parent.parent
LOCK = REPO / "requirements.lock"
AOE = Path(sys.executable).with_name("aoe")
FIXTURES = Path(__file__).resolve().parent / "fixtures"

# Python's warning display: "file.py:12: DeprecationWarning: ..." (a category class named
# *Warning); not our own "warning: ..." lines, which are output meant for the operator
WARNING_LINE = re.compile(r"\b[A-Z]\w*Warning\b:")


def _pins() -> dict[str, tuple[str, int]]:
    """``{canonical name: (version, number of hashes)}`` of ``requirements.lock``."""
    pins: dict[str, tuple[str, int]] = {}
    name = None
    for line in LOCK.read_text().splitlines():
        if m := re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\;]+)", line):
            name = canonicalize_name(m.group(1))
            pins[name] = (m.group(2), 0)
        elif name and line.strip().startswith("--hash=sha256:"):
            version, hashes = pins[name]
            pins[name] = (version, hashes + 1)
        elif line and not line.startswith(" "):
            name = None
    return pins


def _declared() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in ("test", "cluster"):
        reqs += project["optional-dependencies"][extra]
    reqs += tomllib.loads((REPO / "pyproject.toml").read_text())["build-system"]["requires"]
    return [Requirement(r) for r in reqs]


def test_the_lock_pins_every_declared_dependency_with_hashes():
    pins = _pins()
    assert len(pins) > 30, "the lock holds transitive dependencies too"
    for req in _declared():
        name = canonicalize_name(req.name)
        assert name in pins, f"requirements.lock does not pin {req.name} (./setup.sh --lock)"
        version, hashes = pins[name]
        assert req.specifier.contains(version, prereleases=True), (
            f"requirements.lock pins {req.name}=={version}, pyproject.toml asks {req}: ./setup.sh --lock"
        )
    unhashed = [n for n, (_, h) in pins.items() if h == 0]
    assert not unhashed, f"pins without a hash: {unhashed}"


def test_the_venv_holds_exactly_what_the_lock_pins():
    """setup.sh installed from the lock: each pinned package is at its pinned version."""
    installed = {
        canonicalize_name(d.metadata["Name"]): d.version for d in importlib.metadata.distributions()
    }
    wrong = {
        name: (version, installed.get(name))
        for name, (version, _) in _pins().items()
        if installed.get(name) != version
    }
    assert not wrong, f"installed versions differ from requirements.lock (name: (lock, venv)): {wrong}"


def test_every_module_imports_without_a_warning():
    """Importing the whole package under ``-W error`` (a deliberate, documented filter such as
    asyncssh's DSA notice in ``aoe_tui/__init__.py`` still applies) raises nothing."""
    code = (
        "import importlib, pkgutil, aoe_tui\n"
        "for m in pkgutil.walk_packages(aoe_tui.__path__, 'aoe_tui.'):\n"
        "    if m.name == 'aoe_tui.serve._ctty':\n"
        "        continue  # run as a script in a spectator's PTY, never imported\n"
        "    importlib.import_module(m.name)\n"
        "try:\n"
        "    import ray, ray.util.state  # the cluster extra, imported when heats go to workers\n"
        "except ImportError:\n"
        "    pass\n"
    )
    proc = subprocess.run(
        [sys.executable, "-W", "error", "-c", code],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not WARNING_LINE.search(proc.stderr), proc.stderr


def _aoe(args: list[str], env_extra: dict[str, str] | None = None, cwd: Path | None = None):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS", "AOE_PLUGINS")}
    env.update(env_extra or {})
    return subprocess.run(
        [str(AOE), *args], cwd=cwd or REPO, env=env, capture_output=True, text=True, timeout=300,
    )


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["arena", "validate", "arenas/first-build"],
        ["doctor"],
        ["cleanup", "--help"],
        ["serve", "--help"],
        ["worker", "--help"],
    ],
    ids=lambda a: " ".join(a),
)
def test_real_aoe_commands_print_no_warning(args):
    proc = _aoe(args)
    assert not WARNING_LINE.search(proc.stderr), f"aoe {' '.join(args)} printed a warning:\n{proc.stderr}"


def test_a_warning_raised_while_aoe_runs_stays_off_the_terminal(tmp_path):
    """A plugin (``AOE_PLUGINS``) that warns at import, as a library with a new deprecation
    would: the command runs and its stderr holds no warning; ``-W``/``PYTHONWARNINGS`` still
    shows it to whoever asks."""
    (tmp_path / "noisy_plugin.py").write_text(
        "import warnings\n"
        "warnings.warn('old_api is deprecated', DeprecationWarning, stacklevel=1)\n"
        "warnings.warn('a library changed its default', FutureWarning, stacklevel=1)\n"
        "warnings.warn('user warning text', UserWarning, stacklevel=1)\n"
        "def register():\n"
        "    pass\n"
    )
    env = {"AOE_PLUGINS": "noisy_plugin:register", "PYTHONPATH": str(tmp_path)}
    proc = _aoe(["arena", "validate", "arenas/first-build"], env)
    assert proc.returncode == 0, proc.stderr
    assert not WARNING_LINE.search(proc.stderr), proc.stderr
    assert "deprecated" not in proc.stderr and "user warning text" not in proc.stderr

    asked = _aoe(["arena", "validate", "arenas/first-build"], {**env, "PYTHONWARNINGS": "default"})
    assert "user warning text" in asked.stderr, asked.stderr
