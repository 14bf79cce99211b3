"""A heat on a worker node of a Ray cluster: the heat actor and the runner's side of it.

The season runner (``aoe run --cluster ADDRESS`` or a ``[cluster]`` table) hands each attempt
to :meth:`ClusterHeats.run_heat`, which has the same result as
:func:`aoe_tui.referee.heat.run_heat` run locally: the attempt folder filled as a local heat
fills it, and the final :class:`~aoe_tui.domain.world.WorldState` returned (or an exception
for :func:`aoe_tui.season.attempts.judge_attempt`).

One attempt, end to end:

1. The runner creates one :class:`HeatActor` (``max_restarts=0``, ``max_task_retries=0``:
   Ray never re-runs a heat; ``num_cpus=0``; ``resources={HEAT_SLOT: 1}``: one heat slot, so
   all territories of the heat are on one node; ``memory=`` the heat's need: ``agent_memory_gb``
   per agent plus ``referee_memory_gb``, so Ray places it where that fits and its
   out-of-memory killer accounts for it). Ray starts it on a node with a free slot (it waits
   while every slot is taken). ``hello`` returns the node's name and an ephemeral X25519
   public key the actor made in memory.
2. The runner writes ``arena.json`` and ``match.json`` into the attempt folder itself (the
   same headers a local heat writes, computed from the runner's arena files), seals the
   entrants' model credentials to the actor's key (X25519 + HKDF-SHA256 +
   ChaCha20-Poly1305) and calls ``run`` with the heat's description: the arena package as
   bytes (cached on the node by content hash under ``AOE_WORKER_DIR/arenas``), the heat's
   manifest, each entrant's adapter spec, options and prices, registered adapter files, the
   ``[provider]`` table, the drain, names, the header bytes and the sealed credentials.
   Only ciphertext goes through Ray (its object store, logs, spilling); the actor opens it
   in memory and hands the values to the adapters explicitly
   (:attr:`aoe_tui.agents.base.Adapter.credentials`), never through its environment.
3. On the node the actor sweeps what lost heats left (:mod:`aoe_tui.cluster.sweep`), builds
   the provider (work folder ``territories_dir(AOE_WORKER_DIR)/heat-<pid>.<start>-<tag>/territories``)
   and the adapters there, and runs :func:`aoe_tui.referee.heat.run_heat` into a scratch
   match folder (``AOE_WORKER_DIR/matches/heat-<pid>.<start>-<tag>``) on its own thread.
4. ``run`` is a Ray streaming generator: every ~100 ms it yields the event lines (and
   progress lines) written since, as they are written. The runner appends each to ITS
   ``events.jsonl`` through :class:`~aoe_tui.replay.log.EventLogWriter` (the same bytes, the
   same fsync of lifecycle lines as a local heat), folds it into its world and calls
   ``on_event`` (season lines, the TUI). Likewise the agents' activity: the actor tails its
   scratch folder's ``activity.jsonl`` and yields the new records with each batch; the
   runner appends them to ITS ``activity.jsonl`` through
   :class:`~aoe_tui.replay.activity.ActivityWriter` (as a local heat's supervisor does:
   one write per batch, no fsync) and hands them to ``on_activity`` (the live TUI; ``aoe
   watch`` and spectators tail the file). At the end the actor yields the activity lines
   left, one archive of the match folder (evidence, agents, world.json, aoe-extra.json,
   the bundle: everything but the territories and the two logs the runner wrote as they
   came) and the heat's end (its error, if any,
   and the sha256 of its ``events.jsonl``, which must equal the runner's). The runner
   extracts the archive safely (regular files and folders only, no path outside the
   attempt folder) into a scratch folder beside the attempt's, then moves each entry in.

Failures: a node lost mid-heat (the actor's process or node died: ``ActorDiedError``,
``NodeDiedError``, ``OwnerDiedError``, ``ObjectLostError``, ...) raises :class:`NodeLostError`
(``failure_source`` ``provider``, the node named): the season runner records the attempt
spoiled and runs attempt N+1 wherever a slot is free, under ``max_attempts``. An error of
the heat on the node comes back as :class:`RemoteHeatError` with the failure source a local
run would have had (a provider error or the node's full disk: ``provider``; anything else:
``harness``). A runner that is stopped aborts the heat (``operator interrupt``), takes its
artifacts and re-raises the cancellation. A runner killed with ``kill -9``: its actors are
owned by it, so Ray ends them (their heats' territories are then torn down by the next
sweep on that node); the resumed season marks the attempts interrupted and re-runs them.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import json
import os
import queue
import shutil
import tarfile
import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aoe_tui.cluster import ENV_WORKER_NAME, HEAT_SLOT, ClusterError, require_ray, territories_dir, worker_dir
from aoe_tui.errors import AoeError

if TYPE_CHECKING:  # pragma: no cover
    from aoe_tui.domain.arena import LoadedManifest
    from aoe_tui.domain.world import WorldState

__all__ = ["ClusterHeats", "HeatActor", "NodeLostError", "RemoteHeat", "RemoteHeatError", "open_sealed",
           "file_sha256", "pack_folder", "seal", "unpack_into"]

#: how often the actor sends what its heat wrote (s)
BATCH_S = 0.1
#: how long a stopped runner waits for an aborted heat's artifacts (s)
ABORT_WAIT_S = 180.0
#: the heat actor sends at least one message (an empty batch: a heartbeat) every this many
#: seconds while its heat runs, whatever the heat does (s)
HEARTBEAT_S = 1.0
#: a placed heat whose actor sent nothing (no batch, no heartbeat) for this long is given up:
#: the node is alive but silent (a stopped or wedged actor process); the attempt is spoiled as
#: :class:`NodeLostError` naming the node and its actor killed (s). ``AOE_CLUSTER_SILENT_S``
#: overrides it (a number of seconds above twice :data:`HEARTBEAT_S`).
SILENT_S = 30.0
ENV_SILENT_S = "AOE_CLUSTER_SILENT_S"
#: a heat actor that was lost before it answered ``hello`` (never placed: nothing of the heat
#: ran) is made again, every :data:`PLACE_PAUSE_S`, for this long after the first such loss
#: before the attempt is spoiled as :class:`NodeLostError` (s): a node that died and Ray has
#: not noticed yet (its health checks take seconds) may still be offered a slot
PLACE_RETRY_S = 60.0
PLACE_PAUSE_S = 1.0
#: ``ActorUnavailableError`` (the actor unreachable for a moment: a network blip, a busy
#: node) is asked again every :data:`UNAVAILABLE_RETRY_S` for this long before it counts as
#: the actor lost (s)
UNAVAILABLE_S = 10.0
UNAVAILABLE_RETRY_S = 0.5
_HKDF_INFO = b"aoe-tui cluster credentials v1"


class NodeLostError(ClusterError):
    """The worker node running a heat was lost mid-heat (its actor or node died, or it went
    silent for :data:`SILENT_S`); the message names the node. ``failure_source``
    ``provider``: the infrastructure's, retried. ``node``: the node's name ("?" before the
    heat was placed), so the next attempt of the heat can be placed elsewhere."""

    failure_source = "provider"

    def __init__(self, message: str, node: str = "?") -> None:
        super().__init__(message)
        self.node = node


def silent_s() -> float:
    """The silence bound in seconds: :data:`SILENT_S`, or ``AOE_CLUSTER_SILENT_S``.

    Raises:
        ClusterError: ``AOE_CLUSTER_SILENT_S`` is not a finite number above twice :data:`HEARTBEAT_S`."""
    raw = os.environ.get(ENV_SILENT_S)
    if raw is None or not raw.strip():
        return SILENT_S
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 2 * HEARTBEAT_S < value < float("inf"):  # NaN fails the comparison too
        raise ClusterError(f"{ENV_SILENT_S}={raw!r}: expected seconds, a number above {2 * HEARTBEAT_S:g}")
    return value


class RemoteHeatError(AoeError):
    """The heat failed on its worker node; ``failure_source`` as a local run's would be."""

    def __init__(self, message: str, failure_source: str = "harness") -> None:
        super().__init__(message)
        self.failure_source = failure_source


