"""aoe-tui: a tournament runner for AI-agent build races.

Compatible with the arena packages, adapters and match artifacts of the public
agents-of-empires project (formats: ``docs/formats.md``; map of the code:
``docs/architecture.md``).
"""

__version__ = "0.1.0"
