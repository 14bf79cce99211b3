"""Test and demo helpers that stand in for outside services (a scripted OpenAI-compatible
model endpoint for the opencode adapter). Used by tests and demos, never by the
runtime path; may import any layer. See ``docs/opencode.md`` and ``docs/architecture.md``.
"""
