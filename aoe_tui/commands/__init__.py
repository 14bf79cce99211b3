"""Sub-commands of the ``aoe`` CLI; each module exposes ``register(subparsers)``."""
