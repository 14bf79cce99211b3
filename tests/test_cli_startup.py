"""What building ``aoe``'s parser imports, and the garbage collector's state around a
command (``aoe_tui/cli.main``).

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

#: models only some commands need: not built by the parser (``aoe --help``, every command)
LATER = ("aoe_tui.domain.events", "aoe_tui.domain.world", "aoe_tui.domain.suite", "aoe_tui.replay.bundle",
         "aoe_tui.replay.matchdir", "aoe_tui.referee.supervisor", "asyncssh")


def _python(code: str) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_the_parser_builds_no_event_world_bundle_or_suite_model():
    got = _python(
        "import json, sys\n"
        "import aoe_tui.cli as cli\n"
        "cli.build_parser()\n"
        f"print(json.dumps([m for m in {LATER!r} if m in sys.modules]))\n"
    )
    assert got == [], "imported by building the parser"


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
