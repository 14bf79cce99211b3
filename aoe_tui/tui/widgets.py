"""Heat-view widgets: territory panel, event feed, winner banner, header and replay bar.

Widgets only format view-models (:mod:`aoe_tui.tui.viewmodel`); they never read
files or events. Each ``show_*`` method skips the redraw when its input did not
change, so a refresh of an unchanged heat costs a few comparisons.
"""

from __future__ import annotations

from rich.cells import cell_len
from rich.text import Text
from textual.visual import visualize
from textual.widget import Widget
from textual.widgets import Static

from aoe_tui.tui.viewmodel import (
    FeedEntry,
    HeatModel,
    PanelView,
    fmt_clock,
    fmt_cost,
    fmt_tokens,
)

_STATUS_GLYPH = {"passed": "✓", "failed": "✗", "evaluating": "…", "pending": "·"}
_STATUS_STYLE = {"passed": "bold green", "failed": "red", "evaluating": "yellow", "pending": "dim"}
_FEED_STYLE = {
    "good": "green", "bad": "red", "warn": "yellow", "state": "cyan", "dim": "dim", "win": "bold magenta",
}
_STATE_STYLE = {
    "durable": "bold green", "verifying": "yellow", "building": "cyan", "preparing": "dim",
    "incomplete": "red", "unavailable": "red", "healthy": "green", "degraded": "yellow",
    "recovering": "yellow", "eliminated": "red", "provisioning": "dim",
}


def fmt_wait(ms: int) -> str:
    """A short duration for waits shown in panels: ``12s``, ``3m05s``, ``1h02m`` (from **ms**)."""
    s = max(0, int(ms)) // 1000
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def evaluating_hint(milestone: str) -> str:
    """What a long evaluation of ``milestone`` usually means (empty when nothing to add)."""
    m = milestone.lower()
    if "reboot" in m:
        return "rebooting / verifying"
    if "restart" in m:
        return "restarting / verifying"
    return ""


def render_panel(pv: PanelView, width: int = 40) -> Text:
    """Rich text body of one territory panel (title/subtitle are set on the border)."""
    t = Text(no_wrap=False, overflow="fold")
    t.append("agent ", style="dim")
    t.append(pv.agent or "n/a", style="bold")
    t.append("  adapter ", style="dim")
    t.append(pv.adapter or "n/a")
    t.append("\nmodel ", style="dim")
    t.append(pv.model or "n/a")
    t.append("\neffort ", style="dim")
    t.append(pv.effort or "n/a")
    t.append("  points ", style="dim")
    t.append(str(pv.points), style="bold")
    state = pv.competitor_state or pv.territory_state
    t.append("\nstate ", style="dim")
    t.append(f"{pv.marker} {state}".strip(), style=_STATE_STYLE.get(state, ""))
    if pv.durable_at_ms is not None:
        t.append(f" at {fmt_clock(pv.durable_at_ms)}", style="green")
    if pv.health is not None:
        t.append("\nhealth ", style="dim")
        t.append(pv.health, style="green" if pv.health.startswith("up") else "red")
    if pv.resources is not None:
        t.append("  resources ", style="dim")
        t.append(str(pv.resources))
    if pv.ladder:
        for row in pv.ladder:
            style = _STATUS_STYLE[row.status]
            t.append(f"\n{_STATUS_GLYPH[row.status]} ", style=style)
            t.append(row.label, style=style if row.status != "pending" else "dim")
            if row.status == "passed":
                t.append(f" +{row.points}" if row.points is not None else "", style="green")
                t.append(f" {fmt_clock(row.passed_ms)}", style="green")
            elif row.status == "evaluating":
                t.append(" evaluating", style="yellow")
                if row.evaluating_ms is not None:
                    t.append(f" {fmt_wait(row.evaluating_ms)}", style="bold yellow")
                    hint = evaluating_hint(row.id) if row.evaluating_ms >= 5000 else ""
                    if hint:
                        t.append(f" ({hint})", style="yellow dim")
            elif row.status == "failed":
                t.append(f" failed ×{row.failures}" if row.failures > 1 else " failed", style="red")
            if row.status in ("failed", "evaluating") and row.detail:
                t.append(f"\n  {row.detail}", style="red dim" if row.status == "evaluating" else "red")
    elif pv.competitor_state is not None:
        t.append("\nno milestone evaluated yet", style="dim")
    t.append("\ntokens ", style="dim")
    if pv.tokens_in is None:
        t.append("n/a")
    else:
        t.append(f"{fmt_tokens(pv.tokens_in)} in / {fmt_tokens(pv.tokens_out)} out")
    t.append("  cost ", style="dim")
    t.append(fmt_cost(pv.cost_microusd))
    t.append("\nagent ", style="dim")
    t.append(pv.agent_state, style="green" if pv.agent_state in ("running", "completed") else "")
    t.append("\n── activity", style="dim")
    if pv.activity:
        for line in pv.activity:  # already one sanitized line each; appended as plain text, never markup
            t.append("\n")
            t.append(line, style="italic")
    else:
        t.append("\nno activity", style="dim italic")
    return t