# ----------------------------------------------------------------------------- sealing


def seal(public_key: bytes, payload: bytes) -> bytes:
    """Encrypt ``payload`` to an X25519 ``public_key`` (raw 32 bytes): an ephemeral key
    pair, HKDF-SHA256 of the shared secret, ChaCha20-Poly1305. Returns
    ``ephemeral public (32) | nonce (12) | ciphertext``."""
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
    from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    eph = X25519PrivateKey.generate()
    eph_pub = eph.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    shared = eph.exchange(X25519PublicKey.from_public_bytes(public_key))
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_HKDF_INFO).derive(shared)
    nonce = os.urandom(12)
    return eph_pub + nonce + ChaCha20Poly1305(key).encrypt(nonce, payload, eph_pub)


def open_sealed(private_key: Any, sealed: bytes) -> bytes:
    """Decrypt what :func:`seal` made for ``private_key`` (an ``X25519PrivateKey``).
    Raises ``cryptography.exceptions.InvalidTag`` for a wrong key or altered bytes."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PublicKey
    from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    eph_pub, nonce, ct = sealed[:32], sealed[32:44], sealed[44:]
    shared = private_key.exchange(X25519PublicKey.from_public_bytes(eph_pub))
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_HKDF_INFO).derive(shared)
    return ChaCha20Poly1305(key).decrypt(nonce, ct, eph_pub)


# ----------------------------------------------------------------------------- archives


def pack_folder(root: Path, *, exclude: frozenset[str] = frozenset()) -> bytes:
    """A deterministic tar of ``root`` (sorted, mtime 0, owner 0, modes kept; symlinks and
    special files left out; top-level names in ``exclude`` skipped)."""
    buf = io.BytesIO()
    root = Path(root)
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path in sorted(root.rglob("*")):
            rel = path.relative_to(root)
            if rel.parts[0] in exclude or path.is_symlink():
                continue
            if not (path.is_dir() or path.is_file()):
                continue
            info = tar.gettarinfo(str(path), arcname=rel.as_posix())
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            if path.is_file():
                with open(path, "rb") as fh:
                    tar.addfile(info, fh)
            else:
                tar.addfile(info)
    return buf.getvalue()


def file_sha256(path: Path) -> str:
    """The sha256 (hex) of the file at ``path``, read in chunks (``hashlib.file_digest``;
    blocking: call it off the event loop). Raises ``OSError`` when it cannot be read."""
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def unpack_into(data: bytes, dest: Path) -> list[str]:
    """Extract a :func:`pack_folder` archive into ``dest``: regular files and folders only,
    every path inside ``dest`` (absolute names, ``..``, links and devices refused). It is
    extracted into a scratch folder beside ``dest`` first, then each top-level entry is moved
    in (``os.replace``; an existing entry of the same name is replaced). Every file and
    every folder it writes is fsynced (the files, each extracted folder, ``dest`` and the
    parents of the folders it had to create for ``dest``), so what was moved in survives a
    crash. Returns the top-level names. Raises :class:`ClusterError` naming a refused member."""
    from aoe_tui.fsio import fsync_dir

    dest = Path(dest)
    scratch = dest.parent / f".{dest.name}.artifacts-{os.getpid()}"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
            for m in tar.getmembers():
                parts = Path(m.name).parts
                if not m.name or m.name.startswith("/") or ".." in parts or not (m.isfile() or m.isdir()):
                    raise ClusterError(f"artifacts archive: refused member {m.name!r}")
                target = scratch.joinpath(*parts)
                if m.isdir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                src = tar.extractfile(m)
                assert src is not None
                with open(target, "wb") as fh:
                    shutil.copyfileobj(src, fh)
                    fh.flush()
                    os.fchmod(fh.fileno(), m.mode & 0o777)
                    os.fsync(fh.fileno())
        for folder in sorted((p for p in scratch.rglob("*") if p.is_dir()), reverse=True):
            fsync_dir(folder)  # its entries (the top-level ones: in dest, below)
        names = sorted(p.name for p in scratch.iterdir())
        missing = [d for d in (dest, *dest.parents) if not d.is_dir()]
        dest.mkdir(parents=True, exist_ok=True)
        for d in missing:
            fsync_dir(d.parent)
        for name in names:
            if (dest / name).is_dir() and not (dest / name).is_symlink():
                shutil.rmtree(dest / name)
            os.replace(scratch / name, dest / name)
        fsync_dir(dest)
        return names
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _extract_cached(data: bytes, cache: Path) -> Path:
    """``cache`` holding the archive ``data`` (extracted once: to a scratch folder, then
    renamed into place, so a half-extracted package is never used)."""
    if cache.is_dir():
        return cache
    tmp = cache.parent / f".{cache.name}.tmp-{os.getpid()}-{threading.get_ident()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    unpack_into(data, tmp)
    try:
        os.rename(tmp, cache)
    except OSError:  # another heat put it there first
        shutil.rmtree(tmp, ignore_errors=True)
    return cache


# ----------------------------------------------------------------------------- the heat's description


@dataclass
class RemoteHeat:
    """What a worker needs to run one attempt (no credentials: those travel sealed).

    ``arena_tar``/``arena_sha256``: the arena package (:func:`pack_folder`) and its hash;
    ``manifest_rel``: the manifest's path inside it; ``manifest``/``raw``: the heat's
    manifest (seats applied) and the manifest file bytes; ``agents``: agent id → ``{"spec",
    "options", "price", "credentials": [env names], "heat_limits", "season_spend"}`` (the
    last two: the live spend limits of :class:`aoe_tui.agents.base.Adapter`, the season ledger
    a copy — the runner adds the heat's spend to its own after the attempt); ``adapter_files``: adapter spec or
    registered name → ``(file name, bytes)`` for adapters that are files on the runner;
    ``registered``: registered name → file name; ``provider``: the ``[provider]`` model;
    ``headers``: ``arena.json`` and ``match.json`` bytes the runner wrote; ``tag``:
    ``rRhHaA``; ``heat_id``: the season heat id."""

    arena_tar: bytes
    arena_sha256: str
    manifest_rel: str
    manifest: Any
    raw: bytes
    agents: dict[str, dict[str, Any]]
    provider: Any
    drain_seconds: float
    name: str
    slug: str
    tag: str
    heat_id: str
    headers: dict[str, bytes] = field(default_factory=dict)
    adapter_files: dict[str, tuple[str, bytes]] = field(default_factory=dict)
    registered: dict[str, str] = field(default_factory=dict)


# ----------------------------------------------------------------------------- the actor (worker side)


def seat_credentials(agents: Mapping[str, Mapping[str, Any]], aid: str,
                     creds: Mapping[str, str]) -> tuple[dict[str, str], frozenset[str]]:
    """On a worker: what seat ``aid`` of a remote heat's ``agents`` (agent id -> its entry,
    ``credentials``: the names of its key variables) is handed, from the heat's opened
    ``creds`` (name -> value): ``(known, foreign)``, where ``foreign`` are the other seats' key
    variables (as a local heat's ``Adapter.foreign_credentials``) and ``known`` its own values
    plus the foreign ones, so its proxy can scrub them from what it relays; its process never
    inherits them (:func:`aoe_tui.agents.command.own_environment` drops ``foreign`` after
    adding ``known``)."""
    own = list(agents[aid].get("credentials") or [])
    foreign = frozenset(n for other, b in agents.items() if other != aid for n in (b.get("credentials") or [])
                        if n not in own)
    known = {**{n: creds[n] for n in foreign if n in creds}, **{n: creds[n] for n in own if n in creds}}
    return known, foreign


def node_name() -> str:
    """This node's name (``AOE_WORKER_NAME``, else the host name)."""
    import socket

    return os.environ.get(ENV_WORKER_NAME) or socket.gethostname()


class HeatActor:
    """One attempt on a worker node (module docstring). Made a Ray actor by
    :func:`_actor_class`; its methods run in the actor's process on the node."""

    def __init__(self) -> None:
        from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

        self._key: Any = X25519PrivateKey.generate()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._abort: asyncio.Event | None = None
        self._aborted = False
        self._scratch: Path | None = None  # the heat's scratch match folder, once known
        self._activity: Any = None  # LogTail of its activity.jsonl
        self._activity_lock = threading.Lock()
        self._out: list[Any] = []  # the heat's messages, in order (:meth:`follow`)
        self._out_cond = threading.Condition()

    def hello(self) -> dict[str, Any]:
        """``{"node", "node_id", "pid", "public_key", "code", "image"}``: the node's name and
        Ray id, the actor's pid, its raw X25519 public key, the revision of the code it runs
        (:func:`aoe_tui.cluster.code_revision`) and the guest image its heats boot
        (:func:`aoe_tui.cluster.image_digest`)."""
        from cryptography.hazmat.primitives import serialization

        from aoe_tui.cluster import identity

        ray = require_ray()
        pub = self._key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        return {"node": node_name(), "node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid(),
                "public_key": pub, **identity()}

    def abort(self) -> None:
        """Abort the running heat (``operator interrupt``), as a stopped local heat does."""
        self._aborted = True
        if self._loop is not None and self._abort is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._abort.set)

    def _new_activity(self) -> list[tuple[str, Any]]:
        """``("activity", (sequence, ms, agent, line))`` for each complete line the heat's
        supervisor appended to the scratch folder's ``activity.jsonl`` since the last call
        (``[]`` before the folder is known or once the file is unreadable)."""
        from aoe_tui.replay.activity import ACTIVITY_FILE, ACTIVITY_LOG
        from aoe_tui.replay.jsonl import LogTail

        with self._activity_lock:
            if self._activity is None:
                if self._scratch is None:
                    return []
                self._activity = LogTail(ACTIVITY_LOG, self._scratch / ACTIVITY_FILE)
            tail = self._activity
            if tail is False or not tail.grown():
                return []
            try:
                recs = tail.read()
            except AoeError:  # a bad line: what came before was sent; a view aid, never a failure
                self._activity = False
                return []
            return [("activity", (r.sequence, r.ms, r.agent, r.line)) for r in recs]

    def run(self, heat: RemoteHeat, sealed: bytes):
        """Start the heat and follow it (:meth:`follow` from the first message)."""
        self.start(heat, sealed)
        yield from self.follow(0)

    def start(self, heat: RemoteHeat, sealed: bytes) -> None:
        """Start the heat on its own thread; its messages are kept in order (:meth:`follow`)."""
        creds = json.loads(open_sealed(self._key, sealed)) if sealed else {}
        self._key = None  # one heat per key
        q: queue.Queue = queue.Queue()
        thread = threading.Thread(target=self._thread, args=(heat, creds, q), name="aoe-heat", daemon=True)
        del creds
        thread.start()
        threading.Thread(target=self._pump, args=(q,), name="aoe-heat-pump", daemon=True).start()

    def follow(self, after: int):
        """The heat's messages from number ``after`` on (0: the first), a generator: lists of
        ``("event", line)`` / ``("phase", text)`` / ``("activity", (sequence, ms, agent,
        line))``, then ``("archive", bytes)``, then ``("end", {...})``. An empty list (not
        numbered) is sent whenever nothing else was for :data:`HEARTBEAT_S`: the heartbeat the
        runner's :data:`SILENT_S` bound watches. A runner whose stream broke for a moment
        (``ActorUnavailableError``) follows again from the number of messages it got."""
        i = max(0, int(after))
        sent = time.monotonic()
        while True:
            with self._out_cond:
                if i >= len(self._out):
                    self._out_cond.wait(max(0.0, HEARTBEAT_S - (time.monotonic() - sent)))
                batch = self._out[i:]
            for msg in batch:
                yield msg
                i += 1
                if isinstance(msg, tuple) and msg[0] == "end":
                    return
            if batch:
                sent = time.monotonic()
            elif time.monotonic() - sent >= HEARTBEAT_S:
                yield []  # the heartbeat: alive, nothing new
                sent = time.monotonic()

    def _emit(self, msg: Any) -> None:
        with self._out_cond:
            self._out.append(msg)
            self._out_cond.notify_all()

    def _pump(self, q: queue.Queue) -> None:
        """The heat thread's queue to numbered messages: event and phase lines batched for
        :data:`BATCH_S` with the new activity lines, the archive and the end alone."""
        pending: list[tuple[str, Any]] = []
        last = time.monotonic()
        while True:
            try:
                item = q.get(timeout=BATCH_S)
            except queue.Empty:
                item = None
            if item is not None and item[0] == "activity":
                pending += item[1]
                continue
            if item is not None and item[0] not in ("event", "phase"):
                if pending:
                    self._emit(pending)
                    pending = []
                self._emit(item)
                if item[0] == "end":
                    return
                continue
            if item is not None:
                pending.append(item)
            if item is None or time.monotonic() - last >= BATCH_S:
                pending += self._new_activity()
            if pending and (item is None or time.monotonic() - last >= BATCH_S):
                self._emit(pending)
                pending = []
                last = time.monotonic()

    def _thread(self, heat: RemoteHeat, creds: dict[str, str], q: queue.Queue) -> None:
        end: dict[str, Any] = {"error": None, "source": None, "events_sha256": None}
        scratch: Path | None = None
        try:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                scratch = loop.run_until_complete(self._heat(heat, creds, q))
            finally:
                with contextlib.suppress(Exception):
                    loop.run_until_complete(loop.shutdown_asyncgens())
                self._loop = None
                loop.close()
        except BaseException as err:  # noqa: BLE001 - every failure goes back to the runner
            from aoe_tui.referee.heat import DiskFullError
            from aoe_tui.runtime.provider import ProviderError

            scratch = getattr(err, "aoe_scratch", None)
            source = ("provider" if isinstance(err, (ProviderError, DiskFullError))
                      else getattr(err, "failure_source", None) or "harness")
            end["error"] = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}".strip()
            end["source"] = source
        try:
            if scratch is not None and scratch.is_dir():
                log = scratch / "events.jsonl"
                if log.is_file():
                    end["events_sha256"] = file_sha256(log)
                # the activity lines not sent yet (the file is closed: run_heat returned), then
                # the archive without the two logs the runner wrote as they came
                self._scratch = scratch
                q.put(("activity", self._new_activity()))
                q.put(("archive", pack_folder(scratch, exclude=frozenset({"territories", "events.jsonl",
                                                                          "activity.jsonl"}))))
        except BaseException as err:  # noqa: BLE001
            end["error"] = end["error"] or f"artifacts not sent: {type(err).__name__}: {err}"
            end["source"] = end["source"] or "harness"
        finally:
            if scratch is not None:
                shutil.rmtree(scratch, ignore_errors=True)
            q.put(("end", end))

    async def _heat(self, heat: RemoteHeat, creds: dict[str, str], q: queue.Queue) -> Path:
        from aoe_tui.agents.registry import resolve_adapter
        from aoe_tui.cluster.sweep import heat_folder_name, matches_dir, sweep_stale_heats
        from aoe_tui.domain.arena import LoadedManifest
        from aoe_tui.fsio import write_atomic
        from aoe_tui.referee.heat import bundle_path, run_heat
        from aoe_tui.replay.log import dump_record
        from aoe_tui.runtime.registry import season_provider_factory

        base = worker_dir()
        self._abort = asyncio.Event()
        if self._aborted:
            self._abort.set()
        try:
            cleaned = sweep_stale_heats(base)
        except AoeError as err:  # never this heat's fault: said, and left for the next sweep
            cleaned = []
            q.put(("phase", f"node {node_name()}: {err}"))
        if cleaned:
            q.put(("phase", f"node {node_name()}: tore down {len(cleaned)} territories lost heats left"))
        arena_dir = _extract_cached(heat.arena_tar, base / "arenas" / heat.arena_sha256)
        adapter_dirs: dict[str, Path] = {}
        for key, (fname, data) in heat.adapter_files.items():
            digest = hashlib.sha256(data).hexdigest()
            path = base / "adapters" / digest / fname
            if not path.is_file():
                path.parent.mkdir(parents=True, exist_ok=True)
                write_atomic(path, data, mode=0o755)
            adapter_dirs[key] = path
        registered = {n: adapter_dirs[n] for n in heat.registered if n in adapter_dirs}
        adapters = {}
        for aid, a in heat.agents.items():
            spec = a["spec"]
            if spec.startswith("command:") and spec in adapter_dirs:
                spec = f"command:{adapter_dirs[spec]}"
            adapter = resolve_adapter(spec, registered, a.get("options") or {}, arena_dir=arena_dir)
            if a.get("price") is not None:
                with contextlib.suppress(AttributeError, TypeError):
                    adapter.price = a["price"]
            for attr in ("heat_limits", "season_spend"):  # live spend limits (issue 27)
                if a.get(attr) is not None:
                    with contextlib.suppress(AttributeError, TypeError):
                        setattr(adapter, attr, a[attr])
            known, foreign = seat_credentials(heat.agents, aid, creds)
            with contextlib.suppress(AttributeError, TypeError):
                adapter.foreign_credentials = foreign
                adapter.own_credentials = frozenset(a.get("credentials") or [])
            if known:
                adapter.credentials = known
            adapters[aid] = adapter
        path = arena_dir / heat.manifest_rel
        loaded = LoadedManifest(manifest=heat.manifest, path=path, arena_dir=arena_dir, raw=heat.raw,
                                path_text=str(path))
        folder = heat_folder_name(os.getpid(), heat.tag)
        out = matches_dir(base) / folder
        self._scratch = out  # run() tails its activity.jsonl from now on
        workdir = territories_dir(base) / folder / "territories"
        workdir.mkdir(parents=True, exist_ok=True)
        provider = season_provider_factory(heat.provider)(workdir, heat.heat_id, loaded)

        def on_event(rec: Any, _world: Any) -> None:
            q.put(("event", dump_record(rec)))

        try:
            await run_heat(loaded, provider, adapters, out, drain_seconds=heat.drain_seconds,
                           registered_adapters=registered, name=heat.name, slug=heat.slug,
                           on_phase=lambda msg: q.put(("phase", msg)), on_event=on_event,
                           abort_event=self._abort, write_bundle_file=False)
            # the runner's headers (its arena files, its paths: the §7.3 verifier digest), then
            # the bundle as run_heat writes it
            for fname, data in heat.headers.items():
                write_atomic(out / fname, data, fsync=False)
            if (out / "events.jsonl").is_file():
                from aoe_tui.replay.bundle import write_bundle

                try:
                    write_bundle(out, bundle_path(out, heat.slug), name=heat.name, slug=heat.slug)
                except Exception as err:  # noqa: BLE001 - as run_heat: a line, not a failure
                    q.put(("phase", f"bundle not written: {err}"))
        except BaseException as err:
            err.aoe_scratch = out  # type: ignore[attr-defined]
            raise
        finally:
            # torn down (no territory's state.json left): the folder goes; a teardown that
            # failed leaves it for the sweep
            if not list(workdir.glob("*/state.json")):
                shutil.rmtree(workdir.parent, ignore_errors=True)
        return out


