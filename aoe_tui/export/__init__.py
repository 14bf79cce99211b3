"""Export layer: :mod:`aoe_tui.export.standings_files` renders season standings (csv, json,
md, html); :mod:`aoe_tui.export.trajectory` writes the agents' ATIF trajectories (§9.3). A
view: may import ``domain``, ``replay`` and ``season``. Upstream summaries it follows:
``docs/formats.md`` §7.1, §7.2; layers: ``docs/architecture.md``.
"""

from aoe_tui.export.standings_files import FORMATS, render, write_all

__all__ = ["FORMATS", "render", "write_all"]
