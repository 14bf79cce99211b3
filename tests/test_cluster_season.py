"""A season's heats on the worker nodes of a Ray cluster (issue 15), on one machine.

One two-node cluster (``head`` and worker ``w1``, one heat slot each, started with the real
``aoe worker start``: token authentication, each node with its own ``AOE_WORKER_DIR``) serves
every test of the module:

* ``seasons/demo.toml`` (unchanged: 7 entrants, ``concurrent_heats = 2``, seed 2026) runs
  with ``--cluster`` beside the session's local run of it (``tests/conftest.py``
  ``DemoRun``, shared with ``tests/test_season_container.py``): the heats land on both
  nodes, and the finished-heat set, the standings and every ``world.json`` (its race:
  milestones, durable, winner, agents' ends) equal the local run's (where both oracles race
  in one heat, the clock decides which wins, as between two local runs); the attempt
  folders hold the same files, ``activity.jsonl`` in a local heat's form;
* node loss (``--cluster auto``): killing node ``w1``'s processes mid-heat ends that attempt
  as an infrastructure failure naming ``w1``; attempt 2 finishes on ``head``; ``w1``
  restarted tears down what the lost heat left; nothing is left running (actors,
  territories, mounts). The lost attempt's ``activity.jsonl`` got its lines while the heat
  ran (its archive never came);
* (the same run) the key scan: a command adapter's credential (``options.api_key_env``
  naming a variable that holds ``sk-dummy-<random>``) reaches the adapter on the node (it
  prints its sha256), and the key is nowhere in the Ray session folders (logs, spilled
  objects), the season folder or the nodes' folders;
* ``kill -9`` of the runner mid-season, then the same command: no duplicate heat, no actor
  left, the season finishes.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install -e '.[cluster]'; setup.sh installs it)")

from cluster_support import cluster_fixture  # noqa: E402

from aoe_tui.replay.season_log import read_season_log  # noqa: E402
from aoe_tui.runtime.container import _cgroup_pids  # noqa: E402
from aoe_tui.replay.season_reducer import reduce_season  # noqa: E402

pytestmark = [pytest.mark.container]

REPO = Path(__file__).resolve().parent.parent
ARENA = REPO / "arenas" / "first-build" / "arena.toml"
DEMO = REPO / "seasons" / "demo.toml"


@pytest.fixture(scope="module", autouse=True)
def _host(guest_image):
    if os.geteuid() != 0 or shutil.which("systemd-nspawn") is None:
        pytest.skip("container heats need root and systemd-nspawn")


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    """Two nodes started with the real ``aoe worker start`` (tests/cluster_support.py): the
    head (one heat slot) and ``w1`` (one heat slot, the one a test kills). Leaving the module
    stops both and fails if anything is left (Ray processes, territories, mounts, netns)."""
    yield from cluster_fixture(tmp_path_factory.mktemp("ray"), workers=("w1",), head_slots=1)


def _driver(cluster, code: str, *args: str, timeout: float = 120) -> str:
    """Run ``code`` as a Ray driver of ``cluster`` (its token by file); returns its stdout."""
    res = subprocess.run([sys.executable, "-c", code, cluster.address, *args], capture_output=True, text=True,
                         timeout=timeout, env=cluster.client_env({**os.environ, "PYTHONPATH": str(REPO)}))
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


def alive_actors(cluster) -> list:
    """Class names of the cluster's actors that are not dead (alive, pending, restarting)."""
    out = _driver(cluster, "import ray,sys,json\nray.init(address=sys.argv[1], log_to_driver=False, "
                           "logging_level='ERROR')\nfrom ray._private.state import actors\n"
                           "print(json.dumps(sorted(a['ActorClassName'] for a in actors().values() "
                           "if a['State'] != 'DEAD')))\n")
    return json.loads(out.strip().splitlines()[-1])


