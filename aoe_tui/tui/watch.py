"""``aoe watch``: follow a season folder another process is writing, read-only.

:class:`SeasonTailer` polls ``season.jsonl`` and the ``events.jsonl`` of every attempt
the season log shows as running (a file whose size did not change is not opened), from
the byte offset it reached last time, and posts what is new to a
:class:`~aoe_tui.tui.live.LiveFeed` — the same inbox ``aoe run``'s engine posts to, so
the screens cannot tell the two apart. Only complete lines (ending in ``\\n``) are
consumed; a half-written last line is read on the next poll.

When to poll: :class:`FolderWatch` (Linux inotify on the season folder and the running
attempts' folders) wakes the app when a file there changes; the app polls
:data:`TAIL_COALESCE_S` later (one poll for a burst of lines: the referee writes a tick's
lines within about 2 ms; 20 ms until issue 16 measured it as the one fixed wait on an
event's way to a spectator's screen) and, as a safety net for
what inotify cannot see (a folder created before it was watched, network file
systems), every :data:`TAIL_SAFETY_POLL_S`. Without inotify it polls every
:data:`TAIL_POLL_S`. An idle spectator so wakes about once a second instead of ten
times (issue 7: twenty spectators share one CPU with the race).

The first :meth:`~SeasonTailer.poll` catches up from the start; attempts that already
finished are not tailed (the season screen opens them as replays from their folder).

Live agent activity: each running attempt's ``activity.jsonl`` (ours,
:mod:`aoe_tui.replay.activity`, appended by the referee as the agents work) is tailed the
same way and posted with :meth:`~aoe_tui.tui.live.LiveFeed.post_activity` (a view that
joins reads only the file's last 256 KiB: :func:`~aoe_tui.replay.activity.tail_activity`);
a bad line stops that heat's activity only (one line in ``errors``).

The heat clock of a view that joins mid-heat: after reading a heat's new events, when
the tail reached the end of ``events.jsonl``, the file's mtime is when its last event
was written, and is posted with :meth:`~aoe_tui.tui.live.LiveFeed.post_written`; the
view's ticking clock then counts from that moment (the last event's ``elapsed_ms`` plus
the wall time since the write) instead of from when it read the line — the same clock
the runner's own view shows. The mtime is used rather than ``match.json``'s start time
because the clock starts at agent launch, after provisioning (an unknown delay later),
and rather than a stamp inside the record because upstream's records carry none; it is
one file system's clock on both sides (the runner's and the watcher's host are the same
one for ``aoe watch`` and SSH spectators; a shared folder on another host would add
that host's clock skew).
Nothing here writes into the season folder.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aoe_tui.errors import AoeError
from aoe_tui.replay.activity import ACTIVITY_FILE, tail_activity
from aoe_tui.replay.jsonl import LogTail
from aoe_tui.replay.log import EVENT_LOG
from aoe_tui.replay.season_log import SEASON_LOG
from aoe_tui.replay.season_reducer import SeasonState, apply_season_record
from aoe_tui.tui.live import LiveFeed
from aoe_tui.tui.seasonmodel import attempt_title

__all__ = ["FolderWatch", "SeasonTailer", "TAIL_COALESCE_S", "TAIL_POLL_S", "TAIL_SAFETY_POLL_S"]

#: seconds between two polls of ``aoe watch`` without inotify
TAIL_POLL_S = 0.1
#: seconds from an inotify wake-up to the poll (lines written in that time are read at once)
TAIL_COALESCE_S = 0.005
#: seconds between two polls with inotify (for changes inotify does not report)
TAIL_SAFETY_POLL_S = 1.0


class FolderWatch:
    """inotify watches on folders (Linux; the ``inotify_simple`` library): :attr:`fd`
    becomes readable when a file in a watched folder is created, written or moved in.

    :meth:`open` returns None where inotify is unavailable (another OS, the per-user
    instance limit reached); the caller then polls on a timer. :meth:`watch_only` keeps
    exactly the given folders watched (ones that do not exist yet are skipped and tried
    again on the next call); :meth:`drain` reads the pending events (returns how many).
    """

    def __init__(self) -> None:
        from inotify_simple import INotify, flags

        self._inotify = INotify(nonblocking=True)
        self._mask = flags.MODIFY | flags.CREATE | flags.MOVED_TO | flags.CLOSE_WRITE
        self._wds: dict[Path, int] = {}

    @classmethod
    def open(cls) -> FolderWatch | None:
        """A new watch, or None when inotify cannot be used here."""
        try:
            return cls()
        except (ImportError, OSError):
            return None

    @property
    def fd(self) -> int:
        """The file descriptor to wait on (readable when events are pending)."""
        return self._inotify.fileno()

    def watch_only(self, folders: list[Path]) -> None:
        """Watch exactly ``folders`` (those that exist); stop watching the others."""
        want = set(folders)
        for path in list(self._wds):
            if path not in want:
                try:
                    self._inotify.rm_watch(self._wds.pop(path))
                except OSError:  # the folder is gone: the kernel dropped the watch already
                    pass
        for path in want - self._wds.keys():
            try:
                self._wds[path] = self._inotify.add_watch(path, self._mask)
            except OSError:  # not created yet (or the watch limit): the safety poll covers it
                pass

    def drain(self) -> int:
        """Read and drop the pending events; returns how many there were."""
        try:
            return len(self._inotify.read(timeout=0))
        except (BlockingIOError, OSError):
            return 0

    def close(self) -> None:
        """Release the inotify instance."""
        self._inotify.close()


@dataclass
class _Tail:
    folder: str
    log: LogTail | None = None  # events.jsonl, once the folder is open
    activity: LogTail | None = None  # activity.jsonl, once the folder is open
    activity_broken: bool = False
    opened: bool = False
    final: bool = False
    broken: bool = False


class SeasonTailer:
    """Incremental reader of one season folder (see the module docstring).

    ``poll()`` returns the number of new records posted. A bad ``season.jsonl`` line
    raises :class:`AoeError` naming ``path:line``; a bad heat log line stops tailing that
    heat and is kept in ``errors`` (one line each).
    """

    def __init__(self, season_dir: Path, feed: LiveFeed) -> None:
        self.dir = Path(season_dir)
        self.feed = feed
        self.log = self.dir / "season.jsonl"
        self._season = LogTail(SEASON_LOG, self.log)
        self.state = SeasonState()
        self.tails: dict[str, _Tail] = {}
        self.errors: list[str] = []

    def _read_season(self) -> list[Any]:
        if not self._season.grown():
            return []
        out = self._season.read()
        for rec in out:
            apply_season_record(self.state, rec)
        return out

    def poll(self) -> int:
        """Read what is new; post it to the feed. Returns the number of records posted."""
        new = self._read_season()
        for rec in new:
            self.feed.post_season_record(rec)
        # every open attempt, those a stop cut off too: a stopped heat's abort events are
        # written just before season_stopped; the resume's attempt_interrupted ends the tail
        running = {a.folder for _, a in self.state.open_attempts()}
        for rec in new:
            e = rec.event
            if e.kind == "attempt_interrupted":  # renamed away; a re-run reuses the folder name
                self.tails.pop(f"round-{e.round}/heat-{e.heat}/attempt-{e.attempt}", None)
        for t in self.tails.values():
            if t.folder not in running:
                t.final = True  # one last read, then forget it
        for folder in running:
            self.tails.setdefault(folder, _Tail(folder))
        count = len(new)
        for key, t in list(self.tails.items()):
            count += self._poll_heat(t)
            if t.final or t.broken:
                del self.tails[key]
        return count

    def folders(self) -> list[Path]:
        """The folders whose files :meth:`poll` reads: the season folder and each tailed
        attempt's folder."""
        return [self.dir] + [self.dir / t.folder for t in self.tails.values()]

    def _poll_heat(self, t: _Tail) -> int:
        folder = self.dir / t.folder
        if not t.opened:
            arena = None
            try:
                arena = json.loads((folder / "arena.json").read_text(encoding="utf-8"))
            except (OSError, ValueError):
                if not (folder / "events.jsonl").exists():
                    return 0  # the runner has not written the headers yet
            self.feed.open_heat(t.folder, arena=arena if isinstance(arena, dict) else None, title=attempt_title(self.state.info, t.folder))
            t.opened = True
        if t.log is None:
            t.log = LogTail(EVENT_LOG, folder / "events.jsonl")
            t.activity = tail_activity(folder / ACTIVITY_FILE)  # joining a long heat: its latest lines
        count = self._poll_activity(t)
        try:
            st = os.stat(t.log.path)
        except OSError:
            return count
        if st.st_size <= t.log.offset:
            return count
        try:
            records = t.log.read()
        except AoeError as err:
            self.errors.append(str(err))
            t.broken = True
            return count
        for rec in records:
            self.feed.post_record(rec, t.folder)
        if records and t.log.offset == st.st_size:  # the last record read is the last one written
            self.feed.post_written(t.folder, st.st_mtime)
        return count + len(records)

    def _poll_activity(self, t: _Tail) -> int:
        """Post the new lines of the heat's ``activity.jsonl``; returns how many."""
        tail = t.activity
        if tail is None or t.activity_broken or not tail.grown():
            return 0
        try:
            records = tail.read()
        except AoeError as err:
            self.errors.append(str(err))
            t.activity_broken = True
            return 0
        self.feed.post_activity(records, t.folder)
        return len(records)
