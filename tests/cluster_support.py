"""A Ray cluster of several nodes on this one machine, started with the real ``aoe worker start``.

For the cluster tests (issue 15). Every node is a real ``aoe worker start`` (doctor checks,
leftover cleanup, ``ray start`` with token authentication) with its own workdir, Ray temp
dir and ports; the head offers ``head_slots`` heat slots (default 0: it only coordinates, so
killing a worker never kills the cluster) and each worker ``worker_slots``.

Usage::

    from cluster_support import aoe, start_cluster

    with start_cluster(tmp_path, workers=("w1", "w2")) as cluster:
        env = cluster.client_env()          # RAY_AUTH_MODE/RAY_AUTH_TOKEN_PATH for a runner
        aoe("run", season, "--cluster", cluster.address, env=env)
        cluster.kill_node(cluster.node("w1"))   # SIGKILL its Ray processes, not its territories
        cluster.restart_node(cluster.node("w1"))  # aoe worker start again: cleans up, then joins
    # leaving the block stops every node (aoe worker stop) and checks nothing is left

A session-wide fixture can share one cluster between tests (``cluster_fixture``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from aoe_tui.cluster import territories_dir
from aoe_tui.cluster.node import ENV_AUTH_TOKEN, NodeRecord, auth_env, node_pids, ray_temp_dir

REPO = Path(__file__).resolve().parent.parent


def aoe(*args: str, env: dict[str, str] | None = None, timeout: float = 180,
        check: bool = False) -> subprocess.CompletedProcess[str]:
    """Run ``python -m aoe_tui.cli ARGS`` from this checkout (PYTHONPATH first) and capture it."""
    full = dict(env if env is not None else os.environ)
    full["PYTHONPATH"] = str(REPO) + (os.pathsep + full["PYTHONPATH"] if full.get("PYTHONPATH") else "")
    res = subprocess.run([sys.executable, "-m", "aoe_tui.cli", *args], capture_output=True, text=True, cwd=REPO,
                         env=full, timeout=timeout)
    if check and res.returncode != 0:
        raise AssertionError(f"aoe {' '.join(args)} exited {res.returncode}:\n{res.stdout}\n{res.stderr}")
    return res


@dataclass
class Node:
    """One node of the test cluster (its name, workdir, role and slots)."""

    name: str
    workdir: Path
    head: bool
    slots: int

    def record(self) -> NodeRecord | None:
        """Its ``node.json`` (None while stopped/never started)."""
        return NodeRecord.read(self.workdir)

    def pids(self) -> list[int]:
        """Its live Ray processes (the session of its ``ray start``); [] when down."""
        rec = self.record()
        return node_pids(rec) if rec is not None else []

    @property
    def territories(self) -> Path:
        """Where its heats keep their territories (``aoe_tui.cluster.territories_dir``)."""
        return territories_dir(self.workdir)


@dataclass
class TestCluster:
    """A head and its workers on this machine; see the module docstring."""

    __test__ = False  # not a test class for pytest

    root: Path
    token_file: Path
    head: Node
    workers: list[Node] = field(default_factory=list)
    address: str = ""

    @property
    def nodes(self) -> list[Node]:
        return [self.head, *self.workers]

    def node(self, name: str) -> Node:
        """The node called ``name``."""
        return next(n for n in self.nodes if n.name == name)

    def client_env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """An environment for a client of this cluster (``aoe run --cluster``, ``aoe doctor
        --cluster``): the token by its file, never the token itself."""
        env = {k: v for k, v in (base if base is not None else os.environ).items() if k != ENV_AUTH_TOKEN}
        env.update(auth_env(self.token_file))
        return env

    def auto_env(self, state_home: Path, base: dict[str, str] | None = None) -> dict[str, str]:
        """:meth:`client_env` for ``--cluster auto``: ``XDG_STATE_HOME=state_home`` holding a
        copy of the head's ``node.json`` where ``aoe worker start`` without ``--workdir``
        keeps it (``aoe-tui/worker/``), as on a machine whose node runs with the default
        workdir; no ``RAY_ADDRESS``."""
        default = Path(state_home) / "aoe-tui" / "worker"
        default.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self.head.workdir / "node.json", default / "node.json")
        env = {k: v for k, v in self.client_env(base).items() if k != "RAY_ADDRESS"}
        env["XDG_STATE_HOME"] = str(state_home)
        return env

    def start_args(self, node: Node) -> list[str]:
        """``aoe worker start`` arguments for ``node``."""
        args = ["worker", "start", "--workdir", str(node.workdir), "--name", node.name, "--slots", str(node.slots),
                "--token-file", str(self.token_file)]
        return args + (["--head", "--port", "0"] if node.head else ["--address", self.address])

    def doctor(self) -> subprocess.CompletedProcess[str]:
        """``aoe doctor --cluster ADDRESS`` with the token."""
        return aoe("doctor", "--cluster", self.address, "--token-file", str(self.token_file), env=self.client_env())

    def kill_node(self, node: Node) -> list[int]:
        """SIGKILL every Ray process of ``node`` (``ray start``, raylet, agents, its worker
        processes, a heat's actor), as a machine that dies would; its territories (other
        sessions) are left running for :meth:`restart_node` to clean up. Returns the pids."""
        rec = node.record()
        assert rec is not None, f"{node.name} was never started"
        killed: list[int] = []
        for _ in range(50):
            pids = node_pids(rec)
            if not pids:
                return sorted(set(killed))
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            killed += pids
            time.sleep(0.1)
        raise AssertionError(f"{node.name}: processes {node_pids(rec)} survive SIGKILL")

    def restart_node(self, node: Node) -> subprocess.CompletedProcess[str]:
        """``aoe worker start`` again for a killed/stopped ``node`` (it cleans up first);
        returns its output (``removed N territories ...`` before ``node ... joined``)."""
        return aoe(*self.start_args(node), check=True)

    def stop_node(self, node: Node) -> subprocess.CompletedProcess[str]:
        """``aoe worker stop --workdir`` for ``node``."""
        return aoe("worker", "stop", "--workdir", str(node.workdir), check=True)

    def stop(self) -> None:
        """Stop the workers, then the head (``aoe worker stop``), and check nothing is left:
        no Ray process of any node, no territory, mount or network namespace of theirs; then
        remove the nodes' Ray temp dirs (scan them for secrets before this)."""
        errors = []
        for node in [*self.workers, self.head]:
            if node.record() is not None:
                res = aoe("worker", "stop", "--workdir", str(node.workdir))
                if res.returncode != 0:
                    errors.append(f"{node.name}: {res.stderr.strip()}")
        left = leftovers(self)
        if errors or any(left.values()):
            raise AssertionError(f"cluster not cleanly stopped: {errors} {left}")
        for node in self.nodes:  # Ray's session folders (logs, sockets) of the test's nodes
            shutil.rmtree(ray_temp_dir(node.workdir), ignore_errors=True)


