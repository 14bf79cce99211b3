"""The ``aoe`` Textual application (replay, live heats, season watch).

Construct it with one of the class methods:

* :meth:`AoeApp.replay` — a loaded match (``aoe replay PATH``);
* :meth:`AoeApp.live` — a :class:`~aoe_tui.tui.live.LiveFeed` the engine posts to;
* :meth:`AoeApp.season_view` — a season (``aoe run`` with a
  :class:`~aoe_tui.tui.host.SeasonHost`, or ``aoe watch`` with a
  :class:`~aoe_tui.tui.watch.SeasonTailer``); heats are keyed by attempt folder.

The app owns one :class:`~aoe_tui.tui.viewmodel.HeatModel` per heat
(``app.heats``), advanced incrementally. Records arrive through the feed as a
coalescing :class:`~aoe_tui.tui.live.RecordsPending` message; the handler
drains everything queued, applies it, and asks the *current* screen to redraw
once inside ``batch_update``. Nothing the engine does waits for the UI.
"""

from __future__ import annotations

import asyncio
import gc
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from textual import on
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.screen import Screen

from aoe_tui.errors import AoeError
from aoe_tui.replay.activity import ACTIVITY_FILE, read_activity
from aoe_tui.replay.matchdir import LoadedMatch, load_match
from aoe_tui.tui.driver import TEXTUAL_COLOR_SYSTEMS, color_depth, driver_class
from aoe_tui.tui.live import LiveFeed, RecordsPending
from aoe_tui.tui.screens import HeatScreen, HelpScreen, ReplayScreen
from aoe_tui.tui.season_screens import QuitScreen, SeasonScreen, StandingsScreen
from aoe_tui.tui.seasonmodel import SeasonModel, attempt_title
from aoe_tui.tui.viewmodel import ActivitySource, ArenaView, HeatModel, ReplayCursor, folder_activity
from aoe_tui.tui.watch import TAIL_COALESCE_S, TAIL_POLL_S, TAIL_SAFETY_POLL_S, FolderWatch, SeasonTailer

DARK_THEME = "textual-dark"
LIGHT_THEME = "textual-light"
#: how often live heat screens re-read agent activity (s)
ACTIVITY_POLL_S = 0.5
#: seconds after start-up when the objects alive then (Textual, styles, screens, the
#: heats read so far) are moved out of the garbage collector's sight (``gc.freeze``):
#: a full collection otherwise walks all of them, about 40 ms that every spectator
#: of a heat spends at the same event (issue 7)
GC_FREEZE_AFTER_S = 2.0
#: how long the "Season finished" notification stays (s)
SEASON_FINISHED_NOTIFY_S = 8
#: exit status of a resumable stop of the season engine (``SeasonWaiting``, ``DiskFullStop``:
#: ``EX_TEMPFAIL``): the view stays open on it instead of closing as on an engine failure
RESUMABLE_STOP_EXIT = 75
#: after a stop signal, how long (s) the terminal may take to accept the view's remaining
#: output (the restore sequences) before it is given up as dead (tui/driver.TerminalWriter)
STOP_OUTPUT_S = 2.0


