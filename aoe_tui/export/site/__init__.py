"""The cup site (``aoe site``, ``aoe run --site``): a static, self-contained website of a
season or of published matches. :mod:`.build` (layout, orchestration), :mod:`.heat` (a
heat attempt's data and replay frames, through the one reducer), :mod:`.heat_context` and
:mod:`.season_context` (what each page shows), :mod:`.render` (templates; every output made
visible and escaped), :mod:`.publish` (the one-step swap). Upstream's site it follows:
``docs/formats.md`` §9.1.
"""

from aoe_tui.export.site.build import SiteSummary, build_match_site, build_season_site

__all__ = ["SiteSummary", "build_match_site", "build_season_site"]
