"""Season exports: standings as CSV, JSON, Markdown and a self-contained HTML page.

All four read a reduced :class:`~aoe_tui.replay.season_reducer.SeasonState` and its
standings (:func:`aoe_tui.season.season_standings.season_standings`), so they agree with the
live runner. Times are shown as ``m:ss.s`` (from ms); costs as ``$x.xxxx`` (from
micro-USD). The HTML page has no external resources: inline CSS and inline SVG only
(bracket, standings table ``<table id="standings">``, a time-to-milestone chart, links
to each heat's bundle relative to the season folder).

Cups across arenas (a season of more than one arena): the per-arena breakdown
(:class:`~aoe_tui.season.season_standings.ArenaBreakdown`, §7.2) is in the JSON (every
standing's ``arenas``; also the season's ``arenas`` list and each heat's ``arena``, for
one-arena seasons too), in a Markdown table after the main one, and in the HTML page
(``<table id="arena-breakdown">``, the arenas in the header, each round's arena in the
bracket with ``data-arena`` on every heat, and one time-to-milestone chart per arena,
``<svg id="milestone-chart-ARENA">``, since arenas share milestone ids). The CSV keeps
exactly :data:`COLUMNS`, one row per entrant: its header is a fixed schema, and
per-arena columns would make it depend on the season's arenas. A one-arena season's
CSV, Markdown and HTML are what they were before cups across arenas.
"""

from __future__ import annotations

import csv
import html
import io
import json
from pathlib import Path
from typing import Any

from aoe_tui.domain.display import fmt_clock, fmt_cost
from aoe_tui.fsio import write_atomic
from aoe_tui.replay.season_reducer import SeasonState
from aoe_tui.season.season_standings import ArenaBreakdown, SeasonStanding, season_standings, waiting_heats, waiting_label

__all__ = ["BREAKDOWN_HEADS", "COLUMNS", "COST_BY", "FORMATS", "breakdown_rows", "cache_cell", "md_text", "render", "spend_cell",
           "write_all"]

FORMATS = ("csv", "json", "md", "html")

#: Exported columns, in order (CSV header = these names; the same in a cup across arenas).
COLUMNS = (
    "rank", "entrant", "model", "heats", "wins", "durable", "points", "coverage", "median_durable_ms",
    "mean_rank", "usage_recorded", "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
    "cost_microusd", "cost_source", "cost_per_durable_microusd", "mu", "sigma", "ordinal", "round_reached",
    "champion", "infra_failures", "byes", "waiting",
)


_COST_NOTE = ("Cache read/write: input tokens read from / written to the provider's prompt cache (included in "
              "tokens in). Cost by: price table = the season file's [prices], adapter = the adapter's own "
              "figure (opencode's has no cache term). Infra failures: attempts of the entrant's heats the "
              "infrastructure spoiled.")


def _clock(ms: int | None) -> str:
    return fmt_clock(ms, "m:ss.d", none="—")


def _usd(micro: int | None) -> str:
    return fmt_cost(micro, none="—")


def spend_cell(r: Any) -> str:
    """An entrant's cost, against the season's cost limit when one is set (issue 27's live
    limits: ``$0.0288 / $5.0000``)."""
    limit = getattr(r, "cost_limit_microusd", None)
    return _usd(r.cost_microusd) + (f" / {fmt_cost(limit)}" if limit is not None else "")


def cache_cell(r: SeasonStanding) -> str:
    """``read/write`` cache tokens, or ``—`` when unknown."""
    return "—" if r.cache_read_tokens is None else f"{r.cache_read_tokens}/{r.cache_write_tokens}"


#: How the Markdown and HTML pages name a :attr:`SeasonStanding.cost_source`.
COST_BY = {"price table": "price table", "adapter": "adapter", "mixed": "mixed", None: "—"}


#: first characters that make a spreadsheet read a CSV cell as a formula (OWASP CSV injection)
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _cell(v: Any) -> str:
    """One CSV cell: empty for None; a number we produce (int/float) as is, negative or not;
    any text that a spreadsheet would run as a formula (starting ``=``, ``+``, ``-``, ``@``,
    tab or CR) prefixed with ``'`` (OWASP), so agent-reported text stays text. A CR inside
    text becomes a line feed (the writer quotes those; a bare CR would end the row in readers)."""
    if v is None:
        return ""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return str(v)
    s = str(v)
    quoted = "'" + s if s.startswith(_FORMULA_START) else s
    return quoted.replace("\r\n", "\n").replace("\r", "\n")


