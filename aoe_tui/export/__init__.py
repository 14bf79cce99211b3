"""aoe_tui.export layer (see docs/architecture.md).

:mod:`aoe_tui.export.season` renders season standings (csv, json, md, html).
"""

from aoe_tui.export.season import FORMATS, render, write_all

__all__ = ["FORMATS", "render", "write_all"]
