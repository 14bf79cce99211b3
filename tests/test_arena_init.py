"""``aoe arena init`` and the hello-service example (issue #29), with the real CLI.

* the example (``aoe_tui/data/hello-service``, which ``examples/hello-service`` links to)
  follows the verifier toolkit's rules and declares its two faults;
* ``aoe arena init NAME`` (from hello-service) and ``--from first-build`` write complete
  packages (manifest, brief, contract, toolkit verifiers, territory recipe, oracle adapter
  and builder, two declared faults, README), renamed, that ``aoe arena validate`` accepts;
* refusals (a non-empty folder, a bad name, an unknown source): one line, exit 2, no
  traceback, nothing written;
* real heats on container territories: the initialised package raced by ``--agent oracle``
  is durable; on both starting points ``scripted:slow`` (the oracle builder, late) is durable
  while ``scripted:memory`` stops at service-restart and ``scripted:volatile`` at
  host-reboot, each for its reason.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from aoe_tui.commands.arena_init import display_name

from arena_support import need_container_host

REPO = Path(__file__).resolve().parent.parent
TEMPLATE = REPO / "aoe_tui" / "data" / "hello-service"
KIT = REPO / "aoe_tui" / "referee" / "kit" / "verify.sh"
ORDER = ["service-up", "write-read", "service-restart", "host-reboot"]


def aoe(*args: str, cwd: Path, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    """``aoe ARGS`` from this checkout, run in ``cwd``."""
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run([sys.executable, "-m", "aoe_tui.cli", *args], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=timeout)


def init(tmp: Path, name: str, *extra: str) -> Path:
    r = aoe("arena", "init", name, *extra, cwd=tmp)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"wrote arena package {name} (arena {name}" in r.stdout, r.stdout
    v = aoe("arena", "validate", name, cwd=tmp)
    assert v.returncode == 0, v.stdout + v.stderr
    assert v.stdout.startswith(f"ok: package {name}/arena.toml valid — arena {name} (build_race), "), v.stdout
    return tmp / name


# ----------------------------------------------------------------------- the example


def test_the_example_follows_the_toolkit_rules() -> None:
    from aoe_tui.agents.scripted import builder_faults

    assert (REPO / "examples" / "hello-service").resolve() == TEMPLATE.resolve()
    kit_names = set(re.findall(r"^([A-Za-z_][A-Za-z_0-9]*)(?:\(\) |=)", KIT.read_text(), re.M))
    lib = (TEMPLATE / "verify" / "lib.sh").read_text()
    assert '. "${AOE_TUI_VERIFY_KIT:?' in lib
    own = set(re.findall(r"^([A-Za-z_][A-Za-z_0-9]*)(?:\(\) |=)", lib, re.M))
    assert own and not own & kit_names, f"lib.sh redefines the toolkit's {sorted(own & kit_names)}"
    for script in sorted((TEMPLATE / "verify").glob("*.sh")):
        text = script.read_text()
        assert not re.search(r"\b(sshpass|ssh|nsenter)\s+-", text), f"{script}: talks to the guest itself"
        if script.name != "lib.sh":
            assert text.startswith("#!/usr/bin/env bash\n") and os.access(script, os.X_OK), script
            assert '. "$(dirname "$0")/lib.sh"' in text, script
    faults = builder_faults(TEMPLATE / "adapters" / "builders" / "oracle.sh")
    assert list(faults) == ["memory", "volatile"], faults
    assert "service-restart" in faults["memory"] and "host-reboot" in faults["volatile"], faults
    # shipped in the Python package (pyproject package-data), so an installed aoe has it
    data = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["aoe_tui"]
    assert "data/**/*" in data


# ----------------------------------------------------------------------- init, without territories


@pytest.mark.parametrize("source", ["hello-service", "first-build"])
def test_init_writes_a_complete_renamed_package(tmp_path: Path, source: str) -> None:
    from aoe_tui.agents.scripted import builder_faults

    name = "new-arena"
    pkg = init(tmp_path, name, "--from", source)
    manifest = tomllib.loads((pkg / "arena.toml").read_text())
    assert [m["id"] for m in manifest["build"]["milestones"]] == ORDER
    assert manifest["arena"]["id"] == name and manifest["arena"]["display_name"] == "New Arena"
    assert (pkg / "README.md").read_text().splitlines()[0].startswith(f"# {name} ")
    assert "New Arena" in (pkg / "CONTRACT.md").read_text()
    seats = [t["id"] for t in manifest["territories"]]
    assert all((pkg / "instructions" / f"{s}.md").is_file() for s in seats)
    for ms in manifest["build"]["milestones"]:
        assert os.access(pkg / ms["verifier"], os.X_OK), ms
    assert '. "${AOE_TUI_VERIFY_KIT:?' in (pkg / "verify" / "lib.sh").read_text()
    assert (pkg / "territory" / "recipe.toml").is_file()
    assert os.access(pkg / "adapters" / "oracle.sh", os.X_OK)
    oracle = pkg / "adapters" / "builders" / "oracle.sh"
    faults = builder_faults(oracle)
    assert list(faults) == (["memory", "volatile"] if source == "hello-service" else ["hasty", "memory", "volatile"]), faults
    r = subprocess.run(["bash", "-n", str(oracle)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    if source == "first-build":  # first-build's own files come along
        assert (pkg / "verify" / "service-restart.sh").read_bytes() == \
            (REPO / "arenas" / "first-build" / "verify" / "service-restart.sh").read_bytes()
        # the service each fault deploys is the built-in one, every placeholder filled
        app = re.search(r"<<'PY'\n(.*?)\nPY\n", oracle.read_text(), re.S).group(1)
        for wrap in ("True", "False"):
            source_py = app.replace("__STORAGE__", "memory").replace("__WRAP_READS__", wrap)
            assert "__" + "WRAP_READS" not in source_py and f"WRAP_READS = {wrap}" in source_py
            compile(source_py, "app.py", "exec")


@pytest.mark.parametrize("arena", sorted(p.name for p in (REPO / "arenas").iterdir() if (p / "arena.toml").is_file()))
def test_init_from_each_of_our_arenas(tmp_path: Path, arena: str) -> None:
    """Any of our packages is a starting point: renamed, valid, with a recipe, an oracle adapter
    and builder, and at least two faulty builders (that their verifiers use the toolkit is
    tests/test_referee_access.py's check on the packages themselves)."""
    from aoe_tui.agents.registry import package_builders

    source = arena if arena != "durable-job-queue" else str(REPO / "arenas" / arena / "arena.toml")  # a manifest path too
    pkg = init(tmp_path, f"from-{arena}", "--from", source)
    assert tomllib.loads((pkg / "arena.toml").read_text())["arena"]["id"] == f"from-{arena}"
    # the package's other manifest (upstream's agents-real.toml) is renamed the same way
    real = tomllib.loads((pkg / "agents-real.toml").read_text())["arena"]
    was = tomllib.loads((REPO / "arenas" / arena / "agents-real.toml").read_text())["arena"]["id"]
    assert real["id"] == was.replace(arena, f"from-{arena}"), real
    assert display_name(f"from-{arena}") in real["display_name"], real
    assert (pkg / "territory" / "recipe.toml").is_file()
    assert os.access(pkg / "adapters" / "oracle.sh", os.X_OK)
    assert (pkg / "adapters" / "builders" / "oracle.sh").is_file()
    faulty = set(package_builders(pkg)) - {"scripted:slow"}
    assert len(faulty) >= 2, faulty


def test_validate_warns_of_a_fault_the_oracle_never_runs(tmp_path: Path) -> None:
    """``aoe arena validate`` warns (the package stays valid) of a ``# fault NAME:`` line with no
    branch of the AOE_FAULT switch, a fault line that is not one, and verifiers that break the
    toolkit's rules (a redefined toolkit name, their own SSH session); the example has none."""
    pkg = init(tmp_path, "faulty")
    oracle = pkg / "adapters" / "builders" / "oracle.sh"
    assert "declared but" not in aoe("arena", "validate", "faulty", cwd=tmp_path).stderr
    oracle.write_text(oracle.read_text().replace("# fault memory:", "# fault memory-leak: grows until OOM\n# fault memory:", 1))
    v = aoe("arena", "validate", "faulty", cwd=tmp_path)
    assert v.returncode == 0, v.stderr
    assert f"warning: {oracle.relative_to(tmp_path)}: fault memory-leak is declared but the script never mentions it " \
           "again (no branch of its AOE_FAULT switch runs it)\n" in v.stderr, v.stderr
    assert v.stderr.count("is declared but") == 1, v.stderr  # memory (a prefix of memory-leak) has its branch
    # a fault line that is not one, and verifiers that break the toolkit's rules
    oracle.write_text(oracle.read_text().replace("set -", "#fault Bad_Name no colon\nset -", 1))
    lib = pkg / "verify" / "lib.sh"
    lib.write_text(lib.read_text() + "fail() { echo mine; exit 1; }\nHTTP_ERR=x\n")
    up = pkg / "verify" / "service-up.sh"
    up.write_text(up.read_text() + "# ssh -p 22 in a comment is fine\nsshpass -e ssh -p 22 root@x true\n")
    v = aoe("arena", "validate", "faulty", cwd=tmp_path)
    assert v.returncode == 0, v.stderr
    assert "'#fault Bad_Name no colon' is not a fault declaration (write '# fault NAME: WHY'" in v.stderr, v.stderr
    assert "verify/lib.sh: redefines the verifier toolkit's HTTP_ERR, fail (use the toolkit's" in v.stderr, v.stderr
    assert "verify/service-up.sh: opens its own SSH or nsenter session" in v.stderr, v.stderr
    assert v.stderr.count("opens its own") == 1, v.stderr
    # self-contained verifiers (upstream's way: no toolkit) define their own fail and use ssh: not checked
    lib.write_text("fail() { echo \"$*\" >&2; exit 1; }\nHTTP_ERR=x\n")
    v = aoe("arena", "validate", "faulty", cwd=tmp_path)
    assert v.returncode == 0 and "toolkit" not in v.stderr and "opens its own" not in v.stderr, v.stderr


def test_refusals_are_one_line(tmp_path: Path) -> None:
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine\n")
    cases = [
        (["taken"], "taken already exists and is not empty"),
        (["Bad_Name"], "'Bad_Name' is not an arena id"),
        (["-x"], None),  # argparse: an option, not a name
        (["ok-name", "--from", "no-such-arena"], "no arena package 'no-such-arena'"),
        (["ok-name", "--dir", "taken"], "taken already exists and is not empty"),
        (["ok-name", "--dir", "taken/notes.txt"], "taken/notes.txt already exists and is not a folder"),
    ]
    for args, needle in cases:
        r = aoe("arena", "init", *args, cwd=tmp_path)
        assert r.returncode != 0, (args, r.stdout)
        assert "Traceback" not in r.stderr, r.stderr
        if needle is not None:
            assert r.returncode == 2, (args, r.returncode)
            assert r.stderr.count("\n") == 1 and needle in r.stderr, (args, r.stderr)
            assert r.stderr.startswith("aoe: error: arena init"), r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]
    assert [p.name for p in (tmp_path / "taken").iterdir()] == ["notes.txt"]


