"""Full disks (issue #17, "Full disks"): the season folder's file system fills up.

* A log's torn last line cut on resume is kept beside the log, named by its offset, and
  the season says that offset (``season_resumed``).
* A full disk refuses an append without leaving half a line in the log.
* The space check before each heat stops the season (exit 75, no "season finished", no
  territory) naming the folder, the free and the needed space.
* A disk that fills mid-heat (real containers, a tmpfs made by the test) ends the attempt
  as an infrastructure failure saying why, tears its territories down (processes, mounts
  and network namespaces counted in ``/proc``), stops the season resumably without burning
  an attempt; after space is freed ``aoe run`` re-runs that heat to its end.
* A disk full at the final standings export stops the run (exit 75), not "season finished";
  so does a disk already full when `aoe run` takes the season folder (no traceback).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from aoe_tui.domain import events as ev
from aoe_tui.domain import season_events as se
from aoe_tui.fsio import free_bytes
from aoe_tui.replay.log import EventLogWriter, read_events
from aoe_tui.replay.season_log import SeasonLogWriter, read_season_log
from aoe_tui.replay.season_reducer import reduce_season

REPO = Path(__file__).resolve().parent.parent
FIRST_BUILD = REPO / "arenas" / "first-build" / "arena.toml"

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")


@contextlib.contextmanager
def tmpfs(path: Path, size: str):
    """A tmpfs of ``size`` mounted on ``path`` for the block; unmounted (lazily, if busy) after."""
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], check=False)


def fill(folder: Path, leave: int) -> Path:
    """Write ``folder/filler`` until ``leave`` bytes (about) are free; returns the file."""
    filler = folder / "filler"
    with open(filler, "ab", buffering=0) as fh:
        chunk = b"\0" * (1 << 20)
        while free_bytes(folder) - len(chunk) > leave:
            fh.write(chunk)
        while free_bytes(folder) > leave + 4096:
            fh.write(b"\0" * 4096)
        if leave == 0:  # the last page too
            with contextlib.suppress(OSError):
                while True:
                    fh.write(b"\0" * 512)
    return filler


def test_torn_tail_is_kept_beside_the_log_with_its_offset(tmp_path):
    p = tmp_path / "events.jsonl"
    with EventLogWriter(p) as log:
        log.append(ev.MatchStateChanged(from_="preparing", to="running"), 0)
    good = p.read_bytes()
    torn = b'{"schema_version":1,"seq'
    p.write_bytes(good + torn)
    with EventLogWriter(p, resume=True) as log:
        assert log.torn == (len(good), tmp_path / f"events.jsonl.torn-{len(good)}")
        log.append(ev.MatchFinished(winner=None, reason="timer"), 5)
    assert (tmp_path / f"events.jsonl.torn-{len(good)}").read_bytes() == torn
    assert [r.sequence for r in read_events(p)] == [0, 1]
    # torn again at the same offset, with other bytes: both kept
    p.write_bytes(good + b'{"other')
    with EventLogWriter(p, resume=True) as log:
        assert log.torn == (len(good), tmp_path / f"events.jsonl.torn-{len(good)}-2")
    assert (tmp_path / f"events.jsonl.torn-{len(good)}").read_bytes() == torn
    assert (tmp_path / f"events.jsonl.torn-{len(good)}-2").read_bytes() == b'{"other'
    assert [r.sequence for r in read_events(p)] == [0]
    # the season log: the same, and the resumed season says the offset in season_resumed
    s = tmp_path / "season.jsonl"
    with SeasonLogWriter(s) as w:
        w.append(se.SeasonResumed(pid=1))
    head = s.read_bytes()
    s.write_bytes(head + b'{"schema_version":1,"sequence":1,"ti')
    with SeasonLogWriter(s) as w:
        assert w.torn == (len(head), tmp_path / f"season.jsonl.torn-{len(head)}")
        assert w.next_sequence == 1
    assert (tmp_path / f"season.jsonl.torn-{len(head)}").read_bytes() == b'{"schema_version":1,"sequence":1,"ti'
    assert s.read_bytes() == head
    # a torn tail that cannot be kept (the folder refuses writes) stays in the log, one clear error
    s.write_bytes(head + b'{"sch')
    os.chmod(tmp_path, 0o555)
    try:
        if os.geteuid() != 0:  # root writes anyway
            from aoe_tui.replay.season_log import SeasonLogError

            with pytest.raises(SeasonLogError, match=r"cannot keep the torn tail of season log .*5 bytes at offset"):
                SeasonLogWriter(s)
            assert s.read_bytes() == head + b'{"sch'
    finally:
        os.chmod(tmp_path, 0o755)


@needs_root
def test_a_full_disk_refuses_an_append_without_leaving_half_a_line(tmp_path):
    mnt = tmp_path / "mnt"
    with tmpfs(mnt, "256k"):
        p = mnt / "events.jsonl"
        log = EventLogWriter(p)
        log.append(ev.MatchStateChanged(from_="preparing", to="running"), 0)
        before = p.read_bytes()
        filler = fill(mnt, 4096)
        long = ev.InfrastructureFailure(component="c", source="harness", detail="x" * 20000)
        with pytest.raises(OSError) as info:
            log.append(long, 1)
        assert info.value.errno == errno.ENOSPC
        assert p.read_bytes() == before, "no half line left by the full disk"
        filler.unlink()
        log.append(ev.MatchFinished(winner=None, reason="timer"), 2)
        log.close()
        assert [r.sequence for r in read_events(p)] == [0, 1]


def small_season(folder: Path, entrants: list[tuple[str, str]], *, max_attempts: int = 2,
                 arena: Path = FIRST_BUILD) -> Path:
    """A one-heat league on first-build (30 s clock, 3 s drain): ``entrants`` = ``(id, adapter)``."""
    text = (f'id = "disk"\nlabel = "w1"\narena = "{arena}"\nseed = 1\nmax_attempts = {max_attempts}\n'
            'drain_seconds = 3\n[provider]\nkind = "container"\nready_timeout_s = 90\n'
            '[arena_overrides]\nduration_seconds = 30\nminimum_territories = 2\n'
            '[format]\nkind = "league"\nheats_per_entrant = 1\n'
            + "".join(f'[[entrants]]\nid = "{i}"\nadapter = "{a}"\nmodel = "{a}"\n' for i, a in entrants))
    f = folder / "disk.toml"
    f.write_text(text)
    return f


def aoe_run(season_file: Path, out: Path, **env: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "aoe_tui.cli", "run", str(season_file), "--output", str(out),
                             "--headless", "--engine-priority", "normal"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **env})


@needs_root
def test_space_check_before_each_heat_stops_the_season(tmp_path, guest_image):
    """8 MiB free, a heat needs 64 MiB: the season stops before provisioning, exit 75,
    one line naming the folder, the free and the needed space; no "season finished"."""
    f = small_season(tmp_path, [("a", "oracle"), ("b", "scripted:memory")])
    mnt = tmp_path / "mnt"
    with tmpfs(mnt, "8m"):
        out = mnt / "season"
        t0 = time.monotonic()
        proc = aoe_run(f, out, AOE_MIN_FREE_MIB="")
        stdout, stderr = proc.communicate(timeout=120)
        took = time.monotonic() - t0
        assert proc.returncode == 75, stdout + stderr
        assert "season finished" not in stdout and "Traceback" not in stderr
        err = [line for line in stderr.splitlines() if line.strip()]
        assert len(err) == 1 and err[0].startswith("aoe: error: season stopped, disk full: r1h1: "), stderr
        assert f"{out}: " in err[0] and " MiB free, a heat needs 64 MiB" in err[0]
        assert "run the same command again to resume" in err[0]
        state = reduce_season(read_season_log(out / "season.jsonl"))
        stop = state.stopped
        assert stop is not None and stop.reason == "disk_full" and (stop.round, stop.heat, stop.attempt) == (1, 1, None)
        assert not state.rounds[1].heats[1].attempts and not list(out.glob("round-*")), "nothing provisioned"
        from aoe_tui.domain.display import summarize_season_event

        assert summarize_season_event(stop).startswith(f"season stopped at r1h1 (disk full): {out}: ")
        assert took < 60


def heat_processes(out: Path, runner: int | None = None) -> list[int]:
    """Live processes of the season folder's heats: any whose command line or environment
    names ``out`` (nspawn territories, verifiers, adapters), the runner itself excepted."""
    needle = str(out).encode()
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) in (runner, os.getpid()):
            continue
        with contextlib.suppress(OSError):
            if needle in (d / "cmdline").read_bytes() or needle in (d / "environ").read_bytes():
                found.append(int(d.name))
    return found


def mounts_under(out: Path) -> list[str]:
    return [m for m in Path("/proc/mounts").read_text().splitlines() if str(out) + "/" in m.split()[1] + "/"]


def netns_of(folder: Path) -> list[str]:
    """Network namespaces the attempt's territories recorded in their ``state.json``."""
    names = []
    for sf in folder.glob("territories/*/state.json"):
        with contextlib.suppress(OSError, ValueError):
            ns = json.loads(sf.read_text()).get("netns")
            if ns:
                names.append(ns)
    return names


