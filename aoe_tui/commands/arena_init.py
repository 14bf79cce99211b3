"""``aoe arena init NAME [--from SOURCE] [--dir FOLDER]`` — write a new, runnable arena package.

The package is a copy of a starting point, renamed: the manifest's ``[arena]`` ``id`` becomes
NAME and its ``display_name`` NAME in title case (``my-arena`` → ``My Arena``), the old display
name becomes the new one in every ``*.md`` file, and the first line of ``README.md`` names the
new id. Starting points (``--from``):

* ``hello-service`` (the default): the example package shipped inside aoe-tui
  (``aoe_tui/data/hello-service``; ``examples/hello-service`` in the repository links to it);
* an arena package by name (``./arenas/NAME``, then the repository's ``arenas/NAME``), e.g.
  ``first-build``, or a package folder (a path).

Whatever it starts from, the package is completed so that it holds everything a new arena
needs: ``adapters/oracle.sh`` (the example's spec §5 oracle adapter) when it has none,
``adapters/builders/oracle.sh`` when it has none (the runner's built-in first-build oracle,
which such a package raced with until now, written out with its ``hasty``, ``memory`` and
``volatile`` builders as declared faults), ``territory/recipe.toml`` when it has none (the plain guest,
unchanged) and a ``README.md``. The result is checked with ``aoe arena validate``'s checks.

Refusals (one line, exit 2, nothing written): a NAME that is not an arena id, a FOLDER that
exists and is not empty, an unknown SOURCE.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import stat
from pathlib import Path

from aoe_tui.errors import AoeError, UsageError

__all__ = ["TEMPLATE", "init_package", "register", "resolve_source"]

#: The default starting point, shipped as package data (``pyproject.toml``).
TEMPLATE = Path(__file__).resolve().parent.parent / "data" / "hello-service"
#: The repository's arena packages (a checkout; an installed copy has only ``./arenas``).
REPO_ARENAS = Path(__file__).resolve().parent.parent.parent / "arenas"
#: An arena id (the manifest's pattern ``[a-z0-9-]+``), 2-64 characters, no '-' at either end.
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}[a-z0-9]$")


def register(asub: argparse._SubParsersAction) -> None:
    """Add ``init`` to the ``aoe arena`` command group."""
    p = asub.add_parser(
        "init",
        help="write a new, runnable arena package (from hello-service or another package)",
        description="Write a new arena package into ./NAME (or --dir FOLDER), renamed to NAME, from the "
                    "hello-service example or another package. docs/arena-packages.md goes on from there.",
    )
    p.add_argument("name", metavar="NAME", help="the new arena's id: 2-64 lowercase letters, digits and '-', "
                   "starting and ending with a letter or digit")
    p.add_argument("--from", dest="source", default="hello-service", metavar="SOURCE",
                   help="hello-service (default), an arena package's name (e.g. first-build) or folder")
    p.add_argument("--dir", metavar="FOLDER", help="where to write the package (default: ./NAME)")
    p.set_defaults(func=cmd_init)


def resolve_source(source: str) -> Path:
    """The package folder ``--from`` names (see the module docstring).

    Raises:
        UsageError: no such package (the message says where it looked).
    """
    if source == "hello-service":
        return TEMPLATE
    p = Path(source)
    if p.is_file() and p.name == "arena.toml":  # the package's manifest, as validate and match run take it
        p = p.parent
    if p.is_dir() and (p / "arena.toml").is_file():
        return p
    if "/" not in source:
        for base in (Path("arenas"), REPO_ARENAS):
            if (base / source / "arena.toml").is_file():
                return base / source
        raise UsageError(f"arena init --from {source}: no arena package {source!r} (looked for ./arenas/{source} and "
                         f"{REPO_ARENAS / source}); give hello-service or a package folder")
    raise UsageError(f"arena init --from {source}: {p} is not an arena package folder (no arena.toml)")


def display_name(name: str) -> str:
    """``my-arena`` → ``My Arena``."""
    return " ".join(w[:1].upper() + w[1:] for w in name.split("-") if w)


def _arena_table(text: str) -> tuple[int, int]:
    """Start and end offsets of the ``[arena]`` table's body in a manifest's text."""
    m = re.search(r"(?m)^\[arena\][ \t]*(#.*)?$", text)
    if m is None:
        raise AoeError("arena.toml has no [arena] table")
    nxt = re.search(r"(?m)^\[", text[m.end():])
    return m.end(), m.end() + (nxt.start() if nxt else len(text) - m.end())


def _rename(dest: Path, name: str) -> None:
    """Give the package at ``dest`` the arena id ``name`` (see the module docstring)."""
    mpath = dest / "arena.toml"
    text = mpath.read_text(encoding="utf-8")
    start, end = _arena_table(text)
    body = text[start:end]
    old_id = re.search(r'(?m)^id\s*=\s*"([^"]*)"', body)
    old_display = re.search(r'(?m)^display_name\s*=\s*"([^"]*)"', body)
    if old_id is None or old_display is None:
        raise AoeError(f"{mpath}: [arena] needs id and display_name lines to rename")
    new_display = display_name(name)
    body = body.replace(old_id.group(0), f'id = "{name}"', 1)
    body = body.replace(old_display.group(0), f'display_name = "{new_display}"', 1)
    mpath.write_text(text[:start] + body + text[end:], encoding="utf-8")
    # the package's other manifests (upstream's agents-real.toml: "first-build-real", "First
    # Build: Real Agents") follow: the old id and display name in theirs become the new ones
    for other in sorted(dest.glob("*.toml")):
        if other.name == "arena.toml" or other.is_symlink():
            continue
        t = other.read_text(encoding="utf-8")
        try:
            o_start, o_end = _arena_table(t)
        except AoeError:
            continue
        o_body = t[o_start:o_end]
        for key, old_v, new_v in (("id", old_id.group(1), name), ("display_name", old_display.group(1), new_display)):
            o_body = re.sub(rf'(?m)^({key}\s*=\s*")([^"]*)(")', lambda m: m.group(1) + m.group(2).replace(old_v, new_v)
                            + m.group(3), o_body, count=1)
        if o_body != t[o_start:o_end]:
            other.write_text(t[:o_start] + o_body + t[o_end:], encoding="utf-8")
    for md in sorted(dest.rglob("*.md")):
        if md.is_symlink() or not md.is_file():
            continue
        t = md.read_text(encoding="utf-8")
        new = t.replace(old_display.group(1), new_display)
        if md == dest / "README.md":
            first, nl, rest = new.partition("\n")
            new = first.replace(old_id.group(1), name) + nl + rest
        if new != t:
            md.write_text(new, encoding="utf-8")


def _first_build_oracle() -> str:
    """``adapters/builders/oracle.sh`` for first-build's contract: the runner's built-in oracle
    (its service template and deploy script, :mod:`aoe_tui.agents.oracle`) with the built-in
    ``hasty``, ``memory`` and ``volatile`` builders as its declared faults."""
    from importlib import resources

    from aoe_tui.agents.oracle import APP_TEMPLATE, DURABLE_STORAGE, deploy_script
    from aoe_tui.agents.scripted import SCRIPTED_BUILDERS

    app = resources.files("aoe_tui.agents").joinpath(APP_TEMPLATE).read_text(encoding="utf-8")
    return f"""# The oracle builder of first-build's contract, run as root in the territory (`bash -s`).
