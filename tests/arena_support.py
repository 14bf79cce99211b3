"""Helpers for the arena tests: real container territories of an arena, and real heats.

* :func:`booted_territories` — ``async with`` context: the first ``count`` territories of
  an arena's manifest, booted as systemd-nspawn containers on the arena's image layer
  (built on first use and cached), torn down on exit;
* :func:`guest` — run a bash command as root in a territory over SSH;
* :func:`reboot` — reboot a territory as the referee does (spec §3.4);
* :func:`run_heat` — one whole heat through :func:`aoe_tui.referee.heat.run_heat` on
  container territories, agent specs seat by seat; returns the final world;
* small helpers the arena tests share: :func:`http` (the public endpoint as the referee
  sees it), :func:`sh` / :func:`show` / :func:`unit_states` (guest commands and units),
  :func:`deploy` (a built-in builder script), :func:`verify` / :func:`passed_view` (one
  verifier run as the referee runs it), :func:`parse_state` and :func:`events_of`.

Nothing here is a fake: territories, SSH, verifiers and agents are the real ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest

from aoe_tui.domain.arena import LoadedManifest, load_manifest
from aoe_tui.domain.world import WorldState
from aoe_tui.runtime.provider import Territory

REPO = Path(__file__).resolve().parent.parent
ARENAS = REPO / "arenas"

__all__ = ["ARENAS", "booted_territories", "deploy", "events_of", "guest", "http", "need_container_host",
           "parse_state", "passed_view", "reboot", "run_heat", "sh", "show", "unit_states", "verify"]


def need_container_host() -> None:
    """Skip (fail on CI, see conftest) when this host cannot run container territories."""
    if os.geteuid() != 0:
        pytest.skip("container territories need root")
    if shutil.which("systemd-nspawn") is None:
        pytest.skip("systemd-nspawn not installed (apt-get install systemd-container)")


def _loaded(arena_dir: Path) -> LoadedManifest:
    arena_dir = Path(arena_dir)
    return load_manifest(arena_dir / "arena.toml" if arena_dir.is_dir() else arena_dir)


@contextlib.asynccontextmanager
async def booted_territories(arena_dir: Path, workdir: Path, count: int = 1) -> AsyncIterator[list[Territory]]:
    """Boot the manifest's first ``count`` territories of ``arena_dir`` (ids, passwords
    ``<id>-race`` and seat indexes as in a heat) on the arena's image; yield them."""
    from aoe_tui.referee.heat import territory_specs
    from aoe_tui.runtime.container import ContainerProvider
    from aoe_tui.runtime.layers import image_for_arena

    need_container_host()
    loaded = _loaded(arena_dir)
    image = await asyncio.to_thread(image_for_arena, loaded.arena_dir)
    provider = ContainerProvider(Path(workdir), image=image, cidr=loaded.manifest.network.cidr,
                                 heat_id=f"test-{loaded.arena_dir.name}-{os.getpid()}-{id(workdir) % 10000}")
    try:
        territories = await provider.provision(territory_specs(loaded)[:count])
        for t in territories:
            t.extra["test_provider"] = provider
        yield territories
    finally:
        await provider.teardown()


async def guest(territory: Territory, command: str, input: str | None = None,
                timeout_s: float = 60) -> tuple[int | None, str, str]:
    """Run ``command`` with bash as root in ``territory``; ``(exit_status, stdout, stderr)``."""
    import shlex

    import asyncssh

    from aoe_tui.runtime.ssh import connect

    conn = await connect(territory.host, territory.ssh_port, territory.password, connect_timeout_s=10)
    try:
        res = await asyncio.wait_for(conn.run(f"bash -c {shlex.quote(command)}", input=input, check=False),
                                     timeout_s)
    except asyncssh.Error as err:
        raise AssertionError(f"ssh to {territory.id} failed: {err}") from None
    finally:
        conn.close()
    return res.exit_status, str(res.stdout or ""), str(res.stderr or "")


async def reboot(territory: Territory) -> None:
    """Reboot ``territory`` the way the referee does (guest ``systemctl reboot``, wait for SSH)."""
    await territory.extra["test_provider"].reboot(territory)  # type: ignore[attr-defined]


def run_heat(arena_dir: Path, out_dir: Path, agents: Sequence[str] = ("oracle",), *,
             duration_s: float | None = None, drain_s: float = 5.0, on_event=None) -> WorldState:
    """Run one real heat of ``arena_dir`` on container territories into ``out_dir``.

    ``agents`` are agent specs (``oracle``, ``scripted:NAME``, ``command:PATH``) or ready
    :class:`~aoe_tui.agents.base.Adapter` objects: one for every seat, or one per seat in
    manifest territory order. ``on_event(record, world)``: called after each event (in the
    heat's loop). Returns the final world.
    """
    from aoe_tui.commands.match import build_adapters
    from aoe_tui.referee.heat import run_heat as run_one_heat
    from aoe_tui.runtime.container import ContainerProvider
    from aoe_tui.runtime.layers import image_for_arena

    need_container_host()
    loaded = _loaded(arena_dir)
    if all(isinstance(a, str) for a in agents):
        adapters = build_adapters(loaded, list(agents), {})
    else:
        seats = [loaded.manifest.agent_for(t.id) for t in loaded.manifest.territories]
        given = list(agents) * len(seats) if len(agents) == 1 else list(agents)
        adapters = {agent.id: (build_adapters(loaded, [a], {})[agent.id] if isinstance(a, str) else a)
                    for agent, a in zip(seats, given)}
    image = image_for_arena(loaded.arena_dir)
    provider = ContainerProvider(Path(out_dir) / "territories", image=image, cidr=loaded.manifest.network.cidr)
    return asyncio.run(run_one_heat(loaded, provider, adapters, Path(out_dir), drain_seconds=drain_s,
                                 duration_s=duration_s, on_event=on_event))