def _season(tmp_path: Path, entrants: list[tuple[str, str, str]], *, name: str = "c.toml", duration: int = 20,
            extra: str = "", concurrent: int = 2, entrant_extra: str = "") -> Path:
    text = (f'id = "clu"\nlabel = "w1"\narena = "{ARENA}"\nseed = 5\nmax_attempts = 2\n'
            f'concurrent_heats = {concurrent}\ndrain_seconds = 2\n[provider]\nkind = "container"\n'
            f'ready_timeout_s = 90\n[arena_overrides]\nduration_seconds = {duration}\nminimum_territories = 2\n'
            '[format]\nkind = "league"\nheats_per_entrant = 1\n' + extra
            + "".join(f'[[entrants]]\nid = "{i}"\nadapter = "{a}"\nmodel = "{m}"\n{entrant_extra if i == "keyed" else ""}'
                      for i, a, m in entrants))
    f = tmp_path / name
    f.write_text(text)
    return f


def _run(season: Path, out: Path, *extra: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """``aoe run SEASON --output OUT --headless EXTRA`` (``env``: with the cluster's token)."""
    e = dict(os.environ if env is None else env)
    e["PYTHONPATH"] = str(REPO)
    res = subprocess.run([sys.executable, "-m", "aoe_tui.cli", "run", str(season), "--output", str(out), "--headless",
                          *extra], capture_output=True, text=True, timeout=timeout, cwd=REPO, env=e)
    return res


def _state(out: Path):
    return reduce_season(read_season_log(out / "season.jsonl"))


#: world.json agent fields that say how a builder's own run ended (see :func:`_race`)
_AGENT_END = frozenset({"successful", "terminal_state", "terminal_detail"})
#: usage figures of a builder still running when the heat ended (``agent_outraced``) or cut off
#: by the referee's host reboot (:func:`_cut`): how many of its steps it had charged by then is
#: the clock's call, as between two local runs
_USAGE = frozenset({"input_tokens", "output_tokens", "cost_microusd", "cache_read_tokens", "cache_write_tokens",
                    "cost_per_durable_microusd"})


def _finish_ms(folder: Path) -> int:
    """The heat clock's reading (ms) at an attempt's ``match_finished``."""
    lines = (folder / "events.jsonl").read_text().splitlines()
    return next(e["elapsed_ms"] for e in map(json.loads, lines) if e.get("kind") == "match_finished")


def _in_flight(folder: Path, since_ms: int) -> dict[str, set[str]]:
    """Per territory, the milestones whose check was the clock's call: started at or after
    ``since_ms`` (the other run's heat had finished by then: a winner durable at 3.9 s in one
    run and 4.7 s in the other leaves a losing seat's 4 s check to the clock), or started and
    not ended when the heat finished (a check in flight at the finish earns nothing, §3), as
    between two local runs."""
    late: dict[str, set[str]] = {}
    started: dict[str, set[str]] = {}
    for e in map(json.loads, (folder / "events.jsonl").read_text().splitlines()):
        if e.get("kind") == "milestone_evaluation_started":
            started.setdefault(e["territory"], set()).add(e["milestone"])
            if e["elapsed_ms"] >= since_ms:
                late.setdefault(e["territory"], set()).add(e["milestone"])
        elif e.get("kind") in ("milestone_passed", "milestone_failed"):
            started.get(e["territory"], set()).discard(e["milestone"])
    for t, ms in started.items():
        late.setdefault(t, set()).update(ms)
    return {t: m for t, m in late.items() if m}


def _affected(heats: list, changed: set) -> set[str]:
    """The entrants whose ratings a change in the results of the heats ``changed`` (their
    ``(round, heat)``) reaches: those heats' entrants, then everyone who later shares a rated
    heat with one of them (ratings are updated heat by heat in (round, heat) order; a void
    heat is not rated: ``season/season_standings.py``)."""
    hit: set[str] = set()
    for h in sorted(heats, key=lambda h: (h.round, h.heat)):
        if h.result.void:
            continue
        if (h.round, h.heat) in changed or hit & set(h.entrants):
            hit |= set(h.entrants)
    return hit


def _cut(folder: Path) -> set[str]:
    """The agents an attempt's ``events.jsonl`` says were outraced (still running at the
    finish) or interrupted by the referee's host reboot (a builder still checking its own
    work when its territory's first checks passed early enough for the reboot to come:
    which of the two happens first is the clock's call)."""
    from aoe_tui.agents.command import REBOOT_SUMMARY

    lines = (folder / "events.jsonl").read_text().splitlines()
    return {e["agent"] for e in map(json.loads, lines) if e.get("kind") == "agent_outraced"
            or (e.get("kind") == "agent_interrupted" and e.get("detail") == REBOOT_SUMMARY)}


def _race(world: dict, racing: frozenset[str] = frozenset(), cut: frozenset[str] = frozenset(),
          flight: dict[str, set[str]] | None = None) -> dict:
    """What a world.json says about the race: states, winner, each territory's passed
    milestones and points, each agent's usage and failure source. Clock readings, the event count, evidence values
    (boot ids, random records) and which failed checks of a losing seat ran before the
    winner went durable differ between any two runs.

    ``racing``: agents that race each other on the clock (two oracles in one heat: the first
    durable wins, and how far the other got by then is timing); of them, only that one of
    them won is kept. ``cut``: agents outraced or cut off by the referee's reboot in either
    run (:func:`_cut`), whose usage (:data:`_USAGE`) and failure source are left out.
    ``flight``: per territory, the milestones from the first one in flight at the finish in
    either run on (:func:`_in_flight`), left out of its passed milestones and points."""
    out = {
        **{k: world.get(k) for k in ("match_state", "winner", "finish_reason", "infrastructure_failures")},
        "territories": {t: {"agent": x.get("agent"), "state": x.get("competitor_state"),
                            "points": x.get("milestone_points"), "durable": x.get("durable_at_ms") is not None,
                            "passed": {m: v.get("points") for m, v in sorted((x.get("milestones") or {}).items())
                                       if v.get("passed")}}
                        for t, x in sorted(world.get("territories", {}).items())},
        # how a builder's run ended is left out: a scripted builder's self-check (curl PUT+GET,
        # ~0.6 s after its deployment) can race the referee's service-restart verifier
        # restarting its service on a loaded machine, so it fails or succeeds by tens of ms
        "agents": {a: {k: v for k, v in sorted(ag.items())
                       if k not in _AGENT_END and not (a in cut and (k in _USAGE or k == "failure_source"))}
                   for a, ag in sorted(world.get("agents", {}).items())},
    }
    for t, ms in (flight or {}).items():
        x = out["territories"].get(t)
        if x is not None and not x["durable"]:
            x["passed"] = {m: v for m, v in x["passed"].items() if m not in ms}
            x["points"] = sum(v or 0 for v in x["passed"].values())
    if racing:
        terr = out["territories"]
        ids = [t for t, x in terr.items() if x["agent"] in racing]
        assert out["winner"] in ids, (out["winner"], ids)
        out["winner"] = "one of " + ", ".join(sorted(terr[t]["agent"] for t in ids))
        for t in ids:
            terr[t] = {"agent": terr[t]["agent"]}
        out["agents"] = {a: v for a, v in out["agents"].items() if a not in racing}
    return out


def _files(folder: Path, world: dict, racing: frozenset[str],
           flight: dict[str, set[str]]) -> tuple[list[str], list[list[str]]]:
    """The files of an attempt folder (``territories/`` left out), and apart the evidence file
    names of each territory seated by a ``racing`` agent, as a sorted list of sorted lists:
    which of two racing oracles went durable first (and so which one has ``host-reboot.json``)
    is the clock's call, as between two local runs. Left out too: the evidence of the
    milestones in ``flight`` (per territory, from the first check in flight at the finish in
    either run on), and the ``referee-reboot`` marker of a seat whose ``host-reboot`` is among them."""
    terr = world.get("territories", {})
    seats = {t for t, x in terr.items() if x.get("agent") in racing}
    skip = {f"evidence/{t}/{m}.json" for t, ms in flight.items() for m in ms}
    skip |= {f"agents/{terr[t].get('agent')}/referee-reboot" for t, ms in flight.items() if "host-reboot" in ms and t in terr}
    rel = [p.relative_to(folder) for p in folder.rglob("*")
           if p.is_file() and "territories" not in p.parts and str(p.relative_to(folder)) not in skip]
    raced = lambda r: len(r.parts) == 3 and r.parts[0] == "evidence" and r.parts[1] in seats  # noqa: E731
    rest = sorted(str(r) for r in rel if not raced(r))
    by_seat = {t: sorted(r.name for r in rel if raced(r) and r.parts[1] == t) for t in seats}
    return rest, sorted(by_seat.values())


#: the demo's entrants that go durable every heat (in ~5-20 s): two of them in one heat race
#: each other on the clock, so which one wins that heat can differ between any two runs
ORACLES = frozenset({"oracle", "oracle-2"})


def _without(value, keys: set[str]):
    """``value`` without ``keys`` at any depth."""
    if isinstance(value, dict):
        return {k: _without(v, keys) for k, v in value.items() if k not in keys}
    if isinstance(value, list):
        return [_without(v, keys) for v in value]
    return value


def _untimed(value):
    """``value`` without the keys that hold clock readings (``*_ms``, ``*time*``)."""
    if isinstance(value, dict):
        return {k: _untimed(v) for k, v in value.items() if "ms" not in k.split("_") and "time" not in k}
    if isinstance(value, list):
        return [_untimed(v) for v in value]
    return value


FOUR = [("oracle", "oracle", "oracle"), ("memory", "scripted:memory", "scripted-memory"),
        ("oracle-2", "oracle", "oracle"), ("volatile", "scripted:volatile", "scripted-volatile")]


KEY_ADAPTER = """#!/usr/bin/env bash
# prints the sha256 of the key it was given (never the key), then gives up (a player's end)
set -eu
printf 'key sha256 %s\\n' "$(printf '%s' "${AOE_DUMMY_KEY:-}" | sha256sum | cut -d' ' -f1)"
printf '{"schema_version":1,"agent":"%s","territory":"%s","status":"failed","summary":"key checked",'\\
'"usage":{"rounds":1,"tool_calls":0,"input_tokens":1,"output_tokens":1,"cost_microusd":0,"resource_units":1},'\\
'"transcript":null}' "$AOE_AGENT_ID" "$AOE_TERRITORY_ID" > "$AOE_RESULT_FILE"
"""


def _scan(roots: list[Path], needle: bytes) -> list[str]:
    hits = []
    for root in roots:
        for p in root.rglob("*"):
            try:
                if p.is_symlink() or not p.is_file():
                    continue
                if needle in p.read_bytes():
                    hits.append(str(p))
            except OSError:
                continue
    return hits


def _activity(folder: Path) -> dict[str, str]:
    """Check ``folder``'s ``activity.jsonl`` has the form a local heat writes (every line
    ``{"sequence", "ms", "agent", "line"}`` in that order, sequences 0, 1, 2, ..., ms never
    negative); returns each agent's first line (the built-in builders' first line is fixed)."""
    from aoe_tui.replay.activity import ACTIVITY_FILE, read_activity

    path = folder / ACTIVITY_FILE
    recs, problem = read_activity(path)
    assert problem is None, problem
    lines = path.read_bytes().splitlines()
    assert len(lines) == len(recs) and [r.sequence for r in recs] == list(range(len(recs)))
    assert all(list(json.loads(x)) == ["sequence", "ms", "agent", "line"] for x in lines)
    first: dict[str, str] = {}
    for r in recs:
        first.setdefault(r.agent, r.line)
    return first


def _assert_same_season(local: Path, remote: Path) -> None:
    """Assert that two runs of one seeded season (folders ``local`` and ``remote``) agree on
    everything but the clock's calls: the same heats, seats and finishing orders, standings,
    each heat's race (:func:`_race`), files (:func:`_files`), headers and activity form."""
    a, b = _state(local), _state(remote)
    assert b.finished is not None and len(b.finished_heats()) == len(a.finished_heats()) == 6
    # in a heat where both oracles race (round 2 heat 1 with seed 2026) the clock decides
    # which of them wins, as between two local runs
    racing = lambda h: ORACLES & set(h.entrants) if len(ORACLES & set(h.entrants)) > 1 else frozenset()  # noqa: E731
    other = lambda h: b.rounds[h.round].heats[h.heat]  # noqa: E731
    cut = {h.counted.folder: frozenset(_cut(local / h.counted.folder) | _cut(remote / other(h).counted.folder))
           for h in a.finished_heats()}
    cut_any = frozenset().union(*cut.values())
    # a losing seat's check started after the earlier of the two finishes, or in flight at a
    # finish, is the clock's call: from the first such milestone on (in the arena's order),
    # what that seat passed may differ; before it, both runs must agree. ``flown`` (per heat,
    # by its key: the two runs' counted attempts may differ): the agents whose passes did differ
    flight, flown = {}, {}
    for h in a.finished_heats():
        la, lb = local / h.counted.folder, remote / other(h).counted.folder
        # a losing seat's last check before the earlier finish raced its own agent as well (a
        # service up by a 4.0 s check in one run, a few ms too late in the other): the clock's
        # call starts one tick before the earlier finish
        arena = json.loads((la / "arena.json").read_text())
        since = min(_finish_ms(la), _finish_ms(lb)) - int(arena["rules"]["tick_ms"])
        fa, fb = _in_flight(la, since), _in_flight(lb, since)
        ids = [m["id"] for m in arena["build"]["milestones"]]
        wa, wb = (json.loads((x / "world.json").read_text()).get("territories", {}) for x in (la, lb))
        flight[h.counted.folder] = {}
        flown[h.key] = set()
        for t in set(fa) | set(fb):
            if wa.get(t, {}).get("durable_at_ms") is not None or wb.get(t, {}).get("durable_at_ms") is not None:
                continue  # the winner: its checks ended the heat
            later = set(ids[min(ids.index(m) for m in fa.get(t, set()) | fb.get(t, set())):])
            passed = [{m for m, v in (w.get(t, {}).get("milestones") or {}).items() if v.get("passed")} for w in (wa, wb)]
            assert passed[0] ^ passed[1] <= later, (h.counted.folder, t, passed, later)
            flight[h.counted.folder][t] = later
            if passed[0] != passed[1]:
                flown[h.key].add(wa.get(t, {}).get("agent"))

    # the same heats and seats; the same finishing order but for what the clock decided: of
    # two racing oracles only that one of them won, and the seats whose passes the clock
    # changed may move (so only the order among the other seats is kept)
    def order(h) -> tuple:
        r, f = racing(h), flown[h.key]
        keep = sorted((k, e) for e, k in h.result.ranks.items() if e not in r and e not in f)
        groups = [tuple(e for k2, e in keep if k2 == k) for k in sorted({k for k, _ in keep})]
        return tuple(groups), tuple(sorted(k for e, k in h.result.ranks.items() if e in r))

    fin = lambda s: {(h.round, h.heat, h.seats, order(h)) for h in s.finished_heats()}  # noqa: E731
    assert fin(a) == fin(b)
    changed = {(h.round, h.heat) for h in a.finished_heats() if h.result.ranks != other(h).result.ranks}
    sa = json.loads((local / "standings.json").read_text())["standings"]
    sb = json.loads((remote / "standings.json").read_text())["standings"]
    # the same rows; only the order of entrants tied on everything but the clock may differ,
    # as between any two local runs. When the oracles' race went the other way, the ratings
    # of that heat's entrants differ (Plackett-Luce of another order): the others' rows agree.
    # When a heat's order moved with the clock, its entrants' mean ranks and the ratings of
    # everyone its change reaches differ; their other figures agree.
    flown_any = set().union(*flown.values())
    rated = _affected(a.finished_heats(), changed)
    moved = set().union(*(h.entrants for h in a.finished_heats() if (h.round, h.heat) in changed))
    raced = set().union(*(h.entrants for h in a.finished_heats() if racing(h) and (h.round, h.heat) in changed))

    def row(r: dict) -> dict:  # a standings row without its rank and what the clock decided
        drop = {"rank", "champion"} | (_USAGE if r["entrant"] in cut_any else set()) \
            | ({"points", "coverage", "milestone_passes"} if r["entrant"] in flown_any else set()) \
            | ({"mu", "sigma", "ordinal"} if r["entrant"] in rated else set()) \
            | ({"mean_rank"} if r["entrant"] in moved else set())
        return _without(_untimed(r), drop)

    by = lambda rows: {r["entrant"]: row(r) for r in rows}  # noqa: E731
    print(f"heats whose order the clock moved: {sorted(changed) or 'none'}")
    assert {e: r for e, r in by(sa).items() if e not in raced} == {e: r for e, r in by(sb).items() if e not in raced}
    assert sorted(r["rank"] for r in sa) == sorted(r["rank"] for r in sb)
    for h in a.finished_heats():
        la, lb = local / h.counted.folder, remote / b.rounds[h.round].heats[h.heat].counted.folder
        wa = json.loads((la / "world.json").read_text())
        wb = json.loads((lb / "world.json").read_text())
        f = flight[h.counted.folder]
        assert _race(wa, racing(h), cut[h.counted.folder], f) == _race(wb, racing(h), cut[h.counted.folder], f), \
            h.counted.folder
        # the same files (a cluster attempt has no territories/ folder: they stayed on the node);
        # the evidence of two oracles racing each other: the same sets, whichever seat won
        assert _files(la, wa, racing(h), f) == _files(lb, wb, racing(h), f), h.counted.folder
        # headers written on the runner from its arena files: identical
        for name in ("arena.json", "match.json"):
            ja = json.loads((la / name).read_text())
            jb = json.loads((lb / name).read_text())
            ja.pop("source_revision", None), jb.pop("source_revision", None)
            assert ja == jb, name
        # activity.jsonl (streamed, then not in the archive): a local heat's form, every agent's
        # lines, and each agent's first line the same
        assert _activity(la) == _activity(lb), h.counted.folder


def test_demo_on_both_nodes_equals_the_local_run(nodes, demo_local, tmp_path):
    # issue 15's acceptance: seasons/demo.toml as it is (7 entrants, concurrent_heats = 2,
    # seed 2026) with --cluster, beside the session's local run of the same file
    # (tests/conftest.py DemoRun: started here if no test has needed it yet, else reused)
    demo_local.start()
    t0 = time.monotonic()
    res = _run(DEMO, tmp_path / "remote", "--cluster", nodes.address, env=nodes.client_env(), timeout=900)
    cluster_s = time.monotonic() - t0
    local = demo_local.wait()
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    print(f"demo on the cluster: {cluster_s:.1f} s (local demo run: {demo_local.seconds:.1f} s)")
    b = _state(tmp_path / "remote")
    # heats landed on both nodes, and the headless lines say where
    placed = {att.node for h in b.heats() for att in h.attempts}
    assert placed == {"head", "w1"}, placed
    assert "on node head" in res.stdout and "on node w1" in res.stdout
    _assert_same_season(local, tmp_path / "remote")
    # nothing left on the nodes
    assert alive_actors(nodes) == []
    for n in nodes.nodes:
        assert not list(n.territories.glob("*")), list(n.territories.iterdir())
        assert not list((n.workdir / "matches").glob("*"))


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


def _hold_slot(nodes, name: str) -> subprocess.Popen:
    """A driver holding node ``name``'s heat slot until it is killed (Ray then ends its actor)."""
    p = subprocess.Popen([sys.executable, "-c", HOLD, nodes.address, name], stdout=subprocess.PIPE, text=True,
                         env=nodes.client_env({**os.environ, "PYTHONPATH": str(REPO)}))
    assert p.stdout.readline().strip() == "held"
    return p


def _wait_for(pred, proc: subprocess.Popen, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        if proc.poll() is not None:
            said = proc.stdout.read()[-3000:] if proc.stdout is not None else ""
            raise AssertionError(f"runner exited ({proc.returncode}) before {what}:\n{said}")
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _runner(season: Path, out: Path, nodes, address: str | None = None, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "aoe_tui.cli", "run", str(season), "--output", str(out),
                             "--headless", "--cluster", address or nodes.address], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True,
                            env={**(env or nodes.client_env()), "PYTHONPATH": str(REPO)})


def _racing_on(out: Path, node: str) -> Path | None:
    """The folder of a running attempt placed on ``node`` whose clock runs (an event after
    the first milestone check), else None."""
    try:
        lines = [json.loads(x) for x in (out / "season.jsonl").read_text().splitlines() if x.strip()]
    except (OSError, ValueError):
        return None
    folders = {(x["round"], x["heat"], x["attempt"]): x["folder"] for x in lines if x["kind"] == "attempt_started"}
    for x in lines:
        if x["kind"] == "attempt_placed" and x["node"] == node:
            folder = out / folders[(x["round"], x["heat"], x["attempt"])]
            log = folder / "events.jsonl"
            if log.is_file() and "milestone_" in log.read_text():
                return folder
    return None


def _leftovers(base: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in base.glob("territories/*/territories/*/state.json")]


def _mounted(paths: list[str]) -> list[str]:
    mounts = Path("/proc/self/mounts").read_text()
    return [p for p in paths if f" {p} " in mounts]


def test_node_lost_mid_heat_is_an_infrastructure_failure_retried_elsewhere_and_the_key_stays_secret(nodes, tmp_path):
    # "keyed" is a command adapter whose credential (options.api_key_env) holds a dummy key;
    # it prints the key's digest and gives up, the oracle races on
    key = f"sk-dummy-{secrets.token_hex(16)}"
    adapter = tmp_path / "key-adapter.sh"
    adapter.write_text(KEY_ADAPTER)
    adapter.chmod(0o755)
    season = _season(tmp_path, [FOUR[0], ("keyed", f"command:{adapter}", "dummy-model")], duration=20, concurrent=1,
                     entrant_extra='[entrants.options]\napi_key_env = "AOE_DUMMY_KEY"\n')
    out = tmp_path / "season"
    w1 = nodes.node("w1")
    hold = _hold_slot(nodes, "head")  # attempt 1 goes to w1
    try:
        # --cluster auto: the cluster of this machine's aoe node (its node.json in the default
        # workdir), which Ray's own auto (/tmp/ray) would not find
        p = _runner(season, out, nodes, "auto", nodes.auto_env(tmp_path / "state", {**os.environ, "AOE_DUMMY_KEY": key}))
        _wait_for(lambda: _racing_on(out, "w1") is not None, p, 180, "a heat racing on w1")
        # the agents' activity streams into the runner's activity.jsonl while the heat runs
        # (its end-of-heat archive, with world.json, has not come; here it never will)
        lost = _racing_on(out, "w1")
        from aoe_tui.replay.activity import read_activity

        _wait_for(lambda: {r.agent for r in read_activity(lost / "activity.jsonl")[0]} == {"oracle", "keyed"},
                  p, 60, "activity lines of both agents of w1's heat")
        assert not (lost / "world.json").exists()
        states = _leftovers(w1.workdir)
        assert states, "the heat's territories on w1"
        nodes.kill_node(w1)
    finally:
        hold.kill()
        hold.wait()
    t0 = time.monotonic()
    text, _ = p.communicate(timeout=600)
    assert p.returncode == 0, text[-3000:]
    assert f"heats run on the Ray cluster at {nodes.address}: 2 heat slot(s)" in text
    state = _state(out)
    (heat,) = state.heats()
    first, second = heat.attempts
    assert first.node == "w1" and first.finished.outcome == "retry"
    assert first.finished.failure_source == "provider" and "w1" in first.finished.detail, first.finished.detail
    assert second.node == "head" and second.finished.outcome == "counted" and heat.result is not None
    assert "r1h1a1: spoiled by provider" in text and "node w1 lost" in text
    # the lost attempt's activity lines came as they happened (no archive ever came)
    assert lost == out / first.folder and not (lost / "world.json").exists()
    assert set(_activity(lost)) == {"oracle", "keyed"}
    print(f"node loss seen and attempt 2 done in {time.monotonic() - t0:.1f} s: {first.finished.detail}")
    # the killed node left its heat's territories (their processes run on, mounts, netns) ...
    assert _leftovers(w1.workdir)
    # ... w1 comes back (aoe worker start): it tears them down before it takes heats
    nodes.restart_node(w1)
    assert _leftovers(w1.workdir) == []
    assert _mounted([m for s in states for m in s.get("mounts", [])]) == []
    for s in states:
        assert not s.get("netns") or not Path(f"/run/netns/{s['netns']}").exists(), s
        assert _cgroup_pids(s.get("cgroups") or []) == [], s
    assert alive_actors(nodes) == []
    for n in nodes.nodes:
        assert not list(n.territories.glob("*")) and not list((n.workdir / "matches").glob("*"))
    # the key reached the adapter on its node (it printed the key's digest) ...
    digest = f"key sha256 {hashlib.sha256(key.encode()).hexdigest()}"
    assert digest in (out / second.folder / "agents" / "keyed" / "stdout.log").read_text()
    # ... and is stored nowhere: Ray's session folders (logs, spilled objects; the killed
    # node's too), the nodes' folders, the season folder, what the runner printed
    from aoe_tui.cluster.node import ray_temp_dir

    sessions = [ray_temp_dir(n.workdir) for n in nodes.nodes]  # /tmp/aoe-ray-<hash>: sessions, logs, spilling
    assert all(d.is_dir() for d in sessions), sessions
    assert _scan([nodes.root, tmp_path, *sessions], key.encode()) == []  # root: the nodes' workdirs
    assert key not in text


def test_runner_killed_then_resumed_reruns_no_heat_twice_and_leaves_no_actor(nodes, tmp_path):
    season = _season(tmp_path, FOUR, duration=20)
    out = tmp_path / "season"
    p = _runner(season, out, nodes)
    _wait_for(lambda: _racing_on(out, "head") is not None and _racing_on(out, "w1") is not None, p, 180,
              "heats racing on both nodes")
    p.kill()
    p.wait(timeout=30)
    res = _run(season, out, "--cluster", nodes.address, env=nodes.client_env())
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    state = _state(out)  # the reducer refuses a heat scheduled or finished twice
    assert state.finished is not None and state.resumes == 1
    assert len(state.finished_heats()) == 2 and all(h.result is not None and not h.result.void for h in state.heats())
    for h in state.heats():
        assert [a.status for a in h.attempts] == ["interrupted", "finished"]
        assert h.counted.attempt == 1 and h.counted.folder.endswith("attempt-1")
    assert len(list(out.glob("round-1/heat-*/attempt-1.interrupted-1"))) == 2
    assert alive_actors(nodes) == []
    for n in nodes.nodes:
        left = _leftovers(n.workdir)
        assert left == [], (res.stdout[-4000:], [(x["owner_pid"], Path(f"/proc/{x['owner_pid']}").exists(),
                                                   x.get("nspawn_pid")) for x in left])