class AoeApp(App):
    """aoe-tui's single Textual app; see the module docstring for the modes."""

    CSS_PATH = "aoe.tcss"
    TITLE = "aoe"
    ENABLE_COMMAND_PALETTE = True

    BINDINGS = [
        Binding("question_mark,f1", "help", "Help", key_display="?"),
        Binding("t", "toggle_theme", "Theme"),
        Binding("q", "quit", "Quit"),
        Binding("escape", "back", "Back", show=False),
    ]

    def __init__(self, *, feed: LiveFeed | None = None, theme: str = DARK_THEME) -> None:
        import textual.constants as textual_constants

        #: the colour depth this view draws with (``"truecolor"``, ``"256"``, ``"16"``,
        #: ``"none"``): what its terminal says (:func:`aoe_tui.tui.driver.color_depth`), read when
        #: the app is built — not at import: a spectator forked from ``aoe serve``'s zygote
        #: imported Textual under the zygote's environment; ``TEXTUAL_COLOR_SYSTEM`` still wins
        self.color_depth = color_depth(os.environ)
        chosen = textual_constants.COLOR_SYSTEM
        if os.environ.get("TEXTUAL_COLOR_SYSTEM", "auto") == "auto":
            textual_constants.COLOR_SYSTEM = TEXTUAL_COLOR_SYSTEMS[self.color_depth]  # type: ignore[misc]
        try:
            super().__init__(driver_class=driver_class())  # input that cannot end the view (tui/driver.py)
        finally:
            textual_constants.COLOR_SYSTEM = chosen  # type: ignore[misc]
        self.theme = theme
        self.feed = feed
        #: the season shown (season mode only), its folder, and whether this view may write
        self.season: Any = None
        self.season_dir: Path | None = None
        self.read_only = True
        #: an SSH spectator's session (``aoe serve`` sets ``AOE_SPECTATOR=1``)
        self.spectator = os.environ.get("AOE_SPECTATOR") == "1"
        #: ``aoe run``'s engine thread (:class:`~aoe_tui.tui.host.SeasonHost`) or None
        self.host: Any = None
        #: ``aoe watch``'s tailer (:class:`~aoe_tui.tui.watch.SeasonTailer`) or None
        self.tailer: Any = None
        #: wall clock (Unix ms): only the age of a record when first seen; tests freeze it
        self.now_ms: Callable[[], int] = lambda: int(time.time() * 1000)
        #: monotonic clock (s) for the running clocks, season and heats (time since the last
        #: record); tests patch it
        self.monotonic: Callable[[], float] = time.monotonic
        self._host_reported = False
        #: heat key → model
        self.heats: dict[str, HeatModel] = {}
        #: most recently opened heat (the live heat screen follows it)
        self.latest_heat: str | None = None
        self._first_screen: Screen | None = None
        #: :func:`run_in_terminal`'s signal hook: the app's loop once mounted, and the
        #: action for a signal that arrived before it was
        self.signal_loop: asyncio.AbstractEventLoop | None = None
        self.on_signal: Callable[[int], None] | None = None
        self.pending_signals: list[int] = []
        #: warnings found before the app could show them (shown once mounted)
        self._pending_notes: list[str] = []
        self._no_color_filter: Any = None

    # ------------------------------------------------------------------ constructors

    @classmethod
    def replay(cls, loaded: LoadedMatch, *, activity: ActivitySource | None = None, speed: int = 1,
               playing: bool = True, at_sequence: int | None = None, at_end: bool = False,
               theme: str = DARK_THEME) -> AoeApp:
        """An app replaying ``loaded`` (``aoe_tui.replay.matchdir.load_match``).

        Activity: a match folder's ``activity.jsonl`` is replayed line by line at its
        moments (:class:`~aoe_tui.tui.viewmodel.ReplayCursor`); without one, ``activity``
        defaults to ``agents/<id>/activity.log`` of a match folder when present (the last
        lines, shown throughout). ``at_sequence`` / ``at_end`` start paused at that point.
        """
        app = cls(theme=theme)
        source = Path(loaded.source)
        folder = source if source.is_dir() else source.parent if source.name == "events.jsonl" else None
        timed = app._timed_activity(folder) if activity is None and folder is not None else None
        if activity is None and timed is None and folder is not None:
            activity = folder_activity(folder)
        title = None
        if loaded.provenance and isinstance(loaded.provenance, dict):
            title = loaded.provenance.get("match_name") or loaded.provenance.get("name")
        model = HeatModel(ArenaView.from_arena(loaded.arena), title=title or source.name, activity=activity)
        cursor = ReplayCursor(loaded.records, model, timed)
        if at_end:
            cursor.seek_position(cursor.total)
            playing = False
        elif at_sequence is not None:
            cursor.seek_sequence(at_sequence)
            playing = False
        app.heats["replay"] = model
        app.latest_heat = "replay"
        app._first_screen = ReplayScreen(cursor, "replay", speed=speed, playing=playing)
        return app

    @classmethod
    def live(cls, feed: LiveFeed, *, theme: str = DARK_THEME) -> AoeApp:
        """An app following the heats posted to ``feed`` (see :mod:`aoe_tui.tui.live`)."""
        app = cls(feed=feed, theme=theme)
        app._first_screen = HeatScreen(None)
        return app

    @classmethod
    def season_view(cls, feed: LiveFeed, season_dir: Path, *, host: Any = None, tailer: Any = None,
                    read_only: bool = True, theme: str = DARK_THEME) -> AoeApp:
        """An app showing the season whose records arrive through ``feed`` (season screen first).

        ``host``: the ``aoe run`` engine (enables the stop/detach quit dialog; the app
        exits with ``"stop"`` or ``"detach"``, or ``"error"`` when the engine failed; a resumable
        stop, exit status :data:`RESUMABLE_STOP_EXIT`, keeps the view open and says it).
        ``tailer``: polled on the app loop (``aoe watch``; see :meth:`_tail`). ``read_only`` hides
        keys that write into the season folder.
        """
        app = cls(feed=feed, theme=theme)
        app.season = SeasonModel()
        app.season_dir = Path(season_dir)
        app.host = host
        app.tailer = tailer
        app.read_only = read_only
        app._first_screen = SeasonScreen()
        return app

    # ------------------------------------------------------------------ lifecycle

    def on_mount(self) -> None:
        self.signal_loop = asyncio.get_running_loop()
        if self.pending_signals and self.on_signal is not None:
            self.on_signal(self.pending_signals[0])
        self.push_screen(self._first_screen or HeatScreen(None))
        for note in self._pending_notes:
            self.notify(note, severity="warning", timeout=15)
        self._pending_notes.clear()
        self.set_timer(GC_FREEZE_AFTER_S, gc.freeze)
        if self.spectator:  # aoe serve asks for a whole screen when a session joins this view
            import signal

            try:
                asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, self.repaint_all)
            except (ValueError, RuntimeError, NotImplementedError):  # not the main thread (tests)
                pass
        if self.feed is not None:
            self.feed.attach(lambda: self.post_message(RecordsPending()))
            self.post_message(RecordsPending())
            if self.tailer is None:  # a watcher gets activity as records from its tailer
                self.set_interval(ACTIVITY_POLL_S, self._poll_activity)
        if self.tailer is not None:
            self._tail()
        if self.host is not None:
            self.set_interval(0.5, self._check_host)

    def repaint_all(self) -> None:
        """Draw the whole screen again (every row, not only what changed): an SSH spectator
        joining a view that is already on screen needs all of it (:mod:`aoe_tui.serve.views`)."""
        self.screen.refresh()

    def _tail(self) -> None:
        """``aoe watch``: poll the season folder until the app closes, when inotify says a
        file changed (:data:`TAIL_COALESCE_S` later) and every :data:`TAIL_SAFETY_POLL_S`
        seconds, or every :data:`TAIL_POLL_S` seconds without inotify
        (:mod:`aoe_tui.tui.watch`). Polls run on the app's own loop, not a thread: twenty
        spectators sharing one CPU must not pay a thread hand-off per poll."""
        self._tail_reported = 0
        self._tail_soon = None
        self._watch = FolderWatch.open()
        if self._watch is not None:
            asyncio.get_running_loop().add_reader(self._watch.fd, self._tail_woken)
        self._tail_timer = self.set_interval(TAIL_POLL_S if self._watch is None else TAIL_SAFETY_POLL_S,
                                             self._tail_once)
        self._tail_once()

    def _tail_woken(self) -> None:
        """inotify: a watched file changed; poll shortly (once for a burst of writes)."""
        if self._watch is not None and self._watch.drain() and self._tail_soon is None:
            self._tail_soon = self.set_timer(TAIL_COALESCE_S, self._tail_once)

    def _stop_tailing(self) -> None:
        self._tail_timer.stop()
        if self._watch is not None:
            asyncio.get_running_loop().remove_reader(self._watch.fd)
            self._watch.close()
            self._watch = None

    def _tail_once(self) -> None:
        self._tail_soon = None
        try:
            self.tailer.poll()
        except Exception as err:  # a bad season log: say it once, keep the view
            self._stop_tailing()
            self.notify(str(err), severity="error", timeout=30)
            return
        if self._watch is not None:
            self._watch.watch_only(self.tailer.folders())
        for msg in self.tailer.errors[self._tail_reported:]:
            self.notify(msg, severity="warning", timeout=15)
        self._tail_reported = len(self.tailer.errors)

    def _check_host(self) -> None:
        host = self.host
        if host is None or self._host_reported or not host.done:
            return
        self._host_reported = True
        if host.error is not None and getattr(host.error, "exit_code", None) == RESUMABLE_STOP_EXIT:
            # a resumable stop (a knockout waiting on a void heat, a full disk): the view stays,
            # showing where the season stands; q quits and the command says the line again
            self.notify(f"{host.error}. q quits.", title="Season stopped", severity="warning", timeout=30)
        elif host.error is not None:
            self.exit(result="error")
        elif host.state is not None:
            fin = getattr(host.state, "finished", None)
            champs = ", ".join(fin.champions) if fin is not None else ""
            self.notify(f"season finished; champion {champs or 'none'}. q quits.", title="Season finished",
                        timeout=SEASON_FINISHED_NOTIFY_S)

    def on_unmount(self) -> None:
        if self.feed is not None:
            self.feed.attach(None)
        if getattr(self, "_watch", None) is not None:
            self._stop_tailing()

    @on(RecordsPending)
    def _records_pending(self, _msg: RecordsPending) -> None:
        """Drain the feed into the heat models; redraw the current screen once."""
        if self.feed is None:
            return
        season = self.feed.drain_season()
        if season and self.season is not None:
            for rec in season:
                try:
                    self.season.apply(rec)
                except AoeError as err:  # an inconsistent log: say so, keep the view alive
                    self.notify(str(err), severity="error", timeout=30)
                    break
            self.season.seen(self.now_ms(), self.monotonic())  # the season clock runs on from here
        opened, pending = self.feed.drain()
        for h in opened:
            old = self.heats.get(h.key)
            if old is None or old.applied:  # a re-run of an interrupted attempt starts afresh
                self.heats[h.key] = HeatModel(h.arena, title=h.title, activity=h.activity,
                                              season_arena=self.season_arena(h.key))
            else:
                old.arena, old.title, old.activity = h.arena, h.title, h.activity
                old.season_arena = self.season_arena(h.key)
            self.heats[h.key].live = True
            self.latest_heat = h.key
        now = self.monotonic()
        for key, rec in pending:
            model = self.heats.get(key)
            if model is None:
                model = self.heats[key] = HeatModel(title=key, season_arena=self.season_arena(key))
                model.live = True
                self.latest_heat = key
            model.apply(rec)
            model.received_at = now
        written = self.feed.drain_written()
        if written:
            wall_s = self.now_ms() / 1000
            for key, unix_s in written.items():
                if key in self.heats:
                    self.heats[key].set_written_age(wall_s - unix_s, now)
        acts = self.feed.drain_activity()
        for key, act in acts:
            model = self.heats.get(key)
            if model is not None:
                model.apply_activity(act)
        if opened or pending or season or acts:
            self._refresh_current()

    def heat_clock_ms(self, key: str | None, model: HeatModel) -> int:
        """The clock (ms) to show for heat ``key``: ticking between events while the heat is
        live, its match running and — in season mode — the season log shows the attempt
        running (a stopped runner's heat does not tick on); else its last ``elapsed_ms``."""
        if model.ticking() and (self.season is None or key in self.season.running_folders()):
            return model.clock_ms(self.monotonic())
        return int(model.world.elapsed_ms)

    def _poll_activity(self) -> None:
        screen = self.screen
        if isinstance(screen, HeatScreen) and screen.model is not None and screen.model.activity is not None:
            screen.refresh_view()

    def _refresh_current(self) -> None:
        screen = self.screen
        refresh = getattr(screen, "refresh_view", None)
        if refresh is not None:
            with self.batch_update():
                refresh()

    # ------------------------------------------------------------------ season

    def season_arena(self, folder: str) -> str | None:
        """The arena id the season heat of attempt ``folder`` races, in a cup across arenas
        (None otherwise: the heat header then names no arena)."""
        return self.season.heat_arena(folder) if self.season is not None else None

    def season_log_lines(self) -> list[str]:
        """Recent progress lines: the engine's (``aoe run``) or the season log's summary."""
        if self.host is not None:
            return list(self.host.lines)
        return list(self.season.log) if self.season is not None else []

    def open_attempt(self, folder: str) -> None:
        """Open attempt ``folder`` (relative to the season folder): the heat screen when the
        app follows it, else a replay paused at its end loaded from the folder."""
        if folder in self.heats:
            self.push_screen(HeatScreen(folder))
            return
        key = f"replay:{folder}"
        if key not in self.heats:
            path = (self.season_dir or Path(".")) / folder
            if not (path / "events.jsonl").is_file():
                self.notify(f"{folder}: no event log yet (territories are being provisioned)", severity="warning")
                return
            try:
                loaded = load_match(path)
            except AoeError as err:
                self.notify(str(err), severity="error")
                return
            info = self.season.state.info if self.season is not None else None
            timed = self._timed_activity(path)
            model = HeatModel(ArenaView.from_arena(loaded.arena), title=attempt_title(info, folder),
                              activity=folder_activity(path) if timed is None else None,
                              season_arena=self.season_arena(folder))
            cursor = ReplayCursor(loaded.records, model, timed)
            cursor.seek_position(cursor.total)
            self.heats[key] = model
            self._replays[key] = cursor
        self.push_screen(ReplayScreen(self._replays[key], key, playing=False))

    def _timed_activity(self, folder: Path) -> list[Any] | None:
        """The records of ``folder/activity.jsonl`` (None when there is none); a damaged
        file keeps its lines before the damage and says where, once."""
        path = folder / ACTIVITY_FILE
        if not path.is_file():
            return None
        records, problem = read_activity(path)
        if problem is not None and self.is_running:
            self.notify(problem, severity="warning", timeout=15)
        elif problem is not None:
            self._pending_notes.append(problem)
        return records

    @property
    def _replays(self) -> dict[str, ReplayCursor]:
        if not hasattr(self, "_replay_cursors"):
            self._replay_cursors: dict[str, ReplayCursor] = {}
        return self._replay_cursors

    def action_standings(self) -> None:
        """Show the season standings (season mode)."""
        if self.season is None:
            self.notify("standings need a season (aoe run / aoe watch)", severity="warning")
            return
        if not isinstance(self.screen, StandingsScreen):
            self.push_screen(StandingsScreen())

    def action_back(self) -> None:
        """Back to the previous screen (never past the first one)."""
        if len(self.screen_stack) > 2:
            self.pop_screen()

    async def action_quit(self) -> None:
        """Quit; while ``aoe run``'s season is running, ask: stop, detach or cancel."""
        host = self.host
        if host is None or host.done:
            self.exit(result="finished" if host is not None else None)
            return
        if isinstance(self.screen, QuitScreen):
            return

        def chosen(choice: str | None) -> None:
            if choice in ("stop", "detach"):
                self.exit(result=choice)

        self.push_screen(QuitScreen(), chosen)

    async def action_help_quit(self) -> None:
        """Ctrl+C (a key in the TUI's raw terminal, not SIGINT): what ``q`` does, so the
        README's "Ctrl+C stops the season" holds without a stray key stopping a cup: while
        ``aoe run``'s season is running it asks stop, detach or cancel; otherwise the view
        closes. (Textual's own binding only showed "Press ctrl+q to quit".)"""
        await self.action_quit()

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        """Season keys only exist in season mode."""
        if action in ("standings", "back"):
            return self.season is not None
        return True

    # ------------------------------------------------------------------ actions

    def action_help(self) -> None:
        """Show the key reference."""
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_toggle_theme(self) -> None:
        """Switch between the dark and the light theme."""
        self.theme = LIGHT_THEME if self.theme == DARK_THEME else DARK_THEME

    def get_line_filters(self):  # type: ignore[override]
        """Textual's filters; without colour (``color_depth == "none"``) every colour is dropped
        (Textual's own ``NO_COLOR`` filter only turns colours grey, still sent as truecolor)."""
        filters = super().get_line_filters()
        if self.color_depth != "none":
            return filters
        from textual.filter import Monochrome, NoColor

        if self._no_color_filter is None:
            self._no_color_filter = NoColor()
        return [f for f in filters if not isinstance(f, Monochrome)] + [self._no_color_filter]

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """Command palette entries: ours first, then Textual's."""
        yield SystemCommand("Help", "Show the key reference", self.action_help)
        yield SystemCommand("Toggle theme", "Switch dark / light", self.action_toggle_theme)
        if isinstance(screen, ReplayScreen):
            yield SystemCommand("Play / pause", "Start or stop the replay", screen.action_toggle_play)
            yield SystemCommand("Go to sequence", "Scrub to an event sequence number", screen.action_goto)
            yield SystemCommand("Jump to end", "Show the final state", screen.action_end)
            yield SystemCommand("Jump to start", "Back to the first event", screen.action_start)
        for cmd in super().get_system_commands(screen):
            if cmd.title.lower() in ("theme", "change theme"):
                continue
            if cmd.title == "Screenshot" and self.spectator:
                continue  # it would be saved on the server, out of the spectator's reach
            yield cmd


