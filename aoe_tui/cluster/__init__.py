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
