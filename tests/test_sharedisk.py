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