@pytest.mark.container
@needs_root
def test_disk_filling_mid_heat_stops_the_season_resumably(tmp_path, guest_image):
    if shutil.which("systemd-nspawn") is None:
        pytest.skip("container territories need systemd-nspawn")
    # each territory's own disk takes its class's disk_mib on the season's file system from the
    # start (reserved, issue 26): a copy of first-build whose class has a 256 MiB disk, and room
    # for the two seats' disks beside the 320 MiB this test fills
    arena = tmp_path / "first-build"
    shutil.copytree(FIRST_BUILD.parent, arena)
    toml = arena / "arena.toml"
    toml.write_text(re.sub(r"(?m)^disk_mib = \d+$", "disk_mib = 256", toml.read_text()))
    assert "disk_mib = 256" in toml.read_text()
    f = small_season(tmp_path, [("a", "scripted:slow"), ("b", "scripted:slow")], arena=arena)
    mnt = tmp_path / "mnt"
    proc = None
    with tmpfs(mnt, "840m"):
        out = mnt / "season"
        att = out / "round-1" / "heat-1" / "attempt-1"
        try:
            t0 = time.monotonic()
            proc = aoe_run(f, out, AOE_SCRIPTED_SLOW_DELAY_S="300", AOE_MIN_FREE_MIB="")
            end = time.monotonic() + 150
            while not ((att / "events.jsonl").exists() and "agent_started" in (att / "events.jsonl").read_text()):
                assert proc.poll() is None and time.monotonic() < end, proc.communicate()
                time.sleep(0.2)
            # during the heat: its territories run (counted), then the disk fills to ~200 KiB free
            during = (len(heat_processes(out, proc.pid)), len(mounts_under(out)), netns_of(att))
            assert during[0] >= 2 and during[1] >= 2 and len(during[2]) == 2, during
            filler = fill(mnt, 200 << 10)
            t_fill = time.monotonic()
            stdout, stderr = proc.communicate(timeout=120)
            t_stop = time.monotonic() - t_fill
            # stops resumably: exit 75, one error line saying why, never "season finished"
            assert proc.returncode == 75, stdout[-3000:] + stderr[-3000:]
            assert "season finished" not in stdout and "Traceback" not in stderr
            err = [line for line in stderr.splitlines() if line.strip()]
            assert len(err) == 1 and err[0].startswith(
                "aoe: error: season stopped, disk full: r1h1a1: No space left on device: "), stderr
            assert "run the same command again to resume" in err[0]
            # the attempt ended as an infrastructure failure that says why; its log is whole
            records = read_events(att / "events.jsonl")
            assert (att / "events.jsonl").read_bytes().endswith(b"\n"), "no torn line"
            infra = [r.event for r in records if r.event.kind == "infrastructure_failure"]
            assert len(infra) == 1 and infra[0].component == "disk" and infra[0].source == "harness"
            assert infra[0].detail.startswith(f"No space left on device: {att}"), infra[0].detail
            assert records[-1].event.kind in ("match_finished", "agent_terminated")
            assert any(r.event.kind == "match_finished" and r.event.reason.endswith("no space left on device")
                       for r in records)
            # territories torn down: no process, mount or network namespace of the heat is left
            assert heat_processes(out) == [] and mounts_under(out) == []
            assert not [ns for ns in during[2] if Path(f"/run/netns/{ns}").exists()]
            assert not list(att.glob("territories/*/state.json"))
            # no attempt burned, no heat void, no round 2: the attempt stays open for the resume
            state = reduce_season(read_season_log(out / "season.jsonl"))
            heat = state.rounds[1].heats[1]
            assert [(a.attempt, a.status) for a in heat.attempts] == [(1, "running")]
            assert heat.result is None and list(state.rounds) == [1] and state.finished is None
            assert state.stopped is not None and (state.stopped.round, state.stopped.heat, state.stopped.attempt) \
                == (1, 1, 1)
            # space freed (and a torn line left at the end of season.jsonl, as a kill mid-append
            # leaves it): the same command re-runs that heat (same attempt number) to its end
            filler.unlink()
            log = out / "season.jsonl"
            off = log.stat().st_size
            with open(log, "ab") as fh:
                fh.write(b'{"schema_version":1,"sequence":99,"ti')
            t1 = time.monotonic()
            proc = aoe_run(f, out, AOE_SCRIPTED_SLOW_DELAY_S="1", AOE_MIN_FREE_MIB="")
            stdout, stderr = proc.communicate(timeout=240)
            t_resume = time.monotonic() - t1
            assert proc.returncode == 0, stdout[-3000:] + stderr[-3000:]
            assert "season finished" in stdout
            state = reduce_season(read_season_log(out / "season.jsonl"))
            heat = state.rounds[1].heats[1]
            assert [(a.attempt, a.status) for a in heat.attempts] == [(1, "interrupted"), (1, "finished")]
            assert heat.result is not None and not heat.result.void and heat.result.attempt == 1
            assert heat.attempts[0].interrupted_as == ["round-1/heat-1/attempt-1.interrupted-1"]
            assert (out / "round-1/heat-1/attempt-1.interrupted-1/events.jsonl").is_file()
            assert state.resumes == 1 and state.stopped is None and state.finished is not None
            assert (out / f"season.jsonl.torn-{off}").read_bytes() == b'{"schema_version":1,"sequence":99,"ti'
            resumed = [r.event for r in read_season_log(log) if r.event.kind == "season_resumed"]
            assert f"torn last line cut at byte {off}, its bytes kept in season.jsonl.torn-{off}" in resumed[0].detail
            assert f"season.jsonl: torn last line cut at byte {off}" in stdout
            assert heat_processes(out) == [] and mounts_under(out) == []
            print(f"first run to the fill {t_fill - t0:.1f} s, fill to stop {t_stop:.1f} s, resume {t_resume:.1f} s")
        finally:
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
            subprocess.run([sys.executable, "-m", "aoe_tui.cli", "cleanup", str(out)], cwd=REPO,
                           capture_output=True, check=False)


