"""Worker nodes of a Ray cluster on this machine (issue 15 item 2, 4-exposure): ``aoe worker
start/stop``, ``aoe doctor --cluster``, token authentication. One real cluster (a head with
no heat slot and one worker, each a real ``aoe worker start``) serves the tests of this
module, in file order: the last ones kill and restart the worker, then stop it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("ray")

from cluster_support import TestCluster, aoe, leftovers, start_cluster  # noqa: E402


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    t0 = time.monotonic()
    with start_cluster(tmp_path_factory.mktemp("ray"), workers=("w1",)) as c:
        print(f"cluster of 2 nodes up in {time.monotonic() - t0:.1f}s")
        yield c


def test_worker_start_refuses_a_machine_failing_a_doctor_check(tmp_path: Path) -> None:
    """No systemd-nspawn on PATH: one line naming the check, exit 1, and no Ray node started."""
    env = {**os.environ, "PATH": str(tmp_path / "empty")}
    t0 = time.monotonic()
    res = aoe("worker", "start", "--address", "127.0.0.1:9", "--workdir", str(tmp_path / "w"), env=env)
    took = time.monotonic() - t0
    assert res.returncode == 1, res.stderr
    err = res.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("aoe: error: this machine cannot host container territories: "
                                               "systemd-nspawn: not found in PATH"), res.stderr
    assert "fix: apt-get install -y systemd-container" in err[0]
    assert not (tmp_path / "w" / "node.json").exists() and not (tmp_path / "w" / "ray-start.log").exists()
    assert took < 10, took


def test_doctor_lists_nodes_slots_and_readiness(cluster: TestCluster) -> None:
    res = cluster.doctor()
    assert res.returncode == 0, res.stderr
    lines = res.stdout.strip().splitlines()
    ip = cluster.address.rsplit(":", 1)[0]
    assert lines == [
        f"head  {ip}  head  slots 0/0 free  not ready (no heat slot)",
        f"w1  {ip}  worker  slots 1/1 free  ready",
        f"cluster {cluster.address}: 1 of 2 node(s) ready, 1/1 heat slots free",
    ], res.stdout
    # --cluster auto: the cluster of the node aoe worker start runs here (its node.json in
    # the default workdir), not Ray's /tmp/ray
    auto = aoe("doctor", "--cluster", "auto", "--token-file", str(cluster.token_file),
               env=cluster.auto_env(cluster.root / "state"))
    assert auto.returncode == 0, auto.stderr
    assert auto.stdout == res.stdout


_PRIVATE_GONE = """import runpy, sys
import ray._private.state as st
Real = st.GlobalState
class Private(Real):  # Ray makes its own; aoe's code may not (its private GCS tables)
    def __init__(self, *a, **k):
        if "aoe_tui" in sys._getframe(1).f_code.co_filename:
            raise AttributeError("aoe_tui made Ray's private GlobalState")
        super().__init__(*a, **k)
