"""Units of the cluster path that need no cluster (issue 15): the ``[cluster]`` table, where
an attempt ran (``attempt_placed``: log, reducer, season screen, season lines), sealed
credentials, the artifacts archive, the node sweep. The path itself runs on a real two-node
cluster in ``tests/test_cluster_season.py``."""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
import textwrap

import pytest

from aoe_tui.cluster import territories_dir
from aoe_tui.cluster.remote import file_sha256, open_sealed, pack_folder, seal, unpack_into
from aoe_tui.cluster.sweep import heat_folder_name, matches_dir, sweep_stale_heats
from aoe_tui.domain import season_events as se
from aoe_tui.domain.display import summarize_season_event
from aoe_tui.domain.season_file import SeasonFileError, parse_season_text
from aoe_tui.errors import AoeError
from aoe_tui.replay.season_log import SeasonLogWriter, read_season_log
from aoe_tui.replay.season_reducer import reduce_season

SEASON = textwrap.dedent("""\
    id = "s"
    label = "w"
    arena = "a.toml"
    [format]
    kind = "league"
    [[entrants]]
    id = "a"
    adapter = "oracle"
    model = "oracle"
    [[entrants]]
    id = "b"
    adapter = "oracle"
    model = "oracle"
    """)


def test_cluster_table_is_optional_checked_and_refuses_unknown_keys():
    assert parse_season_text(SEASON, "s.toml").cluster is None
    c = parse_season_text(SEASON + '[cluster]\naddress = "auto"\nagent_memory_gb = 1.5\n', "s.toml").cluster
    assert (c.address, c.agent_memory_gb, c.referee_memory_gb) == ("auto", 1.5, 0.5)
    with pytest.raises(SeasonFileError, match=r"s\.toml:\d+: cluster\.adress"):
        parse_season_text(SEASON + '[cluster]\naddress = "auto"\nadress = "x"\n', "s.toml")
    with pytest.raises(SeasonFileError, match=r"cluster\.address: must not be blank"):
        parse_season_text(SEASON + '[cluster]\naddress = " "\n', "s.toml")


def test_attempt_placed_is_logged_reduced_shown_and_refused_for_no_running_attempt(tmp_path):
    from aoe_tui.tui.seasonmodel import SeasonModel

    log = tmp_path / "season.jsonl"
    with SeasonLogWriter(log, clock=lambda: 1000) as w:
        w.append(se.SeasonStarted(season="s", label="w", arena_id="x", format={"kind": "league"}, entrants=["a", "b"],
                                  seed=1, heat_size=2, min_heat_size=2, max_attempts=2, season_sha256="0" * 64))
        w.append(se.RoundScheduled(round=1, heats=[se.HeatSeats(heat=1, seats=["a", "b"])]))
        w.append(se.AttemptStarted(round=1, heat=1, attempt=1, folder="round-1/heat-1/attempt-1"))
        placed = se.AttemptPlaced(round=1, heat=1, attempt=1, node="n2", node_id="abc")
        w.append(placed)
    recs = read_season_log(log)
    state = reduce_season(recs)
    (heat,) = state.heats()
    assert heat.attempts[0].node == "n2"
    assert summarize_season_event(placed) == "r1h1a1 on node n2"
    model = SeasonModel()
    for r in recs:
        model.apply(r)
    (row,) = [row for row in model.rows({}) if row.kind == "attempt"]
    # in the wide detail column: the 13-column Heat column cut "attempt 1 @n2" to "attempt 1 "
    assert row.label == "    attempt 1" and row.entrants.startswith("on n2"), row
    # a placement of an attempt that is not running is refused, as every season line is
    with pytest.raises(AoeError, match="not running"):
        reduce_season(recs + [recs[-1].model_copy(update={"sequence": 4, "event": se.AttemptPlaced(
            round=1, heat=1, attempt=2, node="n1")})])


def test_sealed_credentials_open_only_with_the_actors_key():
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

    key = X25519PrivateKey.generate()
    pub = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    payload = b'{"AOE_KEY": "sk-dummy-123"}'
    sealed = seal(pub, payload)
    assert b"sk-dummy" not in sealed and open_sealed(key, sealed) == payload
    with pytest.raises(InvalidTag):
        open_sealed(X25519PrivateKey.generate(), sealed)
    with pytest.raises(InvalidTag):
        open_sealed(key, sealed[:-1] + bytes([sealed[-1] ^ 1]))