@needs_root
async def test_enospc_mid_heat_ends_it_as_a_disk_failure_and_tears_down(tmp_path, monkeypatch):
    """The referee with fake territories (no reserve: real ``ENOSPC`` errors only): the
    match folder fills to the last byte while the agents build; the heat raises
    :class:`DiskFullError` after the teardown, and its log holds no half line."""
    from test_referee import FakeAdapter, FakeProvider, write_arena

    from aoe_tui.domain.arena import load_manifest
    from aoe_tui.referee.heat import DiskFullError, run_heat

    class Provider(FakeProvider):
        torn_down = 0

        async def teardown(self) -> None:
            self.torn_down += 1

    state = tmp_path / "state"
    state.mkdir()
    monkeypatch.setenv("FAKE_STATE", str(state))
    monkeypatch.setattr("aoe_tui.agents.instruction.build_instruction", lambda _l, tid: f"build on {tid}")
    loaded = load_manifest(write_arena(tmp_path / "arena"))
    adapters = {a.id: FakeAdapter({"state": state, "forever": True}) for a in loaded.manifest.agents}
    provider = Provider(state)
    mnt = tmp_path / "mnt"
    with tmpfs(mnt, "2m"):
        out = mnt / "match"
        seen: list[str] = []

        def on_event(rec, world) -> None:
            seen.append(rec.event.kind)
            if rec.event.kind == "agent_started" and seen.count("agent_started") == 1:
                fill(mnt, 0)

        with pytest.raises(DiskFullError, match=r"^No space left on device: " + str(out)):
            await asyncio.wait_for(run_heat(loaded, provider, adapters, out, drain_seconds=0.5, min_free_bytes=0,
                                            on_event=on_event), 30)
        assert provider.torn_down == 1
        raw = (out / "events.jsonl").read_bytes()
        assert raw.endswith(b"\n") and len(read_events(out / "events.jsonl")) == raw.count(b"\n")


