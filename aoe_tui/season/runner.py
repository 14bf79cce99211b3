"""The season runner: rounds of heats on real territories, attempts, resume, standings.

Season folder layout::

    season.toml                       exact copy of the season file (resume checks it)
    season.jsonl                      the season log (:mod:`aoe_tui.domain.season_events`)
    season-rules.json                 digests of what decides results (:mod:`.rules_record`; resume checks them)
    round-R/heat-H/attempt-A/         one complete upstream-format match folder per attempt
    round-R/heat-H/attempt-A.interrupted-K/   a half-run attempt a stopped or killed runner left
    standings.{json,csv,md,html}      exports, rewritten after every heat
    .aoe-run.lock                     one runner per folder (:func:`hold_season_folder`: an
                                      flock; the file stays after the run, harmless)

(``docs/formats.md``, "Ours: the season folder", lists them all with ``aoe-run.log``.)

Heats: each heat's manifest is the arena manifest with ``[[agents]]`` rewritten — agent id
= entrant id, territory = its seat — and the territories of empty seats removed (so the
heat has fewer territories). ``[arena_overrides]`` of the season file replace
``rules.duration_seconds`` / ``rules.minimum_territories``. A heat needs at least
``min_heat_size`` entrants = the override, else ``max(2, rules.minimum_territories)``
(first-build demands 3: then 7 entrants race 3+3 with one bye per round; with
``minimum_territories = 2`` they race 3+2+2).

Resume (same command again, after ``kill -9`` at any moment): the season file must be
byte-identical to ``season.toml`` (a refusal names the fields that differ), and the arena
package files and adapters the season's results depend on must have the digests
``season-rules.json`` recorded (a refusal, :class:`~aoe_tui.season.rules_record.RulesChanged`,
names each changed file; ``accept_changed_rules`` goes on and records it); leftover territories of every attempt folder are torn
down (``cleanup_stale`` of the container and QEMU providers on ``territories/``); every
attempt the log shows as started but not finished is renamed ``attempt-A.interrupted-K``
(first free K) and re-run with the same number; finished heats are kept; a round is
scheduled in one ``round_scheduled`` line, so nobody is ever scheduled twice.

Void heats (``retry_void``, ``aoe run --retry-void``): heats in which the infrastructure
spoiled every attempt are opened again in one ``heats_reopened`` line and each gets up to
``max_attempts`` new attempts, numbered on from its last; the season file may differ from
``season.toml`` in ``max_attempts`` only (``season.toml`` is then replaced). A format whose
draws depend on ranks (knockout) re-runs only void heats of its last round. Such a format
decides nothing from a void heat (:meth:`aoe_tui.season.formats.Format.waiting_on`): when a
round ends with one, the runner closes no round and draws nothing; it logs ``season_stopped``
(reason ``void_heat``, naming the heat), writes the standings (which say ``waiting on heat
rRhH (void)``) and raises :class:`SeasonWaiting` (exit 75); ``--retry-void`` later re-runs
the heat and the bracket goes on.

Full disks: before each attempt the runner checks the season folder's file system
(``statvfs``) for ``min_free_bytes`` (default :data:`HEAT_DISK_NEED_BYTES`, 64 MiB, or
``AOE_MIN_FREE_MIB``); when short it stops the season (:class:`DiskFullStop`, a
``season_stopped`` line) naming the folder, the free and the needed space, before
provisioning. A disk that fills while a heat runs ends that attempt
(:class:`aoe_tui.referee.heat.DiskFullError`: an ``infrastructure_failure`` in its log, its
territories torn down) and stops the season the same way (so does an attempt spoiled some
other way while under 1 MiB is free: a provider that could not write); the attempt gets no
``attempt_finished`` (it does not count against ``max_attempts``; other running heats are
stopped too), so the next ``aoe run`` marks it interrupted and re-runs it with the same
number. A torn last line of ``season.jsonl`` cut on resume is kept beside it
(``season.jsonl.torn-<offset>``) and its offset is said and logged in ``season_resumed``.

Cluster (``aoe run --cluster ADDRESS`` or ``[cluster]``): every attempt runs on a worker
node of a Ray cluster (:class:`aoe_tui.cluster.remote.ClusterHeats`) instead of
:func:`aoe_tui.referee.heat.run_heat` here; the runner still writes the whole season folder
(the attempt's headers, its ``events.jsonl`` as the events stream in, the artifacts at the
end) and logs where the attempt ran (``attempt_placed``). A node lost mid-heat spoils the
attempt (source ``provider``, the node named) under the same retry rule. On resume, it waits
for the killed runner's heat actors to end (Ray ends them with their owner) and sweeps every
node's leftovers; their attempts are re-run as above (never re-attached).

Prices (``[prices]``): a priced entrant's adapter is given the model's rates
(:attr:`aoe_tui.agents.base.Adapter.price`, µUSD per million tokens); cache tokens and who
computed the cost come from each attempt's ``aoe-extra.json`` (``agents[id].usage``). When
the credential proxy's token counts and the adapter's events disagree, one line per heat
says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import os
import re
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aoe_tui.domain import season_events as se
from aoe_tui.domain.arena import AgentDef, LoadedManifest, load_manifest
from aoe_tui.domain.display import RepeatedFailures, fmt_clock, summarize_event
from aoe_tui.domain.season_file import LoadedSeason, load_season
from aoe_tui.domain.spend import SpendLedger
from aoe_tui.errors import AoeError
from aoe_tui.fsio import fmt_bytes, free_bytes, is_no_space, write_atomic
from aoe_tui.replay.season_log import SeasonLogWriter
from aoe_tui.replay.season_reducer import HeatState, RoundState, SeasonState, apply_season_record, reduce_season
from aoe_tui.runtime.procs import ForkedCallError, call_forked_idle
from aoe_tui.season.attempts import adapter_failures, attempt_stats, judge_attempt, usage_mismatches
from aoe_tui.season.formats import Format, HeatResult, make_format
from aoe_tui.season.observer import SeasonObserver
from aoe_tui.season.season_standings import season_standings

__all__ = ["HEAT_DISK_NEED_BYTES", "MIN_FREE_ENV", "SeasonRunner", "SeasonMismatchError", "SeasonWaiting", "DiskFullStop",
           "ExportFailed",
           "heat_manifest", "season_results"]

Say = Callable[[str], None]


class ExportFailed(AoeError):
    """An export other than the standings files failed (e.g. the cup site of ``aoe run
    --site``); its message is the whole progress line the runner prints."""


def _export_failure_line(err: BaseException | str) -> str:
    """The progress line of a failed export (``err``: the error, or a forked child's
    ``Type: message`` line)."""
    text = err if isinstance(err, str) else f"{type(err).__name__}: {err}"
    prefix = f"{ExportFailed.__name__}: "
    return text[len(prefix):] if text.startswith(prefix) else f"standings files not written: {text}"


class SeasonMismatchError(AoeError):
    """The output folder holds another season (its ``season.toml`` differs); ``fields``
    lists the fields that differ (dotted paths)."""

    def __init__(self, message: str, fields: list[str] | None = None) -> None:
        super().__init__(message)
        self.fields = list(fields or [])


class DiskFullStop(AoeError):
    """The season stopped before its end, resumably (a full disk); the message says why
    and how to resume. Exit status 75 (``EX_TEMPFAIL``: run the same command again)."""

    exit_code = 75


class SeasonWaiting(AoeError):
    """The season waits on void heats its format decides nothing without (a knockout's
    round whose heat did not race: :meth:`aoe_tui.season.formats.Format.waiting_on`); the
    message names them and says ``aoe run SEASON_FILE --retry-void`` re-runs them. Exit
    status 75 (``EX_TEMPFAIL``: resumable); ``heats``: their ``(round, heat)``."""

    exit_code = 75

    def __init__(self, message: str, heats: list[tuple[int, int]]) -> None:
        super().__init__(message)
        self.heats = heats


#: Free space a heat needs on the season folder's file system before it starts (bytes):
#: a heat writes its logs, evidence, adapter transcripts, consoles and its territories'
#: overlay upper layers there (tens of MiB for the built-in builders).
HEAT_DISK_NEED_BYTES = 64 << 20
#: environment override of :data:`HEAT_DISK_NEED_BYTES`, in MiB
MIN_FREE_ENV = "AOE_MIN_FREE_MIB"


def heat_disk_need() -> int:
    """Bytes a heat needs free before it starts: ``AOE_MIN_FREE_MIB`` (MiB) or
    :data:`HEAT_DISK_NEED_BYTES`. Raises :class:`AoeError` for a value that is not a
    whole number of MiB >= 0."""
    text = os.environ.get(MIN_FREE_ENV)
    if text is None or not text.strip():
        return HEAT_DISK_NEED_BYTES
    try:
        mib = int(text)
    except ValueError:
        mib = -1
    if mib < 0:
        raise AoeError(f"{MIN_FREE_ENV} must be a whole number of MiB >= 0, got {text!r}")
    return mib << 20


#: Territories that may boot at once across the season's concurrent heats (a heat of more
#: boots alone). Booting is a CPU burst (systemd, journald, sshd, nspawn, the runner's SSH
#: logins); twelve at once make every heat's clock start late and its race share the CPU
#: with the rest's boots. One heat at a time: the first heats race while the others boot.
BOOT_SLOTS = 3
#: environment override of :data:`BOOT_SLOTS` (a whole number; 0 = no limit)
BOOT_SLOTS_ENV = "AOE_BOOT_SLOTS"
#: environment switch of the territories' CPU weights by phase with concurrent heats (see
#: :func:`cpu_weights_on` for the values; :func:`aoe_tui.referee.heat.run_heat` ``cpu_weights``).
#: On by default since issue 26: the weighted groups are the territories' own CPU limit groups,
#: siblings under ``aoe-territories``, so a booting territory yields only to racing
#: territories, never to the host's other work (docs/territories.md, "Fair shares between heats")
CPU_WEIGHTS_ENV = "AOE_CPU_WEIGHTS"
#: values of :data:`CPU_WEIGHTS_ENV` (compared case-insensitively, spaces stripped)
CPU_WEIGHTS_ON = ("1", "true", "yes", "on")
CPU_WEIGHTS_OFF = ("0", "false", "no", "off")


def boot_slots() -> int:
    """Territories allowed to boot at once: ``AOE_BOOT_SLOTS`` or :data:`BOOT_SLOTS` (0 = no
    limit). Raises :class:`AoeError` for a value that is not a whole number >= 0."""
    text = os.environ.get(BOOT_SLOTS_ENV)
    if text is None or not text.strip():
        return BOOT_SLOTS
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise AoeError(f"{BOOT_SLOTS_ENV} must be a whole number >= 0, got {text!r}")
    return n


def cpu_weights_on() -> bool:
    """Whether the territories' CPU is weighed by phase: unset or empty (the default) and
    :data:`CPU_WEIGHTS_ON` (1/true/yes/on, any case) are on; :data:`CPU_WEIGHTS_OFF`
    (0/false/no/off) is off. Raises :class:`AoeError` (one line naming the variable and the
    value) for anything else, so a typo is not silently taken either way."""
    text = os.environ.get(CPU_WEIGHTS_ENV)
    if text is None or not text.strip():
        return True
    value = text.strip().lower()
    if value in CPU_WEIGHTS_ON:
        return True
    if value in CPU_WEIGHTS_OFF:
        return False
    raise AoeError(f"{CPU_WEIGHTS_ENV} must be one of 1/true/yes/on or 0/false/no/off (or empty), got {text!r}")


def cpu_weights_note(concurrent_heats: int, provider_kind: str, cluster: bool = False) -> str | None:
    """The one line ``aoe run`` says when ``AOE_CPU_WEIGHTS`` is on but can have no effect
    on this run, naming the variable and why (the first reason that applies): heats one at
    a time (``concurrent_heats`` 1), heats on a Ray cluster (``cluster``), or what the
    provider's registry entry says
    (:meth:`~aoe_tui.runtime.registry.ProviderEntry.cpu_weight_problem`: ``qemu`` never
    weighs; ``container`` only on cgroup v1 with a ``cpu`` hierarchy). None when the switch
    is off, not set (on by default: nothing to say) or takes effect (a plugin provider without the hook is trusted: ``run_heat``
    weighs where it has ``set_cpu_weight``). Raises :class:`AoeError` for a bad value
    (:func:`cpu_weights_on`), :class:`UsageError` for an unknown ``provider_kind``."""
    if not cpu_weights_on() or not (os.environ.get(CPU_WEIGHTS_ENV) or "").strip():
        return None  # off, or on by default: only an explicit switch that does nothing is worth a line
    why: str | None = None
    if concurrent_heats <= 1:
        why = "heats run one at a time (concurrent_heats = 1); the weights are for heats at once"
    elif cluster:
        why = "heats run on the Ray cluster's nodes, which do not weigh CPU"
    else:
        from aoe_tui.runtime.registry import get_provider

        why = get_provider(provider_kind).cpu_weight_problem()
    if why is None:
        return None
    return f"warning: {CPU_WEIGHTS_ENV}={os.environ.get(CPU_WEIGHTS_ENV, '').strip()} has no effect: {why}"


def heat_vcpus(arena: LoadedManifest) -> int:
    """The vCPUs of one heat of ``arena``: its territories' classes' ``vcpus`` (§1.7), summed."""
    classes = {c.id: c.resources.vcpus for c in arena.manifest.classes}
    return sum(classes.get(t.class_, 1) for t in arena.manifest.territories)


def oversubscription_note(concurrent_heats: int, heat_vcpus: int, host_cpus: int) -> str | None:
    """The one line ``aoe run`` says when ``concurrent_heats`` heats of ``heat_vcpus`` vCPUs
    each (the seats' classes, §1.7) outnumber this host's ``host_cpus`` CPUs, e.g. ``note:
    concurrent_heats 4 x 3 vCPUs a heat = 12 vCPUs on 2 host CPUs: ...``; None when they fit
    or heats run one at a time (a heat's own seats sharing CPUs is the provider's note)."""
    total = concurrent_heats * heat_vcpus
    if concurrent_heats <= 1 or host_cpus <= 0 or total <= host_cpus:
        return None
    return (f"note: concurrent_heats {concurrent_heats} x {heat_vcpus} vCPUs a heat = {total} vCPUs of territories "
            f"on {host_cpus} host CPUs: when more seats are busy than there are CPUs each gets less than its class, "
            f"and a seat that keeps its vCPUs busy yields to the others (docs/territories.md, "
            f"\"Fair shares between heats\")")


def check_heat_env() -> None:
    """Check the environment settings of heats on this machine (``AOE_BOOT_SLOTS``,
    ``AOE_CPU_WEIGHTS``, ``AOE_MIN_FREE_MIB``) whatever the season's ``concurrent_heats``, so
    a typo is reported on the first run, not on the day concurrency is raised. Called by
    ``aoe run`` before the season folder is created or an image prepared, and by
    :class:`SeasonRunner`. Raises :class:`AoeError` (one line) for a bad value."""
    boot_slots()
    cpu_weights_on()
    heat_disk_need()


class BootGate:
    """Admission of booting territories across heats: :meth:`admit` ``(n)`` waits until ``n``
    more fit under ``slots`` (or none boot: a heat larger than ``slots`` boots alone), in
    arrival order; ``slots`` 0 = no limit. ``booting`` is how many boot now, ``most`` the
    highest it reached (tests, benchmarks). One event loop; not thread-safe."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self.booting = 0
        self.most = 0
        self._queue: list[tuple[int, asyncio.Future[None]]] = []

    def _fits(self, n: int) -> bool:
        return self.slots == 0 or self.booting == 0 or self.booting + n <= self.slots

    def _wake(self) -> None:
        while self._queue and self._fits(self._queue[0][0]):
            n, fut = self._queue.pop(0)
            if not fut.done():
                self.booting += n
                fut.set_result(None)

    @contextlib.asynccontextmanager
    async def admit(self, n: int):
        if self._queue or not self._fits(n):
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._queue.append((n, fut))
            try:
                await fut
            except BaseException:
                if fut.done() and not fut.cancelled():  # admitted as it was cancelled: give the slots back
                    self.booting -= n
                    self._wake()
                else:  # those it held back (arrival order) may fit now
                    self._queue[:] = [q for q in self._queue if q[1] is not fut]
                    self._wake()
                raise
        else:
            self.booting += n
        self.most = max(self.most, self.booting)
        try:
            yield
        finally:
            self.booting -= n
            self._wake()


#: Season-file fields ``--retry-void`` lets differ from the folder's ``season.toml``.
RETRY_VOID_FIELDS = frozenset({"max_attempts"})


def attempt_folder(r: int, h: int, a: int) -> str:
    """``round-R/heat-H/attempt-A`` (relative to the season folder)."""
    return f"round-{r}/heat-{h}/attempt-{a}"


def season_results(state: SeasonState) -> list[HeatResult]:
    """The format inputs: one :class:`HeatResult` per finished heat."""
    out = []
    for h in state.finished_heats():
        res = h.result
        assert res is not None
        out.append(HeatResult(h.round, h.heat, h.seats, dict(res.ranks), res.void))
    return out


def heat_manifest(loaded: LoadedManifest, seats: tuple[str | None, ...], entrants: dict[str, Any],
                  overrides: Any = None) -> LoadedManifest:
    """The arena manifest for one heat: ``[[agents]]`` = the seated entrants (agent id =
    entrant id, territory = seat), territories of empty seats removed, overrides applied.

    ``entrants`` maps id → :class:`aoe_tui.domain.season_file.Entrant`.
    """
    m = loaded.manifest
    terrs, agents = [], []
    for i, e in enumerate(seats):
        if e is None:
            continue
        t = m.territories[i]
        ent = entrants[e]
        terrs.append(t)
        agents.append(AgentDef(id=e, territory=t.id, adapter=ent.adapter, model=ent.model,
                               reasoning_effort=ent.reasoning_effort, budget=ent.budget))
    rules = m.rules
    upd: dict[str, Any] = {}
    if overrides is not None and overrides.duration_seconds is not None:
        upd["duration_seconds"] = overrides.duration_seconds
    if overrides is not None and overrides.minimum_territories is not None:
        upd["minimum_territories"] = overrides.minimum_territories
    if upd:
        rules = rules.model_copy(update=upd)
    new = m.model_copy(update={"territories": terrs, "agents": agents, "rules": rules})
    return LoadedManifest(manifest=new, path=loaded.path, arena_dir=loaded.arena_dir, raw=loaded.raw,
                          path_text=loaded.path_text)


def _default_provider_factory(kind: str, cfg: Any) -> Callable[[Path, str, LoadedManifest], Any]:
    """The season's ``[provider]`` (``kind``, options ``cfg``) from the provider registry."""
    from aoe_tui.runtime.registry import season_provider_factory

    return season_provider_factory(cfg)


def _takes_arena(factory: Callable[..., Any]) -> bool:
    """True when a provider factory accepts a third argument (the heat's arena)."""
    import inspect

    try:
        params = list(inspect.signature(factory).parameters.values())
    except (TypeError, ValueError):
        return False
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return True
    return len([p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]) >= 3


def load_season_file(path: Path | str) -> LoadedSeason:
    """:func:`aoe_tui.domain.season_file.load_season` with the ``[provider]`` and ``[format]``
    kinds installed (the provider registry and the formats), so both tables are checked
    against what is registered, with their lines (see the season file's "Kinds").

    Raises:
        SeasonFileError: as ``load_season``.
    """
    import aoe_tui.runtime.registry  # noqa: F401 - installs the [provider] kinds

    return load_season(path)


def load_season_arenas(loaded: LoadedSeason) -> tuple[list[LoadedManifest], list[int]]:
    """The arenas of a season and the round cycle: ``(arenas, cycle)`` where round ``r``
    races ``arenas[cycle[(r - 1) % len(cycle)]]``.

    ``arena`` / ``arenas``: each listed manifest once, in order. ``suite``: the suite's
    arenas (§1.13, checked as upstream does), each repeated for its ``rounds``.

    Raises:
        AoeError: a manifest or suite that is missing or invalid (names the season file's
            field), an arena that is not a build race, two arenas with one id.
    """
    season = loaded.season
    arenas: list[LoadedManifest] = []
    cycle: list[int] = []
    if loaded.suite_path is not None:
        from aoe_tui.domain.suite import load_suite

        if not loaded.suite_path.is_file():
            raise AoeError(f"{loaded.path}: suite: suite file not found at {loaded.suite_path} "
                           "(a relative path is resolved from the season file's folder)")
        try:
            suite = load_suite(loaded.suite_path)
        except AoeError as err:
            raise AoeError(f"{loaded.path}: suite: {err}") from None
        for i, lm in enumerate(suite.arenas):
            arenas.append(lm)
            cycle += [i] * suite.rounds_for(i)
        return arenas, cycle
    for i, path in enumerate(loaded.arena_paths):
        field = "arena" if season.arena is not None else f"arenas[{i}]"
        if not path.is_file():
            raise AoeError(f"{loaded.path}: {field}: manifest not found at {path} "
                           "(a relative path is resolved from the season file's folder)")
        try:
            lm = load_manifest(path)
        except AoeError as err:
            raise AoeError(f"{loaded.path}: {field}: {err}") from None
        if not lm.manifest.is_build_race:
            raise AoeError(f"{loaded.path}: {field}: {path} is not a build race")
        other = next((j for j, a in enumerate(arenas) if a.manifest.arena.id == lm.manifest.arena.id), None)
        if other is not None:
            raise AoeError(f"{loaded.path}: {field}: arena id {lm.manifest.arena.id!r} is also arenas[{other}]")
        arenas.append(lm)
        cycle.append(i)
    return arenas, cycle


class SeasonBusyError(AoeError):
    """The season folder is being run by another live ``aoe run`` process."""


#: Lock file inside a season folder, held (``flock``) by the one process running it.
LOCK_FILE = ".aoe-run.lock"


@contextlib.contextmanager
def hold_season_folder(season_dir: Path):
    """Hold the season folder exclusively for one runner (an ``flock`` on :data:`LOCK_FILE`).

    Two runners on one folder would both append to ``season.jsonl`` and each would take the
    other's running attempts for a crashed run's leftovers. The lock dies with its process,
    so a runner killed with SIGKILL never blocks the resume. Readers (``aoe watch``,
    ``aoe standings``) do not take it.

    Raises:
        SeasonBusyError: another live process holds the folder (names its pid).
        DiskFullStop: the folder's file system is full (the folder or its lock file cannot
            be written), before anything else is done.
        AoeError: the folder cannot be made or its lock file opened (a file in its place, a
            file in its path, no permission): one line naming the path.
    """
    import fcntl

    def disk_full(err: OSError) -> DiskFullStop:
        on = next((p for p in (season_dir, *season_dir.absolute().parents) if p.exists()), season_dir)
        with contextlib.suppress(OSError):
            return DiskFullStop(f"season stopped, disk full: {season_dir}: {fmt_bytes(free_bytes(on))} free, "
                                "the season folder cannot be written; free space and run the same command again")
        return DiskFullStop(f"season stopped, disk full: {season_dir}: {err.strerror}; free space and run the "
                            "same command again")

    created = not season_dir.exists()
    try:
        season_dir.mkdir(parents=True, exist_ok=True)
        path = season_dir / LOCK_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:
        if is_no_space(err):
            raise disk_full(err) from None
        if season_dir.exists() and not season_dir.is_dir():
            why = "it is a file, not a folder"
        elif isinstance(err, NotADirectoryError):
            why = "a part of the path is a file, not a folder"
        else:
            why = err.strerror or str(err)
        raise AoeError(f"{season_dir}: cannot be the season folder: {why}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            raise SeasonBusyError(
                f"{season_dir}: season folder is in use by another aoe run (pid {holder}); "
                "watch it with: aoe watch " + str(season_dir)
            ) from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError as err:
            if not is_no_space(err):
                raise
            if created:
                with contextlib.suppress(OSError):
                    path.unlink()
                    season_dir.rmdir()
            raise disk_full(err) from None
        try:
            yield
        finally:
            # a run refused before it wrote anything leaves no empty season folder behind
            if created and [p.name for p in season_dir.iterdir()] == [LOCK_FILE]:
                with contextlib.suppress(OSError):
                    path.unlink()
                    season_dir.rmdir()
    finally:
        os.close(fd)


def cleanup_stale_territories(season_dir: Path) -> list[str]:
    """Tear down territories left by a killed runner in every attempt folder (container
    and QEMU providers). Returns ``"<folder>: <territory>"`` strings. Raises
    :class:`aoe_tui.runtime.provider.ProviderError` when a leftover cannot be removed."""
    from aoe_tui.runtime.cleanup import cleanup_under

    return [f"{tdir.parent.relative_to(season_dir)}: {ident}" for tdir, ident in cleanup_under(Path(season_dir))]


def _credential_vars(adapter: Any, entrant: Any) -> frozenset[str]:
    """Names of the environment variables holding ``entrant``'s credentials: its adapter's
    ``credential_names()`` and its ``options.api_key_env``."""
    names: set[str] = set()
    with contextlib.suppress(Exception):
        names.update(n for n in adapter.credential_names() if isinstance(n, str) and n)
    opt = (entrant.options or {}).get("api_key_env")
    if isinstance(opt, str) and opt:
        names.add(opt)
    return frozenset(names)


class SeasonRunner:
    """Runs (or resumes) one season into ``output_dir``.

    Args:
        loaded: the validated season file (:func:`aoe_tui.domain.season_file.load_season`).
        output_dir: the season folder (created; resumed if it holds ``season.jsonl``).
        say: called with one line per state change (headless output).
        provider_factory: ``(workdir, heat_id) -> TerritoryProvider`` (default: the season's
            ``[provider]``); tests wrap it to inject failures.
        adapter_factory: ``(spec) -> Adapter`` (default: :func:`resolve_adapter` with the
            season's ``[adapters]`` registrations).
        run_heat: the heat runner (default :func:`aoe_tui.referee.heat.run_heat`).
        observer: optional :class:`~aoe_tui.season.observer.SeasonObserver` (the TUI); when
            set, ``run_heat`` is also given ``on_supervisor=``.
        write_exports: ``(season_dir, state) -> None``, called after every heat and at the
            end (``aoe run`` passes :func:`aoe_tui.export.write_all`: standings files);
            a failure is one progress line, except a full disk at the season's end, which
            stops the run (:meth:`_export`). ``None``: no exports.
        min_free_bytes: free bytes the season folder's file system needs before each attempt
            (default :func:`heat_disk_need`); 0 = no check.
        accept_changed_rules: a resume goes on although what decides results changed since
            the season started (``aoe run --accept-changed-rules``; recorded in
            ``season-rules.json`` and ``season_resumed``, shown in the standings); without it
            such a resume raises :class:`~aoe_tui.season.rules_record.RulesChanged`.
        cluster: a Ray address (``aoe run --cluster``; overrides the season file's
            ``[cluster] address``): heats run on its worker nodes. ``None``: the season's
            ``[cluster]`` table if any, else this machine.

    :meth:`run` raises :class:`AoeError` for bad input (arena manifest, unknown adapter,
    too few entrants, another season in the folder) before anything runs, and
    :class:`DiskFullStop` when a full disk stops the season (resumable).
    """

    def __init__(self, loaded: LoadedSeason, output_dir: Path, *, say: Say | None = None,
                 provider_factory: Callable[[Path, str], Any] | None = None,
                 adapter_factory: Callable[[str], Any] | None = None,
                 run_heat: Callable[..., Any] | None = None,
                 observer: SeasonObserver | None = None,
                 write_exports: Callable[[Path, SeasonState], None] | None = None,
                 retry_void: bool = False, min_free_bytes: int | None = None,
                 cluster: str | None = None, accept_changed_rules: bool = False) -> None:
        self.write_exports = write_exports
        #: ``aoe run --accept-changed-rules``: a resume goes on with changed rules (recorded)
        self.accept_changed_rules = accept_changed_rules
        #: what changed since the season started and this resume goes on with (lines)
        self._rules_changed: list[str] = []
        self._rules_accepted: list[dict[str, Any]] | None = None
        #: ``"adapter SPEC (ARENA)"`` → the adapter's sha256 (None: it names no file)
        self.adapter_digests: dict[str, str | None] = {}
        self.min_free_bytes = heat_disk_need() if min_free_bytes is None else int(min_free_bytes)
        self._torn_note = ""
        self.retry_void = retry_void
        #: why a cancelled run stopped (``season_stopped.reason``): set by whoever cancels it
        self.stop_reason: str | None = None
        self.loaded = loaded
        self.season = loaded.season
        self.dir = Path(output_dir)
        self.say = say or (lambda _m: None)
        self._notes_said: set[str] = set()  # heats' provider notes said this run (_say_phase)
        #: every arena of the season, in order, and the round cycle (see load_season_arenas)
        self.arenas, self.arena_cycle = load_season_arenas(loaded)
        self.arena = self.arenas[0]
        self.arena_by_id = {a.manifest.arena.id: a for a in self.arenas}
        self.heat_size = min(len(a.manifest.territories) for a in self.arenas)
        ov = self.season.arena_overrides
        self.min_heat = ov.minimum_territories or max(max(2, a.manifest.rules.minimum_territories) for a in self.arenas)
        self.min_heat = min(self.min_heat, self.heat_size)
        if len(self.season.entrants) < self.min_heat:
            raise AoeError(f"{loaded.path}: entrants: {len(self.season.entrants)} entrants but a heat needs "
                           f"{self.min_heat} (arena rules.minimum_territories; see [arena_overrides])")
        try:
            self.format: Format = make_format(self.season.format, self.heat_size, self.min_heat)
        except AoeError as err:
            raise AoeError(f"{loaded.path}: {err}") from None
        self.entrants = {e.id: e for e in self.season.entrants}
        #: model → its rates (µUSD per million tokens), from the season's [prices]
        self.rates = {m: p.rates() for m, p in self.season.prices.items()}
        #: live spend limits (issue 27): each entrant's season ledger, shared by its heats
        budget = self.season.budget
        self.spend = {e.id: SpendLedger() for e in self.season.entrants}
        self.heat_limits = budget.heat_cap(None) if budget is not None else None
        cap = budget.season_cap() if budget is not None else None
        self.season_cap = cap if cap is not None and not cap.is_empty() else None
        #: entrant → names of the environment variables holding its credentials
        self.credential_vars: dict[str, frozenset[str]] = {}
        #: entrants whose withheld credential variables were already said (once per run), and
        #: whether every entrant's adapter was made once (so every entrant's credentials are known)
        self._withheld_said: set[str] = set()
        self._entrants_checked = False
        #: heats whose proxy/events token mismatch was already said (once per heat)
        self._mismatch_said: set[tuple[int, int]] = set()
        base = loaded.path.parent
        self.registered = {k: (Path(v) if Path(v).is_absolute() else base / v) for k, v in self.season.adapters.items()}
        #: True when the factory also takes the entrant's ``options`` (the default one does).
        self._factory_takes_options = adapter_factory is None
        if adapter_factory is None:
            from aoe_tui.agents.registry import resolve_adapter

            def adapter_factory(spec: str, options: Any = None, arena_dir: Path | None = None) -> Any:
                return resolve_adapter(spec, self.registered, options, arena_dir=arena_dir)
        self.adapter_factory = adapter_factory
        for i, e in enumerate(self.season.entrants):  # fail early, one clear line, on every arena
            for arena in self.arenas:
                try:
                    adapter = self._make_adapter(e, arena)
                    self.credential_vars[e.id] = self.credential_vars.get(e.id, frozenset()) | _credential_vars(adapter, e)
                    with contextlib.suppress(Exception):
                        self.adapter_digests[f"adapter {e.adapter} ({arena.manifest.arena.id})"] = adapter.sha256()
                    preflight = getattr(adapter, "preflight", None)
                    if preflight is not None:
                        preflight()
                except AoeError as err:
                    from aoe_tui.domain.tomlfile import Problem
                    from aoe_tui.domain.tomlpos import TomlPositions

                    field = f"entrants[{i}].adapter"
                    line = TomlPositions(loaded.raw.decode("utf-8", "replace")).line_of(field)
                    where = f" (arena {arena.manifest.arena.id})" if len(self.arenas) > 1 else ""
                    raise AoeError(str(Problem(str(loaded.path), line, field + where, str(err)))) from None
        self._entrants_checked = True
        try:
            self.provider_factory = provider_factory or _default_provider_factory(
                self.season.provider.kind, self.season.provider)
        except AoeError as err:
            raise AoeError(f"{loaded.path}: {err}") from None
        self._factory_takes_arena = _takes_arena(self.provider_factory)
        if run_heat is None:
            from aoe_tui.referee.heat import run_heat
        self.run_heat = run_heat
        #: the Ray cluster the heats run on (``--cluster`` or ``[cluster]``), None: this machine
        self.cluster: Any = None
        table = self.season.cluster
        address = cluster or (table.address if table is not None else None)
        if address:
            from aoe_tui.cluster.remote import ClusterHeats

            self.cluster = ClusterHeats(address, **({"agent_memory_gb": table.agent_memory_gb,
                                                     "referee_memory_gb": table.referee_memory_gb}
                                                    if table is not None else {}))
        self._arena_tars: dict[str, tuple[bytes, str, str]] = {}
        #: heat key -> names of the nodes its attempts were lost on (their next attempts avoid them)
        self._lost_on: dict[tuple[int, int], set[str]] = {}
        self._export_lock = asyncio.Lock()
        self._export_waiting = False
        self._exports: set[asyncio.Task] = set()
        #: admission of booting territories across this machine's heats (:class:`BootGate`)
        #: (both settings are read, so checked, whatever ``concurrent_heats`` is)
        slots = boot_slots()
        self.boot_gate = BootGate(slots if self.season.concurrent_heats > 1 else 0)
        #: territories weighted by phase (booting/finished yield to racing), with concurrent heats
        self.cpu_weights = cpu_weights_on() and self.season.concurrent_heats > 1
        self.state = SeasonState()
        self.log: SeasonLogWriter | None = None
        self.abort_event = asyncio.Event()
        self.observer = observer
        #: repeated milestone failures, per attempt tag (printed again only when the detail changes)
        self._failures = RepeatedFailures()

    def _seed_spend(self) -> None:
        """On a resume: each entrant's season ledger (:attr:`spend`) starts at what its recorded
        attempts spent — cost (µUSD) and tokens from every finished attempt's stats, spoiled ones
        included (they were paid for). Requests are not recorded, so they count from the resume."""
        for heat in self.state.heats():
            for att in heat.attempts:
                stats = att.finished.stats if att.finished is not None else {}
                for e, st in (stats or {}).items():
                    if e in self.spend and st is not None:
                        self.spend[e].add(cost_microusd=st.cost_microusd, tokens=st.input_tokens + st.output_tokens)

    def _make_adapter(self, entrant: Any, arena: LoadedManifest | None = None) -> Any:
        """A fresh adapter for ``entrant`` in a heat of ``arena`` (default: the first arena);
        its ``[[entrants]].options`` and the arena package go to the default factory."""
        arena = arena or self.arenas[0]
        if self._factory_takes_options:
            adapter = self.adapter_factory(entrant.adapter, dict(entrant.options or {}), arena.arena_dir)
        else:
            adapter = self.adapter_factory(entrant.adapter)
        rates = self.rates.get(entrant.model)
        if rates is not None:
            with contextlib.suppress(AttributeError, TypeError):
                adapter.price = rates
        own = self.credential_vars.get(entrant.id, frozenset())
        foreign = frozenset().union(*(v for k, v in self.credential_vars.items() if k != entrant.id)) - own
        with contextlib.suppress(AttributeError, TypeError):
            adapter.heat_limits = self.heat_limits
            if self.season_cap is not None:
                adapter.season_spend = (self.spend[entrant.id], self.season_cap)
            adapter.foreign_credentials = foreign
            adapter.own_credentials = own
        if getattr(adapter, "inherits_environment", False) and self._entrants_checked \
                and entrant.id not in self._withheld_said:  # every entrant's names known: say it once
            from aoe_tui.agents.command import withheld_credentials

            self._withheld_said.add(entrant.id)
            undeclared = [n for n in withheld_credentials(adapter) if n not in foreign]
            if undeclared:  # names only, never a value; once per entrant and run
                self.say(f"note: entrant {entrant.id}: its adapter's process does not inherit "
                         f"{', '.join(undeclared)} (credentials it did not declare; declare its key with "
                         f"[entrants.options] api_key_env = \"NAME\")")
        return adapter

    def arena_of_round(self, rnd: int) -> LoadedManifest:
        """The arena round ``rnd`` (1-based) races: the season's arenas in cycle order."""
        return self.arenas[self.arena_cycle[(rnd - 1) % len(self.arena_cycle)]]

    def arena_of(self, heat: HeatState) -> LoadedManifest:
        """The arena a scheduled heat races (by the arena id its round recorded)."""
        return self.arena_by_id.get(heat.arena) or self.arena_of_round(heat.round)

    def arena_packages(self) -> list[Path]:
        """Package folders of every arena of the season (for building their images first)."""
        return [a.arena_dir for a in self.arenas]

    def _observe(self, method: str, *args: Any) -> None:
        if self.observer is None:
            return
        with contextlib.suppress(Exception):
            getattr(self.observer, method)(*args)

    # ------------------------------------------------------------------ log

    def _append(self, event: Any) -> None:
        assert self.log is not None
        rec = self.log.append(event)
        apply_season_record(self.state, rec)
        self._observe("season_record", rec)

    def _open(self) -> bool:
        """Create or resume the season folder; returns True when resuming."""
        self.dir.mkdir(parents=True, exist_ok=True)
        log_path = self.dir / "season.jsonl"
        copy = self.dir / "season.toml"
        resuming = log_path.exists() and log_path.stat().st_size > 0
        self._replace_copy = False
        if resuming:
            old = copy.read_bytes() if copy.is_file() else None
            if old != self.loaded.raw:
                self._check_changes(old)
            self._check_rules()
        else:
            match_files = [n for n in ("events.jsonl", "world.json", "match.json") if (self.dir / n).exists()]
            if match_files:
                raise SeasonMismatchError(f"{self.dir}: is a match folder ({', '.join(match_files)}), not a season "
                                          "folder; choose a new --output folder")
            write_atomic(copy, self.loaded.raw)
            from aoe_tui.season.rules_record import write_rules

            write_rules(self.dir, *self._rules_now())
        self.log = SeasonLogWriter(log_path)
        if self.log.torn is not None:
            off, kept = self.log.torn
            self._torn_note = f"season.jsonl: torn last line cut at byte {off}, its bytes kept in {kept.name}"
            self.say(self._torn_note)
        self.state = reduce_season(self.log.records)
        for rec in self.log.records:  # a live view of a resumed season starts from the top
            self._observe("season_record", rec)
        if self.state.info is None:
            m = self.arena.manifest
            arenas = [se.SeasonArena(id=a.manifest.arena.id, display_name=a.manifest.arena.display_name,
                                     milestones=[x.id for x in (a.manifest.build.milestones if a.manifest.build else [])],
                                     category=a.manifest.arena.category, path=a.path_text)
                      for a in self.arenas]
            self._append(se.SeasonStarted(
                season=self.season.id, label=self.season.label, arena_id=m.arena.id,
                format=self.season.format.model_dump(mode="json"), entrants=list(self.entrants),
                seed=self.season.seed, heat_size=self.heat_size, min_heat_size=self.min_heat,
                max_attempts=self.season.max_attempts, season_sha256=self.loaded.sha256,
                milestones=list(arenas[0].milestones),
                models={e.id: e.model for e in self.season.entrants},
                arenas=arenas,
                cost_limit_microusd=self.season.budget.season_max_cost_microusd if self.season.budget else None,
            ))
        return resuming

    def _check_changes(self, old: bytes | None) -> None:
        """The season file differs from the folder's ``season.toml`` (``old``; None when
        missing): allowed only for ``--retry-void`` and :data:`RETRY_VOID_FIELDS`; else
        :class:`SeasonMismatchError` naming the fields that differ."""
        from aoe_tui.domain.season_file import changed_fields

        if old is None:
            raise SeasonMismatchError(f"{self.dir}: holds a season log but no season.toml; choose a new --output folder")
        try:
            fields = changed_fields(old.decode("utf-8"), self.loaded.raw.decode("utf-8"))
        except UnicodeDecodeError:
            fields = ["(not UTF-8)"]
        if self.retry_void and fields and set(fields) <= RETRY_VOID_FIELDS:
            self._replace_copy = True
            return
        what = (f"fields that differ: {', '.join(fields)}" if fields else "only comments or layout differ")
        if self.retry_void:
            others = [f for f in fields if f not in RETRY_VOID_FIELDS] or ["comments and layout"]
            raise SeasonMismatchError(
                f"{self.dir}: holds another season (season.toml differs from {self.loaded.path}: {what}); "
                f"--retry-void allows a new {', '.join(sorted(RETRY_VOID_FIELDS))} only: put {', '.join(others)} "
                "back as the folder's season.toml has it, or choose a new --output folder", fields)
        hint = ("; to re-run void heats with more attempts: aoe run --retry-void" if set(fields) <= RETRY_VOID_FIELDS
                and fields else "")
        raise SeasonMismatchError(
            f"{self.dir}: holds another season (season.toml differs from {self.loaded.path}: {what}){hint}; "
            "choose a new --output folder", fields)

    def _rules_now(self) -> tuple[dict[str, str], dict[str, str]]:
        """``(digests, paths)`` of what decides the results now
        (:func:`aoe_tui.season.rules_record.rules_of`)."""
        from aoe_tui.season.rules_record import rules_of

        return rules_of([(a.manifest.arena.id, a.arena_dir) for a in self.arenas], self.adapter_digests,
                        self.registered)

    def _check_rules(self) -> None:
        """On a resume, before anything is written: compare what decides the results now with
        the folder's ``season-rules.json``. Changed: :class:`RulesChanged` (one line naming each
        changed file) unless :attr:`accept_changed_rules`, which keeps the change for
        :meth:`_recover` to record. A folder without the record gets one now (said)."""
        from aoe_tui.season.rules_record import RULES_FILE, RulesChanged, changes, load_rules, write_rules

        record = load_rules(self.dir)
        digests, paths = self._rules_now()
        if record is None:
            write_rules(self.dir, digests, paths)
            self.say(f"note: {RULES_FILE} recorded now: this season started without one, so changes to its "
                     "arenas or adapters before this resume cannot be checked")
            return
        changed = changes(record["files"], digests, paths, record["paths"])
        if not changed:
            return
        if not self.accept_changed_rules:
            raise RulesChanged(f"season resume refused: {'; '.join(changed)} since the season started "
                               f"({self.dir / RULES_FILE}); pass --accept-changed-rules to go on", changed)
        self._rules_changed = changed
        before = {k: record["files"].get(k) for k in sorted(set(record["files"]) | set(digests))
                  if record["files"].get(k) != digests.get(k)}
        self._rules_accepted = list(record["accepted"]) + [{"changed": changed, "before": before}]

    def _reopen_void(self) -> None:
        """``--retry-void``: open the void heats again (one ``heats_reopened`` line)."""
        heats = [h for h in self.state.finished_heats() if h.result is not None and h.result.void]
        skipped: list[HeatState] = []
        if heats and self.format.draws_on_ranks:
            last = max(self.state.rounds)
            skipped = [h for h in heats if h.round != last]
            heats = [h for h in heats if h.round == last]
        if skipped:
            self.say("retry-void: not re-running " + ", ".join(f"r{h.round}h{h.heat}" for h in skipped)
                     + f": later rounds of this {self.format.kind} were drawn on their void results")
        if not heats:  # nothing reopened: the folder keeps its season.toml (a plain resume still works)
            self.say("retry-void: no void heats to re-run")
            return
        if self._replace_copy:
            write_atomic(self.dir / "season.toml", self.loaded.raw)
        self._append(se.HeatsReopened(heats=[(h.round, h.heat) for h in heats],
                                      max_attempts=self.season.max_attempts, season_sha256=self.loaded.sha256))
        self.say(f"retry-void: re-running {len(heats)} void heat(s): "
                 + ", ".join(f"r{h.round}h{h.heat}" for h in heats)
                 + f" (up to {self.season.max_attempts} new attempt(s) each)")

    def _recover(self, swept: list[str] | None = None) -> None:
        """Resume bookkeeping: stale territories, interrupted attempts, half-logged heats.
        ``swept``: what the cluster's nodes tore down (:meth:`ClusterHeats.sweep_nodes`, run
        off the event loop by the caller), logged with this machine's leftovers."""
        detail = f"{len(self.state.open_attempts())} attempt(s) interrupted"
        self._append(se.SeasonResumed(pid=os.getpid(), detail=detail + (f"; {self._torn_note}" if self._torn_note else ""),
                                      rules_changed=self._rules_changed))
        if self._rules_accepted is not None:  # --accept-changed-rules: the record says so, then holds the new digests
            from aoe_tui.season.rules_record import write_rules

            self._rules_accepted[-1] = {"resume": self.state.resumes, **self._rules_accepted[-1]}
            write_rules(self.dir, *self._rules_now(), self._rules_accepted)
            self.say(f"rules changed since the season started, going on (--accept-changed-rules): "
                     + "; ".join(self._rules_changed))
        cleaned = cleanup_stale_territories(self.dir)
        cleaned += list(swept or [])  # on the cluster's nodes: the killed runner's heats (Ray ended its actors)
        if cleaned:
            self.say(f"tore down {len(cleaned)} leftover territories: {', '.join(cleaned)}")
            self._append(se.StaleTerritoriesCleaned(folder=str(self.dir), territories=cleaned))
        for heat, att in self.state.open_attempts():
            src = self.dir / att.folder
            k = 1
            while (self.dir / f"{att.folder}.interrupted-{k}").exists():
                k += 1
            dest: str | None = f"{att.folder}.interrupted-{k}"
            if src.exists():
                os.rename(src, self.dir / dest)
            elif k > 1 and f"{att.folder}.interrupted-{k - 1}" not in att.interrupted_as:
                dest = f"{att.folder}.interrupted-{k - 1}"  # renamed before the kill, not yet logged
            else:
                dest = None  # killed after attempt_started, before the attempt's folder was made
            kept = f"kept as {dest}" if dest else "it had no folder yet"
            self.say(f"r{heat.round}h{heat.heat}a{att.attempt}: interrupted attempt ({kept}); re-running it")
            self._append(se.AttemptInterrupted(round=heat.round, heat=heat.heat, attempt=att.attempt, renamed_to=dest))
        for heat in self.state.pending_heats():  # attempt finished, heat_finished not yet logged
            last = heat.attempts[-1] if heat.attempts else None
            if (last and last.status == "finished" and last.finished and last.finished.outcome != "retry"
                    and last.attempt > heat.attempt_base):  # not a heat --retry-void just reopened
                self._finish_heat(heat, last.finished)

    # ------------------------------------------------------------------ heats

    def _finish_heat(self, heat: HeatState, fin: se.AttemptFinished) -> None:
        void = fin.outcome == "void"
        self._append(se.HeatFinished(
            round=heat.round, heat=heat.heat, attempt=None if void else fin.attempt, void=void,
            ranks={e: 1 for e in heat.entrants} if void else dict(fin.ranks), winner=None if void else fin.winner))

    def _check_space(self, heat: HeatState) -> None:
        """Before an attempt: the season folder's file system has :attr:`min_free_bytes`
        free, else stop the season (:class:`_Stop`)."""
        if self.min_free_bytes <= 0:
            return
        try:
            free = free_bytes(self.dir)
        except OSError:
            return
        if free < self.min_free_bytes:
            raise _Stop(f"{self.dir}: {fmt_bytes(free)} free, a heat needs {fmt_bytes(self.min_free_bytes)} "
                        f"({MIN_FREE_ENV} sets it)", heat, None)

    def _low_space(self) -> str | None:
        """``"N KiB free"`` when the season folder's file system has less than a running
        heat keeps in reserve (:data:`aoe_tui.referee.supervisor.DISK_RESERVE_BYTES`), else None."""
        from aoe_tui.referee.supervisor import DISK_RESERVE_BYTES

        try:
            free = free_bytes(self.dir)
        except OSError:
            return None
        return f"{fmt_bytes(free)} free" if free < DISK_RESERVE_BYTES else None

    def _stopped(self, stop: _Stop) -> DiskFullStop:
        """Record a full-disk stop (best effort: the season log may be on the full disk
        too) and return the error to raise."""
        h = stop.heat
        event = se.SeasonStopped(reason="disk_full", pid=os.getpid(), detail=stop.detail,
                                 open_attempts=[f"r{h.round}h{h.heat}a{a.attempt}" for h, a in self.state.open_attempts()],
                                 round=h.round if h else None, heat=h.heat if h else None, attempt=stop.attempt)
        if (self.log is not None and not self.log.closed and self.state.info is not None
                and self.state.finished is None):  # a finished season is not stopped: only its exports wait
            try:
                self._append(event)
            except OSError as err:
                self.say(f"season.jsonl: season_stopped not written: {err.strerror}")
        at = f"r{h.round}h{h.heat}" + (f"a{stop.attempt}" if stop.attempt is not None else "") + ": " if h else ""
        what = ("the attempt does not count: the same command re-runs it" if stop.attempt is not None
                else "nothing was started: run the same command again")
        self.say(f"season stopped (disk full): {at}{stop.detail}; {what} after space is freed")
        again = "to write them" if self.state.finished is not None else "to resume"
        return DiskFullStop(f"season stopped, disk full: {at}{stop.detail}; free space and run the same "
                            f"command again {again} (folder {self.dir})")

    async def _wait_on(self, heats: list[HeatState]) -> SeasonWaiting:
        """The season waits on the void ``heats`` (see :class:`SeasonWaiting`): logs
        ``season_stopped`` (reason ``void_heat``, the first heat's round and heat, the line as
        ``detail``), writes the standings (which name the wait) and returns the error to raise."""
        from aoe_tui.season.season_standings import waiting_label

        names = ", ".join(f"{waiting_label(h)}: {', '.join(h.entrants)}" for h in heats)
        detail = (f"{names}; a {self.format.kind} eliminates and advances nobody by a void heat (the "
                  f"infrastructure spoiled every attempt), so nothing after it is drawn")
        self._append(se.SeasonStopped(reason="void_heat", pid=os.getpid(), detail=detail,
                                      round=heats[0].round, heat=heats[0].heat))
        self.say(f"season {detail}; {self.retry_void_command()} re-runs it")
        await self._exports_done()
        self._export()
        return SeasonWaiting(f"season {detail}; {self.retry_void_command()} re-runs it", [h.key for h in heats])

    def retry_void_command(self) -> str:
        """The command that re-runs this season's void heats, ready to paste: ``aoe run SEASON_FILE
        --output SEASON_DIR --retry-void`` (shell-quoted; the folder is always named, since a
        command without ``--output`` would start a new season in the default folder)."""
        return (f"aoe run {shlex.quote(str(self.loaded.path))} --output {shlex.quote(str(self.dir))} "
                "--retry-void")

    def _name(self, r: int, h: int, a: int) -> tuple[str, str]:
        """The bundle's ``match.name`` and ``match.slug`` of an attempt (a cup across arenas
        names the heat's arena in ``name``)."""
        s = self.season
        on = f" ({self.arena_of_round(r).manifest.arena.id})" if len(self.arenas) > 1 else ""
        return (f"{s.id} · {s.label} · round {r} heat {h}{on} · attempt {a}", f"season-{s.id}-{s.label}-r{r}-h{h}-a{a}")

    async def _run_heat(self, heat: HeatState) -> None:
        while heat.result is None:
            a = heat.next_attempt_number()
            tag = f"r{heat.round}h{heat.heat}a{a}"
            rel = attempt_folder(heat.round, heat.heat, a)
            folder = self.dir / rel
            if folder.exists():  # defensive: never reuse a folder
                k = 1
                while (self.dir / f"{rel}.interrupted-{k}").exists():
                    k += 1
                os.rename(folder, self.dir / f"{rel}.interrupted-{k}")
            self._check_space(heat)
            self._append(se.AttemptStarted(round=heat.round, heat=heat.heat, attempt=a, folder=rel))
            self.say(f"{tag}: started: " + " vs ".join(heat.entrants))
            name, slug = self._name(heat.round, heat.heat, a)
            world, error = None, None
            arena = self.arena_of(heat)
            try:
                loaded = heat_manifest(arena, heat.seats, self.entrants, self.season.arena_overrides)
                adapters = {e: self._make_adapter(self.entrants[e], arena) for e in heat.entrants}
                # before provisioning: each entrant's model and credentials answer one request; a
                # failure spoils the attempt with its source (provider), never the player's
                from aoe_tui.agents.base import preflight_entrants

                await preflight_entrants([(f"entrant {e}", adapters[e], self.entrants[e].model) for e in heat.entrants])
                extra: dict[str, Any] = {}
                if self.observer is not None:
                    from aoe_tui.domain.arena import arena_json

                    with contextlib.suppress(Exception):
                        self.observer.attempt_started(rel, arena_json(loaded.manifest), name)
                    extra["on_supervisor"] = lambda supervisor, r=rel: self._observe("supervisor_ready", r, supervisor)
                if self.cluster is not None:  # on a worker node: same folder, same result
                    world = await self._run_remote(heat, a, tag, rel, folder, arena, loaded, adapters, name, slug)
                else:
                    heat_id = f"{self.season.id}-{tag}-{os.getpid()}"
                    if self._factory_takes_arena:
                        provider = self.provider_factory(folder / "territories", heat_id, arena)
                    else:
                        provider = self.provider_factory(folder / "territories", heat_id)
                    world = await self.run_heat(
                        loaded, provider, adapters, folder, drain_seconds=float(self.season.drain_seconds),
                        provision_gate=self.boot_gate.admit, cpu_weights=self.cpu_weights,
                        registered_adapters=self.registered, name=name, slug=slug,
                        on_phase=lambda msg, t=tag: self._say_phase(t, msg),
                        on_event=lambda rec, w, t=tag, h=heat, r=rel: self._on_event(t, h, rec, r),
                        **extra,
                    )
            except asyncio.CancelledError:
                raise
            except Exception as err:  # recorded as a spoiled attempt, never a traceback
                error = err
            from aoe_tui.referee.heat import DiskFullError
            from aoe_tui.replay.log import read_events

            try:  # off the referee loop: other heats may be racing (tens of ms for a heat's log)
                records = await asyncio.to_thread(read_events, folder / "events.jsonl")
            except AoeError as err:
                records, error = [], error or err
            verdict = judge_attempt(world, records, error)
            if isinstance(error, DiskFullError) or is_no_space(error):
                # the disk spoiled it: no attempt_finished (it does not count); stop resumably
                raise _Stop(str(error) if isinstance(error, DiskFullError) else
                            f"No space left on device: {getattr(error, 'filename', None) or folder}", heat, a) from None
            if verdict.spoiled:  # spoiled some other way (a provider that could not write) on a full disk
                low = self._low_space()
                if low is not None:
                    raise _Stop(f"No space left on device: {self.dir} ({low}; the attempt was spoiled by "
                                f"{verdict.source}: {verdict.detail})", heat, a)
            seat_of = {arena.manifest.territories[i].id: e for i, e in enumerate(heat.seats) if e is not None}
            bundle = f"{rel}/{slug}.match.json"
            bundle = bundle if (self.dir / bundle).exists() else None
            usage_extra = self._usage_extra(folder)
            self._say_mismatch(heat, usage_extra, tag)
            failed_adapters = adapter_failures(world, seat_of)
            if not verdict.spoiled and world is not None:
                ranks, winner, stats = attempt_stats(world, records, seat_of, usage_extra)
                fin = se.AttemptFinished(
                    round=heat.round, heat=heat.heat, attempt=a, outcome="counted",
                    match_state=str(world.match_state.value), finish_reason=world.finish_reason,
                    winner=winner, ranks=ranks, stats=stats, bundle=bundle, elapsed_ms=world.elapsed_ms,
                    adapter_failures=failed_adapters)
                self._append(fin)
                self.say(f"{tag}: finished ({world.finish_reason}): winner {winner or 'none (tie)'}; "
                         + ", ".join(f"{e} #{r}" for e, r in sorted(ranks.items(), key=lambda x: x[1])))
                self._finish_heat(heat, fin)
            else:
                outcome = "retry" if a - heat.attempt_base < self.season.max_attempts and verdict.retryable else "void"
                fin = se.AttemptFinished(
                    round=heat.round, heat=heat.heat, attempt=a, outcome=outcome,
                    match_state=str(world.match_state.value) if world else None,
                    finish_reason=world.finish_reason if world else None,
                    failure_source=verdict.source, detail=verdict.detail, bundle=bundle,
                    elapsed_ms=world.elapsed_ms if world else 0, adapter_failures=failed_adapters)
                self._append(fin)
                self.say(f"{tag}: spoiled by {verdict.source}: {verdict.detail} → "
                         + ("attempt " + str(a + 1) if outcome == "retry"
                            else "heat void (no attempts left)" if verdict.retryable
                            else "heat void (not retried: a new attempt would fail the same way)"))
                if outcome == "void":
                    self._finish_heat(heat, fin)
            self._export_soon()

    async def _run_remote(self, heat: HeatState, a: int, tag: str, rel: str, folder: Path, arena: LoadedManifest,
                          loaded: LoadedManifest, adapters: dict[str, Any], name: str, slug: str) -> Any:
        """One attempt on a worker node of the cluster (:mod:`aoe_tui.cluster.remote`): the
        runner writes the headers and ``events.jsonl`` as they stream in, the artifacts at the
        end; returns the final world (raises as :meth:`ClusterHeats.run_heat`)."""
        from aoe_tui.cluster.remote import RemoteHeat, arena_archive
        from aoe_tui.referee.heat import write_heat_headers

        write_heat_headers(loaded, adapters, self.registered, folder)
        headers = {n: (folder / n).read_bytes() for n in ("arena.json", "match.json")}
        key = arena.manifest.arena.id
        if key not in self._arena_tars:
            self._arena_tars[key] = await asyncio.to_thread(arena_archive, arena)
        tar, sha, manifest_rel = self._arena_tars[key]
        agents: dict[str, dict[str, Any]] = {}
        credentials: dict[str, str] = {}
        files: dict[str, tuple[str, bytes]] = {}
        for e in heat.entrants:
            ent = self.entrants[e]
            names = sorted(_credential_vars(adapters[e], ent))
            for n in names:
                value = os.environ.get(n)
                if value:
                    credentials[n] = value
            agents[e] = {"spec": ent.adapter, "options": dict(ent.options or {}), "price": self.rates.get(ent.model),
                         "credentials": names, "heat_limits": self.heat_limits,
                         # the worker's proxy checks a copy of the season ledger; the runner adds
                         # the heat's spend to the real one when the attempt ends
                         "season_spend": (dataclasses.replace(self.spend[e]), self.season_cap)
                         if self.season_cap is not None else None}
            spec = ent.adapter.strip()
            if spec in self.registered:
                files[spec] = (self.registered[spec].name, self.registered[spec].read_bytes())
            elif spec.startswith("command:"):
                path = Path(spec.split(":", 1)[1])
                files[spec] = (path.name, path.read_bytes())
        remote = RemoteHeat(
            arena_tar=tar, arena_sha256=sha, manifest_rel=manifest_rel, manifest=loaded.manifest, raw=loaded.raw,
            agents=agents, provider=self.season.provider, drain_seconds=float(self.season.drain_seconds),
            name=name, slug=slug, tag=tag, heat_id=f"{self.season.id}-{tag}-{os.getpid()}", headers=headers,
            adapter_files=files, registered={n: p.name for n, p in self.registered.items() if n in files})

        from aoe_tui.cluster import identity

        mine = await asyncio.to_thread(identity)  # what this runner runs (computed once per process)
        theirs: dict[str, str] = {}

        def placed(node: str, node_id: str) -> None:
            self._append(se.AttemptPlaced(round=heat.round, heat=heat.heat, attempt=a, node=node, node_id=node_id,
                                          code_revision=theirs.get("code"), image_digest=theirs.get("image")))
            self.say(f"{tag}: on node {node}")
            # recorded, not refused: the line says which node ran what (docs/architecture.md)
            for what, label in (("code", "code revision"), ("image", "guest image")):
                if theirs.get(what) and theirs[what] != mine[what]:
                    self.say(f"{tag}: node {node} runs {label} {theirs[what]}, this runner {mine[what]}")

        from aoe_tui.cluster.remote import NodeLostError

        try:
            world = await self.cluster.run_heat(
                remote, folder, credentials, on_placed=placed, on_identity=theirs.update,
                avoid=sorted(self._lost_on.get(heat.key, ())),
                on_phase=lambda msg, t=tag: self._say_phase(t, msg),
                on_activity=lambda records, r=rel: self._observe("heat_activity", r, records),
                on_event=lambda rec, w, t=tag, h=heat, r=rel: self._on_event(t, h, rec, r))
        except NodeLostError as err:  # its next attempt goes elsewhere while another node can take it
            if err.node != "?":
                self._lost_on.setdefault(heat.key, set()).add(err.node)
            raise
        finally:
            credentials.clear()
        for e in heat.entrants:  # what the worker's proxies spent joins the season ledgers
            av = getattr(world, "agents", {}).get(e)
            if av is not None and e in self.spend:
                self.spend[e].add(cost_microusd=av.cost_microusd or 0,
                                  tokens=(av.input_tokens or 0) + (av.output_tokens or 0))
        return world

    @staticmethod
    def _usage_extra(folder: Path) -> dict[str, Any]:
        """Agent id → its ``usage`` entry of the attempt's ``aoe-extra.json`` (``{}`` when
        there is none)."""
        import json

        try:
            agents = json.loads((folder / "aoe-extra.json").read_text(encoding="utf-8")).get("agents") or {}
        except (OSError, ValueError, AttributeError):
            return {}
        if not isinstance(agents, dict):
            return {}
        return {a: v["usage"] for a, v in agents.items() if isinstance(v, dict) and isinstance(v.get("usage"), dict)}

    def _say_phase(self, tag: str, msg: str) -> None:
        """Say a heat's phase line as ``TAG: msg``; a provider ``note: …`` (a copy fallback, a limit
        this host cannot enforce) is said once per run, not once per heat: every heat still keeps
        its notes in ``aoe-extra.json``."""
        if msg.startswith("note: "):
            if msg in self._notes_said:
                return
            self._notes_said.add(msg)
        self.say(f"{tag}: {msg}")

    def _say_mismatch(self, heat: HeatState, usage_extra: dict[str, Any], tag: str) -> None:
        """One line per heat when a proxy's token counts and the adapter's events disagree."""
        if heat.key in self._mismatch_said:
            return
        found = usage_mismatches(usage_extra)
        if found:
            self._mismatch_said.add(heat.key)
            self.say(f"{tag}: token counts disagree (the larger is charged): "
                     + "; ".join(f"{a}: {line}" for a, line in found.items()))

    def _on_event(self, tag: str, heat: HeatState, rec: Any, rel: str | None = None) -> None:
        if rel is not None:
            self._observe("heat_event", rel, rec)
        e = rec.event
        if e.kind == "milestone_passed":
            self._failures.passed(e.territory, e.milestone, tag)
        seat_of = {self.arena_of(heat).manifest.territories[i].id: x for i, x in enumerate(heat.seats) if x is not None}
        line = summarize_event(e, "season", name=lambda t: seat_of.get(t, t))
        if line is not None and self._failures.fresh(line, tag):
            self.say(f"{tag}: {fmt_clock(rec.elapsed_ms, 's.d')} {line.text}")

    async def _run_round_heats(self) -> None:
        pending = self.state.pending_heats()  # the current round's (and heats --retry-void reopened)
        sem = asyncio.Semaphore(self.season.concurrent_heats)

        async def one(h: HeatState) -> None:
            async with sem:
                await self._run_heat(h)

        tasks = [asyncio.ensure_future(one(h)) for h in pending]
        try:
            await asyncio.gather(*tasks)
        except BaseException:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise

    def _close_round(self, cur: RoundState) -> None:
        racing = [e for h in cur.heats.values() for e in h.entrants] + list(cur.byes)
        advanced, eliminated = self.format.round_outcome(list(self.entrants), season_results(self.state), racing,
                                                         cur.final)
        self._append(se.RoundFinished(round=cur.round, advanced=advanced, eliminated=eliminated))
        self.say(f"round {cur.round} finished" + (f": advanced {', '.join(advanced)}; out {', '.join(eliminated)}"
                                                  if advanced or eliminated else ""))

    def _export(self) -> None:
        """Write the standings files (after every heat and at the end). Any failure is one
        progress line; at the end, when the disk is full, it stops the run instead
        (:class:`_Stop`, exit 75) so ``aoe run`` never reports standings it could not write:
        the same command writes them once space is freed. Mid-season the next heat's space
        check stops the season."""
        if self.write_exports is None:
            return
        try:
            self.write_exports(self.dir, self.state)
        except Exception as err:
            if is_no_space(err) and self.state.finished is not None:
                raise _Stop("the season finished but its standings files were not written: No space left "
                            f"on device ({getattr(err, 'filename', None) or self.dir})", None, None) from None
            self.say(_export_failure_line(err))

    def _export_soon(self) -> None:
        """:meth:`_export`'s work after a heat, in the background and out of the race's way.
        Rendering the standings (ratings, four formats) took 0.1-0.3 s of CPU on a loaded
        2-core host, right when a heat ends: when the next heat's territories boot and the
        spectators draw that season event (issue 16). So the heat does not wait for it, and it
        runs in a forked child at idle priority (:func:`~aoe_tui.runtime.procs.call_forked_idle`:
        it takes only the CPU the race and the spectators leave, and holds no lock the
        real-time referee needs), on the state as it is when it starts (copy-on-write). One
        export at a time (the files never go back to an older state), one waiting at most (it
        takes the newest state); :meth:`_exports_done` waits for them. Where no child can be
        forked, and on a cluster (Ray's threads), a worker thread writes a snapshot. A failure is one progress line, as
        mid-season in :meth:`_export`."""
        if self.write_exports is None or self._export_waiting:
            return
        self._export_waiting = True
        task = asyncio.get_running_loop().create_task(self._export_in_background())
        self._exports.add(task)
        task.add_done_callback(self._exports.discard)

    async def _export_in_background(self) -> None:
        assert self.write_exports is not None
        async with self._export_lock:
            self._export_waiting = False
            try:
                forked = False
                if self.cluster is None:  # a Ray driver's gRPC threads do not mix with fork
                    try:
                        await call_forked_idle(self.write_exports, self.dir, self.state)
                        forked = True
                    except OSError:  # no child (EAGAIN, ENOMEM): a thread, on a snapshot
                        pass
                if not forked:
                    await asyncio.to_thread(self.write_exports, self.dir, copy.deepcopy(self.state))
            except ForkedCallError as err:  # the child's one line
                self.say(_export_failure_line(str(err)))
            except Exception as err:
                self.say(_export_failure_line(err))

    async def _exports_done(self) -> None:
        """Wait for the background exports (:meth:`_export_soon`), so none lands after the
        final one."""
        while self._exports:
            await asyncio.gather(*list(self._exports), return_exceptions=True)

    async def run(self) -> SeasonState:
        """Run or resume the season to its end; returns the final state. Raises
        :class:`DiskFullStop` when a full disk stops it (resumable)."""
        try:
            return await self._run()
        except _Stop as stop:
            raise self._stopped(stop) from None
        except OSError as err:
            if not is_no_space(err):
                raise
            raise self._stopped(_Stop(f"No space left on device: {err.filename or self.dir}", None, None)) from None
        except asyncio.CancelledError:
            # stopped (a signal, or "stop" in the TUI): the running heats have aborted and
            # torn their territories down (_run_round_heats waits for them); say so in the log
            if self.log is not None and self.state.finished is None:
                running = [f"r{h.round}h{h.heat}a{a.attempt}" for h, a in self.state.open_attempts()]
                with contextlib.suppress(Exception):
                    self._append(se.SeasonStopped(reason=self.stop_reason or "cancelled", pid=os.getpid(),
                                                  open_attempts=running))
            raise
        finally:
            if self.log is not None:
                self.log.close()

    async def _run(self) -> SeasonState:
        if self.cluster is not None:
            await asyncio.to_thread(self.cluster.connect)
            self.say(f"heats run on the Ray cluster at {self.cluster.address}: "
                     f"{self.cluster.heat_slots()} heat slot(s)")
            from aoe_tui.cluster import identity

            mine = await asyncio.to_thread(identity)
            # which it does: nodes are not refused for running other code (docs/architecture.md)
            self.say(f"this runner: code revision {mine['code']}, guest image {mine['image']}; "
                     "a node running other code or another guest image is used all the same: each attempt "
                     "records what its node ran (attempt_placed) and a difference is said")
        resuming = self._open()
        if resuming:
            self.say(f"resuming season {self.season.id} · {self.season.label} in {self.dir}")
            # the nodes' sweep waits for the killed runner's actors (up to minutes): off the loop,
            # so the TUI and the stop signals stay live meanwhile
            swept = await asyncio.to_thread(self.cluster.sweep_nodes) if self.cluster is not None else []
            self._recover(swept)
            self._seed_spend()
        else:
            self.say(f"season {self.season.id} · {self.season.label}: {len(self.entrants)} entrants, "
                     f"{self.format.kind}, heats of {self.min_heat}-{self.heat_size}, output {self.dir}")
            hpe = getattr(self.season.format, "heats_per_entrant", None)
            if hpe is not None and len(self.arenas) > 1 and hpe < len(self.arena_cycle):
                later = sorted({self.arenas[i].manifest.arena.id for i in self.arena_cycle[hpe:]}
                               - {self.arenas[i].manifest.arena.id for i in self.arena_cycle[:hpe]})
                if later:
                    self.say(f"note: the rounds cycle through {len(self.arena_cycle)} arena slots, but a league "
                             f"of {hpe} heats per entrant has about {hpe} rounds: "
                             f"{', '.join(later)} may never be raced (raise heats_per_entrant)")
        note = cpu_weights_note(self.season.concurrent_heats, self.season.provider.kind, self.cluster is not None)
        if note is not None:  # once per run, not per heat
            self.say(note)
        from aoe_tui.runtime.registry import get_provider

        if self.cluster is None and get_provider(self.season.provider.kind).host_cpus:
            note = oversubscription_note(self.season.concurrent_heats, max(map(heat_vcpus, self.arenas)),
                                         len(os.sched_getaffinity(0)))
            if note is not None:
                self.say(note)
        if self.retry_void:
            self._reopen_void()
        while self.state.finished is None:
            if self.state.pending_heats():
                await self._run_round_heats()
                continue
            waiting = self.format.waiting_on(season_results(self.state))
            if waiting:  # no round outcome, draw or champion from a heat that did not race
                raise await self._wait_on([self.state.rounds[w.round].heats[w.heat] for w in waiting])
            for rnd in self.state.rounds.values():
                if rnd.finished is None:
                    self._close_round(rnd)
            results = season_results(self.state)
            plan = self.format.next_round(list(self.entrants), results, self.season.seed)
            if plan is None:
                champs = self.format.champions(list(self.entrants), results)
                if champs is None:  # the standings decide; an entrant with no counted heat
                    champs = [r.entrant for r in season_standings(self.state)  # is nobody's champion
                              if r.rank == 1 and r.heats > 0]
                failed = adapters_that_always_failed(self.state, self.entrants)
                self._append(se.SeasonFinished(champions=champs, rounds=len(self.state.rounds),
                                               adapters_failed=failed))
                raced = {r.arena for r in self.state.rounds.values()}
                unraced = [a.manifest.arena.id for a in self.arenas if a.manifest.arena.id not in raced]
                self.say(f"season finished: champion {', '.join(champs) or 'none'}"
                         + (f"; never raced: {', '.join(unraced)}" if unraced else ""))
                for e, line in failed.items():
                    self.say(f"adapter failed every attempt: {e} ({line})")
                void = [f"r{h.round}h{h.heat}" for rnd in self.state.rounds.values() for h in rnd.heats.values()
                        if h.result is not None and h.result.void]
                if void:
                    self.say(f"{len(void)} void heat(s) (the infrastructure spoiled every attempt): "
                             f"{', '.join(void)}; {self.retry_void_command()} re-runs them")
                break
            arena_id = self.arena_of_round(plan.round).manifest.arena.id
            self._append(se.RoundScheduled(
                round=plan.round, heats=[se.HeatSeats(heat=h.heat, seats=list(h.seats)) for h in plan.heats],
                byes=list(plan.byes), final=plan.final, arena=arena_id))
            on = f" on {arena_id}" if len(self.arenas) > 1 else ""
            self.say(f"round {plan.round} scheduled{' (final)' if plan.final else ''}{on}: "
                     + "; ".join(f"heat {h.heat}: " + " vs ".join(h.entrants) for h in plan.heats)
                     + (f"; byes: {', '.join(plan.byes)}" if plan.byes else ""))
        await self._exports_done()
        self._export()
        return self.state


class _Stop(Exception):
    """Internal: a full disk stops the season (``detail``; the ``heat`` about to start or
    running, the ``attempt`` it ended or None)."""

    def __init__(self, detail: str, heat: HeatState | None, attempt: int | None) -> None:
        super().__init__(detail)
        self.detail, self.heat, self.attempt = detail, heat, attempt


def adapters_that_always_failed(state: SeasonState, entrants: dict[str, Any]) -> dict[str, str]:
    """Entrant → ``"adapter ADAPTER, N/N attempts: SOURCE"`` for every entrant whose own
    adapter ended with an infrastructure failure (``provider``/``harness``) in **every**
    attempt it was seated in (at least one). ``entrants`` maps id → season-file entrant."""
    tried: dict[str, int] = {}
    failed: dict[str, list[str]] = {}
    for h in state.heats():
        for a in h.attempts:
            if a.finished is None:
                continue
            for e in h.entrants:
                tried[e] = tried.get(e, 0) + 1
                src = a.finished.adapter_failures.get(e)
                if src is not None:
                    failed.setdefault(e, []).append(src)
    out = {}
    for e, n in tried.items():
        srcs = failed.get(e, [])
        if n and len(srcs) == n:
            adapter = entrants[e].adapter if e in entrants else "?"
            out[e] = f"adapter {adapter}, {n}/{n} attempts: {', '.join(sorted(set(srcs)))}"
    return out


def safe_label(text: str) -> str:
    """A folder-safe form of a label."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "season"