def test_artifacts_archive_round_trips_and_refuses_escapes(tmp_path):
    src = tmp_path / "src"
    (src / "agents" / "a").mkdir(parents=True)
    (src / "agents" / "a" / "result.json").write_text("{}")
    (src / "world.json").write_text("{\"w\": 1}")
    (src / "territories").mkdir()
    (src / "territories" / "state.json").write_text("x")
    os.symlink("/etc/passwd", src / "link")
    data = pack_folder(src, exclude=frozenset({"territories"}))
    assert data == pack_folder(src, exclude=frozenset({"territories"}))  # deterministic
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "events.jsonl").write_text("kept\n")
    assert unpack_into(data, dest) == ["agents", "world.json"]
    assert (dest / "agents" / "a" / "result.json").read_text() == "{}"
    assert (dest / "events.jsonl").read_text() == "kept\n" and not (dest / "link").exists()
    assert file_sha256(dest / "world.json") == hashlib.sha256(b'{"w": 1}').hexdigest()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dest", "src"]  # no scratch left
    for name, kind in (("../evil", tarfile.REGTYPE), ("/abs", tarfile.REGTYPE), ("ln", tarfile.SYMTYPE)):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            info = tarfile.TarInfo(name)
            info.type = kind
            info.linkname = "/etc/passwd" if kind == tarfile.SYMTYPE else ""
            tar.addfile(info, io.BytesIO(b""))
        with pytest.raises(AoeError, match="refused member"):
            unpack_into(buf.getvalue(), dest)
    assert not (tmp_path / "evil").exists()


def test_unpacked_artifacts_are_fsynced_files_and_folders(tmp_path, monkeypatch):
    """Every file and every folder ``unpack_into`` writes is fsynced (the real syscall,
    watched: which file each fsync was for), nested folders included, and the parents of
    the folders it creates for ``dest``."""
    src = tmp_path / "src"
    (src / "agents" / "a" / "deep").mkdir(parents=True)
    (src / "agents" / "a" / "result.json").write_text("{}")
    (src / "agents" / "a" / "deep" / "log.txt").write_text("x")
    (src / "agents" / "empty").mkdir()
    (src / "world.json").write_text("{}")
    data = pack_folder(src)
    dest = tmp_path / "season" / "round-1" / "attempt-1"
    (tmp_path / "season").mkdir()
    synced: list[str] = []
    real = os.fsync

    def spy(fd: int) -> None:
        real(fd)
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))

    monkeypatch.setattr(os, "fsync", spy)
    unpack_into(data, dest)
    scratch = str(tmp_path / "season" / "round-1" / ".attempt-1.artifacts-")

    def rel(path: str) -> str:  # written in the scratch folder, then moved into dest
        if path.startswith(scratch):
            return path[len(scratch):].split("/", 1)[1] if "/" in path[len(scratch):] else "(scratch)"
        return os.path.relpath(path, dest)

    done = {rel(p) for p in synced}
    wanted = {str(p.relative_to(dest)) for p in dest.rglob("*")} | {"."}
    assert wanted == {"agents", "agents/a", "agents/a/deep", "agents/a/deep/log.txt", "agents/a/result.json",
                      "agents/empty", "world.json", "."}
    assert wanted <= done  # the top-level names are entries of dest (".")
    assert {"..", "../.."} & done == {".."}  # round-1 was created (in season), season was not


def test_sweep_removes_only_heats_whose_process_is_gone(tmp_path):
    import subprocess

    dead = subprocess.Popen(["true"])
    dead.wait()
    live, gone = heat_folder_name(os.getpid(), "r1h1a1"), heat_folder_name(dead.pid, "r1h2a1")
    for name in (live, gone):
        (territories_dir(tmp_path) / name / "territories").mkdir(parents=True)
        (matches_dir(tmp_path) / name).mkdir(parents=True)
    assert sweep_stale_heats(tmp_path) == []  # no territory state: nothing to tear down
    assert [p.name for p in territories_dir(tmp_path).iterdir()] == [live]
    assert [p.name for p in matches_dir(tmp_path).iterdir()] == [live]


