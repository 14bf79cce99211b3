"""What a host offers against its seat's class (``runtime/hostoffer``): the parse of the
offer script's output and the pure comparison (refuse a smaller host, note a larger one)."""

from __future__ import annotations

import subprocess

import pytest

from aoe_tui.runtime.hostoffer import (
    OFFER_SCRIPT,
    HostOffer,
    OfferError,
    compare_offer,
    parse_offer,
)
from aoe_tui.runtime.provider import TerritoryResources

CLASS = TerritoryResources(vcpus=1, memory_mib=768, disk_mib=2048)
WHO = "host web-1 (10.0.0.5:22)"


def _out(nproc="2", memtotal_kib="24683784", cg2_mem="", cg1_mem="", cg2_cpu="", cg1_cpu="",
         df="/dev/vda 258020 25687 78212 25% /") -> str:
    return (f"nproc={nproc}\nmemtotal_kib={memtotal_kib}\ncg2_memory_max={cg2_mem}\n"
            f"cg1_memory_limit={cg1_mem}\ncg2_cpu_max={cg2_cpu}\ncg1_cpu_quota={cg1_cpu}\ndf_root={df}\n")


def test_parse_plain_host() -> None:
    assert parse_offer(_out()) == HostOffer(vcpus=2, memory_mib=24105, disk_mib=258020)


def test_parse_cgroup_limits_lower_the_offer() -> None:
    # a container host: cgroup v2 memory.max 768 MiB and cpu.max one CPU's worth
    v2 = parse_offer(_out(cg2_mem=str(768 * 2**20), cg2_cpu="100000 100000"))
    assert (v2.vcpus, v2.memory_mib) == (1, 768)
    # cgroup v1: 1.5 CPUs of quota count as 2; "unlimited" (2^63 rounded to a page) is ignored
    v1 = parse_offer(_out(nproc="4", cg1_mem="9223372036854771712", cg1_cpu="150000 100000"))
    assert (v1.vcpus, v1.memory_mib) == (2, 24105)
    # no limit set: "max", -1
    assert parse_offer(_out(cg2_mem="max", cg2_cpu="max 100000")).vcpus == 2
    assert parse_offer(_out(cg1_cpu="-1 100000")).vcpus == 2


@pytest.mark.parametrize(("kw", "what"), [
    ({"nproc": ""}, "nproc"), ({"memtotal_kib": ""}, "MemTotal"), ({"df": ""}, "df"),
])
def test_parse_missing_figure(kw: dict, what: str) -> None:
    with pytest.raises(OfferError, match=what):
        parse_offer(_out(**kw))


def test_offer_script_runs_here() -> None:
    out = subprocess.run(["sh", "-c", OFFER_SCRIPT], capture_output=True, text=True, check=True).stdout
    offer = parse_offer(out)
    assert offer.vcpus >= 1 and offer.memory_mib > 0 and offer.disk_mib > 0


def test_smaller_host_is_refused_in_one_line() -> None:
    refusal, note = compare_offer(HostOffer(1, 512, 1800), CLASS, who=WHO, provider="ssh")
    assert note is None
    assert refusal == ("host web-1 (10.0.0.5:22) offers 1 vCPU, 512 MiB memory and 1800 MiB disk; its class "
                       "asks 1 vCPU, 768 MiB memory and 2048 MiB disk (too little memory, disk; the host is refused)")
    assert "\n" not in refusal
    refusal, _ = compare_offer(HostOffer(1, 4096, 10000), TerritoryResources(vcpus=2), who=WHO, provider="ssh")
    assert refusal is not None and "(too little vCPUs;" in refusal


def test_a_vm_of_the_class_matches_within_the_tolerances() -> None:
    # a 768 MiB / 2048 MiB VM shows less of both: the kernel's share and the file system's
    assert compare_offer(HostOffer(1, 720, 1950), CLASS, who=WHO, provider="ssh") == (None, None)
    assert compare_offer(HostOffer(1, 692, 1844), CLASS, who=WHO, provider="ssh") == (None, None)  # 90 %
    refusal, _ = compare_offer(HostOffer(1, 690, 1950), CLASS, who=WHO, provider="ssh")  # below 90 %
    assert refusal is not None and "too little memory;" in refusal
    refusal, _ = compare_offer(HostOffer(1, 720, 1840), CLASS, who=WHO, provider="ssh")
    assert refusal is not None and "too little disk;" in refusal


def test_larger_host_runs_with_a_note() -> None:
    refusal, note = compare_offer(HostOffer(2, 24105, 258020), CLASS, who=WHO, provider="ssh")
    assert refusal is None
    assert note == ("host web-1 (10.0.0.5:22) offers 2 vCPUs, 24105 MiB memory and 258020 MiB disk, more than its "
                    "class asks (1 vCPU, 768 MiB memory and 2048 MiB disk); nothing holds the seat to its class "
                    "on the ssh provider")
    _, note = compare_offer(HostOffer(1, 720, 4000), CLASS, who=WHO, provider="nixos")  # only the disk is larger
    assert note is not None and note.endswith("on the nixos provider")
