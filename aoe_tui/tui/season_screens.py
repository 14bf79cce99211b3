"""Season screens: the bracket (season screen), the standings table, the quit dialog
(``aoe watch`` builds the app with :func:`aoe_tui.tui.app.watch_app`).

Both screens render a :class:`~aoe_tui.tui.seasonmodel.SeasonModel` held by the app
(``app.season``). They redraw when the model's version (or a running heat's) changed,
plus once a second for the season clock while it runs — and do nothing while hidden or
while the clock stands still (a finished or stopped season with no heat running).

Keys (season screen): ``enter`` opens the selected heat/attempt (live heat screen when
the app follows it, else a replay paused at its end, loaded from the attempt folder),
``s`` standings. Standings: ``p w d m k c r`` sort by points, wins, durable, median
time, tokens, cost, rating (again = reverse), ``o`` official order, ``e`` export
``standings.{csv,json,md,html}`` into the season folder (not in ``aoe watch``, which
never writes), ``a`` (cups across arenas only) toggles the per-arena breakdown: one row
per entrant and arena, entrants in the current sort order (fewer columns below
:data:`~aoe_tui.tui.seasonmodel.ARENA_FULL_WIDTH`). ``escape`` goes back.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from rich.text import Text
from textual import events, on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen, Screen
from textual.widgets import Button, DataTable, Footer, ProgressBar, Static
from textual.widgets.data_table import ColumnKey, RowKey

from aoe_tui.tui.seasonmodel import (
    ARENA_COLUMNS,
    ARENA_COLUMNS_NARROW,
    ARENA_FULL_WIDTH,
    NARROW_WIDTH,
    SORTS,
    STANDINGS_COLUMNS,
    SeasonModel,
    arena_rows,
    sort_standings,
    standings_cells,
)
from aoe_tui.tui.widgets import TextView

if TYPE_CHECKING:  # pragma: no cover
    from aoe_tui.tui.viewapp import ViewApp

__all__ = ["QuitScreen", "SeasonScreen", "StandingsScreen"]

STATE_STYLE = {
    "finished": "green",
    "racing": "bold",
    "provisioning": "bold",
    "finishing": "bold",
    "retried": "yellow",
    "interrupted": "yellow",
    "stopped": "yellow",
    "void": "red",
    "scheduled": "dim",
    "bye": "dim",
}

BRACKET_COLUMNS = ("Heat", "State", "Entrants / detail", "Winner", "Time")
#: the season screen's clock timer fires this long (s) after the season clock's second
#: changed; heat times in the bracket move on the same tick (so up to a second late)
SEASON_TICK_SLACK_S = 0.005


def _now_ms(app: ViewApp) -> int:
    return int(app.now_ms())


class SeasonProgress(ProgressBar):
    """Heats finished / scheduled: Textual's progress bar without the once-a-second timer
    it runs for an ETA this screen does not show (every spectator would wake for it)."""

    def on_mount(self, event: events.Mount) -> None:
        event.prevent_default()  # ProgressBar.on_mount only adds that timer
        self.update()


class BracketTable(DataTable):
    """The bracket table: a :class:`DataTable` with :meth:`set_cell`, a cell update that
    repaints one row. (``DataTable.update_cell`` repaints every visible row; a running
    heat's clock ticks every second in every spectator's table.)"""

    def set_cell(self, row_key: str, column_key: str, value: Text) -> None:
        """Set one cell (its column keeps its width) and repaint only its row.
        Raises ``RowDoesNotExist`` / ``ColumnDoesNotExist`` for unknown keys."""
        row = self.get_row_index(row_key)
        self.get_column_index(column_key)
        self._data[RowKey(row_key)][ColumnKey(column_key)] = value
        self._update_count += 1  # the render caches are keyed on it
        self.refresh_row(row)


class SeasonScreen(Screen):
    """Rounds → heats → attempts, with state, winners and times; running rows marked ▶.

    The cursor follows the action until the user moves it: when a heat starts running
    or racing and the cursor still sits where the screen last put it, it moves to that
    heat. A view of a stopped season starts on the first heat the stop cut off. Running
    heats' times tick (the app's live heat clock) without rebuilding the table.
    """

    BINDINGS = [
        Binding("enter", "open_heat", "Open heat"),
        Binding("s", "app.standings", "Standings"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self._drawn: tuple | None = None
        self._timer = None
        #: row key the screen itself last put the cursor on (None: not placed yet)
        self._auto_row: str | None = None
        #: (row key, state) of heat rows that were running at the last fill
        self._active: set[tuple[str, str]] | None = None

    @property
    def model(self) -> SeasonModel:
        return self.app.season  # type: ignore[attr-defined,return-value]

    def _rows_now(self, app: ViewApp):
        return self.model.rows(app.heats, clock=app.heat_clock_ms, narrow=app.size.width < NARROW_WIDTH)

    def compose(self) -> ComposeResult:
        yield TextView(id="season-header")
        with Horizontal(id="season-status-row"):
            yield TextView(id="season-status")
            yield SeasonProgress(id="season-progress", show_eta=False, show_percentage=False)
        yield BracketTable(id="bracket", cursor_type="row")
        yield TextView(id="season-log")
        yield Footer()

    def _columns(self) -> None:
        """(Re)create the bracket columns for the current width: the entrants column flexes."""
        table = self.query_one("#bracket", DataTable)
        width = self.app.size.width
        fixed = {"Heat": 13, "State": 12, "Winner": 20 if width >= 100 else 18, "Time": 5}  # winners before entrants
        flex = max(16, width - sum(fixed.values()) - 2 * len(BRACKET_COLUMNS) - 3)
        table.clear(columns=True)
        self._width = width
        for col in BRACKET_COLUMNS:
            table.add_column(col, key=col, width=fixed.get(col, flex))

    def on_resize(self) -> None:
        if getattr(self, "_width", None) != self.app.size.width:
            self._columns()
            self.refresh_view(force=True)

    def on_mount(self) -> None:
        self._columns()
        self._set_tick()
        self.refresh_view(force=True)

    def on_screen_suspend(self) -> None:
        """Hidden screens do no work."""
        if self._timer is not None:
            self._timer.stop()
            self._timer = None

    def on_screen_resume(self) -> None:
        self._set_tick()
        self.refresh_view(force=True)

    def _set_tick(self) -> None:
        """Redraw the clocks when the season clock (whole seconds) reaches its next second:
        a spectator wakes once a second for them, never while the screen is hidden, nor
        while no clock moves (:attr:`SeasonModel.clock_frozen` and no heat running: a
        stopped or finished season); :meth:`refresh_view` sets or stops it when a record
        starts the clock again (a resume) or stops it."""
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        if not self._clock_moves():
            return
        clock = self.model.clock_ms(_now_ms(self.app), self.app.monotonic())  # type: ignore[attr-defined]
        self._timer = self.set_timer((1000 - clock % 1000) / 1000 + SEASON_TICK_SLACK_S, self._tick)

    def _clock_moves(self) -> bool:
        """False while nothing on the screen moves: the season clock stands still (a
        finished or stopped season) and no heat runs."""
        return not self.model.clock_frozen or bool(self.model.running_folders())

    def _tick(self) -> None:
        self._timer = None
        if self.is_current:
            self._set_tick()
            self.refresh_view()

    def _signature(self) -> tuple:
        app: ViewApp = self.app  # type: ignore[assignment]
        running = self.model.running_folders()
        return (self.model.version, tuple((f, app.heats[f].version if f in app.heats else -1) for f in running))

    def refresh_view(self, force: bool = False) -> None:
        """Redraw the status line (clock) always; the table only when something changed.
        Stops the clock's timer when the clock stopped (a ``season_stopped`` or
        ``season_finished`` came) and sets it again when it runs again (a resume)."""
        if not self.is_mounted or not self.is_current:
            return
        if (self._timer is not None) != self._clock_moves():
            self._set_tick()
        app: ViewApp = self.app  # type: ignore[assignment]
        model = self.model
        with app.batch_update():
            status = self.query_one("#season-status", TextView)
            width = status.size.width or max(20, app.size.width - 16)
            status.set_text(model.status_line(_now_ms(app), app.heats, width=width, now_mono=app.monotonic()))
            sig = self._signature()
            if not force and sig == self._drawn:
                self._update_times(app)
                return
            self._drawn = sig
            # the header spans the screen with one column of padding each side
            self.query_one("#season-header", TextView).set_text(Text(model.header(app.size.width - 2), style="bold"))
            done, total = model.progress()
            self.query_one("#season-progress", ProgressBar).update(total=max(total, 1), progress=done)
            self._fill_table(app)
            lines = list(app.season_log_lines())[-5:]
            self.query_one("#season-log", TextView).set_text("\n".join(lines) if lines else "no season events yet")

    def _update_times(self, app: ViewApp) -> None:
        """Tick the Time cells of running rows (no table rebuild)."""
        shown = getattr(self, "_rows", {})
        if any(r.running for r in shown.values()):
            self._sync_cells(self.query_one("#bracket", BracketTable), self._rows_now(app))

    def _sync_cells(self, table: BracketTable, rows: list) -> bool:
        """Redraw only the cells that changed when ``rows`` are the shown rows in the same
        order (True); False when the table needs a rebuild."""
        shown = getattr(self, "_rows", None)
        if shown is None or table.row_count != len(shown) or [r.key for r in rows] != list(shown):
            return False
        for r in rows:
            old = shown[r.key]
            if old == r:
                continue
            for col, new, was in zip(BRACKET_COLUMNS, self._cells(r), self._cells(old)):
                if new != was:
                    table.set_cell(r.key, col, new)
        self._rows = {r.key: r for r in rows}
        return True

    @staticmethod
    def _cells(r) -> tuple[Text, ...]:
        """The cells of bracket row ``r`` in :data:`BRACKET_COLUMNS` order."""
        base = "bold" if r.kind == "round" else ""
        label = r.label
        if r.running:
            indent = len(label) - len(label.lstrip())
            label = " " * max(0, indent - 2) + "▶ " + label.lstrip()
        return (
            Text(label, style="bold" if r.running else base),
            Text(r.state, style=STATE_STYLE.get(r.state, "")),
            Text(r.entrants, style="bold" if r.running else ""),
            Text(r.winner, style="bold green" if r.kind == "heat" and r.state == "finished" else ""),
            Text(r.time),
        )

    def _fill_table(self, app: ViewApp) -> None:
        """Show the bracket rows. When the rows are the same ones in the same order (a heat
        event in a running heat, a state change), only the cells that changed are redrawn:
        twenty spectators rebuilding a whole table on every heat event is what kept a
        shared CPU busy."""
        table = self.query_one("#bracket", BracketTable)
        rows = self._rows_now(app)
        keep = None
        if table.row_count:
            try:
                keep = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
            except Exception:
                keep = None
        if not self._sync_cells(table, rows):
            self._rows = {r.key: r for r in rows}
            table.clear()
            for r in rows:
                table.add_row(*self._cells(r), key=r.key)
        active = {(r.key, r.state) for r in rows if r.kind == "heat" and r.running}
        started = [r.key for r in rows if r.kind == "heat" and r.running
                   and (r.key, r.state) not in (self._active or set())]
        self._active = active
        user_moved = keep is not None and keep != self._auto_row
        target = None
        if not user_moved:
            target = started[-1] if started else keep
        elif keep in self._rows:
            table.move_cursor(row=table.get_row_index(keep), animate=False)
            return
        if target is None or target not in self._rows:
            # a fresh view: the running heat, else (a stopped season) the first heat the stop
            # cut off, which the resume runs first
            first = next((r.key for r in rows if r.running), None) \
                or next((r.key for r in rows if r.kind == "heat" and r.state == "interrupted"), None)
            target = first if keep is None else None
        if target is not None and target in self._rows:
            table.move_cursor(row=table.get_row_index(target), animate=False)
        if table.row_count:
            self._auto_row = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value

    def selected_row(self):
        """The :class:`BracketRow` under the cursor (None on an empty table)."""
        table = self.query_one("#bracket", DataTable)
        if not table.row_count:
            return None
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        return getattr(self, "_rows", {}).get(key)

    @on(DataTable.RowSelected, "#bracket")
    def _row_selected(self, _event: DataTable.RowSelected) -> None:
        self.action_open_heat()

    def action_open_heat(self) -> None:
        """Open the selected heat or attempt (live if followed, else its replay at the end)."""
        row = self.selected_row()
        if row is None or row.folder is None:
            self.app.notify("nothing to open here: select a heat that has started", severity="warning")
            return
        self.app.open_attempt(row.folder)  # type: ignore[attr-defined]


#: the standings note explains the ``Cost by`` and ``Infra`` columns from this width (columns)
NOTE_LEGEND_WIDTH = 120


class StandingsScreen(Screen):
    """Season standings: sortable table, ``e`` exports csv/json/md/html into the season folder."""

    BINDINGS = [
        Binding("p", "sort('points')", "Points"),
        Binding("w", "sort('wins')", "Wins"),
        Binding("d", "sort('durable')", "Durable"),
        Binding("m", "sort('median')", "Median", show=False),
        Binding("k", "sort('tokens')", "Tokens", show=False),
        Binding("c", "sort('cost')", "Cost", show=False),
        Binding("r", "sort('rating')", "Rating"),
        Binding("o", "sort('rank')", "Official", show=False),
        Binding("a", "toggle_arenas", "Per arena"),
        Binding("e", "export", "Export"),
        Binding("escape,s", "app.back", "Back"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.sort_key = "rank"
        self.reverse = False
        #: True while the table shows the per-arena breakdown (``a``; cups across arenas)
        self.per_arena = False
        self._drawn: tuple | None = None
        self._columns: tuple[str, ...] = ()

    @property
    def model(self) -> SeasonModel:
        return self.app.season  # type: ignore[attr-defined,return-value]

    def compose(self) -> ComposeResult:
        yield TextView(id="standings-header")
        yield DataTable(id="standings", cursor_type="row")
        yield TextView(id="standings-note")
        yield Footer()

    def on_mount(self) -> None:
        self._set_columns(STANDINGS_COLUMNS)
        self.refresh_view(force=True)

    def _set_columns(self, columns: tuple[str, ...]) -> None:
        """Give the table ``columns`` (a no-op when it has them)."""
        if columns == self._columns:
            return
        table = self.query_one("#standings", DataTable)
        table.clear(columns=True)
        for col in columns:
            table.add_column(col, key=col)
        self._columns = columns

    def on_screen_resume(self) -> None:
        self.refresh_view(force=True)

    def on_resize(self) -> None:
        """A new width may change the header and the breakdown's columns."""
        self.refresh_view()

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        """``export`` exists only where the app may write (not in ``aoe watch``); ``a``
        only in a cup across arenas."""
        if action == "export":
            return not self.app.read_only  # type: ignore[attr-defined]
        if action == "toggle_arenas":  # only a cup across arenas has a breakdown to show
            return self.model.state.multi_arena
        return True

    def refresh_view(self, force: bool = False) -> None:
        """Redraw when the season changed (or the sort did)."""
        if not self.is_mounted or not self.is_current:
            return
        per_arena = self.per_arena and self.model.state.multi_arena
        width = self.app.size.width
        sig = (self.model.version, self.sort_key, self.reverse, per_arena, width)
        if not force and sig == self._drawn:
            return
        self._drawn = sig
        rows = sort_standings(self.model.standings(), self.sort_key, self.reverse)
        label = SORTS[self.sort_key][0]
        with self.app.batch_update():
            done, total = self.model.progress()
            what = ("Per arena" if width < NARROW_WIDTH else "Standings per arena") if per_arena else "Standings"
            rest = f" · {done}/{total} heats · sorted by {label}" + (" (reversed)" if self.reverse else "")
            room = width - 2 - len(what) - len(rest) - 3  # the header: full width, padding 1
            self.query_one("#standings-header", TextView).set_text(Text(
                f"{what} · {self.model.header(room)}{rest}", style="bold"))
            arena_columns = ARENA_COLUMNS if width >= ARENA_FULL_WIDTH else ARENA_COLUMNS_NARROW
            self._set_columns(arena_columns if per_arena else STANDINGS_COLUMNS)
            table = self.query_one("#standings", DataTable)
            table.clear()
            if per_arena:
                shown = arena_rows(rows, [a.id for a in self.model.state.arenas], arena_columns)
            else:
                shown = [(r.entrant, r, standings_cells(r)) for r in rows]
            for key, r, cells in shown:
                table.add_row(*(Text(c, style="bold" if r.champion else "") for c in cells), key=key)
            legend = ("cost by: table = season [prices], adapter = its own figure · infra = spoiled attempts · "
                      if width >= NOTE_LEGEND_WIDTH else "")  # narrow: the columns are off screen anyway
            note = ("ranking: wins, durable, points, median time, rating, cost · n/a = usage not reported · " + legend
                    + ("read-only view" if self.app.read_only else "e exports to the season folder"))  # type: ignore[attr-defined]
            self.query_one("#standings-note", TextView).set_text(Text(note, style="dim"))

    def action_toggle_arenas(self) -> None:
        """Switch between the standings and the per-arena breakdown (cups across arenas)."""
        if self.model.state.multi_arena:
            self.per_arena = not self.per_arena
            self.refresh_view(force=True)

    def action_sort(self, key: str) -> None:
        """Sort by ``key``; the same key again reverses the order."""
        if key == self.sort_key and key != "rank":
            self.reverse = not self.reverse
        else:
            self.sort_key, self.reverse = key, False
        self.refresh_view(force=True)

    @on(DataTable.HeaderSelected, "#standings")
    def _header(self, event: DataTable.HeaderSelected) -> None:
        by_label = {v[0]: k for k, v in SORTS.items()}
        label = str(event.label).split()[0] if str(event.label) else ""
        key = by_label.get(str(event.label)) or by_label.get(label)
        if key is None and str(event.label).startswith("Tokens"):
            key = "tokens"
        if key is None and str(event.label).startswith("Rating"):
            key = "rating"
        if key is not None:
            self.action_sort(key)

    def action_export(self) -> None:
        """Write ``standings.{csv,json,md,html}`` into the season folder and say which files."""
        from aoe_tui.export.standings_files import FORMATS, write_all

        app: ViewApp = self.app  # type: ignore[assignment]
        if app.read_only or app.season_dir is None:
            app.notify("read-only view: export with `aoe standings SEASON_DIR`", severity="warning")
            return
        try:
            write_all(app.season_dir, self.model.state)
        except (OSError, ValueError) as err:
            app.notify(f"export failed: {err}", severity="error")
            return
        names = ", ".join(f"standings.{f}" for f in FORMATS)
        app.notify(f"exported {names} to {app.season_dir}", title="Standings exported", timeout=8)