def _sweep_here() -> list[str]:
    """A Ray task on one node: :func:`aoe_tui.cluster.sweep.sweep_stale_heats` there."""
    from aoe_tui.cluster.sweep import sweep_stale_heats

    return [f"{node_name()}: {x}" for x in sweep_stale_heats(worker_dir())]


_ACTOR: Any = None


def _actor_class() -> Any:
    global _ACTOR
    if _ACTOR is None:
        _ACTOR = require_ray().remote(HeatActor)
    return _ACTOR


# ----------------------------------------------------------------------------- the runner's side


_RAY_LOCK = threading.Lock()


def _node_lost_types(ray: Any) -> tuple[type[BaseException], ...]:
    ex = ray.exceptions
    names = ("RayActorError", "ActorDiedError", "ActorUnavailableError", "NodeDiedError", "OwnerDiedError",
             "ObjectLostError", "WorkerCrashedError", "ObjectFetchTimedOutError", "ReferenceCountingAssertionError",
             "RaySystemError", "LocalRayletDiedError")
    return tuple(getattr(ex, n) for n in names if isinstance(getattr(ex, n, None), type))


def quiet_ray_driver_messages() -> bool:
    """Keep Ray's driver-side error messages (``(raylet) Raylet is terminated...`` with the
    dead raylet's last log lines and ANSI colours, published when a node dies) out of
    ``aoe run``'s output and TUI: Ray's error listener thread prints them to ``sys.stdout``
    even with ``log_to_driver=False``. They go to the ``aoe_tui.cluster.ray`` logger (debug)
    instead; the season says a lost node itself (:class:`NodeLostError`). Ray is pinned
    (2.60.0): this replaces ``ray._private.worker.print_to_stdstream``, which the listener
    looks up at each message. Returns False when that name is missing (a Ray that changed:
    its messages then print as before)."""
    import logging

    try:
        import ray._private.worker as ray_worker
    except ImportError:  # pragma: no cover - ray is required here
        return False
    if not callable(getattr(ray_worker, "print_to_stdstream", None)):
        return False
    log = logging.getLogger("aoe_tui.cluster.ray")

    def to_log(data: Any, ignore_prefix: bool = False) -> None:
        for line in (data or {}).get("lines") or []:
            log.debug("(%s) %s", (data or {}).get("pid"), line)

    ray_worker.print_to_stdstream = to_log
    return True


