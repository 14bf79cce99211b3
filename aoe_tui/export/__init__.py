"""aoe_tui.export layer (see docs/architecture.md).

:mod:`aoe_tui.export.standings_files` renders season standings (csv, json, md, html).
"""

from aoe_tui.export.standings_files import FORMATS, render, write_all

__all__ = ["FORMATS", "render", "write_all"]
