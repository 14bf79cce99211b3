"""What a host that the provider does not size itself offers, against its seat's class.

The ``ssh`` provider runs seats on hosts the operator already runs, and the ``nixos``
provider's disk is sized by the arena's flake: neither can give a seat exactly its class's
resources (spec §1.7). After the first root login the provider reads what the host offers
(:data:`OFFER_SCRIPT`: ``nproc``, ``MemTotal``, the size of ``/``, and the cgroup limits of
a container host) and compares it with the class (:func:`compare_offer`):

* a host smaller than the class is refused (one line: :class:`~aoe_tui.runtime.provider.ProvisionError`);
* a larger host runs, with one warning line in ``provider.notes`` (printed by the heat and
  written to ``aoe-extra.json`` ``territory_notes``): nothing caps that seat at its class.

Tolerances: a guest kernel keeps part of its RAM (measured: a 640 MiB VM shows 580 MiB of
``MemTotal``, about 60 MiB whatever the size) and a file system its metadata (a 2560 MiB
ext4 shows 2450 MiB in ``df``), so memory counts as enough from :data:`MEMORY_TOLERANCE` of
the class's figure less :data:`MEMORY_KERNEL_MIB`, disk from :data:`DISK_TOLERANCE` of it;
vCPUs are counted exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aoe_tui.runtime.provider import ProvisionError, TerritoryResources, TerritorySpec

if TYPE_CHECKING:  # pragma: no cover
    import asyncssh

#: Share of the class's ``memory_mib`` a host's usable memory (``MemTotal``, or a smaller
#: cgroup limit) must reach, less :data:`MEMORY_KERNEL_MIB`: the kernel keeps some of a VM's
#: RAM (measured: 640 MiB → 580 MiB of ``MemTotal``).
MEMORY_TOLERANCE = 0.9
#: MiB of a VM's RAM its kernel keeps whatever the size (so a small class, 128-512 MiB, is
#: not refused on a VM of exactly its size).
MEMORY_KERNEL_MIB = 64
#: Share of the class's ``disk_mib`` the size of the host's ``/`` must reach (file-system
#: overhead: journal, inode tables; a 2048 MiB ext4 shows about 1950 MiB).
DISK_TOLERANCE = 0.9

#: POSIX shell run over the first root login: ``key=value`` lines :func:`parse_offer` reads.
#: The cgroup files are those of the cgroup the login sees as its root (a container host's
#: own limits with a cgroup namespace); absent files print nothing.
OFFER_SCRIPT = r"""
echo "nproc=$(nproc 2>/dev/null)"
echo "memtotal_kib=$(sed -n 's/^MemTotal:[[:space:]]*\([0-9]*\).*/\1/p' /proc/meminfo 2>/dev/null)"
echo "cg2_memory_max=$(cat /sys/fs/cgroup/memory.max 2>/dev/null)"
echo "cg1_memory_limit=$(cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null)"
echo "cg2_cpu_max=$(cat /sys/fs/cgroup/cpu.max 2>/dev/null)"
echo "cg1_cpu_quota=$(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us 2>/dev/null) $(cat /sys/fs/cgroup/cpu/cpu.cfs_period_us 2>/dev/null)"
echo "df_root=$(df -Pm / 2>/dev/null | tail -n 1)"
"""


class OfferError(ValueError):
    """The host's answer to :data:`OFFER_SCRIPT` lacks a figure (one line naming it)."""


@dataclass(frozen=True)
class HostOffer:
    """What one host offers a seat.

    Attributes:
        vcpus: CPUs the seat can use (``nproc``, lowered by a cgroup CPU quota).
        memory_mib: memory in MiB (``MemTotal``, lowered by a cgroup memory limit).
        disk_mib: size of ``/`` in MiB (``df -Pm /``).
    """

    vcpus: int
    memory_mib: int
    disk_mib: int

    def as_dict(self) -> dict[str, int]:
        """``{"vcpus", "memory_mib", "disk_mib"}`` (for ``limits()`` / ``aoe-extra.json``)."""
        return {"vcpus": self.vcpus, "memory_mib": self.memory_mib, "disk_mib": self.disk_mib}


def _int(text: str) -> int | None:
    text = text.strip()
    return int(text) if text.isdigit() else None


def parse_offer(text: str) -> HostOffer:
    """The :class:`HostOffer` in ``text``, the output of :data:`OFFER_SCRIPT`.

    A cgroup limit lowers the figure only when it is set and smaller (``max``, ``-1`` and
    v1's "unlimited" 2^63 rounded to a page are ignored); a CPU quota counts as
    ``ceil(quota / period)`` CPUs.

    Raises:
        OfferError: ``nproc``, ``MemTotal`` or the ``df`` line is missing or unreadable.
    """
    kv: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            kv[key.strip()] = value.strip()
    vcpus = _int(kv.get("nproc", ""))
    if not vcpus:
        raise OfferError("nproc printed no CPU count")
    memtotal = _int(kv.get("memtotal_kib", ""))
    if not memtotal:
        raise OfferError("/proc/meminfo has no MemTotal")
    memory_mib = memtotal // 1024
    for key in ("cg2_memory_max", "cg1_memory_limit"):
        limit = _int(kv.get(key, ""))
        if limit is not None and 0 < limit // 2**20 < memory_mib:
            memory_mib = limit // 2**20
    quota = kv.get("cg2_cpu_max", "").split() or kv.get("cg1_cpu_quota", "").split()
    if len(quota) == 2 and _int(quota[0]) and _int(quota[1]):
        vcpus = min(vcpus, max(1, math.ceil(int(quota[0]) / int(quota[1]))))
    df = kv.get("df_root", "").split()
    disk_mib = _int(df[1]) if len(df) >= 2 else None
    if disk_mib is None:
        raise OfferError("df -Pm / printed no size for /")
    return HostOffer(vcpus=vcpus, memory_mib=memory_mib, disk_mib=disk_mib)