def _same(a: Text, b: Text) -> bool:
    """Whether ``a`` and ``b`` draw the same (text, spans, base style, wrapping)."""
    return (a.plain == b.plain and a.spans == b.spans and a.style == b.style and a.no_wrap == b.no_wrap
            and a.overflow == b.overflow and a.justify == b.justify)


def _shape_of(text: Text) -> tuple[int, ...]:
    """Cell width of each line of ``text``."""
    return tuple(cell_len(line) for line in text.plain.split("\n"))


class TextView(Widget):
    """A widget showing one Rich ``Text``; re-layouts only when its line shape changes.

    ``Static.update`` always asks for a full layout pass; live panels change many
    times a second but rarely change height, so this repaints just the widget.
    """

    def __init__(self, text: str | Text = "", **kwargs) -> None:
        super().__init__(**kwargs)
        self._text = Text(text) if isinstance(text, str) else text
        self._shape: tuple[int, ...] = _shape_of(self._text)

    def render(self) -> Text:
        return self._text

    @property
    def text(self) -> Text:
        """The text currently shown."""
        return self._text

    def set_text(self, text: str | Text) -> None:
        """Show ``text`` (a no-op when it is what is shown). Layout is recomputed only when
        its shape can change the widget's size: another line count, or other line widths
        on an auto-width widget or where a line is (or was) wider than the widget and so
        may wrap differently."""
        text = Text(text) if isinstance(text, str) else text
        if _same(text, self._text):
            return  # nothing to redraw
        shape = _shape_of(text)
        relayout = shape != self._shape and self._resizes(text, shape)
        self._text, self._shape = text, shape
        self.refresh(layout=relayout)

    def _resizes(self, text: Text, shape: tuple[int, ...]) -> bool:
        if len(shape) != len(self._shape):
            return True
        width = self.styles.width
        if width is not None and width.is_auto:
            return True
        room = self.content_size.width
        if room <= 0:
            return True
        if max(shape + self._shape, default=0) <= room:
            return False  # nothing wraps, before or after
        # a line wraps: only a different wrapped height changes the layout
        return self._wrapped_height(text, room) != self._wrapped_height(self._text, room)

    def _wrapped_height(self, text: Text, room: int) -> int:
        return visualize(self, text, markup=False).get_height(self.styles, room)


class TerritoryPanel(TextView):
    """One territory of a heat: entrant, adapter, model, state, ladder, usage, activity.

    Its height never shrinks while it shows a heat (a line that goes away, such as an
    evaluating milestone's detail, leaves a blank line): the panels do not jump, and
    a running heat re-lays out the screen only when a panel grows — a layout costs
    every spectator a full-screen redraw.
    """

    can_focus = True

    def __init__(self, territory: str, **kwargs) -> None:
        super().__init__("", id=f"panel-{territory}", classes="territory-panel", **kwargs)
        self.territory = territory
        self._shown: PanelView | None = None
        self._rows = 0
        self.border_title = territory

    def show_panel(self, pv: PanelView) -> None:
        """Redraw from ``pv`` unless it equals what is already shown."""
        if pv == self._shown:
            return
        self._shown = pv
        self.border_title = f"{pv.marker} {pv.territory}".strip()
        self.border_subtitle = f"{pv.points} pts"
        self.set_class(pv.winner, "-winner")
        self.set_class(pv.competitor_state == "durable", "-durable")
        text = render_panel(pv)
        rows = text.plain.count("\n") + 1
        if rows < self._rows:
            text.append("\n" * (self._rows - rows))
        self._rows = max(self._rows, rows)
        self.set_text(text)


