"""Inline SVG for the cup site (and ``aoe standings --format html``), built in Python: line
charts (time to each milestone, points per round), a horizontal bar chart (spend) and the
capability treemap (:func:`squarify`, :func:`treemap_svg`).

Every text that reaches an SVG goes through :func:`esc` (made visible by
:func:`aoe_tui.export.site.render.visible`, then HTML-escaped): entrant ids, models and
arena names are agent or season-file text. Colours are SVG presentation attributes, never
``style`` attributes (the site's CSP). Charts are responsive (``viewBox``, ``width="100%"``)
unless asked for the fixed size the standings page has always had.

Colours follow entrants, not series positions: the site passes ``colors`` (entrant →
index into :data:`COLORS`, :func:`entrant_colors`: the entrant's place in the season's
entrant list), so an entrant has the same colour in every chart and legend whatever the
standings order. Without ``colors`` a series takes its position's colour.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from aoe_tui.export.site.render import visible

__all__ = ["COLORS", "TreemapTile", "bar_chart", "entrant_colors", "esc", "legend_html", "line_chart", "squarify",
           "treemap_svg"]

#: series colours (also the site's ``.c0`` … ``.c9`` legend swatches, site.css)
COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
          "#17becf"]
#: treemap category fills (light, dark text on them), by category order
_CATEGORY_FILLS = ["#dbeafe", "#dcfce7", "#fef3c7", "#fce7f3", "#ede9fe", "#e0f2fe", "#f1f5f9"]
_CATEGORY_STROKES = ["#1d4ed8", "#15803d", "#a16207", "#be185d", "#6d28d9", "#0369a1", "#475569"]


def esc(text: object) -> str:
    """``text`` made visible (control and bidi characters as escapes) and HTML-escaped."""
    return html.escape(visible(str(text)))


def entrant_colors(entrants: Iterable[str]) -> dict[str, int]:
    """Each entrant's colour index (into :data:`COLORS`, ``.c0`` … ``.c9``): its place in
    ``entrants`` (the season's entrant list, in season order),
    modulo the palette. The same entrant keeps its colour in every chart of the site."""
    return {e: k % len(COLORS) for k, e in enumerate(dict.fromkeys(entrants))}


def _color_index(name: str, k: int, colors: Mapping[str, int] | None) -> int:
    """``name``'s colour index: ``colors[name]`` when given and known, else position ``k``."""
    if colors is not None and name in colors:
        return colors[name] % len(COLORS)
    return k % len(COLORS)


def _clip(text: str, chars: int) -> str:
    """``text`` cut to ``chars`` characters (``…`` marks a cut); '' when nothing fits."""
    if chars <= 0:
        return ""
    return text if len(text) <= chars else (text[: chars - 1] + "…" if chars > 1 else "…")


# ---- line and bar charts -------------------------------------------------------------

def line_chart(svg_id: str, x_labels: Sequence[str], series: Sequence[tuple[str, Sequence[int | float | None]]], *,
               label: str, y_fmt: Callable[[float], str], responsive: bool = True,
               legend: bool = False, empty: str = "Nothing to chart yet.",
               colors: Mapping[str, int] | None = None) -> str:
    """``<svg id=svg_id>``: one polyline per ``(name, values)`` of ``series`` (values per
    ``x_labels``, None = no point) that has any value; y from 0 to the largest value,
    ticks by ``y_fmt``. ``legend``: names in the SVG, right of the plot (the standings
    page's); the site puts an HTML legend under the chart instead (:func:`legend_html`).
    ``label`` is the aria label. ``<p class="muted">empty</p>`` when there is nothing.
    ``colors``: series name → colour index (:func:`entrant_colors`); else by position."""
    shown = [(name, list(vals)) for name, vals in series if any(v is not None for v in vals)]
    known = [v for _, vals in shown for v in vals if v is not None]
    if not x_labels or not shown:
        return f'<p class="muted">{esc(empty)}</p>'
    w, h, left, top, bottom = (720, 320, 60, 20, 50) if not responsive else (600, 300, 64, 20, 50)
    right = 170 if legend else 56
    fs = 11 if not responsive else 16
    top_v = max(known) or 1
    slot = (w - left - right) / max(1, len(x_labels) - 1)
    tilt = responsive and len(x_labels) > 1 and max(len(m) for m in x_labels) * fs * 0.6 > slot * 0.95
    if tilt:  # long labels: written at 35°, the plot gets their room below it
        bottom = min(160, int(max(len(m) for m in x_labels) * fs * 0.6 * 0.6) + 30)
        h += bottom - 50
        left = max(left, min(200, int(len(x_labels[0]) * fs * 0.6 * 0.82) + 8))
        slot = (w - left - right) / max(1, len(x_labels) - 1)
    x = lambda i: left + (w - left - right) * (i / max(1, len(x_labels) - 1))  # noqa: E731
    y = lambda v: top + (h - top - bottom) * (1 - v / top_v)  # noqa: E731
    size = (f'viewBox="0 0 {w} {h}" width="100%" class="chart" preserveAspectRatio="xMinYMin meet"' if responsive
            else f'width="{w}" height="{h}"')
    out = [f'<svg id="{esc(svg_id)}" xmlns="http://www.w3.org/2000/svg" {size} role="img" aria-label="{esc(label)}">']
    out.append(f'<line x1="{left}" y1="{h - bottom}" x2="{w - right}" y2="{h - bottom}" stroke="#999"/>')
    out.append(f'<line x1="{left}" y1="{top}" x2="{left}" y2="{h - bottom}" stroke="#999"/>')
    one = len(x_labels) == 1
    for i, m in enumerate(x_labels):
        px = (left + (w - left - right) / 2) if one else x(i)
        if tilt:
            ty = h - bottom + fs + 2
            out.append(f'<text x="{px:.1f}" y="{ty}" font-size="{fs}" text-anchor="end" '
                       f'transform="rotate(-35 {px:.1f} {ty})">{esc(m)}</text>')
        else:
            out.append(f'<text x="{px:.1f}" y="{h - bottom + fs + 7}" font-size="{fs}" text-anchor="middle">{esc(m)}</text>')
    for frac in (0, 0.5, 1):
        v = top_v * frac
        out.append(f'<text x="{left - 6}" y="{y(v) + 4:.1f}" font-size="{fs}" text-anchor="end">{esc(y_fmt(v))}</text>')
    for k, (name, vals) in enumerate(shown):
        color = COLORS[_color_index(name, k, colors)]
        pts = [((left + (w - left - right) / 2) if one else x(i), y(v)) for i, v in enumerate(vals) if v is not None]
        if len(pts) > 1:
            out.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="'
                       + " ".join(f"{px:.1f},{py:.1f}" for px, py in pts) + '"/>')
        for px, py in pts:
            out.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3" fill="{color}"><title>{esc(name)}</title></circle>'
                       if responsive else f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3" fill="{color}"/>')
        if legend:
            out.append(f'<text x="{w - right + 10}" y="{top + 14 * k + 10}" font-size="11" fill="{color}">'
                       f'{esc(name)}</text>')
    out.append("</svg>")
    if responsive and not legend:
        out.append(legend_html([name for name, _ in shown], colors))
    return "".join(out)


