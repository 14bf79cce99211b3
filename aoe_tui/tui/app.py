"""The ``aoe`` Textual application (replay, live heats, season watch).

Construct it with one of the class methods:

* :meth:`AoeApp.replay` — a loaded match (``aoe replay PATH``);
* :meth:`AoeApp.live` — a :class:`~aoe_tui.tui.live.LiveFeed` the engine posts to.

The app owns one :class:`~aoe_tui.tui.viewmodel.HeatModel` per heat
(``app.heats``), advanced incrementally. Records arrive through the feed as a
coalescing :class:`~aoe_tui.tui.live.RecordsPending` message; the handler
drains everything queued, applies it, and asks the *current* screen to redraw
once inside ``batch_update``. Nothing the engine does waits for the UI.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from textual import on
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.screen import Screen

from aoe_tui.replay.matchdir import LoadedMatch
from aoe_tui.tui.live import LiveFeed, RecordsPending
from aoe_tui.tui.screens import HeatScreen, HelpScreen, ReplayScreen
from aoe_tui.tui.viewmodel import ActivitySource, ArenaInfo, HeatModel, ReplayCursor, folder_activity

DARK_THEME = "textual-dark"
LIGHT_THEME = "textual-light"
#: how often live heat screens re-read agent activity (s)
ACTIVITY_POLL_S = 0.5


class AoeApp(App):
    """aoe-tui's single Textual app; see the module docstring for the modes."""

    CSS_PATH = "aoe.tcss"
    TITLE = "aoe"
    ENABLE_COMMAND_PALETTE = True

    BINDINGS = [
        Binding("question_mark,f1", "help", "Help", key_display="?"),
        Binding("t", "toggle_theme", "Theme"),
        Binding("q", "quit", "Quit"),
    ]

    def __init__(self, *, feed: LiveFeed | None = None, theme: str = DARK_THEME) -> None:
        super().__init__()
        self.theme = theme
        self.feed = feed
        #: heat key → model
        self.heats: dict[str, HeatModel] = {}
        #: most recently opened heat (the live heat screen follows it)
        self.latest_heat: str | None = None
        self._first_screen: Screen | None = None

    # ------------------------------------------------------------------ constructors

    @classmethod
    def replay(cls, loaded: LoadedMatch, *, activity: ActivitySource | None = None, speed: int = 1,
               playing: bool = True, at_sequence: int | None = None, at_end: bool = False,
               theme: str = DARK_THEME) -> AoeApp:
        """An app replaying ``loaded`` (``aoe_tui.replay.matchdir.load_match``).

        ``activity`` defaults to ``agents/<id>/activity.log`` of a match folder when
        present. ``at_sequence`` / ``at_end`` start paused at that point.
        """
        app = cls(theme=theme)
        source = Path(loaded.source)
        if activity is None and source.is_dir():
            activity = folder_activity(source)
        elif activity is None and source.name == "events.jsonl":
            activity = folder_activity(source.parent)
        title = None
        if loaded.provenance and isinstance(loaded.provenance, dict):
            title = loaded.provenance.get("match_name") or loaded.provenance.get("name")
        model = HeatModel(ArenaInfo.from_arena(loaded.arena), title=title or source.name, activity=activity)
        cursor = ReplayCursor(loaded.records, model)
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

    # ------------------------------------------------------------------ lifecycle

    def on_mount(self) -> None:
        self.push_screen(self._first_screen or HeatScreen(None))
        if self.feed is not None:
            self.feed.attach(lambda: self.post_message(RecordsPending()))
            self.post_message(RecordsPending())
            self.set_interval(ACTIVITY_POLL_S, self._poll_activity)

    def on_unmount(self) -> None:
        if self.feed is not None:
            self.feed.attach(None)

    @on(RecordsPending)
    def _records_pending(self, _msg: RecordsPending) -> None:
        """Drain the feed into the heat models; redraw the current screen once."""
        if self.feed is None:
            return
        opened, pending = self.feed.drain()
        for h in opened:
            if h.key not in self.heats:
                self.heats[h.key] = HeatModel(h.arena, title=h.title, activity=h.activity)
            self.latest_heat = h.key
        for key, rec in pending:
            model = self.heats.get(key)
            if model is None:
                model = self.heats[key] = HeatModel(title=key)
                self.latest_heat = key
            model.apply(rec)
        if opened or pending:
            self._refresh_current()

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

    # ------------------------------------------------------------------ actions

    def action_help(self) -> None:
        """Show the key reference."""
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_toggle_theme(self) -> None:
        """Switch between the dark and the light theme."""
        self.theme = LIGHT_THEME if self.theme == DARK_THEME else DARK_THEME

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
            yield cmd
