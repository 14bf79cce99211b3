"""Replay layer: the append-only logs (``events.jsonl``, ``season.jsonl``), the one reducer
from events to world state, standings and the single-file match bundle. May import
``domain``. Formats: ``docs/formats.md`` (§2.1–§2.4, §3.6, Appendix B); layers:
``docs/architecture.md``.
"""