def legend_html(names: Sequence[str], colors: Mapping[str, int] | None = None) -> str:
    """``<ul class="chart-legend">`` with a colour swatch (``.c0`` … ``.c9``) per name, in
    series order; ``colors`` as :func:`line_chart`'s."""
    return ('<ul class="chart-legend">' + "".join(f'<li><span class="sw c{_color_index(n, k, colors)}"></span>{esc(n)}</li>'
                                            for k, n in enumerate(names)) + "</ul>")


def bar_chart(svg_id: str, items: Sequence[tuple[str, float | None, str]], *, label: str,
              empty: str = "Nothing to chart yet.", colors: Mapping[str, int] | None = None) -> str:
    """``<svg id=svg_id>``: one horizontal bar per ``(name, value, text)`` (``text`` is the
    value as shown; a None value has no bar, only its text, e.g. ``n/a``); ``colors`` as
    :func:`line_chart`'s."""
    if not items:
        return f'<p class="muted">{esc(empty)}</p>'
    known = [v for _, v, _ in items if v is not None]
    top_v = max(known, default=0) or 1
    row, left, right, w = 30, 150, 110, 600
    h = row * len(items) + 10
    out = [f'<svg id="{esc(svg_id)}" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" width="100%" '
           f'class="chart" preserveAspectRatio="xMinYMin meet" role="img" aria-label="{esc(label)}">']
    for k, (name, v, text) in enumerate(items):
        yy = 5 + k * row
        out.append(f'<text x="{left - 8}" y="{yy + 20}" font-size="16" text-anchor="end">{esc(_clip(name, 15))}'
                   f'<title>{esc(name)}</title></text>')
        bw = 0.0 if v is None else (w - left - right) * (v / top_v)
        if v is not None:
            out.append(f'<rect x="{left}" y="{yy + 3}" width="{max(bw, 1):.1f}" height="{row - 8}" '
                       f'fill="{COLORS[_color_index(name, k, colors)]}"/>')
        muted = ' fill="#59636e"' if v is None else ""
        out.append(f'<text x="{left + bw + 6:.1f}" y="{yy + 20}" font-size="16"{muted}>{esc(text)}</text>')
    out.append("</svg>")
    return "".join(out)