def finished_season(tmp_path: Path):
    """A two-entrant season whose log says it finished (one counted heat; no heat is
    raced): ``(loaded season file, season folder)``; no standings files yet."""
    from aoe_tui.replay.season_log import SeasonLogWriter
    from aoe_tui.season.runner import load_season_file

    f = small_season(tmp_path, [("a", "oracle"), ("b", "scripted:memory")])
    loaded = load_season_file(f)
    out = tmp_path / "out"
    out.mkdir()
    (out / "season.toml").write_bytes(loaded.raw)
    ranks = {"a": 1, "b": 2}
    with SeasonLogWriter(out / "season.jsonl") as log:
        for e in [
            se.SeasonStarted(season="disk", label="w1", arena_id="first-build", format={"kind": "league"},
                             entrants=["a", "b"], seed=1, heat_size=3, min_heat_size=2, max_attempts=2,
                             season_sha256=loaded.sha256, milestones=["service-up"], models={"a": "m", "b": "m"}),
            se.RoundScheduled(round=1, heats=[se.HeatSeats(heat=1, seats=["a", "b"])]),
            se.AttemptStarted(round=1, heat=1, attempt=1, folder="round-1/heat-1/attempt-1"),
            se.AttemptFinished(round=1, heat=1, attempt=1, outcome="counted", winner="a", ranks=ranks,
                               stats={e: se.EntrantHeatStats(territory=f"builder-{r}", rank=r, points=10 - r, passed=1,
                                                             durable_at_ms=None, milestones={"service-up": 1000})
                                      for e, r in ranks.items()}),
            se.HeatFinished(round=1, heat=1, attempt=1, ranks=ranks, winner="a"),
            se.RoundFinished(round=1),
            se.SeasonFinished(champions=["a"], rounds=1),
        ]:
            log.append(e)
    return loaded, out


