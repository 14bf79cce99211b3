"""Random and malformed terminal input for the input-path tests (``tests/test_tui_input.py``,
``tests/test_serve_ssh.py``), and a real PTY running a view read with ``pyte``.

:func:`fuzz_sequences` draws byte sequences a terminal, a paste or a hostile spectator
can send: mouse reports (X10, SGR, urxvt) at any coordinates, broken UTF-8, a lone
``0xFF 0xFE``, Latin-1 text and pastes, control bytes, CSI / SS3 / OSC / DCS sequences
with malformed or huge parameters, cut short at any byte, in-band resize and mode
reports. It leaves out what a view rightly obeys: the quit keys (``q``, ctrl+q), the
command palette (ctrl+p, from which a random Enter could pick "Quit"), ctrl+c/ctrl+z,
``e`` (export), plain keys bound to actions (printable text uses unbound characters
only; no tab or enter: 10,000 sequences must exercise the input path, not queue
minutes of screen pushes, theme switches and relayouts), in-band resize reports of a
sane size, and button presses on the screen (a click opens a heat, or the footer's
Quit): presses land past the last column or row; motion and wheel reports go anywhere.
:func:`forbidden_keys` parses a stream offline with the views' own parser and names
any such key that slipped in.
"""

from __future__ import annotations

import fcntl
import os
import random
import select
import struct
import subprocess
import termios
import threading
import time
from pathlib import Path

import pyte

#: keys a view obeys by quitting, opening the palette or writing (never fuzzed)
FORBIDDEN = {"q", "ctrl+q", "ctrl+p", "ctrl+c", "ctrl+z", "e"}
_BAD_CHARS = set("qQeEpPcCzZ?tT")
#: printable ASCII in fuzzed text: characters no view binds (digits, unbound letters and
#: punctuation), so the fuzz exercises the input path rather than screen after screen
_SAFE_ASCII = b"0123456789bfhijlnuvxyzBFHIJLNUVXY!\"#$%&'()*,./:;<>@[]^_`{|}~"
#: control bytes: all but ctrl+c/p/q/z and the ones bound to actions (tab, enter: a
#: screen push or focus move each; escape comes with the escape sequences)
_CONTROL = bytes(b for b in list(range(0x20)) + [0x7F] if b not in (0x03, 0x09, 0x0D, 0x10, 0x11, 0x1A, 0x1B))


#: numbers never used as parameters: the code points of the keys above (a CSI-u report of them)
_BAD_NUMS = {3, 16, 17, 26} | {ord(c) for c in _BAD_CHARS}


def _num(rng: random.Random) -> bytes:
    while True:
        n = _num1(rng)
        if n == b"" or abs(int(n)) not in _BAD_NUMS:
            return n


def _num1(rng: random.Random) -> bytes:
    r = rng.random()
    if r < 0.6:
        return b"%d" % rng.randrange(0, 300)
    if r < 0.75:
        return b"-%d" % rng.randrange(0, 50)
    if r < 0.9:
        return b"%d" % rng.randrange(0, 10 ** rng.randrange(4, 12))
    return b""


def _codepoint(rng: random.Random) -> bytes:
    while True:
        cp = rng.choice([rng.randrange(32, 0x300), rng.randrange(0x300, 0x120000), rng.randrange(57344, 57460)])
        if cp < 0x110000 and chr(cp) in _BAD_CHARS:
            continue
        return b"%d" % cp