# ---- treemap ---------------------------------------------------------------------------

Rect = tuple[float, float, float, float]


def _worst(row: list[float], length: float) -> float:
    """The worst aspect ratio of ``row`` (areas) laid along a side of ``length``."""
    s = sum(row)
    return max(max(length * length * r / (s * s), (s * s) / (length * length * r)) for r in row)


def squarify(values: Sequence[float], x: float, y: float, w: float, h: float) -> list[Rect | None]:
    """Squarified treemap (Bruls, Huizing, van Wijk 2000) of ``values`` in the box
    ``(x, y, w, h)``: one ``(x, y, w, h)`` per value, in the order given, with area
    proportional to the value and the whole box covered; None for a value ≤ 0 (no tile).
    Rectangles do not overlap and stay inside the box (up to float rounding)."""
    out: list[Rect | None] = [None] * len(values)
    idx = sorted((i for i, v in enumerate(values) if v > 0), key=lambda i: (-values[i], i))
    total = sum(values[i] for i in idx)
    if not idx or w <= 0 or h <= 0:
        return out
    scale = w * h / total
    areas = {i: values[i] * scale for i in idx}
    pos = 0
    while pos < len(idx):
        length = min(w, h)
        row = [idx[pos]]
        pos += 1
        while pos < len(idx) and _worst([areas[i] for i in row + [idx[pos]]], length) <= _worst(
                [areas[i] for i in row], length):
            row.append(idx[pos])
            pos += 1
        s = sum(areas[i] for i in row)
        last = pos == len(idx)
        if w >= h:  # a column on the left, full height
            cw = w if last else min(w, s / h)
            yy = y
            for n, i in enumerate(row):
                ih = (y + h - yy) if n == len(row) - 1 else areas[i] / cw
                out[i] = (x, yy, cw, ih)
                yy += ih
            x, w = x + cw, w - cw
        else:  # a row on top, full width
            rh = h if last else min(h, s / w)
            xx = x
            for n, i in enumerate(row):
                iw = (x + w - xx) if n == len(row) - 1 else areas[i] / rh
                out[i] = (xx, y, iw, rh)
                xx += iw
            y, h = y + rh, h - rh
    return out


