"""What ``aoe`` imports before a heat's territories provision, and the garbage collector's
state around a command (``aoe_tui/cli.main``, ``aoe_tui/referee/heat.RACE_MODULES``).

Each check runs in a fresh interpreter (``sys.modules`` of this one is shared by every test).
Speed itself is measured by ``benchmarks/heat_oracle.py`` (the ``start-up`` and ``exit`` phases).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

#: imported while the territories boot, never before (the event/world models, the referee, asyncssh)
LATER = ("aoe_tui.domain.events", "aoe_tui.domain.world", "aoe_tui.replay.log", "aoe_tui.replay.bundle",
         "aoe_tui.referee.supervisor", "aoe_tui.referee.rules", "aoe_tui.runtime.ssh", "asyncssh")


def _python(code: str) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_the_parser_and_the_heat_module_leave_the_race_modules_to_the_provisioning_thread():
    got = _python(
        "import json, sys\n"
        "import aoe_tui.cli as cli\n"
        "cli.build_parser()\n"
        "import aoe_tui.referee.heat as heat, aoe_tui.commands.match, aoe_tui.runtime.container\n"
        f"before = [m for m in {LATER!r} if m in sys.modules]\n"
        "heat._import_race_modules()\n"
        f"after = [m for m in {LATER!r} if m not in sys.modules]\n"
        "print(json.dumps({'before': before, 'missing_after': after, 'race': list(heat.RACE_MODULES)}))\n"
    )
    assert got["before"] == [], "imported before the territories provision"
    assert got["missing_after"] == [], "RACE_MODULES does not cover what the race imports"
    assert "aoe_tui.referee.supervisor" in got["race"]


def test_the_command_runs_with_the_collector_on_and_the_start_up_frozen():
    """As the process (``main()`` without arguments), the parser is built with the collector
    off; the command itself runs with it on (a season must collect), the start-up frozen."""
    got = _python(
        "import gc, json, sys\n"
        "import aoe_tui.commands.inspect as inspect\n"
        "seen = {}\n"
        "def probe(args):\n"
        "    seen.update(enabled=gc.isenabled(), frozen=gc.get_freeze_count())\n"
        "    return 0\n"
        "inspect.cmd_inspect = probe\n"
        "sys.argv = ['aoe', 'inspect', 'no-such-match']\n"
        "from aoe_tui.cli import main\n"
        "rc = main()\n"
        "print(json.dumps({'rc': rc, **seen, 'enabled_after': gc.isenabled()}))\n"
    )
    assert got["rc"] == 0 and got["enabled"] is True and got["frozen"] > 10_000 and got["enabled_after"] is True


def test_main_called_with_arguments_leaves_the_collector_alone():
    """In-process callers (tests, embedders) pass ``argv``: no freeze, the collector untouched."""
    got = _python(
        "import gc, json\n"
        "from aoe_tui.cli import main\n"
        "gc.disable()\n"
        "rc = main(['arena', 'validate', 'arenas/first-build'])\n"
        "print(json.dumps({'rc': rc, 'enabled': gc.isenabled(), 'frozen': gc.get_freeze_count()}))\n"
    )
    assert got == {"rc": 0, "enabled": False, "frozen": 0}
