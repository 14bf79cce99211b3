"""The ``qemu`` territory provider: command line, acceleration, port blocks, errors, and one real boot.

The real-boot test (marker ``qemu``) boots ONE guest under whatever acceleration works
here (TCG on ``kvm_pvm`` hosts: about 1 min to boot, 1 min to reboot), logs in as root,
writes a file under /var/lib, reboots through ``provider.reboot()`` and finds the file.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from aoe_tui.runtime import qemu
from aoe_tui.runtime.netalloc import NetAllocator
from aoe_tui.runtime.provider import (
    HarnessShare,
    ProviderError,
    ProvisionError,
    TerritoryRefusedError,
    TerritoryResources,
    TerritorySpec,
)
from aoe_tui.runtime.qemu import (
    QemuProvider,
    accel_args,
    build_qemu_command,
    cleanup_stale,
    kvm_status,
    port_plan,
    reserve_ports,
)

# ----------------------------------------------------------------------------- acceleration


def test_kvm_pvm_means_tcg(tmp_path: Path) -> None:
    dev = tmp_path / "kvm"
    dev.write_text("")
    ok, detail = kvm_status(dev=dev, modules={"kvm", "kvm_pvm"}, cpu_flags={"hypervisor", "vmx"})
    assert not ok and "kvm_pvm" in detail
    ok, detail = kvm_status(dev=dev, modules={"kvm", "kvm_amd"}, cpu_flags={"hypervisor"})
    assert not ok and "svm/vmx" in detail
    ok, _ = kvm_status(dev=dev, modules={"kvm", "kvm_intel"}, cpu_flags={"vmx"})
    assert ok
    ok, detail = kvm_status(dev=tmp_path / "absent", modules=set(), cpu_flags={"vmx"})
    assert not ok and "absent" in detail


def test_accel_choice() -> None:
    assert accel_args("auto", kvm=(False, "pvm")) == (["-accel", "tcg", "-cpu", "max"], "tcg")
    assert accel_args("auto", kvm=(True, "ok"))[1] == "kvm"
    with pytest.raises(ProviderError, match="accel 'kvm' requested but pvm"):
        accel_args("kvm", kvm=(False, "pvm"))
    with pytest.raises(ProviderError, match="unknown accel"):
        accel_args("hvf", kvm=(False, "x"))


def test_this_host_detection_matches_kernel_modules() -> None:
    """On this machine family KVM is kvm_pvm: auto must pick TCG (``docs/territories.md`` pitfall 1)."""
    mods = Path("/proc/modules")
    pvm = Path("/sys/module/kvm_pvm").exists() or (mods.exists() and "kvm_pvm" in mods.read_text(errors="ignore"))
    if not pvm:
        pytest.skip("not a kvm_pvm host")
    assert accel_args("auto")[1] == "tcg"


# ----------------------------------------------------------------------------- command line


def _cmd(**kw) -> list[str]:
    base = dict(
        name="builder-one",
        kernel=Path("/img/boot/vmlinuz"),
        initrd=Path("/img/boot/initrd.img"),
        disk=Path("/w/builder-one/disk/overlay.qcow2"),
        ssh_port=26000,
        service_port=26001,
        console_log=Path("/w/builder-one/console.log"),
        monitor_socket=Path("/w/builder-one/disk/monitor.sock"),
    )
    base.update(kw)
    return build_qemu_command(**base)


def test_command_line_shape() -> None:
    cmd = _cmd(identity_dir=Path("/w/builder-one/disk"))
    joined = " ".join(cmd)
    assert cmd[0] == "qemu-system-x86_64"
    for flag in ("-nodefaults", "-nographic", "-no-reboot"):
        assert flag in cmd
    assert cmd[cmd.index("-accel") + 1] == "tcg" and cmd[cmd.index("-cpu") + 1] == "max"
    assert cmd[cmd.index("-m") + 1] == "768" and cmd[cmd.index("-smp") + 1] == "1"
    net = cmd[cmd.index("-netdev") + 1]
    assert net == "user,id=mgmt,restrict=on,hostfwd=tcp:127.0.0.1:26000-:22,hostfwd=tcp:127.0.0.1:26001-:8080"
    assert "file,id=console,path=/w/builder-one/console.log,append=on" in cmd
    assert "unix:/w/builder-one/disk/monitor.sock,server=on,wait=off" in cmd
    assert "name=opt/aoe/hostname,file=/w/builder-one/disk/hostname" in cmd
    assert "name=opt/aoe/root_password,file=/w/builder-one/disk/root_password" in cmd
    assert "root_password=" not in cmd[cmd.index("-append") + 1]
    assert "aoe.hostname" not in joined  # identity travels by fw_cfg only


def test_command_line_escapes_commas_in_paths() -> None:
    """Issue #30: ``--output …/match,1`` made QEMU read ``1/territories/…`` as an option of
    its own. Inside an option list a path's commas are doubled; the path is otherwise as is."""
    w = Path("/w/match,1/a b:c'\"\u00e9/builder-one")
    cmd = _cmd(disk=w / "disk/overlay.qcow2", console_log=w / "console.log", monitor_socket=w / "disk/monitor.sock",
               identity_dir=w / "disk")
    assert f"file=/w/match,,1/a b:c'\"\u00e9/builder-one/disk/overlay.qcow2,if=virtio,format=qcow2" in cmd
    assert "file,id=console,path=/w/match,,1/a b:c'\"\u00e9/builder-one/console.log,append=on" in cmd
    assert "unix:/w/match,,1/a b:c'\"\u00e9/builder-one/disk/monitor.sock,server=on,wait=off" in cmd
    assert "name=opt/aoe/root_password,file=/w/match,,1/a b:c'\"\u00e9/builder-one/disk/root_password" in cmd


