"""Helpers for the arena tests: real container territories of an arena, and real heats.

* :func:`booted_territories` — ``async with`` context: the first ``count`` territories of
  an arena's manifest, booted as systemd-nspawn containers on the arena's image layer
  (built on first use and cached), torn down on exit;
* :func:`guest` — run a bash command as root in a territory over SSH;
* :func:`reboot` — reboot a territory as the referee does (spec §3.4);
* :func:`run_heat` — one whole heat through :func:`aoe_tui.referee.match.run_match` on
  container territories, agent specs seat by seat; returns the final world.

Nothing here is a fake: territories, SSH, verifiers and agents are the real ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from aoe_tui.domain.arena import LoadedManifest, load_manifest
from aoe_tui.domain.world import WorldState
from aoe_tui.runtime.provider import Territory

REPO = Path(__file__).resolve().parent.parent
ARENAS = REPO / "arenas"

__all__ = ["ARENAS", "booted_territories", "guest", "need_container_host", "reboot", "run_heat"]


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
    from aoe_tui.referee.match import territory_specs
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
             duration_s: float | None = None, drain_s: float = 5.0) -> WorldState:
    """Run one real heat of ``arena_dir`` on container territories into ``out_dir``.

    ``agents`` are agent specs (``oracle``, ``scripted:NAME``, ``command:PATH``) or ready
    :class:`~aoe_tui.agents.base.Adapter` objects: one for every seat, or one per seat in
    manifest territory order. Returns the final world.
    """
    from aoe_tui.commands.match import build_adapters
    from aoe_tui.referee.match import run_match
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
    return asyncio.run(run_match(loaded, provider, adapters, Path(out_dir), drain_seconds=drain_s,
                                 duration_s=duration_s))
