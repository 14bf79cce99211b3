"""One heat end to end: provision → referee (rules + supervisor) → teardown → artifacts (spec §0, §3.1).

:func:`run_heat` is the Python API used by ``aoe match run`` and the season
runner. It writes a complete upstream-format match folder:

==========================  ==================================================
``arena.json``              the manifest (defaults filled; each agent's ``adapter``
                            is the adapter actually used) — written first
``match.json``              provenance and compatibility key (§7.3)
``territories/``            provider work folders (consoles, overlays, credentials)
``events.jsonl``            the event log (opened after all territories are SSH-ready)
``activity.jsonl``          ours: the agents' activity lines as they happen, heat clock
                            ms (:mod:`aoe_tui.replay.activity`)
``agents/<id>/``            ``instruction.md``, ``result.json``, ``usage.json``,
                            ``stdout.log``, ``stderr.log``, ``referee-reboot``,
                            and our ``activity.log`` (its last lines, at the end)
``evidence/<territory>/``   verifier evidence, ``previous.json`` and our ``previous.fields``
                            (its values for the verifiers' shell, docs/formats.md)
``world.json``              the final reduced world — also after an abort
``aoe-extra.json``          ours: provider, wall-clock timings, verifier durations,
                            each agent's adapter and ``usage`` beyond §5.5 (cache
                            tokens, who computed the cost, proxy/event token counts),
                            ``territories`` (each seat's class ``resources``, the
                            provider's ``limits`` and, when it ran into one, the
                            ``exhausted`` limits) and ``territory_notes`` (the
                            provider's warnings, also printed; only when some)
``<slug>.match.json``       the single-file bundle (Appendix B)
==========================  ==================================================

Teardown always runs (``try/finally``), also on cancellation and abort.
A territory that cannot be provisioned is recorded as an ``infrastructure_failure``
(source ``arena``) followed by ``match_state_changed`` preparing→aborted and
``match_finished`` (winner null, "territory provisioning failed"); the returned
world then has ``match_state == "aborted"`` and ``infrastructure_failures == 1``.
A fog arena's guest leak audit (spec §6.4, :mod:`aoe_tui.referee.audit`) runs on the
ready territories before any agent starts; a hit ends the heat the same way, with
component ``guest-leak-audit`` and a detail naming the territory, the file and the string.

A full disk (the supervisor's reserve check, or ``ENOSPC``/``EDQUOT`` from a write of the
heat) aborts the race with an ``infrastructure_failure`` (component ``disk``; see
:mod:`aoe_tui.referee.supervisor`); the verifiers are ended and the territories torn down
as always, then :func:`run_heat` raises :class:`DiskFullError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aoe_tui.domain import events as ev
from aoe_tui.domain.display import printable
from aoe_tui.domain.events import MatchState
from aoe_tui.domain.world import WorldState, pretty_json, world_json
from aoe_tui.errors import AoeError
from aoe_tui.fsio import is_no_space, write_atomic
from aoe_tui.referee.rules import REASONS
from aoe_tui.referee.supervisor import DISK_RESERVE_BYTES, HeatSupervisor, OnEvent
from aoe_tui.replay.log import EventLogWriter
from aoe_tui.replay.reducer import apply_event
from aoe_tui.runtime.provider import ProviderError, TerritoryResources, TerritorySpec

if TYPE_CHECKING:  # pragma: no cover
    from aoe_tui.agents.base import Adapter
    from aoe_tui.domain.arena import LoadedManifest
    from aoe_tui.runtime.provider import Territory, TerritoryProvider

__all__ = [
    "DiskFullError",
    "OutputExistsError",
    "PROVISION_FAILED_REASON",
    "bundle_path",
    "check_output_dir",
    "read_credential_password",
    "run_heat",
    "territory_specs",
    "write_heat_headers",
]

PROVISION_FAILED_REASON = "territory provisioning failed"


class DiskFullError(AoeError):
    """A heat ended because its disk filled; ``str(err)`` is ``No space left on device:
    <path>`` (and why: the free space under the reserve). The match folder holds what
    could be written; its territories are torn down. Exit status 75 (``EX_TEMPFAIL``: free
    space and run the same command again), as every other full-disk stop."""

    exit_code = 75


class OutputExistsError(AoeError):
    """The output folder already holds a non-empty ``events.jsonl`` (upstream ``OutputExists``)."""


def check_output_dir(output_dir: Path) -> None:
    """Raise :class:`OutputExistsError` if ``output_dir/events.jsonl`` exists and is non-empty."""
    log = Path(output_dir) / "events.jsonl"
    if log.exists() and log.stat().st_size > 0:
        raise OutputExistsError(f"{log} already exists and is not empty; choose a new --output folder")


def bundle_path(output_dir: Path, slug: str | None = None) -> Path:
    """Where :func:`run_heat` writes the bundle: ``<output>/<slug>.match.json`` (slug = folder name)."""
    output_dir = Path(output_dir)
    return output_dir / f"{slug or output_dir.resolve().name}.match.json"


def read_credential_password(path: Path) -> str:
    """``AOE_SSH_PASSWORD`` from an upstream credential file (§5.1): the first line starting
    with ``AOE_SSH_PASSWORD=``, with ``'`` and ``"`` trimmed. Raises :class:`AoeError` naming the file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise AoeError(f"{path}: cannot read credential file: {err.strerror}") from None
    for line in text.splitlines():
        if line.startswith("AOE_SSH_PASSWORD="):
            return line.split("=", 1)[1].strip().strip("'\"")
    raise AoeError(f"{path}: credential file has no AOE_SSH_PASSWORD= line")


