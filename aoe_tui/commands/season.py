"""``aoe run SEASON_FILE`` and ``aoe standings SEASON_DIR`` (issue 5).

``aoe run`` runs or resumes a season (see :mod:`aoe_tui.season.runner`). By default it
opens the TUI (season, heat and standings screens); the season engine runs on its own
thread and event loop (:class:`aoe_tui.tui.host.SeasonHost`) and the UI only pulls
what it posts. Quitting asks: **stop** (running heats abort, territories are torn down,
the same command resumes) or **detach** (the UI closes; the same process keeps running
the season, no longer needs the terminal — closing it does not stop the season — and
appends its lines to ``SEASON/aoe-run.log``; SIGINT/SIGTERM then stop it).
``--headless`` (or no terminal on stdout) prints one line per state change instead.

Signals (issue 17), in every mode: SIGINT/SIGTERM stop the season cleanly (the TUI
closes through its normal path, so the terminal is restored; running heats abort and
tear their territories down; ``season_stopped`` is appended to ``season.jsonl``; the
running attempts are re-run on the next ``aoe run`` of the same file and folder); the
exit code is ``128 + signum`` (130, 143). SIGHUP (the terminal closed) never stops a
season: it detaches as above (headless on a terminal: its lines go to
``SEASON/aoe-run.log`` from then on). ``--retry-void`` re-runs the heats the
infrastructure voided (see :mod:`aoe_tui.season.runner`); a knockout waiting on a void heat
exits 75 naming it (:class:`aoe_tui.season.runner.SeasonWaiting`). A resume whose arena
files or adapters changed since the season started is refused naming each file unless
``--accept-changed-rules`` (:mod:`aoe_tui.season.rules_record`). A full disk stops the season
resumably: one line naming the folder and the space, exit status 75
(:class:`aoe_tui.season.runner.DiskFullStop`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time
from pathlib import Path

from aoe_tui.commands.serve import add_run_args, serving
from aoe_tui.domain.display import json_printable, printable
from aoe_tui.fsio import write_atomic
from aoe_tui.errors import AoeError, UsageError


def register(sub: argparse._SubParsersAction) -> None:
    """Register ``aoe run`` and ``aoe standings``."""
    r = sub.add_parser(
        "run", help="run or resume a season (rounds of heats, attempts, standings)",
        description="Run a season file in the TUI; running it again on the same --output folder resumes it. "
        "q asks whether to stop the season (resumable) or detach and keep it running headless. "
        "--headless prints one line per state change instead.",
        epilog="Heats at once: concurrent_heats in the season file (default 2) is how many heats run at once "
        "on this machine. With more than one, AOE_BOOT_SLOTS=N lets at most N territories boot at once across "
        "them (default 3, 0 = no limit; a heat of more than N boots alone), and the territories' CPU is weighed "
        "by phase so racing heats outrank booting ones (container provider, cgroup-v1 hosts; on by default, "
        "AOE_CPU_WEIGHTS=0 or false/no/off turns it off; =1 where it cannot work says so in one line). "
        'See docs/territories.md, "Fair shares between heats".',
    )
    r.add_argument("season_file", metavar="SEASON_FILE", help="season file (seasons/*.toml)")
    r.add_argument("--output", "-o", metavar="DIR",
                   help="season folder (default: ./season-<id>-<label>); an existing one is resumed")
    r.add_argument("--headless", action="store_true", help="no TUI: print one line per state change")
    r.add_argument("--light", action="store_true", help="light theme")
    r.add_argument("--retry-void", action="store_true",
                   help="re-run the heats in which the infrastructure spoiled every attempt (each gets up to "
                   "max_attempts new attempts; the season file may differ from the folder's season.toml in "
                   "max_attempts only)")
    r.add_argument("--accept-changed-rules", action="store_true",
                   help="resume although an arena package file (manifest, verifier, recipe, builder) or an adapter "
                   "changed since the season started (a resume refuses that, naming each file); the change is "
                   "recorded in season-rules.json and shown in the standings")
    r.add_argument("--cluster", metavar="ADDRESS",
                   help="run every heat on a worker node of this Ray cluster (as Ray takes it: auto, HOST:PORT; "
                   "overrides the season file's [cluster] address; needs the cluster extra)")
    r.add_argument("--token-file", type=Path, default=None, metavar="PATH",
                   help="with a cluster: Ray's token file, a copy of the head's (default: $RAY_AUTH_TOKEN_PATH "
                   "or ~/.ray/auth_token)")
    r.add_argument("--site", type=Path, default=None, metavar="DIR",
                   help="keep the season's cup site in DIR (aoe site): rebuilt and swapped in one step after "
                   "every heat")
    add_priority_arg(r)
    add_run_args(r)  # --serve-ssh PORT: spectators over SSH while the season runs
    r.set_defaults(func=_cmd_run)
    s = sub.add_parser("standings", help="export a season's standings (csv, json, md, html)")
    s.add_argument("season_dir", metavar="SEASON_DIR", help="season folder written by aoe run")
    s.add_argument("--format", "-f", default="md", choices=["csv", "json", "md", "html"], help="output format (default md)")
    s.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    s.set_defaults(func=_cmd_standings)


def _cmd_run(args: argparse.Namespace) -> int:
    from aoe_tui.season.runner import load_season_file, safe_label

    loaded = load_season_file(args.season_file)
    out = Path(args.output) if args.output else Path(f"season-{loaded.season.id}-{safe_label(loaded.season.label)}")
    headless = args.headless or not sys.stdout.isatty()
    with serving(args, out, headless=headless) as server:
        rc = run_season(loaded, out, headless=headless, light=getattr(args, "light", False),
                        priority=args.engine_priority, token_file=getattr(args, "token_file", None),
                        runner_kwargs={**({"retry_void": True} if getattr(args, "retry_void", False) else {}),
                                       **({"accept_changed_rules": True}
                                          if getattr(args, "accept_changed_rules", False) else {}),
                                       **({"cluster": args.cluster} if getattr(args, "cluster", None) else {})},
                        site=getattr(args, "site", None))
        if server is not None:
            server.finished = rc == 0  # spectators keep the final view a while
        return rc


#: where :func:`_say` sends its lines once the terminal is gone (the season folder's log)
_LOST_TERMINAL_LOG: list[Path] = []


def _say(msg: str) -> None:
    """Print one progress line (:func:`aoe_tui.signals.say_line`: if the terminal is gone,
    the line and the ones after it go to the season's ``aoe-run.log``), its text made
    terminal-safe (:func:`printable`)."""
    from aoe_tui.signals import say_line

    say_line(printable(f"{time.strftime('%H:%M:%S')} {msg}"), log=_LOST_TERMINAL_LOG[-1] if _LOST_TERMINAL_LOG else None)


def add_priority_arg(p: argparse.ArgumentParser) -> None:
    """Add ``--engine-priority realtime|normal`` (see :mod:`aoe_tui.runtime.realtime`)."""
    from aoe_tui.runtime.realtime import ENGINE_PRIORITIES

    p.add_argument("--engine-priority", default="realtime", choices=ENGINE_PRIORITIES,
                   help="realtime (default): the referee thread runs at the lowest real-time priority "
                   "when permitted (root or CAP_SYS_NICE), so busy territories or spectators do not "
                   "delay its ticks; what it starts runs at normal priority")


def run_season(loaded, out: Path, *, headless: bool, light: bool = False, runner_kwargs: dict | None = None,
               priority: str = "realtime", token_file: Path | None = None, site: Path | None = None) -> int:
    """Run or resume ``loaded`` (a :class:`aoe_tui.domain.season_file.LoadedSeason`) into ``out``,
    headless (plain lines) or in the TUI; the engine thread runs at ``priority`` (one of
    :data:`aoe_tui.runtime.realtime.ENGINE_PRIORITIES`). Returns the exit code (0
    finished, ``128 + signum`` stopped by a signal: 130, 143). SIGHUP while the guest image
    is still being prepared (before the season starts) stops the command (129); once the
    season runs, it detaches. A cluster season (``runner_kwargs["cluster"]`` or ``[cluster]``)
    is checked first with ``token_file`` (:func:`check_cluster`), before the folder is touched,
    and so are the heat settings of the environment (``AOE_BOOT_SLOTS``, ``AOE_CPU_WEIGHTS``,
    ``AOE_MIN_FREE_MIB``: :func:`aoe_tui.season.runner.check_heat_env`).
    ``site``: a folder the season's cup site is kept in (``aoe run --site``).
    Raises :class:`AoeError` for bad input (also when the engine
    fails before/while running); :class:`aoe_tui.season.runner.DiskFullStop` (exit 75)
    when a full disk stops the season."""
    from aoe_tui.commands.image import prepare_provider_images
    from aoe_tui.commands.site import season_exports
    from aoe_tui.season.runner import check_heat_env, hold_season_folder, load_season_arenas

    check_heat_env()  # AOE_BOOT_SLOTS, AOE_CPU_WEIGHTS, AOE_MIN_FREE_MIB: before anything is written
    if site is not None:  # a site folder that cannot take the site: said now, not after every heat
        from aoe_tui.commands.site import check_run_site

        check_run_site(site, out)
    # standings files after every heat and at the end (the runner does not know exports)
    runner_kwargs = {"write_exports": season_exports(site), **(runner_kwargs or {})}
    arenas, _ = load_season_arenas(loaded)
    check_cluster(loaded, runner_kwargs.get("cluster"), token_file)
    _LOST_TERMINAL_LOG.append(out / RUN_LOG)
    with hold_season_folder(out):
        # the guest image and every arena's image layer, with a progress bar, before the
        # engine (and the TUI) start; cached after the first run
        if not (runner_kwargs.get("cluster") or loaded.season.cluster is not None):  # workers build their own
            prepare_provider_images(loaded.season.provider.kind, [a.arena_dir for a in arenas])
        if headless:
            return _run_headless(loaded, out, runner_kwargs, priority)
        return _run_tui(loaded, out, light, runner_kwargs, priority)


def check_cluster(loaded, address: str | None, token_file: Path | None = None) -> None:
    """Before a cluster season touches its folder: authenticate this process as the
    cluster's client (``aoe_tui.cluster.node.client_auth``: the token file of
    ``token_file`` (``--token-file``), else of ``RAY_AUTH_TOKEN_PATH`` or ``~/.ray/auth_token``;
    it must be set before Ray is first
    imported, or Ray keeps asking without a token) and check that the cluster answers and
    accepts the token (``probe_cluster``, a few seconds at most). ``address``: ``--cluster``,
    else the season file's ``[cluster] address``; no address: nothing to do.

    Raises:
        ClusterError: one line naming where the address came from (``--cluster`` or the
            season file's ``cluster.address``) and what is wrong (unreachable, no token, a
            refused token, a token file readable by others) — instead of a runner that waits
            for Ray forever.
    """
    table = loaded.season.cluster
    if not address and table is None:
        return
    from aoe_tui.cluster import ClusterError
    from aoe_tui.cluster.node import client_auth, probe_cluster, resolve_address

    where = "--cluster" if address else f"{loaded.path}: cluster.address"
    address = address or table.address
    try:
        client_auth(token_file)
        probe_cluster(resolve_address(address))
    except ClusterError as err:
        raise ClusterError(f"{where}: {err}") from None


#: the detached (or hung-up) runner's output, inside the season folder
RUN_LOG = "aoe-run.log"


def _stopped_line(out: Path) -> str:
    """The last line of a stopped ``aoe run`` (headless or TUI)."""
    return f"season stopped; resume with the same command (folder {out})"


def _run_headless(loaded, out: Path, runner_kwargs: dict, priority: str) -> int:
    from aoe_tui.runtime.realtime import engine_priority
    from aoe_tui.season.runner import SeasonRunner
    from aoe_tui.signals import release_terminal

    say = _say
    runner = SeasonRunner(loaded, out, say=say, **runner_kwargs)

    async def main() -> int:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        stopping: list[signal.Signals] = []

        def stop(sig: signal.Signals) -> None:
            if not stopping:
                stopping.append(sig)
                runner.stop_reason = sig.name
                say(f"{sig.name}: stopping (territories are torn down; run the same command again to resume)")
                assert task is not None
                task.cancel()

        def hangup() -> None:  # the terminal closed: the season goes on, its lines into the log
            if os.isatty(1) or os.isatty(2):
                release_terminal(out / RUN_LOG)
            say(f"SIGHUP: the terminal closed; the season goes on (pid {os.getpid()}), lines in {out / RUN_LOG}")

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop, sig)
        loop.add_signal_handler(signal.SIGHUP, hangup)
        try:
            with engine_priority(priority) as note:
                say(note)
                await runner.run()
        except asyncio.CancelledError:
            if stopping:
                say(_stopped_line(out))
                return 128 + stopping[0].value
            raise
        say(f"standings written to {out}/standings.{{csv,json,md,html}}")  # the champion: the runner's last line
        return 0

    return asyncio.run(main())


def _run_tui(loaded, out: Path, light: bool, runner_kwargs: dict, priority: str) -> int:
    from aoe_tui.season.runner import SeasonRunner
    from aoe_tui.tui.app import DARK_THEME, LIGHT_THEME, AoeApp, run_in_terminal
    from aoe_tui.tui.host import SeasonHost
    from aoe_tui.tui.live import FeedObserver, LiveFeed

    feed = LiveFeed()
    observer = FeedObserver(feed)
    host = SeasonHost(lambda say: SeasonRunner(loaded, out, say=say, observer=observer, **runner_kwargs),
                      priority=priority)
    try:
        # from here on nothing may leave the engine thread running: a Ctrl+C before the
        # view's own handlers are in place (or after they are put back) stops it too
        host.start()
        app = AoeApp.season_view(feed, out, host=host, read_only=False, theme=LIGHT_THEME if light else DARK_THEME)
        # SIGINT/SIGTERM: the app exits as after "stop"; SIGHUP: as after "detach"
        result, sig = run_in_terminal(app, on_stop="stop", on_hangup="detach")
        return finish_tui_run(host, result, out, signal_name=sig)
    except BaseException as err:
        host.stop("SIGINT" if isinstance(err, KeyboardInterrupt) else "error")
        host.join()
        raise


def finish_tui_run(host, result: str | None, out: Path, signal_name: str | None = None) -> int:
    """After the TUI closed (``result``: ``stop``, ``detach``, ``finished``, ``error`` or
    None; ``signal_name``: the signal that closed it, if one did): stop the engine, or keep
    it running detached, or report how it ended. Detached, the process ignores SIGHUP and
    appends its lines to ``out/aoe-run.log`` (a hangup already sent them to /dev/null);
    SIGINT/SIGTERM stop it (resumable). Returns 0 (finished), ``128 + signum`` (stopped by
    a signal) or 130 (stopped from the TUI). Raises :class:`AoeError` when the engine failed."""
    from aoe_tui.signals import release_terminal

    stopped: list[str] = [signal_name] if signal_name in ("SIGINT", "SIGTERM") else []

    def on_signal(signum, _frame) -> None:
        if not stopped:
            stopped.append(signal.Signals(signum).name)
            _say(f"{stopped[0]}: stopping (territories are torn down; run the same command again to resume)")
        host.stop(stopped[0])

    old = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    old[signal.SIGHUP] = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        if stopped and not host.done:
            _say(f"{stopped[0]}: stopping the season: running heats abort and territories are torn down …")
            host.stop(stopped[0])
        elif result == "stop" and not host.done:
            _say("stopping the season: running heats abort and territories are torn down …")
            host.stop("quit")
        elif result == "detach" and not host.done:
            log = out / RUN_LOG
            if signal_name != "SIGHUP":
                _say(f"detached: the season goes on in this process (pid {os.getpid()}) even if this terminal "
                     f"closes; its lines go to {log}; Ctrl+C or kill -TERM {os.getpid()} stops it (resumable)")
            sys.stdout.flush()
            sys.stderr.flush()
            release_terminal(log)
            _say(f"detached{' (SIGHUP: the terminal closed)' if signal_name == 'SIGHUP' else ''}: "
                 f"the season goes on in pid {os.getpid()}")
            host.set_sink(lambda line: print(line, flush=True))
        host.join()
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)
    if host.error is not None:
        err = host.error
        if isinstance(err, AoeError):
            raise err
        raise AoeError(f"season engine failed: {type(err).__name__}: {err}") from None
    if host.cancelled:
        _say(_stopped_line(out))
        return 128 + signal.Signals[stopped[0]].value if stopped else 130
    _say(f"standings written to {out}/standings.{{csv,json,md,html}}")  # the champion: the runner's last line
    return 0


def _cmd_standings(args: argparse.Namespace) -> int:
    from aoe_tui.export.standings_files import render
    from aoe_tui.replay.seasondir import load_season_dir

    season_dir = Path(args.season_dir)
    if not season_dir.is_dir():
        raise UsageError(f"{season_dir}: no such season folder")
    state = load_season_dir(season_dir)
    text = render(state, args.format)
    if args.output:
        out = Path(args.output)
        try:
            if out.is_symlink() or (out.exists() and not out.is_file()):  # /dev/stdout, a FIFO, a link:
                with open(out, "w", encoding="utf-8") as fh:  # written through, never replaced
                    fh.write(text)
            else:
                write_atomic(out, text)  # a full disk keeps the previous file whole
        except OSError as err:
            raise AoeError(f"{args.output}: cannot write: {err.strerror}") from None
    elif args.format == "json":
        sys.stdout.write(json_printable(text))  # the same JSON, no C1 control raw
    elif sys.stdout.isatty():  # a terminal acts on the control characters agent text may hold
        sys.stdout.write(printable(text.replace("\r\n", "\n"), newlines=True))
    else:  # a file or a pipe gets the exact bytes of the export
        sys.stdout.write(text)
    return 0
