"""The season runner on real container territories (systemd-nspawn, real SSH, real adapters).

* ``seasons/demo.toml`` (7 entrants, league, ``concurrent_heats = 2``) through the real CLI
  to the end; standings list all seven with ratings (also read back from the HTML page in
  chromium when it is installed).
* Crash test: the same season SIGKILLed during provisioning, mid-heat and between heats,
  resumed each time with the same command: same finished heats as the uninterrupted run,
  no duplicate schedule, interrupted folders kept, no leftover territories.
* An injected provisioning failure gives attempt 2 for that heat only.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from aoe_tui.replay.season_log import read_season_log
from aoe_tui.replay.season_reducer import reduce_season

pytestmark = [pytest.mark.container]

REPO = Path(__file__).resolve().parent.parent
DEMO = REPO / "seasons" / "demo.toml"


@pytest.fixture(scope="module", autouse=True)
def _host(guest_image):
    if os.geteuid() != 0 or shutil.which("systemd-nspawn") is None:
        pytest.skip("container seasons need root and systemd-nspawn")


def aoe_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "aoe_tui.cli", *args]


def heat_set(season_dir: Path) -> set[tuple]:
    state = reduce_season(read_season_log(season_dir / "season.jsonl"))
    return {(h.round, h.heat, h.seats) for h in state.finished_heats()}


# demo_run: tests/conftest.py (one local run of the demo per session, shared with
# tests/test_cluster_season.py, which compares a cluster run with it)


def test_demo_season_runs_to_the_end(demo_run, tmp_path):
    state = reduce_season(read_season_log(demo_run / "season.jsonl"))
    assert state.finished is not None
    assert all(h.result is not None and not h.result.void for h in state.heats())
    # every round placed every entrant exactly once (heats of 3+2+2)
    for r in state.rounds.values():
        placed = [e for h in r.heats.values() for e in h.entrants] + list(r.byes)
        assert sorted(placed) == sorted(state.entrants)
    # each attempt is a complete match folder with its bundle named as in Appendix B
    for h in state.heats():
        att = h.counted
        folder = demo_run / att.folder
        for name in ("arena.json", "match.json", "events.jsonl", "world.json"):
            assert (folder / name).is_file(), folder / name
        bundle = json.loads((demo_run / att.finished.bundle).read_text())
        assert bundle["match"]["name"] == f"demo · demo-week · round {h.round} heat {h.heat} · attempt {att.attempt}"
        arena = json.loads((folder / "arena.json").read_text())
        assert [a["id"] for a in arena["agents"]] == list(h.entrants)
        assert arena["rules"]["duration_seconds"] == 45
    data = json.loads((demo_run / "standings.json").read_text())
    rows = data["standings"]
    assert sorted(r["entrant"] for r in rows) == sorted(state.entrants) and len(rows) == 7
    assert all(isinstance(r["mu"], float) and isinstance(r["sigma"], float) for r in rows)
    # defensible: both oracles (durable in ~5 s every heat) lead; scripted memory/volatile never go durable
    assert {rows[0]["entrant"], rows[1]["entrant"]} == {"oracle", "oracle-2"}
    for r in rows:
        if r["entrant"].startswith(("memory", "volatile")):
            assert r["durable"] == 0
    # CLI export agrees with the file written by the runner; the HTML table reads back in chromium
    res = subprocess.run(aoe_cmd("standings", str(demo_run), "--format", "csv"), capture_output=True, text=True, cwd=REPO)
    assert res.returncode == 0 and res.stdout == (demo_run / "standings.csv").read_text()
    if shutil.which("chromium"):
        from test_season_pure import read_table_in_chromium

        table = read_table_in_chromium(demo_run / "standings.html", tmp_path)
        assert [row[1].replace(" 🏆", "") for row in table[1:]] == [r["entrant"] for r in rows]


def test_demo_run_keeps_its_cup_site(demo_local, demo_run):
    """``aoe run --site`` (the session's demo run): after the season the site holds a page
    per heat attempt, the home page links each one, names the champion, and the run said
    nothing about a site it could not write."""
    site = demo_local.site
    state = reduce_season(read_season_log(demo_run / "season.jsonl"))
    attempts = [(h, a) for h in state.heats() for a in h.attempts]
    home = (site / "index.html").read_text()
    for h, a in attempts:
        slug = f"season-demo-demo-week-r{h.round}-h{h.heat}-a{a.attempt}"
        page = site / "heats" / slug / "index.html"
        assert page.is_file(), page
        assert f'href="heats/{slug}/index.html"' in home
        for name in ("events.jsonl", "world.json", "match.json", "arena.json", f"{slug}.match.json"):
            art = site / "heats" / slug / "artifacts" / name
            assert art.read_bytes() == (demo_run / a.folder / name).read_bytes(), art
    assert "oracle" in home and (site / ".aoe-site").is_file()
    assert "cup site not refreshed" not in demo_local.log.read_text()
    assert not [p.name for p in site.parent.iterdir() if p.name.startswith(".site.")], "no build folder left"


def _wait_for(pred, proc: subprocess.Popen, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        if proc.poll() is not None:
            raise AssertionError(f"runner exited ({proc.returncode}) before {what}")
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _attempt_dirs(out: Path) -> list[Path]:
    return sorted(p for p in out.glob("round-*/heat-*/attempt-*") if ".interrupted-" not in p.name)


def test_sigkill_at_three_moments_and_resume(demo_run, tmp_path):
    out = tmp_path / "season"
    log = out / "season.jsonl"

    def start() -> subprocess.Popen:
        return subprocess.Popen(aoe_cmd("run", str(DEMO), "--output", str(out)), cwd=REPO,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def kill(p: subprocess.Popen) -> None:
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)

    # 1. during provisioning: a territory's state.json exists, the match log does not yet
    p = start()
    _wait_for(lambda: any(list((d / "territories").glob("*/state.json")) and not (d / "events.jsonl").exists()
                          for d in _attempt_dirs(out)), p, 120, "provisioning")
    kill(p)
    # 2. mid-heat: after resume, a heat whose clock runs (a milestone passed)
    p = start()
    _wait_for(lambda: any((d / "events.jsonl").exists() and "milestone_passed" in (d / "events.jsonl").read_text()
                          for d in _attempt_dirs(out)), p, 180, "a running heat")
    kill(p)
    # 3. between heats: right after a new heat_finished is logged
    before = log.read_text().count('"heat_finished"')
    p = start()
    _wait_for(lambda: log.read_text().count('"heat_finished"') > before, p, 300, "a finished heat")
    kill(p)
    res = subprocess.run(aoe_cmd("run", str(DEMO), "--output", str(out)), capture_output=True, text=True,
                         timeout=900, cwd=REPO)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    state = reduce_season(read_season_log(log))  # the reducer refuses a duplicate schedule
    assert state.finished is not None and state.resumes == 3
    assert heat_set(out) == heat_set(demo_run), "same finished heats as the uninterrupted run"
    interrupted = sorted(out.glob("round-*/heat-*/attempt-*.interrupted-*"))
    assert len(interrupted) >= 2, "the provisioning and mid-heat kills leave interrupted folders"
    logged = [a for h in state.heats() for a in h.attempts if a.interrupted_as]
    assert {x for a in logged for x in a.interrupted_as} == {str(p.relative_to(out)) for p in interrupted}
    for r in state.rounds.values():
        placed = [e for h in r.heats.values() for e in h.entrants] + list(r.byes)
        assert len(placed) == len(set(placed))
    # nothing left running: every state.json of every attempt (interrupted ones included) is gone
    assert not list(out.glob("round-*/heat-*/*/territories/*/state.json"))


async def test_injected_provisioning_failure_retries_that_heat_only(tmp_path):
    from aoe_tui.domain.season_file import load_season
    from aoe_tui.runtime.container import ContainerProvider
    from aoe_tui.runtime.provider import ProvisionError
    from aoe_tui.season.runner import SeasonRunner

    text = DEMO.read_text()
    season_file = tmp_path / "four.toml"
    head = text.split("[[entrants]]")[0].replace('heats_per_entrant = 2', 'heats_per_entrant = 1')
    head = head.replace("../arenas/first-build/arena.toml", str(REPO / "arenas" / "first-build" / "arena.toml"))
    entrants = "".join(f'[[entrants]]\nid = "o{i}"\nadapter = "oracle"\nmodel = "oracle"\n\n' for i in range(4))
    season_file.write_text(head + entrants)
    loaded = load_season(season_file)

    class FailingOnce(ContainerProvider):
        async def provision(self, specs):
            raise ProvisionError("injected: territory builder-one did not boot")

    def factory(workdir: Path, heat_id: str):
        if "/round-1/heat-1/attempt-1/" in str(workdir) + "/":
            return FailingOnce(workdir, heat_id=heat_id)
        return ContainerProvider(workdir, heat_id=heat_id)

    lines: list[str] = []
    state = await SeasonRunner(loaded, tmp_path / "out", say=lines.append, provider_factory=factory).run()
    attempts = {h.key: [a.attempt for a in h.attempts] for h in state.heats()}
    assert attempts == {(1, 1): [1, 2], (1, 2): [1]}
    h1 = state.rounds[1].heats[1]
    first = h1.attempts[0].finished
    assert first.outcome == "retry" and first.failure_source == "arena" and "injected" in first.detail
    assert h1.result.attempt == 2 and not h1.result.void
    assert (tmp_path / "out" / "round-1" / "heat-1" / "attempt-1" / "events.jsonl").is_file()
    assert (tmp_path / "out" / "round-1" / "heat-1" / "attempt-2" / "world.json").is_file()
    assert any("spoiled by arena" in line for line in lines)


def _small_season(tmp_path: Path, entrants: list[tuple[str, str, str]], *, max_attempts: int = 2,
                  extra: str = "", name: str = "small.toml", duration_s: int = 30) -> Path:
    """A one-heat league on first-build (two entrants, a ``duration_s`` clock, 30 s by
    default): ``entrants`` are ``(id, adapter, model)``."""
    text = (f'id = "small"\nlabel = "w1"\narena = "{REPO / "arenas" / "first-build" / "arena.toml"}"\n'
            f'seed = 1\nmax_attempts = {max_attempts}\ndrain_seconds = 3\n[provider]\nkind = "container"\n'
            f'ready_timeout_s = 90\n[arena_overrides]\nduration_seconds = {duration_s}\nminimum_territories = 2\n'
            '[format]\nkind = "league"\nheats_per_entrant = 1\n'
            + "".join(f'[[entrants]]\nid = "{i}"\nadapter = "{a}"\nmodel = "{m}"\n' for i, a, m in entrants) + extra)
    f = tmp_path / name
    f.write_text(text)
    return f


async def test_prices_cache_tokens_and_cost_source_in_a_real_season(tmp_path):
    """Issue #18 item 6: token totals agree across usage.json, the events, world.json and the
    standings; cache tokens are kept apart (aoe-extra.json, standings), never in upstream
    files; a priced model's cost is ours (µUSD from the price table), the other keeps its
    adapter's, and the standings say which."""
    from aoe_tui.agents.scripted import scripted_usage
    from aoe_tui.season.runner import load_season_file
    from aoe_tui.export import write_all
    from aoe_tui.season.runner import SeasonRunner

    # two memory builders: never durable, so the heat runs to its timer; all that is asserted
    # (usage, cost) is settled when both builders finish, about 3 s in (measured): a 12 s clock
    f = _small_season(tmp_path, [("priced", "scripted:memory", "m-priced"), ("own", "scripted:memory", "m-own")],
                      duration_s=12, extra='[prices."m-priced"]\ninput_per_mtok = 0.60\noutput_per_mtok = 2.50\n'
                            'cache_read_per_mtok = 0.15\ncache_write_per_mtok = 0.75\n')
    loaded = load_season_file(f)
    out = tmp_path / "out"
    state = await SeasonRunner(loaded, out, write_exports=write_all).run()
    heat = state.rounds[1].heats[1]
    assert heat.result is not None and not heat.result.void
    folder = out / heat.counted.folder
    u = scripted_usage(4)
    rates = loaded.season.prices["m-priced"].rates()
    ours = rates.cost(u.input_tokens - u.cache_read_tokens - u.cache_write_tokens, u.output_tokens,
                      u.cache_read_tokens, u.cache_write_tokens)
    expected_cost = {"priced": ours, "own": u.cost_microusd}
    assert ours != u.cost_microusd
    events = [json.loads(line) for line in (folder / "events.jsonl").read_text().splitlines()]
    world = json.loads((folder / "world.json").read_text())
    extra = json.loads((folder / "aoe-extra.json").read_text())
    rows = {r["entrant"]: r for r in json.loads((out / "standings.json").read_text())["standings"]}
    for e in ("priced", "own"):
        usage = json.loads((folder / "agents" / e / "usage.json").read_text())["usage"]
        assert set(usage) <= {"rounds", "tool_calls", "input_tokens", "output_tokens", "cost_microusd",
                              "resource_units"}
        charged = [ev for ev in events if ev["kind"] == "usage_charged" and ev["agent"] == e]
        assert usage["input_tokens"] == u.input_tokens == sum(ev["input_tokens"] or 0 for ev in charged)
        assert usage["cost_microusd"] == expected_cost[e] == sum(ev["cost_microusd"] or 0 for ev in charged)
        assert world["agents"][e]["input_tokens"] == u.input_tokens == rows[e]["input_tokens"]
        assert world["agents"][e]["cost_microusd"] == expected_cost[e] == rows[e]["cost_microusd"]
        x = extra["agents"][e]["usage"]
        assert (x["cache_read_tokens"], x["cache_write_tokens"]) == (u.cache_read_tokens, u.cache_write_tokens)
        assert (rows[e]["cache_read_tokens"], rows[e]["cache_write_tokens"]) == (u.cache_read_tokens,
                                                                                u.cache_write_tokens)
    assert rows["priced"]["cost_source"] == "price table" and rows["own"]["cost_source"] == "adapter"
    assert extra["agents"]["priced"]["usage"]["adapter_cost_microusd"] == u.cost_microusd
    for name in ("events.jsonl", "world.json"):
        assert "cache" not in (folder / name).read_text()
    csv_head = (out / "standings.csv").read_text().splitlines()[0].split(",")
    assert {"cache_read_tokens", "cache_write_tokens", "cost_source", "infra_failures"} <= set(csv_head)
    assert "| price table |" in (out / "standings.md").read_text()


async def test_retry_void_reruns_heats_the_infrastructure_voided(tmp_path):
    """Issue #18 item 7: an entrant whose adapter is unavailable in every attempt voids the
    heat; the summary names it with its adapter; raising max_attempts alone is refused
    naming the field; ``--retry-void`` re-runs the void heat, which then counts; the
    standings count the infrastructure failures."""
    from aoe_tui.agents.base import AdapterStatus
    from aoe_tui.agents.oracle import BuilderRun, OracleAdapter
    from aoe_tui.agents.registry import resolve_adapter
    from aoe_tui.season.runner import load_season_file
    from aoe_tui.export import write_all
    from aoe_tui.season.runner import SeasonMismatchError, SeasonRunner

    class DownRun(BuilderRun):
        async def body(self):
            return AdapterStatus.UNAVAILABLE, "injected: the model endpoint is unreachable"

    class DownAdapter(OracleAdapter):
        name = "scripted:volatile"
        run_class = DownRun

        def sha256(self):  # the same adapter, its endpoint down: the season's rules did not change
            return resolve_adapter("scripted:volatile").sha256()

    def broken(spec: str):
        return DownAdapter() if spec == "scripted:volatile" else resolve_adapter(spec)

    entrants = [("o1", "oracle", "oracle"), ("o2", "scripted:volatile", "scripted")]
    f = _small_season(tmp_path, entrants, max_attempts=1)
    out = tmp_path / "out"
    lines: list[str] = []
    state = await SeasonRunner(load_season_file(f), out, say=lines.append, adapter_factory=broken,
                               write_exports=write_all).run()
    heat = state.rounds[1].heats[1]
    assert heat.result.void and state.finished is not None
    assert heat.attempts[0].finished.adapter_failures == {"o2": "provider"}
    assert any(line.startswith("adapter failed every attempt: o2 (adapter scripted:volatile, 1/1 attempts: provider)")
               for line in lines), lines
    assert not any("adapter failed every attempt: o1" in line for line in lines)
    assert state.finished.adapters_failed == {"o2": "adapter scripted:volatile, 1/1 attempts: provider"}
    rows = {r["entrant"]: r for r in json.loads((out / "standings.json").read_text())["standings"]}
    assert rows["o1"]["infra_failures"] == rows["o2"]["infra_failures"] == 1

    f = _small_season(tmp_path, entrants, max_attempts=2)
    with pytest.raises(SeasonMismatchError, match="fields that differ: max_attempts") as err:
        await SeasonRunner(load_season_file(f), out).run()
    assert err.value.fields == ["max_attempts"]

    lines.clear()
    state = await SeasonRunner(load_season_file(f), out, say=lines.append, retry_void=True,
                               write_exports=write_all).run()
    heat = state.rounds[1].heats[1]
    assert [a.attempt for a in heat.attempts] == [1, 2] and heat.reopened == 1
    assert heat.result is not None and not heat.result.void and heat.result.attempt == 2
    assert state.finished is not None and state.finished.champions
    assert any("retry-void: re-running 1 void heat(s): r1h1" in line for line in lines), lines
    assert (out / "season.toml").read_text() == f.read_text()
    rows = {r["entrant"]: r for r in json.loads((out / "standings.json").read_text())["standings"]}
    assert rows["o1"]["heats"] == rows["o2"]["heats"] == 1 and rows["o1"]["infra_failures"] == 1
    assert "infra failures" in (out / "standings.md").read_text()
    # nothing void is left: a second --retry-void has nothing to do
    lines.clear()
    await SeasonRunner(load_season_file(f), out, say=lines.append, retry_void=True).run()
    assert any("retry-void: no void heats to re-run" in line for line in lines)


async def test_a_void_knockout_heat_waits_for_retry_void_instead_of_eliminating_by_seed(tmp_path):
    """Issue #30 item 1, on real territories: a knockout of four oracles (two heats of two,
    one goes on from each); heat 2's only attempt cannot be provisioned, so it is void. The
    season must not advance or eliminate anyone of it by seed order, nor draw the final: it
    stops (SeasonWaiting, ``season_stopped`` reason ``void_heat``) with the standings saying
    ``waiting on heat r1h2 (void)``. ``--retry-void`` re-runs the heat, then the bracket goes on."""
    from aoe_tui.export import write_all
    from aoe_tui.runtime.container import ContainerProvider
    from aoe_tui.runtime.provider import ProvisionError
    from aoe_tui.season.runner import SeasonRunner, SeasonWaiting, load_season_file

    f = tmp_path / "ko.toml"
    f.write_text(f'id = "ko"\nlabel = "w1"\narena = "{REPO / "arenas" / "first-build" / "arena.toml"}"\n'
                 'seed = 3\nmax_attempts = 1\ndrain_seconds = 3\n[provider]\nkind = "container"\n'
                 'ready_timeout_s = 90\n[arena_overrides]\nduration_seconds = 60\nminimum_territories = 2\n'
                 '[format]\nkind = "knockout"\nadvance = 1\n'
                 + "".join(f'[[entrants]]\nid = "{e}"\nadapter = "oracle"\nmodel = "oracle"\n' for e in "abcd"))

    class NoBoot(ContainerProvider):
        async def provision(self, specs):
            raise ProvisionError("injected: territory builder-one did not boot")

    def factory(workdir: Path, heat_id: str):
        if "/round-1/heat-2/" in str(workdir) + "/":
            return NoBoot(workdir, heat_id=heat_id)
        return ContainerProvider(workdir, heat_id=heat_id)

    out = tmp_path / "out"
    lines: list[str] = []
    with pytest.raises(SeasonWaiting, match=r"waiting on heat r1h2 \(void\).*--retry-void") as err:
        await SeasonRunner(load_season_file(f), out, say=lines.append, provider_factory=factory,
                           write_exports=write_all).run()
    assert err.value.exit_code == 75 and err.value.heats == [(1, 2)]
    # the hint names the folder: pasted as it is, it re-runs this season's heat (not a new season)
    assert f"aoe run {f} --output {out} --retry-void re-runs it" in str(err.value)
    state = reduce_season(read_season_log(out / "season.jsonl"))
    void_heat = state.rounds[1].heats[2]
    assert void_heat.result.void and state.rounds[1].heats[1].result.winner is not None
    assert list(state.rounds) == [1] and state.rounds[1].finished is None  # no outcome, no final drawn
    assert state.stopped is not None and (state.stopped.reason, state.stopped.round, state.stopped.heat) == (
        "void_heat", 1, 2)
    data = json.loads((out / "standings.json").read_text())
    label = "waiting on heat r1h2 (void)"
    assert data["waiting"] == [{"round": 1, "heat": 2, "entrants": list(void_heat.entrants), "label": label}]
    assert {r["entrant"] for r in data["standings"] if r["waiting"] == label} == set(void_heat.entrants)
    assert label in (out / "standings.md").read_text() and label in (out / "standings.html").read_text()
    assert label in (out / "standings.csv").read_text()

    # a plain resume still waits; --retry-void re-runs the heat and the final is drawn from it
    with pytest.raises(SeasonWaiting):
        await SeasonRunner(load_season_file(f), out, say=lines.append).run()
    lines.clear()
    state = await SeasonRunner(load_season_file(f), out, say=lines.append, retry_void=True,
                               write_exports=write_all).run()
    heat = state.rounds[1].heats[2]
    assert [a.attempt for a in heat.attempts] == [1, 2] and not heat.result.void
    assert state.rounds[1].finished is not None and state.rounds[2].final
    finalists = set(state.rounds[2].heats[1].entrants)
    assert finalists == {state.rounds[1].heats[1].result.winner, heat.result.winner}
    assert state.finished is not None and state.finished.champions
    assert json.loads((out / "standings.json").read_text())["waiting"] == []
    assert not list(out.glob("round-*/heat-*/*/territories/*/state.json"))


async def test_a_resume_with_changed_rules_is_refused_naming_each_file_unless_accepted(tmp_path):
    """Issue #30 item 2, on real territories: a league of three oracles on a copy of
    first-build is stopped (as by SIGINT) after its first heat; then a milestone's points go
    from 10 to 50 and a verifier is made lenient. The resume is refused in one line naming
    both files, before anything is written; ``--accept-changed-rules`` goes on, and
    ``season_resumed``, ``season-rules.json`` and the standings say what changed."""
    import asyncio

    from aoe_tui.export import write_all
    from aoe_tui.season.rules_record import RulesChanged
    from aoe_tui.season.runner import SeasonRunner, load_season_file

    arena = tmp_path / "arenas" / "first-build"
    shutil.copytree(REPO / "arenas" / "first-build", arena, symlinks=True)
    f = tmp_path / "league.toml"
    f.write_text(f'id = "rules"\nlabel = "w1"\narena = "{arena / "arena.toml"}"\n'
                 'seed = 1\nmax_attempts = 1\ndrain_seconds = 3\nconcurrent_heats = 1\n[provider]\n'
                 'kind = "container"\nready_timeout_s = 90\n[arena_overrides]\nduration_seconds = 60\n'
                 'minimum_territories = 2\n[format]\nkind = "league"\nheats_per_entrant = 2\n'
                 + "".join(f'[[entrants]]\nid = "{e}"\nadapter = "oracle"\nmodel = "oracle"\n' for e in "abc"))
    out = tmp_path / "out"
    assert not (out / "season-rules.json").exists()
    first_heat = asyncio.Event()

    def say(line: str) -> None:
        if ": finished (" in line:
            first_heat.set()

    runner = SeasonRunner(load_season_file(f), out, say=say, write_exports=write_all)
    task = asyncio.ensure_future(runner.run())
    await asyncio.wait_for(first_heat.wait(), 600)
    runner.stop_reason = "SIGINT"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    record = json.loads((out / "season-rules.json").read_text())
    assert "arena first-build: verify/write-read.sh" in record["files"]
    assert "arena first-build: README.md" not in record["files"]
    assert any(k.startswith("adapter oracle (first-build)") for k in record["files"])

    manifest = arena / "arena.toml"
    manifest.write_text(manifest.read_text().replace("points = 10", "points = 50", 1))
    (arena / "verify" / "write-read.sh").write_text("#!/bin/bash\nexit 0\n")
    log_before = (out / "season.jsonl").read_bytes()
    with pytest.raises(RulesChanged) as err:
        await SeasonRunner(load_season_file(f), out).run()
    msg = str(err.value)
    assert msg.startswith("season resume refused: ") and "\n" not in msg and "--accept-changed-rules" in msg
    assert f"{arena / 'arena.toml'} changed" in msg and f"{arena / 'verify' / 'write-read.sh'} changed" in msg
    assert "service-up.sh" not in msg
    assert (out / "season.jsonl").read_bytes() == log_before  # refused before anything was written

    state = await SeasonRunner(load_season_file(f), out, accept_changed_rules=True, write_exports=write_all).run()
    assert state.finished is not None
    assert [n for n, _ in state.rules_changed] == [1] and len(state.rules_changed[0][1]) == 2
    record = json.loads((out / "season-rules.json").read_text())
    assert [a["resume"] for a in record["accepted"]] == [1] and record["accepted"][0]["changed"] == state.rules_changed[0][1]
    data = json.loads((out / "standings.json").read_text())
    assert data["rules_changed"] == [{"resume": 1, "changed": state.rules_changed[0][1]}]
    assert "Rules changed at resume 1" in (out / "standings.md").read_text()
    assert "rules changed at resume 1" in (out / "standings.html").read_text()
    # the accepted rules are now the season's: running the same command again is not refused
    await SeasonRunner(load_season_file(f), out).run()
