"""``aoe doctor``: per-provider checks, fixes, JSON shape and exit status (real CLI, real host)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from aoe_tui.runtime.doctor import DoctorReport, run_checks
from aoe_tui.runtime.provider import DoctorCheck

REPO = Path(__file__).resolve().parent.parent


def _aoe(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "aoe_tui.cli", *args], capture_output=True, text=True, cwd=REPO, env=env, timeout=60
    )


def test_report_ready_follows_default_provider() -> None:
    checks = (
        DoctorCheck("container", "systemd-nspawn", True, "/usr/bin/systemd-nspawn"),
        DoctorCheck("container", "guest image", False, "not built", "aoe image build"),
        DoctorCheck("nixos", "nix", False, "not found in PATH", "install nix"),
    )
    rep = DoctorReport(checks)
    assert not rep.ready
    text = rep.to_text()
    assert "MISSING" in text and "aoe image build" in text and "host is not ready to run an arena" in text
    data = rep.to_json()
    assert data["ready"] is False and data["providers"] == {"container": False, "nixos": False}
    assert data["checks"][1] == {
        "provider": "container", "name": "guest image", "available": False, "ok": False,
        "detail": "not built", "fix": "aoe image build",
    }  # fmt: skip
    assert DoctorReport(checks[:1]).ready


def test_missing_module_is_reported_not_raised() -> None:
    rep = run_checks((("container", "aoe_tui.runtime.no_such_module"), ("qemu", "aoe_tui.runtime.qemu")))
    first = rep.checks[0]
    assert first.provider == "container" and not first.ok and "unavailable" in first.detail
    assert not rep.ready
    assert any(c.provider == "qemu" for c in rep.checks)


def test_cli_json_on_this_host() -> None:
    res = _aoe("doctor", "--json")
    data = json.loads(res.stdout)
    assert set(data) >= {"ready", "checks"}
    providers = {c["provider"] for c in data["checks"]}
    assert providers == {"container", "qemu", "ssh", "nixos"}
    for c in data["checks"]:
        assert set(c) == {"provider", "name", "available", "ok", "detail", "fix"}
        if not c["ok"] and c["provider"] != "ssh":
            assert c["fix"], f"{c['provider']}/{c['name']} is missing but names no fix"
    assert res.returncode == (0 if data["ready"] else 1)
    nix = next(c for c in data["checks"] if c["provider"] == "nixos" and c["name"] == "nix")
    assert nix["ok"] == (subprocess.run(["sh", "-c", "command -v nix"], capture_output=True).returncode == 0)


def test_cli_without_tools_says_what_fixes_it(tmp_path: Path) -> None:
    """With an empty PATH every binary is missing: exit 1, and each missing line names a fix."""
    env = {**os.environ, "PATH": str(tmp_path)}
    res = _aoe("doctor", env=env)
    assert res.returncode == 1
    out = res.stdout
    assert "host is not ready to run an arena" in out
    line = next(ln for ln in out.splitlines() if ln.startswith("qemu") and "qemu-system-x86_64" in ln)
    assert "MISSING" in line and "./setup.sh" in line
    nspawn = next(ln for ln in out.splitlines() if ln.startswith("container") and "systemd-nspawn" in ln)
    assert "MISSING" in nspawn


def test_cli_unknown_provider() -> None:
    res = _aoe("doctor", "--provider", "vmware")
    assert res.returncode == 2 and "aoe: error: doctor: unknown provider 'vmware'" in res.stderr


def test_cli_provider_selects_exit_status() -> None:
    res = _aoe("doctor", "--provider", "nixos", "--json")
    data = json.loads(res.stdout)
    assert data["default_provider"] == "nixos"
    assert res.returncode == (0 if data["providers"]["nixos"] else 1)
