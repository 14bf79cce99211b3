"""What a player changed that the referee depends on, against the image (issue #30 item 10):
the referee's binaries, shell hooks and sshd settings, each named with how it differs.
Real files in a territory-shaped root over an image-shaped tree; no container."""

from __future__ import annotations

import os
from pathlib import Path

from aoe_tui.runtime.container import referee_tampering
from aoe_tui.runtime.tamper import Tampering, config_tampering, describe


def _tree(tmp_path: Path) -> tuple[Path, Path]:
    image, root = tmp_path / "image", tmp_path / "root"
    for base in (image, root):
        (base / "usr/bin").mkdir(parents=True)
        (base / "etc/ssh/sshd_config.d").mkdir(parents=True)
        (base / "etc/profile.d").mkdir(parents=True)
        (base / "usr/bin/systemctl").write_bytes(b"\x7fELF systemctl " * 10)
        (base / "usr/bin/env").write_bytes(b"\x7fELF env")
        (base / "usr/bin/cat").write_bytes(b"\x7fELF cat")
        (base / "etc/ssh/sshd_config.d/aoe.conf").write_text("PermitRootLogin yes\nPasswordAuthentication yes\n")
        (base / "etc/profile").write_text("PATH=/usr/bin\n")
        (base / "etc/profile.d/locale.sh").write_text("export LANG=C.UTF-8\n")
    return image, root


def test_untouched_territory_has_nothing(tmp_path: Path) -> None:
    image, root = _tree(tmp_path)
    assert referee_tampering(root, [image]) == []
    assert config_tampering(root, [image]) == []


def test_replaced_and_redirected_binaries_say_how(tmp_path: Path) -> None:
    image, root = _tree(tmp_path)
    (root / "usr/bin/systemctl").write_text("#!/bin/sh\nexit 0\n")
    (root / "usr/bin/env").unlink()
    (tmp_path / "elsewhere").write_bytes(b"\x7fELF env")
    (root / "usr/bin/env").symlink_to(tmp_path / "elsewhere")
    (root / "usr/bin/cat").unlink()
    found = referee_tampering(root, [image])
    assert [f.path for f in found] == ["/usr/bin/env", "/usr/bin/systemctl", "/usr/bin/cat"]
    assert found[0].how == f"a symlink to {tmp_path / 'elsewhere'}, outside the territory"
    assert found[1].how.startswith("not the image's copy: 17 bytes, sha256 ")
    assert "(the image's: 150 bytes, sha256 " in found[1].how
    assert found[2].how == "removed (the image has it)"


def test_edited_sshd_setting_and_shell_hook_name_the_lines(tmp_path: Path) -> None:
    image, root = _tree(tmp_path)
    conf = root / "etc/ssh/sshd_config.d/aoe.conf"
    conf.write_text(conf.read_text().replace("PermitRootLogin yes", "PermitRootLogin no"))
    (root / "etc/profile.d/zz-player.sh").write_text("# mine\nalias systemctl=true\n")
    (root / "etc/profile.d/locale.sh").unlink()
    (root / "root").mkdir()
    (root / "root/.bashrc").write_text("trap 'kill -9 $$' DEBUG\n")
    found = config_tampering(root, [image])
    assert found == [
        Tampering("/etc/profile.d/locale.sh", "removed (the image has it)"),
        Tampering("/etc/profile.d/zz-player.sh", "added (not in the image): 'alias systemctl=true'"),
        Tampering("/root/.bashrc", "added (not in the image): \"trap 'kill -9 $$' DEBUG\""),
        Tampering("/etc/ssh/sshd_config.d/aoe.conf",
                  "line 'PermitRootLogin no' added, line 'PermitRootLogin yes' removed"),
    ]
    assert describe(found[-1:]) == ("/etc/ssh/sshd_config.d/aoe.conf: line 'PermitRootLogin no' added, "
                                    "line 'PermitRootLogin yes' removed")


def test_upper_layer_wins_and_control_characters_are_escaped(tmp_path: Path) -> None:
    image, root = _tree(tmp_path)
    layer = tmp_path / "layer"
    (layer / "etc").mkdir(parents=True)
    (layer / "etc/profile").write_text("PATH=/usr/local/bin:/usr/bin\n")
    (root / "etc/profile").write_text("PATH=/usr/local/bin:/usr/bin\n")  # the arena layer's: not a change
    assert config_tampering(root, [layer, image]) == []
    (root / "etc/profile").write_text("PATH=/usr/local/bin:/usr/bin\nprintf '\x1b[2J'\n")
    (found,) = config_tampering(root, [layer, image])
    assert found.how == "line \"printf '\\\\x1b[2J'\" added" and "\x1b" not in found.how
