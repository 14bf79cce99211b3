"""The ``ssh`` territory provider: inventory parsing/errors, and real logins against a real guest.

The real target is a territory from the ``container`` provider (a booted systemd guest
with sshd; under a second to start), used as an "existing host" the ssh provider knows
only through an inventory TOML.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from aoe_tui.runtime.provider import ProvisionError, TerritorySpec
from aoe_tui.runtime.sshhosts import InventoryError, SshHostsProvider, doctor_checks, load_inventory

# ----------------------------------------------------------------------------- inventory


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_inventory_parses_both_forms(tmp_path: Path) -> None:
    inv = load_inventory(
        _write(
            tmp_path / "hosts.toml",
            """
[territories.builder-one]
host = "192.0.2.10"
password_env = "PW_ONE"
reset_command = "true"

[[hosts]]
host = "192.0.2.11"
port = 2222
service_port = 18080
password_file = "one.pw"
""",
        )
    )
    assert inv.territories["builder-one"].port == 22
    assert inv.hosts[0].port == 2222 and inv.hosts[0].service_port == 18080


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('[territories.a]\nhost = "h"\npassword = "x"\n', r"hosts\.toml:territories\.a\.password: unknown key \(inline secrets"),
        ('[territories.a]\nhost = "h"\n', r"hosts\.toml:territories\.a: Value error, set exactly one of password_env or password_file"),
        ('[territories.a]\nhost = "h"\nport = 70000\npassword_env = "X"\n', r"hosts\.toml:territories\.a\.port: Input should be less than or equal to 65535"),
        ('[territories.a\nhost = "h"\n', r"hosts\.toml:1: invalid TOML: Expected"),
        ('colour = 1\n', r"hosts\.toml:colour: unknown key"),
    ],
)
def test_inventory_errors_name_file_and_field(tmp_path: Path, body: str, message: str) -> None:
    with pytest.raises(InventoryError, match=message):
        load_inventory(_write(tmp_path / "hosts.toml", body))


def test_inventory_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InventoryError, match="hosts.toml: inventory file not found"):
        load_inventory(tmp_path / "hosts.toml")


async def test_secret_problems_are_clear(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AOE_TEST_UNSET_PW", raising=False)
    inv = _write(tmp_path / "hosts.toml", '[territories.builder-one]\nhost = "127.0.0.1"\npassword_env = "AOE_TEST_UNSET_PW"\n')
    prov = SshHostsProvider(inv, tmp_path / "w")
    with pytest.raises(ProvisionError, match=r"territories\.builder-one\.password_env: environment variable AOE_TEST_UNSET_PW is not set"):
        await prov.provision([TerritorySpec("builder-one", "unused")])

    pw = _write(tmp_path / "one.pw", "secret\n")
    pw.chmod(0o644)
    _write(inv, '[territories.builder-one]\nhost = "127.0.0.1"\npassword_file = "one.pw"\n')
    with pytest.raises(ProvisionError, match=r"password_file: .*one\.pw must not be readable by group/others \(chmod 600"):
        await prov.provision([TerritorySpec("builder-one", "unused")])

    with pytest.raises(ProvisionError, match=r"territories\.builder-two: no host for territory builder-two"):
        await prov.provision([TerritorySpec("builder-two", "unused")])


async def test_unreachable_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AOE_TEST_PW", "x")
    inv = _write(tmp_path / "hosts.toml", '[[hosts]]\nhost = "127.0.0.1"\nport = 9\npassword_env = "AOE_TEST_PW"\n')
    prov = SshHostsProvider(inv, tmp_path / "w", connect_timeout_s=3)
    with pytest.raises(ProvisionError, match=r"builder-one \(root@127\.0\.0\.1:9\): SSH unreachable"):
        await prov.provision([TerritorySpec("builder-one", "unused")])


def test_doctor_checks() -> None:
    names = [c.name for c in doctor_checks()]
    assert names == ["asyncssh", "inventory", "limits"]


# ----------------------------------------------------------------------------- a real host


@pytest.fixture
async def real_host(tmp_path: Path, guest_image):
    """One booted container territory, used as an existing host (yields its Territory)."""
    try:
        from aoe_tui.runtime.container import ContainerProvider
    except ImportError:
        pytest.skip("container provider not available")
    prov = ContainerProvider(tmp_path / "container-territories", image=guest_image)
    try:
        [t] = await prov.provision([TerritorySpec("existing-host", "Existing-Host-Pw-1")])
        yield t
    finally:
        await prov.teardown()


@pytest.mark.container
async def test_existing_host_login_reset_reboot(tmp_path: Path, real_host, monkeypatch: pytest.MonkeyPatch) -> None:
    t = real_host
    pwfile = tmp_path / "host.pw"
    pwfile.write_text(t.password + "\n")
    pwfile.chmod(0o600)
    inv = _write(
        tmp_path / "hosts.toml",
        f"""
