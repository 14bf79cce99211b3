"""Harness shares for VM territories (issue 26): the cached read-only disk of a share folder."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from aoe_tui.runtime import sharedisk
from aoe_tui.runtime.provider import HarnessShare


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setattr("aoe_tui.runtime.image.cache_root", lambda: tmp_path / "cache")
    return tmp_path / "cache"


def test_share_disk_is_made_once_labelled_and_remade_when_the_folder_changes(tmp_path, cache):
    if shutil.which("mkfs.ext4") is None and not Path("/usr/sbin/mkfs.ext4").exists():
        pytest.skip("mkfs.ext4 missing (apt-get install e2fsprogs)")
    folder = tmp_path / "harness"
    folder.mkdir()
    (folder / "tool").write_text("v1\n")
    img = sharedisk.share_disk(folder)
    label = sharedisk.share_label(folder)
    assert img == cache / "harness-disks" / f"{label}.img" and len(label) <= 16
    made = img.stat().st_mtime_ns
    assert sharedisk.share_disk(folder) == img and img.stat().st_mtime_ns == made  # cached, not remade
    # the image is ext4 with the label and holds the file (debugfs reads it without mounting)
    blkid = subprocess.run(["blkid", "-o", "value", "-s", "LABEL", str(img)], capture_output=True, text=True)
    assert blkid.stdout.strip() == label
    cat = subprocess.run(["debugfs", "-R", "cat /tool", str(img)], capture_output=True, text=True)
    assert cat.stdout == "v1\n"
    (folder / "tool").write_text("v2 longer\n")  # a changed folder gets its own disk
    assert sharedisk.share_label(folder) != label and sharedisk.share_disk(folder) != img
    share = HarnessShare(folder, "/opt/aoe-harness/x")
    assert sharedisk.drive_args([share]) == ["-drive", f"file={sharedisk.share_disk(folder)},if=virtio,format=raw,readonly=on"]
    assert sharedisk.mount_command([share]) == (
        f"mkdir -p /opt/aoe-harness/x && (mountpoint -q /opt/aoe-harness/x || "
        f"mount -o ro LABEL={sharedisk.share_label(folder)} /opt/aoe-harness/x)")


def _need_mkfs() -> None:
    if shutil.which("mkfs.ext4") is None and not Path("/usr/sbin/mkfs.ext4").exists():
        pytest.skip("mkfs.ext4 missing (apt-get install e2fsprogs)")


def test_a_failed_or_timed_out_mkfs_is_one_providererror_and_leaves_no_part_file(tmp_path, cache, monkeypatch):
    from aoe_tui.runtime.provider import ProviderError

    _need_mkfs()
    folder = tmp_path / "harness"
    folder.mkdir()
    (folder / "tool").write_text("v1\n")

    def times_out(argv, *a, **kw):
        Path(argv[-2]).write_bytes(b"half an image")  # mkfs had begun writing the .part file
        raise subprocess.TimeoutExpired(argv, kw.get("timeout", 300))

    monkeypatch.setattr(sharedisk.subprocess, "run", times_out)
    with pytest.raises(ProviderError) as info:
        sharedisk.share_disk(folder)
    assert "\n" not in str(info.value) and "timed out" in str(info.value)
    assert not list((cache / "harness-disks").glob("*.part")) and not list((cache / "harness-disks").glob("*.img"))

    def not_there(argv, *a, **kw):
        raise FileNotFoundError(2, "No such file or directory", argv[0])

    monkeypatch.setattr(sharedisk.subprocess, "run", not_there)
    with pytest.raises(ProviderError):
        sharedisk.share_disk(folder)
    assert not list((cache / "harness-disks").glob("*.part"))


def test_three_guests_asking_at_once_run_one_mkfs(tmp_path, cache, monkeypatch):
    import threading
    import time

    _need_mkfs()
    folder = tmp_path / "harness"
    folder.mkdir()
    (folder / "tool").write_text("v1\n")
    real = subprocess.run
    calls: list[list[str]] = []

    def slow_run(argv, *a, **kw):
        calls.append(argv)
        time.sleep(0.3)  # a big folder: the others ask meanwhile
        return real(argv, *a, **kw)

    monkeypatch.setattr(sharedisk.subprocess, "run", slow_run)
    got: list[Path] = []
    threads = [threading.Thread(target=lambda: got.append(sharedisk.share_disk(folder))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 3 and len(set(got)) == 1 and got[0].is_file()
    assert len(calls) == 1, calls
    assert not list((cache / "harness-disks").glob("*.part"))