st.GlobalState = Private
del st.available_resources_per_node  # a Ray without the developer per-node function
sys.argv = ["aoe", *sys.argv[1:]]
runpy.run_module("aoe_tui.cli", run_name="__main__")
"""


def test_doctor_reads_the_cluster_through_rays_public_api(cluster: TestCluster) -> None:
    """Issue 30: ``doctor --cluster`` reads nodes and slots with ``ray.init`` /
    ``ray.nodes()`` / ``ray.available_resources()``, not Ray's private GCS tables: it makes
    no ``GlobalState`` of its own, and without the developer per-node function (a Ray where
    it moved) it prints the same lines (w1, the only node with slots, gets the cluster's free
    count)."""
    env = cluster.client_env()
    env["PYTHONPATH"] = str(Path(__file__).resolve().parent.parent) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    res = subprocess.run([sys.executable, "-c", _PRIVATE_GONE, "doctor", "--cluster", cluster.address,
                          "--token-file", str(cluster.token_file)], capture_output=True, text=True, env=env, timeout=180)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout == cluster.doctor().stdout
    assert "w1" in res.stdout and "slots 1/1 free  ready" in res.stdout, res.stdout


def test_a_client_without_the_token_is_refused(cluster: TestCluster, tmp_path: Path) -> None:
    """Wrong token, and no token at all: the cluster refuses the client (about 1 s each), one line."""
    bad = tmp_path / "bad_token"
    bad.write_text("not-the-token")
    bad.chmod(0o600)
    res = aoe("doctor", "--cluster", cluster.address, "--token-file", str(bad))
    assert res.returncode == 1 and f"refused the token in {bad}" in res.stderr, res.stderr
    res = aoe("worker", "start", "--address", cluster.address, "--workdir", str(tmp_path / "w"), "--token-file", str(bad))
    assert res.returncode == 1 and res.stderr.strip() == (
        f"aoe: error: cluster {cluster.address} refused the token in {bad} (not the head's token?)"), res.stderr
    assert not (tmp_path / "w" / "node.json").exists()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    env["HOME"] = str(tmp_path)  # no ~/.ray/auth_token either: a client without any token
    res = aoe("doctor", "--cluster", cluster.address, env=env)
    assert res.returncode == 1 and f"cluster {cluster.address} wants a token: --token-file PATH" in res.stderr, \
        res.stderr
    # (with the token it connects: test_doctor_lists_nodes_slots_and_readiness)
    # the token is in its file only (mode 0600): not in a node's record, ray start's output,
    # nor anywhere in Ray's session folders (logs, port files, sockets' folder)
    token = cluster.token_file.read_bytes().strip()
    assert cluster.token_file.stat().st_mode & 0o777 == 0o600 and len(token) == 64
    scanned = 0
    for node in cluster.nodes:
        rec = node.record()
        assert rec is not None
        for f in [node.workdir / "node.json", node.workdir / "ray-start.log", *Path(rec.temp_dir).rglob("*")]:
            if f.is_file() and not f.is_symlink():
                assert token not in f.read_bytes(), f
                scanned += 1
    assert scanned > 20, scanned


def test_worker_start_refuses_a_token_file_others_can_read(tmp_path: Path) -> None:
    token = tmp_path / "auth_token"
    token.write_text("x" * 64)
    token.chmod(0o644)
    res = aoe("worker", "start", "--address", "127.0.0.1:9", "--workdir", str(tmp_path / "w"),
              "--token-file", str(token))
    assert res.returncode == 1, res.stderr
    assert res.stderr.strip() == (f"aoe: error: {token}: the Ray token is readable by others (mode 644): "
                                  f"chmod 600 {token}"), res.stderr
    assert not (tmp_path / "w" / "node.json").exists()


def _fake_lost_territory(base: Path, ident: str) -> tuple[Path, dict[str, object]]:
    """What a heat's territory leaves when its node dies, where a heat actor keeps it
    (``territories_dir(AOE_WORKER_DIR)/heat-<actor pid>-<tag>/territories/<id>``): a
    ``state.json`` whose owner process is dead, a mounted root, a network namespace and its
    folders (real ones). Returns (the territory's folder, its state)."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    box = base / f"heat-{dead.pid}-t1" / "territories" / ident
    root = box / "root"
    root.mkdir(parents=True)
    (box / "upper").mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "aoe-test", str(root)], check=True)
    netns = f"aoe-t{os.getpid() % 100000}"
    subprocess.run(["ip", "netns", "add", netns], check=True)
    state = {"provider": "container", "id": ident, "heat_id": "round-1-heat-1-attempt-1", "owner_pid": dead.pid,
             "nspawn_pid": None, "leader_pid": None, "root": str(root), "mode": "overlay", "mounts": [str(root)],
             "dirs": [str(box / "upper"), str(root)], "cgroups": [], "lowers": [], "netns": netns,
             "host_veth": None, "address": None, "subnet": None, "launches": 1}
    (box / "state.json").write_text(json.dumps(state))
    return box, state


def test_a_killed_node_restarted_tears_down_what_its_heats_left_before_joining(cluster: TestCluster) -> None:
    w1 = cluster.node("w1")
    killed = cluster.kill_node(w1)
    assert killed and w1.pids() == [] and cluster.head.pids()
    box, state = _fake_lost_territory(w1.territories, "t-w1-seat-a")
    assert leftovers(cluster)["mounts"] and Path(f"/run/netns/{state['netns']}").exists()
    t0 = time.monotonic()
    res = cluster.restart_node(w1)
    took = time.monotonic() - t0
    out = res.stdout.splitlines()
    removed = next(i for i, ln in enumerate(out) if ln.startswith("removed 1 territory lost heats left"))
    joined = next(i for i, ln in enumerate(out) if ln.startswith("node w1 joined"))
    assert removed < joined, out
    assert not Path(f"/run/netns/{state['netns']}").exists()
    assert not (box / "state.json").exists() and not (box / "root").exists()
    assert leftovers(cluster)["mounts"] == [] and leftovers(cluster)["territories"] == []
    assert w1.pids()
    lines = cluster.doctor().stdout.splitlines()  # w1 shown once: alive again (its dead self hidden)
    assert lines[1].startswith("w1  ") and lines[1].endswith("slots 1/1 free  ready") and len(lines) == 3, lines
    print(f"restart with cleanup: {took:.1f}s")


def test_worker_stop_stops_only_its_own_node(cluster: TestCluster) -> None:
    """Stopping w1 ends w1's processes only: the head, another Ray node on this machine,
    keeps all of its own; the cluster then shows w1 dead."""
    w1 = cluster.node("w1")
    head_pids = cluster.head.pids()
    assert w1.pids() and head_pids
    t0 = time.monotonic()
    res = cluster.stop_node(w1)
    took = time.monotonic() - t0
    assert "node w1 stopped" in res.stdout
    assert w1.pids() == [] and w1.record() is None
    assert set(head_pids) <= set(cluster.head.pids())
    lines = cluster.doctor().stdout.splitlines()
    assert lines[1:] == [f"w1  {cluster.address.rsplit(':', 1)[0]}  worker  slots 0/0 free  not ready (dead)",
                         f"cluster {cluster.address}: 0 of 2 node(s) ready, 0/0 heat slots free"], lines
    print(f"worker stop: {took:.1f}s")