[territories.builder-one]
host = "{t.host}"
port = {t.ssh_port}
service_port = {t.service_port}
password_file = "host.pw"
reset_command = "mkdir -p /var/lib/reset && date +%s%N > /var/lib/reset/stamp"
""",
    )
    prov = SshHostsProvider(inv, tmp_path / "w")
    [st] = await prov.provision([TerritorySpec("builder-one", "ignored-spec-password")])
    try:
        assert (st.host, st.ssh_port, st.service_port) == (t.host, t.ssh_port, t.service_port)
        assert st.password == t.password
        cred = st.credential_file
        assert cred.stat().st_mode & 0o777 == 0o600 and "AOE_SSH_PASSWORD=" in cred.read_text()
        async with prov.ssh(st) as conn:
            r = await conn.run("cat /var/lib/reset/stamp; echo kept > /var/lib/ssh-provider-token", check=True)
        assert str(r.stdout).strip().isdigit(), "reset_command did not run"
        await prov.reboot(st)
        async with prov.ssh(st) as conn:
            r = await conn.run("cat /var/lib/ssh-provider-token", check=False)
        assert str(r.stdout).strip() == "kept"
    finally:
        await prov.teardown()
    assert not cred.exists()
    # teardown is not destructive: the host still answers
    from aoe_tui.runtime.ssh import probe

    assert await probe(t.host, t.ssh_port, t.password)


@pytest.mark.container
async def test_wrong_credentials_and_failing_reset(tmp_path: Path, real_host, monkeypatch: pytest.MonkeyPatch) -> None:
    t = real_host
    monkeypatch.setenv("AOE_TEST_WRONG_PW", "not-the-password")
    inv = _write(
        tmp_path / "hosts.toml",
        f'[territories.builder-one]\nhost = "{t.host}"\nport = {t.ssh_port}\npassword_env = "AOE_TEST_WRONG_PW"\n',
    )
    with pytest.raises(ProvisionError, match=r"builder-one \(root@.*\): SSH login refused: wrong credentials"):
        await SshHostsProvider(inv, tmp_path / "w").provision([TerritorySpec("builder-one", "x")])

    monkeypatch.setenv("AOE_TEST_RIGHT_PW", t.password)
    _write(
        inv,
        f'[territories.builder-one]\nhost = "{t.host}"\nport = {t.ssh_port}\npassword_env = "AOE_TEST_RIGHT_PW"\n'
        'reset_command = "echo cannot reset >&2; exit 3"\n',
    )
    prov = SshHostsProvider(inv, tmp_path / "w")
    with pytest.raises(ProvisionError, match="reset_command exited 3: cannot reset"):
        await prov.provision([TerritorySpec("builder-one", "x")])
    assert not (tmp_path / "w" / "builder-one" / "credential.env").exists()
    assert os.environ["AOE_TEST_RIGHT_PW"] not in str(inv.read_text())


@pytest.mark.container
async def test_host_is_held_to_its_class(tmp_path: Path, real_host, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the host offers against the seat's class: a class larger than the host refuses it in
    one line (nothing left behind); a class smaller than the host runs, with a note, and
    ``limits()`` says nothing is enforced and what the host offered."""
    from aoe_tui.runtime.provider import TerritoryResources

    t = real_host
    monkeypatch.setenv("AOE_TEST_HOST_PW", t.password)
    inv = _write(
        tmp_path / "hosts.toml",
        f'[territories.builder-one]\nhost = "{t.host}"\nport = {t.ssh_port}\npassword_env = "AOE_TEST_HOST_PW"\n',
    )
    where = rf"host builder-one \({t.host}:{t.ssh_port}\)"
    huge = TerritoryResources(vcpus=512, memory_mib=64 * 2**20, disk_mib=2**30)
    prov = SshHostsProvider(inv, tmp_path / "w")
    with pytest.raises(ProvisionError, match=rf"^{where} offers \d+ vCPUs?, \d+ MiB memory and \d+ MiB disk; its class "
                       r"asks 512 vCPUs, 67108864 MiB memory and 1073741824 MiB disk \(too little vCPUs, memory, disk; "
                       r"the host is refused\)$"):
        await prov.provision([TerritorySpec("builder-one", "x", resources=huge)])
    assert not (tmp_path / "w" / "builder-one" / "credential.env").exists()

    tiny = TerritoryResources(vcpus=1, memory_mib=128, disk_mib=64)
    prov = SshHostsProvider(inv, tmp_path / "w")
    [st] = await prov.provision([TerritorySpec("builder-one", "x", resources=tiny)])
    try:
        assert st.host == t.host
        [note] = prov.notes
        assert re.fullmatch(rf"{where} offers \d+ vCPUs?, \d+ MiB memory and \d+ MiB disk, more than its class asks "
                            r"\(1 vCPU, 128 MiB memory and 64 MiB disk\); nothing holds the seat to its class on the "
                            r"ssh provider", note), note
        limits = prov.limits("builder-one")
        assert limits["enforced"] == [] and set(limits["not_enforced"]) == {"cpu", "memory", "disk", "tasks"}
        offered = limits["offered"]
        assert offered["vcpus"] >= 1 and offered["memory_mib"] > 128 and offered["disk_mib"] > 64
        async with prov.ssh(st) as conn:  # the figures are the host's own
            r = await conn.run("nproc", check=True)
        assert offered["vcpus"] <= int(str(r.stdout))
    finally:
        await prov.teardown()


