"""One registry per extension point (issue #14, item 3).

The acceptance test: a territory provider defined in this module and registered in one
place (:func:`aoe_plugin`, loaded by the real CLI through ``AOE_PLUGINS``) is an
``aoe match run --provider`` choice, a season file's ``[provider] kind`` that the season
runner builds, a group of ``aoe doctor`` lines and a step of ``aoe cleanup``. Then: a
format registered in one place is a season ``[format] kind``; no module outside
``season/formats.py`` asks for a format's kind and none outside the runtime providers for a
provider's name; the domain layer imports neither the runtime nor the season layer.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from aoe_tui.cli import main
from aoe_tui.domain.season_file import SectionConfig, SeasonFileError, load_season
from aoe_tui.runtime.provider import DoctorCheck, Territory, TerritoryProvider, TerritorySpec
from aoe_tui.runtime.registry import ProviderContext, provider_names, register_provider, unregister_provider

REPO = Path(__file__).resolve().parent.parent
PLUGIN = f"{__name__}:aoe_plugin"
#: territories folders the fake provider's cleanup was called on
CLEANED: list[Path] = []


class FakeOptions(SectionConfig):
    """``[provider] kind = "fake"``: how many hosts (a made-up option)."""

    hosts: int = 1


class FakeProvider(TerritoryProvider):
    """A provider that only remembers how it was built (never provisions)."""

    name = "fake"

    def __init__(self, ctx: ProviderContext) -> None:
        self.ctx = ctx

    async def provision(self, specs: Sequence[TerritorySpec]) -> list[Territory]:
        raise NotImplementedError

    async def reboot(self, territory: Territory) -> None:
        raise NotImplementedError

    async def teardown(self) -> None:
        return None


def fake_doctor() -> list[DoctorCheck]:
    return [DoctorCheck("fake", "fake-tool", True, "always here")]


def fake_cleanup(workdir: Path) -> list[str]:
    CLEANED.append(workdir)
    return sorted(p.name for p in workdir.glob("fake-*"))


def aoe_plugin() -> None:
    """The one place the fake provider is registered (``AOE_PLUGINS=test_registry:aoe_plugin``)."""
    register_provider("fake", FakeProvider, config=FakeOptions, doctor=fake_doctor, cleanup=fake_cleanup,
                      help="a provider from a test plugin")


@pytest.fixture
def plugin(monkeypatch):
    monkeypatch.setenv("AOE_PLUGINS", PLUGIN)
    CLEANED.clear()
    yield
    unregister_provider("fake")


def _season(tmp_path: Path, provider: str, fmt: str = 'kind = "league"\nheats_per_entrant = 1\n') -> Path:
    f = tmp_path / "s.toml"
    f.write_text(f'id = "cup"\nlabel = "w1"\narena = "{REPO}/arenas/first-build"\n\n[provider]\n{provider}\n'
                 f"[format]\n{fmt}"
                 + "".join(f'[[entrants]]\nid = "{e}"\nadapter = "oracle"\nmodel = "m"\n' for e in "abc"))
    return f


def test_plugin_provider_is_a_match_run_choice(plugin, capsys):
    with pytest.raises(SystemExit) as ei:
        main(["match", "run", "--help"])
    assert ei.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "{container,qemu,ssh,nixos,fake}" in out and "fake = a provider from a test plugin" in out


def test_plugin_provider_in_a_fresh_process(tmp_path):
    """The real entry point in a new interpreter: AOE_PLUGINS imports this module."""
    env = {**os.environ, "AOE_PLUGINS": PLUGIN,
           "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), str(REPO), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run([sys.executable, "-m", "aoe_tui.cli", "match", "run", "--help"], capture_output=True,
                         text=True, env=env, timeout=60)
    assert res.returncode == 0 and "fake" in res.stdout
    env["AOE_PLUGINS"] = "no_such_plugin_module"
    res = subprocess.run([sys.executable, "-m", "aoe_tui.cli", "doctor"], capture_output=True, text=True, env=env,
                         timeout=60)
    assert res.returncode == 2
    assert res.stderr.startswith("aoe: error: AOE_PLUGINS: plugin 'no_such_plugin_module' failed: ModuleNotFoundError")
    assert "Traceback" not in res.stderr


def test_plugin_provider_is_a_season_provider_kind(plugin, tmp_path):
    from aoe_tui.plugins import load_plugins
    from aoe_tui.season.runner import SeasonRunner

    assert load_plugins() == [PLUGIN]
    assert "fake" in provider_names(seasons=True)
    loaded = load_season(_season(tmp_path, 'kind = "fake"\nhosts = 2\n'))
    assert isinstance(loaded.season.provider, FakeOptions) and loaded.season.provider.hosts == 2
    runner = SeasonRunner(loaded, tmp_path / "out")
    arena = runner.arena_of_round(1)
    provider = runner.provider_factory(tmp_path / "territories", "round-1-heat-1-attempt-1", arena)
    assert isinstance(provider, FakeProvider)
    assert provider.ctx.config.hosts == 2 and provider.ctx.heat_id == "round-1-heat-1-attempt-1"
    assert provider.ctx.workdir == tmp_path / "territories" and provider.ctx.arena is arena
    # its options are checked by its own model; an unknown kind names the known ones
    with pytest.raises(SeasonFileError) as ei:
        load_season(_season(tmp_path, 'kind = "fake"\nhosts = "two"\nport = 1\n'))
    assert str(ei.value).splitlines() == [
        f"{tmp_path / 's.toml'}:7: provider.hosts: Input should be a valid integer (got 'two')",
        f"{tmp_path / 's.toml'}:8: provider.port: unknown field",
    ]
    with pytest.raises(SeasonFileError) as ei:
        load_season(_season(tmp_path, 'kind = "vmware"\n'))
    assert str(ei.value) == (f"{tmp_path / 's.toml'}:6: provider.kind: unknown provider kind 'vmware' "
                             "(known: container, qemu, fake)")
    # a provider that exists but is for `aoe match run` only says so, not "unknown"
    with pytest.raises(SeasonFileError) as ei:
        load_season(_season(tmp_path, 'kind = "ssh"\n'))
    assert str(ei.value) == (f"{tmp_path / 's.toml'}:6: provider.kind: provider kind 'ssh' is for "
                             "`aoe match run --provider` only; a season file takes: container, qemu, fake")


def test_plugin_provider_checks_show_in_doctor(plugin, capsys):
    rc = main(["doctor", "--json", "--provider", "fake"])
    data = json.loads(capsys.readouterr().out)
    assert rc == 0 and data["ready"] and data["default_provider"] == "fake"
    assert {"provider": "fake", "name": "fake-tool", "available": True, "ok": True, "detail": "always here",
            "fix": ""} in data["checks"]
    assert list(data["providers"]) == ["container", "qemu", "ssh", "nixos", "fake"]


def test_plugin_provider_cleanup_runs_in_cleanup(plugin, tmp_path, capsys):
    tdir = tmp_path / "round-1" / "heat-1" / "attempt-1" / "territories"
    (tdir / "fake-one").mkdir(parents=True)
    assert main(["cleanup", str(tmp_path)]) == 0
    assert CLEANED == [tdir]
    out = capsys.readouterr().out
    assert f"removed fake-one ({tdir})" in out and "1 stale territory removed" in out


def test_a_provider_entry_says_why_cpu_weights_do_nothing(monkeypatch):
    """``AOE_CPU_WEIGHTS=1`` with heats at once: the season runner's one-line note asks the
    provider's registry entry (its ``cpu_weights`` hook), so a plugin provider takes part
    without the runner naming it: with a hook its reason is said, without one it is trusted
    (no note); the runner's own reasons come first; an unknown kind is a ``UsageError``."""
    from aoe_tui.errors import UsageError
    from aoe_tui.season.runner import cpu_weights_note

    monkeypatch.setenv("AOE_CPU_WEIGHTS", "1")
    register_provider("weightless", FakeProvider, config=FakeOptions, cpu_weights=lambda: "no CPU groups here")
    register_provider("trusted", FakeProvider, config=FakeOptions)
    try:
        assert cpu_weights_note(2, "weightless") == "warning: AOE_CPU_WEIGHTS=1 has no effect: no CPU groups here"
        assert cpu_weights_note(2, "trusted") is None
        assert cpu_weights_note(2, "weightless", cluster=True).endswith("on the Ray cluster's nodes, which do not weigh CPU")
        with pytest.raises(UsageError, match="unknown provider 'nonesuch'"):
            cpu_weights_note(2, "nonesuch")
    finally:
        unregister_provider("weightless")
        unregister_provider("trusted")


