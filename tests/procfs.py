"""What the kernel says about processes and threads (``/proc``), for tests."""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path


def policy(pid: int, tid: int | None = None) -> int:
    """Scheduling policy (``stat`` field 41) of a process, or of one of its threads."""
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    return int(Path(path).read_text().rsplit(")", 1)[1].split()[38])


def this_thread_policy() -> int:
    """Scheduling policy of the calling thread."""
    return policy(os.getpid(), threading.get_native_id())


def thread_policies(pid: int) -> dict[int, int]:
    """Scheduling policy of each thread of ``pid``, by thread id; threads (or the whole
    process) gone meanwhile are skipped."""
    out: dict[int, int] = {}
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:  # the process exited between being listed and being read
        return out
    for task in tasks:
        with contextlib.suppress(OSError):
            out[int(task.name)] = policy(pid, int(task.name))
    return out


def descendants(pid: int) -> list[int]:
    """Every live descendant process of ``pid``."""
    found, todo = [], [pid]
    while todo:
        for task in Path(f"/proc/{todo.pop()}/task").glob("*/children"):
            with contextlib.suppress(OSError):
                kids = [int(c) for c in task.read_text().split()]
                found += kids
                todo += kids
    return found
