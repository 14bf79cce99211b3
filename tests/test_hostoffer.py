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
    memory_enough,
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
    # a VM of the class shows less of both: the kernel keeps some RAM (measured under QEMU:
    # 640 MiB -> 580 MiB of MemTotal), the file system its metadata (2560 MiB -> 2450 MiB)
    assert compare_offer(HostOffer(2, 580, 2450), TerritoryResources(2, 640, 2560), who=WHO, provider="ssh") == (None, None)
    assert compare_offer(HostOffer(1, 708, 1950), CLASS, who=WHO, provider="ssh") == (None, None)
    # the floor: 90 % of the class less 64 MiB (768 -> 627.2); small classes keep their kernel's share
    assert memory_enough(628, 768) and not memory_enough(627, 768)
    assert memory_enough(80, 128) and memory_enough(170, 256)
    refusal, _ = compare_offer(HostOffer(1, 627, 1950), CLASS, who=WHO, provider="ssh")
    assert refusal is not None and "too little memory;" in refusal
    assert compare_offer(HostOffer(1, 720, 1844), CLASS, who=WHO, provider="ssh") == (None, None)  # 90 % of 2048
    refusal, _ = compare_offer(HostOffer(1, 720, 1840), CLASS, who=WHO, provider="ssh")
    assert refusal is not None and "too little disk;" in refusal


def test_only_the_figures_asked_are_compared() -> None:
    """A nixos guest's CPUs and memory are the class's own -smp/-m: only its disk is compared."""
    small = HostOffer(1, 100, 4096)
    refusal, note = compare_offer(small, TerritoryResources(2, 768, 2048), who=WHO, provider="nixos", figures=("disk",))
    assert refusal is None and note is not None and "(2 vCPUs, 768 MiB memory and 2048 MiB disk)" in note
    assert compare_offer(HostOffer(4, 9999, 2000), CLASS, who=WHO, provider="nixos", figures=("disk",)) == (None, None)
    refusal, _ = compare_offer(small, TerritoryResources(2, 768, 2048), who=WHO, provider="ssh")
    assert refusal is not None and "(too little vCPUs, memory;" in refusal


def test_larger_host_runs_with_a_note() -> None:
    refusal, note = compare_offer(HostOffer(2, 24105, 258020), CLASS, who=WHO, provider="ssh")
    assert refusal is None
    assert note == ("host web-1 (10.0.0.5:22) offers 2 vCPUs, 24105 MiB memory and 258020 MiB disk, more than its "
                    "class asks (1 vCPU, 768 MiB memory and 2048 MiB disk); nothing holds the seat to its class "
                    "on the ssh provider")
    _, note = compare_offer(HostOffer(1, 720, 4000), CLASS, who=WHO, provider="nixos")  # only the disk is larger
    assert note is not None and note.endswith("on the nixos provider")
