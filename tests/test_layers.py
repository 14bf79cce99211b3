"""Per-arena image layers on real territories, and the fog leak audit before a race.

* a recipe is built once into a layer (whiteouts, modes, enabled units), reused from the
  cache, rebuilt when it changes; container territories boot on it; the copy fallback
  applies the same layer;
* a fog arena whose territory leaks a forbidden string at boot: its heat ends before the
  race as an ``infrastructure_failure`` naming the territory, the file and the string;
  the season records it, does not re-run it, and races its other heats.
"""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest

from arena_support import REPO, booted_territories, guest, need_container_host, reboot
from test_recipes import _fog_package, make_recipe

pytestmark = [pytest.mark.container]


def test_apply_upper_follows_whiteouts_and_opaque_folders(tmp_path):
    """The container provider's fallback without overlayfs: base copy + layer = overlay view."""
    from aoe_tui.runtime.layers import apply_upper

    if os.geteuid() != 0:
        pytest.skip("whiteouts are character devices: mknod needs root")
    dest, upper = tmp_path / "dest", tmp_path / "upper"
    (dest / "etc/gone").mkdir(parents=True)
    (dest / "etc/gone/x").write_text("x")
    (dest / "etc/keep.conf").write_text("old")
    (dest / "etc/opaque").mkdir()
    (dest / "etc/opaque/stale").write_text("stale")
    (dest / "etc/file.service").write_text("unit")
    (upper / "etc/opaque").mkdir(parents=True)
    os.setxattr(upper / "etc/opaque", "trusted.overlay.opaque", b"y")
    (upper / "etc/opaque/fresh").write_text("fresh")
    (upper / "etc/keep.conf").write_text("new")
    os.chmod(upper / "etc/keep.conf", 0o600)
    for name in ("gone", "file.service"):
        os.mknod(upper / "etc" / name, stat.S_IFCHR | 0o000, os.makedev(0, 0))
    os.symlink("/usr/bin/true", upper / "etc/link")
    apply_upper(upper, dest)
    assert sorted(p.name for p in (dest / "etc").iterdir()) == ["keep.conf", "link", "opaque"]
    assert (dest / "etc/keep.conf").read_text() == "new" and stat.S_IMODE((dest / "etc/keep.conf").stat().st_mode) == 0o600
    assert [p.name for p in (dest / "etc/opaque").iterdir()] == ["fresh"]
    assert os.readlink(dest / "etc/link") == "/usr/bin/true"


async def test_layer_is_built_once_booted_and_rebuilt_on_change(tmp_path):
    from aoe_tui.runtime.layers import ensure_layer, find_layer

    need_container_host()
    pkg = tmp_path / "tpkg"
    pkg.mkdir()
    (pkg / "arena.toml").write_text((REPO / "arenas/first-build/arena.toml").read_text())
    t = make_recipe(pkg)
    (t / "recipe.toml").write_text((t / "recipe.toml").read_text().replace(
        'remove = ["/etc/systemd/system/builder-app.service"]',
        'remove = ["/etc/systemd/system/builder-app.service", '
        '"/etc/systemd/system/multi-user.target.wants/builder-app.service"]'))
    (t / "files/usr/lib/aoe-arena/t/seed.sh").write_text(
        "#!/bin/sh\nmkdir -p /var/lib/t\n[ -e /var/lib/t/boots ] || : > /var/lib/t/boots\necho boot >> /var/lib/t/boots\n")
    (t / "setup.sh").write_text("echo built > /usr/lib/aoe-arena/t/setup-ran\n")
    layer = ensure_layer(pkg)
    assert layer is not None and layer.built()
    upper = layer.upper
    whiteout = upper / "etc/systemd/system/builder-app.service"
    assert stat.S_ISCHR(whiteout.lstat().st_mode) and whiteout.lstat().st_rdev == 0
    assert os.readlink(upper / "etc/systemd/system/multi-user.target.wants/t-seed.service") == \
        "/lib/systemd/system/t-seed.service"  # systemd 252 (bookworm) links through /lib
    assert stat.S_IMODE((upper / "usr/lib/aoe-arena/t/seed.sh").stat().st_mode) == 0o750
    built_at = json.loads((layer.root / "layer.json").read_text())["built_at"]
    again = ensure_layer(pkg)
    assert again.root == layer.root and json.loads((again.root / "layer.json").read_text())["built_at"] == built_at

    async with booted_territories(pkg, tmp_path / "terr") as (terr,):
        rc, out, err = await guest(terr, "systemctl is-active t-seed.service; cat /var/lib/t/boots; "
                                         "cat /usr/lib/aoe-arena/t/setup-ran; systemctl cat builder-app.service; "
                                         "readlink /run/current-system/sw; readlink /bin/sh; hostname")
        assert out.split("\n")[:3] == ["active", "boot", "built"], (out, err)
        assert "No files found for builder-app.service" in err
        assert out.split("\n")[3:6] == ["/usr", "bash", "builder-one"]
        await guest(terr, "echo kept > /tmp/kept")
        await reboot(terr)
        rc, out, _ = await guest(terr, "cat /var/lib/t/boots; cat /tmp/kept")
        assert out == "boot\nboot\nkept\n"  # the seed runs at every boot; /tmp survives, as on NixOS

    token = f"changed {os.getpid()} {time.time_ns()}\n"  # never built before, on any run
    (t / "files/etc/t/notes.txt").write_text(token)
    assert find_layer(pkg) is None  # a changed recipe is a new layer
    changed = ensure_layer(pkg)
    assert changed.key != layer.key and (changed.upper / "etc/t/notes.txt").read_text() == token


