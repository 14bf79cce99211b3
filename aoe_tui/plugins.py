"""Plugins: code outside the package that registers providers or formats.

``AOE_PLUGINS`` names plugin modules, comma-separated, each ``module`` or
``module:function``. :func:`aoe_tui.cli.main` imports every one before it builds the
parser (and calls ``function()`` with no arguments when given), so whatever they register
(:func:`aoe_tui.runtime.registry.register_provider`,
:func:`aoe_tui.season.formats.register_format`) is in every command: ``aoe match run
--provider``, season files, ``aoe doctor``, ``aoe cleanup``. The module must be importable
(installed, or on ``PYTHONPATH``). Example::

    AOE_PLUGINS=my_hosts_provider aoe doctor --provider my-hosts
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping

from aoe_tui.errors import UsageError

__all__ = ["ENV", "load_plugins"]

#: The environment variable naming plugin modules.
ENV = "AOE_PLUGINS"


def load_plugins(environ: Mapping[str, str] | None = None) -> list[str]:
    """Import (and call) every plugin of ``environ[AOE_PLUGINS]`` (default ``os.environ``),
    in order; returns the entries loaded. Importing a module twice is a no-op; a function
    is called each time (registrations are idempotent).

    Raises:
        UsageError: an entry cannot be imported, has no such function, or its function
            raised (one line naming ``AOE_PLUGINS`` and the entry).
    """
    text = (environ if environ is not None else os.environ).get(ENV, "")
    loaded = []
    for spec in (s.strip() for s in text.split(",")):
        if not spec:
            continue
        module_name, _, func = spec.partition(":")
        try:
            module = importlib.import_module(module_name)
            if func:
                getattr(module, func)()
        except Exception as err:  # noqa: BLE001 - any plugin failure is one line, no traceback
            raise UsageError(f"{ENV}: plugin {spec!r} failed: {type(err).__name__}: {err}") from None
        loaded.append(spec)
    return loaded