def fuzz_sequences(n: int, seed: int, cols: int, rows: int) -> list[bytes]:
    """``n`` random sequences for a ``cols`` x ``rows`` terminal (deterministic for ``seed``)."""
    rng = random.Random(seed)

    def any_pos() -> tuple[int, int]:
        return rng.randrange(0, cols + 300), rng.randrange(0, rows + 300)

    def press_pos(limit: int = 10 ** 6) -> tuple[int, int]:
        """Where a button press may land: past the last column or row (no widget there)."""
        if rng.random() < 0.5:
            return rng.randrange(cols + 1, min(limit, cols + 300)), rng.randrange(0, min(limit, rows + 300))
        return rng.randrange(0, min(limit, cols + 300)), rng.randrange(rows + 1, min(limit, rows + 300))

    def x10() -> bytes:
        code = rng.choice([0, 1, 2, 3, 32, 33, 34, 35, 64, 65, 66, 67, 96, 128])
        col, row = rng.randrange(0, 224), rng.randrange(0, 224)  # X10: one byte each, 32 + value
        if code & 0x60 == 0:
            col, row = press_pos(224)
        return b"\x1b[M" + bytes([32 + code, 32 + col, 32 + row])

    def sgr() -> bytes:
        code = rng.choice([0, 1, 2, 3, 4, 8, 16, 32, 35, 64, 65, 66, 67, 128, rng.randrange(0, 256)])
        col, row = press_pos() if code & 0x60 == 0 else any_pos()
        if rng.random() < 0.1:
            return b"\x1b[<%s;%s;%s%s" % (_num(rng), _num(rng), _num(rng), rng.choice([b"M", b"m"]))
        return b"\x1b[<%d;%d;%d%s" % (code, col, row, rng.choice([b"M", b"m"]))

    def urxvt() -> bytes:
        code = rng.choice([32, 33, 34, 35, 64, 65, 96, 97])
        col, row = press_pos() if code & 0x60 == 0 else any_pos()
        return b"\x1b[%d;%d;%dM" % (code, col, row)

    def broken_utf8() -> bytes:
        return rng.choice([
            b"\xff\xfe", b"\xfe\xff", bytes([rng.randrange(0x80, 0xC0)]),
            bytes([rng.randrange(0xC2, 0xF5)]) + bytes(rng.randrange(0x80, 0xC0) for _ in range(rng.randrange(0, 3))),
            bytes([rng.randrange(0xC0, 0x100), rng.choice(_SAFE_ASCII + _CONTROL + bytes(range(0x80, 0x100)))]),
            b"\xc0\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xf8\x88\x80\x80\x80",
            "é€😀".encode()[: rng.randrange(1, 9)],
        ])

    def latin1() -> bytes:
        text = bytes(rng.choice([rng.randrange(0xA0, 0x100), rng.choice(_SAFE_ASCII)]) for _ in range(rng.randrange(1, 7)))
        return b"\x1b[200~" + text + b"\x1b[201~" if rng.random() < 0.5 else text

    def control() -> bytes:
        return bytes(rng.choice(_CONTROL) for _ in range(rng.randrange(1, 3)))

    def params(k: int) -> bytes:
        return b";".join((_num(rng) + (b":" + _num(rng) if rng.random() < 0.2 else b"")) for _ in range(k))

    def escape() -> bytes:
        kind = rng.randrange(10)
        if kind == 0:  # CSI-u / kitty keys, malformed or not
            seq = b"\x1b[" + _codepoint(rng) + rng.choice([b"", b":" + _num(rng), b";" + _num(rng),
                                                          b";;" + _codepoint(rng), b";" + _num(rng) + b";" + _codepoint(rng)])
            seq += rng.choice([b"u", b"~", b"A", b"B", b"C", b"D", b"F", b"H"])
        elif kind == 1:  # in-band resize reports of sizes no terminal has
            w, h = rng.choice([(0, 0), (cols, 0), (10 ** 6, rows), (rng.randrange(1001, 99999), rng.randrange(1, 99999))])
            seq = b"\x1b[48;%d;%d;%s;%st" % (h, w, _num(rng), _num(rng))
        elif kind == 2:  # mode reports, cursor position reports
            seq = rng.choice([b"\x1b[?%s;%s$y" % (_num(rng), _num(rng)), b"\x1b[%s;%sR" % (_num(rng), _num(rng))])
        elif kind == 3:  # OSC / DCS / APC strings, maybe unterminated
            seq = rng.choice([b"\x1b]", b"\x1bP", b"\x1b_", b"\x1b^"]) + bytes(rng.choice(_SAFE_ASCII) for _ in range(rng.randrange(0, 10)))
            seq += rng.choice([b"\x07", b"\x1b\\", b""])
        elif kind == 4:  # SS3 and alt+byte
            seq = rng.choice([b"\x1bO", b"\x1b"]) + bytes([rng.choice(_SAFE_ASCII + bytes(range(0x80, 0x100)))])
        else:  # CSI with any parameters and final byte
            seq = b"\x1b[" + rng.choice([b"", b"?", b">", b"<", b"="]) + params(rng.randrange(0, 4))
            seq += bytes([rng.choice(bytes(b for b in range(0x40, 0x7F) if chr(b) not in _BAD_CHARS))])
        if rng.random() < 0.3:  # cut short
            seq = seq[: rng.randrange(1, len(seq))] if len(seq) > 1 else seq
        return seq

    makers = [x10, x10, sgr, urxvt, broken_utf8, broken_utf8, latin1, control, escape, escape, escape]
    return [rng.choice(makers)() for _ in range(n)]


