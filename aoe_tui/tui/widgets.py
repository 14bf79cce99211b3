"""Heat-view widgets: territory panel, event feed, winner banner, header and replay bar.

Widgets only format view-models (:mod:`aoe_tui.tui.viewmodel`); they never read
files or events. Each ``show_*`` method skips the redraw when its input did not
change, so a refresh of an unchanged heat costs a few comparisons.

Heat-screen panels: a widget that also subclasses :class:`HeatPanel` is redrawn by
:class:`aoe_tui.tui.screens.HeatScreen` through its :meth:`HeatPanel.show` on every
refresh (and on each clock second when its ``TICKS`` is True), from one
:class:`~aoe_tui.tui.viewmodel.HeatFrame`. Adding a panel is this class plus one line in
``HeatScreen.compose``.
"""

from __future__ import annotations

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style as RichStyle
from typing import ClassVar

from rich.text import Text
from textual.containers import Container
from textual.geometry import Region
from textual.strip import Strip
from textual.visual import Visual, visualize
from textual.widget import Widget
from textual.widgets import Static

from aoe_tui.domain.display import fmt_clock, fmt_cost, fmt_tokens
from aoe_tui.tui.viewmodel import FeedEntry, HeatFrame, HeatModel, PanelView

_STATUS_GLYPH = {"passed": "✓", "failed": "✗", "evaluating": "…", "pending": "·", "killed": "⊘"}
_STATUS_STYLE = {"passed": "bold green", "failed": "red", "evaluating": "yellow", "pending": "dim", "killed": "dim"}
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
            elif row.status == "killed":
                t.append(" killed at the finish, not evaluated", style="dim")
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
    if pv.cost_limit_microusd is not None:  # a live limit (issue 27): spend against it
        t.append(f" / {fmt_cost(pv.cost_limit_microusd)}", style="dim")
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


def _line_key(line: Text) -> tuple:
    """What a logical line draws: text, spans, base style (the cache key of its rows)."""
    return (line.plain, tuple(line.spans), line.style, line.justify, line.overflow)


def _at_line(strip: Strip, y: int) -> Strip:
    """``strip``, rendered as a text's line 0, as its line ``y``: Textual marks each cell
    with its ``offset`` (x, line) in the text, which mouse selection reads."""
    segments = []
    for text, style, control in strip:
        if style is not None and style._meta:
            offset = style.meta.get("offset")
            if offset is not None:
                style = style + RichStyle.from_meta({"offset": (offset[0], y)})
        segments.append(Segment(text, style, control))
    return Strip(segments, strip.cell_length)


def _line_of(strip: Strip) -> int | None:
    """The text line a rendered row belongs to (Textual's selection ``offset``), or None
    for a row without text (an empty line)."""
    for _text, style, _control in strip:
        if style is not None and style._meta:
            offset = style.meta.get("offset")
            if offset is not None:
                return offset[1]
    return None


def _rows_by_line(rows: list[Strip], count: int) -> list[list[Strip]] | None:
    """``rows`` of a whole text of ``count`` lines, grouped by line (a line that wraps has
    several rows, an empty one a row without text); None when they do not add up."""
    groups: list[list[Strip]] = [[] for _ in range(count)]
    line = -1
    for row in rows:
        at = _line_of(row)
        if at is None:  # an empty line: the one after the last row's
            at = line + 1
        if not line <= at < count:
            return None
        groups[at].append(row)
        line = at
    return groups if all(groups) else None


def _join(lines: list[Text]) -> Text:
    """``lines`` as one text (newlines between)."""
    return Text("\n").join(lines) if len(lines) != 1 else lines[0]