def test_sweep_takes_a_reused_pid_for_a_lost_heat(tmp_path):
    """A heat folder records its owner's pid and start (``/proc/PID/stat`` field 22): a live
    process with that pid but another start (the pid reused, e.g. after a reboot) does not
    keep the heat; a folder of an older version (pid only) is judged by the pid, as before."""
    import subprocess

    from aoe_tui.runtime.netalloc import process_start_ticks

    owner = subprocess.Popen(["sleep", "60"])
    try:
        start = process_start_ticks(owner.pid)
        assert start is not None and start == process_start_ticks(owner.pid)
        mine = heat_folder_name(owner.pid, "r1h1a1")
        assert mine == f"heat-{owner.pid}.{start}-r1h1a1"
        reused = f"heat-{owner.pid}.{start + 1}-r1h2a1"  # what a reboot's namesake looks like
        older = f"heat-{owner.pid}-r1h3a1"
        for name in (mine, reused, older):
            (territories_dir(tmp_path) / name / "territories").mkdir(parents=True)
            (matches_dir(tmp_path) / name).mkdir(parents=True)
        assert sweep_stale_heats(tmp_path) == []
        assert sorted(p.name for p in territories_dir(tmp_path).iterdir()) == sorted([mine, older])
        assert sorted(p.name for p in matches_dir(tmp_path).iterdir()) == sorted([mine, older])
    finally:
        owner.kill()
        owner.wait()
    sweep_stale_heats(tmp_path)  # the owner is gone: both of its heats are lost
    assert list(territories_dir(tmp_path).iterdir()) == [] and list(matches_dir(tmp_path).iterdir()) == []


def test_sweep_tears_down_the_territories_of_a_heat_whose_pid_was_reused(tmp_path):
    """The territories inside a lost heat's folder are judged as the folder is: their
    ``state.json`` names the same owner (pid and start), so a pid reused by a live process
    neither keeps them (their container, network and mounts left running) while the folder
    is removed, nor leaves the ``referee-state`` companion behind."""
    import json
    import subprocess

    from aoe_tui.runtime.container import REFEREE_STATE_FILE
    from aoe_tui.runtime.netalloc import process_start_ticks

    owner = subprocess.Popen(["sleep", "60"])
    try:
        start = process_start_ticks(owner.pid)
        assert start is not None
        lost, live = f"heat-{owner.pid}.{start + 1}-r1h1a1", heat_folder_name(owner.pid, "r1h2a1")
        for name, owner_start in ((lost, start + 1), (live, start)):
            box = territories_dir(tmp_path) / name / "territories" / "t1"
            box.mkdir(parents=True)
            (box / "state.json").write_text(json.dumps({
                "provider": "container", "id": "t1", "owner_pid": owner.pid, "owner_start": owner_start,
                "nspawn_pid": None, "leader_pid": None, "root": "", "dirs": [], "cgroups": [], "netns": None,
                "host_veth": None, "subnet": None}))
            (box / REFEREE_STATE_FILE).write_text("container\0")
        assert sweep_stale_heats(tmp_path) == [f"{lost}: t1"]
        assert [p.name for p in territories_dir(tmp_path).iterdir()] == [live]
        assert (territories_dir(tmp_path) / live / "territories" / "t1" / "state.json").is_file()
    finally:
        owner.kill()
        owner.wait()
    box = tmp_path / "local" / "t1"
    box.mkdir(parents=True)
    (box / "state.json").write_text(json.dumps({"provider": "container", "id": "t1", "owner_pid": owner.pid,
                                                "dirs": []}))
    (box / REFEREE_STATE_FILE).write_text("container\0")
    from aoe_tui.runtime.container import cleanup_stale

    assert cleanup_stale(tmp_path / "local") == ["t1"]
    assert list(box.iterdir()) == []  # no companion left behind


