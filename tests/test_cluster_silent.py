"""A heat whose worker node is alive but silent (issue 30, item 8), and what each node ran
a heat with (item 7), on a real two-node Ray cluster on this machine.

The cluster (``head`` and worker ``w1``, one heat slot each, the real ``aoe worker start``):
a season of one heat runs with ``--cluster`` and ``AOE_CLUSTER_SILENT_S=6``; a driver holds
the head's slot so attempt 1 lands on ``w1``. Once that heat races, its heat actor's process
is stopped (SIGSTOP: the node and the process are alive, nothing comes from them). The runner
gives the node up within the bound (6 s of silence; the actor sends a heartbeat every 1 s
while its heat runs), spoils the attempt as an infrastructure failure naming ``w1``, and
places attempt 2 elsewhere (``head``) although ``w1``'s slot is free again by then (the
runner killed the stopped actor). Nothing the stopped actor could still have sent is in the
attempt's log: the runner's ``events.jsonl`` of attempt 1 ends where the silence began.
Each ``attempt_placed`` records the node's code revision and guest image digest (here the
same checkout and image as the runner: the same values the test computes).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install -e '.[cluster]'; setup.sh installs it)")

from cluster_support import cluster_fixture  # noqa: E402

from aoe_tui.replay.season_log import read_season_log  # noqa: E402
from aoe_tui.replay.season_reducer import reduce_season  # noqa: E402

pytestmark = [pytest.mark.container]

REPO = Path(__file__).resolve().parent.parent
ARENA = REPO / "arenas" / "first-build" / "arena.toml"
SILENT_S = 6

HOLD = """import os, sys, time, ray
ray.init(address=sys.argv[1], log_to_driver=False, logging_level="ERROR")
@ray.remote(num_cpus=0, resources={"aoe_heat_slot": 1})
class Hold:
    def node(self):
        return os.environ.get("AOE_WORKER_NAME")
hs = [Hold.remote() for _ in range(2)]
names = ray.get([h.node.remote() for h in hs])
for h, n in zip(hs, names):
    if n != sys.argv[2]:
        ray.kill(h)