def run_in_terminal(app: AoeApp, *, on_stop: Any = None, on_hangup: Any = None) -> tuple[Any, str | None]:
    """Run ``app`` in this process's terminal (``app.run()``) so that every stop signal ends
    it through Textual's normal exit path, which restores the terminal (alternate screen
    off, mouse reporting off, cursor shown):

    * SIGINT, SIGTERM: ``app.exit(result=on_stop)``;
    * SIGHUP (the terminal closed): fds 0-2 leave the dead terminal first
      (:func:`aoe_tui.signals.release_terminal`: output to ``/dev/null``, so neither EIO nor
      a full output queue can hang or kill the exit), then ``app.exit(result=on_hangup)``.

    A terminal that is gone without a SIGHUP reaching the view (no controlling terminal,
    SIGHUP ignored) or that stopped reading cannot hang the exit either: a SIGINT/SIGTERM
    that finds the terminal hung up (:func:`aoe_tui.signals.terminal_gone`: EIO/ENXIO)
    leaves it first, as a SIGHUP does (only the descriptors that hold it:
    :func:`aoe_tui.signals.leave_gone_terminal`); after any of these signals the terminal has
    :data:`STOP_OUTPUT_S` seconds to take the output (a live PTY whose reader stopped), then
    it is left as after a hangup (:meth:`aoe_tui.tui.driver.GuardedDriver.bound_output`);
    an EIO on output leaves it at once.

    A stdin that is not a terminal (``< /dev/null``, a closed pipe) is read to its end and
    then left alone by :class:`aoe_tui.tui.driver.GuardedDriver`, so the view idles.
    Returns ``(result, signal name or None)``; the first signal decides, later ones are
    only noted. Main thread only; the previous handlers (also of SIGTSTP and SIGCONT,
    which Textual's driver sets) are restored on return."""
    import signal

    from aoe_tui.signals import STOP_SIGNALS, leave_gone_terminal

    got: list[int] = []

    def act(signum: int) -> None:
        app.exit(result=on_hangup if signum == signal.SIGHUP else on_stop)

    def handler(signum: int, _frame: object) -> None:
        leave_gone_terminal(signum)  # a SIGHUP, or a terminal hung up without a SIGHUP reaching us
        bound = getattr(getattr(app, "_driver", None), "bound_output", None)
        if bound is not None:  # the app's loop may be waiting on a full output queue
            bound(STOP_OUTPUT_S)
        if got:
            return
        got.append(signum)
        app.pending_signals.append(signum)
        loop = app.signal_loop
        if loop is not None:
            try:
                loop.call_soon_threadsafe(act, signum)
            except RuntimeError:  # the app's loop already closed: it is exiting anyway
                pass

    app.on_signal = act
    # Textual's driver installs SIGTSTP/SIGCONT handlers and leaves them after the app
    # exits; a later SIGCONT (the kernel sends one with a hangup) would then try to
    # re-enter application mode without a loop. They are put back as they were.
    kept = {sig: signal.getsignal(sig) for sig in (signal.SIGTSTP, signal.SIGCONT)}
    old = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    try:
        result = app.run()
    finally:
        for sig, h in {**old, **kept}.items():
            signal.signal(sig, h)
    return result, (signal.Signals(got[0]).name if got else None)


def watch_app(season_dir: Path, theme: str | None = None, *, follow: bool = True):
    """The ``aoe watch`` app: catch up from ``season_dir`` now (raises :class:`AoeError`
    on a missing or bad ``season.jsonl``), then follow it every 0.25 s when ``follow``."""
    season_dir = Path(season_dir)
    if not (season_dir / "season.jsonl").is_file():
        raise AoeError(f"{season_dir}: not a season folder (no season.jsonl)")
    feed = LiveFeed()
    tailer = SeasonTailer(season_dir, feed)
    tailer.poll()
    return AoeApp.season_view(feed, season_dir, tailer=tailer if follow else None, read_only=True,
                              theme=theme or DARK_THEME)
