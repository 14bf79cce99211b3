"""What a worker node's lost heats left behind: found and torn down (no ``ray`` import).

A heat on a worker node (:mod:`aoe_tui.cluster.remote`) keeps two folders named after the
process that runs it (its Ray actor), ``heat-<pid>.<start>-<tag>`` (``<start>``: when that
process started, field 22 of ``/proc/<pid>/stat``, so that a pid reused after a reboot is
not taken for the heat's owner; folders of older versions, ``heat-<pid>-<tag>``, are judged
by the pid alone):

- ``territories_dir(base)/<heat folder>/territories/``: its provider's work folder (each
  territory's ``state.json`` names the owner pid, as in a local match folder);
- ``base/matches/<heat folder>/``: its scratch match folder (the runner gets the
  artifacts; the folder is removed after they are sent).

When a node is lost (its processes killed, the machine rebooted), those folders stay and
the territories may still run. :func:`sweep_stale_heats` tears down the territories of every
heat whose process is gone and removes both folders; it runs before each heat an actor
starts and when ``aoe worker start`` joins the node (``aoe_tui.cluster.node``), so a node
that comes back tears down what its lost heats left before it takes new ones.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from aoe_tui.cluster import territories_dir
from aoe_tui.runtime.netalloc import pid_alive, process_start_ticks

__all__ = ["HEAT_PREFIX", "heat_folder_name", "matches_dir", "sweep_stale_heats"]

#: Prefix of a heat's folders on a node: ``heat-<pid>.<start>-<tag>``.
HEAT_PREFIX = "heat-"


def heat_folder_name(pid: int, tag: str) -> str:
    """``heat-<pid>.<start>-<tag>``: a heat's folder name on a node (``pid``: its actor
    process, running; ``<start>``: its start, :func:`~aoe_tui.runtime.netalloc.process_start_ticks`);
    ``heat-<pid>-<tag>`` when that start cannot be read (no such process, no ``/proc``)."""
    start = process_start_ticks(pid)
    return f"{HEAT_PREFIX}{pid}-{tag}" if start is None else f"{HEAT_PREFIX}{pid}.{start}-{tag}"


def matches_dir(base: Path) -> Path:
    """Where a node's heats keep their scratch match folders (``base/matches``)."""
    return Path(base) / "matches"


def _owner_alive(name: str) -> bool | None:
    """Whether the process that owns heat folder ``name`` still runs: for
    ``heat-<pid>.<start>-...`` a process with that pid and that start, for an older
    ``heat-<pid>-...`` any process with that pid (zombies count as gone); None when
    ``name`` is no heat folder."""
    owner = name[len(HEAT_PREFIX):].split("-", 1)[0] if name.startswith(HEAT_PREFIX) else ""
    pid, dot, start = owner.partition(".")
    if not pid.isdigit() or (dot and not start.isdigit()):
        return None
    return pid_alive(int(pid), int(start) if dot else None)


def sweep_stale_heats(base: Path, *, retries: int = 5, retry_s: float = 1.0) -> list[str]:
    """Tear down the territories of every heat on this node whose process is gone and
    remove its folders (see the module docstring). ``base`` is the node's state folder
    (``AOE_WORKER_DIR``). Returns ``"<heat folder>: <territory>"`` strings for the
    territories torn down. Heats of live processes are never touched. A heat whose cleanup
    fails (processes of a just-killed heat still exiting) is tried again ``retries`` times,
    ``retry_s`` seconds apart.

    Raises:
        aoe_tui.runtime.provider.ProviderError: after the sweep, when a leftover could still
            not be removed (named; its folder is kept, so the next sweep tries again).
    """
    from aoe_tui.runtime.cleanup import cleanup_under
    from aoe_tui.runtime.provider import ProviderError

    cleaned: list[str] = []
    problems: list[str] = []
    tdir = territories_dir(Path(base))
    for d in sorted(tdir.iterdir()) if tdir.is_dir() else []:
        if not d.is_dir() or d.is_symlink() or _owner_alive(d.name) is not False:
            continue
        for attempt in range(retries + 1):  # a just-killed heat's processes may still be exiting
            try:
                cleaned += [f"{d.name}: {ident}" for _t, ident in cleanup_under(d)]
            except ProviderError as err:
                if attempt == retries:
                    problems.append(str(err).splitlines()[0])
                    break
                time.sleep(retry_s)
                continue
            shutil.rmtree(d, ignore_errors=True)
            break
    mdir = matches_dir(Path(base))
    for d in sorted(mdir.iterdir()) if mdir.is_dir() else []:
        if d.is_dir() and not d.is_symlink() and _owner_alive(d.name) is False:
            shutil.rmtree(d, ignore_errors=True)
    if problems:
        raise ProviderError(f"{tdir}: leftovers of lost heats not torn down yet (kept for the next sweep): "
                            + "; ".join(problems))
    return cleaned
