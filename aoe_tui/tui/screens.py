"""Screens: heat (live), replay, help and the go-to-sequence prompt.

Screens render reduced state only (a :class:`~aoe_tui.tui.viewmodel.HeatModel`
held by the app). :meth:`HeatScreen.refresh_view` is cheap when nothing changed
and does nothing while the screen is not the current one; a resumed screen
redraws once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Footer, Input, Static

from aoe_tui.tui.viewmodel import HeatFrame, HeatModel, ReplayCursor
from aoe_tui.tui.widgets import EventFeed, HeatHeader, HeatPanel, ReplayBar, Scoreboard, TerritoryPanels, WinnerBanner

if TYPE_CHECKING:  # pragma: no cover
    from aoe_tui.tui.viewapp import ViewApp

#: replay speeds (multiples of match time)
SPEEDS: tuple[int, ...] = (1, 2, 5, 10, 25, 50, 100)
#: replay frame interval (s)
FRAME_S = 1 / 30
#: the clock timer fires this long (s) after the shown second changed (so that it never
#: wakes a moment early and finds the same second)
CLOCK_SLACK_S = 0.005


class HeatScreen(Screen):
    """Three (or N) territory panels, the explained event feed and a winner banner.

    ``heat`` names a model in ``app.heats``; None follows the most recently opened
    heat (the live default). While the heat is live and running, a one-shot timer set
    for the moment the shown clock (:meth:`HeatModel.clock_ms`, whole seconds) reaches
    its next second redraws the clock and the "evaluating Ns" times, and sets the next
    one; a new event sets it again (the clock snaps to the log). So a spectator wakes
    once a second for the clock, and never while the screen is hidden; the timer never
    touches the model.

    Panels: every composed widget that is a :class:`~aoe_tui.tui.widgets.HeatPanel` is
    redrawn by :meth:`_show` from one :class:`~aoe_tui.tui.viewmodel.HeatFrame` (those with
    ``TICKS`` on the clock tick too); a new panel is its class plus one line in
    :meth:`compose`.
    """

    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (100, "-wide")]

    BINDINGS = [
        Binding("tab", "app.focus_next", "Next panel", show=False),
    ]

    def __init__(self, heat: str | None = None, *, name: str | None = None) -> None:
        super().__init__(name=name)
        self.heat = heat
        self._drawn_version = -1
        self._drawn_activity: tuple[int, int] = (-1, -1)
        self._drawn_heat: str | None = None
        self._clock_timer = None
        #: (model version, clock second) the clock timer last drew
        self._ticked: tuple[int, int] | None = None
        self._heat_panels: list[HeatPanel] | None = None

    @property
    def model(self) -> HeatModel | None:
        """The heat model shown (None until the engine opened a heat)."""
        app: ViewApp = self.app  # type: ignore[assignment]
        key = self.heat or app.latest_heat
        return app.heats.get(key) if key else None

    def compose(self) -> ComposeResult:
        yield HeatHeader(id="heat-header")
        yield WinnerBanner(id="winner")
        yield Scoreboard(id="scoreboard")
        with VerticalScroll(id="heat-body"):
            yield TerritoryPanels(id="panels")
            yield EventFeed(id="feed")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#winner", WinnerBanner).display = False
        self.refresh_view(force=True)

    def on_screen_suspend(self) -> None:
        """Hidden screens do no work: stop the clock timer."""
        self._stop_clock()

    def on_screen_resume(self) -> None:
        """Redraw once when this screen becomes current again (and set the clock timer)."""
        self.refresh_view(force=True)

    def _stop_clock(self) -> None:
        if self._clock_timer is not None:
            self._clock_timer.stop()
            self._clock_timer = None

    def _on_top(self) -> bool:
        """This screen is the app's top screen. Textual's ``is_current`` is also true under a
        modal (help, goto): the clock does not tick there (hidden screens do no work)."""
        try:
            return self.app.screen is self
        except Exception:  # noqa: BLE001 - no screen stack (shutting down)
            return False

    def _set_clock(self, model: HeatModel | None, clock: int) -> None:
        """Wake when the shown clock ``clock`` (ms) reaches its next second, while ``model``
        ticks (a live running heat; never for a replay) and this screen is on top (a tick
        already queued when a modal opened, or records drawn under it, set no timer)."""
        self._stop_clock()
        if model is not None and model.ticking() and not isinstance(self, ReplayScreen) and self._on_top():
            self._clock_timer = self.set_timer((1000 - clock % 1000) / 1000 + CLOCK_SLACK_S, self._tick_clock)

    def clock_ms(self, model: HeatModel) -> int:
        """The clock to show for ``model`` (ms): ticking for a live running heat."""
        return self.app.heat_clock_ms(self.heat or self.app.latest_heat, model)  # type: ignore[attr-defined]

    def _tick_clock(self) -> None:
        """Redraw the header clock and evaluating times of a ticking heat (cheap: no model
        work), then set the timer for the next second."""
        self._clock_timer = None
        if not self._on_top() or not self.is_mounted:
            return
        model = self.model
        if model is None or not model.ticking() or self._drawn_version < 0:
            return
        clock = self.clock_ms(model)
        self._set_clock(model, clock)
        shown = (model.version, clock // 1000)
        if shown == self._ticked:
            return  # the clock shows whole seconds: nothing to redraw before the next one
        self._ticked = shown
        with self.app.batch_update():
            self._show(HeatFrame(model, clock, self._drawn_heat), ticking=True)

    def refresh_view(self, force: bool = False) -> None:
        """Sync widgets with the model; no-op when hidden or unchanged."""
        if not self.is_current or not self.is_mounted:
            return
        model = self.model
        if model is None:
            self.query_one("#heat-header", HeatHeader).set_text("waiting for the first heat…")
            return
        key = self.heat or self.app.latest_heat  # type: ignore[attr-defined]
        drawn = (model.version, model.activity_version)
        if not force and drawn == self._drawn_activity and key == self._drawn_heat and model.activity is None:
            return
        self._drawn_version = model.version
        self._drawn_activity = drawn
        with self.app.batch_update():
            self._drawn_heat = key
            clock = self.clock_ms(model)
            self._set_clock(model, clock)
            self._ticked = (model.version, clock // 1000)
            self._show(HeatFrame(model, clock, key))

    def _show(self, frame: HeatFrame, ticking: bool = False) -> None:
        """Redraw every heat panel from ``frame`` (``ticking``: only those with ``TICKS``)."""
        if self._heat_panels is None:  # composed once: find the panels once
            self._heat_panels = [w for w in self.walk_children() if isinstance(w, HeatPanel)]
        for panel in self._heat_panels:
            if panel.TICKS or not ticking:
                panel.show(frame)


class ReplayScreen(HeatScreen):
    """The heat screen plus a transport: play/pause, speed ×1…×100, step, scrub."""

    BINDINGS = [
        Binding("space", "toggle_play", "Play/Pause"),
        Binding("right", "step", "Step", priority=True),
        Binding("left", "step_back", "Back", priority=True),
        Binding("plus,equals_sign", "faster", "Faster", key_display="+"),
        Binding("minus", "slower", "Slower", key_display="-"),
        Binding("g", "goto", "Go to seq"),
        Binding("home", "start", "Start", show=False, priority=True),
        Binding("end", "end", "End", show=False, priority=True),
    ]

    def __init__(self, cursor: ReplayCursor, heat: str, *, speed: int = 1, playing: bool = True) -> None:
        super().__init__(heat)
        self.cursor = cursor
        self.speed = speed if speed in SPEEDS else min(SPEEDS, key=lambda s: abs(s - speed))
        self.playing = playing
        self._timer = None

    def compose(self) -> ComposeResult:
        yield ReplayBar(id="replay-bar")
        yield from super().compose()

    def on_mount(self) -> None:
        super().on_mount()
        self._timer = self.set_interval(FRAME_S, self._tick, pause=not self.playing)
        self._show_bar()

    def on_screen_suspend(self) -> None:
        """Hidden screens do no work: stop the playback timer."""
        if self._timer is not None:
            self._timer.pause()

    def on_screen_resume(self) -> None:
        if self._timer is not None and self.playing and not self.cursor.at_end:
            self._timer.resume()
        super().on_screen_resume()

    # ------------------------------------------------------------------ playback

    def _tick(self) -> None:
        if not self.playing:
            return
        self.cursor.advance_time(FRAME_S * 1000 * self.speed)
        if self.cursor.at_end:
            self._set_playing(False)
        self.refresh_view()
        self._show_bar()

    def _set_playing(self, playing: bool) -> None:
        self.playing = playing
        if self._timer is not None:
            (self._timer.resume if playing else self._timer.pause)()
        self._show_bar()

    def _show_bar(self) -> None:
        c = self.cursor
        self.query_one("#replay-bar", ReplayBar).show_state(
            self.playing, self.speed, c.position, c.total, c.last_sequence, int(c.model.world.elapsed_ms)
        )

    def _moved(self) -> None:
        self.refresh_view(force=True)
        self._show_bar()

    def action_toggle_play(self) -> None:
        """Play/pause; playing from the end restarts from the beginning."""
        if not self.playing and self.cursor.at_end:
            self.cursor.seek_position(0)
            self._moved()
        self._set_playing(not self.playing)

    def action_step(self) -> None:
        """Pause and apply exactly one more record."""
        self._set_playing(False)
        self.cursor.step(1)
        self._moved()

    def action_step_back(self) -> None:
        """Pause and undo the last record."""
        self._set_playing(False)
        self.cursor.step_back()
        self._moved()

    def action_faster(self) -> None:
        """Next speed up (×1, ×2, ×5, ×10, ×25, ×50, ×100)."""
        i = SPEEDS.index(self.speed)
        self.speed = SPEEDS[min(len(SPEEDS) - 1, i + 1)]
        self._show_bar()

    def action_slower(self) -> None:
        """Next speed down."""
        i = SPEEDS.index(self.speed)
        self.speed = SPEEDS[max(0, i - 1)]
        self._show_bar()

    def action_start(self) -> None:
        """Pause at sequence -1 (nothing applied)."""
        self._set_playing(False)
        self.cursor.seek_position(0)
        self._moved()

    def action_end(self) -> None:
        """Jump to the last record and pause."""
        self._set_playing(False)
        self.cursor.seek_position(self.cursor.total)
        self._moved()

    def action_goto(self) -> None:
        """Ask for a sequence number and scrub to it."""

        def done(value: int | None) -> None:
            if value is not None:
                self.seek_sequence(value)

        self.app.push_screen(GotoScreen(self.cursor.total), done)

    def seek_sequence(self, sequence: int) -> None:
        """Pause and scrub so that ``sequence`` is the last applied record."""
        self._set_playing(False)
        self.cursor.seek_sequence(sequence)
        self._moved()


class GotoScreen(ModalScreen[int | None]):
    """Prompt for a sequence number; dismisses with the int or None (escape)."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, total: int) -> None:
        super().__init__()
        self.total = total

    def compose(self) -> ComposeResult:
        with Vertical(id="goto-box"):
            yield Static(f"Go to sequence (0–{max(0, self.total - 1)}):")
            yield Input(placeholder="sequence number", id="goto-input", type="integer")
            yield Static("", id="goto-error")

    @on(Input.Submitted, "#goto-input")
    def _submitted(self, event: Input.Submitted) -> None:
        try:
            value = int(event.value)
        except ValueError:
            self.query_one("#goto-error", Static).update("enter a whole number")
            return
        self.dismiss(value)

    def action_cancel(self) -> None:
        """Close without scrubbing."""
        self.dismiss(None)


