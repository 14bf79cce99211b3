"""Signals and terminals (issue 17): every entry point meets SIGINT, SIGTERM and SIGHUP with
a known outcome, restores the terminal and tears down or hands over its territories.

Each command runs as a real process on a real PTY (the slave is its controlling terminal,
as in a login shell: closing the master is a hangup); the screen it leaves is read with
pyte. Territories are counted as the ``systemd-nspawn`` processes, the mounts and the
network namespaces of the test's own folder (other seasons may run on the same host),
while running and after.

* ``aoe run`` in the TUI, SIGTERM: exits 143 with the terminal restored (no alternate
  screen, no mouse reporting, cursor shown), no territory left, ``season_stopped`` last in
  ``season.jsonl`` naming the aborted attempts (the next ``aoe run`` re-runs them).
* ``aoe run`` in the TUI or ``--headless``, terminal closed: the season goes on (hangup =
  detach), its lines in ``SEASON/aoe-run.log``, the runner idle-cheap; a later SIGTERM
  stops it cleanly.
* ``aoe run``, "detach" chosen, then the terminal closed: the same.
* ``aoe image build``, SIGTERM while a step has ``proc`` mounted in the half-built rootfs:
  no mount, no half-built folder, cursor shown, exit 143.
* ``aoe replay`` with stdin at EOF: idles (CPU-seconds over 2 s once its start-up work is
  done), SIGHUP/SIGTERM close it.
* ``aoe watch`` whose terminal stopped reading (its output queue full), then closed
  without a SIGHUP reaching it, or left open, or an idle one whose terminal closed without a
  SIGHUP: SIGTERM ends it (143) within seconds, nothing left in its process group.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyte
import pytest

from aoe_tui.replay.season_log import read_season_log
from aoe_tui.serve.session import CTTY_HELPER

REPO = Path(__file__).resolve().parent.parent
ARENA = REPO / "arenas" / "first-build" / "arena.toml"
FIXTURE_MATCH = REPO / "tests" / "fixtures" / "upstream" / "matches" / "first-build-20260813-085352"
#: private terminal modes as pyte stores them (mode << 5)
ALT_SCREEN, MOUSE_MODES = 1049 << 5, {1000 << 5, 1003 << 5, 1006 << 5}

SEASON = """\
id = "sig"
label = "signals"
arena = "{arena}"
seed = 5
max_attempts = 2
concurrent_heats = 1
drain_seconds = 1

[provider]
kind = "container"
ready_timeout_s = 90

[arena_overrides]
duration_seconds = 40
minimum_territories = 3

[format]
kind = "league"
heats_per_entrant = 1

[[entrants]]
id = "memory"
adapter = "scripted:memory"
model = "scripted-memory"

[[entrants]]
id = "volatile"
adapter = "scripted:volatile"
model = "scripted-volatile"