def leftovers(cluster: TestCluster) -> dict[str, list[str]]:
    """What the cluster's nodes left: live Ray processes, territory records
    (``*/state.json``), mounts below a node's workdir, network namespaces those records name."""
    procs, states, mounts, netns = [], [], [], []
    roots = [str(n.workdir.resolve()) for n in cluster.nodes]
    for node in cluster.nodes:
        procs += [f"{node.name}:{p}" for p in node.pids()]
        if node.workdir.is_dir():
            for sf in node.workdir.glob("**/state.json"):
                states.append(str(sf))
                with contextlib.suppress(OSError, ValueError):
                    import json

                    ns = json.loads(sf.read_text()).get("netns")
                    if ns and Path(f"/run/netns/{ns}").exists():
                        netns.append(ns)
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            mp = line.split()[4]
            if any(mp == r or mp.startswith(r + "/") for r in roots):
                mounts.append(mp)
    return {"processes": procs, "territories": states, "mounts": mounts, "netns": netns}


def start_cluster(root: Path, *, workers: Sequence[str] = ("w1", "w2"), head_slots: int = 0,
                  worker_slots: int = 1, token_file: Path | None = None) -> _ClusterContext:
    """A head (``head_slots``) and ``workers`` (``worker_slots`` each) under ``root``, all
    with the same fresh token (``root/auth_token``, mode 0600). A context manager: leaving
    it calls :meth:`TestCluster.stop` (which raises if anything is left)."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    cluster = TestCluster(root=root, token_file=token_file or root / "auth_token",
                          head=Node("head", root / "head", True, head_slots),
                          workers=[Node(w, root / w, False, worker_slots) for w in workers])
    return _ClusterContext(cluster)


class _ClusterContext:
    def __init__(self, cluster: TestCluster) -> None:
        self.cluster = cluster

    def __enter__(self) -> TestCluster:
        c = self.cluster
        try:
            aoe(*c.start_args(c.head), check=True)
            rec = c.head.record()
            assert rec is not None and rec.address, "the head wrote no address"
            c.address = rec.address
            env = {**os.environ, "PYTHONPATH": str(REPO)}
            procs = [subprocess.Popen([sys.executable, "-m", "aoe_tui.cli", *c.start_args(w)], cwd=REPO, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for w in c.workers]
            for w, p in zip(c.workers, procs):
                out, err = p.communicate(timeout=180)
                if p.returncode != 0:
                    raise AssertionError(f"aoe worker start {w.name} exited {p.returncode}:\n{out}\n{err}")
        except BaseException:
            with contextlib.suppress(Exception):
                c.stop()
            raise
        return c

    def __exit__(self, *exc: object) -> None:
        self.cluster.stop()


def cluster_fixture(root: Path, **kwargs: object) -> Iterator[TestCluster]:
    """Generator body for a pytest fixture: ``yield from cluster_fixture(tmp_path_factory.mktemp("ray"))``."""
    with start_cluster(root, **kwargs) as cluster:  # type: ignore[arg-type]
        yield cluster