def test_credentials_handed_to_an_adapter_win_over_the_environment(monkeypatch):
    from aoe_tui.agents.opencode import OpencodeAdapter, OpencodeError

    monkeypatch.delenv("AOE_TEST_KEY", raising=False)
    adapter = OpencodeAdapter({"api_key_env": "AOE_TEST_KEY"})
    assert adapter.credential_names() == ["AOE_TEST_KEY"]
    with pytest.raises(OpencodeError, match="AOE_TEST_KEY"):
        adapter.preflight()  # neither handed over nor in the environment
    adapter.credentials = {"AOE_TEST_KEY": "sk-handed"}
    adapter.preflight()  # a worker's adapter: the key was handed over, the environment has none
    assert adapter.credential("AOE_TEST_KEY") == "sk-handed" and "AOE_TEST_KEY" not in os.environ
    monkeypatch.setenv("AOE_TEST_KEY", "sk-env")
    assert adapter.credential("AOE_TEST_KEY") == "sk-handed"
    assert OpencodeAdapter({"api_key_env": "AOE_TEST_KEY"}).credential("AOE_TEST_KEY") == "sk-env"


def test_a_cluster_heats_activity_reaches_the_live_tui_as_aoe_watch_posts_it():
    """A heat on a worker node has no local supervisor: the runner hands its activity
    records to the observer (``heat_activity``), which the live TUI posts as ``aoe watch``
    does (:meth:`LiveFeed.post_activity`), so its heat model shows them."""
    from aoe_tui.replay.activity import ActivityRecord
    from aoe_tui.tui.live import FeedObserver, LiveFeed
    from aoe_tui.tui.viewmodel import HeatModel

    feed = LiveFeed()
    obs = FeedObserver(feed)
    folder = "round-1/heat-1/attempt-1"
    obs.attempt_started(folder, {}, "t")
    recs = [ActivityRecord(0, 5, "oracle", "$ systemctl start app"), ActivityRecord(1, 9, "memory", "  ok")]
    obs.heat_activity(folder, recs)
    assert obs.activity(folder, "oracle") == ()  # no supervisor to read
    assert feed.drain_activity() == [(folder, recs[0]), (folder, recs[1])]
    model = HeatModel()
    for r in recs:
        model.apply_activity(r)
    assert model.timed_activity and list(model.activity_lines["oracle"]) == ["$ systemctl start app"]


def test_a_resume_sweeps_the_nodes_off_the_event_loop_and_logs_what_they_tore_down(tmp_path):
    """The nodes' sweep waits for a killed runner's actors (up to minutes): it must not hold
    the runner's event loop (the TUI, the stop signals), and what it tore down is logged."""
    import asyncio
    import threading

    from aoe_tui.domain.season_file import load_season
    from aoe_tui.season.runner import SeasonRunner
    from tests.test_season_results import _season_text

    f = tmp_path / "s.toml"
    f.write_text(_season_text())
    out = tmp_path / "out"
    first = SeasonRunner(load_season(f), out)
    first._open()
    first.log.close()

    class Nodes:  # the ClusterHeats calls the runner makes
        address = "fake:1"
        swept_on: threading.Thread | None = None

        def connect(self) -> None:
            pass

        def heat_slots(self) -> int:
            return 1

        def sweep_nodes(self) -> list[str]:
            Nodes.swept_on = threading.current_thread()
            return ["node-b: heat-7-r1h1a1: r1h1-t1"]

    class Stop(Exception):
        pass

    async def no_heats() -> None:
        raise Stop

    runner = SeasonRunner(load_season(f), out)
    runner.cluster = Nodes()
    runner._run_round_heats = no_heats
    with pytest.raises(Stop):
        asyncio.run(runner.run())
    assert Nodes.swept_on is not None and Nodes.swept_on is not threading.main_thread()
    cleaned = [ev for ev in read_season_log(out / "season.jsonl") if isinstance(ev.event, se.StaleTerritoriesCleaned)]
    assert [c.event.territories for c in cleaned] == [["node-b: heat-7-r1h1a1: r1h1-t1"]]