#: A stand-in NixOS VM runner: records ``QEMU_OPTS`` and forwards the §6.2 SSH port of
#: ``QEMU_NET_OPTS`` (127.0.0.1) to ``$FAKE_TARGET`` (the real host), as the VM's slirp forward would.
FAKE_RUNNER = r'''
import asyncio, os, re
port = int(re.search(r"hostfwd=tcp:127\.0\.0\.1:(\d+)-:22", os.environ["QEMU_NET_OPTS"]).group(1))
with open(os.environ["FAKE_DIR"] + "/qemu_opts", "w") as f:
    f.write(os.environ["QEMU_OPTS"])
host, tport = os.environ["FAKE_TARGET"].rsplit(":", 1)

async def pipe(r, w):
    try:
        while data := await r.read(65536):
            w.write(data)
            await w.drain()
    finally:
        w.close()

async def handle(r, w):
    tr, tw = await asyncio.open_connection(host, int(tport))
    await asyncio.gather(pipe(r, tw), pipe(tr, w), return_exceptions=True)

async def main():
    async with await asyncio.start_server(handle, "127.0.0.1", port) as srv:
        await srv.serve_forever()

asyncio.run(main())
'''


@pytest.mark.container
async def test_nixos_guest_is_held_to_its_class(tmp_path: Path, real_host, monkeypatch: pytest.MonkeyPatch) -> None:
    """The nixos provider end to end with a stand-in ``nix`` and VM runner (no nixpkgs here)
    that forwards the SSH port to a real host: the class's -m/-smp reach the runner, and only the
    guest's disk (the flake's) is compared: a class disk larger than the guest's refuses it, a
    smaller one runs with a note; limits() give the class's CPUs and memory and the guest's disk."""
    import socket
    import sys

    from aoe_tui.runtime.nixos import NixosProvider
    from aoe_tui.runtime.provider import TerritoryResources

    t = real_host
    out = tmp_path / "out"
    (out / "bin").mkdir(parents=True)
    (tmp_path / "runner.py").write_text(FAKE_RUNNER)
    runner = out / "bin" / "run-builder-one-vm"
    runner.write_text(f"#!/bin/sh\nexec {sys.executable} {tmp_path / 'runner.py'}\n")
    runner.chmod(0o755)
    nix = tmp_path / "bin" / "nix"
    nix.parent.mkdir()
    nix.write_text(f"#!/bin/sh\necho {out}\n")
    nix.chmod(0o755)
    monkeypatch.setenv("PATH", f"{nix.parent}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_TARGET", f"{t.host}:{t.ssh_port}")
    monkeypatch.setenv("FAKE_DIR", str(tmp_path))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        base = s.getsockname()[1] & ~1
    if base + 1 > 65535 or base < 1024:
        base = 47000

    def provider() -> NixosProvider:
        return NixosProvider(tmp_path, tmp_path / "t", base_port=base, nixos_configs={"builder-one": ".#x"},
                             accel="native", ready_timeout_s=60)

    big_disk = TerritoryResources(vcpus=2, memory_mib=1024, disk_mib=2**30)
    prov = provider()
    try:
        with pytest.raises(ProvisionError, match=rf"^guest builder-one \(127\.0\.0\.1:{base}\) offers .*; its class "
                           r"asks 2 vCPUs, 1024 MiB memory and 1073741824 MiB disk \(too little disk; the host is "
                           r"refused\)$"):
            await prov.provision([TerritorySpec("builder-one", t.password, resources=big_disk)])
        assert (tmp_path / "qemu_opts").read_text().endswith(" -m 1024 -smp 2")
    finally:
        await prov.teardown()  # the refusal already stopped the runner; a failed test must too

    small_disk = TerritoryResources(vcpus=64, memory_mib=2**20, disk_mib=64)  # CPUs/memory: not compared
    prov = provider()
    [st] = await prov.provision([TerritorySpec("builder-one", t.password, resources=small_disk)])
    try:
        assert (st.host, st.ssh_port) == ("127.0.0.1", base)
        [note] = prov.notes
        assert note.startswith(f"guest builder-one (127.0.0.1:{base}) offers ") and note.endswith(
            "more than its class asks (64 vCPUs, 1048576 MiB memory and 64 MiB disk); nothing holds the seat to its "
            "class on the nixos provider")
        limits = prov.limits("builder-one")
        assert (limits["vcpus"], limits["memory_mib"]) == (64, 2**20)
        assert limits["disk_mib"] == limits["offered"]["disk_mib"] > 64
        assert limits["enforced"] == ["cpu", "memory", "disk"]
    finally:
        await prov.teardown()
