"""What each page template gets: one context builder per page kind.

- :func:`heat_context` (``heat.html``): :mod:`aoe_tui.export.site.heat_context`;
- :func:`home_context` (``home.html`` of a season), :func:`matches_context` (``home.html``
  of ``aoe site --match``), :func:`leaderboard_context` (``leaderboard.html``):
  :mod:`aoe_tui.export.site.season_context`.

Every template also gets ``root`` (the relative path from the page to the site's top
folder) and ``nav`` (:func:`nav`).
"""

from __future__ import annotations

from typing import Any

from aoe_tui.export.site.heat import slugify
from aoe_tui.export.site.heat_context import heat_context
from aoe_tui.export.site.season_context import home_context, leaderboard_context, matches_context

__all__ = ["heat_context", "home_context", "leaderboard_context", "matches_context", "nav", "slugify"]


def nav(season: bool) -> dict[str, Any]:
    """The site's top navigation: ``[(label, path from the site's top folder), …]``."""
    return {"links": [("Season" if season else "Matches", "index.html"), ("Leaderboard", "leaderboard.html")]}
