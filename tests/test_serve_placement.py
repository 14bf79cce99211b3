"""Where spectators run: CPU sets, priorities, and the ``_ctty.py`` helper applying them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from aoe_tui.serve.placement import Placement, default_cpus, parse_cpus

HELPER = Path(__file__).resolve().parent.parent / "aoe_tui" / "serve" / "_ctty.py"


def test_default_cpus_leave_the_lower_half_to_the_race():
    assert default_cpus({0}) == {0}
    assert default_cpus({0, 1}) == {1}
    assert default_cpus({0, 1, 2}) == {2}
    assert default_cpus(set(range(8))) == {4, 5, 6, 7}
    assert default_cpus({2, 5, 9, 11}) == {9, 11}


def test_parse_cpus_names_the_bad_part():
    usable = sorted(os.sched_getaffinity(0))
    assert parse_cpus("all") is None
    assert parse_cpus(str(usable[-1])) == {usable[-1]}
    assert parse_cpus(f"{usable[0]}-{usable[-1]}") == set(usable)
    with pytest.raises(ValueError, match="'x' is not a CPU number"):
        parse_cpus(f"{usable[0]},x")
    with pytest.raises(ValueError, match="'3-1' is not a CPU number"):
        parse_cpus("3-1")
    with pytest.raises(ValueError, match="CPU 4096 is not available here"):
        parse_cpus("4096")


def test_ctty_args():
    assert Placement(frozenset({1, 3}), "idle").ctty_args() == ["--cpus", "1,3", "--priority", "idle", "--"]
    assert Placement(None, "normal").ctty_args() == ["--"]


@pytest.mark.parametrize("priority", ["idle", "low"])
def test_ctty_helper_applies_the_placement_before_exec(priority):
    """The helper (run the way the server runs it, with a PTY as stdin) places itself and
    execs the command, which sees the placement."""
    cpu = max(os.sched_getaffinity(0))
    probe = ("import os; print(os.sched_getscheduler(0) == os.SCHED_IDLE, os.getpriority(os.PRIO_PROCESS, 0), "
             "sorted(os.sched_getaffinity(0)))")
    master, slave = os.openpty()
    try:
        out = subprocess.run([sys.executable, "-I", "-S", str(HELPER), *Placement(frozenset({cpu}), priority).ctty_args(),
                              sys.executable, "-c", probe], stdin=slave, capture_output=True, text=True,
                             start_new_session=True, timeout=30)
    finally:
        os.close(slave)
        os.close(master)
    assert out.returncode == 0, out.stderr
    idle, nice, cpus = out.stdout.split(" ", 2)
    assert cpus.strip() == f"[{cpu}]"
    if priority == "idle":
        assert idle == "True"
    else:
        assert idle == "False" and int(nice) >= 10


def test_serve_refuses_an_unusable_cpu_in_one_line(tmp_path):
    r = subprocess.run([sys.executable, "-m", "aoe_tui.cli", "serve", str(tmp_path), "--authorized-keys",
                        str(tmp_path / "k"), "--cpus", "4096"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0
    assert "--cpus 4096: CPU 4096 is not available here" in r.stderr