def territory_specs(loaded: LoadedManifest, credentials: Mapping[str, Path] | None = None) -> list[TerritorySpec]:
    """One :class:`TerritorySpec` per manifest territory, in manifest order.

    The root password is ``<territory>-race`` (upstream convention) unless a credential
    file was given for that territory, in which case its ``AOE_SSH_PASSWORD`` is used.
    ``resources`` are the territory's class's ``[classes.resources]`` (§1.7), with our
    default tasks limit (:data:`~aoe_tui.runtime.provider.DEFAULT_TASKS_MAX`).
    """
    creds = dict(credentials or {})
    classes = {c.id: c.resources for c in loaded.manifest.classes}
    out = []
    for i, t in enumerate(loaded.manifest.territories):
        password = read_credential_password(creds[t.id]) if t.id in creds else f"{t.id}-race"
        res = classes.get(t.class_)
        resources = (TerritoryResources(vcpus=res.vcpus, memory_mib=res.memory_mib, disk_mib=res.disk_mib)
                     if res is not None else TerritoryResources())
        out.append(TerritorySpec(id=t.id, password=password, service_port=t.service.port, index=i,
                                 resources=resources))
    return out


async def _with_harness_shares(loaded: LoadedManifest, specs: list[TerritorySpec],
                               adapters: Mapping[str, Adapter], say: Callable[[str], None]) -> list[TerritorySpec]:
    """``specs`` with each seat's ``shares``: what its agent's adapter wants shared read-only
    (:meth:`~aoe_tui.agents.base.Adapter.harness_shares`, asked in a worker thread: it may
    build its folder once). An adapter that cannot prepare its share gets none (one line via
    ``say``); its staging then says what is wrong, as that seat's harness failure."""
    out = []
    for spec in specs:
        agent = loaded.manifest.agent_for(spec.id)
        adapter = adapters.get(agent.id) if agent is not None else None
        hook = getattr(adapter, "harness_shares", None)  # an adapter without the hook shares nothing
        shares: list[Any] = []
        if hook is not None:
            try:
                shares = list(await asyncio.to_thread(hook, agent))
            except Exception as err:  # noqa: BLE001 - staging reports it for the seat
                say(f"{spec.id}: no harness share: {str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__}")
        out.append(dataclasses.replace(spec, shares=tuple(shares)) if shares else spec)
    return out


