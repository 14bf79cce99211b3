"""``aoe image``: build and locate the territory guest image (issue 3).

``aoe image build [--arena first-build] [--force] [--with opencode]`` builds the Debian
guest (rootfs tree + qcow2 + kernel/initrd, see :mod:`aoe_tui.runtime.image`) with a
progress display and prints the image folder. ``aoe image path`` prints the folder of the
current build or fails naming the build command.
"""

from __future__ import annotations

import argparse
import sys

from aoe_tui.errors import UsageError


def register(sub: argparse._SubParsersAction) -> None:
    """Register ``aoe image build`` and ``aoe image path``."""
    p = sub.add_parser("image", help="build or locate the territory guest image")
    isub = p.add_subparsers(dest="image_command", metavar="SUBCOMMAND")
    isub.required = True

    b = isub.add_parser("build", help="build the Debian territory guest (about 2 minutes; needs root)")
    b.add_argument("--arena", default="first-build", help="arena whose guest to build (default: first-build)")
    b.add_argument("--force", action="store_true", help="rebuild even if a build of the current recipe exists")
    b.add_argument("--with", dest="with_", action="append", default=[], metavar="EXTRA",
                   help="extra guest software (opencode: not available yet)")
    b.set_defaults(func=_build)

    pa = isub.add_parser("path", help="print the folder of the built image")
    pa.add_argument("--arena", default="first-build")
    pa.set_defaults(func=_path)


def _build(args: argparse.Namespace) -> int:
    from aoe_tui.runtime.image import find_image

    for extra in args.with_:
        if extra == "opencode":
            raise UsageError("aoe image build --with opencode: not available yet (guests ship without agent CLIs)")
        raise UsageError(f"aoe image build --with {extra}: unknown extra (known: opencode, not available yet)")
    if not args.force:
        img = find_image(args.arena)
        if img is not None:
            print(f"guest image up to date (recipe {img.key})", file=sys.stderr)
            print(img.root)
            return 0

    img = build_image_with_progress(args.arena, force=args.force)
    print(img.root)
    return 0


def build_image_with_progress(arena: str = "first-build", *, force: bool = False):
    """Build (or reuse) the guest image of ``arena`` with a rich progress bar on stderr;
    returns the :class:`aoe_tui.runtime.image.GuestImage`. Raises ``ImageBuildError``."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from aoe_tui.runtime.image import ensure_image

    console = Console(stderr=True)
    with Progress(
        TextColumn("[bold]{task.description:<32}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
        TimeElapsedColumn(), console=console, transient=False,
    ) as progress:
        task = progress.add_task("starting", total=1.0)
        best = 0.0

        def cb(label: str, frac: float) -> None:
            nonlocal best
            best = max(best, frac)
            progress.update(task, description=label, completed=best)

        return ensure_image(arena, progress=cb, force=force)


def _path(args: argparse.Namespace) -> int:
    from aoe_tui.runtime.image import require_image

    print(require_image(args.arena).root)
    return 0
