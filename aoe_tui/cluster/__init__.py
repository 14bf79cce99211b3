"""Heats on the worker nodes of a Ray cluster (issue 15). Optional: ``pip install -e '.[cluster]'``.

Layer: above ``referee/`` (a worker runs :func:`aoe_tui.referee.heat.run_heat`), below
``season/`` (the season runner hands heats to :mod:`aoe_tui.cluster`). Nothing here is
imported by a season run without a cluster, and ``ray`` is imported only through
:func:`require_ray`.

The contract between a worker node and the runner:

- :data:`HEAT_SLOT` is the Ray custom resource a node offers, one unit per heat slot
  (``aoe worker start --slots N``); a heat's actor asks for one unit, so all three
  territories of a heat are on one node.
- :data:`ENV_WORKER_DIR` is set in the environment ``ray start`` runs with (Ray's worker
  processes inherit it): the node's own state folder. Territories live under
  :func:`territories_dir`, so a node that comes back tears down what its lost heats left.
- :data:`ENV_WORKER_NAME`: the node's name, shown in the season screen, the headless
  lines and the detail of an attempt the node's loss spoiled.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from types import ModuleType

from aoe_tui.errors import AoeError

#: The Ray custom resource a worker node offers, one unit per heat slot.
HEAT_SLOT = "aoe_heat_slot"
#: The node's state folder (territories, scratch match folders), in ``ray start``'s environment.
ENV_WORKER_DIR = "AOE_WORKER_DIR"
#: The node's name, in ``ray start``'s environment.
ENV_WORKER_NAME = "AOE_WORKER_NAME"


class ClusterError(AoeError):
    """A cluster could not be used (Ray missing, no address, no node with a heat slot);
    the message is one line naming what and where."""


def require_ray() -> ModuleType:
    """``import ray``, or :class:`ClusterError` saying how to install the extra."""
    try:
        import ray
    except ImportError:
        raise ClusterError("Ray is not installed: pip install -e '.[cluster]' (./setup.sh installs it)") from None
    return ray


def worker_dir() -> Path:
    """This node's state folder (:data:`ENV_WORKER_DIR`); :class:`ClusterError` when the
    process was not started by ``aoe worker start``."""
    value = os.environ.get(ENV_WORKER_DIR)
    if not value:
        raise ClusterError(f"{ENV_WORKER_DIR} is not set: this Ray node was not started by `aoe worker start`")
    return Path(value)


def territories_dir(base: Path) -> Path:
    """Where a node's heats keep their territories (``base/territories``)."""
    return base / "territories"


@functools.cache
def code_revision() -> str:
    """The revision of the aoe-tui code this process runs: ``git rev-parse HEAD`` of the
    checkout holding the imported ``aoe_tui`` package (40 hex), ``+dirty`` appended when its
    tracked files differ from that commit; ``version <__version__>`` when the package is not
    in a git checkout (an installed wheel). Computed once per process (two ``git`` calls,
    5 s each at most); never raises."""
    import subprocess

    from aoe_tui import __version__

    where = str(Path(__file__).resolve().parent.parent)
    out = f"version {__version__}"
    try:
        head = subprocess.run(["git", "-C", where, "rev-parse", "--verify", "HEAD"], capture_output=True,
                              text=True, timeout=5, check=False)
        if head.returncode == 0 and head.stdout.strip():
            out = head.stdout.strip()
            dirty = subprocess.run(["git", "-C", where, "status", "--porcelain", "--untracked-files=no"],
                                   capture_output=True, text=True, timeout=5, check=False)
            if dirty.returncode == 0 and dirty.stdout.strip():
                out += "+dirty"
    except (OSError, subprocess.SubprocessError):
        pass
    return out


@functools.cache
def image_digest() -> str:
    """The digest of the base guest image this machine's heats boot (the built image of the
    current recipe, :func:`aoe_tui.runtime.image.find_image`): ``<recipe key>:<sha256 of its
    image.json, 16 hex>`` (the recipe key says what was asked for, the record's hash which
    build of it: its packages and build time). ``none`` when it is not built. Computed once
    per process; never raises."""
    import hashlib

    try:
        from aoe_tui.runtime.image import find_image

        img = find_image()
        if img is None:
            return "none"
        return f"{img.key}:{hashlib.sha256((img.root / 'image.json').read_bytes()).hexdigest()[:16]}"
    except Exception:  # noqa: BLE001 - an unreadable image is reported as such
        return "unreadable"


def identity() -> dict[str, str]:
    """What this process runs heats with: ``{"code": code_revision(), "image":
    image_digest()}`` (each computed once per process; may run ``git``: call it off an event
    loop the first time)."""
    return {"code": code_revision(), "image": image_digest()}