class QuitScreen(ModalScreen[str | None]):
    """Asked when quitting a running season: ``stop``, ``detach`` or None (cancel)."""

    BINDINGS = [
        Binding("escape", "choose('')", "Cancel"),
        Binding("s", "choose('stop')", "Stop season"),
        Binding("d", "choose('detach')", "Detach"),
    ]

    def compose(self) -> ComposeResult:
        with Vertical(id="quit-box"):
            yield Static(
                "[b]The season is still running.[/b]\n\n"
                "[b]s[/b]  stop it: running heats abort, territories are torn down;\n"
                "    run the same command again to resume.\n"
                "[b]d[/b]  detach: close the view, keep running in this process even\n"
                "    if the terminal closes; lines go to the season folder's\n"
                "    aoe-run.log; Ctrl+C or kill -TERM stops it (resumable).\n"
                "[b]escape[/b]  back to the season.",
                id="quit-text",
            )
            with Horizontal(id="quit-buttons"):
                yield Button("Stop season", id="quit-stop", variant="error")
                yield Button("Detach", id="quit-detach", variant="primary")
                yield Button("Cancel", id="quit-cancel")

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.action_choose({"quit-stop": "stop", "quit-detach": "detach"}.get(event.button.id or "", ""))

    def action_choose(self, choice: str) -> None:
        """Dismiss with ``choice`` (empty = cancel → None)."""
        self.dismiss(choice or None)


def wall_ms() -> int:
    """Unix time in ms (the default season clock source)."""
    return int(time.time() * 1000)
