"""Territory recipes (``<package>/territory/``): an arena's starting state on our Debian guest.

Ours, not upstream's (upstream builds NixOS modules; its strict reader never parses this
folder). Format and conventions: ``docs/arena-packages.md``. A recipe is::

    territory/recipe.toml   schema_version = 1, description, remove, enable, setup, [modes]
    territory/files/        a tree copied into the guest's /
    territory/setup.sh      optional script (``setup`` names it), run as root in the layer

Entry points:

* :func:`find_recipe` — the recipe folder of a package, or None (the plain guest);
* :func:`load_recipe` — parse and check ``recipe.toml`` and the files it names;
  raises :class:`RecipeError` listing every :class:`~aoe_tui.domain.arena.Problem`;
* :func:`recipe_digest` — sha256 over everything the layer is built from;
* :func:`leak_problems` — files the recipe puts under a fog scan path that contain a
  forbidden string (spec §1.10, §6.4), checked before any guest exists.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from aoe_tui.domain.tomlfile import Problem, parse_toml, read_toml_source, schema_problems
from aoe_tui.domain.tomlpos import TomlPositions
from aoe_tui.errors import AoeError

__all__ = [
    "LoadedRecipe",
    "Recipe",
    "RecipeError",
    "find_recipe",
    "leak_problems",
    "load_recipe",
    "recipe_digest",
]

#: Folder of a package that holds its recipe.
RECIPE_DIR = "territory"
#: Bump when the meaning of a recipe (how a layer is built from it) changes.
RECIPE_FORMAT = 1
_MODE_RE = re.compile(r"^0?[0-7]{3,4}$")
_UNIT_RE = re.compile(r"^[A-Za-z0-9:_.@-]+\.(service|socket|timer|path|mount|target)$")
#: Where unit files may live in ``files/`` (as in the guest).
UNIT_DIRS = ("usr/lib/systemd/system", "etc/systemd/system", "lib/systemd/system")


class RecipeError(AoeError):
    """A recipe that cannot be used; ``.problems`` lists every :class:`Problem`
    (``str()`` is one ``file:line: field: message`` per line)."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


class Recipe(BaseModel):
    """``territory/recipe.toml`` (see the module docstring; unknown keys rejected).

    Attributes:
        schema_version: must be 1.
        description: one line saying what the starting state is.
        remove: absolute guest paths of the plain guest to delete in this arena.
        enable: unit names (in ``files/``) to enable as ``systemctl enable`` does.
        setup: a script in ``territory/`` run with bash as root inside the layer, last.
        modes: guest path → octal mode string (``"0755"``) of a copied path.
    """

    model_config = ConfigDict(extra="forbid", strict=True)

    schema_version: Annotated[int, Field(ge=0)]
    description: str = ""
    remove: list[str] = Field(default_factory=list)
    enable: list[str] = Field(default_factory=list)
    setup: str | None = None
    modes: dict[str, str] = Field(default_factory=dict)


@dataclass(frozen=True)
class LoadedRecipe:
    """A checked recipe: ``recipe`` (model), ``root`` (the ``territory/`` folder),
    ``files`` (``root/files``, may not exist), ``raw`` (``recipe.toml`` bytes)."""

    recipe: Recipe
    root: Path
    raw: bytes

    @property
    def files(self) -> Path:
        """``territory/files/``: the tree copied into the guest's ``/``."""
        return self.root / "files"

    @property
    def setup_script(self) -> Path | None:
        """The setup script's path, or None."""
        return self.root / self.recipe.setup if self.recipe.setup else None

    def mode_of(self, rel: str, src: Path) -> int:
        """The guest mode of the copied path ``rel`` (relative to ``files/``): ``[modes]``,
        else 0755 for folders and executable files, else 0644."""
        text = self.recipe.modes.get("/" + rel.lstrip("/"))
        if text is not None:
            return int(text, 8)
        st = src.lstat()
        if stat.S_ISDIR(st.st_mode) or st.st_mode & 0o111:
            return 0o755
        return 0o644


def find_recipe(package_dir: Path) -> Path | None:
    """``package_dir/territory`` when it holds a ``recipe.toml``, else None."""
    root = Path(package_dir) / RECIPE_DIR
    return root if (root / "recipe.toml").is_file() else None


def _guest_path_ok(p: str) -> bool:
    pp = PurePosixPath(p)
    return pp.is_absolute() and ".." not in pp.parts and str(pp) != "/"


def _files_tree(files: Path) -> list[Path]:
    """Every path under ``files`` (sorted, symlinks not followed)."""
    out: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(files, followlinks=False):
        dirnames.sort()
        base = Path(dirpath)
        for name in dirnames:
            out.append(base / name)
        for name in sorted(filenames):
            out.append(base / name)
    return sorted(out)


