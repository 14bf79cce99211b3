"""A worker node of the cluster: ``aoe worker start`` / ``aoe worker stop`` / ``aoe doctor --cluster``.

A node is one ``ray start --block`` process and everything Ray starts under it (GCS on the
head, raylet, agents, worker processes, a heat's actor). It is started in a session of its
own (``setsid``), so the node's processes are exactly those whose session id is that
process's pid (:func:`node_pids`); Ray's worker processes get process groups of their own
but stay in the session, while a territory (``systemd-nspawn``, started with a new session
by :mod:`aoe_tui.runtime.container`) is never in it. So stopping or killing a node touches
nothing else on the machine: not another node, not the territories (those are torn down by
the provider's cleanup, :func:`clean_leftovers`), not Ray processes of other clusters.

Starting a node, in this order (:func:`start_node`):

1. the provider's doctor checks (:func:`preflight`): a machine that cannot host territories
   never offers a heat slot;
2. the territories this node's lost heats left under :func:`aoe_tui.cluster.territories_dir`
   (and anything else below the node's folder holding ``*/state.json``) are torn down
   (:func:`clean_leftovers`);
3. ``ray start --block`` with ``--resources {"aoe_heat_slot": N}``, the label
   ``aoe-worker=NAME`` (what ``aoe doctor --cluster`` calls an aoe node), ``--node-name
   NAME``, the environment :data:`aoe_tui.cluster.ENV_WORKER_DIR` /
   :data:`aoe_tui.cluster.ENV_WORKER_NAME` (Ray's worker processes inherit it), Ray's token
   authentication (``RAY_AUTH_MODE=token``, ``RAY_AUTH_TOKEN_PATH``: the token stays in its
   file, :func:`token_file_for`), a temp dir of its own (:func:`ray_temp_dir`) and fresh
   ports for the per-node agents, so several nodes can run on one machine.

The node's record is ``<workdir>/node.json`` (:class:`NodeRecord`; no secret in it).
``ray`` itself is imported only by :func:`cluster_status` (through
:func:`aoe_tui.cluster.require_ray`); starting and stopping run Ray's own ``ray`` command.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from aoe_tui.cluster import ENV_WORKER_DIR, ENV_WORKER_NAME, HEAT_SLOT, ClusterError, require_ray, territories_dir
from aoe_tui.fsio import write_atomic, write_json_atomic

#: Node label naming the aoe node (``aoe doctor --cluster`` tells aoe nodes from plain Ray ones).
LABEL_WORKER = "aoe-worker"
#: Node labels telling incarnations of one node apart: which machine + workdir (a hash) and
#: when it started (ms). Ray notices a killed node only after its health checks fail (many
#: seconds); a restarted node's older incarnation is known dead by the newer one's start.
LABEL_NODE = "aoe-node"
LABEL_STARTED = "aoe-started"
#: Ray's default GCS port (``aoe worker start --head`` without ``--port``).
DEFAULT_PORT = 6379
#: Environment variables of Ray's token authentication.
ENV_AUTH_MODE = "RAY_AUTH_MODE"
ENV_AUTH_TOKEN_PATH = "RAY_AUTH_TOKEN_PATH"
ENV_AUTH_TOKEN = "RAY_AUTH_TOKEN"
#: A node name: what Ray accepts as a label value (letters, digits, ``._-``, 1-63 characters).
NAME_RE = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?")
#: The file of a node's record inside its workdir.
RECORD_NAME = "node.json"
#: ``ray start``'s output (Ray's own logs are under the node's temp dir).
LOG_NAME = "ray-start.log"


@dataclass(frozen=True)
class NodeRecord:
    """What ``aoe worker start`` started (``<workdir>/node.json``).

    Attributes:
        workdir: the node's state folder (:data:`aoe_tui.cluster.ENV_WORKER_DIR`).
        name: the node's name (Ray node name and label ``aoe-worker``).
        head: True for the head node.
        slots: heat slots offered (the ``aoe_heat_slot`` resource).
        address: the cluster's address (the head's ``ip:port``) as ``ray.init`` takes it.
        pid: the ``ray start --block`` process; the node's processes are its session.
        temp_dir: Ray's temp dir of this node (sessions, logs, sockets).
        token_file: the token file Ray reads (``RAY_AUTH_TOKEN_PATH``), never its content.
        started_at: wall-clock start, seconds since the epoch.
    """

    workdir: str
    name: str
    head: bool
    slots: int
    address: str
    pid: int
    temp_dir: str
    token_file: str
    started_at: float = field(default_factory=time.time)

    def to_json(self) -> dict[str, Any]:
        """The ``node.json`` object."""
        return asdict(self)

    @classmethod
    def read(cls, workdir: Path) -> NodeRecord | None:
        """The record in ``workdir``, or None when there is none (or it is unreadable)."""
        try:
            data = json.loads((Path(workdir) / RECORD_NAME).read_text())
            return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})
        except (OSError, ValueError, TypeError):
            return None


def default_workdir() -> Path:
    """``$XDG_STATE_HOME/aoe-tui/worker`` (default ``~/.local/state/aoe-tui/worker``)."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "aoe-tui" / "worker"


