"""aoe-tui: a tournament runner for AI-agent build races.

Compatible with the arena packages, adapters and match artifacts of the public
agents-of-empires project (formats: ``docs/formats.md``; map of the code:
``docs/architecture.md``).
"""

__version__ = "0.1.0"

import warnings as _warnings

# cryptography 51 deprecates DSA, and asyncssh (every SSH of ours) warns about it at import:
# ten lines on the operator's terminal before any output, in every command and spectator
# view. We never use DSA keys; only that warning, from asyncssh's own modules, is silenced.
_warnings.filterwarnings("ignore", message="DSA is deprecated", module=r"asyncssh(\.|$)")
