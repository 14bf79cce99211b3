"""How every ``aoe`` entry point meets SIGINT, SIGTERM and SIGHUP (issue 17).

* :class:`Stopped` — a ``KeyboardInterrupt`` that names its signal, so the one
  ``except KeyboardInterrupt`` of ``aoe_tui.cli.main`` handles every stop signal alike
  (exit code ``128 + signum``: 130 SIGINT, 143 SIGTERM, 129 SIGHUP).
* :func:`raise_on_signals` — for the plain commands (``aoe image build``): the signals
  raise :class:`Stopped` in the main thread, so ``finally``/``except`` blocks (unmounts,
  the half-built rootfs removed, the progress bar putting the cursor back) run.
* :func:`release_terminal` — after a hangup (or a detach) the terminal is gone or no
  longer ours: fd 0 becomes ``/dev/null``, fds 1 and 2 an append-only log file (or
  ``/dev/null``). Writing to a dead terminal can then never kill the process.
* :func:`terminal_gone` — whether fds 0-2 hold a terminal that no longer answers (hung up:
  its PTY master closed without a SIGHUP reaching us, e.g. no controlling terminal or
  SIGHUP ignored). A SIGINT/SIGTERM then releases those descriptors first
  (:func:`gone_terminals`), as a SIGHUP releases the terminal; a file or pipe the output
  was redirected to (``aoe image build > build.log``) is kept.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import termios
from collections.abc import Iterator
from pathlib import Path

__all__ = ["STOP_SIGNALS", "Stopped", "gone_terminals", "leave_gone_terminal", "raise_on_signals", "release_terminal",
           "say_line", "terminal_gone"]

#: the signals every entry point handles
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

class Stopped(KeyboardInterrupt):
    """A stop signal arrived; ``signum`` names it, ``exit_code`` is ``128 + signum``."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


@contextlib.contextmanager
def raise_on_signals(signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGHUP)) -> Iterator[None]:
    """While inside, each of ``signals`` raises :class:`Stopped` in the main thread (SIGINT
    already raises ``KeyboardInterrupt``). Only the first one raises, so a second signal
    cannot break the clean-up the first started. A SIGHUP first :func:`release_terminal` s
    the process (the terminal is gone); any of them first releases the descriptors that hold
    a terminal that no longer answers (:func:`gone_terminals`; output redirected to a file
    stays there). The previous handlers are restored on exit. Main thread only."""
    fired: list[int] = []

    def handler(signum: int, _frame: object) -> None:
        leave_gone_terminal(signum)
        if not fired:
            fired.append(signum)
            raise Stopped(signum)

    old = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)


def release_terminal(log: Path | None = None, fds: tuple[int, ...] = (0, 1, 2)) -> None:
    """Stop depending on the terminal: fd 0 becomes ``/dev/null`` (a reader that is
    already between its ``select`` and its ``read`` gets EOF at once instead of blocking
    for ever, as it would on a never-readable pipe), fds 1 and 2 are appended to ``log``
    (created 0644, its folder must exist) or sent to ``/dev/null``; only those of 0-2 in
    ``fds``. Safe in a signal handler and idempotent. If ``log`` cannot be opened,
    ``/dev/null`` is used (only a process out of file descriptors could then see an
    ``OSError``)."""
    if 0 in fds:
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
    out = [fd for fd in (1, 2) if fd in fds]
    if not out:
        return
    fd = -1
    if log is not None:
        with contextlib.suppress(OSError):
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    if fd < 0:
        fd = os.open(os.devnull, os.O_WRONLY)
    for target in out:
        os.dup2(fd, target)
    os.close(fd)


def leave_gone_terminal(signum: int) -> None:
    """What a stop signal handler does first: on a SIGHUP :func:`release_terminal` (fds
    0-2: the terminal is gone or no longer ours); on any signal, release the descriptors of
    0-2 that hold a terminal that no longer answers (:func:`gone_terminals`: hung up
    without a SIGHUP reaching us), keeping a file or pipe the output was redirected to.
    Safe in a signal handler; raises nothing but an ``OSError`` of a process out of file
    descriptors."""
    if signum == signal.SIGHUP:
        release_terminal()
        return
    gone = gone_terminals()
    if gone:
        release_terminal(fds=gone)


def terminal_gone(fds: tuple[int, ...] = (0, 1, 2)) -> bool:
    """Whether one of ``fds`` is a terminal that no longer answers: ``tcgetattr`` fails with
    EIO (the terminal was hung up: a PTY whose master closed, even when we were not its
    session and got no SIGHUP) or ENXIO (the device is gone). A descriptor that is not a
    terminal (a file, a pipe, ``/dev/null``), is closed, or is a live terminal that merely
    stopped reading counts as not gone. One ``ioctl`` per descriptor, no output; safe in a
    signal handler. Raises nothing."""
    return bool(gone_terminals(fds))


def gone_terminals(fds: tuple[int, ...] = (0, 1, 2)) -> tuple[int, ...]:
    """The descriptors of ``fds`` that hold a terminal that no longer answers (see
    :func:`terminal_gone`), in ``fds`` order. Raises nothing."""
    gone = []
    for fd in fds:
        try:
            termios.tcgetattr(fd)
        except termios.error as err:
            if err.args and err.args[0] in (errno.EIO, errno.ENXIO):
                gone.append(fd)
        except (OSError, ValueError):
            continue
    return tuple(gone)


def say_line(text: str, *, stderr: bool = False, log: Path | None = None) -> None:
    """Print one line to stdout (or stderr) and flush. If the terminal is gone (EIO after
    a hangup, before the SIGHUP handler ran), the process first leaves it
    (:func:`release_terminal` to ``log`` or ``/dev/null``) and the line goes there: a
    progress line can never end a heat or a season. Raises nothing for a dead output."""
    import sys

    try:
        print(text, file=sys.stderr if stderr else sys.stdout, flush=True)
        return
    except OSError:
        release_terminal(log)
    with contextlib.suppress(OSError, ValueError):
        print(text, file=sys.stderr if stderr else sys.stdout, flush=True)