def test_a_registered_format_is_a_season_format_kind(tmp_path):
    from aoe_tui.domain.season_file import LeagueFormat
    from aoe_tui.season.formats import FORMATS, League, make_format, register_format

    class SprintOptions(LeagueFormat):
        kind: str = "sprint"

    class Sprint(League):
        kind = "sprint"
        config_model = SprintOptions

    register_format(Sprint)
    try:
        loaded = load_season(_season(tmp_path, 'kind = "container"\n', 'kind = "sprint"\nheats_per_entrant = 2\n'))
        fmt = make_format(loaded.season.format, 3, 2)
        assert isinstance(fmt, Sprint) and fmt.heats_per_entrant == 2
        with pytest.raises(SeasonFileError, match=re.escape("format.kind: unknown format kind 'swiss' "
                                                            "(known: knockout, league, sprint)")):
            load_season(_season(tmp_path, 'kind = "container"\n', 'kind = "swiss"\n'))
    finally:
        FORMATS.pop("sprint")


def _sources(*parts: str) -> list[Path]:
    return sorted(p for part in parts for p in (REPO / "aoe_tui" / part).rglob("*.py"))


def test_no_kind_tests_outside_the_registries():
    """Formats are asked, never named: no isinstance(..., Knockout) or kind == "knockout"
    outside season/formats.py; no provider names compared outside the runtime, nor listed
    (a tuple, list or set of names, e.g. ``NO_CPU_WEIGHTS = ("qemu",)``, is a comparison
    waiting to happen: the registry entry is asked instead)."""
    fmt = re.compile(r"isinstance\([^)]*(Knockout|League)\b|[=!]= *[\"'](knockout|league)[\"']")
    name = r"[\"'](container|qemu|ssh|nixos)[\"']"
    prov = re.compile(rf"[=!]= *{name}|in \({name}|[(\[{{,] *{name} *[,)\]}}]")
    assert prov.search('NO_CPU_WEIGHTS = ("qemu",)') and prov.search("kind in {'ssh', 'nixos'}")
    bad = [f"{p}: {m.group(0)}" for p in _sources("") if p.name != "formats.py" for m in fmt.finditer(p.read_text())]
    bad += [f"{p}: {m.group(0)}" for p in _sources("commands", "season", "domain", "tui", "serve", "export", "cluster")
            for m in prov.finditer(p.read_text())]
    assert bad == []