def test_image_build_cli_builds_and_names_the_layer(tmp_path):
    import subprocess
    import sys

    need_container_host()
    pkg = tmp_path / "cli-pkg"
    pkg.mkdir()
    make_recipe(pkg)
    res = subprocess.run([sys.executable, "-m", "aoe_tui.cli", "image", "build", "--arena", str(pkg)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    root = Path(res.stdout.strip())
    assert root.name.startswith("cli-pkg-") and (root / "upper/usr/lib/aoe-arena/t/seed.sh").is_file()
    res = subprocess.run([sys.executable, "-m", "aoe_tui.cli", "image", "path", "--arena", str(pkg)],
                         capture_output=True, text=True)
    assert res.returncode == 0 and Path(res.stdout.strip()) == root
    res = subprocess.run([sys.executable, "-m", "aoe_tui.cli", "image", "build", "--arena", str(tmp_path / "none/x")],
                         capture_output=True, text=True)
    assert res.returncode == 2 and "no such arena package folder" in res.stderr


async def test_leaking_territory_ends_its_heat_before_the_race_and_the_season_goes_on(tmp_path):
    """A fog arena whose seed writes a forbidden string under a scan path at boot (which the
    static check of ``aoe arena validate`` cannot see): the leak audit ends that heat before
    any agent starts; the season does not retry it and races its other heats."""
    from aoe_tui.domain.season_file import load_season
    from aoe_tui.replay.log import read_events
    from aoe_tui.season.runner import SeasonRunner

    need_container_host()
    pkg = _fog_package(tmp_path)
    t = make_recipe(pkg)
    (t / "files/usr/lib/aoe-arena/t/seed.sh").write_text(
        "#!/bin/sh\nmkdir -p /var/lib/t\nprintf 'notes: hidden-clue-7f3\\n' > /var/lib/t/notes.txt\n")
    season = tmp_path / "cup.toml"
    season.write_text(
        f'id = "leak-cup"\nlabel = "w1"\narenas = ["{pkg}", "{REPO}/arenas/first-build"]\nmax_attempts = 3\n'
        "drain_seconds = 1\n[arena_overrides]\nduration_seconds = 40\n[format]\nkind = \"league\"\n"
        "heats_per_entrant = 2\n"
        + "".join(f'[[entrants]]\nid = "o{i}"\nadapter = "oracle"\nmodel = "oracle"\n' for i in range(3)))
    lines: list[str] = []
    state = await SeasonRunner(load_season(season), tmp_path / "out", say=lines.append).run()
    r1, r2 = state.rounds[1], state.rounds[2]
    assert (r1.arena, r2.arena) == ("leaky-build", "first-build")
    leaky = r1.heats[1]
    # the leak is recorded once and not retried: its attempt is the heat's last and voids it.
    # An attempt before it can only be one the machine spoiled (a boot past its timeout on a
    # loaded host), retried as any other
    *spoiled, leak = leaky.attempts
    assert leaky.result.void and [a.attempt for a in leaky.attempts] == list(range(1, len(leaky.attempts) + 1))
    assert all(a.finished.outcome == "retry" and "guest-leak-audit" not in a.finished.detail for a in spoiled), \
        [a.finished for a in spoiled]
    fin = leak.finished
    assert fin.outcome == "void" and fin.failure_source == "arena"
    assert "guest-leak-audit: guest leak in builder-" in fin.detail
    assert "/var/lib/t/notes.txt contains the forbidden string 'hidden-clue-7f3'" in fin.detail
    records = read_events(tmp_path / "out" / leak.folder / "events.jsonl")
    kinds = [r.event.kind for r in records]
    assert kinds == ["infrastructure_failure", "match_state_changed", "match_finished"]  # no agent ever started
    assert records[-1].event.reason == "guest leak audit failed"
    assert not (tmp_path / "out" / leak.folder / "agents").exists()
    assert any("not retried" in line for line in lines)
    # the season went on: the other heat was raced to its finish and counted (who won a
    # 40 s race of three identical oracles is the machine's speed: a tie has no winner)
    other = r2.heats[1]
    assert not other.result.void and other.attempts[-1].finished.outcome == "counted"
    raced = [r.event.kind for r in read_events(tmp_path / "out" / other.attempts[-1].folder / "events.jsonl")]
    assert "agent_started" in raced and "match_finished" in raced


def test_a_killed_layer_build_is_swept_with_its_mounts(tmp_path):
    """A build killed mid-way leaves its folder, maybe with mounts in it (overlay, the
    chroot's /proc): the next build unmounts and removes it; a live builder's is kept."""
    import subprocess

    from aoe_tui.runtime.image import _mounts_under
    from aoe_tui.runtime.layers import _sweep_stale_builds, layer_root

    need_container_host()
    gone = subprocess.Popen(["true"])
    gone.wait()
    layer_root().mkdir(parents=True, exist_ok=True)
    dead = layer_root() / f".build-swept-0123456789abcdef-{gone.pid}"
    live = layer_root() / f".build-kept-0123456789abcdef-{os.getppid()}"
    (dead / "merged/proc").mkdir(parents=True)
    live.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(dead / "merged/proc")], check=True)
    try:
        removed = _sweep_stale_builds()
        assert str(dead) in removed and not dead.exists() and not _mounts_under(dead)
        assert live.is_dir()
    finally:
        subprocess.run(["umount", str(dead / "merged/proc")], capture_output=True)
        subprocess.run(["rm", "-rf", str(dead), str(live)])