def default_token_file() -> Path:
    """Where Ray looks for its token: ``$RAY_AUTH_TOKEN_PATH``, else ``~/.ray/auth_token``."""
    value = os.environ.get(ENV_AUTH_TOKEN_PATH)
    return Path(value) if value else Path.home() / ".ray" / "auth_token"


def ray_temp_dir(workdir: Path) -> Path:
    """Ray's temp dir for the node of ``workdir``: ``/tmp/aoe-ray-<hash of the workdir>``.

    Short on purpose (Ray's Unix sockets live below it and a socket path has ~107 bytes),
    one per node so two nodes on one machine never share sockets or session folders."""
    digest = hashlib.sha256(str(Path(workdir).resolve()).encode()).hexdigest()[:12]
    return Path("/tmp") / f"aoe-ray-{digest}"


def node_key(temp_dir: Path) -> str:
    """The ``aoe-node`` label: this machine and the node's workdir, hashed (12 hex digits)."""
    return hashlib.sha256(f"{socket.gethostname()}:{temp_dir}".encode()).hexdigest()[:12]


def check_name(name: str) -> str:
    """``name`` if it is a valid node name, else :class:`ClusterError`."""
    if not NAME_RE.fullmatch(name or ""):
        raise ClusterError(f"worker name {name!r}: use 1-63 letters, digits, '.', '_' or '-' "
                           "(starting and ending with a letter or digit)")
    return name


def default_name() -> str:
    """The host name cut to a valid node name."""
    host = re.sub(r"[^A-Za-z0-9_.-]", "-", socket.gethostname().split(".")[0])[:63].strip("-_.")
    return host or "node"


# --- the token ---------------------------------------------------------------------------