class TextView(Widget):
    """A widget showing Rich text, drawn line by line: a new text repaints only the rows
    that changed and re-lays out only when its size can change.

    Why (issue 7, twenty spectators redrawing each event on one CPU): ``Static.update``
    re-renders every line and asks for a full layout pass, yet a live panel changes a few
    rows a tick and rarely its height. Here each logical line's rendered rows are cached
    by its number and its text, spans and style (``LINE_CACHE`` lines at most), a new
    text is compared row by row with what is on screen, and only changed rows are
    refreshed (Textual then re-renders and re-sends just those). Rendering is Textual's
    own (:meth:`textual.visual.Visual.to_strips`, of the whole text or of single lines
    with their selection offsets moved to their line), so a TextView draws exactly what a
    ``Static`` with the same text and styles draws; while a text selection is active it
    falls back to Textual's whole-text render.
    """

    #: most cached rendered lines per widget (cleared when exceeded)
    LINE_CACHE = 512

    def __init__(self, text: str | Text = "", **kwargs) -> None:
        super().__init__(**kwargs)
        text = Text(text) if isinstance(text, str) else text
        self._lines: list[Text] = text.split("\n", allow_blank=True)
        self._keys: list[tuple] = [_line_key(line) for line in self._lines]
        self._joined: Text | None = text
        #: rendered content rows of ``_lines`` and the (width, style) they were rendered for
        self._strips: list[Strip] | None = None
        self._strips_for: tuple | None = None
        self._row_cache: dict[tuple, list[Strip]] = {}
        self._row_cache_for: tuple | None = None

    def render(self) -> Text:
        return self.text

    @property
    def text(self) -> Text:
        """The text currently shown (its lines joined)."""
        if self._joined is None:
            self._joined = _join(self._lines)
        return self._joined

    def set_text(self, text: str | Text) -> None:
        """Show ``text`` (see :meth:`set_lines`)."""
        text = Text(text) if isinstance(text, str) else text
        self.set_lines(text.split("\n", allow_blank=True), joined=text)

    def set_lines(self, lines: list[Text], *, joined: Text | None = None) -> None:
        """Show ``lines`` (logical lines, without newlines; a no-op when they are what is
        shown). Repaints the rows that changed; a layout pass only when the widget's size
        follows its content (auto height or width) and the content's size changed
        (wrapped height; or line widths on an auto-width widget)."""
        keys = [_line_key(line) for line in lines]
        if keys == self._keys:
            return  # nothing to redraw
        old_keys = self._keys
        self._lines, self._keys, self._joined = lines, keys, joined
        follows = self._size_follows_content()
        key = self._render_key()
        old = self._strips if self._strips_for == key else None
        if old is not None and key[0] > 0 and self.text_selection is None and not self._auto_width():
            new = self._strips = self._render_rows(key)
            if follows and len(new) != len(old) and self.display:
                self.refresh(layout=True)
                return
            changed = self._changed_rows(old, new)
            if changed:
                self.refresh(*changed)
            return
        self._strips = None  # not drawn yet (or selection, or auto width): Textual's own way
        self.refresh(layout=follows and self.display and self._resizes(old_keys))

    def render_line(self, y: int) -> Strip:
        """Content row ``y`` (Textual's line API), from the row cache."""
        if self.text_selection is not None:
            return super().render_line(y)  # selection styles: Textual's whole-text render
        key = self._render_key()
        if self._strips is None or self._strips_for != key:
            self._strips = self._render_rows(key)
            self._strips_for = key
        try:
            return self._strips[y]
        except IndexError:
            return Strip.blank(self.size.width, self.visual_style.rich_style)

    def notify_style_update(self) -> None:
        """Styles changed (class, theme, CSS): cached rows may be stale."""
        super().notify_style_update()
        self._strips = None
        self._row_cache.clear()

    def _render_key(self) -> tuple:
        return (self.size.width, self.visual_style)

    def _render_rows(self, key: tuple) -> list[Strip]:
        """The content rows of the lines for ``key`` = (width in cells, visual style), as
        Textual renders them (wrapping, overflow, link styles, selection offsets), from
        the row cache. A few new lines are rendered one by one; when most are new (first
        draw, a resize, a style change) the whole text is rendered at once, which costs
        about as much as one line."""
        width, style = key
        if width <= 0:
            return []
        if self._row_cache_for != key or len(self._row_cache) > self.LINE_CACHE:
            self._row_cache.clear()
            self._row_cache_for = key
        cache = self._row_cache
        missing = sum((y, k) not in cache for y, k in enumerate(self._keys))
        if missing > max(2, len(self._keys) // 4):
            whole = Visual.to_strips(self, visualize(self, self.text, markup=False), width, None, style)
            groups = _rows_by_line(whole, len(self._keys))
            if groups is not None:
                for y, k in enumerate(self._keys):
                    cache[(y, k)] = groups[y]
                return whole
        rows: list[Strip] = []
        for y, (line, k) in enumerate(zip(self._lines, self._keys)):
            strips = cache.get((y, k))  # Textual marks each cell with its (x, line) for selection
            if strips is None:
                strips = Visual.to_strips(self, visualize(self, line, markup=False), width, None, style)
                if y:
                    strips = [_at_line(strip, y) for strip in strips]
                cache[(y, k)] = strips
            rows.extend(strips)
        return rows

    def _changed_rows(self, old: list[Strip], new: list[Strip]) -> list[Region]:
        """Content regions (runs of whole rows, within the widget's height) where ``new``
        differs from ``old``."""
        width, height = self.size
        regions: list[Region] = []
        start = None
        for y in range(min(max(len(old), len(new)), height) + 1):
            same = y >= height or (y >= len(old) and y >= len(new)) \
                or (y < len(old) and y < len(new) and old[y] == new[y])
            if not same and start is None:
                start = y
            elif same and start is not None:
                regions.append(Region(0, start, width, y - start))
                start = None
        return regions

    def _size_follows_content(self) -> bool:
        height = self.styles.height
        return height is None or height.is_auto or self._auto_width()

    def _auto_width(self) -> bool:
        width = self.styles.width
        return width is not None and width.is_auto

    def _resizes(self, old_keys: list[tuple]) -> bool:
        """Whether the lines' size can differ from ``old_keys``' (line count; line widths
        on an auto-width widget; wrapped height where a line is wider than the widget)."""
        if len(old_keys) != len(self._keys) or self._auto_width():
            return True
        room = self.content_size.width
        if room <= 0:
            return True
        widths = [cell_len(k[0]) for k in old_keys + self._keys]
        if max(widths, default=0) <= room:
            return False  # nothing wraps, before or after
        # a line wraps: only a different wrapped height changes the layout
        old = _join([Text(k[0], spans=list(k[1]), style=k[2]) for k in old_keys])
        return self._wrapped_height(self.text, room) != self._wrapped_height(old, room)

    def _wrapped_height(self, text: Text, room: int) -> int:
        return visualize(self, text, markup=False).get_height(self.styles, room)


class HeatPanel:
    """Mixin of a heat-screen panel (a widget's second base class; see the module docstring).

    ``TICKS``: also redraw on the clock tick (once a second while a live heat runs; only
    panels that show the clock or evaluating times need it).
    """

    TICKS: ClassVar[bool] = False

    def show(self, frame: HeatFrame) -> None:
        """Redraw from ``frame`` (skip when what it shows did not change)."""
        raise NotImplementedError


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
        title, subtitle = f"{pv.marker} {pv.territory}".strip(), f"{pv.points} pts"
        if (title, subtitle) != (self.border_title, self.border_subtitle):  # setting one repaints all rows
            self.border_title, self.border_subtitle = title, subtitle
        self.set_class(pv.winner, "-winner")
        self.set_class(pv.competitor_state == "durable", "-durable")
        text = render_panel(pv)
        rows = text.plain.count("\n") + 1
        if rows < self._rows:
            text.append("\n" * (self._rows - rows))
        self._rows = max(self._rows, rows)
        self.set_text(text)


class TerritoryPanels(Container, HeatPanel):
    """One :class:`TerritoryPanel` per territory of the heat (mounted as territories
    appear; all removed when another heat is shown; a panel whose territory the model no
    longer has — a replay scrubbed back before its registration — is removed, so a replay
    at sequence 0 after the end shows no final panels)."""

    TICKS = True

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._heat: str | None = None
        #: territory id → its panel, in mount order
        self._panels: dict[str, TerritoryPanel] = {}

    def show(self, frame: HeatFrame) -> None:
        if frame.heat != self._heat:
            self._heat = frame.heat
            self.remove_children()
            self._panels.clear()
        have = self._panels  # ours, not a query: a panel mounted or removed just now counts at once
        ids = frame.model.territory_ids()
        for tid in [t for t in have if t not in ids]:
            have.pop(tid).remove()
        new = []
        for tid in ids:
            if tid not in have:
                have[tid] = TerritoryPanel(tid)
                new.append(have[tid])
        if new:
            self.mount_all(new)
        for pv in frame.views:
            panel = have.get(pv.territory)
            if panel is not None:
                panel.show_panel(pv)


class EventFeed(TextView, HeatPanel):
    """The heat's explained event feed: newest last, as many lines as fit."""

    def __init__(self, **kwargs) -> None:
        super().__init__("", **kwargs)
        self._shown: tuple[int, int] | None = None
        self._model: HeatModel | None = None
        self.border_title = "events"

    def show(self, frame: HeatFrame) -> None:
        self.show_feed(frame.model)

    def show_feed(self, model: HeatModel) -> None:
        """Redraw from ``model.feed`` when the model or the height changed."""
        self._model = model
        lines = max(1, self.content_region.height or 8)
        key = (model.version, lines)
        if key == self._shown:
            return
        self._shown = key
        entries: list[FeedEntry] = list(model.feed)[-lines:]
        if not entries:
            self.set_lines([Text("(no events)", style="dim")])
            return
        rows = []
        for e in entries:
            t = Text(no_wrap=True, overflow="ellipsis")
            t.append(f"{fmt_clock(e.elapsed_ms)} ", style="dim")
            t.append(f"#{e.sequence:<4} ", style="dim")
            t.append(e.text, style=_FEED_STYLE.get(e.style, ""))
            rows.append(t)
        self.set_lines(rows)  # fixed height: never a layout pass

    def on_resize(self) -> None:
        """Re-fit the number of lines to the new height."""
        self._shown = None
        if self._model is not None:
            self.show_feed(self._model)


class WinnerBanner(Static, HeatPanel):
    """Shown once the heat finished: winner, points, durable time and reason."""

    def show(self, frame: HeatFrame) -> None:
        self.show_winner(frame.model.winner_line())

    def show_winner(self, line: str | None) -> None:
        """Show ``line`` (or hide the banner when None)."""
        self.display = line is not None
        if line is not None and str(self.content) != line:
            self.update(line)


class HeatHeader(TextView, HeatPanel):
    """One line, most important first: clock/duration, match state, the §3.6 leader, the
    season arena in a cup across arenas (``arena ID``), then the heat title (cut first on
    narrow terminals)."""

    TICKS = True

    def show(self, frame: HeatFrame) -> None:
        self.show_header(frame.model, frame.clock_ms)

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
        if model.season_arena:
            t.append("  arena ", style="dim")
            t.append(model.season_arena, style="bold")
        t.append("  ")
        t.append(model.title or model.arena.name or "heat", style="bold")
        self.set_text(t)


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
        self.set_text(t)


_LADDER_GLYPH = _STATUS_GLYPH


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
        limit = f"/{fmt_cost(v.cost_limit_microusd)}" if v.cost_limit_microusd is not None else ""
        t.append(f" {fmt_cost(v.cost_microusd)}{limit} tok {tok}", style="dim")  # cost first: tokens may be cut
    return t


class Scoreboard(TextView, HeatPanel):
    """All territories of the heat, one line each (shown on narrow terminals)."""

    TICKS = True

    _shown: tuple | None = None
    _pending: list[PanelView] | None = None

    def show_views(self, views: list[PanelView]) -> None:
        """Redraw from the panel views (skips when unchanged; while hidden, on wide
        terminals, only remembers them until shown)."""
        key = tuple(views)
        if self._shown == key:
            return
        if not self.display:
            self._pending = views
            return
        self._shown, self._pending = key, None
        self.set_text(render_scoreboard(views))

    def show(self, frame: HeatFrame) -> None:
        self.show_views(frame.views)

    def on_show(self) -> None:
        """Shown (the terminal became narrow): draw what arrived while hidden."""
        if self._pending is not None:
            self.show_views(self._pending)
