"""Where spectators run on the CPUs: never in the race's way (issue 7).

A season's referee samples verifiers on a fixed tick; its lateness must not grow
when twenty spectator TUIs redraw at once. Measured on 2 cores (demo season; the
benchmark is ``benchmarks/ssh_spectators.py``), referee tick lateness p99 grew by:

* with 8 bursty stand-in processes: +18 ms at nice 10 and +24 ms at ``SCHED_IDLE`` on
  all CPUs, but +6 ms at nice 10 and +1 ms at ``SCHED_IDLE`` on the second CPU only;
* with 20 real spectators at ``SCHED_IDLE``: +80 ms on all CPUs (one run), +19 ms on
  the second CPU only (two runs). ``SCHED_IDLE`` alone does not protect the runner.

So the spectator server and every spectator process run **confined to a CPU set**
(default: the upper half of the CPUs this process may use, at least one; all of them
on a one-CPU machine) and at **idle priority** (``SCHED_IDLE``: they run only when
nothing of the race wants that CPU; a verifier or the runner preempts them at once).
``low`` priority (nice 10) is the choice for hosts where the race keeps every CPU
busy (TCG territories), at the price of some referee lateness.

The server itself runs with the same placement: twenty SSH handshakes and process
starts at once must not delay a tick either (with the server at nice 10, two ticks
at the moment twenty spectators connected were 70 ms late in one run). It needs
about 1 % of a CPU, and a task that sleeps that much is picked first among idle
tasks, so it does not queue behind twenty redraws.

Placement alone was not enough: the kernel spreads waking tasks by CPU utilisation,
idle-priority work included, so the race's processes crowded onto the other CPU and the
referee queued behind them. The referee's side of the fix is in
:mod:`aoe_tui.runtime.realtime` and :mod:`aoe_tui.runtime.procs` (with both, p99 was 3 ms
with and without 20 spectators).

The placement is applied to the calling thread (``apply_to_self``, before the server
starts any thread, so later threads inherit it) and, in each spectator child, by the
``_ctty.py`` helper before it execs the app (:func:`ctty_args`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = ["PRIORITIES", "Placement", "default_cpus", "parse_cpus"]

#: ``idle`` = SCHED_IDLE; ``low`` = SCHED_OTHER at nice 10; ``normal`` = unchanged
PRIORITIES = ("idle", "low", "normal")
LOW_NICE = 10


def _allowed() -> set[int]:
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - non-Linux
        return set(range(os.cpu_count() or 1))


def default_cpus(allowed: set[int] | None = None) -> frozenset[int]:
    """The upper half of ``allowed`` (default: this process's CPUs), at least one CPU;
    all of them when there is only one. E.g. ``{0,1}`` → ``{1}``, ``{0..7}`` → ``{4..7}``."""
    cpus = sorted(allowed if allowed is not None else _allowed())
    if len(cpus) <= 1:
        return frozenset(cpus)
    return frozenset(cpus[len(cpus) - max(1, len(cpus) // 2):])


def parse_cpus(text: str) -> frozenset[int] | None:
    """``"all"`` → None (no confinement); ``"1"``, ``"2,3"``, ``"4-7"``, ``"1,4-5"`` → CPU
    numbers. Raises ``ValueError`` (with the offending part) on anything else, or when a
    CPU is not one this process may use."""
    text = text.strip()
    if text == "all":
        return None
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        try:
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
                if lo > hi or lo < 0:
                    raise ValueError
                out.update(range(lo, hi + 1))
            else:
                n = int(part)
                if n < 0:
                    raise ValueError
                out.add(n)
        except ValueError:
            raise ValueError(f"{part!r} is not a CPU number or range (like 1 or 2-3)") from None
    missing = out - _allowed()
    if missing:
        raise ValueError(f"CPU {min(missing)} is not available here (usable: {_fmt(_allowed())})")
    return frozenset(out)


def _fmt(cpus: set[int] | frozenset[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))


@dataclass(frozen=True)
class Placement:
    """CPU set (``None`` = all CPUs) and priority (one of :data:`PRIORITIES`) of the
    spectator stack."""

    cpus: frozenset[int] | None
    priority: str = "idle"

    @classmethod
    def default(cls) -> Placement:
        """:func:`default_cpus` at ``idle`` priority."""
        return cls(default_cpus(), "idle")

    @property
    def cpu_text(self) -> str:
        """``"all"`` or the CPU list (``"1"``, ``"4,5,6,7"``)."""
        return "all" if self.cpus is None else _fmt(self.cpus)

    def describe(self) -> str:
        """``"CPUs 1, idle priority"`` (one line for people)."""
        where = "all CPUs" if self.cpus is None else f"CPUs {_fmt(self.cpus)}"
        return f"{where}, {self.priority} priority"

    def apply_to_self(self) -> list[str]:
        """Apply to the calling thread (and so to threads and processes it starts later).
        Returns what could not be applied, one line each (never raises)."""
        problems: list[str] = []
        if self.cpus is not None:
            try:
                os.sched_setaffinity(0, self.cpus)
            except (AttributeError, OSError) as err:
                problems.append(f"cannot confine to CPUs {_fmt(self.cpus)}: {err}")
        try:
            if self.priority == "idle":
                os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
            elif self.priority == "low":
                os.setpriority(os.PRIO_PROCESS, 0, max(os.getpriority(os.PRIO_PROCESS, 0), LOW_NICE))
        except (AttributeError, OSError) as err:
            problems.append(f"cannot set {self.priority} priority: {err}")
        return problems

    def ctty_args(self) -> list[str]:
        """Options of the ``_ctty.py`` helper that apply this placement in a child."""
        args: list[str] = []
        if self.cpus is not None:
            args += ["--cpus", _fmt(self.cpus)]
        if self.priority != "normal":
            args += ["--priority", self.priority]
        return args + ["--"]