_HELP = """\
[b]aoe — keys[/b]

[b]Everywhere[/b]
  ?  / f1      this help            t        dark / light theme
  ctrl+p       command palette      q        quit
  tab          next panel           ↑ ↓ pgup pgdn  scroll

[b]Replay[/b]
  space        play / pause         → / ←    step one event / back
  + / -        speed ×1 … ×100      g        go to a sequence number
  home / end   first / last event

[b]Season[/b] (aoe run / aoe watch / aoe demo)
  enter        open heat / attempt  s        standings
  escape       back                 q        {quit}
[b]Standings[/b]
  p w d r      points wins durable rating   m k c    median tokens cost
  o            official order       e        {export}
{arenas}
Markers: \\[+] durable  \\[~] verifying  \\[>] building  \\[x] incomplete  \\[?] unavailable
Ladder:  ✓ passed (points, time)  … evaluating  ✗ failed (last detail)  · pending
         ⊘ killed at the finish (still checking): not evaluated
Tokens and cost show n/a when the adapter reported no usage values.
"""


_ARENAS_HELP = "  a            per-arena breakdown (a cup across arenas)\n"


def help_text(read_only: bool, multi_arena: bool = False) -> str:
    """The key reference; a read-only view (replay, ``aoe watch``, SSH spectators) lists
    ``q`` as plain quit and ``e`` as not available there; ``multi_arena`` (a cup across
    arenas) adds the standings' ``a`` key."""
    arenas = _ARENAS_HELP if multi_arena else ""
    if read_only:
        return _HELP.format(quit="quit", export="export (aoe run only)", arenas=arenas)
    return _HELP.format(quit="quit: stop or detach", export="export to the season folder", arenas=arenas)


class HelpScreen(ModalScreen[None]):
    """Key reference (:func:`help_text`); any of escape, q, ? or f1 closes it."""

    BINDINGS = [
        Binding("escape,q,question_mark,f1", "close", "Close"),
    ]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box"):
            season = getattr(self.app, "season", None)
            multi = season is not None and season.state.multi_arena
            yield Static(help_text(getattr(self.app, "read_only", True), multi), id="help-text")

    def action_close(self) -> None:
        """Close the help screen."""
        self.dismiss(None)
