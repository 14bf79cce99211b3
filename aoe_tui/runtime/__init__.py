"""Runtime layer: territories — the guest image and arena layers, the providers (container,
qemu, ssh hosts, nixos), SSH, port and address plans, cleanup and doctor checks. May import
``domain`` and ``replay``. Formats: ``docs/formats.md`` §6; measured facts:
``docs/territories.md``; layers: ``docs/architecture.md``.
"""