[[entrants]]
id = "lazy"
adapter = "scripted:volatile"
model = "scripted-volatile"
"""


class Term:
    """A command on a fresh PTY (its controlling terminal), read through pyte."""

    def __init__(self, argv: list[str], *, cols: int = 120, rows: int = 40, stdin_devnull: bool = False,
                 ctty: bool = True, env: dict[str, str] | None = None) -> None:
        import fcntl
        import struct
        import termios

        self.netns: set[str] = set()
        self.master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        self.screen = pyte.Screen(cols, rows)
        self.stream = pyte.ByteStream(self.screen)
        self.lock = threading.Lock()
        env = dict(os.environ, **(env or {}), PYTHONPATH=str(REPO), TERM="xterm-256color")
        # stdin a terminal: the PTY is the controlling terminal (a hangup reaches it) unless
        # not ``ctty`` (its own session without one: closing the master sends no SIGHUP);
        # stdin /dev/null: output only, no controlling terminal
        pre = [] if stdin_devnull or not ctty else [sys.executable, "-I", "-S", CTTY_HELPER, "--"]
        self.proc = subprocess.Popen([*pre, *argv], stdin=subprocess.DEVNULL if stdin_devnull else slave,
                                     stdout=slave, stderr=slave, env=env, cwd=REPO, start_new_session=True)
        os.close(slave)
        self._stop = False
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        import select

        while not self._stop:
            try:
                # never blocked in read() when hang_up closes the master: a read in progress
                # holds the master open, so the terminal would not hang up until the view
                # next wrote (an idle view: never)
                if not select.select([self.master], [], [], 0.05)[0]:
                    continue
                data = os.read(self.master, 65536)
            except (OSError, ValueError):
                return
            if not data:
                return
            with self.lock:
                self.stream.feed(data)

    def text(self) -> str:
        with self.lock:
            return "\n".join(self.screen.display)

    def modes(self) -> tuple[set[int], bool]:
        """The terminal's modes now and whether the cursor is hidden."""
        with self.lock:
            return set(self.screen.mode), self.screen.cursor.hidden

    def send(self, data: bytes) -> None:
        os.write(self.master, data)

    def wait_output_end(self, timeout: float = 60.0) -> None:
        """Wait until everything the command wrote has been read into the screen: the reader
        ends at EIO, once the last holder of the PTY's slave (the command, after its exit)
        has closed it. Fails after ``timeout`` seconds (a process still holding the slave)."""
        self._reader.join(timeout)
        assert not self._reader.is_alive(), f"the PTY still had a writer {timeout:.0f} s after the exit"

    def stop_reading(self) -> None:
        """Read no more of the view's output: its writes fill the PTY and then block."""
        self._stop = True
        self._reader.join(5)

    def pending_output(self) -> int:
        """Bytes the view wrote that nobody has read yet (FIONREAD on the master)."""
        import fcntl
        import struct
        import termios

        return struct.unpack("i", fcntl.ioctl(self.master, termios.FIONREAD, b"\0" * 4))[0]

    def hang_up(self) -> None:
        self._stop = True
        self._reader.join(5)
        os.close(self.master)
        self.master = -1

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(120)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._stop = True
        if self.master >= 0:
            self._reader.join(5)
            os.close(self.master)
            self.master = -1


def wait_until(cond, timeout: float, what: str, proc: subprocess.Popen | None = None):
    end = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the process exited ({proc.returncode}) while waiting for {what}")
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.1)


def territories(folder: Path) -> list[int]:
    """PIDs of the ``systemd-nspawn`` processes whose territory lives under ``folder``."""
    found = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            argv = (p / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"systemd-nspawn") and any(str(folder).encode() in a for a in argv):
            found.append(int(p.name))
    return found


def netns_of(folder: Path) -> set[str]:
    """The network namespaces (``/run/netns/...`` paths) of the territories under ``folder``."""
    found = set()
    for pid in territories(folder):
        with contextlib.suppress(OSError):
            for a in Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0"):
                if a.startswith("--network-namespace-path="):
                    found.add(a.split("=", 1)[1])
    return found