def token_file_for(path: Path | None, *, create: bool) -> Path:
    """The token file to use: ``path``, else :func:`default_token_file`, checked.

    With ``create`` (the head), a missing file is created with a new random token (mode
    0600, the folder 0700). The token is never read into a message or a log.

    Raises:
        ClusterError: missing (and not ``create``), empty, not a regular file, or readable
            by group/others (``chmod 600 PATH``).
    """
    token = (Path(path) if path is not None else default_token_file()).absolute()
    if not token.exists():
        if not create:
            raise ClusterError(f"{token}: no Ray token here: copy the head's token file to this path "
                               "(mode 0600) or name it with --token-file")
        token.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_atomic(token, secrets.token_hex(32), mode=0o600)
        return token
    try:
        st = token.stat()
    except OSError as err:
        raise ClusterError(f"{token}: cannot read the Ray token: {err.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise ClusterError(f"{token}: the Ray token must be a regular file")
    if st.st_mode & 0o077:
        raise ClusterError(f"{token}: the Ray token is readable by others (mode {st.st_mode & 0o777:o}): chmod 600 {token}")
    if st.st_size == 0:
        raise ClusterError(f"{token}: the Ray token file is empty")
    return token


def auth_env(token_file: Path) -> dict[str, str]:
    """The environment entries that make Ray (``ray start``, ``ray.init``) use token
    authentication with the token in ``token_file``. ``RAY_AUTH_TOKEN`` (the token itself in
    the environment) is never set; remove it from an environment built from this one."""
    return {ENV_AUTH_MODE: "token", ENV_AUTH_TOKEN_PATH: str(Path(token_file).resolve())}


def use_token(token_file: Path | None = None) -> Path:
    """Make this process a client with the cluster's token (before ``ray.init``): sets
    ``RAY_AUTH_MODE=token`` and ``RAY_AUTH_TOKEN_PATH`` in ``os.environ`` (and drops
    ``RAY_AUTH_TOKEN``). ``token_file`` as :func:`token_file_for` takes it.

    Raises:
        ClusterError: no usable token file (see :func:`token_file_for`).
    """
    token = token_file_for(token_file, create=False)
    os.environ.pop(ENV_AUTH_TOKEN, None)
    os.environ.update(auth_env(token))
    return token


def client_auth(token_file: Path | None = None) -> Path | None:
    """Authenticate this process (a runner, ``aoe doctor --cluster``) to the cluster before
    ``ray.init``: ``token_file`` if given (:func:`use_token`); else leave an explicit
    ``RAY_AUTH_MODE``/``RAY_AUTH_TOKEN`` of the environment alone; else use
    :func:`default_token_file` when it exists; else nothing (a cluster without
    authentication). Returns the token file used, or None.

    Raises:
        ClusterError: the token file is missing (when named), empty or readable by others.
    """
    if token_file is not None:
        return use_token(token_file)
    if os.environ.get(ENV_AUTH_MODE) or os.environ.get(ENV_AUTH_TOKEN):
        value = os.environ.get(ENV_AUTH_TOKEN_PATH)
        return Path(value) if value else None
    if default_token_file().exists():
        return use_token(None)
    return None


# --- before joining ----------------------------------------------------------------------


def preflight(provider: str, run_checks: Callable[..., Any] | None = None) -> Any:
    """The doctor checks of ``provider`` (:mod:`aoe_tui.runtime.doctor`); returns the report.

    Raises:
        ClusterError: a check failed (the first failed one, named, with its fix), or the
            provider is unknown.
    """
    from aoe_tui.runtime import registry
    from aoe_tui.runtime.doctor import run_checks as default_run_checks

    entry = registry.get_provider(provider)  # UsageError for an unknown name
    report = (run_checks or default_run_checks)([(entry.name, entry.doctor)], entry.name)
    for check in report.checks:
        if not check.ok:
            fix = f" (fix: {check.fix})" if check.fix else ""
            raise ClusterError(f"this machine cannot host {provider} territories: {check.name}: {check.detail}{fix}")
    return report


def clean_leftovers(workdir: Path) -> list[tuple[Path, str]]:
    """Tear down the territories lost heats left below ``workdir``: first the heat actor's
    sweep (``aoe_tui.cluster.sweep.sweep_stale_heats``, which also removes those heats'
    folders) when that module exists; then, with every registered provider's cleanup, in :func:`aoe_tui.cluster.territories_dir` (``<workdir>/territories``),
    in each folder right under it that is not a territory itself (one per heat), and in any
    ``territories/`` folder up to three levels down (scratch match folders). Territories
    whose owner process is alive are left alone (the providers' rule). Returns ``(folder,
    territory id)`` per territory removed.

    Raises:
        aoe_tui.runtime.provider.ProviderError: a leftover could not be removed.
    """
    workdir = Path(workdir)
    removed: list[tuple[Path, str]] = []
    try:  # the heat actor's own layout (heat-<pid>.<start>-<tag> folders), when that module is there
        from aoe_tui.cluster.sweep import sweep_stale_heats
    except ImportError:
        pass
    else:
        removed += [(territories_dir(workdir), x) for x in sweep_stale_heats(workdir)]
    tdir = territories_dir(workdir)
    folders: list[Path] = [tdir] if tdir.is_dir() else []
    if folders:
        folders += sorted(d for d in tdir.iterdir() if d.is_dir() and not (d / "state.json").exists())
    for pattern in ("*/territories", "*/*/territories", "*/*/*/territories"):
        folders += sorted(d for d in workdir.glob(pattern) if d.is_dir() and d not in folders)
    for folder in folders:
        removed += _cleanup_one(folder)
    return removed


def _cleanup_one(folder: Path) -> list[tuple[Path, str]]:
    from aoe_tui.runtime.cleanup import cleanup_folder

    return cleanup_folder(folder)


# --- the node's processes ----------------------------------------------------------------


def _session_of(pid: int) -> int | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] == "Z":
        return None
    return int(fields[3])  # state ppid pgrp session


