"""The context of ``heat.html`` (one heat attempt's page) from a :class:`HeatPage`."""

from __future__ import annotations

from typing import Any

from aoe_tui.export.site.heat import HeatPage

__all__ = ["heat_context"]


def heat_context(page: HeatPage) -> dict[str, Any]:
    """``{"page": HeatPage, "title": str, "payload": dict}`` for ``heat.html``."""
    return {"page": page, "title": page.title, "payload": page.payload}
