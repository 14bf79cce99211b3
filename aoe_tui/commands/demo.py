"""``aoe demo``: the project's first command — the demo season, live, on this machine.

Runs ``seasons/demo.toml`` (seven built-in entrants — oracle and scripted builders — on
local systemd-nspawn container territories, a two-round league of short heats, about two
minutes) in the TUI, exactly as ``aoe run seasons/demo.toml`` would. Before that it
checks the host (root, ``systemd-nspawn``, ``ip``: one clear line pointing to
``aoe doctor`` otherwise) and builds the territory guest image when it is missing, with
a progress bar (about two minutes the first time). Output goes to
``seasons-out/demo-<YYYYmmdd-HHMMSS>/`` (gitignored) unless ``--output`` names a folder;
running ``aoe run seasons/demo.toml --output THAT_FOLDER`` resumes a stopped demo. Its cup
site (``aoe run --site``, docs/site.md) is kept beside it in ``<folder>-site/``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

from aoe_tui.errors import AoeError

#: the demo season file shipped with the repository
DEMO_SEASON = Path(__file__).resolve().parent.parent.parent / "seasons" / "demo.toml"


class DemoHostError(AoeError):
    """This host cannot run container territories (not root, or tools missing)."""


def register(sub: argparse._SubParsersAction) -> None:
    """Register ``aoe demo``."""
    p = sub.add_parser(
        "demo", help="run the demo season live in the TUI (containers, built-in agents, ~2 min)",
        description="Run seasons/demo.toml in the TUI on local container territories with the built-in "
        "agents; builds the guest image first if it is missing. Needs root and systemd-nspawn (see aoe doctor).",
    )
    p.add_argument("--output", "-o", metavar="DIR", help="season folder (default: seasons-out/demo-<timestamp>)")
    p.add_argument("--headless", action="store_true", help="no TUI: print one line per state change")
    p.add_argument("--light", action="store_true", help="light theme")
    p.set_defaults(func=cmd_demo)


def check_host() -> None:
    """Raise :class:`DemoHostError` (one line, pointing to ``aoe doctor``) unless this host
    can run container territories: root, ``systemd-nspawn`` and ``ip`` on PATH."""
    if os.geteuid() != 0:
        raise DemoHostError("aoe demo runs container territories and needs root (try: sudo .venv/bin/aoe demo); "
                            "run `aoe doctor` to check this host")
    missing = [tool for tool in ("systemd-nspawn", "ip") if shutil.which(tool) is None]
    if missing:
        pkg = {"systemd-nspawn": "systemd-container", "ip": "iproute2"}
        raise DemoHostError(f"aoe demo needs {', '.join(missing)} (apt-get install "
                            f"{' '.join(pkg[m] for m in missing)}); run `aoe doctor` to check this host")


def cmd_demo(args: argparse.Namespace) -> int:
    """Check the host, build the image if missing (progress bar), run the demo season."""
    from aoe_tui.commands.image import build_image_with_progress
    from aoe_tui.commands.season import run_season
    from aoe_tui.season.runner import load_season_file
    from aoe_tui.runtime.image import find_image

    check_host()
    if not DEMO_SEASON.is_file():
        raise AoeError(f"{DEMO_SEASON}: demo season file not found (run aoe demo from a source checkout)")
    loaded = load_season_file(DEMO_SEASON)
    if find_image() is None:
        print("building the territory guest image (first run only, about 2 minutes)…",
              file=sys.stderr, flush=True)
        build_image_with_progress()
    out = Path(args.output) if args.output else Path("seasons-out") / f"demo-{time.strftime('%Y%m%d-%H%M%S')}"
    headless = args.headless or not sys.stdout.isatty()
    site = out.with_name(f"{out.name}-site")
    print(f"demo season → {out} (its cup site: {site}/index.html)", file=sys.stderr, flush=True)
    return run_season(loaded, out, headless=headless, light=args.light, site=site)