def test_domain_imports_neither_runtime_nor_season():
    bad = []
    for p in _sources("domain"):
        for node in ast.walk(ast.parse(p.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            bad += [f"{p.name}: {n}" for n in names if n.startswith(("aoe_tui.runtime", "aoe_tui.season"))]
    assert bad == []


async def test_a_heat_panel_is_one_class_and_one_compose_line():
    """A panel subclassing HeatPanel, composed in one line, is redrawn by the screen's one
    loop from the same frame as the built-in panels (the seed replay, paused at its end)."""
    from textual.widgets import Static

    from aoe_tui.replay.matchdir import load_match
    from aoe_tui.tui.app import AoeApp
    from aoe_tui.tui.screens import ReplayScreen
    from aoe_tui.tui.viewmodel import HeatFrame
    from aoe_tui.tui.widgets import HeatPanel
    from tui_fixtures import SEED

    class PointsPanel(Static, HeatPanel):
        def show(self, frame: HeatFrame) -> None:
            self.frames = [*getattr(self, "frames", []), frame]
            self.update(" ".join(f"{v.territory}={v.points}" for v in frame.views))

    class Screen(ReplayScreen):
        def compose(self):
            yield from super().compose()
            yield PointsPanel(id="points")

    app = AoeApp.replay(load_match(SEED), at_end=True)
    first = app._first_screen
    app._first_screen = Screen(first.cursor, "replay", playing=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        panel = app.screen.query_one("#points", PointsPanel)
        assert panel.frames and panel.frames[-1].heat == "replay"
        assert "builder-two=100" in str(panel.content)


def test_cli_options_build_a_provider_or_fail_in_one_line(plugin, tmp_path):
    """``aoe match run``'s own path (commands.match.make_provider): the plugin provider is
    built from the CLI's options; a missing or bad option is one UsageError line."""
    from aoe_tui.commands.match import make_provider
    from aoe_tui.domain.arena import load_manifest
    from aoe_tui.errors import UsageError
    from aoe_tui.plugins import load_plugins
    from aoe_tui.runtime.registry import provider_config

    load_plugins()
    arena = load_manifest(REPO / "arenas" / "first-build" / "arena.toml")
    fake = make_provider("fake", arena, tmp_path, None)
    assert isinstance(fake, FakeProvider) and fake.ctx.workdir == tmp_path / "territories"
    with pytest.raises(UsageError, match=r"^--provider ssh needs --inventory FILE"):
        make_provider("ssh", arena, tmp_path, None)
    with pytest.raises(UsageError, match=r"^provider\.memory_mib: Input should be a valid integer"):
        provider_config("qemu", {"memory_mib": "lots"})
    # a plugin's class need not repeat its registered name: the registry gives it (log lines)
    class Nameless(FakeProvider):
        name = ""

    register_provider("nameless", Nameless, config=FakeOptions)
    try:
        assert make_provider("nameless", arena, tmp_path, None).name == "nameless"
    finally:
        unregister_provider("nameless")


def test_a_season_runner_names_the_file_for_a_bad_format_or_provider(tmp_path):
    """Loaded by the domain alone (no kind tables installed yet: a fresh interpreter), a bad
    [format] or [provider] is still one AoeError line naming the season file when the
    runner is built."""
    code = (
        "import sys\n"
        "from aoe_tui.domain.season_file import load_season\n"
        "loaded = load_season(sys.argv[1])\n"
        "from aoe_tui.errors import AoeError\n"
        "from aoe_tui.season.runner import SeasonRunner\n"
        "try:\n"
        "    SeasonRunner(loaded, sys.argv[2])\n"
        "except AoeError as err:\n"
        "    print(err)\n"
    )
    fmt = _season(tmp_path, 'kind = "container"\n', 'kind = "league"\nheats_per_entrant = "three"\n')
    res = subprocess.run([sys.executable, "-c", code, str(fmt), str(tmp_path / "out")], capture_output=True,
                         text=True, timeout=60, cwd=REPO)
    assert res.stdout.strip() == f"{fmt}: format.heats_per_entrant: Input should be a valid integer (got 'three')", res
    (tmp_path / "p").mkdir()
    prov = _season(tmp_path / "p", 'kind = "container"\nboot_timeout_s = "soon"\n')
    res = subprocess.run([sys.executable, "-c", code, str(prov), str(tmp_path / "out2")], capture_output=True,
                         text=True, timeout=60, cwd=REPO)
    assert res.stdout.strip().startswith(f"{prov}: provider.boot_timeout_s: "), res
    # an adapter the registry does not know: the line of the entrant's adapter key, as for a field error
    (tmp_path / "a").mkdir()
    typo = _season(tmp_path / "a", 'kind = "container"\n')
    text = typo.read_text().replace('adapter = "oracle"', 'adapter = "scripted:slwo"', 2).replace(
        'adapter = "scripted:slwo"', 'adapter = "oracle"', 1)
    typo.write_text(text)
    line = text.splitlines().index('adapter = "scripted:slwo"') + 1
    res = subprocess.run([sys.executable, "-c", code, str(typo), str(tmp_path / "out3")], capture_output=True,
                         text=True, timeout=60, cwd=REPO)
    assert res.stdout.strip().startswith(f"{typo}:{line}: entrants[1].adapter: unknown scripted builder "
                                         "'scripted:slwo' (known: "), res


def test_a_broken_plugin_cleanup_is_one_line_and_checkless_providers_are_ready(tmp_path, capsys):
    def broken(workdir: Path) -> list[str]:
        raise RuntimeError("disk on fire")

    register_provider("broken", FakeProvider, config=FakeOptions, cleanup=broken)
    try:
        (tmp_path / "territories").mkdir()
        assert main(["cleanup", str(tmp_path)]) == 1
        err = capsys.readouterr().err
        assert f"{tmp_path / 'territories'}: cleanup of provider 'broken' failed: RuntimeError: disk on fire" in err
        assert "Traceback" not in err
        rc = main(["doctor", "--json", "--provider", "broken"])
        data = json.loads(capsys.readouterr().out)
        assert rc == 0 and data["providers"]["broken"] is True
    finally:
        unregister_provider("broken")