def test_command_line_takes_the_class_size() -> None:
    cmd = _cmd(cpus=2, memory_mib=1536)
    assert cmd[cmd.index("-m") + 1] == "1536" and cmd[cmd.index("-smp") + 1] == "2"
    assert cmd.count("-m") == 1 and cmd.count("-smp") == 1


def test_command_line_legacy_identity_on_append() -> None:
    cmd = _cmd(password_on_cmdline="s3cret", guest_service_port=9090)
    append = cmd[cmd.index("-append") + 1]
    assert "aoe.hostname=builder-one" in append and "aoe.root_password=s3cret" in append
    assert "-fw_cfg" not in cmd
    assert cmd[cmd.index("-netdev") + 1].endswith("hostfwd=tcp:127.0.0.1:26001-:9090")


# ----------------------------------------------------------------------------- ports


def test_port_plan_is_spec_6_2() -> None:
    plan = port_plan(26000, 3)
    assert [(p.ssh_port, p.service_port) for p in plan] == [(26000, 26001), (26002, 26003), (26004, 26005)]
    with pytest.raises(ProviderError, match="outside 1024-65535"):
        port_plan(65534, 3)
    with pytest.raises(ProviderError, match="at most 240"):
        port_plan(2000, 241)


def _listen(port: int) -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", port))
    s.listen()
    return s


def _free_base(width: int = 6) -> int:
    for base in range(41000, 50000, 10):
        if not any(qemu.port_in_use(p) for p in range(base, base + width)):
            return base
    raise RuntimeError("no free ports")


def test_explicit_port_taken_is_a_clear_error(tmp_path: Path) -> None:
    base = _free_base()
    with _listen(base + 3):
        with pytest.raises(ProviderError, match=rf"127\.0\.0\.1:{base + 3} is already in use"):
            reserve_ports(NetAllocator(tmp_path), "heat-a", 3, base)


def test_auto_blocks_never_collide(tmp_path: Path) -> None:
    alloc = NetAllocator(tmp_path)
    a = reserve_ports(alloc, "heat-a", 3, None)
    b = reserve_ports(alloc, "heat-b", 3, None)
    assert set(range(a, a + 6)).isdisjoint(range(b, b + 6))
    with pytest.raises(ProviderError, match="held by another running heat"):
        reserve_ports(alloc, "heat-c", 3, a)
    alloc.release("heat-a")
    assert reserve_ports(alloc, "heat-c", 3, a) == a


async def test_provision_with_taken_port_fails_clearly(tmp_path: Path, guest_image) -> None:
    base = _free_base()
    with _listen(base):
        prov = QemuProvider(tmp_path / "t", image=guest_image, base_port=base, allocator=NetAllocator(tmp_path / "reg"))
        with pytest.raises(ProvisionError, match=rf"127\.0\.0\.1:{base} is already in use"):
            await prov.provision([TerritorySpec("builder-one", "pw-one")])
        await prov.teardown()