def _leader_is_node(record: NodeRecord) -> bool:
    """False when the record's pid runs but is not the node's ``ray start`` (its environment
    lacks ``AOE_WORKER_DIR=<workdir>``: a pid reused since, e.g. after a reboot); True
    otherwise (ours, or gone: its session's processes are then the node's leftovers).
    Only the leader is checked: Ray's agents retitle themselves, which overwrites the
    environment ``/proc`` shows."""
    try:
        with open(f"/proc/{record.pid}/environ", "rb") as fh:
            env = fh.read()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    # empty: a zombie (the killed ray start not reaped yet), as good as gone
    return not env or f"{ENV_WORKER_DIR}={record.workdir}".encode() in env.split(b"\0")


def node_pids(record: NodeRecord | int) -> list[int]:
    """The live processes of a node: those in the session of its ``ray start`` process.

    For a :class:`NodeRecord` whose pid now runs another program (a stale record: the
    machine rebooted since and the pid leads someone else's session, a login shell, a
    daemon), none: see :func:`_leader_is_node`."""
    sid = record if isinstance(record, int) else record.pid
    if sid <= 0 or (not isinstance(record, int) and not _leader_is_node(record)):
        return []
    out = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and _session_of(int(entry.name)) == sid:
            out.append(int(entry.name))
    return sorted(out)


def signal_node(record: NodeRecord | int, sig: int) -> list[int]:
    """Send ``sig`` to every process of the node; returns the pids signalled."""
    pids = node_pids(record)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
    return pids