# Written by `aoe arena init` from the runner's built-in first-build oracle
# (aoe_tui/agents/oracle.py): the records service of apps/builder_app.py.txt in the
# builder-app.service slot. `--agent scripted:NAME` runs it with AOE_FAULT=NAME first:
# fault hasty: answers GET /records/<id> with a JSON wrapper, so write-read reads back a different value
# fault memory: keeps the records in a Python dict, so service-restart finds the record lost
# fault volatile: keeps the records in sqlite under /run (tmpfs), which host-reboot empties
set -euo pipefail
wrap=False
case "${{AOE_FAULT:-}}" in
  "")       storage={DURABLE_STORAGE} ;;
  hasty)    storage={DURABLE_STORAGE} wrap=True ;;
  memory)   storage={SCRIPTED_BUILDERS["memory"][0]} ;;
  volatile) storage={SCRIPTED_BUILDERS["volatile"][0]} ;;
  *)        echo "oracle.sh: unknown fault '$AOE_FAULT'" >&2; exit 2 ;;
esac
echo "aoe-step: writing /opt/builder/app.py (storage $storage) and restarting builder-app.service"
app=$(mktemp)
trap 'rm -f "$app"' EXIT
sed -e "s|__STORAGE__|$storage|" -e "s|__WRAP_READS__|$wrap|" > "$app" <<'PY'
{app.rstrip()}
PY
{{
{deploy_script().rstrip()}
}} < "$app"
"""


PLAIN_RECIPE = """\
# The starting state of this arena's territories (docs/arena-packages.md, "Territory
# recipe"). Written by `aoe arena init`: the plain guest, unchanged (it carries the
# builder-app.service slot). Add files/, units to enable, paths to remove, a setup script.
schema_version = 1
description = "the plain guest (its builder-app.service slot)"
"""


def _complete(dest: Path) -> list[str]:
    """Add what a package needs and ``dest`` lacks (see the module docstring); returns notes."""
    notes: list[str] = []
    adapters = dest / "adapters"
    if not (adapters / "oracle.sh").exists():
        adapters.mkdir(exist_ok=True)
        shutil.copy2(TEMPLATE / "adapters" / "oracle.sh", adapters / "oracle.sh")
        notes.append("adapters/oracle.sh: the hello-service example's oracle adapter (runs builders/oracle.sh)")
    builder = adapters / "builders" / "oracle.sh"
    if not builder.exists():
        builder.parent.mkdir(parents=True, exist_ok=True)
        builder.write_text(_first_build_oracle(), encoding="utf-8")
        notes.append("adapters/builders/oracle.sh: the runner's built-in first-build oracle, with its hasty, "
                     "memory and volatile builders as declared faults")
    if not (dest / "territory" / "recipe.toml").exists():
        (dest / "territory").mkdir(exist_ok=True)
        (dest / "territory" / "recipe.toml").write_text(PLAIN_RECIPE, encoding="utf-8")
        notes.append("territory/recipe.toml: the plain guest, unchanged")
    if not (dest / "README.md").exists():
        (dest / "README.md").write_text(f"# {dest.name} (an aoe-tui arena package)\n\nSee docs/arena-packages.md.\n",
                                        encoding="utf-8")
        notes.append("README.md: a stub")
    return notes


def _make_executable(dest: Path) -> None:
    """Scripts with a ``#!`` line under verify/ and adapters/ get 0755 (package data may lose modes)."""
    for d in ("verify", "adapters"):
        for p in (dest / d).rglob("*.sh") if (dest / d).is_dir() else ():
            if not p.is_symlink() and p.is_file() and p.read_bytes()[:2] == b"#!":
                p.chmod(p.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def init_package(name: str, source: Path, dest: Path) -> list[str]:
    """Write the package ``source`` renamed to ``name`` into ``dest`` (absent or empty),
    completed; returns the notes on what was added.

    Raises:
        UsageError: ``name`` is not an arena id, or ``dest`` exists and is not an empty folder.
    """
    if not NAME_RE.match(name):
        raise UsageError(f"arena init: {name!r} is not an arena id: use 2-64 lowercase letters, digits and '-', "
                         "starting and ending with a letter or digit (e.g. my-arena)")
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        what = "is not empty" if dest.is_dir() else "is not a folder"
        raise UsageError(f"arena init: {dest} already exists and {what}; give a new folder with --dir")
    shutil.copytree(source, dest, symlinks=True, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".git"))
    for p in dest.rglob("*"):  # a copy of read-only package data stays editable
        if not p.is_symlink():
            p.chmod(p.stat().st_mode | stat.S_IWUSR)
    _rename(dest, name)
    notes = _complete(dest)
    _make_executable(dest)
    return notes


def cmd_init(args: argparse.Namespace) -> int:
    """Run ``aoe arena init``; 0 when the written package validates, 1 when it does not."""
    from aoe_tui.domain.arena import validate_package

    source = resolve_source(args.source)
    dest = Path(args.dir) if args.dir else Path(args.name)
    notes = init_package(args.name, source, dest)
    report = validate_package(dest)
    shown = os.path.relpath(dest) if not dest.is_absolute() else str(dest)
    print(f"aoe: wrote arena package {shown} (arena {args.name}, from {args.source})")
    for n in notes:
        print(f"  added {n}")
    if not report.valid:
        for e in report.errors:
            print(e)
        print(f"aoe: {shown} does not validate yet: {len(report.errors)} problems (see above)")
        return 1
    print(f"next: aoe arena validate {shown}; aoe match run {shown} --agent oracle -o /tmp/{args.name}-heat")
    return 0