def test_a_stale_node_record_never_names_another_session(tmp_path):
    """``aoe worker stop`` after a reboot: the record's pid now leads someone else's session
    (here a ``sleep`` in a session of its own): none of its processes is the node's, so
    none is signalled; the node's own (carrying its ``AOE_WORKER_DIR``) still are."""
    import signal
    import subprocess

    from aoe_tui.cluster import ENV_WORKER_DIR
    from aoe_tui.cluster.node import NodeRecord, node_alive, node_pids, stop_node
    from aoe_tui.fsio import write_json_atomic

    work = tmp_path / "node"
    work.mkdir()
    base = {k: v for k, v in os.environ.items() if k != ENV_WORKER_DIR}
    stranger = subprocess.Popen(["sleep", "30"], start_new_session=True, env=base)
    ours = subprocess.Popen(["sleep", "30"], start_new_session=True, env={**base, ENV_WORKER_DIR: str(work)})
    try:
        rec = NodeRecord(str(work), "n", False, 1, "", stranger.pid, str(tmp_path / "ray"), "")
        assert node_pids(rec) == [] and not node_alive(rec)
        assert node_pids(stranger.pid) == [stranger.pid]  # by session alone it would be
        write_json_atomic(work / "node.json", rec.to_json())
        assert stop_node(work, grace_s=0.5)[0] == rec
        assert stranger.poll() is None and not (work / "node.json").exists()
        assert node_pids(NodeRecord(str(work), "n", False, 1, "", ours.pid, "", "")) == [ours.pid]
    finally:
        for p in (stranger, ours):
            p.send_signal(signal.SIGKILL)
            p.wait()


def test_ray_driver_messages_stay_out_of_the_runners_output(capsys, caplog):
    """A node's death makes Ray's error listener print ``(raylet) Raylet is terminated...``
    (with the raylet's last log lines) to the runner's stdout; after joining, those lines
    go to the ``aoe_tui.cluster.ray`` logger instead."""
    pytest.importorskip("ray")
    import logging

    import ray._private.worker as ray_worker

    from aoe_tui.cluster.remote import quiet_ray_driver_messages

    before = ray_worker.print_to_stdstream
    try:
        msg = {"lines": ["Raylet is terminated. Termination is unexpected."], "pid": "raylet", "is_err": False}
        before(dict(msg), ignore_prefix=False)  # Ray's own: to stdout
        assert "Raylet is terminated" in capsys.readouterr().out
        assert quiet_ray_driver_messages()
        with caplog.at_level(logging.DEBUG, logger="aoe_tui.cluster.ray"):
            ray_worker.print_to_stdstream(dict(msg), ignore_prefix=False)
        out = capsys.readouterr()
        assert "Raylet" not in out.out and "Raylet" not in out.err
        assert "(raylet) Raylet is terminated. Termination is unexpected." in caplog.text
    finally:
        ray_worker.print_to_stdstream = before


def test_a_worker_seat_gets_its_own_key_and_scrubs_but_never_inherits_the_others(monkeypatch):
    """Issue 27 on a cluster: as in a local heat, each seat's proxy knows the other seats' key
    values (to scrub them) and its command process inherits only its own."""
    from aoe_tui.agents.command import CommandAdapter, own_environment
    from aoe_tui.cluster.remote import seat_credentials

    agents = {"a": {"credentials": ["KEY_A"]}, "b": {"credentials": ["KEY_B", "SHARED"]},
              "c": {"credentials": ["SHARED"]}}
    creds = {"KEY_A": "sk-aaaa-1111", "KEY_B": "sk-bbbb-2222", "SHARED": "sk-ssss-3333"}
    known, foreign = seat_credentials(agents, "a", creds)
    assert foreign == {"KEY_B", "SHARED"} and known == creds
    known_c, foreign_c = seat_credentials(agents, "c", creds)
    assert foreign_c == {"KEY_A", "KEY_B"} and known_c == creds
    adapter = CommandAdapter("x", "/bin/true")
    adapter.credentials, adapter.foreign_credentials = known, foreign
    monkeypatch.delenv("KEY_B", raising=False)
    env = own_environment(adapter, base={"PATH": "/bin"})
    assert env == {"PATH": "/bin", "KEY_A": "sk-aaaa-1111"}
    assert adapter.credential("KEY_B") == "sk-bbbb-2222"  # what its proxy scrubs