#: Markdown's inline punctuation that could start emphasis, code, links or headings, escaped
#: with a backslash (CommonMark escapes any ASCII punctuation)
_MD_PUNCT = frozenset("\\`*_[]#|!~")


def md_text(text: Any) -> str:
    """``text`` as literal Markdown inline text (table cells, the title line): ``\\``,
    backticks, ``*``, ``_``, ``[``, ``]``, ``#``, ``|``, ``!``, ``~`` backslash-escaped;
    ``&``, ``<``, ``>`` as HTML entities (no raw HTML); line breaks and other control
    characters as one space (a cell stays on its row). Rendered, it reads as written."""
    out = []
    for ch in str(text):
        if ch in _MD_PUNCT:
            out.append("\\" + ch)
        elif ch == "&":
            out.append("&amp;")
        elif ch == "<":
            out.append("&lt;")
        elif ch == ">":
            out.append("&gt;")
        elif ch < " " or ch == "\x7f" or "\x80" <= ch <= "\x9f" or ch in "\u2028\u2029":
            out.append(" ")
        else:
            out.append(ch)
    return "".join(out)


def to_json(state: SeasonState, rows: list[SeasonStanding]) -> str:
    """``{"schema": "aoe-tui.season-standings", "version": 1, "season", "label", "arena",
    "arenas", "format", "finished", "stopped", "waiting", "champions", "standings": [...], "heats": [...]}``
    (``stopped``: the reason of the stop that ended the last run session, until a resume;
    else null; ``waiting``: the void heats the season waits on,
    :func:`~aoe_tui.season.season_standings.waiting_heats`, each ``{"round", "heat",
    "entrants", "label"}`` with ``label`` ``waiting on heat r1h2 (void)``; a heat waited on
    also has ``"waiting": true``, an entrant of it its row's ``waiting`` label;
    ``rules_changed``: each resume that went on with changed arena files or adapters,
    ``aoe run --accept-changed-rules``, as ``{"resume", "changed": ["PATH changed", ...]}``).

    ``arena`` is the first arena's id; ``arenas`` every season arena (``id``,
    ``display_name``, ``milestones``, ``category``, ``path``) in order; each standing is
    :meth:`SeasonStanding.to_dict` (with its per-arena ``arenas``); each heat names the
    ``arena`` id it races. A heat's ``status`` is ``scheduled`` | ``running`` |
    ``interrupted`` | ``finished``
    (:attr:`~aoe_tui.replay.season_reducer.HeatState.status`: ``interrupted`` while a
    stopped or killed runner's cut-off attempt awaits the resume); an attempt's is
    ``running`` | ``interrupted`` | ``finished``
    (:attr:`~aoe_tui.replay.season_reducer.AttemptState.shown_status`)."""
    info = state.info
    heats = []
    waiting = waiting_heats(state)
    for h in state.heats():
        heats.append({
            "round": h.round, "heat": h.heat, "arena": h.arena, "seats": list(h.seats), "status": h.status,
            "attempts": [{"attempt": a.attempt, "folder": a.folder, "status": a.shown_status,
                          "outcome": a.finished.outcome if a.finished else None,
                          "failure_source": a.finished.failure_source if a.finished else None,
                          "adapter_failures": dict(a.finished.adapter_failures) if a.finished else {},
                          "bundle": a.finished.bundle if a.finished else None,
                          "interrupted_as": a.interrupted_as} for a in h.attempts],
            "ranks": dict(h.result.ranks) if h.result else None,
            "winner": h.result.winner if h.result else None,
            "void": h.result.void if h.result else False,
            "waiting": h in waiting,
        })
    data = {
        "schema": "aoe-tui.season-standings",
        "version": 1,
        "season": info.season if info else None,
        "label": info.label if info else None,
        "arena": info.arena_id if info else None,
        "arenas": [a.model_dump() for a in state.arenas],
        "format": info.format if info else None,
        "finished": state.finished is not None,
        "stopped": state.stopped.reason if state.stopped is not None else None,
        "waiting": [{"round": h.round, "heat": h.heat, "entrants": list(h.entrants), "label": waiting_label(h)}
                    for h in waiting],
        "rules_changed": [{"resume": n, "changed": list(lines)} for n, lines in state.rules_changed],
        "champions": state.finished.champions if state.finished else [],
        "standings": [r.to_dict() for r in rows],
        "heats": heats,
    }
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def to_csv(rows: list[SeasonStanding]) -> str:
    """CSV with header :data:`COLUMNS`; null figures are empty cells."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    for r in rows:
        d = r.to_dict()
        w.writerow([_cell(d[c]) for c in COLUMNS])
    return buf.getvalue()


#: Per-arena breakdown columns (Markdown and HTML).
BREAKDOWN_HEADS = ("entrant", "arena", "heats", "wins", "durable", "points", "milestones", "coverage",
                   "median durable", "tokens in/out", "cost", "cost/durable")


def breakdown_rows(state: SeasonState, rows: list[SeasonStanding]) -> list[tuple[str, ...]]:
    """Cells of the per-arena breakdown, in :data:`BREAKDOWN_HEADS` order: entrants in
    standings order, each with one row per season arena (season order; coverage ``—`` on
    an arena the entrant raced no heat of)."""
    out = []
    for r in rows:
        for a in state.arenas:
            b: ArenaBreakdown | None = r.arenas.get(a.id)
            if b is None:
                continue
            tokens = "—" if b.input_tokens is None else f"{b.input_tokens}/{b.output_tokens}"
            out.append((r.entrant, a.id, str(b.heats), str(b.wins), str(b.durable), str(b.points),
                        f"{b.milestone_passes}/{b.milestones_available}", f"{b.coverage:.0%}" if b.heats else "—",
                        _clock(b.median_durable_ms), tokens, _usd(b.cost_microusd),
                        _usd(b.cost_per_durable_microusd)))
    return out


def _arena_list(state: SeasonState) -> str:
    """``first-build (4 milestones), durable-job-queue (5 milestones)``."""
    return ", ".join(f"{a.id} ({len(a.milestones)} milestones)" for a in state.arenas)


def to_md(state: SeasonState, rows: list[SeasonStanding]) -> str:
    """A Markdown table of the standings with a title line; a cup across arenas adds a
    ``## Per arena`` breakdown table after it."""
    info = state.info
    title = f"# {md_text(info.season)} · {md_text(info.label)} — standings\n\n" if info else "# standings\n\n"
    head = ("| # | entrant | model | heats | wins | durable | points | coverage | median durable | rating μ | σ | "
            "ordinal | tokens in/out | cache read/write | cost | cost by | cost/durable | infra failures | byes |\n")
    sep = "|" + "---|" * 19 + "\n"
    lines = []
    for r in rows:
        tokens = "—" if r.input_tokens is None else f"{r.input_tokens}/{r.output_tokens}"
        lines.append(
            f"| {r.rank} | {md_text(r.entrant)}{' 🏆' if r.champion else ''}{f' ({md_text(r.waiting)})' if r.waiting else ''} | {md_text(r.model or '')} | {r.heats} | {r.wins} | {r.durable} | "
            f"{r.points} | {r.coverage:.0%} | {_clock(r.median_durable_ms)} | {r.mu:.2f} | {r.sigma:.2f} | "
            f"{r.ordinal:.2f} | {tokens} | {cache_cell(r)} | {spend_cell(r)} | {COST_BY.get(r.cost_source, r.cost_source)} | "
            f"{_usd(r.cost_per_durable_microusd)} | {r.infra_failures} | {r.byes} |\n"
        )
    waits = "".join(f"**{md_text(waiting_label(h))}**: {md_text(', '.join(h.entrants))} neither advanced nor "
                    "eliminated; `aoe run SEASON_FILE --retry-void` re-runs it.\n\n" for h in waiting_heats(state))
    tail = ("\n" + _COST_NOTE + "\n"
            "\nTie-break order: wins, durable deployments, points, median time to durable, rating ordinal, cost, id.\n")
    per_arena = ""
    if state.multi_arena:
        per_arena = (f"\n## Per arena\n\nArenas: {md_text(_arena_list(state))}.\n\n"
                     + "| " + " | ".join(BREAKDOWN_HEADS) + " |\n" + "|" + "---|" * len(BREAKDOWN_HEADS) + "\n"
                     + "".join("| " + " | ".join(map(md_text, cells)) + " |\n" for cells in breakdown_rows(state, rows)))
    waits += "".join(f"**Rules changed at resume {n}** (`--accept-changed-rules`): heats before and after it "
                     f"raced different rules: {md_text('; '.join(changed))}.\n\n" for n, changed in state.rules_changed)
    return title + waits + head + sep + "".join(lines) + tail + per_arena