# ----------------------------------------------------------------------------- bad input


async def test_qemu_missing_from_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    prov = QemuProvider(tmp_path / "t", allocator=NetAllocator(tmp_path / "reg"))
    with pytest.raises(ProvisionError, match="qemu-system-x86_64 not found in PATH; install it with ./setup.sh"):
        await prov.provision([TerritorySpec("builder-one", "pw")])
    await prov.teardown()


async def test_missing_image_names_the_build_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import aoe_tui.runtime.image as image_mod

    monkeypatch.setattr(image_mod, "image_root", lambda: tmp_path / "no-images")
    prov = QemuProvider(tmp_path / "t", allocator=NetAllocator(tmp_path / "reg"))
    with pytest.raises(ProvisionError, match="aoe image build"):
        await prov.provision([TerritorySpec("builder-one", "pw")])
    await prov.teardown()
    assert not list((tmp_path / "t").glob("*/disk"))


async def test_qemu_that_cannot_boot_is_reported_and_cleaned(tmp_path: Path, guest_image, monkeypatch) -> None:
    """A kernel QEMU refuses makes every launch fail fast: a one-line error, nothing left."""
    import dataclasses

    bad = dataclasses.replace(guest_image, kernel=tmp_path / "not-a-kernel")
    (tmp_path / "not-a-kernel").write_text("garbage")
    prov = QemuProvider(tmp_path / "t", image=bad, ready_timeout_s=60, allocator=NetAllocator(tmp_path / "reg"))
    t0 = time.monotonic()
    with pytest.raises(ProvisionError, match="builder-one: qemu exited with status"):
        await prov.provision([TerritorySpec("builder-one", "pw")])
    assert time.monotonic() - t0 < 45
    assert not (tmp_path / "t" / "builder-one" / "disk").exists()
    assert not (tmp_path / "t" / "builder-one" / "state.json").exists()


# ----------------------------------------------------------------------------- class resources


#: A stand-in qemu-system-x86_64: records its argv (``argv-<name>``) and the virtual size of
#: its overlay (``disk-<name>.json``, by the real qemu-img), then fails like a bad kernel.
FAKE_QEMU = r"""#!/bin/sh
d="$(dirname "$0")"
printf '%s\n' "$@" > "$d/argv-$2"
for a in "$@"; do
  case "$a" in file=*overlay.qcow2,*) f="${a#file=}"; qemu-img info --output=json "${f%%,*}" > "$d/disk-$2.json";; esac
done
exit 1
"""


def _fake_qemu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bindir = tmp_path / "fakebin"
    bindir.mkdir()
    (bindir / "qemu-system-x86_64").write_text(FAKE_QEMU)
    (bindir / "qemu-system-x86_64").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    return bindir


def _small_image(tmp_path: Path, guest_image, mib: int = 64):
    import dataclasses

    disk = tmp_path / "small.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(disk), f"{mib}M"], check=True)
    return dataclasses.replace(guest_image, qcow2=disk)


