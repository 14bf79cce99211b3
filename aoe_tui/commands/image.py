"""``aoe image``: build and locate the territory guest image and arena image layers.

``aoe image build [--arena first-build|PATH] [--qemu] [--force] [--with opencode]`` builds
the Debian guest (rootfs tree + qcow2 + kernel/initrd, see :mod:`aoe_tui.runtime.image`)
with a progress display and prints the image folder. With ``--arena PATH`` (an arena
package folder or its manifest) it also builds the package's territory recipe into its
cached image layer (:mod:`aoe_tui.runtime.layers`; ``--qemu``: its qcow2 form too) and
prints the layer folder; a package without a recipe uses the plain guest.
``aoe image path`` prints the folder of the current build or fails naming the build command.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from aoe_tui.errors import UsageError


def register(sub: argparse._SubParsersAction) -> None:
    """Register ``aoe image build`` and ``aoe image path``."""
    p = sub.add_parser("image", help="build or locate the territory guest image")
    isub = p.add_subparsers(dest="image_command", metavar="SUBCOMMAND")
    isub.required = True

    b = isub.add_parser("build", help="build the Debian territory guest (about 2 minutes; needs root)")
    b.add_argument("--arena", default="first-build", metavar="NAME|PATH",
                   help="arena whose guest to build: first-build, or an arena package folder whose territory "
                        "recipe is built into its image layer (default: first-build)")
    b.add_argument("--qemu", action="store_true", help="with --arena PATH: also build the layer's qcow2 form (QEMU territories)")
    b.add_argument("--force", action="store_true", help="rebuild even if a build of the current recipe exists")
    b.add_argument("--with", dest="with_", action="append", default=[], metavar="EXTRA",
                   help="extra guest software (opencode: not available yet)")
    b.set_defaults(func=_build)

    pa = isub.add_parser("path", help="print the folder of the built image (or an arena's layer)")
    pa.add_argument("--arena", default="first-build", metavar="NAME|PATH")
    pa.set_defaults(func=_path)


#: the repository's arena packages (a bare ``--arena NAME`` is looked up here too)
REPO_ARENAS = Path(__file__).resolve().parent.parent.parent / "arenas"


def _package(arena: str) -> Path | None:
    """The package folder ``--arena`` names: a folder, a manifest's folder, or a bare name
    found as ``./arenas/NAME`` or in the repository's ``arenas/``. None only for the plain
    guest's own name, ``first-build``, when no such package exists.

    Raises:
        UsageError: nothing by that name (the message says where it looked).
    """
    p = Path(arena)
    if p.is_dir():
        return p
    if p.is_file():
        return p.parent
    if "/" not in arena and not arena.endswith(".toml"):
        for base in (Path("arenas"), REPO_ARENAS):
            if (base / arena / "arena.toml").is_file():
                return base / arena
        if arena == "first-build":
            return None
        raise UsageError(f"--arena {arena}: no arena package {arena!r} (looked for ./arenas/{arena} and "
                         f"{REPO_ARENAS / arena}); give the package folder")
    raise UsageError(f"--arena {arena}: no such arena package folder or manifest")


def _build(args: argparse.Namespace) -> int:
    from aoe_tui.domain.recipe import find_recipe
    from aoe_tui.runtime.image import find_image
    from aoe_tui.runtime.layers import ensure_layer, ensure_layer_qcow2, find_layer

    for extra in args.with_:
        if extra == "opencode":
            raise UsageError("aoe image build --with opencode: not available yet (guests ship without agent CLIs)")
        raise UsageError(f"aoe image build --with {extra}: unknown extra (known: opencode, not available yet)")
    pkg = _package(args.arena)
    if pkg is not None and find_recipe(pkg) is not None:
        layer = None if args.force else find_layer(pkg, find_image())
        if layer is not None and (not args.qemu or layer.qcow2.is_file()):
            print(f"arena layer up to date (recipe {layer.key})", file=sys.stderr)
            print(layer.root)
            return 0
        with progress_bar() as cb:
            layer = ensure_layer(pkg, cb, force=args.force)
            assert layer is not None
            if args.qemu:
                ensure_layer_qcow2(layer, cb)
        print(layer.root)
        return 0
    if pkg is not None:
        print(f"{pkg} has no territory recipe: its territories use the plain guest"
              + (" (its QEMU disk is the base image)" if args.qemu else ""), file=sys.stderr)
    arena = "first-build"
    if not args.force:
        img = find_image(arena)
        if img is not None:
            print(f"guest image up to date (recipe {img.key})", file=sys.stderr)
            print(img.root)
            return 0

    img = build_image_with_progress(arena, force=args.force)
    print(img.root)
    return 0


@contextlib.contextmanager
def progress_bar() -> Iterator[Callable[[str, float], None]]:
    """A rich progress bar on stderr; yields ``cb(stage_label, fraction)`` (fractions never
    go backwards) for :func:`aoe_tui.runtime.image.ensure_image` and the layer builders.

    SIGTERM and SIGHUP raise :class:`aoe_tui.signals.Stopped` inside (SIGINT raises
    ``KeyboardInterrupt``), so a stopped build kills its step, unmounts and removes its
    half-built tree and the bar puts the cursor back (``aoe`` exits ``128 + signum``)."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from aoe_tui.signals import raise_on_signals

    console = Console(stderr=True)
    with raise_on_signals(), Progress(
        TextColumn("[bold]{task.description:<32}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
        TimeElapsedColumn(), console=console, transient=False,
    ) as progress:
        task = progress.add_task("starting", total=1.0)
        best = 0.0

        def cb(label: str, frac: float) -> None:
            nonlocal best
            best = max(best, frac)
            progress.update(task, description=label, completed=best)

        yield cb


def build_image_with_progress(arena: str = "first-build", *, force: bool = False):
    """Build (or reuse) the guest image of ``arena`` with a rich progress bar on stderr;
    returns the :class:`aoe_tui.runtime.image.GuestImage`. Raises ``ImageBuildError``."""
    from aoe_tui.runtime.image import ensure_image

    with progress_bar() as cb:
        return ensure_image(arena, progress=cb, force=force)


def prepare_provider_images(provider: str, packages: Sequence[Path]) -> None:
    """:func:`prepare_arena_images` for the guest image of ``provider`` (its registry
    entry's ``image``: ``rootfs`` or ``qcow2``); nothing for providers without one.

    Raises:
        UsageError: unknown provider.
    """
    from aoe_tui.runtime.registry import get_provider

    flavour = get_provider(provider).image
    if flavour is not None:
        prepare_arena_images(packages, qemu=flavour == "qcow2")


def prepare_arena_images(packages: Sequence[Path], *, qemu: bool = False) -> None:
    """Build, with a progress bar, whatever the arenas' territories need and is missing: the
    guest image and each package's image layer (``qemu``: its qcow2 form). Prints one line
    per build; prints nothing when everything is cached.

    Raises:
        RecipeError, ImageBuildError: a recipe with problems, a failed build (one line).
    """
    from aoe_tui.domain.recipe import find_recipe
    from aoe_tui.runtime.image import find_image
    from aoe_tui.runtime.layers import ensure_layer, ensure_layer_qcow2, find_layer

    if find_image() is None:
        print("building the territory guest image (first run only, about 2 minutes)…", file=sys.stderr, flush=True)
        build_image_with_progress()
    base = find_image()
    for pkg in dict.fromkeys(Path(p) for p in packages):
        if find_recipe(pkg) is None:
            continue
        layer = find_layer(pkg, base)
        if layer is not None and (not qemu or layer.qcow2.is_file()):
            continue
        print(f"building the territory image layer of {pkg.name} (once per recipe)…", file=sys.stderr, flush=True)
        with progress_bar() as cb:
            layer = ensure_layer(pkg, cb, base=base)
            if qemu and layer is not None:
                ensure_layer_qcow2(layer, cb)


def _path(args: argparse.Namespace) -> int:
    from aoe_tui.domain.recipe import find_recipe
    from aoe_tui.runtime.image import require_image
    from aoe_tui.runtime.layers import image_for_arena

    pkg = _package(args.arena)
    if pkg is not None and find_recipe(pkg) is not None:
        img = image_for_arena(pkg, build=False)
        print(img.layers[0].parent)
        return 0
    print(require_image().root)
    return 0