@dataclass
class TreemapTile:
    """One arena's tile: ``arena`` id, ``name`` (display name), ``category``, ``value``
    (the measure), ``text`` (the value as shown), ``fleet`` (model configurations)."""

    arena: str
    name: str
    category: str
    value: float
    text: str
    fleet: list[str] = field(default_factory=list)


def treemap_svg(svg_id: str, tiles: Sequence[TreemapTile], *, measure: str, width: int = 960, height: int = 540,
                css_class: str = "treemap") -> str:
    """The capability treemap: categories laid out by their total ``value``, each
    category's arenas inside its box; each tile names its arena, its ``text`` and its
    fleet (as many lines as fit; the whole in the tile's ``<title>``). A measure whose
    every value is 0 gets a one-line note instead of tiles."""
    cats: dict[str, list[TreemapTile]] = {}
    for t in tiles:
        cats.setdefault(t.category, []).append(t)
    names = list(cats)
    totals = [sum(max(t.value, 0) for t in cats[c]) for c in names]
    head = (f'<svg id="{esc(svg_id)}" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
            f'width="100%" class="{esc(css_class)}" role="img" aria-label="capability treemap by {esc(measure)}">')
    if not any(v > 0 for v in totals):
        return (head + f'<rect x="0" y="0" width="{width}" height="{height}" fill="#f6f8fa"/>'
                f'<text x="{width / 2}" y="{height / 2}" font-size="16" text-anchor="middle" fill="#59636e">'
                f'no {esc(measure)} recorded</text></svg>')
    out = [head]
    for ci, (cname, box) in enumerate(zip(names, squarify(totals, 0, 0, width, height))):
        if box is None:
            continue
        bx, by, bw, bh = box
        fill, stroke = _CATEGORY_FILLS[ci % len(_CATEGORY_FILLS)], _CATEGORY_STROKES[ci % len(_CATEGORY_STROKES)]
        out.append(f'<g class="tm-cat"><rect x="{bx:.1f}" y="{by:.1f}" width="{bw:.1f}" height="{bh:.1f}" '
                   f'fill="{stroke}"/>')
        band = 20 if bh > 60 else 0
        if band:
            out.append(f'<text x="{bx + 5:.1f}" y="{by + 14:.1f}" font-size="12" font-weight="600" fill="#fff">'
                       f'{esc(_clip(cname, int((bw - 10) / 7)))}<title>{esc(cname)}</title></text>')
        inner = squarify([max(t.value, 0) for t in cats[cname]], bx + 2, by + band + 2, bw - 4, bh - band - 4)
        for t, r in zip(cats[cname], inner):
            if r is None:
                continue
            out.append(_tile(t, r, fill))
        out.append("</g>")
    out.append("</svg>")
    return "".join(out)


def _tile(t: TreemapTile, r: Rect, fill: str) -> str:
    x, y, w, h = r
    title = f"{t.name} ({t.arena}) · {t.category} · {t.text}" + (f" · fleet: {', '.join(t.fleet)}" if t.fleet else "")
    parts = [f'<g class="tm-tile"><title>{esc(title)}</title>'
             f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 0):.1f}" height="{max(h, 0):.1f}" fill="{fill}" '
             f'stroke="#ffffff" stroke-width="2"/>']
    chars = int((w - 10) / 7)
    lines: list[tuple[str, str]] = [(t.name, ' font-weight="600"'), (t.text, "")]
    lines += [(f"· {f}", ' fill="#1f2328"') for f in t.fleet]
    room = int((h - 6) // 15)
    if room < len(lines) and room >= 3:
        hidden = len(lines) - room + 1
        lines = lines[: room - 1] + [(f"+{hidden} more", ' fill="#59636e"')]
    for k, (text, attrs) in enumerate(lines[: max(room, 0)]):
        clipped = _clip(text, chars)
        if clipped:
            parts.append(f'<text x="{x + 5:.1f}" y="{y + 16 + 15 * k:.1f}" font-size="12"{attrs}>{esc(clipped)}</text>')
    parts.append("</g>")
    return "".join(parts)