def _figures(vcpus: int, memory_mib: int, disk_mib: int) -> str:
    return f"{vcpus} vCPU{'s' if vcpus != 1 else ''}, {memory_mib} MiB memory and {disk_mib} MiB disk"


def memory_enough(offered_mib: int, asked_mib: int) -> bool:
    """Whether ``offered_mib`` of usable memory (``MemTotal``) is a host of ``asked_mib`` MiB:
    at least :data:`MEMORY_TOLERANCE` of it less :data:`MEMORY_KERNEL_MIB`."""
    return offered_mib >= asked_mib * MEMORY_TOLERANCE - MEMORY_KERNEL_MIB


def compare_offer(offer: HostOffer, asked: TerritoryResources, *, who: str, provider: str,
                  figures: tuple[str, ...] = ("vcpus", "memory", "disk")) -> tuple[str | None, str | None]:
    """Compare what a host offers with what its seat's class asks (pure).

    ``who`` names the host in the lines (``host builder-one (192.0.2.10:22)``); ``provider``
    the provider (``ssh``), for the note. ``figures``: which of ``vcpus``, ``memory``, ``disk``
    are compared (the others are the provider's own doing, e.g. a nixos guest's ``-m``/``-smp``).

    Returns:
        ``(refusal, note)``: ``refusal`` is the one line of the ProvisionError when the host
        is smaller than the class (fewer vCPUs, memory short of :func:`memory_enough` or disk
        below :data:`DISK_TOLERANCE` of the class's); else ``note`` is a warning line when
        the host offers more than the class in any figure; ``(None, None)`` when it matches.
    """
    short = []
    if "vcpus" in figures and offer.vcpus < asked.vcpus:
        short.append("vCPUs")
    if "memory" in figures and not memory_enough(offer.memory_mib, asked.memory_mib):
        short.append("memory")
    if "disk" in figures and offer.disk_mib < asked.disk_mib * DISK_TOLERANCE:
        short.append("disk")
    offered = _figures(offer.vcpus, offer.memory_mib, offer.disk_mib)
    wanted = _figures(asked.vcpus, asked.memory_mib, asked.disk_mib)
    if short:
        return (f"{who} offers {offered}; its class asks {wanted} "
                f"(too little {', '.join(short)}; the host is refused)"), None
    if (("vcpus" in figures and offer.vcpus > asked.vcpus)
            or ("memory" in figures and offer.memory_mib > asked.memory_mib)
            or ("disk" in figures and offer.disk_mib > asked.disk_mib)):
        return None, (f"{who} offers {offered}, more than its class asks ({wanted}); "
                      f"nothing holds the seat to its class on the {provider} provider")
    return None, None


async def read_offer(conn: asyncssh.SSHClientConnection, *, timeout_s: float = 30.0) -> HostOffer:
    """Run :data:`OFFER_SCRIPT` over an open root login and parse it.

    Raises:
        OfferError: the script failed or printed no usable figure.
        asyncssh.Error, OSError, asyncio.TimeoutError: the session failed.
    """
    import asyncio
    import shlex

    # through sh: root's login shell may not be a POSIX one
    res = await asyncio.wait_for(conn.run(f"sh -c {shlex.quote(OFFER_SCRIPT)}", check=False), timeout=timeout_s)
    return parse_offer(str(res.stdout or ""))


async def check_host(conn: asyncssh.SSHClientConnection, spec: TerritorySpec, *, who: str, provider: str,
                     notes: list[str], figures: tuple[str, ...] = ("vcpus", "memory", "disk")) -> HostOffer | None:
    """Read what the host behind ``conn`` offers and hold it to ``spec``'s class
    (:func:`compare_offer` of ``figures``): a smaller host raises, a larger one appends its line to
    ``notes`` (the provider's :attr:`~aoe_tui.runtime.provider.TerritoryProvider.notes`). A
    host whose figures cannot be read runs, with a note that it was not compared.

    Returns:
        the offer, or ``None`` when it could not be read.

    Raises:
        ProvisionError: the host is smaller than the class (the refusal line).
    """
    import asyncio

    import asyncssh

    try:
        offer = await read_offer(conn)
    except (OfferError, asyncssh.Error, OSError, asyncio.TimeoutError) as err:
        notes.append(f"{who}: what it offers could not be read ({err or type(err).__name__}); "
                     "not compared with its class")
        return None
    refusal, note = compare_offer(offer, spec.resources, who=who, provider=provider, figures=figures)
    if refusal is not None:
        raise ProvisionError(refusal)
    if note is not None:
        notes.append(note)
    return offer


__all__ = [
    "DISK_TOLERANCE",
    "MEMORY_KERNEL_MIB",
    "MEMORY_TOLERANCE",
    "OFFER_SCRIPT",
    "HostOffer",
    "OfferError",
    "check_host",
    "compare_offer",
    "memory_enough",
    "parse_offer",
    "read_offer",
]
