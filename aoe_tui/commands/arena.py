"""``aoe arena validate PATH [--json] [--schema-only]`` — arena package / manifest / suite checks
(``aoe arena init``: :mod:`aoe_tui.commands.arena_init`).

PATH is a package folder (``DIR/arena.toml``), a manifest file or a suite file
(``[suite]`` table, §1.13). Every problem is printed as ``file:line: field:
message`` on stderr and the exit code is 1; a valid input prints one summary
line on stdout and exits 0. ``--json`` prints upstream's validation report
(§1.12) instead. ``--schema-only`` checks only the manifest itself, not the
package files (verifiers, instructions, brief).
"""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
from pathlib import Path

from aoe_tui.domain.arena import (
    ManifestError,
    PackageReport,
    Problem,
    load_manifest,
    resolve_manifest_path,
    validate_package,
)


def register(sub: argparse._SubParsersAction) -> None:
    """Register the ``arena`` command group (``validate``, ``init``)."""
    p = sub.add_parser("arena", help="check arena packages and manifests")
    asub = p.add_subparsers(dest="arena_command", metavar="SUBCOMMAND")
    asub.required = True
    v = asub.add_parser(
        "validate",
        help="validate an arena package folder, manifest or suite",
        description="Validate an arena package folder, an arena manifest or a suite file.",
    )
    v.add_argument("path", metavar="PATH", help="package folder, arena manifest (.toml) or suite file")
    v.add_argument("--json", action="store_true", help="print the validation report as JSON")
    v.add_argument(
        "--schema-only",
        action="store_true",
        help="check the manifest only, not the package files (verifiers, instructions, brief)",
    )
    v.set_defaults(func=cmd_validate)
    from aoe_tui.commands.arena_init import register as register_init

    register_init(asub)


def _is_suite(path: Path) -> bool:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False
    return isinstance(data, dict) and "suite" in data and "arena" not in data


def cmd_validate(args: argparse.Namespace) -> int:
    """Run ``aoe arena validate``; return the exit code (0 valid, 1 problems)."""
    given = args.path
    mpath = resolve_manifest_path(given)
    if mpath.is_file() and _is_suite(mpath):
        return _validate_suite(given, args)
    if args.schema_only:
        report = PackageReport(valid=False, arena=None, schema_version=None, root=str(mpath.parent), manifest=str(mpath))
        try:
            loaded = load_manifest(str(mpath) if Path(given).is_dir() else given)
        except ManifestError as err:
            report.problems = list(err.problems)
            report.errors = [str(p) for p in err.problems]
        else:
            report.loaded = loaded
            report.valid = True
            report.arena = loaded.manifest.arena.id
            report.schema_version = loaded.manifest.schema_version
    else:
        report = validate_package(given)
        report.warnings.extend(_builder_warnings(Path(report.root)) + _toolkit_warnings(Path(report.root)))
    if args.json:
        print(json.dumps(report.to_json(), indent=2, ensure_ascii=False))
        return 0 if report.valid else 1
    for w in report.warnings:
        print(f"warning: {w}", file=sys.stderr)
    if not report.valid:
        for e in report.errors:
            print(e, file=sys.stderr)
        n = len(report.errors)
        print(f"aoe: {mpath}: {n} problem{'s' if n != 1 else ''}", file=sys.stderr)
        return 1
    m = report.loaded.manifest  # type: ignore[union-attr]
    n_ms = len(m.build.milestones) if m.build else 0
    scope = "manifest" if args.schema_only else "package"
    print(
        f"ok: {scope} {mpath} valid — arena {m.arena.id} ({m.arena.mode}), "
        f"{n_ms} milestones, {len(m.territories)} territories, {len(m.agents)} agents"
        + (f", {len(report.warnings)} warnings" if report.warnings else "")
    )
    return 0


def _builder_warnings(root: Path) -> list[str]:
    """Warnings about the package's oracle builder (docs/arena-packages.md, "Builders: the
    oracle plus faults"): a ``# fault NAME:`` line whose NAME the script never mentions again
    (no branch of its ``AOE_FAULT`` switch runs it)."""
    import re

    from aoe_tui.agents.scripted import FAULT_RE, builder_faults

    oracle = root / "adapters" / "builders" / "oracle.sh"
    try:
        text = oracle.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    out = [f"{oracle}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0).strip()!r} is not a fault declaration "
           f"(write '# fault NAME: WHY', NAME of letters, digits, '.', '_', '-')"
           for m in re.finditer(r"(?m)^#[ \t]*fault\b.*$", text) if not FAULT_RE.fullmatch(m.group(0))]
    body = FAULT_RE.sub("", text)
    out += [f"{oracle}: fault {name} is declared but the script never mentions it again "
            f"(no branch of its AOE_FAULT switch runs it)"
            for name in builder_faults(oracle) if not re.search(rf"(?<![\w.-]){re.escape(name)}(?![\w.-])", body)]
    return out


def _toolkit_warnings(root: Path) -> list[str]:
    """Warnings about verifiers that use the runner's verifier toolkit (docs/arena-packages.md,
    "The verifier toolkit", its rules): a ``verify/*.sh`` that redefines a name the toolkit
    defines, or opens its own SSH or ``nsenter`` session. Packages that do not use the toolkit
    (upstream's) are not checked."""
    import re

    from aoe_tui.referee.verifier import SHELL_DEFINITION_RE, VERIFY_KIT_ENV, kit_names

    scripts = sorted((root / "verify").glob("*.sh"))
    texts = {}
    for script in scripts:
        try:
            texts[script] = script.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
    if not any(VERIFY_KIT_ENV in t for t in texts.values()):
        return []
    out = []
    for script, text in texts.items():
        mine = sorted(set(SHELL_DEFINITION_RE.findall(text)) & kit_names())
        if mine:
            out.append(f"{script}: redefines the verifier toolkit's {', '.join(mine)} (use the toolkit's, or "
                       "another name: its guest access must stay the referee's)")
        code = "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#"))
        if re.search(r"\b(sshpass|ssh|nsenter)\s+-", code):
            out.append(f"{script}: opens its own SSH or nsenter session (use the toolkit's guest: it runs out "
                       "of the player's reach)")
    return out


def _validate_suite(given: str, args: argparse.Namespace) -> int:
    from aoe_tui.domain.suite import load_suite  # its models: not built by every `aoe` command

    try:
        loaded = load_suite(given)
    except ManifestError as err:
        problems: list[Problem] = err.problems
        if args.json:
            print(json.dumps({"valid": False, "suite": given, "errors": [str(p) for p in problems]}, indent=2))
            return 1
        for p in problems:
            print(str(p), file=sys.stderr)
        print(f"aoe: {given}: {len(problems)} problem{'s' if len(problems) != 1 else ''}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"valid": True, "suite": loaded.suite.suite.id, "errors": []}, indent=2))
        return 0
    ids = ", ".join(a.manifest.arena.id for a in loaded.arenas)
    print(f"ok: suite {given} valid — {loaded.suite.suite.id}, {len(loaded.arenas)} arenas ({ids})")
    return 0
