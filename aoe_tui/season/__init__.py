"""Season layer (ours; upstream has no tournaments): formats (league, knockout), attempts
and the retry rule, the season runner, standings and ratings. May import every layer up to
``referee``. Season files are described in ``aoe_tui.domain.season_file``; the upstream rules it
reuses in ``docs/formats.md`` (§3.6, §3.9, §7.1, §7.2); layers: ``docs/architecture.md``.
"""