print("held", flush=True)
time.sleep(3600)
"""


@pytest.fixture(scope="module", autouse=True)
def _host(guest_image):
    if os.geteuid() != 0 or shutil.which("systemd-nspawn") is None:
        pytest.skip("container heats need root and systemd-nspawn")


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    yield from cluster_fixture(tmp_path_factory.mktemp("ray"), workers=("w1",), head_slots=1)


def _season(tmp_path: Path) -> Path:
    f = tmp_path / "s.toml"
    f.write_text(f'id = "sil"\nlabel = "x"\narena = "{ARENA}"\nseed = 5\nmax_attempts = 2\n'
                 'concurrent_heats = 1\ndrain_seconds = 2\n[provider]\nkind = "container"\nready_timeout_s = 90\n'
                 '[arena_overrides]\nduration_seconds = 15\nminimum_territories = 2\n'
                 '[format]\nkind = "league"\nheats_per_entrant = 1\n'
                 '[[entrants]]\nid = "oracle"\nadapter = "oracle"\nmodel = "oracle"\n'
                 '[[entrants]]\nid = "memory"\nadapter = "scripted:memory"\nmodel = "scripted-memory"\n')
    return f


def _lines(out: Path) -> list[dict]:
    try:
        return [json.loads(x) for x in (out / "season.jsonl").read_text().splitlines() if x.strip()]
    except (OSError, ValueError):
        return []


def _racing_on(out: Path, node: str) -> Path | None:
    lines = _lines(out)
    folders = {(x["round"], x["heat"], x["attempt"]): x["folder"] for x in lines if x["kind"] == "attempt_started"}
    for x in lines:
        if x["kind"] == "attempt_placed" and x["node"] == node:
            log = out / folders[(x["round"], x["heat"], x["attempt"])] / "events.jsonl"
            if log.is_file() and "milestone_" in log.read_text():
                return log.parent
    return None


def _heat_actor_pid(node) -> int | None:
    """The pid of the node's process running a ``HeatActor`` (Ray names its workers
    ``ray::HeatActor...``), or None."""
    for pid in node.pids():
        with contextlib.suppress(OSError):
            if b"ray::HeatActor" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
    return None


def _wait_for(pred, proc: subprocess.Popen, timeout: float, what: str):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = pred()
        if got:
            return got
        if proc.poll() is not None:
            raise AssertionError(f"runner exited ({proc.returncode}) before {what}:\n{proc.stdout.read()[-3000:]}")
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_silent_heat_actor_is_given_up_within_the_bound_and_its_heat_rerun_elsewhere(nodes, tmp_path):
    from aoe_tui.cluster import code_revision, image_digest

    out = tmp_path / "season"
    env = {**nodes.client_env(), "PYTHONPATH": str(REPO), "AOE_CLUSTER_SILENT_S": str(SILENT_S)}
    hold = subprocess.Popen([sys.executable, "-c", HOLD, nodes.address, "head"], stdout=subprocess.PIPE, text=True,
                            env=env)
    stopped: int | None = None
    p = None
    try:
        assert hold.stdout.readline().strip() == "held"  # attempt 1 goes to w1
        p = subprocess.Popen([sys.executable, "-m", "aoe_tui.cli", "run", str(_season(tmp_path)), "--output",
                              str(out), "--headless", "--cluster", nodes.address], cwd=REPO, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        first = _wait_for(lambda: _racing_on(out, "w1"), p, 180, "a heat racing on w1")
        hold.kill()
        hold.wait()
        stopped = _heat_actor_pid(nodes.node("w1"))
        assert stopped is not None, "w1's heat actor process"
        os.kill(stopped, signal.SIGSTOP)
        t0 = time.monotonic()
        # given up within the bound (plus what one batch in flight and the next line take)
        _wait_for(lambda: any(x["kind"] == "attempt_finished" for x in _lines(out)), p, SILENT_S + 10,
                  "attempt 1 given up")
        given_up = time.monotonic() - t0
        size = (first / "events.jsonl").stat().st_size
        # let the stopped actor go on, if Ray has not ended it yet: whatever it sends now is late
        with contextlib.suppress(ProcessLookupError):
            os.kill(stopped, signal.SIGCONT)
        text, _ = p.communicate(timeout=300)
    finally:
        if stopped is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(stopped, signal.SIGCONT)
        if hold.poll() is None:
            hold.kill()
            hold.wait()
        if p is not None and p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, text[-3000:]
    assert SILENT_S - 1 <= given_up <= SILENT_S + 10, given_up
    state = reduce_season(read_season_log(out / "season.jsonl"))
    (heat,) = state.heats()
    a1, a2 = heat.attempts
    assert a1.node == "w1" and a1.finished.outcome == "retry" and a1.finished.failure_source == "provider"
    assert "worker node w1 went silent" in a1.finished.detail and f"{SILENT_S} s" in a1.finished.detail, a1.finished.detail
    # placed elsewhere, though w1's slot was free again (its stopped actor killed)
    assert a2.node == "head" and a2.finished.outcome == "counted" and heat.result is not None
    # nothing late from the silent node was written: the attempt's log is as it was when the
    # attempt was given up (complete lines, no match_finished)
    log = (first / "events.jsonl").read_bytes()
    assert len(log) == size and log.endswith(b"\n") and b'"match_finished"' not in log
    # each placement records what the node ran the heat with (here: the runner's own)
    placed = [x for x in _lines(out) if x["kind"] == "attempt_placed"]
    assert [(x["node"], x["code_revision"], x["image_digest"]) for x in placed] == [
        ("w1", code_revision(), image_digest()), ("head", code_revision(), image_digest())]
    assert "runs code revision" not in text
