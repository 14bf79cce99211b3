"""Territory recipes (``territory/``), package adapters and cups across arenas: the pure parts.

No territory boots here (see ``test_layers.py`` for real layers and territories): recipe
loading and its problems, the digest that keys the layer cache, the static fog leak check
of ``aoe arena validate``, how agent specs resolve against an arena package, season files
naming several arenas or an upstream suite, the round cycle, and the end of a heat's
leftover verifier processes.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from aoe_tui.domain.arena import validate_package
from aoe_tui.domain.recipe import RecipeError, leak_problems, load_recipe, recipe_digest
from aoe_tui.domain.season_file import SeasonFileError, load_season

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"

RECIPE = """schema_version = 1
description = "a seed and a slot"
remove = ["/etc/systemd/system/builder-app.service"]
enable = ["t-seed.service"]
setup = "setup.sh"

[modes]
"/usr/lib/aoe-arena/t/seed.sh" = "0750"
"""


def make_recipe(root: Path, text: str = RECIPE) -> Path:
    """A small valid recipe under ``root/territory``; returns the territory folder."""
    t = root / "territory"
    (t / "files/usr/lib/systemd/system").mkdir(parents=True)
    (t / "files/usr/lib/aoe-arena/t").mkdir(parents=True)
    (t / "files/etc/t").mkdir(parents=True)
    (t / "recipe.toml").write_text(text)
    (t / "files/usr/lib/systemd/system/t-seed.service").write_text(
        "[Service]\nType=oneshot\nRemainAfterExit=yes\nExecStart=/usr/lib/aoe-arena/t/seed.sh\n"
        "[Install]\nWantedBy=multi-user.target\n")
    seed = t / "files/usr/lib/aoe-arena/t/seed.sh"
    seed.write_text("#!/bin/sh\nmkdir -p /var/lib/t\n")
    seed.chmod(0o755)
    (t / "files/etc/t/notes.txt").write_text("plain notes\n")
    (t / "setup.sh").write_text("true\n")
    return t


def test_recipe_loads_and_modes(tmp_path):
    t = make_recipe(tmp_path)
    r = load_recipe(t)
    assert r.recipe.enable == ["t-seed.service"] and r.setup_script == t / "setup.sh"
    assert r.mode_of("usr/lib/aoe-arena/t/seed.sh", t / "files/usr/lib/aoe-arena/t/seed.sh") == 0o750
    assert r.mode_of("etc/t/notes.txt", t / "files/etc/t/notes.txt") == 0o644
    assert r.mode_of("etc/t", t / "files/etc/t") == 0o755


def test_recipe_problems_name_file_line_and_field(tmp_path):
    t = make_recipe(tmp_path, 'schema_version = 2\nremove = ["etc/x", "/"]\nenable = ["nope.service", "bad name"]\n'
                              'setup = "../escape.sh"\ncolour = 1\n')
    with pytest.raises(RecipeError) as ei:
        load_recipe(t)
    assert f"{t}/recipe.toml:5: colour: unknown field" in str(ei.value)
    (t / "recipe.toml").write_text('schema_version = 2\nremove = ["etc/x", "/"]\nenable = ["nope.service", "bad name"]\n'
                                   'setup = "../escape.sh"\n[modes]\n"/usr/lib/none" = "0755"\n'
                                   '"/usr/lib/aoe-arena/t/seed.sh" = "rwx"\n')
    with pytest.raises(RecipeError) as ei:
        load_recipe(t)
    msg = str(ei.value)
    f = f"{t}/recipe.toml"
    assert f"{f}:1: schema_version: unsupported recipe schema version 2" in msg
    assert f"{f}:2: remove[0]: 'etc/x' must be an absolute guest path" in msg
    assert f"{f}:2: remove[1]: '/' must be an absolute guest path" in msg
    assert f"{f}:3: enable[0]: unit nope.service is not in" in msg
    assert f"{f}:3: enable[1]: 'bad name' is not a systemd unit name" in msg
    assert f"{f}:4: setup: '../escape.sh' must be a file inside" in msg
    assert "/usr/lib/none is not in" in msg and "mode 'rwx' is not an octal mode" in msg
    (t / "recipe.toml").write_text("schema_version = [\n")
    with pytest.raises(RecipeError, match=r"recipe.toml:2: invalid TOML"):
        load_recipe(t)


def test_recipe_digest_follows_every_input(tmp_path):
    t = make_recipe(tmp_path)
    d0 = recipe_digest(load_recipe(t))
    assert recipe_digest(load_recipe(t)) == d0
    notes = t / "files/etc/t/notes.txt"
    notes.write_text("other notes\n")
    d1 = recipe_digest(load_recipe(t))
    notes.chmod(0o755)
    d2 = recipe_digest(load_recipe(t))
    (t / "setup.sh").write_text("echo hi\n")
    d3 = recipe_digest(load_recipe(t))
    os.symlink("notes.txt", t / "files/etc/t/link")
    d4 = recipe_digest(load_recipe(t))
    assert len({d0, d1, d2, d3, d4}) == 5


def test_leak_check_only_inside_scan_paths(tmp_path):
    t = make_recipe(tmp_path)
    (t / "files/etc/t/notes.txt").write_text("line one\nthe Durable job queue contract\n")
    (t / "files/usr/lib/aoe-arena/t/seed.sh").write_text("#!/bin/sh\n# Durable job queue contract\n")
    probs = leak_problems(load_recipe(t), ["/etc", "/opt"], ["Durable job queue contract", "absent"])
    assert [(Path(p.file).name, p.line) for p in probs] == [("notes.txt", 2)]
    assert "'Durable job queue contract'" in probs[0].message and "/etc/t/notes.txt" in probs[0].message


def _fog_package(tmp_path: Path) -> Path:
    pkg = tmp_path / "leaky"
    shutil.copytree(REPO / "arenas" / "first-build", pkg, symlinks=True)
    text = (pkg / "arena.toml").read_text().replace('id = "first-build"', 'id = "leaky-build"', 1)
    text = text.replace("[build]\n", '[fog_of_war]\nplayer_brief = "brief.md"\n[fog_of_war.guest_leak_audit]\n'
                        'scan_paths = ["/etc", "/var/lib"]\nforbidden_strings = ["hidden-clue-7f3"]\n\n[build]\n', 1)
    (pkg / "arena.toml").write_text(text)
    (pkg / "brief.md").write_text("Build a durable records service on port 8080.\n")
    return pkg


def test_validate_package_checks_the_recipe(tmp_path, capsys):
    pkg = _fog_package(tmp_path)
    make_recipe(pkg)
    assert validate_package(pkg).valid
    (pkg / "territory/files/etc/t/notes.txt").write_text("the hidden-clue-7f3 is here\n")
    report = validate_package(pkg)
    assert not report.valid
    assert any("notes.txt:1: contains the forbidden string 'hidden-clue-7f3'" in e for e in report.errors)
    (pkg / "territory/recipe.toml").write_text('schema_version = 1\nenable = ["ghost.service"]\n')
    report = validate_package(pkg)
    assert any("recipe.toml:2: enable[0]: unit ghost.service is not in" in e for e in report.errors)
    # the CLI prints the same problems and exits 1
    res = subprocess.run([sys.executable, "-m", "aoe_tui.cli", "arena", "validate", str(pkg)],
                         capture_output=True, text=True)
    assert res.returncode == 1 and "enable[0]: unit ghost.service" in res.stderr


# ------------------------------------------------------------------ adapters of a package


def test_specs_resolve_against_the_arena_package(tmp_path):
    from aoe_tui.agents.command import CommandAdapter
    from aoe_tui.agents.registry import UnknownAdapterError, package_builders, resolve_adapter
    from aoe_tui.agents.scripted import PackageBuilderAdapter, ScriptedAdapter, builder_faults

    fb = REPO / "arenas" / "first-build"
    for name in ("hasty", "memory", "volatile", "slow"):  # first-build's: the built-in oracle's faults
        assert isinstance(resolve_adapter(f"scripted:{name}", arena_dir=fb), ScriptedAdapter)
        assert isinstance(resolve_adapter(f"scripted:{name}"), ScriptedAdapter)  # no package: the same built-ins
    assert type(resolve_adapter("oracle", arena_dir=fb)).__name__ == "OracleAdapter"
    with pytest.raises(UnknownAdapterError):
        resolve_adapter("scripted:sloppy")

    pkg = tmp_path / "pkg"
    (pkg / "adapters/builders").mkdir(parents=True)
    for name in ("oracle", "hasty"):
        (pkg / f"adapters/builders/{name}.sh").write_text("echo aoe-step: hi\n")
    oracle = pkg / "adapters/oracle-x.sh"
    oracle.write_text("#!/bin/sh\nexit 0\n")
    oracle.chmod(0o755)
    os.symlink("oracle-x.sh", pkg / "adapters/oracle.sh")
    assert package_builders(pkg) == ["scripted:hasty", "scripted:slow"]
    a = resolve_adapter("oracle", arena_dir=pkg)
    assert isinstance(a, CommandAdapter) and a.name == "oracle" and a.path == pkg / "adapters/oracle.sh"
    assert resolve_adapter("oracle-x", arena_dir=pkg).path == oracle
    slow = resolve_adapter("scripted:slow", arena_dir=pkg)
    assert isinstance(slow, PackageBuilderAdapter) and slow.script.name == "oracle.sh" and slow.start_delay_s == 20
    with pytest.raises(UnknownAdapterError, match=r"has no built-in builder 'scripted:memory' \(known: scripted:hasty, scripted:slow\)"):
        resolve_adapter("scripted:memory", arena_dir=pkg)
    # faults the package's oracle.sh declares run it with AOE_FAULT=NAME (each its own digest)
    (pkg / "adapters/builders/oracle.sh").write_text(
        "# the oracle\n# fault memory: keeps records in a dict: fails service-restart\n"
        "# fault slow: not a fault (the oracle after a delay)\n#fault odd: not a declaration\n"
        'case "$AOE_FAULT" in memory) echo aoe-step: dict ;; *) echo aoe-step: sqlite ;; esac\n')
    assert builder_faults(pkg / "adapters/builders/oracle.sh") == {
        "memory": "keeps records in a dict: fails service-restart"}
    assert builder_faults(pkg / "adapters/builders/missing.sh") == {}
    assert package_builders(pkg) == ["scripted:hasty", "scripted:memory", "scripted:slow"]
    memory = resolve_adapter("scripted:memory", arena_dir=pkg)
    assert isinstance(memory, PackageBuilderAdapter) and memory.script.name == "oracle.sh"
    assert memory.fault == "memory" and memory.name == "scripted:memory" and memory.start_delay_s == 0
    assert resolve_adapter("scripted:hasty", arena_dir=pkg).fault == ""  # builders/hasty.sh wins
    assert resolve_adapter("scripted:slow", arena_dir=pkg).fault == ""
    assert len({memory.sha256(), resolve_adapter("scripted:slow", arena_dir=pkg).sha256()}) == 2
    with pytest.raises(UnknownAdapterError, match=r"known: scripted:hasty, scripted:memory, scripted:slow\)"):
        resolve_adapter("scripted:odd", arena_dir=pkg)
    # a registered adapter wins over the package's
    other = tmp_path / "other.sh"
    other.write_text("#!/bin/sh\n")
    other.chmod(0o755)
    assert resolve_adapter("oracle", {"oracle": other}, arena_dir=pkg).path == other


# ------------------------------------------------------------------ cups across arenas


SEASON_HEAD = 'id = "cup"\nlabel = "w1"\n'
SEASON_TAIL = ('\n[format]\nkind = "league"\nheats_per_entrant = 3\n'
               '[[entrants]]\nid = "a"\nadapter = "oracle"\nmodel = "m"\n'
               '[[entrants]]\nid = "b"\nadapter = "oracle"\nmodel = "m"\n'
               '[[entrants]]\nid = "c"\nadapter = "oracle"\nmodel = "m"\n')


def test_season_names_its_arenas_one_way(tmp_path):
    f = tmp_path / "s.toml"
    f.write_text(SEASON_HEAD + 'arenas = ["../x", "../y/arena.toml"]\n' + SEASON_TAIL)
    loaded = load_season(f)
    assert loaded.arena_paths == (tmp_path / "../x", tmp_path / "../y/arena.toml") and loaded.suite_path is None
    for text, err in (
        ('arena = "a"\narenas = ["b"]\n', "4: arenas: give only one of arena, arenas and suite"),
        ('arenas = ["../x", "../x/"]\n', "3: arenas[1]: '../x/' is listed twice"),
        ("arenas = []\n", "3: arenas: must name at least one arena"),
        ("", "arena: missing: name the arena"),
    ):
        f.write_text(SEASON_HEAD + text + SEASON_TAIL)
        with pytest.raises(SeasonFileError, match=re.escape(err)):
            load_season(f)


def test_rounds_cycle_through_the_arenas_and_the_suite(tmp_path):
    from aoe_tui.season.runner import SeasonRunner

    f = tmp_path / "s.toml"
    f.write_text(SEASON_HEAD + f'arenas = ["{REPO}/arenas/first-build", "{FIXTURES}/upstream/arenas/durable-job-queue"]\n'
                 + SEASON_TAIL)
    runner = SeasonRunner(load_season(f), tmp_path / "out")
    ids = [runner.arena_of_round(r).manifest.arena.id for r in range(1, 6)]
    assert ids == ["first-build", "durable-job-queue", "first-build", "durable-job-queue", "first-build"]
    # an upstream suite (§1.13) as it is: each arena for its rounds, in order
    f.write_text(SEASON_HEAD + f'suite = "{FIXTURES}/upstream/suites/infra-core.toml"\n' + SEASON_TAIL)
    runner = SeasonRunner(load_season(f), tmp_path / "out2")
    ids = [runner.arena_of_round(r).manifest.arena.id for r in range(1, 14)]
    assert ids == (["first-build-real"] * 3 + ["durable-job-queue"] * 3 + ["zero-downtime-rollout"] * 3
                   + ["primary-failover"] * 3 + ["first-build-real"])
    f.write_text(SEASON_HEAD + f'suite = "{tmp_path}/none.toml"\n' + SEASON_TAIL)
    with pytest.raises(Exception, match=r"s.toml: suite: suite file not found"):
        SeasonRunner(load_season(f), tmp_path / "out3")


async def test_a_cup_records_each_rounds_arena_and_races_it(tmp_path):
    """The runner with a stand-in heat runner: every round's heats get that round's arena
    manifest, and the log says which arena each round raced."""
    from aoe_tui.testing.heats import write_timed_out_heat
    from aoe_tui.season.runner import SeasonRunner

    f = tmp_path / "s.toml"
    f.write_text(SEASON_HEAD + f'arenas = ["{REPO}/arenas/first-build", "{FIXTURES}/upstream/arenas/primary-failover"]\n'
                 + SEASON_TAIL.replace("heats_per_entrant = 3", "heats_per_entrant = 2"))
    seen: list[tuple[str, list[str]]] = []

    async def fake_run_heat(loaded, provider, adapters, folder, **_kw):
        seen.append((loaded.manifest.arena.id, [t.id for t in loaded.manifest.territories]))
        world = write_timed_out_heat(folder)
        return world

    runner = SeasonRunner(load_season(f), tmp_path / "out", run_heat=fake_run_heat,
                          provider_factory=lambda workdir, heat_id: None)
    state = await runner.run()
    assert [r.arena for r in state.rounds.values()] == ["first-build", "primary-failover"]
    assert [a.id for a in state.arenas] == ["first-build", "primary-failover"]
    assert state.arena("primary-failover").milestones[0] == "failed-primary-preserved"
    assert seen == [("first-build", ["builder-one", "builder-two", "builder-three"]),
                    ("primary-failover", ["failover-one", "failover-two", "failover-three"])]
    assert all(h.arena == r.arena for r in state.rounds.values() for h in r.heats.values())


# ------------------------------------------------------------------ leftover verifier processes


async def test_heat_end_stops_what_its_verifiers_left_running(tmp_path):
    from aoe_tui.referee.verifier import end_leftover_verifiers, run_verifier

    verifier = tmp_path / "monitor.sh"
    verifier.write_text('#!/bin/bash\nnohup sleep 300 >/dev/null 2>&1 &\necho $! > "$AOE_EVIDENCE_FILE.pid"\n'
                        'echo "{}" > "$AOE_EVIDENCE_FILE"\n')
    verifier.chmod(0o755)
    cred = tmp_path / "cred.env"
    cred.write_text("AOE_SSH_PASSWORD=x\n")
    evidence = tmp_path / "match" / "evidence"
    out = await run_verifier(verifier, territory_id="t1", milestone_id="m", host="127.0.0.1", ssh_port=22,
                             service_port=8080, credential_file=cred, evidence_dir=evidence / "t1", previous={},
                             timeout_s=120)  # not a timeout test: a busy machine may take seconds to start bash
    assert out.passed
    pid = int((evidence / "t1" / "m.json.pid").read_text())
    unrelated = subprocess.Popen(["sleep", "300"])

    def proc_text(name: str) -> bytes | None:
        """``/proc/<pid>/<name>``, None once the monitor is gone (reaped meanwhile)."""
        try:
            return Path(f"/proc/{pid}/{name}").read_bytes()
        except OSError:
            return None

    try:
        assert os.path.exists(f"/proc/{pid}")  # a finished verifier's monitor survives its exit
        # $! is the forked subshell, which then execs nohup and sleep: while an exec is under
        # way /proc/<pid>/environ is briefly empty. The heat ends long after in a season; here
        # wait (no fixed sleep) until the monitor runs sleep with its environment in place.
        deadline = time.monotonic() + 60
        while not (proc_text("comm") == b"sleep\n" and b"AOE_EVIDENCE_FILE=" in (proc_text("environ") or b"")):
            assert proc_text("stat") is not None, "the monitor ended by itself"
            assert time.monotonic() < deadline, "the monitor never started sleep"
            time.sleep(0.01)
        assert end_leftover_verifiers(tmp_path / "other" / "evidence") == 0
        assert end_leftover_verifiers(evidence) == 1
        deadline = time.monotonic() + 60
        while (stat := proc_text("stat")) is not None and stat.split()[2] != b"Z":
            assert time.monotonic() < deadline, "the monitor is still running"
            time.sleep(0.05)
        assert unrelated.poll() is None
    finally:
        unrelated.kill()
        unrelated.wait()


def test_a_brief_that_names_a_forbidden_string_is_refused(tmp_path):
    pkg = _fog_package(tmp_path)
    assert validate_package(pkg).valid
    (pkg / "brief.md").write_text("Build it.\nHint: the hidden-clue-7f3 helps.\n")
    report = validate_package(pkg)
    assert not report.valid
    assert any(e.endswith("brief.md:2: the player brief contains the forbidden string 'hidden-clue-7f3' "
                          "(fog_of_war.guest_leak_audit)") for e in report.errors), report.errors