def test_a_node_on_other_code_is_recorded_and_said_and_a_lost_heat_avoids_its_node(tmp_path):
    """The runner's side of issue 30 items 7 and 8 (the cluster replaced by what it reports;
    the real path: tests/test_cluster_silent.py): each ``attempt_placed`` records the code
    revision and guest image the node ran the heat with, a difference from the runner's is
    said, and the next attempt of a heat lost on a node is asked to avoid that node."""
    import asyncio

    from aoe_tui.cluster import code_revision, image_digest
    from aoe_tui.cluster.remote import NodeLostError
    from aoe_tui.domain.season_file import load_season
    from aoe_tui.season.runner import SeasonRunner
    from tests.test_season_results import _season_text

    f = tmp_path / "s.toml"
    f.write_text(_season_text(max_attempts=2))
    out = tmp_path / "out"
    asked: list[list[str]] = []

    class Nodes:  # the ClusterHeats calls the runner makes
        address = "fake:1"

        def connect(self) -> None:
            pass

        def heat_slots(self) -> int:
            return 2

        def sweep_nodes(self) -> list[str]:
            return []

        async def run_heat(self, heat, folder, credentials, *, on_placed, on_identity, avoid, **_kw):
            asked.append(list(avoid))
            node = "w1" if len(asked) == 1 else "w2"
            on_identity({"code": "0" * 40 if node == "w1" else code_revision(), "image": image_digest()})
            on_placed(node, f"id-{node}")
            raise NodeLostError(f"worker node {node} went silent", node)

    lines: list[str] = []
    runner = SeasonRunner(load_season(f), out, say=lines.append)
    runner.cluster = Nodes()
    asyncio.run(runner.run())
    assert asked == [[], ["w1"]]
    placed = [r.event for r in read_season_log(out / "season.jsonl") if isinstance(r.event, se.AttemptPlaced)]
    assert [(p.node, p.code_revision, p.image_digest) for p in placed] == [
        ("w1", "0" * 40, image_digest()), ("w2", code_revision(), image_digest())]
    (heat,) = reduce_season(read_season_log(out / "season.jsonl")).heats()
    assert [(a.node, a.node_code) for a in heat.attempts] == [("w1", "0" * 40), ("w2", code_revision())]
    said = [x for x in lines if " runs code" in x or " runs guest" in x]
    assert said == [f"r1h1a1: node w1 runs code revision {'0' * 40}, this runner {code_revision()}"], lines
    # the runner says at the start which it does: it records and says, it does not refuse
    assert (f"this runner: code revision {code_revision()}, guest image {image_digest()}; a node running other "
            "code or another guest image is used all the same: each attempt records what its node ran "
            "(attempt_placed) and a difference is said") in lines, lines


# ----------------------------------------------------------------------------- Ray answers, one layer


class _Ref:
    def __init__(self, value=None, error: BaseException | None = None) -> None:
        self.value, self.error = value, error


class _FakeRay:
    """What :meth:`ClusterHeats.run_heat` asks of Ray, answered from a script (a unit test of
    the runner's side alone; the real path: tests/test_cluster_silent.py)."""

    class exceptions:  # noqa: N801 - as ray.exceptions
        class RayActorError(Exception):
            pass

        class ActorDiedError(RayActorError):
            pass

        class ActorUnavailableError(RayActorError):
            pass

    def __init__(self) -> None:
        self.killed: list = []

    def get(self, ref, timeout=None):
        if isinstance(ref, _Ref):
            if ref.error is not None:
                raise ref.error
            return ref.value
        return ref

    def kill(self, actor, no_restart=True) -> None:
        self.killed.append(actor)

    def nodes(self) -> list:
        return []


class _Method:
    def __init__(self, fn) -> None:
        self.fn = fn

    def remote(self, *args):
        return self.fn(*args)

    def options(self, **_kw):
        return self


def _fake_actor_class(actors: list):
    """``_actor_class()`` whose ``options(...).remote()`` hands out ``actors`` in turn."""
    class Cls:
        made: list = []

        def options(self, **_kw):
            return self

        def remote(self):
            actor = actors[len(Cls.made)]
            Cls.made.append(actor)
            return actor
    return Cls()


class _Actor:
    def __init__(self, hellos: list, run: list, follow: dict | None = None) -> None:
        self.hellos, self.followed = list(hellos), []
        self.hello = _Method(lambda: self.hellos.pop(0))
        self.abort = _Method(lambda: None)

        def stream(items):
            for it in items:
                if isinstance(it, BaseException):
                    raise it
                yield _Ref(it)

        self.run = _Method(lambda heat, sealed: stream(run))

        def from_(after):
            self.followed.append(after)
            return stream((follow or {})[after])
        self.follow = _Method(from_)