class ClusterHeats:
    """The runner's side: connects to the cluster once and runs attempts on it.

    Args:
        address: as Ray takes it (``"HOST:PORT"``), or ``"auto"``: resolved by
            :func:`aoe_tui.cluster.node.resolve_address` in :meth:`connect` (``$RAY_ADDRESS``,
            else the cluster of the node ``aoe worker start`` runs on this machine), which
            then holds the address found.
        agent_memory_gb, referee_memory_gb: a heat's Ray memory need (GB): per agent, plus
            the referee.

    Raises (:meth:`connect`): :class:`ClusterError` when Ray is missing, ``auto`` finds no
    cluster, the token file is unusable (:func:`aoe_tui.cluster.node.client_auth`), the
    cluster cannot be reached, or no node offers a heat slot.
    """

    def __init__(self, address: str, *, agent_memory_gb: float = 0.6, referee_memory_gb: float = 0.5) -> None:
        self.address = address
        self.agent_memory_gb = float(agent_memory_gb)
        self.referee_memory_gb = float(referee_memory_gb)
        self._connected = False

    def connect(self) -> None:
        """Join the cluster as a driver (once per process); checks that a node offers heat slots."""
        from aoe_tui.cluster.node import client_auth, resolve_address

        # Ray's token authentication (the token file, never the token) must be set before
        # Ray is imported: Ray fixes its auth mode at import
        client_auth()
        ray = require_ray()
        with _RAY_LOCK:
            if not ray.is_initialized():
                # ``auto``: the cluster of this machine's aoe node (Ray's own ``auto`` looks
                # only in /tmp/ray; an aoe node keeps its temp dir elsewhere)
                self.address = resolve_address(self.address)
                try:
                    ray.init(address=self.address, namespace="aoe-tui", log_to_driver=False,
                             logging_level="ERROR", configure_logging=True, include_dashboard=False)
                except Exception as err:  # noqa: BLE001 - one line naming the address
                    raise ClusterError(f"cannot join the Ray cluster at {self.address}: "
                                       f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}") from None
                quiet_ray_driver_messages()
            self._connected = True
        slots = ray.cluster_resources().get(HEAT_SLOT, 0)
        if slots < 1:
            raise ClusterError(f"the Ray cluster at {self.address} has no node with a heat slot "
                               f"(resource {HEAT_SLOT}): join one with `aoe worker start --address ADDRESS`")

    def sweep_nodes(self) -> list[str]:
        """On every live node offering heat slots, tear down what heats whose process is
        gone left (:func:`aoe_tui.cluster.sweep.sweep_stale_heats`; e.g. the actors of a
        runner killed with ``kill -9``, which Ray ended). Returns ``"<node>: heat-...:
        <territory>"`` strings; a node that fails to answer is skipped."""
        ray = require_ray()
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self.wait_orphans()
        task = ray.remote(_sweep_here)
        refs = [task.options(num_cpus=0, max_retries=0, scheduling_strategy=NodeAffinitySchedulingStrategy(
            n["NodeID"], soft=False)).remote()
            for n in ray.nodes() if n.get("Alive") and (n.get("Resources") or {}).get(HEAT_SLOT)]
        out: list[str] = []
        for ref in refs:
            with contextlib.suppress(Exception):
                out += ray.get(ref, timeout=300)
        return out

    def wait_orphans(self, timeout_s: float = 90.0) -> int:
        """Wait until no heat actor of another job (a runner killed with ``kill -9``: Ray
        ends the actors it owned, within seconds) is still alive, so a sweep finds their
        processes gone; returns how many were still alive at the end (0 normally)."""
        ray = require_ray()
        from ray._private.state import actors

        mine = ray.get_runtime_context().get_job_id()
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                left = [a for a in actors().values() if a.get("ActorClassName") == HeatActor.__name__
                        and a.get("State") != "DEAD" and str(a.get("JobID", "")) != mine]
            except Exception:  # noqa: BLE001 - a private table that moved: do not wait
                return 0
            if not left or time.monotonic() > deadline:
                return len(left)
            time.sleep(0.5)

    def _avoiding(self, avoid: Collection[str]) -> Any:
        """A scheduling strategy keeping a heat off the nodes named in ``avoid`` (their
        ``aoe-worker`` label), or None: nothing to avoid, or no other live node offers a heat
        slot (the heat then goes wherever Ray places it rather than wait forever)."""
        if not avoid:
            return None
        from aoe_tui.cluster.node import LABEL_WORKER

        ray = require_ray()
        from ray.util.scheduling_strategies import NodeLabelSchedulingStrategy, NotIn

        others = [n for n in ray.nodes() if n.get("Alive") and (n.get("Resources") or {}).get(HEAT_SLOT)
                  and (n.get("Labels") or {}).get(LABEL_WORKER) not in set(avoid)]
        if not others:
            return None
        return NodeLabelSchedulingStrategy(hard={LABEL_WORKER: NotIn(*sorted(set(avoid)))})

    def heat_slots(self) -> int:
        """Heat slots the cluster offers now (all nodes)."""
        return int(require_ray().cluster_resources().get(HEAT_SLOT, 0))

    def memory_bytes(self, agents: int) -> int:
        """A heat's Ray memory need (bytes) for ``agents`` agents."""
        return int((self.agent_memory_gb * agents + self.referee_memory_gb) * 1e9)

    async def run_heat(self, heat: RemoteHeat, folder: Path, credentials: Mapping[str, str], *,
                       on_event: Callable[[Any, WorldState], None] | None = None,
                       on_phase: Callable[[str], None] | None = None,
                       on_placed: Callable[[str, str], None] | None = None,
                       on_activity: Callable[[list[Any]], None] | None = None,
                       timings: dict[str, float] | None = None,
                       avoid: Collection[str] = (),
                       on_identity: Callable[[dict[str, str]], None] | None = None) -> WorldState:
        """Run one attempt on a node with a free heat slot; fill ``folder`` (its headers are
        already there) and return the final world.

        ``credentials``: env name → value, sealed to the actor's key. ``on_placed(node,
        node_id)`` once the actor runs on a node; ``on_identity({"code", "image"})`` right
        before it with what the node runs (:meth:`HeatActor.hello`; ``"unknown"`` from a node
        too old to say). ``avoid``: node names (``AOE_WORKER_NAME``) the heat is not placed
        on while another live node offers a heat slot (the nodes its earlier attempts were
        lost on: :attr:`NodeLostError.node`). The agents' activity lines the node's
        ``activity.jsonl`` gets are appended to ``folder``'s as they arrive, through an
        :class:`~aoe_tui.replay.activity.ActivityWriter` as a local heat's supervisor does, and
        handed to ``on_activity(records)`` (:class:`~aoe_tui.replay.activity.ActivityRecord`
        list, file order). ``timings`` (if given) gets monotonic
        seconds: ``scheduled``, ``placed``, ``first_event``, ``last_event``, ``artifacts``.

        Once placed, the actor sends something at least every :data:`HEARTBEAT_S`; when
        nothing came for :func:`silent_s` (:data:`SILENT_S`, 30 s) the node is given up: the
        actor is killed, nothing it sends later is written or counted, and
        :class:`NodeLostError` names the node.

        Raises:
            NodeLostError: the node or the actor was lost mid-heat, or went silent (names the node).
            RemoteHeatError: the heat failed on the node (its failure source).
            ClusterError: the events the runner wrote differ from the node's log.
            asyncio.CancelledError: after the aborted heat's artifacts were taken.
        """
        from aoe_tui.domain.world import WorldState
        from aoe_tui.replay.activity import ACTIVITY_FILE, ActivityRecord, ActivityWriter
        from aoe_tui.replay.log import EventLogWriter, parse_line
        from aoe_tui.replay.reducer import apply_event

        ray = require_ray()
        lost = _node_lost_types(ray)
        say = on_phase or (lambda _m: None)
        t = timings if timings is not None else {}
        quiet_after = silent_s()
        unavailable = getattr(ray.exceptions, "ActorUnavailableError", None)
        t["scheduled"] = time.monotonic()

        def new_actor() -> Any:
            placement: dict[str, Any] = {}
            strategy = self._avoiding(avoid)
            if strategy is not None:
                placement["scheduling_strategy"] = strategy
            return _actor_class().options(
                num_cpus=0, resources={HEAT_SLOT: 1}, memory=self.memory_bytes(len(heat.agents)),
                max_restarts=0, max_task_retries=0, max_concurrency=8, **placement,
            ).remote()

        def ask_hello(actor: Any) -> dict[str, Any]:
            # waits while Ray places the actor (every slot may be busy); a brief
            # ActorUnavailableError is asked again for UNAVAILABLE_S before it counts
            since: float | None = None
            while True:
                try:
                    return ray.get(actor.hello.remote())
                except BaseException as err:
                    if unavailable is None or not isinstance(err, unavailable):
                        raise
                    since = time.monotonic() if since is None else since
                    if time.monotonic() - since > UNAVAILABLE_S:
                        raise
                    time.sleep(UNAVAILABLE_RETRY_S)

        actor = await asyncio.to_thread(new_actor)
        node = "?"
        loop = asyncio.get_running_loop()
        inbox: asyncio.Queue = asyncio.Queue()
        world = WorldState()
        writer: EventLogWriter | None = None
        activity: ActivityWriter | None = None
        activity_off = False  # the runner's activity.jsonl could not be written: no more lines
        reader: threading.Thread | None = None
        try:
            # an actor lost before it answered was never placed: nothing of the heat ran, so it
            # is made again (its node died and Ray had not noticed: two nodes lost at once can
            # put the re-run attempts of both on the other dead node) for PLACE_RETRY_S
            first_loss: float | None = None
            while True:
                try:
                    hello = await asyncio.to_thread(ask_hello, actor)
                    break
                except lost as err:
                    with contextlib.suppress(Exception):
                        ray.kill(actor, no_restart=True)
                    if first_loss is None:  # said once: a node that keeps losing it would fill the log
                        first_loss = time.monotonic()
                        say(f"the heat's actor was lost before it started ({_first_line(err)}): placing it again "
                            f"(for up to {PLACE_RETRY_S:g} s)")
                    elif time.monotonic() - first_loss > PLACE_RETRY_S:
                        raise NodeLostError(f"the heat's actor died before it started (for {PLACE_RETRY_S:g} s of "
                                            f"placing it again): {_first_line(err)}") from None
                    await asyncio.sleep(PLACE_PAUSE_S)
                    actor = await asyncio.to_thread(new_actor)
            node = str(hello["node"])
            t["placed"] = time.monotonic()
            if on_identity is not None:
                on_identity({"code": str(hello.get("code") or "unknown"), "image": str(hello.get("image") or "unknown")})
            if on_placed is not None:
                on_placed(node, str(hello.get("node_id", "")))
            sealed = seal(hello["public_key"], json.dumps(dict(credentials)).encode()) if credentials else b""
            gen = actor.run.options(num_returns="streaming").remote(heat, sealed)
            del sealed

            def read() -> None:
                stream, got, since = gen, 0, None
                while True:
                    try:
                        for ref in stream:
                            item = ray.get(ref)
                            since = None
                            if not (isinstance(item, list) and not item):  # heartbeats are not numbered
                                got += 1
                            loop.call_soon_threadsafe(inbox.put_nowait, ("item", item))
                        loop.call_soon_threadsafe(inbox.put_nowait, ("eof", None))
                        return
                    except BaseException as err:  # noqa: BLE001 - handed to the loop
                        if unavailable is not None and isinstance(err, unavailable):
                            # for a moment unreachable: follow again from the messages we got,
                            # for UNAVAILABLE_S before the node counts as lost
                            since = time.monotonic() if since is None else since
                            if time.monotonic() - since <= UNAVAILABLE_S:
                                time.sleep(UNAVAILABLE_RETRY_S)
                                with contextlib.suppress(Exception):
                                    stream = actor.follow.options(num_returns="streaming").remote(got)
                                continue
                        with contextlib.suppress(RuntimeError):
                            loop.call_soon_threadsafe(inbox.put_nowait, ("error", err))
                        return

            reader = threading.Thread(target=read, name="aoe-cluster-reader", daemon=True)
            reader.start()
            end: dict[str, Any] | None = None
            cancelled: BaseException | None = None
            deadline: float | None = None
            while True:
                try:
                    if deadline is None:
                        try:
                            kind, item = await asyncio.wait_for(inbox.get(), quiet_after)
                        except asyncio.TimeoutError:
                            raise NodeLostError(
                                f"worker node {node} went silent: nothing from its heat actor for "
                                f"{quiet_after:g} s (heartbeat every {HEARTBEAT_S:g} s); given up", node) from None
                    else:
                        kind, item = await asyncio.wait_for(inbox.get(), max(0.1, deadline - time.monotonic()))
                except asyncio.CancelledError as err:
                    if cancelled is not None:
                        raise
                    cancelled = err
                    deadline = time.monotonic() + ABORT_WAIT_S
                    with contextlib.suppress(Exception):
                        actor.abort.remote()
                    continue
                except asyncio.TimeoutError:
                    break
                if kind == "error":
                    if isinstance(item, lost):
                        raise NodeLostError(f"worker node {node} lost mid-heat: {_first_line(item)}", node) from None
                    raise RemoteHeatError(f"heat on node {node} failed: {_first_line(item)}") from None
                if kind == "eof":
                    break
                if isinstance(item, list):
                    if not item:  # a heartbeat
                        continue
                    acts: list[ActivityRecord] = []
                    if activity is None and not activity_off:
                        # opened with the heat's first lines, as a local heat's supervisor opens its own
                        try:
                            activity = ActivityWriter(folder / ACTIVITY_FILE)
                        except (OSError, AoeError) as err:
                            activity_off = True
                            say(f"no live activity file: {_first_line(err)}")
                    for what, value in item:
                        if what == "phase":
                            say(value)
                            continue
                        if what == "activity":
                            acts.append(ActivityRecord(*value))
                            continue
                        rec = parse_line(value)
                        if writer is None:
                            writer = EventLogWriter(folder / "events.jsonl")
                            t["first_event"] = time.monotonic()
                        written = writer.append(rec.event, rec.elapsed_ms)
                        if written.sequence != rec.sequence:
                            raise ClusterError(f"node {node}: event {rec.sequence} arrived as {written.sequence}")
                        t["last_event"] = time.monotonic()
                        apply_event(world, written)
                        if on_event is not None:
                            with contextlib.suppress(Exception):
                                on_event(written, world)
                    if acts and activity is not None and not activity_off:
                        # as a local heat's supervisor: one write per batch, no fsync (a live
                        # view aid: a failure is one line, never the heat's)
                        try:
                            for rec in acts:
                                activity.add(rec.ms, rec.agent, rec.line)
                            activity.flush()
                        except (OSError, AoeError) as err:
                            activity_off = True
                            say(f"live activity file stopped: {folder / ACTIVITY_FILE}: {_first_line(err)}")
                        else:
                            if on_activity is not None:
                                with contextlib.suppress(Exception):
                                    on_activity(acts)
                elif item[0] == "archive":
                    if writer is not None:
                        writer.close()
                    if activity is not None:
                        activity.close()
                    await asyncio.to_thread(unpack_into, item[1], folder)
                    t["artifacts"] = time.monotonic()
                elif item[0] == "end":
                    end = item[1]
            if writer is not None:
                writer.close()
            if cancelled is not None:
                raise cancelled
            if end is None:
                raise NodeLostError(f"worker node {node} ended the heat without its result", node)
            mine = folder / "events.jsonl"
            if end.get("events_sha256") and mine.is_file():
                if await asyncio.to_thread(file_sha256, mine) != end["events_sha256"]:
                    raise ClusterError(f"node {node}: events.jsonl differs from the one the node wrote")
            if end.get("error"):
                raise RemoteHeatError(f"on node {node}: {end['error']}", end.get("source") or "harness")
            return world
        finally:
            if writer is not None:
                writer.close()
            if activity is not None:
                activity.close()
            with contextlib.suppress(Exception):
                ray.kill(actor, no_restart=True)


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}".strip().rstrip(":")


def arena_archive(loaded: LoadedManifest) -> tuple[bytes, str, str]:
    """``(tar bytes, sha256, manifest path inside)`` of a heat's arena package."""
    data = pack_folder(loaded.arena_dir)
    return data, hashlib.sha256(data).hexdigest(), Path(loaded.path).resolve().relative_to(
        Path(loaded.arena_dir).resolve()).as_posix()