def _wait_gone(record: NodeRecord | int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while node_pids(record):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def node_alive(record: NodeRecord | None) -> bool:
    """True when the record's node still has processes."""
    return record is not None and bool(node_pids(record))


# --- start / stop ------------------------------------------------------------------------


def _free_ports(n: int) -> list[int]:
    socks, ports = [], []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


def _ray_command() -> list[str]:
    ray_bin = Path(sys.executable).with_name("ray")
    if ray_bin.exists():
        return [str(ray_bin)]
    found = shutil.which("ray")
    if found:
        return [found]
    require_ray()  # a clear line if the extra is missing
    return [sys.executable, "-c", "import sys; from ray.scripts.scripts import main; sys.argv[0] = 'ray'; main()"]


def ray_start_argv(*, head: bool, address: str | None, port: int, slots: int, name: str, temp_dir: Path,
                   node_ip: str | None = None, extra: Sequence[str] = ()) -> list[str]:
    """``ray start --block ...`` for one node (see the module docstring).

    Fewer processes and ports than Ray's defaults: no dashboard UI (``--include-dashboard
    false``, what is left listens on 127.0.0.1), no autoscaler monitor (the cluster is made
    of the nodes people start), no log monitor (what a heat prints stays in the node's own
    log files, never streamed to the runner); the agents' ports are fresh free ones."""
    agent_listen, agent_grpc, env_agent, metrics, dashboard = _free_ports(5)
    argv = [*_ray_command(), "start", "--block", "--disable-usage-stats",
            "--temp-dir", str(temp_dir), "--node-name", name,
            "--resources", json.dumps({HEAT_SLOT: slots}),
            "--labels", f"{LABEL_WORKER}={name},{LABEL_NODE}={node_key(temp_dir)},{LABEL_STARTED}={int(time.time() * 1000)}",
            "--dashboard-agent-listen-port", str(agent_listen), "--dashboard-agent-grpc-port", str(agent_grpc),
            "--runtime-env-agent-port", str(env_agent), "--metrics-export-port", str(metrics),
            "--include-log-monitor", "false"]
    if head:
        argv += ["--head", "--port", str(port), "--include-dashboard", "false", "--no-monitor",
                 "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dashboard)]
    else:
        argv += ["--address", str(address)]
    if node_ip:
        argv += ["--node-ip-address", node_ip]
    return argv + list(extra)


def _set_pdeathsig() -> None:  # pragma: no cover - runs in the child between fork and exec
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _log_reason(log: Path) -> str:
    """The most telling line of ``ray start``'s output (its error), shortened."""
    try:
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no output"
    for ln in reversed(lines):
        if any(w in ln for w in ("Error", "error", "failed", "Failed", "refused", "Timed out")):
            return ln[:300]
    return lines[-1][:300] if lines else "no output"


def start_node(workdir: Path, *, head: bool, address: str | None = None, port: int = DEFAULT_PORT, slots: int = 1,
               name: str | None = None, token_file: Path | None = None, provider: str = "container",
               node_ip: str | None = None, block: bool = False, timeout_s: float = 90.0,
               extra_ray_args: Sequence[str] = (), say: Callable[[str], None] = print) -> NodeRecord:
    """Start a node (head or worker) for ``workdir`` and return its record once it joined.

    ``block``: the node dies with this process (its ``ray start`` gets SIGTERM when this
    process dies); the caller then waits with :func:`wait_node`. Without it the node runs on
    after this process exits, until ``aoe worker stop``.

    Raises:
        ClusterError: a failed doctor check, a node already running for ``workdir``, a bad
            name/slots/token, a worker's cluster unreachable or refusing the token
            (:func:`probe_cluster`; this process then holds the token's environment, as
            :func:`use_token`), or ``ray start`` that did not join within ``timeout_s`` (its
            error line, and where its log is).
        aoe_tui.runtime.provider.ProviderError: a leftover territory could not be removed.
    """
    workdir = Path(workdir).resolve()
    name = check_name(name or default_name())
    if slots < 0:
        raise ClusterError(f"--slots {slots}: a node offers 0 or more heat slots")
    if not head and not address:
        raise ClusterError("a worker node needs the cluster's address (--address HOST:PORT), or --head")
    old = NodeRecord.read(workdir)
    if old is not None and node_alive(old):
        raise ClusterError(f"{workdir}: node {old.name} is already running (pid {old.pid}); "
                           f"aoe worker stop --workdir {workdir}")
    preflight(provider)
    workdir.mkdir(parents=True, exist_ok=True)
    removed = clean_leftovers(workdir)
    if removed:
        say(f"removed {len(removed)} territor{'y' if len(removed) == 1 else 'ies'} lost heats left under {workdir}")
    token = token_file_for(token_file, create=head)
    if not head:  # a wrong address or token: one clear line now, not a ray start that hangs
        address = resolve_address(str(address))
        use_token(token)
        probe_cluster(address)
    temp_dir = ray_temp_dir(workdir)
    temp_dir.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != ENV_AUTH_TOKEN}
    env.update(auth_env(token))
    env.update({ENV_WORKER_DIR: str(workdir), ENV_WORKER_NAME: name, "RAY_USAGE_STATS_ENABLED": "0"})
    if head:  # the GCS notices a dead node after 5 failed health checks: 1 s apart, not 3
        env.setdefault("RAY_health_check_period_ms", str(HEALTH_CHECK_PERIOD_MS))
    for attempt in range(1, START_ATTEMPTS + 1):
        try:
            return _spawn_and_join(workdir, temp_dir, env, head=head, address=address, port=port, slots=slots,
                                   name=name, token=token, node_ip=node_ip, block=block, timeout_s=timeout_s,
                                   extra_ray_args=extra_ray_args)
        except _StartupTimeout as err:
            if attempt == START_ATTEMPTS:
                raise ClusterError(str(err)) from None
            say(f"ray start did not come up ({err.reason}); trying again ({attempt + 1}/{START_ATTEMPTS})")
    raise AssertionError("unreachable")


#: How often the head's GCS checks each node (ms). Ray's default is 3000, so a node that
#: dies unannounced (killed, machine gone) stays "alive" about 15 s; a heat's actor on it is
#: reported lost sooner (its connection closes), but the node keeps being offered until then.
HEALTH_CHECK_PERIOD_MS = 1000

#: ``ray start`` attempts when a node times out during startup: Ray waits a fixed ~17 s for
#: its per-node agents (its raylet aborts after that) and 30 s for the raylet to register,
#: which a very busy machine can miss.
START_ATTEMPTS = 3


class _StartupTimeout(Exception):
    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def _startup_timed_out(log: Path, temp_dir: Path) -> bool:
    text = ""
    with contextlib.suppress(OSError):
        text = log.read_text(errors="replace")
    if "timed out during startup" in text:
        return True
    for raylet in temp_dir.glob("session_*/logs/raylet.out"):
        with contextlib.suppress(OSError):
            if "Timed out waiting for file" in raylet.read_text(errors="replace")[-20000:]:
                return True
    return False


def _spawn_and_join(workdir: Path, temp_dir: Path, env: dict[str, str], *, head: bool, address: str | None,
                    port: int, slots: int, name: str, token: Path, node_ip: str | None, block: bool,
                    timeout_s: float, extra_ray_args: Sequence[str]) -> NodeRecord:
    current = temp_dir / "ray_current_cluster"
    current.unlink(missing_ok=True)
    argv = ray_start_argv(head=head, address=address, port=port, slots=slots, name=name, temp_dir=temp_dir,
                          node_ip=node_ip, extra=extra_ray_args)
    log = workdir / LOG_NAME
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
                                cwd=workdir, start_new_session=True, preexec_fn=_set_pdeathsig if block else None)
    record = NodeRecord(str(workdir), name, head, slots, address or "", proc.pid, str(temp_dir), str(token))
    write_json_atomic(workdir / RECORD_NAME, record.to_json())
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            _kill_session(record)
            (workdir / RECORD_NAME).unlink(missing_ok=True)
            message = f"ray start exited ({proc.returncode}) before the node joined: {_log_reason(log)} (log: {log})"
            if _startup_timed_out(log, temp_dir):
                raise _StartupTimeout(message, "startup timed out")
            raise ClusterError(message)
        with contextlib.suppress(OSError):
            joined = current.read_text().strip()
            if joined:
                break
        if time.monotonic() > deadline:
            _kill_session(record)
            (workdir / RECORD_NAME).unlink(missing_ok=True)
            raise ClusterError(f"node {name} did not join within {timeout_s:.0f}s: {_log_reason(log)} (log: {log})")
        time.sleep(0.2)
    record = NodeRecord(str(workdir), name, head, slots, joined if head else (address or joined), proc.pid,
                        str(temp_dir), str(token), record.started_at)
    write_json_atomic(workdir / RECORD_NAME, record.to_json())
    if not block:
        proc.returncode = 0  # detached: nobody here waits for it (no ResourceWarning at exit)
    return record


