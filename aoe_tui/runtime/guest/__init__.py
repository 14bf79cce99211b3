"""Package data of the guest image: ``customize.sh``, which turns a debootstrapped Debian tree
into a territory guest (read by :mod:`aoe_tui.runtime.image`). No Python code; see
``docs/territories.md`` and ``docs/architecture.md``.
"""