def _source_revision() -> str | None:
    try:
        res = subprocess.run(
            ["git", "rev-parse", "--verify", "HEAD"], capture_output=True, text=True, timeout=5, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return res.stdout.strip() or None if res.returncode == 0 else None


def _effective_manifest(loaded: LoadedManifest, adapters: Mapping[str, Adapter]) -> Any:
    """The manifest with each agent's ``adapter`` set to the adapter actually used.

    A built-in builder seated in place of the manifest's adapter also brings its own
    ``model`` (:attr:`Adapter.builtin_model`); otherwise the manifest's model stays.
    """
    m = loaded.manifest
    agents = []
    for a in m.agents:
        adapter = adapters[a.id]
        update: dict[str, str] = {"adapter": adapter.name or a.adapter}
        if adapter.builtin_model and adapter.name and adapter.name != a.adapter:
            update["model"] = adapter.builtin_model
        agents.append(a.model_copy(update=update))
    return m.model_copy(update={"agents": agents})


def _write_headers(
    loaded: LoadedManifest,
    adapters: Mapping[str, Adapter],
    registered: Mapping[str, Path],
    output_dir: Path,
) -> None:
    from aoe_tui import __version__
    from aoe_tui.domain.arena import arena_json
    from aoe_tui.domain.provenance import compute_provenance

    write_atomic(output_dir / "arena.json", pretty_json(arena_json(loaded.manifest)), fsync=False)
    prov = compute_provenance(loaded, dict(registered), __version__, _source_revision())
    hashes = dict(prov.adapter_sha256)
    for adapter in adapters.values():
        if adapter.name and adapter.name not in hashes:
            with contextlib.suppress(Exception):
                digest = adapter.sha256()
                if digest:
                    hashes[adapter.name] = digest
    prov = prov.model_copy(update={"adapter_sha256": dict(sorted(hashes.items()))})
    write_atomic(output_dir / "match.json", pretty_json(prov.to_json()), fsync=False)


def write_heat_headers(loaded: LoadedManifest, adapters: Mapping[str, Adapter],
                       registered: Mapping[str, Path], output_dir: Path) -> LoadedManifest:
    """Write ``arena.json`` and ``match.json`` of a heat into ``output_dir`` (created) as
    :func:`run_heat` does, from this machine's arena files; returns the manifest with each
    agent's adapter as used. A season on a cluster writes them on the runner
    (:mod:`aoe_tui.cluster.remote`), so they do not depend on where the worker keeps the
    package. Raises :class:`AoeError` (provenance: a file that cannot be read)."""
    Path(output_dir).mkdir(parents=True, exist_ok=True)
    loaded = dataclasses.replace(loaded, manifest=_effective_manifest(loaded, adapters))
    _write_headers(loaded, adapters, registered, Path(output_dir))
    return loaded


def _provision_failed(log: EventLogWriter, world: WorldState, component: str, detail: str, reason: str,
                      on_event: OnEvent | None, *, source: str = "arena") -> None:
    """Record a heat that ends before the race: ``infrastructure_failure`` (``component``,
    ``source``, ``detail``), then preparing→aborted and ``match_finished`` (``reason``)."""
    for event in (
        ev.InfrastructureFailure(component=component, source=source, detail=detail),
        ev.MatchStateChanged(from_=MatchState.preparing, to=MatchState.aborted),
        ev.MatchFinished(winner=None, reason=reason),
    ):
        rec = log.append(event, 0)
        apply_event(world, rec)
        if on_event is not None:
            with contextlib.suppress(Exception):
                on_event(rec, world)


async def run_heat(
    loaded: LoadedManifest,
    provider: TerritoryProvider,
    adapters_by_agent: Mapping[str, Adapter],
    output_dir: Path,
    *,
    drain_seconds: float = 30.0,
    on_event: OnEvent | None = None,
    registered_adapters: Mapping[str, Path] | None = None,
    credentials: Mapping[str, Path] | None = None,
    verifier_concurrency: int = 4,
    duration_s: float | None = None,
    abort_event: asyncio.Event | None = None,
    on_phase: Callable[[str], None] | None = None,
    name: str | None = None,
    slug: str | None = None,
    write_bundle_file: bool = True,
    on_supervisor: Callable[[HeatSupervisor], None] | None = None,
    min_free_bytes: int = DISK_RESERVE_BYTES,
    provision_gate: Callable[[int], contextlib.AbstractAsyncContextManager[Any]] | None = None,
    cpu_weights: bool = False,
) -> WorldState:
    """Run one heat and write its match folder; return the final world.

    Args:
        loaded: the validated manifest (``aoe_tui.domain.arena.load_manifest``); a build race.
        provider: a fresh provider for this heat (its workdir is normally
            ``output_dir/"territories"``); torn down before this returns.
        adapters_by_agent: agent id → adapter, for every manifest agent.
        output_dir: the match folder; created if missing. Refused (:class:`OutputExistsError`)
            if its ``events.jsonl`` is non-empty.
        drain_seconds: post-match drain window (s; upstream 30).
        on_event: ``on_event(record, world)`` after each event (live views).
        registered_adapters: upstream ``--adapter NAME=PATH`` registrations (hashed into
            ``match.json`` ``adapter_sha256``; built-in adapters add their own digest).
        credentials: territory id → credential file (``--credential``): its password is used
            for provisioning and the file is given to verifiers/adapters as ``AOE_CREDENTIAL_FILE``.
        verifier_concurrency: global verifier pool size.
        duration_s: override of ``rules.duration_seconds`` (s), for tests.
        abort_event: set it (e.g. from a SIGINT handler) to abort gracefully: the match ends
            ``aborted`` ("operator interrupt"), ``world.json`` is written, territories torn down.
        on_phase: called with short progress lines ("provisioning 3 territories (container)", …).
        name, slug: bundle ``match.name`` / ``match.slug`` (default: the folder name).
        write_bundle_file: write ``<output>/<slug>.match.json`` (Appendix B).
        on_supervisor: called once with the :class:`HeatSupervisor` right after it is built
            (territories ready, before the first event), so live views can read each
            seat's adapter activity (``supervisor.seats[i].run.activity``, newest last).
            Exceptions it raises are ignored.
        min_free_bytes: free bytes (on ``output_dir``'s file system) the running heat keeps
            in reserve; below it the heat ends as a full disk (0: only ``ENOSPC`` errors).
        provision_gate: ``provision_gate(n)`` (n = territories) is entered before the
            territories are provisioned and left when they are ready (the season runner's
            admission: so many territories booting at once across heats); the wait is
            ``timings.admission_wait_s`` in ``aoe-extra.json``, not part of ``provision_s``.
        cpu_weights: give the territories a CPU weight by phase where the provider can
            (``set_cpu_weight``: the container provider): :data:`BOOT_CPU_WEIGHT` while they
            boot, :data:`RACE_CPU_WEIGHT` from the clock's start, :data:`DONE_CPU_WEIGHT` from
            ``match_finished`` (drain, teardown), so heats whose clock runs get the CPU first.

    Returns the final :class:`WorldState` (``match_state`` finished or aborted).

    Raises:
        OutputExistsError: see above. Manifest/provenance errors (AoeError) before anything
            runs. :class:`DiskFullError` after the teardown when the disk filled (an
            ``OSError`` ``ENOSPC`` when it fills before the territories are provisioned). ``asyncio.CancelledError`` is re-raised after the abort bookkeeping,
            ``world.json`` and teardown.
    """
    output_dir = Path(output_dir)
    check_output_dir(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    say = on_phase or (lambda _msg: None)
    abort_event = abort_event or asyncio.Event()
    registered = dict(registered_adapters or {})
    credentials = {k: Path(v) for k, v in (credentials or {}).items()}
    unknown = sorted(set(credentials) - {t.id for t in loaded.manifest.territories})
    if unknown:
        raise AoeError(f"--credential names unknown territory {unknown[0]!r}")
    missing = [a.id for a in loaded.manifest.agents if a.id not in adapters_by_agent]
    if missing:
        raise AoeError(f"no adapter for agent {missing[0]!r}")
    specs = await _with_harness_shares(loaded, territory_specs(loaded, credentials), adapters_by_agent, say)
    # Everything downstream (arena.json, agent_started, instructions) sees the seats as run.
    loaded = dataclasses.replace(loaded, manifest=_effective_manifest(loaded, adapters_by_agent))
    _write_headers(loaded, adapters_by_agent, registered, output_dir)

    timings: dict[str, Any] = {"command_start_unix": time.time()}
    world = WorldState()
    disk_full: str | None = None
    log: EventLogWriter | None = None
    supervisor: HeatSupervisor | None = None
    t_start = time.monotonic()
    weigh = getattr(provider, "set_cpu_weight", None) if cpu_weights else None
    lowering: list[asyncio.Future[Any]] = []
    provisioned: list[Territory] = []
    if weigh is not None:
        on_event = _lower_weight_at_finish(on_event, weigh, lowering)
    try:
        async with provision_gate(len(specs)) if provision_gate is not None else contextlib.nullcontext():
            t_prov = time.monotonic()
            if provision_gate is not None:
                timings["admission_wait_s"] = round(t_prov - t_start, 3)
            say(f"provisioning {len(specs)} territories ({provider.name})")
            prov_task = asyncio.ensure_future(provider.provision(specs))
            sweep = asyncio.ensure_future(_weigh_while(weigh, BOOT_CPU_WEIGHT, prov_task)) if weigh else None
            abort_wait = asyncio.ensure_future(abort_event.wait())
            try:
                if not abort_event.is_set():
                    await asyncio.wait({prov_task, abort_wait}, return_when=asyncio.FIRST_COMPLETED)
            except BaseException:  # the heat is cancelled: its provisioning ends before the teardown
                prov_task.cancel()
                with contextlib.suppress(BaseException):
                    await prov_task
                raise
            finally:
                abort_wait.cancel()
                if sweep is not None:  # its weighing thread ends first: never a boot weight after the race's
                    sweep.cancel()
                    await asyncio.gather(sweep, return_exceptions=True)
            timings["provision_s"] = round(time.monotonic() - t_prov, 3)
        if not prov_task.done():
            prov_task.cancel()
            with contextlib.suppress(BaseException):
                await prov_task
            log = EventLogWriter(output_dir / "events.jsonl")
            for event in (
                ev.MatchStateChanged(from_=MatchState.preparing, to=MatchState.aborted),
                ev.MatchFinished(winner=None, reason=REASONS["interrupt"]),
            ):
                apply_event(world, log.append(event, 0))
            return world
        try:
            territories: list[Territory] = prov_task.result()
        except ProviderError as err:
            say(f"provisioning failed: {err}")
            log = EventLogWriter(output_dir / "events.jsonl")
            _provision_failed(log, world, f"provider:{provider.name}", str(err), PROVISION_FAILED_REASON, on_event)
            return world
        if credentials:
            territories = [
                dataclasses.replace(t, credential_file=credentials[t.id].absolute()) if t.id in credentials else t
                for t in territories
            ]
        say(f"territories ready in {timings['provision_s']:.1f} s: " + ", ".join(f"{t.id}@{t.host}:{t.ssh_port}" for t in territories))
        provisioned = territories
        for note in _provider_notes(provider):
            say(f"note: {printable(note)}")
        fog = loaded.manifest.fog_of_war
        audit = fog.guest_leak_audit if fog is not None else None
        if audit is not None:
            # spec §6.4: before any agent starts, no territory may hold a forbidden string
            from aoe_tui.referee.audit import LEAK_COMPONENT, LEAK_REASON, AuditError, guest_leak_audit

            t_audit = time.monotonic()
            try:
                hit = await guest_leak_audit(territories, audit.scan_paths, audit.forbidden_strings)
            except AuditError as err:
                say(f"guest leak audit could not run: {err}")
                log = EventLogWriter(output_dir / "events.jsonl")
                _provision_failed(log, world, f"provider:{provider.name}", str(err), LEAK_REASON, on_event,
                                  source="provider")
                return world
            timings["leak_audit_s"] = round(time.monotonic() - t_audit, 3)
            if hit is not None:
                say(f"guest leak audit failed: {hit.detail()}")
                log = EventLogWriter(output_dir / "events.jsonl")
                _provision_failed(log, world, LEAK_COMPONENT, hit.detail(), LEAK_REASON, on_event)
                return world
            say(f"guest leak audit passed ({len(audit.forbidden_strings)} strings, "
                f"{len(territories)} territories, {timings['leak_audit_s']:.1f} s)")
        log = EventLogWriter(output_dir / "events.jsonl")
        supervisor = HeatSupervisor(
            loaded,
            territories,
            provider,
            adapters_by_agent,
            output_dir,
            log,
            drain_seconds=drain_seconds,
            verifier_concurrency=verifier_concurrency,
            on_event=on_event,
            duration_s=duration_s,
            min_free_bytes=min_free_bytes,
        )
        world = supervisor.world
        if on_supervisor is not None:
            with contextlib.suppress(Exception):
                on_supervisor(supervisor)
        if weigh is not None:  # the clock starts: this heat's territories outrank booting ones
            await asyncio.to_thread(weigh, RACE_CPU_WEIGHT)
        from aoe_tui.agents.base import Adapter as _Adapter

        staging = sorted({a.name or type(a).__name__ for a in adapters_by_agent.values()
                          if getattr(type(a), "stage", _Adapter.stage) is not _Adapter.stage})
        if staging:  # the clock waits for these seats' harness (supervisor: the staging phase)
            say(f"staging the seats before the clock ({', '.join(staging)})")
        forward = asyncio.ensure_future(_forward_abort(abort_event, supervisor))
        try:
            world = await supervisor.run()
        finally:
            forward.cancel()
        return world
    except OSError as err:
        if not is_no_space(err):
            raise
        disk_full = f"No space left on device: {err.filename or output_dir}"
        say(disk_full)
        return world  # replaced by DiskFullError below, after the teardown
    finally:
        if supervisor is not None:
            world = supervisor.world
            disk_full = disk_full or supervisor.disk_full
        if log is not None:
            log.close()
            try:
                write_atomic(output_dir / "world.json", world_json(world))
            except OSError as err:  # the teardown below must run whatever the disk says
                if not is_no_space(err):
                    raise
                disk_full = disk_full or f"No space left on device: {output_dir / 'world.json'}"
                say(f"world.json not written: {err.strerror}")
        from aoe_tui.referee.verifier import end_leftover_verifiers

        left = end_leftover_verifiers(output_dir / "evidence")
        if left:
            say(f"ended {left} leftover verifier process(es)")
        territory_extra = _territory_extra(provider, specs, provisioned)  # before the teardown
        t_down = time.monotonic()
        say("tearing down territories")
        try:
            await provider.teardown()
        except Exception as err:  # teardown must not hide the match result
            say(f"teardown error: {err}")
        if weigh is not None:  # after the lowering at the finish, never before it (no group left behind)
            with contextlib.suppress(Exception):
                await asyncio.gather(*lowering, return_exceptions=True)
                await asyncio.to_thread(weigh, None)
        timings["teardown_s"] = round(time.monotonic() - t_down, 3)
        timings["wall_s"] = round(time.monotonic() - t_start, 3)
        extra = {"schema": "aoe-tui.match-extra", "version": 1, "provider": provider.name, "timings": timings}
        if supervisor is not None:
            extra.update({k: v for k, v in supervisor.extra().items() if k != "timings"})
            extra["timings"].update(supervisor.timings)
        extra.update(territory_extra)
        for tid, hit in (supervisor.exhausted.items() if supervisor is not None else ()):
            if hit:  # the limits each territory ran into (the supervisor's, polled before the teardown)
                extra.setdefault("territories", {}).setdefault(tid, {})["exhausted"] = list(hit)
        with contextlib.suppress(OSError, TypeError, ValueError):
            write_atomic(output_dir / "aoe-extra.json", json.dumps(extra, indent=2, sort_keys=True), fsync=False)
        if write_bundle_file and log is not None:
            from aoe_tui.replay.bundle import write_bundle

            try:
                write_bundle(output_dir, bundle_path(output_dir, slug), name=name, slug=slug)
            except Exception as err:
                say(f"bundle not written: {err}")
        if disk_full and sys.exc_info()[1] is None:  # never hides a cancellation or a crash
            say(f"heat ended: {disk_full}")
            raise DiskFullError(disk_full)


def _provider_notes(provider: TerritoryProvider) -> list[str]:
    """The provider's one-line notes (:attr:`TerritoryProvider.notes`) as strings;
    ``[]`` when it has none or they cannot be read."""
    try:
        return [str(n) for n in provider.notes]
    except Exception:  # noqa: BLE001 - a provider's notes never break a heat
        return []


def _territory_extra(provider: TerritoryProvider, specs: Sequence[TerritorySpec],
                     provisioned: Sequence[Territory]) -> dict[str, Any]:
    """The ``aoe-extra.json`` keys of the territories' resources: ``territory_notes`` (the
    provider's notes, only when there are some) and, once territories were provisioned,
    ``territories``: ``{id: {"resources": the class's (vcpus, memory_mib, disk_mib, tasks),
    "limits": provider.limits(id)}}``. Never raises."""
    out: dict[str, Any] = {}
    notes = _provider_notes(provider)
    if notes:
        out["territory_notes"] = notes
    if provisioned:
        ids = {t.id for t in provisioned}
        table: dict[str, Any] = {}
        for spec in specs:
            if spec.id not in ids:
                continue
            try:
                limits = dict(provider.limits(spec.id))
            except Exception:  # noqa: BLE001 - limits() never raises; a plugin's might
                limits = {}
            table[spec.id] = {"resources": dataclasses.asdict(spec.resources), "limits": limits}
        out["territories"] = table
    return out


#: CPU weights of a heat's territories (``CPUWeight=`` scale, 100 = a normal process) by
#: phase, with ``run_heat(cpu_weights=True)``: booting territories yield to racing ones
BOOT_CPU_WEIGHT = 10
RACE_CPU_WEIGHT = 100
DONE_CPU_WEIGHT = 10
#: seconds between two sweeps of a booting heat's processes into its weighted groups
WEIGHT_SWEEP_S = 0.5


async def _weigh_while(weigh: Callable[[int | None], int], weight: int, task: asyncio.Future[Any]) -> None:
    """Sweep the territories' processes into groups of ``weight`` (in a thread) until ``task``
    (their provisioning) ends; cancelled, it returns only once its thread is done (so a
    late boot sweep cannot overwrite :data:`RACE_CPU_WEIGHT`)."""
    while not task.done():
        job = asyncio.ensure_future(asyncio.to_thread(weigh, weight))
        try:
            await asyncio.shield(job)
        except asyncio.CancelledError:  # the thread still runs: wait for it (its write lands now, not
            await asyncio.gather(job, return_exceptions=True)  # after the next phase's weight)
            raise
        await asyncio.wait({task}, timeout=WEIGHT_SWEEP_S)


def _lower_weight_at_finish(on_event: OnEvent | None, weigh: Callable[[int | None], int],
                            pending: list[asyncio.Future[Any]]) -> OnEvent:
    """``on_event`` that also lowers the territories to :data:`DONE_CPU_WEIGHT` (in a worker
    thread, its future appended to ``pending``) once the match has finished: its result is
    set, the drain and the teardown go on behind the heats still racing."""
    def forward(record: Any, world: WorldState) -> None:
        if record.event.kind == "match_finished":
            with contextlib.suppress(RuntimeError):  # no loop: nothing to lower from here
                pending.append(asyncio.get_running_loop().run_in_executor(None, weigh, DONE_CPU_WEIGHT))
        if on_event is not None:
            on_event(record, world)
    return forward


async def _forward_abort(abort_event: asyncio.Event, supervisor: HeatSupervisor) -> None:
    await abort_event.wait()
    supervisor.abort()