def _chart(ms_ids: list[str], per_entrant: list[tuple[str, dict[str, int]]], svg_id: str = "milestone-chart",
           what: str = "") -> str:
    """Inline SVG ``<svg id=svg_id>``: x = milestones ``ms_ids`` (arena order), y = median
    time (s) to pass it, one line per entrant of ``per_entrant`` (entrant, milestone id →
    median ms) that passed any; ``what`` names the arena in the aria label. The cup site's
    chart (:func:`aoe_tui.export.site.svg.line_chart`) at this page's fixed size."""
    from aoe_tui.export.site.svg import line_chart  # the site package imports this module back

    return line_chart(svg_id, ms_ids, [(name, [ms.get(m) for m in ms_ids]) for name, ms in per_entrant if ms],
                      label=f"median time to each milestone{what} per entrant", y_fmt=lambda v: f"{v / 1000:.0f}s",
                      responsive=False, legend=True, empty="No milestone passed yet.")


def _charts(state: SeasonState, rows: list[SeasonStanding]) -> str:
    """The time-to-milestone chart: one for a one-arena season, else one per arena
    (``<h3>`` with the arena id, then its chart) from the per-arena breakdowns."""
    if not state.multi_arena:
        ms_ids = list(state.info.milestones) if state.info else []
        return _chart(ms_ids, [(r.entrant, r.milestone_ms) for r in rows])
    parts = []
    for a in state.arenas:
        per = [(r.entrant, r.arenas[a.id].milestone_ms) for r in rows if a.id in r.arenas]
        parts.append(f"<h3>{html.escape(a.id)}</h3>\n"
                     + _chart(list(a.milestones), per, f"milestone-chart-{a.id}", f" of {a.id}"))
    return "\n".join(parts)


