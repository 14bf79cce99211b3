"""Commands layer: the sub-commands of the ``aoe`` CLI; each module exposes
``register(subparsers)``. The top of the stack: may import every other layer, and nothing
imports it but ``aoe_tui.cli``. Layers: ``docs/architecture.md``; formats: ``docs/formats.md``.
"""
