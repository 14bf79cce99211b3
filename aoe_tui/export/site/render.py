"""Rendering for the cup site: one Jinja2 environment whose every ``{{ … }}`` output is
made visible (:func:`aoe_tui.domain.display.printable`: control characters, DEL, lone
surrogates and bidi/format characters become ``\\x1b``/``\\u202e`` escapes) and then
HTML-escaped (autoescape), so agent text — which is hostile input — shows literally.

Data for the pages' scripts goes through :func:`script_json`: JSON for a
``<script type="application/json">`` block (never executed), with every string made
visible and ``<``, ``>``, ``&``, U+2028/U+2029 written as ``\\uXXXX`` so no text can close
the block. The scripts read that data with ``JSON.parse`` and write it with
``textContent`` only.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from aoe_tui.domain.display import printable

__all__ = ["render_page", "script_json", "visible", "visible_tree"]

TEMPLATES = Path(__file__).with_name("templates")
ASSETS = Path(__file__).with_name("assets")


def visible(value: Any) -> Any:
    """``value`` with its text made visible (strings only; ``Markup`` — HTML we built — is
    kept as is). Line feeds stay (``<pre>`` blocks keep their lines)."""
    if isinstance(value, Markup) or not isinstance(value, str):
        return value
    return printable(value, newlines=True)


def visible_tree(obj: Any) -> Any:
    """A copy of a JSON-shaped ``obj`` with every string (keys too) made visible."""
    if isinstance(obj, str):
        return printable(obj, newlines=True)
    if isinstance(obj, dict):
        return {visible_tree(k): visible_tree(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [visible_tree(v) for v in obj]
    return obj


_SCRIPT_SAFE = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026",
                              "\u2028": "\\u2028", "\u2029": "\\u2029"})


def script_json(obj: Any) -> Markup:
    """``obj`` as JSON safe inside ``<script type="application/json">`` (see the module)."""
    text = json.dumps(visible_tree(obj), ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return Markup(text.translate(_SCRIPT_SAFE))


@cache
def _env() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                             finalize=visible, undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True)
    env.filters["script_json"] = script_json
    return env


def render_page(template: str, **context: Any) -> str:
    """Render ``templates/TEMPLATE`` with ``context`` (``root``: the relative path from the
    page to the site's top folder, e.g. ``"../../"``)."""
    return _env().get_template(template).render(**context)