def _bracket(state: SeasonState) -> str:
    multi = state.multi_arena
    waiting = waiting_heats(state)
    parts = ['<div class="bracket">']
    for r in state.rounds.values():
        on = f" · {html.escape(r.arena)}" if multi else ""
        parts.append(f'<div class="round"><h3>Round {r.round}{" (final)" if r.final else ""}{on}</h3>')
        for h in r.heats.values():
            res = h.result
            attr = f' data-arena="{html.escape(h.arena)}"' if multi else ""
            parts.append(f'<div class="heat"{attr}><b>Heat {h.heat}</b> <span class="muted">{h.status}'
                         f'{" · void" if res and res.void else ""}'
                         f'{" · " + html.escape(waiting_label(h)) if h in waiting else ""}</span><ol>')
            order = sorted(h.entrants, key=lambda e: (res.ranks.get(e, 99) if res else 99, e))
            for e in order:
                rank = f"#{res.ranks[e]} " if res and e in res.ranks and not res.void else ""
                win = " 🏆" if res and res.winner == e else ""
                parts.append(f"<li>{rank}{html.escape(e)}{win}</li>")
            parts.append("</ol>")
            for a in h.attempts:
                label = f"attempt {a.attempt}"
                if a.finished and a.finished.bundle:
                    parts.append(f'<a class="bundle" href="{html.escape(a.finished.bundle)}">{label} bundle</a> ')
                else:
                    parts.append(f'<span class="muted">{label}: {a.finished.outcome if a.finished else a.shown_status}</span> ')
                for old in a.interrupted_as:
                    parts.append(f'<span class="muted">(interrupted: {html.escape(old)})</span> ')
            parts.append("</div>")
        if r.byes:
            parts.append(f'<div class="muted">byes: {html.escape(", ".join(r.byes))}</div>')
        parts.append("</div>")
    parts.append("</div>")
    return "".join(parts)


def _table(table_id: str, heads: tuple[str, ...], rows: list) -> str:
    """``<table id=table_id>`` with header cells ``heads`` and one ``<tr>`` per row of cells."""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in heads)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>" for cells in rows)
    return f'<table id="{table_id}"><thead><tr>{head}</tr></thead><tbody>\n{body}\n</tbody></table>'


def _html_arenas(state: SeasonState) -> str:
    """The header's arena part: ``Arena <b>id</b>``, or every arena of a cup across arenas."""
    if not state.multi_arena:
        return f"Arena <b>{html.escape(state.info.arena_id if state.info else '')}</b>"
    return f"{len(state.arenas)} arenas " + ", ".join(
        f'<b title="{html.escape(a.display_name or a.id)} · {len(a.milestones)} milestones">{html.escape(a.id)}</b>'
        for a in state.arenas)