def wait_node(record: NodeRecord) -> int:
    """Wait (``--block``) until the node's ``ray start`` exits; SIGTERM/SIGINT/SIGHUP to this
    process stop the node. Then tear down what its heats left and remove its record.
    Returns ``ray start``'s exit status (0 for a stop asked here)."""
    stopping = False

    def _stop(signum: int, frame: Any) -> None:
        nonlocal stopping
        stopping = True
        with contextlib.suppress(ProcessLookupError):
            os.kill(record.pid, signal.SIGTERM)

    old = {s: signal.signal(s, _stop) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    try:
        while True:
            try:
                _, status = os.waitpid(record.pid, 0)
                break
            except InterruptedError:
                continue
            except ChildProcessError:
                status = 0
                while node_alive(record):
                    time.sleep(0.2)
                break
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    _finish_stop(record)
    code = os.waitstatus_to_exitcode(status) if status else 0
    return 0 if stopping else code


def _kill_session(record: NodeRecord, grace_s: float = 0.0) -> None:
    if grace_s > 0:
        if record.pid in node_pids(record):  # still the node's ray start, not a reused pid
            with contextlib.suppress(ProcessLookupError):
                os.kill(record.pid, signal.SIGTERM)
        if _wait_gone(record, grace_s):
            return
    for _ in range(50):
        if not signal_node(record, signal.SIGKILL):
            return
        time.sleep(0.1)


def _finish_stop(record: NodeRecord) -> list[tuple[Path, str]]:
    _kill_session(record)  # whatever a graceful stop left
    removed = clean_leftovers(Path(record.workdir))
    (Path(record.workdir) / RECORD_NAME).unlink(missing_ok=True)
    return removed


def stop_node(workdir: Path, grace_s: float = 20.0) -> tuple[NodeRecord | None, list[tuple[Path, str]]]:
    """Stop the node of ``workdir``: SIGTERM to its ``ray start`` (Ray stops its own
    processes), SIGKILL to what is left of its session after ``grace_s``, then tear down
    what its heats left and remove its record. Nothing outside the node is touched.

    Returns ``(record or None when no node was recorded, territories removed)``.
    """
    workdir = Path(workdir).resolve()
    record = NodeRecord.read(workdir)
    if record is None:
        return None, clean_leftovers(workdir) if workdir.is_dir() else []
    _kill_session(record, grace_s)
    return record, _finish_stop(record)


# --- what the cluster looks like -----------------------------------------------------------


@dataclass(frozen=True)
class NodeStatus:
    """One node as ``aoe doctor --cluster`` shows it.

    Attributes:
        name: Ray's node name (an aoe node's ``--name``).
        address: the node's IP.
        alive: Ray sees it alive.
        aoe: started by ``aoe worker start`` (label ``aoe-worker``): its doctor checks passed.
        head: the head node.
        slots_total: heat slots it offers; ``slots_free`` of them free now (both 0 when dead:
            Ray forgets a dead node's resources; ``slots_free`` None: this Ray does not say).
    """

    name: str
    address: str
    alive: bool
    aoe: bool
    head: bool
    slots_total: int
    slots_free: int | None

    @property
    def ready(self) -> bool:
        """It can take a heat: alive, an aoe node, with a heat slot."""
        return self.alive and self.aoe and self.slots_total > 0

    def line(self) -> str:
        """``NAME  ADDRESS  head|worker  slots F/T free  ready|not ready (why)``."""
        role = "head" if self.head else "worker"
        if self.ready:
            state = "ready"
        elif not self.alive:
            state = "not ready (dead)"
        elif not self.aoe:
            state = "not ready (not started by aoe worker start)"
        else:
            state = "not ready (no heat slot)"
        free = "?" if self.slots_free is None else self.slots_free
        return f"{self.name}  {self.address}  {role}  slots {free}/{self.slots_total} free  {state}"


def _split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ClusterError(f"cluster address {address!r}: expected HOST:PORT")
    return host.strip("[]"), int(port)


def resolve_address(address: str) -> str:
    """``auto``: ``$RAY_ADDRESS``, else the cluster of the node ``aoe worker start`` runs on
    this machine with the default workdir (:func:`default_workdir`), else the one in Ray's
    default temp dir (``/tmp/ray``); anything else unchanged. (Ray's own ``auto`` looks only
    in ``/tmp/ray``, and an aoe node keeps its temp dir elsewhere, :func:`ray_temp_dir`.)

    Raises:
        ClusterError: ``auto`` and no cluster found."""
    if address != "auto":
        return address
    if os.environ.get("RAY_ADDRESS") and os.environ["RAY_ADDRESS"] != "auto":
        return os.environ["RAY_ADDRESS"]
    record = NodeRecord.read(default_workdir())
    if record is not None and record.address:
        return record.address
    with contextlib.suppress(OSError):
        found = Path("/tmp/ray/ray_current_cluster").read_text().strip()
        if found:
            return found
    raise ClusterError("cluster address auto: no node runs on this machine (aoe worker start), name HOST:PORT")


@contextlib.contextmanager
def _quiet_stderr() -> Any:
    """File descriptor 2 to /dev/null for the block (what native code writes there too)."""
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def probe_cluster(address: str, *, connect_timeout_s: float = 5.0) -> None:
    """Check that the cluster at ``address`` answers and accepts this process's token (set
    by :func:`client_auth` / :func:`use_token`), in about a second.

    Raises:
        ClusterError: a bad address, nothing listening there, the cluster refusing the token
            (or wanting one), or another Ray error (one line).
    """
    host, port = _split_address(address)
    try:
        socket.create_connection((host, port), timeout=connect_timeout_s).close()
    except OSError as err:
        raise ClusterError(f"cluster {address}: cannot connect: {err.strerror or err}") from None
    require_ray()
    from ray._raylet import GcsClient
    from ray.exceptions import AuthenticationError

    try:
        with _quiet_stderr():  # Ray's C++ client logs its own warning line; ours says it
            GcsClient(address=address)
    except AuthenticationError:
        where = os.environ.get(ENV_AUTH_TOKEN_PATH) if os.environ.get(ENV_AUTH_MODE) == "token" else None
        raise ClusterError(f"cluster {address} refused the token in {where} (not the head's token?)" if where else
                           f"cluster {address} wants a token: --token-file PATH (a copy of the head's)") from None
    except Exception as err:  # noqa: BLE001 - Ray's errors become one line
        raise ClusterError(f"cluster {address}: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}") from None


def _free_per_node(ray: Any, nodes: list[dict[str, Any]], free_all: int) -> dict[str, int | None]:
    """Node id (hex) -> free heat slots: Ray's ``available_resources_per_node`` where this Ray
    has it (a developer function); else nodes without a slot get 0 and, when one live node
    holds every heat slot, that node the cluster's free count (``ray.available_resources``);
    a node missing from the map: its free count is unknown."""
    try:
        from ray._private.state import available_resources_per_node as per_node
    except ImportError:
        per_node = None
    if per_node is not None:
        with contextlib.suppress(Exception):
            return {str(k): int((v or {}).get(HEAT_SLOT, 0)) for k, v in per_node().items()}
    holders = [n for n in nodes if n.get("Alive") and (n.get("Resources") or {}).get(HEAT_SLOT)]
    out: dict[str, int | None] = {str(n.get("NodeID")): 0 for n in nodes if n not in holders}
    if len(holders) == 1:
        out[str(holders[0].get("NodeID"))] = free_all
    return out


def cluster_status(address: str, token_file: Path | None = None, *, connect_timeout_s: float = 5.0) -> list[NodeStatus]:
    """The nodes of the cluster at ``address``: the head first, then by name; a name with a
    live node is not also shown dead (a node restarted), a dead name only once.

    Authenticates as :func:`client_auth` does (this process becomes a token client), joins
    the cluster as a driver (``ray.init``, no actor or task started; left with
    ``ray.shutdown``) and reads it through Ray's public API: ``ray.nodes()`` for the node
    table (names, labels, liveness, total resources) and ``ray.available_resources()`` for the
    free heat slots. A node's own free slots come from Ray's ``@DeveloperAPI`` function
    ``available_resources_per_node`` (the one Ray Serve and ``ray.util.tpu`` use; Ray's state
    API ``ray.util.state`` needs a dashboard, which aoe nodes do not run); where a Ray lacks
    it, a node holding every heat slot gets the cluster's free count and any other node's
    free count is unknown (None, shown ``?``). Nothing reads Ray's GCS tables directly.

    Raises:
        ClusterError: no token, the address unreachable, or the cluster refusing the token.
    """
    address = resolve_address(address)
    client_auth(token_file)
    probe_cluster(address, connect_timeout_s=connect_timeout_s)
    ray = require_ray()
    joined = False
    try:
        if not ray.is_initialized():
            ray.init(address=address, namespace="aoe-tui-doctor", log_to_driver=False, logging_level="ERROR",
                     configure_logging=True, include_dashboard=False)
            joined = True
        nodes = ray.nodes()
        free_all = int(ray.available_resources().get(HEAT_SLOT, 0))
        free = _free_per_node(ray, nodes, free_all)
    except Exception as err:  # noqa: BLE001 - Ray's errors become one line
        raise ClusterError(f"cluster {address}: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}") from None
    finally:
        if joined:
            with contextlib.suppress(Exception):
                ray.shutdown()
    latest: dict[str, int] = {}  # aoe-node -> start (ms) of its newest incarnation, live or dead
    for n in nodes:
        labels = n.get("Labels") or {}
        if labels.get(LABEL_NODE):
            started = int(labels.get(LABEL_STARTED) or 0)
            latest[labels[LABEL_NODE]] = max(latest.get(labels[LABEL_NODE], 0), started)
    out = []
    for n in nodes:
        res = n.get("Resources") or {}
        labels = n.get("Labels") or {}
        alive = bool(n.get("Alive"))
        if alive and labels.get(LABEL_NODE) and int(labels.get(LABEL_STARTED) or 0) < latest[labels[LABEL_NODE]]:
            alive = False  # an older incarnation of a restarted node: dead, Ray has not noticed yet
        total = int(res.get(HEAT_SLOT, 0))
        out.append(NodeStatus(
            name=str(labels.get(LABEL_WORKER) or n.get("NodeName") or n.get("NodeID", "?")[:12]),
            address=str(n.get("NodeManagerAddress", "")), alive=alive, aoe=LABEL_WORKER in labels,
            head="node:__internal_head__" in res, slots_total=total if alive else 0,
            slots_free=free.get(str(n.get("NodeID"))) if alive else 0))
    out.sort(key=lambda s: (not s.alive, s.name))
    # a node that died and came back (or died twice) under one name is shown once
    seen: set[str] = set()
    shown = []
    for s in out:
        if s.alive or s.name not in seen:
            shown.append(s)
        seen.add(s.name)
    shown.sort(key=lambda s: (not s.head, s.name))
    return shown