# ----------------------------------------------------------------------- real heats


def race(pkg: Path, out: Path, *agents: str, env: dict | None = None,
         extra: tuple[str, ...] = ()) -> tuple[dict, list[dict], float]:
    """``aoe match run PKG --agent ... EXTRA`` on container territories; (world, events, wall s)."""
    need_container_host()
    args = [a for spec in agents for a in ("--agent", spec)] + list(extra)
    started = time.monotonic()
    r = aoe("match", "run", pkg.name, *args, "-o", str(out), "--drain-seconds", "3", "-q",
            cwd=pkg.parent, env=env, timeout=300)
    wall = time.monotonic() - started
    assert r.returncode == 0, r.stdout + r.stderr
    world = json.loads((out / "world.json").read_text())
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines() if line.strip()]
    return world, events, wall


def first_failure(events: list[dict], territory: str, milestone: str) -> str:
    """The detail of ``milestone``'s first failure on ``territory``; asserts it never passed."""
    mine = [e for e in events if e.get("territory") == territory and e.get("milestone") == milestone]
    assert not [e for e in mine if e["kind"] == "milestone_passed"], mine
    failed = [e for e in mine if e["kind"] == "milestone_failed"]
    assert failed, f"{territory} never failed {milestone}"
    return failed[0]["detail"]


