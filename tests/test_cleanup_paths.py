"""``aoe cleanup PATH`` finds a territories folder however PATH names it: ``.`` inside it,
a link to it under another name, a provider workdir of another name holding territory
records. The real container provider's cleanup runs on real state files of a runner that
is gone (no container behind them: its cleanup has nothing to stop and removes the record)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _gone_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def _stale(tdir: Path, *ids: str) -> None:
    for ident in ids:
        (tdir / ident).mkdir(parents=True)
        (tdir / ident / "state.json").write_text(json.dumps(
            {"provider": "container", "id": ident, "owner_pid": _gone_pid()}))


def _cleanup(path: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "aoe_tui.cli", "cleanup", path], cwd=cwd, capture_output=True,
                          text=True, timeout=120, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})


@pytest.mark.parametrize("how", ["dot", "link", "workdir"])
def test_cleanup_of_a_territories_folder_removes_its_stale_territories(tmp_path, how):
    tdir = tmp_path / "match" / ("work" if how == "workdir" else "territories")
    _stale(tdir, "builder-one", "builder-two")
    if how == "dot":
        res = _cleanup(".", cwd=tdir)
    elif how == "link":
        (tmp_path / "mine").symlink_to(tdir)
        res = _cleanup("mine", cwd=tmp_path)
    else:
        res = _cleanup(str(tdir), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[-1].startswith("2 stale territories removed under ")
    assert not list(tdir.glob("*/state.json"))


def test_cleanup_of_a_match_folder_still_finds_its_territories(tmp_path):
    _stale(tmp_path / "season" / "round-1" / "heat-1" / "attempt-1" / "territories", "builder-one")
    res = _cleanup("season", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[-1] == "1 stale territory removed under season"