def _arg(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


async def test_guests_take_their_class(tmp_path: Path, guest_image, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each VM gets its seat's class: -smp vcpus, -m memory_mib, an overlay of disk_mib (larger
    than the image: grown; smaller: the image's size and a note); limits() says so. QEMU is a
    stand-in that records its command line and fails, so nothing boots."""
    bindir = _fake_qemu(tmp_path, monkeypatch)
    image = _small_image(tmp_path, guest_image, 64)
    assert qemu.qcow2_virtual_size(image.qcow2) == 64 * 2**20
    specs = [
        TerritorySpec("builder-one", "pw-1", index=0, resources=TerritoryResources(vcpus=2, memory_mib=1024, disk_mib=96)),
        TerritorySpec("builder-two", "pw-2", index=1, resources=TerritoryResources(vcpus=1, memory_mib=768, disk_mib=32)),
    ]
    prov = QemuProvider(tmp_path / "t", image=image, ready_timeout_s=60, allocator=NetAllocator(tmp_path / "reg"))
    with pytest.raises(ProvisionError, match="qemu exited with status 1"):
        await prov.provision(specs)
    one = (bindir / "argv-builder-one").read_text().splitlines()
    two = (bindir / "argv-builder-two").read_text().splitlines()
    assert (_arg(one, "-smp"), _arg(one, "-m")) == ("2", "1024")
    assert (_arg(two, "-smp"), _arg(two, "-m")) == ("1", "768")
    assert json.loads((bindir / "disk-builder-one.json").read_text())["virtual-size"] == 96 * 2**20
    assert json.loads((bindir / "disk-builder-two.json").read_text())["virtual-size"] == 64 * 2**20
    assert prov.notes == ["qemu: the class of builder-two asks 32 MiB of disk; a qemu guest's disk cannot be "
                          "smaller than the guest image's 64 MiB, so it gets 64 MiB"]
    assert prov.limits("builder-one") == {
        "vcpus": 2, "memory_mib": 1024, "disk_mib": 96, "enforced": ["cpu", "memory", "disk"],
        "not_enforced": {"tasks": "the guest kernel's own (no limit set by the provider)"},
    }
    assert prov.limits("builder-two")["disk_mib"] == 64 and prov.limits("nobody") == {}
    # the [provider] memory_mib override: every guest, and a note naming the seats it overrides
    over = QemuProvider(tmp_path / "t2", image=image, memory_mib=512, ready_timeout_s=60,
                        allocator=NetAllocator(tmp_path / "reg"))
    with pytest.raises(ProvisionError):
        await over.provision(specs[:1])
    assert _arg((bindir / "argv-builder-one").read_text().splitlines(), "-m") == "512"
    assert over.notes == ["qemu: [provider] memory_mib = 512 overrides the class memory (1024 MiB) of builder-one"]
    assert over.limits("builder-one")["memory_mib"] == 512


def test_console_watch_reads_new_bytes_and_finds_the_oom_line(tmp_path: Path) -> None:
    """The guest kernel's OOM killer line on the serial console is the seat's out of memory;
    the watch reads only what was added, finds a line split across two reads, and stays set."""
    console = tmp_path / "console.log"
    watch = qemu.ConsoleWatch(console)
    assert not watch.seen()  # no console yet
    console.write_bytes(b"b1 login: \r\n[  812.1] python3 invoked oom-killer: gfp_mask=0x140cca\r\n")
    assert not watch.seen() and watch.offset == console.stat().st_size
    with console.open("ab") as f:
        f.write(b"[  812.5] Out of memory: Ki")
    assert not watch.seen()
    with console.open("ab") as f:
        f.write(b"lled process 4242 (python3) total-vm:1058000kB\r\n")
    assert watch.seen() and watch.seen()
    fresh = qemu.ConsoleWatch(console)
    assert fresh.seen()
    console.write_bytes(b"rebooted\r\n")
    again = qemu.ConsoleWatch(console)
    assert not again.seen()
    console.write_bytes(b"x")  # truncated below the last offset: read from the start again
    assert not again.seen() and again.offset == 1
    console.write_bytes(b"xOut of memory: Killed process 7 (a)\r\n")
    assert again.seen()
    assert qemu.oom_phrase(768) == "out of memory in the territory (768 MiB)"


async def test_exhaustion_names_the_guest_memory(tmp_path: Path, guest_image, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_qemu(tmp_path, monkeypatch)
    prov = QemuProvider(tmp_path / "t", image=_small_image(tmp_path, guest_image), ready_timeout_s=60,
                        allocator=NetAllocator(tmp_path / "reg"))
    spec = TerritorySpec("builder-one", "pw", resources=TerritoryResources(memory_mib=640))
    with pytest.raises(ProvisionError):
        await prov.provision([spec])
    assert prov.exhaustion("builder-one") == [] and prov.exhaustion("nobody") == []
    with (tmp_path / "t" / "builder-one" / "console.log").open("ab") as f:
        f.write(b"[ 99.1] Out of memory: Killed process 812 (hog) total-vm:900000kB\r\n")
    assert prov.exhaustion("builder-one") == ["out of memory in the territory (640 MiB)"]


def test_cleanup_stale_kills_leftover_qemu(tmp_path: Path) -> None:
    """A runner that died leaves state.json + a live QEMU: cleanup_stale kills it and removes the overlay."""
    tdir = tmp_path / "builder-two"
    disk = tdir / "disk"
    disk.mkdir(parents=True)
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(disk / "overlay.qcow2"), "16M"], check=True)
    proc = subprocess.Popen(
        ["qemu-system-x86_64", "-machine", "none", "-nodefaults", "-display", "none", "-S",
         "-drive", f"file={disk / 'overlay.qcow2'},if=none,format=qcow2"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        time.sleep(0.5)
        assert proc.poll() is None
        (tdir / "state.json").write_text(json.dumps({"pid": proc.pid, "disk_dir": str(disk)}))
        assert cleanup_stale(tmp_path) == ["builder-two"]
        assert proc.wait(timeout=10) is not None
        assert not disk.exists() and not (tdir / "state.json").exists()
        assert cleanup_stale(tmp_path) == []
    finally:
        if proc.poll() is None:
            proc.kill()


def test_doctor_checks_report_accel_and_tools() -> None:
    checks = {c.name: c for c in qemu.doctor_checks()}
    assert set(checks) == {"qemu-system-x86_64", "qemu-img", "acceleration", "guest image", "limits"}
    assert checks["limits"].ok and checks["limits"].detail.startswith("enforced from each seat's class: cpu (-smp")
    assert checks["qemu-system-x86_64"].ok == (shutil.which("qemu-system-x86_64") is not None)
    assert checks["acceleration"].detail.startswith(("kvm:", "tcg:"))


def test_boot_sign_reads_only_the_current_launch(tmp_path: Path) -> None:
    """The host-side boot evidence is the current launch's serial console: a login prompt (or the
    emergency shell) written after ``console_mark``; the previous launch's prompt does not count."""
    from aoe_tui.runtime.qemu import _Guest

    g = _Guest(spec=TerritorySpec("b1", "pw"), dir=tmp_path, disk_dir=tmp_path / "disk", ports=port_plan(26000, 1)[0])
    assert QemuProvider._boot_sign(g) == ""  # no console.log yet
    console = tmp_path / "console.log"
    console.write_bytes(b"SeaBIOS\r\nDebian GNU/Linux 12 b1 ttyS0\r\n\r\nb1 login: ")
    g.launches = 1
    assert QemuProvider._boot_sign(g) == "its console showed the login prompt (launch 1)"
    g.console_mark, g.launches = console.stat().st_size, 2  # relaunched: the old prompt is history
    with console.open("ab") as f:
        f.write(b"SeaBIOS (version 1.16.2)\r\nBooting from ROM...\r\n")
    assert QemuProvider._boot_sign(g) == ""
    with console.open("ab") as f:
        f.write(b"You are in emergency mode. After logging in, type \"journalctl -xb\"\r\n")
    assert QemuProvider._boot_sign(g) == "its console showed 'emergency mode' (launch 2)"


# ----------------------------------------------------------------------------- one real guest


def _our_qemu_pids(marker: str) -> list[int]:
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                argv = (d / "cmdline").read_bytes()
            except OSError:
                continue
            if b"qemu-system" in argv and marker.encode() in argv:
                pids.append(int(d.name))
    return pids


#: a folder name with every character that has broken a provider's command line (issue #30)
ODD_NAME = "a b,c:d'\"\u00e9"


#: ``refused_after_s`` of the sshd-masked reboot (s): sshd never answers there, so any wait gives
#: the same decision; the default (45 s) would only make the test wait 35 s longer.
MASKED_REFUSED_AFTER_S = 10.0


@pytest.mark.qemu
async def test_boot_login_reboot_persists(tmp_path: Path, guest_image) -> None:
    """ONE guest: boot (TCG here), root login, write /var/lib file, provider.reboot(), file is still there;
    then the player's lockouts are the player's (TerritoryRefusedError), decided quickly: sshd refusing
    root before the reboot (at once), sshd masked at the next boot (``refused_after_s`` after the console's
    login prompt, not at reboot_timeout_s). The honest reboot runs with the default ``refused_after_s``
    (REFUSED_AFTER_S, 45 s: a working sshd must not be blamed); the masked one with MASKED_REFUSED_AFTER_S
    (the decision is the same, the test waits less: sshd never answers, whatever the wait)."""
    password = "qemu-test-Pw-7781"
    # issue #30 item 3: an output folder with the characters QEMU's option lists and nspawn's
    # --bind treat as separators, and quotes, a space and non-ASCII; so is the harness share's
    odd = tmp_path / ODD_NAME
    workdir = odd / "territories"
    prov = QemuProvider(workdir, image=guest_image, ready_timeout_s=400, reboot_timeout_s=400)
    # the seat's class (not the defaults): 2 vCPUs, 640 MiB, and a disk larger than the image's
    # 2048 MiB, so the overlay and the guest's ext4 are grown before the territory is ready
    res = TerritoryResources(vcpus=2, memory_mib=640, disk_mib=2560)
    try:
        share = odd / "harness"  # a harness share (issue 26): a cached read-only disk in a VM
        share.mkdir(parents=True)
        (share / "tool").write_text("harness-content\n")
        shares = (HarnessShare(share, "/opt/aoe-harness/test"),)
        t0 = time.monotonic()
        [t] = await prov.provision([TerritorySpec("builder-one", password, resources=res, shares=shares)])
        boot_s = time.monotonic() - t0
        share_check = ("cat /opt/aoe-harness/test/tool; touch /opt/aoe-harness/test/tool 2>&1; "
                       "touch /opt/aoe-harness/test/new 2>&1; echo rc=$?")
        async with prov.ssh(t) as conn:
            r = await conn.run(share_check, check=False)
        assert str(r.stdout).startswith("harness-content\n") and "Read-only file system" in str(r.stdout), r.stdout
        assert "rc=0" not in str(r.stdout)
        assert t.host == "127.0.0.1" and t.service_port == t.ssh_port + 1
        assert t.credential_file.stat().st_mode & 0o777 == 0o600
        assert f"AOE_SSH_PORT={t.ssh_port}" in t.credential_file.read_text()
        state = json.loads((workdir / "builder-one" / "state.json").read_text())
        assert state["pid"] == t.extra["pid"] and state["ssh_port"] == t.ssh_port
        # the root password is not in any process's argv
        ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
        assert password not in ps
        async with prov.ssh(t) as conn:
            r = await conn.run("hostname; echo persisted-$RANDOM > /var/lib/aoe-persist; cat /var/lib/aoe-persist; "
                               "systemctl is-active builder-app.service; cat /proc/sys/kernel/random/boot_id", check=False)
        hostname, token, _app, boot_id = str(r.stdout).split("\n")[:4]
        assert hostname == "builder-one" and token.startswith("persisted-")
        # the class inside the guest: nproc, MemTotal (the kernel keeps some), the size of /
        async with prov.ssh(t) as conn:
            r = await conn.run("nproc; sed -n 's/^MemTotal: *\\([0-9]*\\) kB/\\1/p' /proc/meminfo; "
                               "df -Pm / | tail -n 1", check=True)
        nproc, memtotal_kib, df_line = str(r.stdout).split("\n")[:3]
        memtotal_mib, root_mib = int(memtotal_kib) / 1024, int(df_line.split()[1])
        assert int(nproc) == res.vcpus
        assert 0.85 * res.memory_mib <= memtotal_mib <= res.memory_mib, memtotal_mib
        assert 2048 < root_mib <= res.disk_mib and root_mib >= 0.9 * res.disk_mib, df_line  # grown past the image
        assert prov.limits("builder-one") == {
            "vcpus": 2, "memory_mib": 640, "disk_mib": 2560, "enforced": ["cpu", "memory", "disk"],
            "not_enforced": {"tasks": "the guest kernel's own (no limit set by the provider)"},
        }
        assert prov.notes == [] and prov.exhaustion("builder-one") == []
        # a hog runs the guest out of memory: its kernel's OOM killer ends it, the console shows it,
        # and the provider reports the seat's own limit
        async with prov.ssh(t) as conn:
            r = await conn.run("python3 -c 'b = []\nwhile True: b.append(bytearray(16 << 20))'", check=False)
        assert r.exit_status != 0
        for _ in range(60):
            if prov.exhaustion("builder-one"):
                break
            await asyncio.sleep(0.5)
        assert prov.exhaustion("builder-one") == ["out of memory in the territory (640 MiB)"]
        # no route out: restrict=on
        async with prov.ssh(t) as conn:
            r = await conn.run("curl -s --max-time 5 http://10.0.2.2:1/ >/dev/null; echo rc=$?", check=False)
        assert "rc=0" not in str(r.stdout)
        old_pid = t.extra["pid"]
        assert prov.refused_after_s == qemu.REFUSED_AFTER_S == 45.0  # the honest reboot: the default
        t1 = time.monotonic()
        await prov.reboot(t)
        reboot_s = time.monotonic() - t1
        async with prov.ssh(t) as conn:
            r = await conn.run("cat /var/lib/aoe-persist; cat /proc/sys/kernel/random/boot_id; df -Pm / | tail -n 1",
                               check=False)
        token2, boot_id2, df_line2 = str(r.stdout).split("\n")[:3]
        assert token2 == token, "file under /var/lib did not survive the reboot"
        assert int(df_line2.split()[1]) == root_mib, "the grown root did not survive the reboot"
        async with prov.ssh(t) as conn:  # mounted again after the reboot, still read-only
            r = await conn.run(share_check, check=False)
        assert str(r.stdout).startswith("harness-content\n") and "Read-only file system" in str(r.stdout), r.stdout
        assert boot_id2 != boot_id, "the guest did not really reboot"
        assert t.extra["pid"] != old_pid  # -no-reboot + relaunch
        # The player changes root's password in the running guest: the referee cannot even ask
        # for the reboot; that is the player's lockout, decided at once (no reboot, no wait).
        from aoe_tui.runtime.ssh import run

        other = password + "-changed"
        async with prov.ssh(t) as conn:
            r = await conn.run("chpasswd", input=f"root:{other}\n", check=False)
        assert r.exit_status == 0, r.stderr
        t2 = time.monotonic()
        with pytest.raises(TerritoryRefusedError, match="builder-one refused the referee before the reboot: "
                           "the SSH server .* refused the root password login"):
            await prov.reboot(t)
        locked_s = time.monotonic() - t2
        assert locked_s < 30 and t.extra["pid"] == prov._guests["builder-one"].proc.pid  # no reboot happened
        r2 = await run(t.host, t.ssh_port, other, "chpasswd", input=f"root:{password}\n", connect_timeout_s=15)
        assert r2.exit_status == 0, r2.stderr
        # The player masks sshd for the next boot: after the referee's reboot nothing answers
        # on port 22 (the forward accepts and closes, as while the guest is down), but the
        # serial console shows the guest booted: the player's lockout, decided refused_after_s
        # after the boot sign, not at reboot_timeout_s (the provider's setting, lowered here).
        prov.refused_after_s = MASKED_REFUSED_AFTER_S
        async with prov.ssh(t) as conn:
            r = await conn.run("systemctl mask ssh.service", check=False)
        assert r.exit_status == 0, r.stderr
        t3 = time.monotonic()
        with pytest.raises(TerritoryRefusedError, match=r"builder-one refused the referee after the reboot: "
                           rf"nothing answers SSH on port {t.ssh_port} {MASKED_REFUSED_AFTER_S:.0f} s after "
                           r"its console showed the login prompt \(launch 3\)"):
            await prov.reboot(t)
        refused_s = time.monotonic() - t3
        assert MASKED_REFUSED_AFTER_S < refused_s < reboot_s * 1.5 + MASKED_REFUSED_AFTER_S + 30 < prov.reboot_timeout_s
        print(f"qemu ({prov.chosen_accel}): class {res}: nproc {nproc}, MemTotal {memtotal_mib:.0f} MiB, "
              f"/ {root_mib} MiB ({df_line.split()[3]} MiB free)")
        print(f"qemu ({prov.chosen_accel}): ssh-ready {boot_s:.1f} s, reboot {reboot_s:.1f} s, "
              f"lockout before reboot decided in {locked_s:.1f} s, sshd masked decided in {refused_s:.1f} s")
    finally:
        await prov.teardown()
    assert _our_qemu_pids(str(workdir)) == []
    assert not (workdir / "builder-one" / "disk").exists()
    assert not (workdir / "builder-one" / "state.json").exists()
    assert not (workdir / "builder-one" / "credential.env").exists()
    assert (workdir / "builder-one" / "console.log").exists()
    assert password not in (workdir / "builder-one" / "console.log").read_text(errors="replace")
    await prov.teardown()  # idempotent
    assert os.path.isdir(workdir)
