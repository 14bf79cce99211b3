"""The ``aoe`` command line.

Each command group lives in its own module under :mod:`aoe_tui.commands` and
exposes ``register(subparsers)``; this module only wires them together, loads the
plugins of ``AOE_PLUGINS`` (:mod:`aoe_tui.plugins`) and turns
:class:`aoe_tui.errors.AoeError` into a one-line message and an exit code.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from aoe_tui import __version__
from aoe_tui.domain.display import printable
from aoe_tui.errors import AoeError

# Command modules, in the order they appear in ``aoe --help``.
COMMAND_MODULES: tuple[str, ...] = (
    "aoe_tui.commands.arena",
    "aoe_tui.commands.inspect",
    "aoe_tui.commands.trajectory",
    "aoe_tui.commands.image",
    "aoe_tui.commands.doctor",
    "aoe_tui.commands.cleanup",
    "aoe_tui.commands.match",
    "aoe_tui.commands.tui",
    "aoe_tui.commands.season",
    "aoe_tui.commands.site",
    "aoe_tui.commands.demo",
    "aoe_tui.commands.serve",
    "aoe_tui.commands.worker",
)


def build_parser() -> argparse.ArgumentParser:
    """Return the full ``aoe`` argument parser (one sub-command per registered module)."""
    parser = argparse.ArgumentParser(
        prog="aoe",
        description="Tournament runner for AI-agent build races (agents-of-empires compatible).",
    )
    parser.add_argument("--version", action="version", version=f"aoe-tui {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMAND_MODULES:
        module = importlib.import_module(name)
        module.register(sub)
    return parser


class _PipeSafeStream:
    """Stand-in for a piped ``sys.stdout`` whose reader may go away (``aoe ... | head``).

    Once a write or flush meets a closed pipe, fd 1 is pointed at ``/dev/null`` and
    further output is dropped, so a heat in progress still finishes, writes its
    artifacts and tears its territories down instead of dying on ``BrokenPipeError``.
    """

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def _silence(self) -> None:
        with contextlib.suppress(OSError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._silence()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._silence()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``aoe`` console script; returns the process exit code.

    Called without ``argv`` (the console script, ``python -m aoe_tui.cli``: this process
    is the command), the cyclic garbage collector is off while the modules and the parser
    are built (their objects live to the end; collecting them costs ~5 % of the start-up)
    and everything alive when the command ends is frozen (``gc.freeze``), so the
    interpreter's final collection does not walk the whole heap (~0.1 s at exit).
    """
    process = argv is None
    if process:
        gc.disable()
        _keep_warnings_off_the_terminal()
    try:
        rc = _main(argv)
    finally:
        if process:
            gc.freeze()
    return rc


def _keep_warnings_off_the_terminal() -> None:
    """Send Python warnings to the ``py.warnings`` logger instead of the operator's stderr.

    A warning (a library's deprecation, a ``ResourceWarning``) is for the people who develop
    aoe-tui, not for the person running a cup: printed, it lands among the one-line errors, the
    headless race lines and a spectator's screen. Routed through :func:`logging.captureWarnings`
    to ``py.warnings``, it reaches whatever handler the command set up (``aoe serve``'s log) and
    is otherwise dropped (a :class:`logging.NullHandler`, so logging's last-resort handler does
    not print it either). Asking for warnings with ``python -W …`` or ``PYTHONWARNINGS`` keeps
    Python's own display.
    """
    if sys.warnoptions:
        return
    logging.captureWarnings(True)
    logging.getLogger("py.warnings").addHandler(logging.NullHandler())


def _main(argv: Sequence[str] | None) -> int:
    if not sys.stdout.isatty():
        sys.stdout = _PipeSafeStream(sys.stdout)  # type: ignore[assignment]
    # asyncio's child watcher warns ("Unknown child process pid N") when a territory's
    # process was already reaped during teardown; that is noise to a user, not a fault.
    logging.getLogger("asyncio").setLevel(logging.ERROR)
    from aoe_tui.plugins import load_plugins

    try:
        load_plugins()
    except AoeError as err:
        print(printable(f"aoe: error: {err}", newlines=True), file=sys.stderr)
        return err.exit_code
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
    finally:
        if argv is None:  # the start-up's objects stay: out of every later collection
            gc.freeze()
            gc.enable()
    try:
        rc = args.func(args)
    except AoeError as err:
        print(printable(f"aoe: error: {err}", newlines=True), file=sys.stderr)
        return err.exit_code
    except OSError as err:
        from aoe_tui.fsio import is_no_space

        if not is_no_space(err):
            raise
        # any command whose output meets a full disk (aoe bundle -o, aoe match run --output, …):
        # one line naming the file, never a traceback; 75 as for a season the disk stopped
        where = f"{err.filename}: " if err.filename else ""
        print(printable(f"aoe: error: {where}{err.strerror or 'No space left on device'}; free space and "
                        "run the command again"), file=sys.stderr)
        return 75
    except KeyboardInterrupt as err:  # SIGINT, or a Stopped (SIGTERM/SIGHUP) from aoe_tui.signals
        from aoe_tui.signals import Stopped

        if isinstance(err, Stopped):
            with contextlib.suppress(OSError):
                print(f"aoe: stopped by {err.name}", file=sys.stderr)
            return err.exit_code
        with contextlib.suppress(OSError):
            print("aoe: interrupted", file=sys.stderr)
        return 130
    return int(rc or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
