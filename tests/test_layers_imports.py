"""The package's import graph: no cycles, and each layer imports only the layers below it.

Parses every module under ``aoe_tui/`` with :mod:`ast` (no module is imported) and
collects its run-time imports of ``aoe_tui`` modules — at module level or inside
functions, but not under ``if TYPE_CHECKING:``. The module list is found on disk, so new
or renamed modules are checked without touching this file.

Layers (docs/architecture.md): the bottom modules (``aoe_tui/__init__``, ``errors``,
``fsio``, ``signals``) < ``domain`` < ``replay`` < ``runtime`` < ``agents`` < ``referee`` <
``season`` < ``export`` < ``tui`` < ``serve`` < ``commands``: exports are pure renderings
of season state (the TUI's ``e`` key writes them), spectators are served the TUI, the
CLI wires everything. ``aoe_tui/testing/`` and ``aoe_tui/cli.py`` may import anything.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "aoe_tui"

#: Rank of each top-level part of the package; a module may import modules of its own
#: part or of a part with a lower rank.
RANK = {
    "__init__": 0,
    "errors": 0,
    "fsio": 0,
    "signals": 0,
    "plugins": 0.5,  # loads AOE_PLUGINS; uses only errors
    "domain": 1,
    "replay": 2,
    "runtime": 3,
    "agents": 4,
    "referee": 5,
    "cluster": 5.5,  # heats on Ray worker nodes (optional extra)
    "season": 6,
    "export": 7,
    "tui": 8,
    "serve": 9,
    "commands": 10,
}
#: Parts that may import anything.
UNRESTRICTED = {"testing", "cli"}


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts = parts[:-1]
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_imports(tree: ast.AST, module: str, is_package: bool, type_only: bool = False) -> set[str]:
    """The ``aoe_tui`` modules ``tree`` imports at run time (``if TYPE_CHECKING:`` skipped),
    and with ``type_only`` also those it imports only for type hints."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test) and not type_only:
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base if is_package else base[:-1]
                base = base[: len(base) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            found.add(prefix)
            found.update(f"{prefix}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return {name for name in found if name == "aoe_tui" or name.startswith("aoe_tui.")}


def _graph(type_only: bool = False) -> dict[str, set[str]]:
    files = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        imported = _runtime_imports(tree, name, path.name == "__init__.py", type_only)
        # ``from aoe_tui.x import y`` names module ``aoe_tui.x.y`` only if that is a module.
        graph[name] = {m for m in imported if m in files and m != name}
    return graph


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_every_module_is_ranked() -> None:
    unknown = {_part(m) for m in _graph()} - set(RANK) - UNRESTRICTED
    assert not unknown, f"parts of aoe_tui missing from the layer table: {sorted(unknown)}"


def test_layers_import_only_lower_layers() -> None:
    bad = []
    for module, imported in _graph().items():
        part = _part(module)
        if part in UNRESTRICTED:
            continue
        for target in sorted(imported):
            tpart = _part(target)
            if tpart == part or RANK.get(tpart, 99) < RANK[part]:
                continue
            bad.append(f"{module} -> {target}")
    assert not bad, "imports running up (or across) the layers:\n" + "\n".join(bad)


def test_no_import_cycles() -> None:
    _assert_acyclic(_graph())


def test_no_import_cycles_even_through_type_hints() -> None:
    """Imports under ``if TYPE_CHECKING:`` run one way too (issue 30): a module built by
    another (a session by the server, a screen by the app) names what it needs of its maker
    with a ``Protocol`` of its own (``SessionHost``, ``ViewHost``, ``ViewApp``) rather than
    importing it back."""
    _assert_acyclic(_graph(type_only=True))


def _assert_acyclic(graph: dict[str, set[str]]) -> None:
    # Package __init__ modules import their children; an edge child -> parent package is
    # implicit in Python and not a cycle we care about unless the parent imports back.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def strongconnect(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            strongconnect(v)
    assert not cycles, "import cycles among aoe_tui modules:\n" + "\n".join(" <-> ".join(c) for c in cycles)