def _html_breakdown(state: SeasonState, rows: list[SeasonStanding]) -> str:
    """The per-arena section of a cup across arenas (empty for one arena)."""
    if not state.multi_arena:
        return ""
    return ("<h2>Per arena</h2>\n"
            "<style>#arena-breakdown td:nth-child(1){text-align:left} #arena-breakdown td:nth-child(3)"
            "{text-align:right}</style>\n"
            + _table("arena-breakdown", BREAKDOWN_HEADS, breakdown_rows(state, rows))
            + f'\n<p class="muted">Arenas: {html.escape(_arena_list(state))}. Coverage = milestones passed ÷ '
            "milestones available (heats × the arena's milestones); cost is unknown (—) unless every heat on "
            "that arena recorded usage.</p>\n")


def to_html(state: SeasonState, rows: list[SeasonStanding]) -> str:
    """The self-contained standings page (see the module docstring)."""
    info = state.info
    title = f"{info.season} · {info.label}" if info else "season"
    heads = ("#", "entrant", "model", "heats", "wins", "durable", "points", "coverage", "median durable", "μ", "σ",
             "ordinal", "tokens in", "tokens out", "cache read/write", "cost", "cost by", "cost/durable",
             "infra failures", "byes")
    body = []
    for r in rows:
        body.append([r.rank, r.entrant + (" 🏆" if r.champion else "") + (f" ({r.waiting})" if r.waiting else ""), r.model or "", r.heats, r.wins, r.durable,
                     r.points, f"{r.coverage:.0%}", _clock(r.median_durable_ms), f"{r.mu:.2f}", f"{r.sigma:.2f}",
                     f"{r.ordinal:.2f}", "—" if r.input_tokens is None else r.input_tokens,
                     "—" if r.output_tokens is None else r.output_tokens, cache_cell(r), spend_cell(r),
                     COST_BY.get(r.cost_source, r.cost_source), _usd(r.cost_per_durable_microusd), r.infra_failures, r.byes])
    waiting = waiting_heats(state)
    status = ("finished" if state.finished else
              "; ".join(f"<b>{html.escape(waiting_label(h))}</b>: {html.escape(', '.join(h.entrants))} neither "
                        "advanced nor eliminated; aoe run SEASON_FILE --retry-void re-runs it" for h in waiting)
              if waiting else
              f"stopped ({html.escape(state.stopped.reason)}); the same aoe run resumes it" if state.stopped else
              "in progress")
    status += "".join(f" · <b>rules changed at resume {n}</b> (--accept-changed-rules): heats before and after "
                      f"it raced different rules: {html.escape('; '.join(changed))}" for n, changed in state.rules_changed)
    champs = ", ".join(state.finished.champions) if state.finished else ""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)} — standings</title>
<style>
body{{font-family:system-ui,sans-serif;margin:2em;color:#222}} table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:4px 8px;text-align:right}} td:nth-child(2),td:nth-child(3){{text-align:left}}
.muted{{color:#888;font-size:.9em}} .bracket{{display:flex;gap:1.5em;flex-wrap:wrap}}
.round{{min-width:14em}} .heat{{border:1px solid #ddd;border-radius:6px;padding:.5em;margin:.5em 0}}
</style></head><body>
<h1>{html.escape(title)}</h1>
<p>{_html_arenas(state)} · format <b>{html.escape(str(info.format.get("kind")) if info else "")}</b> · {status}{(" · champion " + html.escape(champs)) if champs else ""}</p>
<h2>Standings</h2>
{_table("standings", heads, body)}
<p class="muted">Tie-break order: wins, durable deployments, points, median time to durable, rating ordinal (OpenSkill Plackett–Luce μ−3σ), cost, entrant id. {html.escape(_COST_NOTE)}</p>
{_html_breakdown(state, rows)}<h2>Time to each milestone (median)</h2>
{_charts(state, rows)}
<h2>Bracket</h2>
{_bracket(state)}
</body></html>
"""


def render(state: SeasonState, fmt: str) -> str:
    """The standings of ``state`` in ``fmt`` (one of :data:`FORMATS`); ValueError otherwise."""
    rows = season_standings(state)
    if fmt == "csv":
        return to_csv(rows)
    if fmt == "json":
        return to_json(state, rows)
    if fmt == "md":
        return to_md(state, rows)
    if fmt == "html":
        return to_html(state, rows)
    raise ValueError(f"unknown format {fmt!r} (use one of {', '.join(FORMATS)})")


def write_all(season_dir: Path, state: SeasonState) -> None:
    """Write ``standings.{csv,json,md,html}`` into ``season_dir`` atomically."""
    for fmt in FORMATS:
        write_atomic(Path(season_dir) / f"standings.{fmt}", render(state, fmt), fsync=False)