class EventFeed(TextView):
    """The heat's explained event feed: newest last, as many lines as fit."""

    def __init__(self, **kwargs) -> None:
        super().__init__("", **kwargs)
        self._shown: tuple[int, int] | None = None
        self._model: HeatModel | None = None
        self.border_title = "events"

    def show_feed(self, model: HeatModel) -> None:
        """Redraw from ``model.feed`` when the model or the height changed."""
        self._model = model
        lines = max(1, self.content_region.height or 8)
        key = (model.version, lines)
        if key == self._shown:
            return
        self._shown = key
        entries: list[FeedEntry] = list(model.feed)[-lines:]
        t = Text(no_wrap=True, overflow="ellipsis")
        if not entries:
            t.append("(no events)", style="dim")
        for i, e in enumerate(entries):
            if i:
                t.append("\n")
            t.append(f"{fmt_clock(e.elapsed_ms)} ", style="dim")
            t.append(f"#{e.sequence:<4} ", style="dim")
            t.append(e.text, style=_FEED_STYLE.get(e.style, ""))
        self._text = t
        self.refresh()  # fixed height: never needs a layout pass

    def on_resize(self) -> None:
        """Re-fit the number of lines to the new height."""
        self._shown = None
        if self._model is not None:
            self.show_feed(self._model)


class WinnerBanner(Static):
    """Shown once the heat finished: winner, points, durable time and reason."""

    def show_winner(self, line: str | None) -> None:
        """Show ``line`` (or hide the banner when None)."""
        self.display = line is not None
        if line is not None and str(self.content) != line:
            self.update(line)


class HeatHeader(TextView):
    """One line, most important first: clock/duration, match state, the §3.6 leader, then
    the heat title (cut first on narrow terminals)."""

    def show_header(self, model: HeatModel, clock_ms: int | None = None) -> None:
        """Redraw from ``model`` (world state, title, arena name); ``clock_ms`` overrides the
        clock shown (a live heat's ticking :meth:`HeatModel.clock_ms`, ms)."""
        w = model.world
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append(fmt_clock(w.elapsed_ms if clock_ms is None else clock_ms), style="bold")
        if model.arena.duration_s:
            t.append(f"/{fmt_clock(model.arena.duration_s * 1000)}", style="dim")
        t.append("  ")
        t.append(w.match_state.value, style=_STATE_STYLE.get(w.match_state.value, "bold"))
        if w.match_state.value == "running":
            lead = model.leader()
            t.append("  leader ", style="dim")
            t.append(lead or "tied")
        t.append("  ")
        t.append(model.title or model.arena.name or "heat", style="bold")
        if t.plain == self._text.plain and t.spans == self._text.spans:
            return
        self._text = t
        self.refresh()


class ReplayBar(TextView):
    """Replay transport: play state, speed, position (records/sequence) and clock."""

    def show_state(self, playing: bool, speed: int, position: int, total: int,
                   last_sequence: int | None, clock_ms: int) -> None:
        """Redraw the transport line."""
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append("▶ playing" if playing else "■ paused", style="bold green" if playing else "bold yellow")
        t.append(f"  ×{speed}", style="bold")
        seq = "-" if last_sequence is None else str(last_sequence)
        t.append(f"  seq {seq}  ({position}/{total} events)")
        t.append(f"  {fmt_clock(clock_ms)}", style="dim")
        if total and position >= total:
            t.append("  end", style="dim")
        self._text = t
        self.refresh()


_LADDER_GLYPH = {"passed": "✓", "failed": "✗", "evaluating": "…", "pending": "·"}


def render_scoreboard(views: list[PanelView]) -> Text:
    """Compact one-line-per-territory summary (upstream §8.2 compact layout, plus ladder glyphs)."""
    t = Text(no_wrap=True, overflow="ellipsis")
    wid = max((len(v.territory) for v in views), default=8)
    wag = max((len(v.agent or "n/a") for v in views), default=3)
    for i, v in enumerate(views):
        if i:
            t.append("\n")
        state = v.competitor_state or v.territory_state
        style = _STATE_STYLE.get(state, "")
        t.append(f"{v.marker or '   '} ", style=style)
        t.append(f"{v.territory:<{wid}} ", style="bold" if v.winner else "")
        t.append(f"{(v.agent or 'n/a'):<{wag}} ", style="dim")
        for row in v.ladder:
            t.append(_LADDER_GLYPH[row.status], style=_STATUS_STYLE[row.status])
        t.append(f" {v.points:>3} pts ", style="bold")
        t.append(f"{state:<10}", style=style)
        tok = "n/a" if v.tokens_in is None else f"{fmt_tokens(v.tokens_in)}/{fmt_tokens(v.tokens_out)}"
        t.append(f" {fmt_cost(v.cost_microusd)} tok {tok}", style="dim")  # cost first: tokens may be cut
    return t


class Scoreboard(TextView):
    """All territories of the heat, one line each (shown on narrow terminals)."""

    def show_views(self, views: list[PanelView]) -> None:
        """Redraw from the panel views (skips when unchanged)."""
        key = tuple(views)
        if getattr(self, "_shown", None) == key:
            return
        self._shown = key
        self.set_text(render_scoreboard(views))