async def test_final_standings_export_on_a_full_disk_stops_and_the_rerun_writes_them(tmp_path):
    """The disk fills after the last heat: the final standings export failed silently and
    ``aoe run`` said "season finished; standings in …" (exit 0) over missing or stale
    files. Now the run stops with the disk-full error (exit 75) saying the standings were
    not written and no ``season_stopped`` after ``season_finished``; once space is freed
    the same run writes them. (A finished season log written here: no heats are raced.)"""
    from aoe_tui.export import write_all
    from aoe_tui.season.runner import DiskFullStop, SeasonRunner

    loaded, out = finished_season(tmp_path)
    lines: list[str] = []

    def full_disk(folder: Path, state) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(folder / "standings.csv"))

    with pytest.raises(DiskFullStop) as stop:
        await SeasonRunner(loaded, out, say=lines.append, write_exports=full_disk).run()
    assert stop.value.exit_code == 75
    assert "standings files were not written: No space left on device" in str(stop.value)
    assert f"run the same command again to write them (folder {out})" in str(stop.value)
    kinds = [r.event.kind for r in read_season_log(out / "season.jsonl")]
    assert kinds[-2:] == ["season_finished", "season_resumed"] and "season_stopped" not in kinds
    assert not list(out.glob("standings.*"))
    state = await SeasonRunner(loaded, out, say=lines.append, write_exports=write_all).run()
    assert state.finished is not None and state.finished.champions == ["a"]
    assert sorted(p.name for p in out.glob("standings.*")) == [f"standings.{x}" for x in ("csv", "html", "json", "md")]