@pytest.mark.container
def test_init_then_the_oracle_is_durable(tmp_path: Path) -> None:
    pkg = init(tmp_path, "hello-ci")
    world, _, wall = race(pkg, tmp_path / "heat", "oracle")
    winner = world["winner"]
    assert winner in ("seat-one", "seat-two", "seat-three"), world["winner"]
    t = world["territories"][winner]
    assert t["durable_at_ms"] is not None and all(t["milestones"][m]["passed"] for m in ORDER), t["milestones"]
    ev = t["milestones"]["host-reboot"]["evidence"]
    assert ev["reboot"] is True and ev["boot_id"] != t["milestones"]["service-restart"]["evidence"]["boot_id"], ev
    print(f"oracle heat on an initialised package: wall {wall:.1f} s")


@pytest.mark.container
@pytest.mark.parametrize("source", ["hello-service", "first-build"])
def test_the_faults_stop_at_their_milestones(tmp_path: Path, source: str) -> None:
    name = "hello-ci" if source == "hello-service" else "first-build-ci"
    pkg = init(tmp_path, name, "--from", source)
    seats = [t["id"] for t in tomllib.loads((pkg / "arena.toml").read_text())["territories"]]
    # the oracle builder, late enough that both faulty builders have failed before it is durable
    world, events, wall = race(pkg, tmp_path / "heat", "scripted:slow", "scripted:memory", "scripted:volatile",
                               env={"AOE_SCRIPTED_SLOW_DELAY_S": "15"})
    slow, memory, volatile = (world["territories"][s] for s in seats)
    assert world["winner"] == seats[0], world["winner"]
    assert slow["durable_at_ms"] is not None and all(slow["milestones"][m]["passed"] for m in ORDER)

    assert all(memory["milestones"][m]["passed"] for m in ORDER[:2]), memory["milestones"]
    detail = first_failure(events, seats[1], "service-restart")
    if source == "hello-service":
        assert re.fullmatch(r"after systemctl restart hello\.service, GET /hello/guest-[0-9a-f]{12} answered "
                            r"HTTP 404 for 3 s: the name was lost", detail), detail
    else:
        assert "after restarting builder-app.service" in detail and "(record lost)" in detail, detail

    assert all(volatile["milestones"][m]["passed"] for m in ORDER[:3]), volatile["milestones"]
    detail = first_failure(events, seats[2], "host-reboot")
    if source == "hello-service":
        assert re.fullmatch(r"after the reboot, GET /hello/guest-[0-9a-f]{12} answered HTTP 404 for 3 s: "
                            r"the name was lost", detail), detail
    else:
        assert detail.startswith("after the reboot, GET /records/") and "(record lost)" in detail, detail
    assert memory["durable_at_ms"] is None and volatile["durable_at_ms"] is None
    print(f"fault heat from {source}: wall {wall:.1f} s")