def forbidden_keys(stream: bytes) -> list[str]:
    """The :data:`FORBIDDEN` keys (and clicks' absence is by construction) that the views'
    input path (:class:`~aoe_tui.tui.driver.InputDecoder`,
    :class:`~aoe_tui.tui.driver.GuardedParser`) reads from ``stream`` fed in one go."""
    from textual import events

    from aoe_tui.tui.driver import GuardedParser, InputDecoder

    parser, decoder, found = GuardedParser(), InputDecoder(), []
    for i in range(0, len(stream), 4096):
        for ev in parser.feed(decoder.decode(stream[i:i + 4096])):
            if isinstance(ev, events.Key) and ev.key in FORBIDDEN:
                found.append(ev.key)
    return found


class PtyView:
    """A command on a fresh PTY (``cols`` x ``rows``), its output read into a ``pyte`` screen by
    a thread. ``stdin`` other than ``"pty"`` (a file object or descriptor) replaces the PTY
    as the child's standard input."""

    def __init__(self, argv: list[str], cols: int = 120, rows: int = 30, stdin=None, env: dict | None = None) -> None:
        self.master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        self.screen = pyte.Screen(cols, rows)
        self.stream = pyte.ByteStream(self.screen)
        self.lock = threading.Lock()
        self.proc = subprocess.Popen(argv, stdin=slave if stdin is None else stdin, stdout=slave, stderr=slave,
                                     env={**os.environ, "TERM": "xterm-256color", **(env or {})},
                                     start_new_session=True, close_fds=True)
        os.close(slave)
        self.closed = False
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        while not self.closed:
            try:
                r, _, _ = select.select([self.master], [], [], 0.1)
                data = os.read(self.master, 65536) if r else None
            except (OSError, ValueError):
                return
            if data == b"":
                return
            if data:
                with self.lock:
                    self.stream.feed(data)

    def text(self) -> str:
        with self.lock:
            return "\n".join(self.screen.display)

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            _, w, _ = select.select([], [self.master], [], 5)
            assert w, "the view stopped reading its input"
            view = view[os.write(self.master, view[:4096]):]

    def wait_for(self, cond, timeout: float, what: str) -> None:
        end = time.monotonic() + timeout
        while not cond(self.text()):
            assert self.proc.poll() is None, f"the view ended (rc {self.proc.returncode}):\n{self.text()}"
            if time.monotonic() > end:
                raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}; screen:\n{self.text()}")
            time.sleep(0.05)

    def close_terminal(self) -> None:
        """The terminal goes away: the PTY master is closed (reads on the child's side fail)."""
        self.closed = True
        self.thread.join(2)
        os.close(self.master)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        if not self.closed:
            self.close_terminal()


def cpu_s(pid: int) -> float:
    """User + system CPU seconds ``pid`` has used (``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_share(pid: int, seconds: float) -> float:
    """Share of one CPU (0..1) ``pid`` used over the next ``seconds``."""
    c0, t0 = cpu_s(pid), time.monotonic()
    time.sleep(seconds)
    return (cpu_s(pid) - c0) / (time.monotonic() - t0)
