"""The territory guest image builder (``aoe_tui.runtime.image``, ``aoe image``)."""

from __future__ import annotations

import json
import os
import subprocess
import threading

import pytest

from aoe_tui.cli import main as aoe_main
from aoe_tui.runtime import image as image_mod
from aoe_tui.runtime.image import (
    GuestImage,
    ImageMissingError,
    ensure_image,
    find_image,
    image_root,
    recipe_key,
    require_image,
    safe_rmtree,
)
from aoe_tui.runtime.provider import ProviderError


def test_recipe_key_is_stable_and_sensitive():
    key = recipe_key()
    assert key == recipe_key("first-build") and len(key) == 16 and int(key, 16) >= 0
    assert recipe_key(with_opencode=True) != key
    with pytest.raises(ProviderError, match="no guest image recipe for arena 'nope'"):
        recipe_key("nope")


def test_image_root_is_user_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert image_root() == tmp_path / "aoe-tui" / "images"


def test_missing_image_names_build_command(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert find_image() is None
    with pytest.raises(ImageMissingError, match=r"build it with: aoe image build$"):
        require_image()
    assert aoe_main(["image", "path"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("aoe: error: ") and "aoe image build" in err and "\n" not in err


def test_with_opencode_is_not_available_yet(capsys):
    assert aoe_main(["image", "build", "--with", "opencode"]) == 2
    assert "not available yet" in capsys.readouterr().err


def _fake_build(calls: list[int]):
    def build(arena, key, final, progress):
        calls.append(1)
        tmp = final.with_name(final.name + ".tmp")
        for rel in ("rootfs/sbin/init", "base.qcow2", "boot/vmlinuz", "boot/initrd.img", "image.json"):
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp / rel).write_text("x")
        progress("debootstrap", 0.5)
        progress("resolving", 0.2)  # a stage estimate that goes backwards
        threading.Event().wait(0.3)  # long enough for the second caller to queue on the lock
        if final.exists():
            safe_rmtree(final)
        os.rename(tmp, final)
        progress("done", 1.0)

    return build


def test_concurrent_callers_build_once_and_reuse(monkeypatch, tmp_path):
    """Unit test of the locking/caching logic with a fake build step (the real one is below)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    calls: list[int] = []
    monkeypatch.setattr(image_mod, "_build", _fake_build(calls))
    seen: list[float] = []
    results: list[GuestImage] = []
    threads = [threading.Thread(target=lambda: results.append(ensure_image(progress=lambda _l, f: seen.append(f))))
               for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1
    assert len({r.root for r in results}) == 1
    assert seen == sorted(seen) and seen[-1] == 1.0
    ensure_image(force=True)
    assert len(calls) == 2


def test_safe_rmtree_unmounts_without_touching_the_mount_source(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root to mount")
    src = tmp_path / "precious"
    src.mkdir()
    (src / "keep.txt").write_text("keep")
    victim = tmp_path / "victim"
    (victim / "bind").mkdir(parents=True)
    (victim / "tmpfs").mkdir()
    subprocess.run(["mount", "--bind", str(src), str(victim / "bind")], check=True)
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(victim / "tmpfs")], check=True)
    safe_rmtree(victim)
    assert not victim.exists()
    assert (src / "keep.txt").read_text() == "keep"


# --------------------------------------------------------------------- the real image


def test_built_image_meets_guest_contract(guest_image: GuestImage):
    img = guest_image
    assert img.key == recipe_key() and img.root == image_root() / f"first-build-{img.key}"
    assert find_image() == img
    assert img.qcow2.read_bytes()[:4] == b"QFI\xfb"
    assert img.kernel.read_bytes()[0x202:0x206] == b"HdrS"  # bzImage setup header
    assert img.initrd.stat().st_size > 1_000_000
    r = img.rootfs
    assert os.readlink(r / "sbin" / "init").endswith("systemd")
    for tool in ("curl", "jq", "lsof", "ps", "python3", "sqlite3", "strace", "vim", "ip"):
        assert (r / "usr" / "bin" / tool).exists() or (r / "bin" / tool).exists() or (r / "usr/sbin" / tool).exists(), tool
    assert (r / "usr" / "sbin" / "sshd").exists()
    unit = (r / "etc/systemd/system/builder-app.service").read_text()
    for line in ("After=network.target", "ExecStart=/usr/bin/python3 /opt/builder/app.py",
                 "Restart=always", "RestartSec=1", "WantedBy=multi-user.target"):
        assert line in unit.splitlines()
    assert (r / "etc/systemd/system/multi-user.target.wants/builder-app.service").is_symlink()
    assert not (r / "opt/builder/app.py").exists()
    sshd = (r / "etc/ssh/sshd_config.d/aoe.conf").read_text()
    assert "PermitRootLogin yes" in sshd and "PasswordAuthentication yes" in sshd
    root_hash = next(ln for ln in (r / "etc/shadow").read_text().splitlines() if ln.startswith("root:")).split(":")[1]
    assert root_hash.startswith("!") or root_hash == "*", "no credential may be baked into the image"
    assert (r / "etc/machine-id").read_text() == ""
    meta = json.loads((img.root / "image.json").read_text())
    assert meta["key"] == img.key and meta["suite"] == "bookworm"
    assert image_mod._mounts_under(image_root()) == [], "build left a mount behind"
    assert not list(image_root().glob(".build-*")), "build left a temp folder behind"
    assert (image_root().parent / "debootstrap-debs").is_dir()


def test_cached_image_is_reused_quickly(guest_image: GuestImage, capsys):
    import time

    t0 = time.monotonic()
    assert ensure_image() == guest_image
    assert time.monotonic() - t0 < 1.0
    assert aoe_main(["image", "build"]) == 0
    assert capsys.readouterr().out.strip() == str(guest_image.root)
