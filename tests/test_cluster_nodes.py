"""Worker nodes of a Ray cluster on this machine (issue 15 item 2, 4-exposure): ``aoe worker
start/stop``, ``aoe doctor --cluster``, token authentication. One real cluster (a head with
no heat slot and two workers, each a real ``aoe worker start``) serves the tests of this
module; the ones that change it (stop, restart) run last and leave it as they found it."""

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
    with start_cluster(tmp_path_factory.mktemp("ray"), workers=("w1", "w2")) as c:
        print(f"cluster of 3 nodes up in {time.monotonic() - t0:.1f}s")
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
    assert [ln.split("  ")[0] for ln in lines[:3]] == ["head", "w1", "w2"], res.stdout
    assert lines[0].endswith("head  slots 0/0 free  not ready (no heat slot)")
    assert lines[1].endswith("worker  slots 1/1 free  ready") and lines[2].endswith("worker  slots 1/1 free  ready")
    assert lines[3] == f"cluster {cluster.address}: 2 of 3 node(s) ready, 2/2 heat slots free"
    js = json.loads(aoe("doctor", "--cluster", cluster.address, "--json", "--token-file", str(cluster.token_file),
                        env=cluster.client_env()).stdout)
    assert js["ready"] is True and [(n["name"], n["aoe"], n["slots_total"]) for n in js["nodes"]] == [
        ("head", True, 0), ("w1", True, 1), ("w2", True, 1)]


def test_a_client_without_the_token_is_refused(cluster: TestCluster, tmp_path: Path) -> None:
    """Wrong token, and no token at all: the cluster refuses the connection (about 1 s each)."""
    bad = tmp_path / "bad_token"
    bad.write_text("not-the-token")
    bad.chmod(0o600)
    res = aoe("doctor", "--cluster", cluster.address, "--token-file", str(bad))
    assert res.returncode == 1 and f"refused the token in {bad}" in res.stderr, res.stderr
    probe = (f"from ray._raylet import GcsClient\n"
             f"try:\n    GcsClient(address={cluster.address!r})\n"
             f"except Exception as e:\n    print(type(e).__name__)\nelse:\n    print('connected')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    env["HOME"] = str(tmp_path)  # no ~/.ray/auth_token either
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=60)
    assert out.stdout.strip() == "AuthenticationError", out.stdout + out.stderr
    good = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          env=cluster.client_env(env), timeout=60)
    assert good.stdout.strip() == "connected", good.stdout + good.stderr
    # the token is in its file only (mode 0600), never in a node's record or ray start's output
    token = cluster.token_file.read_text()
    assert cluster.token_file.stat().st_mode & 0o777 == 0o600
    for node in cluster.nodes:
        for name in ("node.json", "ray-start.log"):
            assert token not in (node.workdir / name).read_text()


def test_worker_stop_stops_only_its_own_node(cluster: TestCluster) -> None:
    w1, w2 = cluster.node("w1"), cluster.node("w2")
    head_pids, w2_pids = cluster.head.pids(), w2.pids()
    assert w1.pids() and w2_pids and head_pids
    res = cluster.stop_node(w1)
    assert "node w1 stopped" in res.stdout
    assert w1.pids() == [] and w1.record() is None
    assert set(w2_pids) <= set(w2.pids()) and set(head_pids) <= set(cluster.head.pids())
    lines = cluster.doctor().stdout.splitlines()
    assert any(ln.startswith("w1  ") and ln.endswith("not ready (dead)") for ln in lines), lines
    assert any(ln.startswith("w2  ") and ln.endswith("ready") and "slots 1/1" in ln for ln in lines), lines
    cluster.restart_node(w1)


def _fake_lost_territory(tdir: Path, ident: str) -> dict[str, object]:
    """What a heat's territory leaves when its node dies: a ``state.json`` whose owner
    process is dead, a mounted root, a network namespace and its folders (real ones)."""
    tdir.mkdir(parents=True, exist_ok=True)
    box = tdir / ident
    root = box / "root"
    root.mkdir(parents=True)
    (box / "upper").mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "aoe-test", str(root)], check=True)
    netns = f"aoe-t{os.getpid() % 100000}"
    subprocess.run(["ip", "netns", "add", netns], check=True)
    dead = subprocess.Popen(["true"])
    dead.wait()
    state = {"provider": "container", "id": ident, "heat_id": "round-1-heat-1-attempt-1", "owner_pid": dead.pid,
             "nspawn_pid": None, "leader_pid": None, "root": str(root), "mode": "overlay", "mounts": [str(root)],
             "dirs": [str(box / "upper"), str(root)], "cgroups": [], "lowers": [], "netns": netns,
             "host_veth": None, "address": None, "subnet": None, "launches": 1}
    (box / "state.json").write_text(json.dumps(state))
    return state


def test_a_killed_node_restarted_tears_down_what_its_heats_left_before_joining(cluster: TestCluster) -> None:
    w2 = cluster.node("w2")
    killed = cluster.kill_node(w2)
    assert killed and w2.pids() == []
    state = _fake_lost_territory(w2.territories, "t-w2-seat-a")
    assert leftovers(cluster)["mounts"] and Path(f"/run/netns/{state['netns']}").exists()
    # the cluster stays usable without w2
    assert cluster.doctor().returncode == 0
    t0 = time.monotonic()
    res = cluster.restart_node(w2)
    took = time.monotonic() - t0
    out = res.stdout.splitlines()
    removed = next(i for i, ln in enumerate(out) if ln.startswith("removed 1 territory lost heats left"))
    joined = next(i for i, ln in enumerate(out) if ln.startswith("node w2 joined"))
    assert removed < joined, out
    assert not Path(f"/run/netns/{state['netns']}").exists()
    assert not (w2.territories / "t-w2-seat-a" / "state.json").exists()
    assert not (w2.territories / "t-w2-seat-a" / "root").exists()
    assert leftovers(cluster)["mounts"] == [] and leftovers(cluster)["territories"] == []
    assert "w2  " in cluster.doctor().stdout and w2.pids()
    print(f"restart with cleanup: {took:.1f}s")
