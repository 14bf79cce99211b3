"""``aoe match run``: run one heat for real and write its match folder.

::

    aoe match run MANIFEST [--provider NAME] --output DIR
        [--agent SPEC ...] [--adapter NAME=PATH ...] [--credential TERRITORY=PATH ...]
        [--inventory FILE] [--drain-seconds N] [--verifier-concurrency N] [--quiet]

``--agent`` (``oracle``, ``scripted:NAME``, ``command:PATH`` or a registered name)
replaces the manifest agents' adapters seat by seat: given once it seats every
agent, given N times (N = number of seats) one per seat in manifest territory
order. Without ``--agent`` each manifest agent's own ``adapter`` is resolved,
with upstream's ``--adapter NAME=PATH`` registrations, so an upstream arena
package runs unchanged.

Progress is printed as plain lines (log friendly): one line per notable event
and a compact milestone matrix whenever a milestone or competitor state changes.
Ctrl-C (SIGINT), SIGTERM or SIGHUP (the terminal closed; the lines then go to
``/dev/null``) aborts gracefully: the log records the abort, ``world.json`` is written
(``match_state`` aborted) and territories are torn down; a second signal cancels harder
(teardown still runs).

``--provider`` is any registered provider (:mod:`aoe_tui.runtime.registry`: ``container``,
``qemu``, ``ssh``, ``nixos`` and those of ``AOE_PLUGINS`` modules).

Exit codes: 0 the match finished (also without a durable deployment); ``128 + signal``
aborted by the operator (130 SIGINT, 143 SIGTERM, 129 SIGHUP, as ``aoe run``); 1 aborted
by an infrastructure failure or an error.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
from pathlib import Path
from typing import Any

from aoe_tui.commands.season import add_priority_arg
from aoe_tui.domain.display import RepeatedFailures, fmt_clock, printable, summarize_event
from aoe_tui.errors import AoeError, UsageError
from aoe_tui.signals import say_line

__all__ = ["register", "ProgressPrinter", "build_adapters", "make_provider", "matrix_lines"]


def register(sub: argparse._SubParsersAction) -> None:
    """Register ``aoe match run``."""
    p = sub.add_parser("match", help="run one heat (match) for real")
    msub = p.add_subparsers(dest="match_command", metavar="SUBCOMMAND")
    msub.required = True
    r = msub.add_parser("run", help="provision territories, run agents and the referee, write the match folder")
    r.add_argument("manifest", metavar="MANIFEST", help="arena manifest (arena.toml) or arena package folder")
    from aoe_tui.runtime.registry import DEFAULT_PROVIDER, providers

    kinds = providers()
    r.add_argument("--provider", default=DEFAULT_PROVIDER, choices=[e.name for e in kinds],
                   help="territory provider: " + "; ".join(f"{e.name} = {e.help}" if e.help else e.name for e in kinds)
                   + f" (default: {DEFAULT_PROVIDER})")
    r.add_argument("--output", "-o", required=True, metavar="DIR", help="match folder to write")
    r.add_argument("--agent", action="append", default=[], metavar="SPEC",
                   help="oracle | scripted:NAME | command:PATH | a registered name; once = every seat, N times = one per seat")
    r.add_argument("--adapter", action="append", default=[], metavar="NAME=PATH",
                   help="register an external adapter (upstream contract, spec §5)")
    r.add_argument("--credential", action="append", default=[], metavar="TERRITORY=PATH",
                   help="upstream credential file for a territory (KEY=VALUE, AOE_SSH_PASSWORD)")
    r.add_argument("--inventory", metavar="FILE", help="host inventory TOML (--provider ssh)")
    r.add_argument("--drain-seconds", type=float, default=30.0, metavar="N",
                   help="post-match drain window in seconds (default 30, as upstream)")
    r.add_argument("--duration-seconds", type=int, default=None, metavar="N",
                   help="end the heat after N seconds instead of the manifest's rules.duration_seconds "
                        "(a short race while writing an arena; a season's [arena_overrides] does the same)")
    r.add_argument("--verifier-concurrency", type=int, default=4, metavar="N",
                   help="verifier processes at once across all territories (default 4)")
    r.add_argument("--quiet", "-q", action="store_true", help="print only the final result")
    add_priority_arg(r)
    r.set_defaults(func=_cmd_run)


def _pairs(values: list[str], flag: str) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for text in values:
        key, sep, path = text.partition("=")
        if not sep or not key.strip() or not path.strip():
            raise UsageError(f"{flag} expects NAME=PATH, got {text!r}")
        out[key.strip()] = Path(path.strip())
    return out


def build_adapters(loaded: Any, agent_specs: list[str], registered: dict[str, Path]) -> dict[str, Any]:
    """Agent id → adapter for every manifest agent (see the module docstring for the rules).

    Raises:
        UsageError: ``--agent`` given a number of times that is neither 1 nor the seat count.
        aoe_tui.agents.registry.UnknownAdapterError: an unknown or missing adapter.
    """
    from aoe_tui.agents.registry import resolve_adapter

    m = loaded.manifest
    seats = [m.agent_for(t.id) for t in m.territories]
    if not agent_specs:
        adapters = {a.id: resolve_adapter(a.adapter, registered, arena_dir=loaded.arena_dir) for a in m.agents}
    else:
        if len(agent_specs) == 1:
            specs = agent_specs * len(seats)
        elif len(agent_specs) == len(seats):
            specs = agent_specs
        else:
            raise UsageError(f"--agent given {len(agent_specs)} times; give it once or once per seat ({len(seats)})")
        adapters = {agent.id: resolve_adapter(spec, registered, arena_dir=loaded.arena_dir)
                    for agent, spec in zip(seats, specs)}
    for adapter in adapters.values():
        adapter.preflight()
    return adapters


def make_provider(kind: str, loaded: Any, output_dir: Path, inventory: str | None) -> Any:
    """The territory provider for ``--provider`` with its workdir ``output_dir/territories``
    (:func:`aoe_tui.runtime.registry.build_provider`; the arena's image must be built).

    Raises:
        UsageError: unknown provider, or a flag it needs is missing (``ssh``: ``--inventory``).
    """
    from aoe_tui.runtime.registry import build_provider

    return build_provider(kind, {"inventory": inventory}, output_dir / "territories", loaded, cli=True,
                          build_image=False)


# ---------------------------------------------------------------------------- live view


def matrix_lines(world: Any, milestone_ids: list[str], territory_ids: list[str]) -> list[str]:
    """A compact milestone matrix (cf. spec §8.2): one row per territory.

    Cell marks: ``+`` passed, ``~`` evaluating, ``x`` last attempt failed, ``.`` not evaluated,
    ``-`` killed at the finish (still evaluating when the match finished or aborted).
    Row: territory, one cell per milestone, points, competitor state, agent state.
    """
    width = max([len(t) for t in territory_ids] + [9])
    cols = [max(len(m), 1) for m in milestone_ids]
    lines = ["  " + "territory".ljust(width) + "  " + "  ".join(m.ljust(c) for m, c in zip(milestone_ids, cols)) + "  pts  state"]
    ended = world.match_state.value in ("finished", "aborted")
    for tid in territory_ids:
        view = world.territories.get(tid)
        cells = []
        for mid in milestone_ids:
            mv = view.milestones.get(mid) if view else None
            mark = ("." if mv is None else "+" if mv.passed else ("-" if ended else "~") if mv.evaluating
                    else "x" if mv.failure_detail else ".")
            cells.append(mark.ljust(cols[len(cells)]))
        state = str(view.competitor_state.value if view and view.competitor_state else "-")
        agent = world.agents.get(view.agent) if view and view.agent else None
        astate = ""
        if agent is not None:
            astate = "agent running" if agent.running else f"agent {agent.terminal_state.value if agent.terminal_state else 'stopped'}"
        pts = view.milestone_points if view else 0
        lines.append("  " + tid.ljust(width) + "  " + "  ".join(cells) + f"  {pts:>3}  {state:<11} {astate}")
    return lines


class ProgressPrinter:
    """``on_event`` callback printing plain progress lines (and the matrix on changes)."""

    def __init__(self, loaded: Any, stream=None) -> None:
        m = loaded.manifest
        self.milestones = [x.id for x in m.build.milestones] if m.build else []
        self.territories = [t.id for t in m.territories]
        self.stream = stream or sys.stdout
        self._failures = RepeatedFailures()

    def _p(self, text: str) -> None:
        if self.stream is sys.stdout:
            say_line(printable(text))  # a closed terminal never fails the heat
        else:
            print(printable(text), file=self.stream, flush=True)

    def __call__(self, rec: Any, world: Any) -> None:
        e = rec.event
        k = e.kind
        if k == "milestone_passed":
            self._failures.passed(e.territory, e.milestone)
        line = summarize_event(e, "match", elapsed_ms=rec.elapsed_ms, world=world)
        if line is not None and self._failures.fresh(line):
            self._p(f"[{fmt_clock(rec.elapsed_ms, 'mm:ss.d')}] {line.text}")
        matrix = k in ("milestone_passed", "infrastructure_failure", "post_match_drain_finished")
        if matrix:
            for line in matrix_lines(world, self.milestones, self.territories):
                self._p(line)


# ---------------------------------------------------------------------------- command


def _with_duration(loaded: Any, seconds: int) -> Any:
    """``loaded`` with ``rules.duration_seconds`` = ``seconds`` (``--duration-seconds``; as a
    season's ``[arena_overrides]``: a verifier still running at the timer is ended with the heat).

    Raises:
        UsageError: ``seconds`` is not positive.
    """
    from aoe_tui.domain.arena import LoadedManifest

    m = loaded.manifest
    if seconds < 1:
        raise UsageError(f"--duration-seconds {seconds}: must be a positive number of seconds")
    rules = m.rules.model_copy(update={"duration_seconds": seconds})
    return LoadedManifest(manifest=m.model_copy(update={"rules": rules}), path=loaded.path,
                          arena_dir=loaded.arena_dir, raw=loaded.raw, path_text=loaded.path_text)


def _cmd_run(args: argparse.Namespace) -> int:
    from aoe_tui.domain.arena import load_manifest, resolve_manifest_path
    from aoe_tui.referee.heat import bundle_path, check_output_dir

    started = time.monotonic()
    loaded = load_manifest(resolve_manifest_path(args.manifest))
    if not loaded.manifest.is_build_race or loaded.manifest.build is None:
        raise AoeError(f"{loaded.path}: arena mode is not build_race; only build races can be run")
    if args.duration_seconds is not None:
        loaded = _with_duration(loaded, args.duration_seconds)
    output = Path(args.output)
    check_output_dir(output)
    registered = _pairs(args.adapter, "--adapter")
    credentials = _pairs(args.credential, "--credential")
    if args.drain_seconds < 0:
        raise UsageError("--drain-seconds must be >= 0")
    adapters = build_adapters(loaded, args.agent, registered)
    from aoe_tui.agents.base import preflight_entrants

    agents = {a.id: a for a in loaded.manifest.agents}  # each model answers one request before provisioning
    asyncio.run(preflight_entrants([(f"agent {aid}", ad, agents[aid].model) for aid, ad in adapters.items()]))
    from aoe_tui.commands.image import prepare_provider_images

    prepare_provider_images(args.provider, [loaded.arena_dir])
    provider = make_provider(args.provider, loaded, output, args.inventory)
    quiet = args.quiet
    printer = None if quiet else ProgressPrinter(loaded)

    def phase(msg: str) -> None:
        if not quiet:
            say_line(printable(f"[aoe] {msg}"))

    stop_signal: list[int] = []  # the first stop signal: the exit code is 128 + its number, as `aoe run`'s
    try:
        world = asyncio.run(_run(loaded, provider, adapters, output, args, registered, credentials, printer, phase,
                                 stop_signal))
    except asyncio.CancelledError:
        say_line("aoe: interrupted (forced); territories were torn down", stderr=True)
        return 128 + (stop_signal[0] if stop_signal else signal.SIGINT)
    wall = time.monotonic() - started
    say_line(printable(f"match {world.match_state.value}: winner={world.winner or 'none'} "
                       f"({world.finish_reason or '-'}); clock {fmt_clock(world.elapsed_ms, 'mm:ss.d')}, "
                       f"wall {wall:.1f} s; folder {output}"))
    bundle = bundle_path(output)
    if bundle.exists() and not quiet:
        say_line(f"bundle {bundle}")
    if world.match_state.value == "finished":
        return 0
    if world.finish_reason == "operator interrupt":
        return 128 + (stop_signal[0] if stop_signal else signal.SIGINT)
    say_line(printable(f"aoe: error: match aborted: {world.finish_reason}"), stderr=True)
    return 1


async def _run(loaded, provider, adapters, output, args, registered, credentials, printer, phase, stop_signal):
    from aoe_tui.referee.heat import run_heat
    from aoe_tui.runtime.realtime import engine_priority

    loop = asyncio.get_running_loop()
    abort = asyncio.Event()
    task = asyncio.current_task()
    hits = {"n": 0}

    def on_signal(signame: str) -> None:
        if signame == "SIGHUP":  # the terminal is gone: printing to it must not fail the abort
            from aoe_tui.signals import release_terminal

            release_terminal()
        hits["n"] += 1
        if hits["n"] == 1:
            stop_signal.append(signal.Signals[signame])
            phase(f"{signame}: aborting the match (again to force)")
            abort.set()
        elif task is not None:
            task.cancel()

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(sig, on_signal, sig.name)
    try:
        with engine_priority(args.engine_priority) as note:
            phase(note)
            return await run_heat(
                loaded,
                provider,
                adapters,
                output,
                drain_seconds=args.drain_seconds,
                on_event=printer,
                registered_adapters=registered,
                credentials=credentials,
                verifier_concurrency=args.verifier_concurrency,
                abort_event=abort,
                on_phase=phase,
            )
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            loop.remove_signal_handler(sig)