# ----------------------------------------------------------------------- small shared helpers


def http(t: Territory, method: str, path: str, body: bytes | None = None,
         timeout: float = 5) -> tuple[int, bytes]:
    """One request from the host to ``t``'s public endpoint, ``timeout`` in s; ``(status, body)``."""
    req = urllib.request.Request(f"http://{t.host}:{t.service_port}{path}", data=body, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


async def sh(t: Territory, command: str, input: str | None = None, timeout_s: float = 60) -> str:
    """Run ``command`` in the guest within ``timeout_s`` s; assert it exits 0; return its stdout."""
    status, out, err = await guest(t, command, input=input, timeout_s=timeout_s)
    assert status == 0, f"{command!r} on {t.id} exited {status}: {err.strip()}"
    return out


async def show(t: Territory, unit: str, *props: str) -> dict[str, str]:
    """``systemctl show -p PROP…`` of ``unit`` as a dict (durations as systemd prints them: ``1s``)."""
    out = await sh(t, f"systemctl show {unit} " + " ".join(f"-p {p}" for p in props))
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


async def unit_states(t: Territory, units: Iterable[str]) -> dict[str, tuple[str, str]]:
    """``unit -> (ActiveState, SubState)`` for each of ``units`` in the guest (states, no times)."""
    out = {}
    for u in units:
        p = await show(t, u, "ActiveState", "SubState")
        out[u] = (p["ActiveState"], p["SubState"])
    return out


async def deploy(arena_dir: Path, t: Territory, builder: str, timeout_s: float = 60) -> str:
    """Run ``<arena_dir>/adapters/builders/<builder>.sh`` in ``t`` within ``timeout_s`` s; assert exit 0; stdout.
    Without that file, a fault ``builder`` that ``oracle.sh`` declares runs as ``scripted:`` runs it:
    ``oracle.sh`` after a first line ``AOE_FAULT=<builder>``."""
    from aoe_tui.agents.scripted import FAULT_VARIABLE, builder_faults

    builders = Path(arena_dir) / "adapters" / "builders"
    if (builders / f"{builder}.sh").is_file():
        script = (builders / f"{builder}.sh").read_text()
    else:
        assert builder in builder_faults(builders / "oracle.sh"), f"{builders}/oracle.sh declares no fault {builder}"
        script = f"{FAULT_VARIABLE}={builder}\n" + (builders / "oracle.sh").read_text()
    status, out, err = await guest(t, "bash -s", input=script, timeout_s=timeout_s)
    assert status == 0, f"builder {builder} failed: {err.strip()}"
    return out


async def verify(arena_dir: Path, t: Territory, milestone: str, evidence_dir: Path,
                 previous: dict[str, Any] | None = None):
    """Run ``milestone``'s verifier from ``arena_dir``'s manifest on ``t`` within its ``timeout_seconds`` (s)."""
    from aoe_tui.referee.verifier import run_verifier

    loaded = _loaded(arena_dir)
    ms = loaded.manifest.milestone(milestone)
    assert ms is not None, f"{loaded.arena_dir.name} has no milestone {milestone!r}"
    return await run_verifier(
        loaded.verifier_path(ms), territory_id=t.id, milestone_id=milestone, host=t.host,
        ssh_port=t.ssh_port, service_port=t.service_port, credential_file=t.credential_file,
        evidence_dir=evidence_dir, previous=previous or {}, timeout_s=ms.timeout_seconds,
    )


def passed_view(evidence: Any) -> dict[str, Any]:
    """The referee's view of a passed milestone with ``evidence``, for a verifier's ``previous`` (no times)."""
    return {"evaluating": False, "passed": True, "points": 0, "evidence": evidence,
            "failure_category": None, "failure_detail": None}


def parse_state(text: str) -> dict[str, list[str]]:
    """A state script's lines ``KEY REST`` as ``KEY -> [REST, ...]``, in order (no times)."""
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(" ")
        out.setdefault(key, []).append(rest)
    return out


def events_of(out: Path) -> list[dict[str, Any]]:
    """The events of the heat run into ``out`` (``events.jsonl``; their times are ms on the match clock)."""
    return [json.loads(line) for line in (Path(out) / "events.jsonl").read_text().splitlines() if line.strip()]