def _remote_heat():
    from aoe_tui.cluster.remote import RemoteHeat

    return RemoteHeat(arena_tar=b"", arena_sha256="0", manifest_rel="arena.toml", manifest=None, raw=b"",
                      agents={"a": {}, "b": {}}, provider=None, drain_seconds=0.0, name="n", slug="s",
                      tag="r1h1a1", heat_id="x")


_HELLO = {"node": "w1", "node_id": "n1", "pid": 1, "public_key": b"\0" * 32, "code": "c", "image": "i"}
_END = ("end", {"error": None, "source": None, "events_sha256": None})


def _run_fake(monkeypatch, tmp_path, actors: list, phases: list[str] | None = None):
    import asyncio

    from aoe_tui.cluster import remote

    fake = _FakeRay()
    monkeypatch.setattr(remote, "require_ray", lambda: fake)
    cls = _fake_actor_class(actors)
    monkeypatch.setattr(remote, "_actor_class", lambda: cls)
    monkeypatch.setattr(remote, "UNAVAILABLE_RETRY_S", 0.01, raising=False)
    monkeypatch.setattr(remote, "PLACE_PAUSE_S", 0.01, raising=False)
    phases = [] if phases is None else phases
    placed: list[str] = []
    world = asyncio.run(remote.ClusterHeats("fake:1").run_heat(
        _remote_heat(), tmp_path / "a", {}, on_phase=phases.append, on_placed=lambda n, i: placed.append(n)))
    return world, phases, placed, fake


def test_a_brief_actor_unavailable_error_is_asked_again_not_a_lost_node(monkeypatch, tmp_path):
    """``ActorUnavailableError`` (the actor unreachable for a moment) is retried for
    ``UNAVAILABLE_S``: at ``hello``, and mid-stream (the runner follows again from the
    messages it got, none twice)."""
    U = _FakeRay.exceptions.ActorUnavailableError
    actor = _Actor(hellos=[_Ref(error=U("blip")), _Ref(error=U("blip")), _Ref(_HELLO)],
                   run=[[("phase", "one")], [], U("blip")],
                   follow={1: [[("phase", "two")], _END]})
    world, phases, placed, _ = _run_fake(monkeypatch, tmp_path, [actor])
    assert world is not None and placed == ["w1"]
    assert phases == ["one", "two"] and actor.followed == [1]


def test_an_actor_lost_before_it_started_is_placed_again_not_a_spoiled_attempt(monkeypatch, tmp_path):
    """An actor lost before it answered ``hello`` never ran anything of the heat (its node
    died and Ray had not noticed: two nodes lost at once put the re-runs of both heats on the
    other dead node): a new actor is made, for ``PLACE_RETRY_S``, and the attempt goes on."""
    D = _FakeRay.exceptions.ActorDiedError
    dead = _Actor(hellos=[_Ref(error=D("its node died"))], run=[])
    alive = _Actor(hellos=[_Ref(_HELLO)], run=[[("phase", "racing")], _END])
    world, phases, placed, fake = _run_fake(monkeypatch, tmp_path, [dead, alive])
    assert world is not None and placed == ["w1"] and "racing" in phases
    assert dead in fake.killed and any("placing it again" in p for p in phases), phases


def test_an_actor_that_keeps_dying_before_it_started_is_given_up_after_the_bound_said_once(monkeypatch, tmp_path):
    """An actor lost before ``hello`` every time (a node that cannot run it) is placed again
    only for ``PLACE_RETRY_S``, then the attempt is spoiled as :class:`NodeLostError`; the
    re-placing is said once, not once per try."""
    from aoe_tui.cluster import remote

    D = _FakeRay.exceptions.ActorDiedError
    monkeypatch.setattr(remote, "PLACE_RETRY_S", 0.2)
    dead = [_Actor(hellos=[_Ref(error=D("cannot start"))], run=[]) for _ in range(200)]
    phases: list[str] = []
    with pytest.raises(remote.NodeLostError, match="died before it started"):
        _run_fake(monkeypatch, tmp_path, dead, phases)
    assert len([p for p in phases if "placing it again" in p]) == 1, phases