@needs_root
def test_a_full_disk_before_the_season_folder_is_written_is_one_line_exit_75(tmp_path):
    """The season folder's file system is already full when ``aoe run`` starts (the folder
    or its lock file cannot be written; also with ``AOE_MIN_FREE_MIB=0``): one disk-full
    line naming the folder and its free space, exit 75, never a traceback; a folder the
    run created is not left behind."""
    f = small_season(tmp_path, [("a", "oracle"), ("b", "scripted:memory")])
    mnt = tmp_path / "mnt"
    with tmpfs(mnt, "1m"):
        (mnt / "old").mkdir()  # an existing folder: the lock file's pid cannot be written
        fill(mnt, 0)
        for name in ("new", "old"):
            proc = aoe_run(f, mnt / name, AOE_MIN_FREE_MIB="0")
            stdout, stderr = proc.communicate(timeout=60)
            assert proc.returncode == 75, stdout + stderr
            assert "Traceback" not in stderr and "season finished" not in stdout
            assert stderr.strip() == (f"aoe: error: season stopped, disk full: {mnt / name}: 0 B free, the season "
                                      "folder cannot be written; free space and run the same command again")
        assert sorted(p.name for p in mnt.iterdir()) == ["filler", "old"]


@needs_root
def test_commands_writing_to_a_full_disk_say_one_line_and_keep_the_old_file(tmp_path):
    """Any command whose output meets a full disk: one line naming the file, exit 75, no
    traceback (``aoe bundle -o`` and ``aoe match run --output`` raised ``OSError``);
    ``aoe standings --output`` replaces its file atomically (it truncated the previous
    standings to nothing)."""
    _, season = finished_season(tmp_path)
    subprocess.run([sys.executable, "-m", "aoe_tui.cli", "standings", str(season)], check=True, capture_output=True)
    match = REPO / "tests" / "fixtures" / "upstream" / "matches" / "oracle-smoke-2-round-001"
    mnt = tmp_path / "mnt"
    with tmpfs(mnt, "1m"):
        (mnt / "standings.csv").write_text("previous\n")
        fill(mnt, 0)
        cmds = {"bundle": (75, ["bundle", str(match), "-o", str(mnt / "x.match")]),
                "standings": (1, ["standings", str(season), "--format", "csv", "--output", str(mnt / "standings.csv")])}
        for name, (rc, argv) in cmds.items():
            res = subprocess.run([sys.executable, "-m", "aoe_tui.cli", *argv], capture_output=True, text=True,
                                 timeout=60)
            assert res.returncode == rc and "Traceback" not in res.stderr, (name, res.stderr)
            assert len(res.stderr.strip().splitlines()) == 1 and "No space left on device" in res.stderr, res.stderr
        assert (mnt / "standings.csv").read_text() == "previous\n"
        assert sorted(p.name for p in mnt.iterdir()) == ["filler", "standings.csv"]