def test_the_tutorial_cup_loads_on_an_initialised_package(tmp_path: Path) -> None:
    """docs/arena-packages.md's season file, beside a package from `aoe arena init my-arena`,
    is a valid season over that package (the tutorial's last step)."""
    from aoe_tui.domain.arena import load_manifest
    from aoe_tui.season.runner import load_season_file

    doc = (REPO / "docs" / "arena-packages.md").read_text()
    assert "aoe arena init my-arena\n" in doc and "aoe arena validate my-arena\n" in doc
    season = re.search(r"```toml\n(# A cup over my-arena.*?)```", doc, re.S)
    assert season, "the tutorial's season file is gone"
    init(tmp_path, "my-arena")
    (tmp_path / "my-cup.toml").write_text(season.group(1))
    loaded = load_season_file(tmp_path / "my-cup.toml")
    assert [load_manifest(a).manifest.arena.id for a in loaded.arena_paths] == ["my-arena"]
    assert [e.adapter for e in loaded.season.entrants] == ["oracle", "scripted:slow", "scripted:memory",
                                                          "scripted:volatile"]


@pytest.mark.container
def test_a_short_race_ends_at_duration_seconds(tmp_path: Path) -> None:
    """``aoe match run --duration-seconds N``: a race nobody can win (three in-memory builders)
    ends on the timer at N s, not the manifest's 600 s; a value that is not positive is one
    line, and the manifest itself is untouched."""
    pkg = init(tmp_path, "short")
    r = aoe("match", "run", "short", "--duration-seconds", "0", "-o", str(tmp_path / "refused"), cwd=tmp_path)
    assert r.returncode != 0 and "--duration-seconds 0: must be a positive number of seconds" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr
    world, events, wall = race(pkg, tmp_path / "heat", *["scripted:memory"] * 3, extra=("--duration-seconds", "15"))
    assert world["winner"] is None, world
    ends = [e for e in events if e.get("reason") == "match timer expired"]
    assert ends and 15_000 <= ends[0]["elapsed_ms"] < 18_000, ends
    assert wall < 90, wall
    assert tomllib.loads((pkg / "arena.toml").read_text())["rules"]["duration_seconds"] == 600
    print(f"short race: wall {wall:.1f} s")
