"""Domain layer: typed models of every file format (arena manifests, suites, events, world
state, provenance, adapter result/usage files, season files), no I/O beyond reading a file
to parse it. Imports nothing of aoe_tui but ``aoe_tui.errors``. Formats: ``docs/formats.md``
(§1, §2, §5.3, §5.5, §7.3); layers: ``docs/architecture.md``.
"""
