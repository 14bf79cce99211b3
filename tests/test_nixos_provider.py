"""The ``nixos`` provider (spec §6.1/§6.2): flake resolution, nix command, runner env, port plan.

It cannot boot here (no nixpkgs), so these tests cover the command/env construction and
the failure paths that do not need Nix.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from aoe_tui.runtime.nixos import (
    NixosProvider,
    doctor_checks,
    find_vm_runner,
    mac_for,
    nix_build_command,
    plan_launches,
    qemu_net_opts,
    qemu_opts,
    read_nixos_configs,
    resolve_flake_ref,
)
from aoe_tui.runtime.provider import ProviderError, ProvisionError, TerritoryResources, TerritorySpec

ATTR = "nixosConfigurations.builder-one.config.system.build.vm"


def test_flake_ref_arena_dir_first(tmp_path: Path) -> None:
    arena = tmp_path / "arena"
    arena.mkdir()
    (arena / "flake.nix").write_text("{}")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    assert resolve_flake_ref(f".#{ATTR}", arena, cwd) == f"path:{arena.resolve()}#{ATTR}"


def test_flake_ref_cwd_fallback_legacy_form(tmp_path: Path) -> None:
    cwd = tmp_path / "repo"
    (cwd / "arenas" / "first-contact").mkdir(parents=True)
    arena = cwd / "arenas" / "first-contact"
    ref = f"./arenas/first-contact#{ATTR}"
    assert resolve_flake_ref(ref, arena, cwd) == f"path:{arena.resolve()}#{ATTR}"


def test_flake_ref_unchanged_cases(tmp_path: Path) -> None:
    assert resolve_flake_ref(f"/abs/arena#{ATTR}", tmp_path, tmp_path) == f"/abs/arena#{ATTR}"
    assert resolve_flake_ref(f"github:ducks/aoe#{ATTR}", tmp_path, tmp_path) == f"github:ducks/aoe#{ATTR}"
    assert resolve_flake_ref(f"./nowhere#{ATTR}", tmp_path, tmp_path) == f"./nowhere#{ATTR}"


def test_flake_ref_symlink_is_canonicalized(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "arena").mkdir()
    (tmp_path / "arena" / "link").symlink_to(real)
    assert resolve_flake_ref("link#x", tmp_path / "arena", tmp_path) == f"path:{real}#x"


def test_nix_build_command_is_upstreams() -> None:
    assert nix_build_command("path:/a#b") == [
        "nix", "--extra-experimental-features", "nix-command flakes",
        "build", "--no-link", "--print-out-paths", "path:/a#b",
    ]  # fmt: skip


def test_env_and_port_plan(tmp_path: Path) -> None:
    big = TerritoryResources(vcpus=2, memory_mib=1024, disk_mib=4096)
    specs = [TerritorySpec("builder-one", "a", 8080, 0), TerritorySpec("builder-two", "b", 8080, 1, resources=big),
             TerritorySpec("builder-three", "c", 9000, 2)]  # fmt: skip
    launches = plan_launches(
        [(s, f".#nixosConfigurations.{s.id}.config.system.build.vm") for s in specs],
        arena_dir=tmp_path, workdir=tmp_path / "territories", base_port=26000, multicast_port=23977, cwd=tmp_path,
    )  # fmt: skip
    two = launches[1]
    assert (two.ssh_port, two.service_port, two.mac) == (26002, 26003, "52:54:00:77:00:0b")
    assert two.cwd == tmp_path / "territories" / "builder-two" / "vm-state"
    assert two.console_log == tmp_path / "territories" / "builder-two" / "console.log"
    assert two.env == {
        "QEMU_NET_OPTS": "restrict=on,hostfwd=tcp:127.0.0.1:26002-:22,hostfwd=tcp:127.0.0.1:26003-:8080",
        "QEMU_OPTS": "-netdev socket,id=arena,mcast=230.77.0.1:23977 -device virtio-net-pci,netdev=arena,mac=52:54:00:77:00:0b"
                     " -m 1024 -smp 2",  # the class's size, after the runner's own -m/-smp (the last wins)
    }
    assert launches[0].env["QEMU_OPTS"].endswith("mac=52:54:00:77:00:0a -m 768 -smp 1")
    assert launches[2].env["QEMU_NET_OPTS"].endswith("hostfwd=tcp:127.0.0.1:26005-:9000")
    assert two.ref == f"path:{tmp_path.resolve()}#nixosConfigurations.builder-two.config.system.build.vm"
    tcg = plan_launches([(specs[0], ".#x")], arena_dir=tmp_path, workdir=tmp_path, base_port=26000,
                        multicast_port=23977, force_tcg=True)  # fmt: skip
    assert tcg[0].env["QEMU_OPTS"].endswith(" -machine accel=tcg -m 768 -smp 1")


def test_port_plan_limits(tmp_path: Path) -> None:
    with pytest.raises(ProviderError, match="does not fit"):
        plan_launches([(TerritorySpec("t", "p", index=0), "x")], arena_dir=tmp_path, workdir=tmp_path,
                      base_port=65535, multicast_port=1)  # fmt: skip
    dup = [(TerritorySpec("a", "p", index=0), "x"), (TerritorySpec("b", "p", index=0), "x")]
    with pytest.raises(ProviderError, match="duplicate host port"):
        plan_launches(dup, arena_dir=tmp_path, workdir=tmp_path, base_port=26000, multicast_port=1)


def test_helpers() -> None:
    assert mac_for(0) == "52:54:00:77:00:0a" and mac_for(245) == "52:54:00:77:00:ff"
    assert qemu_net_opts(1, 2, 3) == "restrict=on,hostfwd=tcp:127.0.0.1:1-:22,hostfwd=tcp:127.0.0.1:2-:3"
    assert qemu_opts(5, "m").startswith("-netdev socket,id=arena,mcast=230.77.0.1:5 ")


def test_find_vm_runner(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "bin").mkdir(parents=True)
    with pytest.raises(ProviderError, match="exactly one run-\\*-vm .* found none"):
        find_vm_runner(out)
    r = out / "bin" / "run-builder-one-vm"
    r.write_text("#!/bin/sh\n")
    r.chmod(0o755)
    assert find_vm_runner(out) == r
    r2 = out / "bin" / "run-other-vm"
    r2.write_text("#!/bin/sh\n")
    r2.chmod(0o755)
    with pytest.raises(ProviderError, match="found run-builder-one-vm, run-other-vm"):
        find_vm_runner(out)


def test_reads_configs_from_upstream_manifest(fixtures_dir: Path) -> None:
    arena = fixtures_dir / "upstream" / "arenas" / "first-build"
    cfg = read_nixos_configs(arena)
    assert cfg["builder-two"] == "./arenas/first-build#nixosConfigurations.builder-two.config.system.build.vm"
    prov = NixosProvider(arena, Path("/tmp/unused"), accel="native")
    plans = prov.plan([TerritorySpec("builder-one", "x", index=0), TerritorySpec("builder-two", "y", index=1)])
    assert plans[1].env["QEMU_OPTS"].endswith("mac=52:54:00:77:00:0b -m 768 -smp 1")
    with pytest.raises(ProviderError, match="no nixos_config for territory builder-nine"):
        prov.plan([TerritorySpec("builder-nine", "x")])


def test_manifest_errors(tmp_path: Path) -> None:
    with pytest.raises(ProviderError, match="arena.toml: arena manifest not found"):
        read_nixos_configs(tmp_path)
    (tmp_path / "arena.toml").write_text('[[territories]]\nid = "a"\n')
    with pytest.raises(ProviderError, match=r"arena.toml:territories\[0\]\.nixos_config: missing or blank"):
        read_nixos_configs(tmp_path)


async def test_provision_without_nix_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    prov = NixosProvider(tmp_path, tmp_path / "t", nixos_configs={"a": ".#x"})
    with pytest.raises(ProvisionError, match="nix not found in PATH"):
        await prov.provision([TerritorySpec("a", "p")])
    await prov.teardown()


async def test_provision_runs_nix_build_and_reports_its_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stand-in ``nix`` on PATH records its argv and fails like a missing nixpkgs would."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "nix"
    fake.write_text(
        '#!/bin/sh\nprintf "%s\\n" "$@" > "$(dirname "$0")/argv"\n'
        "echo \"error: unable to download 'https://api.github.com/repos/NixOS/nixpkgs/tarball/x'\" >&2\nexit 1\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    (tmp_path / "flake.nix").write_text("{}")
    prov = NixosProvider(tmp_path, tmp_path / "t", base_port=47000, nixos_configs={"a": f".#{ATTR}"})
    with pytest.raises(ProvisionError, match="a: nix build path:.*#.* failed: error: unable to download"):
        await prov.provision([TerritorySpec("a", "p")])
    argv = (bindir / "argv").read_text().splitlines()
    assert argv == ["--extra-experimental-features", "nix-command flakes", "build", "--no-link",
                    "--print-out-paths", f"path:{tmp_path.resolve()}#{ATTR}"]  # fmt: skip
    await prov.teardown()


def test_doctor_says_why_unavailable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    checks = {c.name: c for c in doctor_checks(probe_network=False)}
    assert not checks["nix"].ok and checks["nix"].detail == "not found in PATH" and "nix" in checks["nix"].fix
    assert not checks["nixpkgs"].ok
    assert checks["limits"].ok and "disk: the flake's diskSize, compared with the class" in checks["limits"].detail
    if shutil.which("nix", path=os.defpath) is None:
        assert checks["nix"].fix