def mounts_under(folder: Path) -> list[str]:
    """Mount points at or below ``folder`` (this mount namespace, the runner's)."""
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        mp = line.split()[4].replace("\\040", " ")
        if mp == str(folder) or mp.startswith(f"{folder}/"):
            out.append(mp)
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` and its threads (s)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_share(pid: int, seconds: float) -> float:
    """Fraction of one CPU ``pid`` used over the next ``seconds``."""
    a, t = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    return (cpu_seconds(pid) - a) / (time.monotonic() - t)


def idle_share(pid: int, budget: float, window_s: float = 2.0, timeout_s: float = 60.0) -> float:
    """Wait for ``pid`` to go idle, then its CPU share over the next ``window_s`` seconds.

    Idle = a 1 s stretch in which it used under ``budget`` of a CPU (its start-up work
    done: under load that work takes seconds of wall time after the first paint, so a
    fixed sleep is no mark of it). The share is CPU-seconds of the process (user + system,
    all threads) over the window's wall seconds: on a loaded machine a process that has
    nothing to do uses as few CPU-seconds as on a quiet one. Fails after ``timeout_s``
    seconds without an idle stretch (a view that spins never has one)."""
    deadline, share = time.monotonic() + timeout_s, None
    while time.monotonic() < deadline:
        share = cpu_share(pid, 1.0)
        if share < budget:
            return cpu_share(pid, window_s)
    raise AssertionError(f"process {pid} never idled in {timeout_s:.0f} s: it used {share:.0%} of a CPU "
                         "over its last second")


def kinds(out: Path) -> list[str]:
    return [r.event.kind for r in read_season_log(out / "season.jsonl")]


@pytest.fixture()
def season(tmp_path):
    if os.geteuid() != 0 or shutil.which("systemd-nspawn") is None:
        pytest.skip("container seasons need root and systemd-nspawn")
    f = tmp_path / "sig.toml"
    f.write_text(SEASON.format(arena=ARENA))
    yield f, tmp_path / "season"
    from aoe_tui.season.runner import cleanup_stale_territories

    cleanup_stale_territories(tmp_path / "season")  # only a failed test leaves any


def start_run(request, season_file: Path, out: Path, *, headless: bool = False) -> Term:
    """``aoe run`` in the TUI (or ``--headless``) on a PTY, once its three territories are
    up (in the TUI: the alternate screen, mouse reporting and a hidden cursor are on)."""
    request.getfixturevalue("guest_image")
    term = Term([sys.executable, "-m", "aoe_tui.cli", "run", str(season_file), "--output", str(out),
                 "--engine-priority", "normal", *(["--headless"] if headless else [])])
    request.addfinalizer(term.close)
    wait_until(lambda: len(territories(out)) >= 3, 120, "three territories", term.proc)

    def three_netns() -> set[str] | None:  # a territory may be between fork and exec
        ns = netns_of(out)
        return ns if len(ns) == 3 else None

    term.netns = wait_until(three_netns, 30, "three network namespaces", term.proc)
    assert all(Path(n).exists() for n in term.netns)
    if not headless:
        modes, hidden = term.modes()
        assert ALT_SCREEN in modes and MOUSE_MODES & modes and hidden, "the TUI did not take the terminal"
    return term


def assert_stopped_cleanly(term: Term, out: Path, reason: str, t0: float, code: int) -> float:
    """The runner exited ``code`` after the stop at ``t0`` (monotonic s), no territory and no
    mount are left, and ``season_stopped`` (``reason``) is the last season event, naming the
    attempt that was running. Returns the seconds the stop took."""
    assert term.proc.wait(120) == code
    took = time.monotonic() - t0
    assert territories(out) == [] and mounts_under(out) == []
    assert not [n for n in term.netns if Path(n).exists()], "network namespaces left"
    recs = list(read_season_log(out / "season.jsonl"))
    last = recs[-1].event
    assert last.kind == "season_stopped" and last.reason == reason and last.pid == term.proc.pid
    assert last.open_attempts == ["r1h1a1"]
    from aoe_tui.replay.season_reducer import reduce_season

    state = reduce_season(recs)
    assert [(h.round, h.heat, a.attempt) for h, a in state.open_attempts()] == [(1, 1, 1)]  # re-run on resume
    return took


@pytest.mark.container
def test_sigterm_tui_run_restores_the_terminal_and_records_the_stop(request, season):
    season_file, out = season
    term = start_run(request, season_file, out)
    t0 = time.monotonic()
    term.proc.send_signal(signal.SIGTERM)
    took = assert_stopped_cleanly(term, out, "SIGTERM", t0, 143)
    time.sleep(0.3)  # the last bytes through the PTY
    modes, hidden = term.modes()
    assert ALT_SCREEN not in modes and not (MOUSE_MODES & modes) and not hidden
    assert "season stopped; resume with the same command" in term.text()
    print(f"SIGTERM → exit 143 in {took:.1f} s")


@pytest.mark.container
@pytest.mark.parametrize("mode", ["tui", "headless"])
def test_hangup_detaches_the_season_which_goes_on(request, season, mode):
    season_file, out = season
    term = start_run(request, season_file, out, headless=mode == "headless")
    n = len(kinds(out))
    term.hang_up()
    time.sleep(2)
    assert term.proc.poll() is None, "the runner died with its terminal"
    assert len(territories(out)) == 3 and netns_of(out) == term.netns
    log = out / "aoe-run.log"
    wait_until(lambda: log.is_file() and "SIGHUP: the terminal closed" in log.read_text(), 10, "the log line",
               term.proc)
    share = cpu_share(term.proc.pid, 2.0)
    assert share < 0.5, f"the detached runner uses {share:.0%} of a CPU"
    assert len(kinds(out)) >= n and "season_stopped" not in kinds(out)
    t0 = time.monotonic()
    term.proc.send_signal(signal.SIGTERM)
    took = assert_stopped_cleanly(term, out, "SIGTERM", t0, 143)
    lines = log.read_text().splitlines()
    assert "SIGTERM: stopping" in "\n".join(lines)
    # the last line says the stop is done and how to resume, headless as in the TUI
    assert lines[-1].endswith(f"season stopped; resume with the same command (folder {out})"), lines[-3:]
    print(f"hangup ({mode}): alive, runner CPU {share:.0%}; SIGTERM stop {took:.1f} s")


@pytest.mark.container
def test_detach_then_hangup_keeps_the_season_running(request, season):
    season_file, out = season
    term = start_run(request, season_file, out)
    term.send(b"q")
    wait_until(lambda: "The season is still running" in term.text(), 20, "the quit screen", term.proc)
    term.send(b"d")
    wait_until(lambda: "detached: the season goes on" in term.text(), 20, "the detach line", term.proc)
    modes, hidden = term.modes()
    assert ALT_SCREEN not in modes and not (MOUSE_MODES & modes) and not hidden
    term.hang_up()
    time.sleep(2)
    assert term.proc.poll() is None, "the detached runner died with its terminal"
    assert len(territories(out)) == 3
    log = (out / "aoe-run.log").read_text()
    assert "detached: the season goes on in pid" in log
    t0 = time.monotonic()
    term.proc.send_signal(signal.SIGINT)
    took = assert_stopped_cleanly(term, out, "SIGINT", t0, 130)
    print(f"detach + hangup: alive; SIGINT stop {took:.1f} s")


FAKE_DEBOOTSTRAP = """#!/bin/sh
# stands in for debootstrap (minutes of downloads): mounts proc into the half-built rootfs
# as its configure stage does, then works on; argv: OPTIONS... SUITE TARGET MIRROR
set -e
n=0
for a in "$@"; do
  case "$a" in --*) ;; *) n=$((n+1)); [ $n -eq 2 ] && target="$a" ;; esac
done
mkdir -p "$target/proc"
mount -t proc proc "$target/proc"
echo "I: Configuring the base system..."
exec sleep 300
"""


def test_sigterm_during_image_build_unmounts_and_removes_the_half_built_rootfs(tmp_path):
    if os.geteuid() != 0 or shutil.which("mkfs.ext4") is None or shutil.which("qemu-img") is None:
        pytest.skip("an image build needs root, mkfs.ext4 and qemu-img")
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "debootstrap").write_text(FAKE_DEBOOTSTRAP)
    (fake / "debootstrap").chmod(0o755)
    cache = tmp_path / "cache"
    term = Term([sys.executable, "-m", "aoe_tui.cli", "image", "build", "--force"],
                env={"PATH": f"{fake}:{os.environ.get('PATH', '')}", "XDG_CACHE_HOME": str(cache)})
    try:
        wait_until(lambda: [m for m in mounts_under(cache) if m.endswith("/rootfs/proc")], 30, "the proc mount",
                   term.proc)
        assert term.modes()[1], "the progress bar hides the cursor"
        t0 = time.monotonic()
        term.proc.send_signal(signal.SIGTERM)
        assert term.proc.wait(30) == 143
        took = time.monotonic() - t0
        time.sleep(0.2)
        assert mounts_under(cache) == []
        assert not list((cache / "aoe-tui" / "images").glob(".build-*"))
        assert not term.modes()[1], "the cursor was left hidden"
        assert "stopped by SIGTERM" in term.text()
        print(f"image build SIGTERM → 143 in {took:.2f} s, no mount left")
    finally:
        term.close()
        for m in mounts_under(cache):
            subprocess.run(["umount", "-l", m], check=False)


def test_replay_with_stdin_at_eof_idles_and_signals_close_it(tmp_path):
    shares = {}
    for sig in (signal.SIGHUP, signal.SIGTERM):
        term = Term([sys.executable, "-m", "aoe_tui.cli", "replay", str(FIXTURE_MATCH), "--paused"],
                    stdin_devnull=True)
        try:
            # the first paint costs ~1.3 CPU-s: at load 45 on 2 cores (1/20 of a core) about 30 s
            wait_until(lambda: ALT_SCREEN in term.modes()[0] and "first-build" in term.text(), 120, "the replay",
                       term.proc)
            if sig == signal.SIGHUP:  # measured once: the idle view with its stdin at EOF
                shares[sig.name] = share = idle_share(term.proc.pid, 0.05)
                assert share < 0.05, f"an idle replay with stdin at EOF uses {share:.0%} of a CPU"
            t0 = time.monotonic()
            term.proc.send_signal(sig)
            # it must exit on the signal, not how fast: a generous deadline (seconds under load)
            assert term.proc.wait(60) == 128 + sig.value
            took = time.monotonic() - t0
            if sig == signal.SIGTERM:
                term.wait_output_end()  # its last bytes (the terminal's restore) are on the screen
                modes, hidden = term.modes()
                assert ALT_SCREEN not in modes and not (MOUSE_MODES & modes) and not hidden
            idle = f", idle CPU {shares[sig.name]:.1%}" if sig.name in shares else ""
            print(f"replay {sig.name}: exit in {took:.2f} s{idle}")
        finally:
            term.close()


def test_watch_ends_on_hangup_and_serve_stops_on_sighup(tmp_path):
    """``aoe watch`` whose terminal closes (an SSH spectator leaving) exits at once (129), no
    process left in its group; ``aoe serve`` stops on SIGHUP as on SIGTERM (exit 0)."""
    import asyncssh

    from aoe_tui.testing.feeder import SeasonFeeder

    feeder = SeasonFeeder(REPO / "tests" / "fixtures" / "seed" / "opencode-cup-2026-W37-r1-h2-a1.match.json",
                          tmp_path / "season", speed=1000.0)
    feeder.prepare()
    feeder.run()
    term = Term([sys.executable, "-m", "aoe_tui.cli", "watch", str(feeder.out)])
    try:
        wait_until(lambda: ALT_SCREEN in term.modes()[0] and "season" in term.text(), 30, "the watch view", term.proc)
        t0 = time.monotonic()
        term.hang_up()
        assert term.proc.wait(10) == 128 + signal.SIGHUP
        took = time.monotonic() - t0
        assert subprocess.run(["pgrep", "-g", str(term.proc.pid)], capture_output=True).stdout == b""
    finally:
        term.close()
    key = asyncssh.generate_private_key("ssh-ed25519")
    (tmp_path / "authorized_keys").write_bytes(key.export_public_key())
    serve = subprocess.Popen([sys.executable, "-m", "aoe_tui.cli", "serve", str(feeder.out), "--port", "0",
                              "--host-key", str(tmp_path / "hk"), "--authorized-keys", str(tmp_path / "authorized_keys")],
                             stderr=subprocess.PIPE, text=True, cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)))
    try:
        wait_until(lambda: "listening" in serve.stderr.readline(), 30, "the server", serve)
        serve.send_signal(signal.SIGHUP)
        assert serve.wait(15) == 0
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait()
    print(f"watch hangup → 129 in {took:.2f} s; serve SIGHUP → 0")


def main_thread_wait(pid: int) -> str:
    """Where the main thread of ``pid`` sleeps in the kernel (``/proc/PID/wchan``)."""
    return Path(f"/proc/{pid}/wchan").read_text()


def settled(pid: int, timeout_s: float = 30.0) -> str:
    """Wait until ``pid`` uses no CPU for 0.3 s; then where its main thread sleeps. Fails
    after ``timeout_s`` seconds (a view that spins on its full output would otherwise hang
    the test instead of failing it)."""
    spent, deadline = cpu_seconds(pid), time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        time.sleep(0.3)
        now = cpu_seconds(pid)
        if now == spent:
            return main_thread_wait(pid)
        spent = now
    raise AssertionError(f"process {pid} kept using CPU for {timeout_s:.0f} s (spinning?)")


def test_watch_whose_dead_terminal_filled_up_exits_on_sigterm(tmp_path):
    """``aoe watch`` whose terminal stopped reading, so that its output filled the PTY and the
    app's loop waits on a full output queue (Textual's writer blocked in the kernel), ends on
    SIGTERM with 143 within seconds: (a) the terminal then goes away without a SIGHUP
    reaching the view (no controlling terminal, as with a harness that ignores SIGHUP):
    Textual's writer died on EIO and the app's exit waited for ever on the full queue;
    (b) the terminal stays open, never read again; (c) an idle view whose terminal goes away
    without a SIGHUP: the SIGTERM finds it hung up and leaves it first
    (``signals.terminal_gone``). Each time nothing is left of it: no process in its group."""
    from aoe_tui.testing.feeder import SeasonFeeder

    feeder = SeasonFeeder(REPO / "tests" / "fixtures" / "seed" / "opencode-cup-2026-W37-r1-h2-a1.match.json",
                          tmp_path / "season", speed=1000.0)
    feeder.prepare()
    feeder.run()
    for fill, close_master in ((True, True), (True, False), (False, True)):
        case = f"{'full output' if fill else 'idle'}, terminal {'closed' if close_master else 'not read'}"
        term = Term([sys.executable, "-m", "aoe_tui.cli", "watch", str(feeder.out)], cols=200, rows=60, ctty=False)
        try:
            wait_until(lambda: ALT_SCREEN in term.modes()[0] and "season" in term.text(), 30, "the watch view",
                       term.proc)
            term.stop_reading()
            if fill:
                # each "t" (theme) redraws the whole screen, one key at a time: the PTY fills,
                # then the queue of 30 writes, then the app's loop waits on a lock (a futex)
                # instead of idling in epoll_wait
                for _ in range(100):
                    if "futex" in settled(term.proc.pid) and "futex" in settled(term.proc.pid):
                        break
                    term.send(b"t")
                assert "futex" in main_thread_wait(term.proc.pid), "the view's output never filled up"
                assert term.pending_output() > 1024
            else:
                assert "futex" not in settled(term.proc.pid)
            if close_master:  # the terminal goes away; no SIGHUP reaches the view
                os.close(term.master)
                term.master = -1
                time.sleep(0.5)
                assert term.proc.poll() is None
            t0 = time.monotonic()
            term.proc.send_signal(signal.SIGTERM)
            try:
                code = term.proc.wait(15)
            except subprocess.TimeoutExpired:
                raise AssertionError(f"aoe watch hung after SIGTERM ({case})") from None
            took = time.monotonic() - t0
            assert code == 143 and took < 10, (case, code, took)
            left = subprocess.run(["pgrep", "-g", str(term.proc.pid)], capture_output=True, text=True).stdout
            assert left == "", f"{case}: processes left in the view's group: {left.split()}"
            print(f"watch, {case}: SIGTERM → 143 in {took:.2f} s")
        finally:
            if term.proc.poll() is None:
                term.proc.kill()
                term.proc.wait()
            term.close()


#: a plain command under ``raise_on_signals`` (as ``aoe image build``) that prints on its way out
STOPPING_COMMAND = """
import sys, time
from aoe_tui.signals import Stopped, raise_on_signals
try:
    with raise_on_signals():
        print("ready", flush=True)
        while True:
            time.sleep(0.05)
except Stopped as stop:
    print(f"{stop.name}: cleaning up", flush=True)
    sys.exit(stop.exit_code)
"""


def test_sigterm_to_a_plain_command_whose_terminal_hung_up_still_cleans_up_and_exits_143():
    """A plain command (``signals.raise_on_signals``) whose terminal went away without a SIGHUP
    reaching it (its own session, the PTY not its controlling terminal), then SIGTERM: it
    leaves the dead terminal first, so the line its clean-up prints cannot raise EIO; exit
    143 (it was 1, an ``OSError`` from that line, before the terminal was checked)."""
    master, slave = os.openpty()
    proc = subprocess.Popen([sys.executable, "-c", STOPPING_COMMAND], stdin=slave, stdout=slave, stderr=slave,
                            start_new_session=True, cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)))
    keep = os.dup(slave)  # the parent's view of the same terminal, to see it hang up
    os.close(slave)
    try:
        seen = b""
        end = time.monotonic() + 30
        while b"ready" not in seen:
            assert time.monotonic() < end and proc.poll() is None, seen
            if select_readable(master, 0.1):
                seen += os.read(master, 1024)
        os.close(master)
        master = -1
        import termios

        with pytest.raises(termios.error):  # EIO: the terminal hung up, though no SIGHUP reached the command
            termios.tcgetattr(keep)
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 143
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for fd in (master, keep):
            if fd >= 0:
                os.close(fd)


def test_sigterm_with_a_hung_up_stdin_keeps_the_output_a_command_was_redirected_to(tmp_path):
    """A plain command (``aoe image build > build.log 2>&1 &``) left behind by a closed
    terminal (stdin still the PTY, hung up; no SIGHUP reached it), then SIGTERM: only the dead
    stdin is released; the line its clean-up prints still goes to the file its output was
    redirected to (the whole terminal was released before, which sent fds 1 and 2 to
    ``/dev/null``)."""
    master, slave = os.openpty()
    log = tmp_path / "run.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-c", STOPPING_COMMAND], stdin=slave, stdout=out, stderr=out,
                                start_new_session=True, cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)))
    os.close(slave)
    try:
        end = time.monotonic() + 30
        while b"ready" not in log.read_bytes():
            assert time.monotonic() < end and proc.poll() is None, log.read_bytes()
            time.sleep(0.05)
        os.close(master)  # the terminal goes away; no SIGHUP reaches the command (its own session)
        master = -1
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 143
        assert log.read_text().splitlines() == ["ready", "SIGTERM: cleaning up"]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if master >= 0:
            os.close(master)


def test_gone_terminals_names_only_the_hung_up_descriptors():
    """``signals.gone_terminals``: of a hung-up PTY slave, a live one, ``/dev/null`` and a
    pipe, only the hung-up slave, in the order asked."""
    from aoe_tui.signals import gone_terminals

    dead_master, dead = os.openpty()
    live_master, live = os.openpty()
    null = os.open(os.devnull, os.O_RDWR)
    r, w = os.pipe()
    try:
        os.close(dead_master)
        dead_master = -1
        assert gone_terminals((null, live, w, dead, r)) == (dead,)
        assert gone_terminals((live, null)) == ()
    finally:
        for fd in (dead_master, dead, live_master, live, null, r, w):
            if fd >= 0:
                os.close(fd)


def select_readable(fd: int, timeout_s: float) -> bool:
    import select

    return bool(select.select([fd], [], [], timeout_s)[0])


def test_terminal_gone_tells_a_hung_up_terminal_from_a_live_one_or_none():
    """``signals.terminal_gone``: a PTY slave whose master closed (hung up, no SIGHUP needed)
    is gone; the same slave while the master is open (read or not), ``/dev/null``, a pipe, a
    file and a closed descriptor are not."""
    from aoe_tui.signals import terminal_gone

    master, slave = os.openpty()
    null = os.open(os.devnull, os.O_RDWR)
    r, w = os.pipe()
    try:
        assert not terminal_gone((slave,))
        assert not terminal_gone((null, w, r))
        with open(__file__, "rb") as f:
            assert not terminal_gone((f.fileno(),))
        closed = os.dup(null)
        os.close(closed)
        assert not terminal_gone((closed,))
        os.close(master)
        master = -1
        assert terminal_gone((slave,)) and terminal_gone((null, slave))
    finally:
        for fd in (master, slave, null, r, w):
            if fd >= 0:
                os.close(fd)


@pytest.mark.container
def test_match_run_aborts_when_its_terminal_closes(request, tmp_path):
    """``aoe match run`` whose terminal closes mid-heat aborts like after SIGTERM: exit 129,
    ``world.json`` aborted, no territory and no mount left (its lines go to /dev/null)."""
    import json

    if os.geteuid() != 0 or shutil.which("systemd-nspawn") is None:
        pytest.skip("container territories need root and systemd-nspawn")
    request.getfixturevalue("guest_image")
    out = tmp_path / "match"
    term = Term([sys.executable, "-m", "aoe_tui.cli", "match", "run", str(ARENA), "--provider", "container",
                 "--agent", "scripted:memory", "--output", str(out), "--engine-priority", "normal"])
    request.addfinalizer(term.close)
    wait_until(lambda: len(territories(out)) >= 3, 120, "three territories", term.proc)
    t0 = time.monotonic()
    term.hang_up()
    assert term.proc.wait(120) == 129
    took = time.monotonic() - t0
    assert territories(out) == [] and mounts_under(out) == []
    assert json.loads((out / "world.json").read_text())["match_state"] == "aborted"
    print(f"match run hangup → aborted, 129 in {took:.1f} s")


def test_watch_continued_after_sigstop_goes_on_and_ctrl_z_still_suspends(tmp_path):
    """A SIGSTOP/SIGCONT (``aoe serve`` pauses its spare view so; the kernel adds a SIGCONT to
    a hang-up) leaves ``aoe watch`` as it was: no second start of application mode (Textual's
    handler started new input and writer threads on the same terminal). Ctrl+Z (SIGTSTP)
    still leaves the alternate screen and its SIGCONT brings the view back."""
    from aoe_tui.testing.feeder import SeasonFeeder

    feeder = SeasonFeeder(REPO / "tests" / "fixtures" / "seed" / "opencode-cup-2026-W37-r1-h2-a1.match.json",
                          tmp_path / "season", speed=1000.0)
    feeder.prepare()
    feeder.run()
    term = Term([sys.executable, "-m", "aoe_tui.cli", "watch", str(feeder.out)])

    def threads() -> int:
        return len(os.listdir(f"/proc/{term.proc.pid}/task"))

    def state() -> str:
        return open(f"/proc/{term.proc.pid}/stat").read().rsplit(")", 1)[1].split()[0]

    try:
        wait_until(lambda: ALT_SCREEN in term.modes()[0] and "season" in term.text(), 30, "the watch view", term.proc)
        time.sleep(0.5)
        before = threads()
        term.proc.send_signal(signal.SIGSTOP)
        wait_until(lambda: state() == "T", 10, "the view to stop", term.proc)
        term.proc.send_signal(signal.SIGCONT)
        wait_until(lambda: state() != "T", 10, "the view to go on", term.proc)
        time.sleep(1.0)
        assert threads() == before, f"{threads()} threads after SIGSTOP/SIGCONT, {before} before"
        assert ALT_SCREEN in term.modes()[0] and "season" in term.text()
        # Ctrl+Z: Textual leaves application mode, then stops the process; SIGCONT resumes it
        term.proc.send_signal(signal.SIGTSTP)
        wait_until(lambda: state() == "T" and ALT_SCREEN not in term.modes()[0], 10, "Ctrl+Z to suspend the view",
                   term.proc)
        term.proc.send_signal(signal.SIGCONT)
        wait_until(lambda: ALT_SCREEN in term.modes()[0] and state() != "T", 10, "the view back after SIGCONT",
                   term.proc)
        assert term.proc.poll() is None
    finally:
        term.close()


def test_watch_ctrl_z_then_bg_then_fg_in_a_job_control_shell_comes_back(tmp_path):
    """Ctrl+Z, ``bg``, ``fg`` in a shell: ``bg``'s SIGCONT finds the view in the background
    (Textual's resume stops it again at its first terminal write, SIGTTOU), and ``fg``'s
    SIGCONT must then bring application mode back: the driver's own SIGTSTP is still what
    that second SIGCONT follows (GuardedDriver ignores only a SIGCONT after a plain SIGSTOP)."""
    from aoe_tui.testing.feeder import SeasonFeeder

    feeder = SeasonFeeder(REPO / "tests" / "fixtures" / "seed" / "opencode-cup-2026-W37-r1-h2-a1.match.json",
                          tmp_path / "season", speed=1000.0)
    feeder.prepare()
    feeder.run()
    term = Term([shutil.which("bash"), "--norc", "--noprofile", "-i"], env={"PS1": "$ "})
    try:
        term.send(f"{sys.executable} -m aoe_tui.cli watch {feeder.out}\r".encode())
        wait_until(lambda: ALT_SCREEN in term.modes()[0] and "season" in term.text(), 60, "the watch view", term.proc)
        # the ctty helper execs the shell: its pid is the shell's, the view is its child
        view = int(subprocess.run(["pgrep", "-P", str(term.proc.pid)], capture_output=True, text=True).stdout.split()[0])

        def state() -> str:
            return open(f"/proc/{view}/stat").read().rsplit(")", 1)[1].split()[0]

        time.sleep(0.5)
        os.kill(view, signal.SIGTSTP)  # what Ctrl+Z's action sends
        wait_until(lambda: state() == "T" and ALT_SCREEN not in term.modes()[0], 10, "Ctrl+Z to suspend", term.proc)
        time.sleep(0.3)
        term.send(b"bg\r")
        time.sleep(1.0)
        wait_until(lambda: state() == "T", 10, "the view in the background to stop again (SIGTTOU)", term.proc)
        term.send(b"fg\r")
        wait_until(lambda: ALT_SCREEN in term.modes()[0] and state() != "T", 15,
                   "fg to bring the view back into application mode", term.proc)
    finally:
        for pid in subprocess.run(["pgrep", "-P", str(term.proc.pid)], capture_output=True, text=True).stdout.split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        term.proc.kill()  # an interactive shell ignores SIGTERM
        term.close()