def load_recipe(root: Path) -> LoadedRecipe:
    """Read and check ``root/recipe.toml`` (``root`` is a package's ``territory/`` folder).

    Checks: TOML and schema (unknown keys, types), ``schema_version == 1``; ``remove``
    paths absolute (no ``..``, not ``/``); every ``enable`` entry a unit name whose file is
    in ``files/`` (under a systemd unit folder); every ``[modes]`` key an existing path of
    ``files/`` and every value an octal mode; the ``setup`` script exists inside ``root``;
    ``files/`` holds only folders, regular files and symlinks.

    Raises:
        RecipeError: every problem, each naming the file (and line where one applies).
    """
    root = Path(root)
    path = root / "recipe.toml"
    file = str(path)
    raw, text = read_toml_source(path, file, RecipeError, "recipe")
    data = parse_toml(text, file, RecipeError)
    pos = TomlPositions(text)
    try:
        recipe = Recipe.model_validate(data)
    except ValidationError as err:
        raise RecipeError([Problem(file, pos.line_of(p), p, m) for p, m in schema_problems(err)]) from None
    problems: list[Problem] = []

    def add(field: str, msg: str, where: str = file, line: int | None = -1) -> None:
        problems.append(Problem(where, pos.line_of(field) if line == -1 else line, field, msg))

    if recipe.schema_version != 1:
        add("schema_version", f"unsupported recipe schema version {recipe.schema_version}; expected 1")
    for i, p in enumerate(recipe.remove):
        if not _guest_path_ok(p):
            add(f"remove[{i}]", f"{p!r} must be an absolute guest path other than / (no '..')")
    files = root / "files"
    for i, unit in enumerate(recipe.enable):
        if not _UNIT_RE.match(unit):
            add(f"enable[{i}]", f"{unit!r} is not a systemd unit name (e.g. my-app.service)")
        elif not any((files / d / unit).is_file() for d in UNIT_DIRS):
            add(f"enable[{i}]", f"unit {unit} is not in {files}/usr/lib/systemd/system/")
    for guest, mode in recipe.modes.items():
        key = f'modes."{guest}"'
        if not _guest_path_ok(guest):
            add(key, f"{guest!r} must be an absolute guest path")
        elif not os.path.lexists(files / guest.lstrip("/")):
            add(key, f"{guest} is not in {files}/")
        if not _MODE_RE.match(mode):
            add(key, f"mode {mode!r} is not an octal mode such as \"0755\"")
    if recipe.setup is not None:
        sp = PurePosixPath(recipe.setup)
        if sp.is_absolute() or ".." in sp.parts or not recipe.setup.strip():
            add("setup", f"{recipe.setup!r} must be a file inside {root}")
        elif not (root / recipe.setup).is_file():
            add("setup", f"setup script {root / recipe.setup} is missing")
    if files.exists() and not files.is_dir():
        add("", f"{files} must be a folder", str(files), None)
    elif files.is_dir():
        for p in _files_tree(files):
            st = p.lstat()
            if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
                add("", "only folders, regular files and symlinks can be copied into a territory", str(p), None)
    if problems:
        raise RecipeError(problems)
    return LoadedRecipe(recipe=recipe, root=root, raw=raw)


def recipe_digest(loaded: LoadedRecipe) -> str:
    """sha256 (hex) over the recipe format, ``recipe.toml``, the setup script and every
    path of ``files/`` (relative path, kind, mode bits that matter, bytes or link target).

    Any change that would build a different layer changes the digest.
    """
    h = hashlib.sha256()
    h.update(f"aoe-tui territory recipe {RECIPE_FORMAT}\0".encode())
    h.update(loaded.raw + b"\0")
    script = loaded.setup_script
    if script is not None:
        h.update(b"setup\0" + script.read_bytes() + b"\0")
    files = loaded.files
    if files.is_dir():
        for p in _files_tree(files):
            rel = p.relative_to(files).as_posix()
            st = p.lstat()
            if stat.S_ISLNK(st.st_mode):
                h.update(f"L {rel}\0{os.readlink(p)}\0".encode())
            elif stat.S_ISDIR(st.st_mode):
                h.update(f"D {rel}\0".encode())
            else:
                h.update(f"F {rel} {loaded.mode_of(rel, p):o}\0".encode() + p.read_bytes() + b"\0")
    return h.hexdigest()


def leak_problems(loaded: LoadedRecipe, scan_paths: list[str], forbidden: list[str]) -> list[Problem]:
    """Files of ``files/`` that land under a fog scan path and contain a forbidden string.

    Mirrors the run-time audit (spec §6.4: regular files < 4 MiB, fixed-string and
    case-sensitive, binaries skipped) on the recipe's own files; files that units write at
    boot are only seen by the run-time audit. One :class:`Problem` per (file, string).
    """
    out: list[Problem] = []
    files = loaded.files
    if not files.is_dir():
        return out
    roots = [PurePosixPath(s) for s in scan_paths]
    for p in _files_tree(files):
        if p.is_symlink() or not p.is_file():
            continue
        guest = PurePosixPath("/" + p.relative_to(files).as_posix())
        if not any(guest == r or r in guest.parents for r in roots):
            continue
        if p.stat().st_size >= 4 * 1024 * 1024:
            continue
        data = p.read_bytes()
        if b"\0" in data[:8192]:
            continue
        for s in forbidden:
            if s and s.encode() in data:
                out.append(Problem(str(p), data[: data.index(s.encode())].count(b"\n") + 1, "",
                                   f"contains the forbidden string {s!r} and lands in the scanned path {guest} "
                                   "(fog_of_war.guest_leak_audit)"))
    return out
