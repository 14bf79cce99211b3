"""Integration tests of the heat supervisor (spec §3) with a fake provider and fake adapters.

The rules alone (no processes, no clock) are tested in ``tests/test_rules.py``; here
the supervision is: verifiers are real processes (tiny shell scripts) that pass once a per-territory
flag file exists; fake agents create those flags on a schedule and write real
``usage.json`` checkpoints. Everything the rules decide is checked in the real
``events.jsonl`` it writes, and ``world`` is compared with the log's reduction.
"""

from __future__ import annotations

import asyncio
import json
import textwrap
from collections.abc import Sequence
from pathlib import Path

import pytest

from aoe_tui.agents.base import AdapterStatus, Adapter, AgentContext, AgentOutcome, AgentRun, Staged
from aoe_tui.domain.agent_usage import Usage
from aoe_tui.domain.arena import load_manifest
from aoe_tui.domain.world import world_json
from aoe_tui.referee.supervisor import HeatSupervisor
from aoe_tui.replay.log import EventLogWriter, read_events
from aoe_tui.replay.reducer import reduce_match
from aoe_tui.runtime.provider import (
    ProvisionError,
    RebootError,
    Territory,
    TerritoryProvider,
    TerritoryRefusedError,
    TerritorySpec,
)

MILESTONES = ["service-up", "write-read", "service-restart", "host-reboot"]
SEATS = ["builder-one", "builder-two", "builder-three"]


def write_arena(root: Path, *, duration=20, tick_ms=100, stop_on_first_durable=True, timeouts=None) -> Path:
    """A first-build-shaped arena whose verifiers pass when ``$FAKE_STATE/<territory>/<milestone>`` exists.

    With ``$FAKE_STATE/<territory>/hang-<milestone>`` a verifier writes its evidence, then
    sleeps 60 s in a child (``pids-<milestone>``: the shell's and the sleep's pids) and would
    pass when it returned. ``timeouts``: milestone id → ``timeout_seconds`` (s, default 5)."""
    timeouts = timeouts or {}
    (root / "verify").mkdir(parents=True)
    for m in MILESTONES:
        v = root / "verify" / f"{m}.sh"
        v.write_text(
            "#!/bin/sh\n"
            'm=$(basename "$0" .sh)\n'
            'if [ -f "$FAKE_STATE/$AOE_TERRITORY_ID/hang-$m" ]; then\n'
            '  echo \'{"hung":true}\' > "$AOE_EVIDENCE_FILE"; sleep 60 & echo "$$ $!" > "$FAKE_STATE/$AOE_TERRITORY_ID/pids-$m"\n'
            '  wait; exit 0\n'
            'fi\n'
            'if [ -f "$FAKE_STATE/$AOE_TERRITORY_ID/$m" ]; then\n'
            '  printf \'{"milestone":"%s","seen":%s}\' "$m" "$(cat "$AOE_PREVIOUS_EVIDENCE" | tr -d "\\n ")" > "$AOE_EVIDENCE_FILE"; exit 0\n'
            "fi\n"
            'echo "  $m not ready on $AOE_TERRITORY_ID  " >&2; exit 1\n'
        )
        v.chmod(0o755)
    ms = []
    prev = None
    for m, pts in zip(MILESTONES, [10, 20, 30, 40]):
        block = f'[[build.milestones]]\nid = "{m}"\ndisplay_name = "{m}"\nverifier = "verify/{m}.sh"\n'
        block += f"timeout_seconds = {timeouts.get(m, 5)}\npoints = {pts}\n"
        if prev:
            block += f'depends_on = ["{prev}"]\n'
        if m == "host-reboot":
            block += 'operation = "host_reboot"\n'
        ms.append(block)
        prev = m
    terr = "".join(
        textwrap.dedent(
            f"""
            [[territories]]
            id = "{t}"
            class = "builder"
            nixos_config = ".#nixosConfigurations.{t}.config.system.build.vm"
            [territories.service]
            port = 8080
            path = "/health"
            expected_status = 200
            expected_body = "ready"
            [territories.service.health]
            poll_interval_ms = 1000
            consecutive_failures = 3
            recovery_window_seconds = 10
            """
        )
        for t in SEATS
    )
    agents = "".join(
        f'\n[[agents]]\nid = "{t}-agent"\nterritory = "{t}"\nadapter = "fake"\nmodel = "fake-model"\n'
        f"[agents.budget]\nresource_units = 100\n"
        for t in SEATS
    )
    text = (
        "schema_version = 1\n\n[arena]\nid = \"fake-build\"\ndisplay_name = \"Fake Build\"\nmode = \"build_race\"\n\n"
        '[network]\ncidr = "10.78.0.0/24"\n\n'
        f"[rules]\nduration_seconds = {duration}\ntick_ms = {tick_ms}\nhealthy_resources_per_tick = 0\nminimum_territories = 2\n\n"
        f'[build]\nstop_on_first_durable = {"true" if stop_on_first_durable else "false"}\ncompletion_milestone = "host-reboot"\n\n'
        + "\n".join(ms)
        + '\n[[classes]]\nid = "builder"\ndisplay_name = "Builder"\n[classes.resources]\nvcpus = 1\nmemory_mib = 768\ndisk_mib = 2048\n'
        + terr
        + agents
    )
    (root / "arena.toml").write_text(text)
    return root / "arena.toml"


class FakeProvider(TerritoryProvider):
    name = "fake"

    def __init__(self, state: Path, fail_reboot: set[str] = frozenset(), reboot_s: float = 0.05,
                 refuse_reboot: set[str] = frozenset(), exhausted: dict[str, list[str]] | None = None,
                 exhausted_before: dict[str, list[str]] | None = None, hang_reboot: set[str] = frozenset(),
                 ssh_ports: dict[str, int] | None = None) -> None:
        self.state = state
        #: territory id → the port of a real SSH server standing in for its sshd (default 2200 + seat index)
        self.ssh_ports = dict(ssh_ports or {})
        #: territory id → the limits it "ran into" (provider.exhaustion) once the race is on
        #: (:attr:`race_on`, set by :func:`supervise` at the first event)
        self.exhausted = dict(exhausted or {})
        #: ... and those it had run into before the clock (its boot, staging)
        self.exhausted_before = dict(exhausted_before or {})
        self.race_on = False
        self.hang_reboot = set(hang_reboot)
        self.fail_reboot = set(fail_reboot)
        self.refuse_reboot = set(refuse_reboot)
        self.reboot_s = reboot_s
        self.reboots: list[str] = []

    async def provision(self, specs: Sequence[TerritorySpec]) -> list[Territory]:
        out = []
        for s in specs:
            cred = self.state / f"{s.id}.env"
            cred.write_text("AOE_SSH_PASSWORD=x\n")
            (self.state / s.id).mkdir(parents=True, exist_ok=True)
            out.append(Territory(s.id, "127.0.0.1", self.ssh_ports.get(s.id, 2200 + s.index), 8080, s.password, cred))
        return out

    async def reboot(self, territory: Territory) -> None:
        self.reboots.append(territory.id)
        await asyncio.sleep(self.reboot_s)
        if territory.id in self.fail_reboot:
            raise RebootError(f"{territory.id}: SSH unavailable after reboot")
        if territory.id in self.hang_reboot:
            await asyncio.sleep(3600)
        if territory.id in self.refuse_reboot:
            raise TerritoryRefusedError(f"territory {territory.id} refused the referee after the reboot: "
                                        "the SSH server on port 22 refused the root password login")
        # a "volatile" build loses its reboot flag: only survives if marked durable
        if (self.state / territory.id / "volatile").exists():
            (self.state / territory.id / "host-reboot").unlink(missing_ok=True)

    def exhaustion(self, territory_id: str) -> list[str]:
        return [*self.exhausted_before.get(territory_id, []),
                *(self.exhausted.get(territory_id, []) if self.race_on else [])]

    async def teardown(self) -> None:
        pass


class FakeRun(AgentRun):
    def __init__(self, ctx: AgentContext, plan: dict) -> None:
        super().__init__(ctx)
        self.plan = plan
        self.stopped = asyncio.Event()
        self.task = asyncio.ensure_future(self._work())

    async def _work(self) -> AgentOutcome:
        state: Path = self.plan["state"] / self.ctx.territory.id
        if self.plan.get("crash"):
            return AgentOutcome(AdapterStatus.HARNESS_ERROR, "adapter exited with exit status: 1")
        if self.plan.get("unavailable"):
            return AgentOutcome(AdapterStatus.UNAVAILABLE, self.plan["unavailable"])
        await asyncio.sleep(self.plan.get("delay", 0))
        if self.plan.get("after") is not None:  # an asyncio.Event: build only once it is set
            after = asyncio.ensure_future(self.plan["after"].wait())
            stopped = asyncio.ensure_future(self.stopped.wait())
            await asyncio.wait({after, stopped}, return_when=asyncio.FIRST_COMPLETED)
            after.cancel()
            stopped.cancel()
            if not self.plan["after"].is_set():
                return AgentOutcome(AdapterStatus.FAILED, "killed")
        for i, (m, usage) in enumerate(self.plan.get("steps", [])):
            if m:
                (state / m).touch()
            if usage is not None:
                (self.ctx.agent_dir / "usage.json").write_text(
                    json.dumps(
                        {
                            "schema_version": 1,
                            "agent": self.ctx.agent.id,
                            "territory": self.ctx.territory.id,
                            "usage": usage,
                        }
                    )
                )
            self.activity.append(f"step {i}: {m}")
            await asyncio.sleep(self.plan.get("step_s", 0.05))
        if self.plan.get("volatile"):
            (state / "volatile").touch()
        if self.plan.get("forever"):
            await self.stopped.wait()
            return AgentOutcome(AdapterStatus.FAILED, "killed")
        return AgentOutcome(AdapterStatus.COMPLETED, self.plan.get("summary", "done"), Usage(**self.plan.get("final", {})))

    async def wait(self) -> AgentOutcome:
        return await asyncio.shield(self.task)

    async def stop(self) -> None:
        self.stopped.set()


class FakeStaged(Staged):
    """What a :class:`FakeAdapter` with ``stage`` in its plan staged; counts its closes."""

    def __init__(self, events_seen: str) -> None:
        self.events_seen = events_seen  # the event log as it was while staging
        self.closed = 0

    def detail(self):
        return {"harness": "fake"}

    async def close(self) -> None:
        self.closed += 1


class FakeAdapter(Adapter):
    name = "fake"

    def __init__(self, plan: dict) -> None:
        self.plan = plan
        self.staged: FakeStaged | None = None

    async def stage(self, ctx: AgentContext):
        """Plan keys: ``stage`` (stage a :class:`FakeStaged`), ``stage_error`` (raise),
        ``stage_hang`` (an ``asyncio.Event`` set once staging is under way; then wait forever)."""
        if self.plan.get("stage_error"):
            raise RuntimeError("no harness for this seat")
        if self.plan.get("stage_hang") is not None:
            self.staged = FakeStaged("")
            self.plan["stage_hang"].set()
            await asyncio.Event().wait()
        if not self.plan.get("stage"):
            return None
        assert ctx.instruction_file.read_text() == f"build on {ctx.territory.id}"  # written before staging
        self.staged = FakeStaged((ctx.agent_dir.parent.parent / "events.jsonl").read_text())
        return self.staged

    def stage_timeout_s(self):
        return self.plan.get("stage_timeout_s")

    async def start(self, ctx: AgentContext) -> AgentRun:
        if self.plan.get("start_error"):
            raise RuntimeError("no such binary: fake-agent")
        assert ctx.instruction_file.read_text() == f"build on {ctx.territory.id}"
        assert ctx.staged is self.staged and ctx.clock_started is not None
        return FakeRun(ctx, self.plan)


ALL = [(m, None) for m in MILESTONES]


async def supervise(tmp_path, plans, *, provider_kw=None, arena_kw=None, drain=1.0, abort_after=None, conc=4, duration=None,
                    sup_kw=None,
                    on_event=None, adapters=None, keep=None):
    """Run one heat of the fake arena; ``plans``: one :class:`FakeRun` plan per seat (keys
    ``steps``, ``delay``, ``after``, ...); ``on_event(record, world)``: also called after
    every event. Returns ``(world, records, match folder, provider)``."""
    state = tmp_path / "state"
    state.mkdir()
    manifest = write_arena(tmp_path / "arena", **(arena_kw or {}))
    loaded = load_manifest(manifest)
    provider = FakeProvider(state, **(provider_kw or {}))
    specs = [TerritorySpec(t.id, f"{t.id}-race", 8080, i) for i, t in enumerate(loaded.manifest.territories)]
    territories = await provider.provision(specs)
    adapters = {f"{t}-agent": FakeAdapter({"state": state, **plan}) for t, plan in zip(SEATS, plans)} | (adapters or {})
    out = tmp_path / "match"
    out.mkdir()
    log = EventLogWriter(out / "events.jsonl")
    seen = []

    def note(rec, world):
        provider.race_on = True  # the clock has started: FakeProvider's ``exhausted`` count from here
        seen.append(rec.sequence)
        if on_event is not None:
            on_event(rec, world)

    ref = HeatSupervisor(
        loaded,
        territories,
        provider,
        adapters,
        out,
        log,
        drain_seconds=drain,
        verifier_concurrency=conc,
        duration_s=duration,
        instruction_builder=lambda _l, tid: f"build on {tid}",
        on_event=note,
        **(sup_kw or {}),
    )
    import os

    os.environ["FAKE_STATE"] = str(state)
    if abort_after is not None:  # s on the match clock (which starts inside run(), after setup)

        async def abort_later():
            while "clock_started_unix" not in ref.timings:
                await asyncio.sleep(0.005)
            await asyncio.sleep(abort_after)
            ref.abort()

        aborter = asyncio.ensure_future(abort_later())
    if keep is not None:  # the caller's view of the supervisor and its adapters
        keep.update(supervisor=ref, adapters=adapters)
    world = await ref.run()
    if abort_after is not None:
        aborter.cancel()
    log.close()
    records = read_events(out / "events.jsonl")
    assert seen == list(range(len(records)))
    assert world_json(world) == world_json(reduce_match(records))
    return world, records, out, provider


def kinds(records, kind):
    return [r for r in records if r.event.kind == kind]


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    monkeypatch.delenv("FAKE_STATE", raising=False)


async def test_first_durable_heat(tmp_path):
    oracle = {"steps": [(m, {"input_tokens": 10 * (i + 1), "output_tokens": 5, "resource_units": 1}) for i, m in enumerate(MILESTONES)]}
    memory = {"steps": [("service-up", None), ("write-read", None)], "forever": True}
    volatile = {"delay": 0.4, "steps": ALL, "volatile": True}
    world, records, out, provider = await supervise(tmp_path, [oracle, memory, volatile])

    # canonical start (§2.2), all at 0
    head = [(r.event.kind, getattr(r.event, "agent", None) if r.event.kind == "agent_started" else getattr(r.event, "territory", None)) for r in records[:10]]
    assert head == [
        ("match_state_changed", None),
        ("competitor_state_changed", "builder-one"),
        ("competitor_state_changed", "builder-three"),
        ("competitor_state_changed", "builder-two"),
        ("territory_registered", "builder-one"),
        ("territory_registered", "builder-two"),
        ("territory_registered", "builder-three"),
        ("agent_started", "builder-one-agent"),
        ("agent_started", "builder-two-agent"),
        ("agent_started", "builder-three-agent"),
    ]
    assert all(r.elapsed_ms == 0 for r in records[:10])
    assert [r.elapsed_ms for r in records] == sorted(r.elapsed_ms for r in records)
    assert [r.sequence for r in records] == list(range(len(records)))

    assert world.match_state == "finished" and world.winner == "builder-one"
    assert world.finish_reason == "first durable deployment"
    t1 = world.territories["builder-one"]
    assert t1.competitor_state == "durable" and t1.milestone_points == 100
    # finish order (§2.2)
    i = next(i for i, r in enumerate(records) if r.event.kind == "durable_deployment_completed")
    seq = [r.event.kind for r in records[i - 2 : i + 3]]
    assert seq == [
        "milestone_passed",
        "competitor_state_changed",
        "durable_deployment_completed",
        "match_state_changed",
        "match_finished",
    ]
    assert records[i].event.elapsed_ms == records[i].elapsed_ms == t1.durable_at_ms
    frozen = records[i].elapsed_ms
    assert all(r.elapsed_ms == frozen for r in records[i:])
    assert t1.durable_at_ms < 3000  # checks start at the first tick (100 ms)

    # memory never passes service-restart; it is an outraced, incomplete competitor
    t2 = world.territories["builder-two"]
    assert {k for k, v in t2.milestones.items() if v.passed} == {"service-up", "write-read"}
    assert t2.milestones["service-restart"].failure_detail == "service-restart not ready on builder-two"
    assert t2.competitor_state == "incomplete"
    # drain: losers outraced, memory (still running) stopped, counted as terminated
    drain = [r.event for r in records if r.event.kind.startswith("post_match_drain") or r.event.kind == "agent_outraced"]
    assert drain[0].kind == "post_match_drain_started" and drain[0].timeout_ms == 1000
    assert [e.agent for e in drain if e.kind == "agent_outraced"] == ["builder-two-agent", "builder-three-agent"]
    assert drain[-1].kind == "post_match_drain_finished"
    for a in ("builder-two-agent", "builder-three-agent"):
        assert world.agents[a].terminal_state == "incomplete" and not world.agents[a].running
        assert world.agents[a].terminal_detail == "builder-one reached durable first; build ended at the frozen clock"
    # the oracle's result arrived during the match and was recorded then
    fin = [r for r in kinds(records, "agent_finished") if r.event.agent == "builder-one-agent"]
    assert len(fin) == 1 and fin[0].event.source == "player" and fin[0].event.success
    # usage: cumulative checkpoints -> deltas summing to the max
    a1 = world.agents["builder-one-agent"]
    assert (a1.input_tokens, a1.output_tokens, a1.resource_units_used) == (40, 5, 1)
    for r in kinds(records, "usage_charged"):
        e = r.event
        assert e.resource_units or e.input_tokens or e.output_tokens or e.cost_microusd
    # evidence chaining: previous.json was the territory's milestone map incl. the current one
    ev = json.loads((out / "evidence" / "builder-one" / "write-read.json").read_text())
    assert ev["seen"]["write-read"]["evaluating"] is True
    assert ev["seen"]["service-up"]["passed"] is True
    assert (out / "agents" / "builder-one-agent" / "referee-reboot").read_text() == "host-reboot"
    assert (out / "agents" / "builder-one-agent" / "instruction.md").read_text() == "build on builder-one"
    assert "builder-one" in provider.reboots


async def test_timer_expiry_standings_and_tie(tmp_path):
    memory = {"steps": [("service-up", None), ("write-read", None)]}
    world, records, _, _ = await supervise(
        tmp_path, [memory, memory, {"steps": [("service-up", None)]}], duration=2
    )
    assert world.finish_reason == "match timer expired"
    assert world.winner is None  # builder-one and builder-two tie on (None, 30, 2)
    assert kinds(records, "post_match_drain_started")[0].event.pending_agents == 0
    assert not kinds(records, "agent_outraced")
    ends = {r.event.territory: r.event.to for r in kinds(records, "competitor_state_changed") if r.event.to in ("incomplete", "unavailable")}
    assert ends == {t: "incomplete" for t in SEATS}
    assert records[-1].event.kind == "post_match_drain_finished"


async def test_expire_timer_ends_the_heat_as_its_deadline_does(tmp_path):
    """``HeatSupervisor.expire_timer`` (a heat ended on a state, not a guessed clock): the
    build phase ends at once exactly as at the deadline — "match timer expired", the §3.6
    winner by points, then the drain — long before the manifest's 600 s."""
    keep: dict = {}

    def on_event(rec, world):
        three = world.territories.get("builder-three")
        if three is not None and len([m for m in three.milestones.values() if m.passed]) == 3:
            keep["supervisor"].expire_timer()

    world, records, _, _ = await supervise(
        tmp_path, [{"steps": [("service-up", None)]}, {"steps": [("service-up", None)]},
                   {"steps": ALL[:3], "forever": True}],
        duration=600, on_event=on_event, keep=keep)
    assert world.finish_reason == "match timer expired" and world.winner == "builder-three"
    assert world.elapsed_ms < 60_000
    assert records[-1].event.kind == "post_match_drain_finished"


async def test_timer_winner_by_points(tmp_path):
    world, _, _, _ = await supervise(
        tmp_path,
        [{"steps": [("service-up", None)]}, {"steps": ALL[:3]}, {}],
        duration=2,
    )
    assert world.winner == "builder-two" and world.finish_reason == "match timer expired"


async def test_reboot_failure_is_infrastructure_failure(tmp_path):
    plan = {"steps": ALL}
    world, records, _, provider = await supervise(
        tmp_path,
        [plan, {}, {}],
        provider_kw={"fail_reboot": {"builder-one"}},
        duration=3,
    )
    infra = kinds(records, "infrastructure_failure")
    assert len(infra) == 1
    e = infra[0].event
    assert (e.component, e.source) == ("territory:builder-one", "arena")
    assert "SSH unavailable after reboot" in e.detail
    assert world.infrastructure_failures == 1
    t1 = world.territories["builder-one"]
    assert t1.competitor_state == "unavailable" and not t1.milestones["host-reboot"].evaluating
    assert provider.reboots.count("builder-one") == 1  # never retried
    assert world.finish_reason == "match timer expired" and world.winner == "builder-one"  # 60 points lead


async def test_reboot_lockout_is_the_players_failure(tmp_path):
    """Issue #17: a territory that came back from the referee's reboot but refuses the referee
    (the provider says so with TerritoryRefusedError) fails the milestone as a verification,
    charged to that seat alone: no infrastructure failure, so the season does not re-run the
    heat and the other seats' results stand.

    Seat two starts building only once seat one's lockout is in the log: the rules do not
    order two seats' checks, and a refused reboot still under way when seat two finishes
    the heat earns nothing (rules, phase 3), so racing them would make the test a coin toss.
    ``duration`` is only a backstop: the heat ends at seat two's durable pass."""
    from aoe_tui.season.attempts import judge_attempt

    refused = asyncio.Event()

    def watch(rec, _world):
        e = rec.event
        if e.kind == "milestone_failed" and (e.territory, e.milestone) == ("builder-one", "host-reboot"):
            refused.set()

    world, records, _, provider = await supervise(
        tmp_path,
        [{"steps": ALL}, {"steps": ALL, "after": refused}, {}],
        provider_kw={"refuse_reboot": {"builder-one"}},
        on_event=watch,
        duration=20,
    )
    assert not kinds(records, "infrastructure_failure") and world.infrastructure_failures == 0
    fails = [r.event for r in kinds(records, "milestone_failed") if r.event.territory == "builder-one"]
    lockouts = [f for f in fails if f.milestone == "host-reboot"]
    # a tick may check an earlier milestone before the agent's step made it ready: any
    # failure of seat one is a retryable verification; the lockouts say why
    assert lockouts and {(f.category, f.retryable) for f in fails} == {("verification_failed", True)}
    assert all("refused the referee after the reboot" in f.detail for f in lockouts)
    t1, t2 = world.territories["builder-one"], world.territories["builder-two"]
    assert not t1.milestones["host-reboot"].passed and t1.competitor_state != "unavailable"
    assert t2.milestones["host-reboot"].passed and t2.competitor_state == "durable"
    assert world.winner == "builder-two" and world.finish_reason == "first durable deployment"
    assert provider.reboots.count("builder-one") >= 1 and "builder-two" in provider.reboots
    assert not judge_attempt(world, records).spoiled


@pytest.mark.parametrize("login", ["refused", "works"])
async def test_a_lockout_is_not_rebooted_again_while_it_stands(tmp_path, login):
    """A territory that came back from the referee's reboot refusing it cannot be asked to
    reboot again: while a root login to it still fails (a real SSH server on its port that
    refuses the password), each later tick fails the ``host_reboot`` milestone at once, saying
    the lockout stands, without another reboot (which would wait ``reboot_timeout_s`` for a
    reboot nobody could ask and call the player's lockout an infrastructure failure). Once the
    login works again (the player repaired it), the milestone reboots the territory as before."""
    from tests.ssh_support import password_server

    server, port = await password_server(lambda _u, pw: login == "works" and pw == "builder-one-race",
                                         process_factory=lambda proc: proc.exit(0))
    try:
        world, records, _, provider = await supervise(
            tmp_path, [{"steps": ALL}, {}, {}],
            provider_kw={"refuse_reboot": {"builder-one"}, "ssh_ports": {"builder-one": port}},
            duration=4,
        )
    finally:
        server.close()
    assert not kinds(records, "infrastructure_failure")
    lockouts = [r.event.detail for r in kinds(records, "milestone_failed")
                if (r.event.territory, r.event.milestone) == ("builder-one", "host-reboot")]
    assert len(lockouts) >= 3 and "refused the referee after the reboot" in lockouts[0]
    if login == "refused":
        assert provider.reboots.count("builder-one") == 1
        assert all(d.startswith(f"territory builder-one still has no root SSH login for the referee on "
                                f"127.0.0.1:{port}, so it was not rebooted again; the last reboot: territory "
                                "builder-one refused the referee after the reboot") for d in lockouts[1:])
    else:
        # every lockout had its reboot; one more may have been under way at the finish (it earns nothing)
        assert len(lockouts) <= provider.reboots.count("builder-one") <= len(lockouts) + 1
        assert all("refused the referee after the reboot" in d for d in lockouts)


async def test_hung_verifier_does_not_delay_other_seats(tmp_path):
    """Seat one's service-up verifier hangs (60 s; its timeout outlasts the heat) and holds
    one of the pool's two slots the whole heat; seat two still passes its four milestones
    meanwhile, and its durable pass ends the heat. Stated as an order, not a wall-clock
    bound (every check is slower on a loaded machine): a referee that waited for the hung
    check, or a pool it blocked, would leave seat two short of durable until the 30 s
    timer, with seat one's check ended at its timeout. Seat two starts building once seat
    one's hanging check has started (the rules do not order two seats' first ticks)."""
    hung = asyncio.Event()

    def watch(rec, _world):
        e = rec.event
        if e.kind == "milestone_evaluation_started" and e.territory == "builder-one" and \
                (tmp_path / "state" / "builder-one" / "hang-service-up").exists():
            hung.set()

    hang = {"steps": [("hang-service-up", None)]}
    fast = {"steps": ALL, "after": hung}
    world, records, _, _ = await supervise(
        tmp_path, [hang, fast, {}], arena_kw={"duration": 30, "timeouts": {"service-up": 30}}, conc=2,
        on_event=watch,
    )
    assert world.winner == "builder-two" and world.finish_reason == "first durable deployment"
    durable = world.territories["builder-two"].durable_at_ms
    # builder-one's hung check was in flight from before two's durable pass to the finish
    # (a tick before the agent's first step may have failed once)
    one = [r for r in records if getattr(r.event, "territory", None) == "builder-one"
           and r.event.kind.startswith("milestone_")]
    assert one and one[-1].event.kind == "milestone_evaluation_started" and one[-1].elapsed_ms < durable
    assert not [r for r in one if r.event.kind == "milestone_passed"]
    assert world.territories["builder-one"].milestones["service-up"].evaluating
    print(f"builder-two durable at {durable} ms while builder-one's check (started at {one[-1].elapsed_ms} ms) hung")


def _proc_state(pid: int) -> str | None:
    """``pid``'s state letter from ``/proc`` (``Z`` zombie, ...), None when it no longer exists."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[0]


async def test_deadline_kills_the_in_flight_verifier_and_finishes_on_time(tmp_path):
    """Issue #18 item 3: a 12 s heat; builder-one's verifier (timeout 12 s) starts at about
    9 s and sleeps. The match finishes at the deadline plus at most one tick (not at ~21 s),
    the verifier's process group is killed and reaped, it earns nothing, and the drain
    starts from the frozen clock."""
    tick_ms = 100
    hang_at_9s = {"delay": 8.9, "steps": [("hang-service-up", None)]}
    world, records, out, _ = await supervise(
        tmp_path, [hang_at_9s, {"steps": ALL[:2]}, {}],
        arena_kw={"duration": 12, "tick_ms": tick_ms, "timeouts": {"service-up": 12}},
    )
    fin = kinds(records, "match_finished")
    assert len(fin) == 1 and fin[0].event.reason == "match timer expired"
    assert 12_000 <= fin[0].elapsed_ms <= 12_000 + tick_ms
    assert world.winner == "builder-two"
    # builder-one's last check started at about 9 s and was still running at the finish
    one = [r for r in records if getattr(r.event, "territory", None) == "builder-one"
           and r.event.kind.startswith("milestone_")]
    last = one[-1]
    assert last.event.kind == "milestone_evaluation_started" and 8_900 <= last.elapsed_ms < 10_000
    assert all(r.event.kind == "milestone_failed" for r in one[:-1] if r.event.kind != "milestone_evaluation_started")
    assert not [r for r in one if r.event.kind == "milestone_passed"]
    view = world.territories["builder-one"].milestones["service-up"]
    assert view.evaluating and not view.passed and view.evidence is None
    assert world.territories["builder-one"].milestone_points == 0
    assert not (out / "evidence" / "builder-one" / "service-up.json").exists()  # nothing credited
    # killed with its process group: the verifier (our child) reaped, its sleeping child
    # dead (reparented to init, which reaps it in its own time)
    shell, child = (int(p) for p in (tmp_path / "state" / "builder-one" / "pids-service-up").read_text().split())
    for _ in range(50):
        if _proc_state(shell) is None and _proc_state(child) in (None, "Z", "X"):
            break
        await asyncio.sleep(0.02)
    assert _proc_state(shell) is None and _proc_state(child) in (None, "Z", "X")
    # the finish, then the drain, all at the frozen clock
    i = records.index(fin[0])
    assert [r.event.kind for r in records[i + 1 :]][0] == "post_match_drain_started"
    assert {r.elapsed_ms for r in records[i:]} == {fin[0].elapsed_ms}
    assert world.elapsed_ms == fin[0].elapsed_ms


async def test_agent_crash_is_harness_failure(tmp_path):
    world, records, _, _ = await supervise(
        tmp_path,
        [{"crash": True}, {"start_error": True}, {"steps": ALL[:1]}],
        duration=1,
    )
    a1, a2 = world.agents["builder-one-agent"], world.agents["builder-two-agent"]
    assert (a1.failure_source, a1.terminal_state, a1.successful) == ("harness", "failed", False)
    assert (a2.failure_source, a2.terminal_state) == ("harness", "failed")
    assert "failed to start: no such binary" in a2.terminal_detail
    ends = {r.event.territory: r.event.to for r in kinds(records, "competitor_state_changed") if r.event.to in ("incomplete", "unavailable")}
    assert ends == {"builder-one": "unavailable", "builder-two": "unavailable", "builder-three": "incomplete"}


async def test_seats_are_staged_before_the_clock_and_a_failed_staging_is_that_seats_harness_failure(tmp_path):
    """Issue 26 item 4: every seat is staged (instruction.md written first) before
    ``match_started``; what was staged reaches ``start`` through ``ctx.staged``, each seat's
    staging is timed for ``aoe-extra.json``, and a seat whose staging raised is a harness failure
    at the clock's start — before any check of the race — while the other seats race on."""
    keep: dict = {}
    world, records, _, _ = await supervise(
        tmp_path, [{"stage": True, "steps": ALL}, {"stage_error": True, "steps": ALL}, {"steps": ALL[:1]}], keep=keep)
    one, two, three = (keep["adapters"][f"{t}-agent"] for t in SEATS)
    assert one.staged is not None and "match_state_changed" not in one.staged.events_seen  # staged before the clock
    assert one.staged.closed == 0  # handed to the run, not released by the supervisor
    a2 = world.agents["builder-two-agent"]
    assert (a2.failure_source, a2.terminal_state) == ("harness", "failed")
    assert a2.terminal_detail == "adapter fake failed to stage: no harness for this seat"
    kinds_in_order = [r.event.kind for r in records]
    failed_at = next(i for i, r in enumerate(records) if r.event.kind == "agent_finished"
                     and r.event.agent == "builder-two-agent")
    assert "milestone_evaluation_started" not in kinds_in_order[:failed_at]  # at clock 0, before the race
    assert world.winner == "builder-one"  # the others raced
    extra = keep["supervisor"].extra()
    assert set(extra["timings"]["staging_s"]) == {f"{t}-agent" for t in SEATS}
    assert extra["agents"]["builder-one-agent"]["staging"]["harness"] == "fake"
    assert extra["agents"]["builder-two-agent"]["staging"]["error"] == "no harness for this seat"
    assert set(extra["agents"]["builder-three-agent"]["staging"]) == {"seconds"}


async def test_a_staging_past_its_adapters_bound_is_that_seats_harness_failure(tmp_path):
    """Review of issue 26 item 4: the backstop on a seat's staging is its adapter's
    ``stage_timeout_s()`` (the supervisor's ``STAGE_TIMEOUT_S`` when it gives none); a seat
    whose staging hangs past it is a harness failure at clock 0 while the others race."""
    from aoe_tui.referee.supervisor import STAGE_TIMEOUT_S, _stage_limit

    assert _stage_limit(object()) == STAGE_TIMEOUT_S == _stage_limit(FakeAdapter({}))
    keep: dict = {}
    world, _records, _, _ = await asyncio.wait_for(supervise(
        tmp_path, [{"stage": True, "steps": ALL}, {"stage_hang": asyncio.Event(), "stage_timeout_s": 0.5}, {"steps": ALL[:1]}],
        keep=keep), 60)
    a2 = world.agents["builder-two-agent"]
    assert (a2.failure_source, a2.terminal_state) == ("harness", "failed")
    assert "staging did not finish within 0.5 s" in a2.terminal_detail, a2.terminal_detail
    assert world.winner == "builder-one"
    assert keep["supervisor"].timings["staging_s"]["builder-two-agent"] < 30


async def test_command_adapter_starts_at_the_clock(tmp_path):
    """An upstream command adapter (§5) stages nothing: its process starts after
    ``match_started``, as upstream's do (it sees the running match in the event log)."""
    from aoe_tui.agents.command import CommandAdapter

    script = tmp_path / "agent.sh"
    script.write_text(
        "#!/bin/sh\n"
        'match=$(dirname "$(dirname "$(dirname "$AOE_RESULT_FILE")")")\n'
        'cp "$match/events.jsonl" "$(dirname "$AOE_RESULT_FILE")/seen-at-start.jsonl"\n'
        """printf '{"status":"completed","summary":"ok"}' > "$AOE_RESULT_FILE"\n"""
    )
    script.chmod(0o755)
    class Recording(CommandAdapter):
        async def start(self, ctx):  # the log as it is when the supervisor starts the adapter
            self.log_at_start = (ctx.agent_dir.parent.parent / "events.jsonl").read_text()
            return await super().start(ctx)

    command = Recording("upstream", script)
    assert await command.stage(None) is None  # the default: nothing before the clock
    keep: dict = {}
    world, _records, out, _ = await supervise(tmp_path, [{"steps": ALL}, {}, {}], duration=2, keep=keep,
                                              adapters={"builder-two-agent": command})
    seen = [json.loads(line) for line in (out / "agents/builder-two-agent/seen-at-start.jsonl").read_text().splitlines()]
    assert any(e.get("kind") == "match_state_changed" and e.get("to") == "running" for e in seen), seen
    assert '"to":"running"' in command.log_at_start.replace(" ", "")
    assert world.agents["builder-two-agent"].terminal_state is not None
    assert set(keep["supervisor"].extra()["agents"]["builder-two-agent"]["staging"]) == {"seconds"}


async def test_abort_during_staging_ends_the_heat_before_the_clock(tmp_path):
    """An abort (Ctrl-C) while a seat is still staging: the staging is cancelled, what other seats
    staged is released, and the heat ends aborted without a clock ever starting."""
    hanging = asyncio.Event()
    keep: dict = {}
    task = asyncio.ensure_future(supervise(
        tmp_path, [{"stage": True}, {"stage_hang": hanging}, {"stage": True}], keep=keep))
    await asyncio.wait_for(hanging.wait(), 10)
    await asyncio.sleep(0.05)
    keep["supervisor"].abort()
    world, records, _, _ = await asyncio.wait_for(task, 10)
    assert world.match_state == "aborted" and world.finish_reason == "operator interrupt"
    assert [r.event.kind for r in records] == ["match_state_changed", "match_finished"]
    assert records[0].event.to == "aborted" and records[0].event.from_ == "preparing"
    staged = [keep["adapters"][f"{t}-agent"].staged for t in ("builder-one", "builder-three")]
    assert [s.closed for s in staged] == [1, 1]


async def test_drain_terminates_agents_that_never_return(tmp_path):
    forever = {"forever": True}
    world, records, _, _ = await supervise(tmp_path, [forever, forever, forever], duration=1, drain=0.3)
    started = kinds(records, "post_match_drain_started")[0].event
    assert started.pending_agents == 3
    term = kinds(records, "agent_terminated")
    assert [r.event.reason for r in term] == ["post-match drain deadline expired"] * 3
    fin = kinds(records, "post_match_drain_finished")[0].event
    assert (fin.captured_agents, fin.terminated_agents) == (0, 3)
    assert all(a.terminal_state == "terminated" for a in world.agents.values())


async def test_abort_mid_match(tmp_path):
    forever = {"forever": True}
    world, records, _, _ = await supervise(tmp_path, [forever, forever, forever], abort_after=0.5)
    assert world.match_state == "aborted" and world.winner is None and world.finish_reason == "operator interrupt"
    i = next(i for i, r in enumerate(records) if r.event.kind == "match_finished")
    assert records[i - 1].event.kind == "match_state_changed" and records[i - 1].event.to == "aborted"
    assert not any(a.running for a in world.agents.values())
    assert 400 <= records[i].elapsed_ms < 2000


async def test_cancellation_writes_abort_events(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    loaded = load_manifest(write_arena(tmp_path / "arena"))
    provider = FakeProvider(state)
    territories = await provider.provision([TerritorySpec(t, "p", 8080, i) for i, t in enumerate(SEATS)])
    adapters = {f"{t}-agent": FakeAdapter({"state": state, "forever": True}) for t in SEATS}
    (tmp_path / "m").mkdir()
    log = EventLogWriter(tmp_path / "m" / "events.jsonl")
    ref = HeatSupervisor(loaded, territories, provider, adapters, tmp_path / "m", log,
                       instruction_builder=lambda _l, tid: f"build on {tid}")
    task = asyncio.create_task(ref.run())
    await asyncio.sleep(0.4)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    log.close()
    world = reduce_match(read_events(tmp_path / "m" / "events.jsonl"))
    assert world.match_state == "aborted" and world.finish_reason == "operator interrupt"


# ---------------------------------------------------------------------------- run_heat


class FailingProvider(FakeProvider):
    async def provision(self, specs):
        raise ProvisionError("builder-two: container did not boot (console: kernel panic)")


async def test_run_heat_provision_failure_is_recorded(tmp_path, monkeypatch):
    from aoe_tui.referee.heat import run_heat

    state = tmp_path / "state"
    state.mkdir()
    loaded = load_manifest(write_arena(tmp_path / "arena"))
    adapters = {a.id: FakeAdapter({"state": state}) for a in loaded.manifest.agents}
    out = tmp_path / "match"
    world = await run_heat(loaded, FailingProvider(state), adapters, out, write_bundle_file=False)
    assert world.match_state == "aborted" and world.infrastructure_failures == 1
    assert world.finish_reason == "territory provisioning failed"
    records = read_events(out / "events.jsonl")
    e = records[0].event
    assert (e.kind, e.component, e.source) == ("infrastructure_failure", "provider:fake", "arena")
    assert "kernel panic" in e.detail
    assert (out / "world.json").read_text() == world_json(reduce_match(records))
    assert json.loads((out / "arena.json").read_text())["arena"]["id"] == "fake-build"
    assert json.loads((out / "match.json").read_text())["adapter_sha256"] == {}


class HangingProvider(FakeProvider):
    """Provisioning that never ends on its own; records its cancellation and teardown."""

    events: list[str]

    async def provision(self, specs):
        self.events = ["provision"]
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            self.events.append("cancelled")
            raise

    async def teardown(self) -> None:
        self.events.append("teardown")


async def test_run_heat_abort_during_provisioning(tmp_path):
    """An operator abort while the territories provision: provisioning is cancelled, the log
    holds preparing→aborted and the finish, world.json is written, the territories are torn down."""
    from aoe_tui.referee.heat import run_heat

    state = tmp_path / "state"
    state.mkdir()
    loaded = load_manifest(write_arena(tmp_path / "arena"))
    adapters = {a.id: FakeAdapter({"state": state}) for a in loaded.manifest.agents}
    provider = HangingProvider(state)
    abort = asyncio.Event()
    asyncio.get_running_loop().call_later(0.3, abort.set)
    out = tmp_path / "match"
    world = await run_heat(loaded, provider, adapters, out, abort_event=abort, write_bundle_file=False)
    assert world.match_state == "aborted" and world.finish_reason == "operator interrupt" and world.winner is None
    assert provider.events == ["provision", "cancelled", "teardown"]
    records = read_events(out / "events.jsonl")
    assert [r.event.kind for r in records] == ["match_state_changed", "match_finished"]
    assert (out / "world.json").read_text() == world_json(reduce_match(records))


@pytest.fixture
def fake_heat(tmp_path, monkeypatch):
    """``(state folder, loaded fake arena, adapters building every milestone)`` for a run_heat."""
    state = tmp_path / "state"
    state.mkdir()
    monkeypatch.setenv("FAKE_STATE", str(state))
    loaded = load_manifest(write_arena(tmp_path / "arena"))
    adapters = {a.id: FakeAdapter({"state": state, "steps": ALL}) for a in loaded.manifest.agents}
    monkeypatch.setattr("aoe_tui.agents.instruction.build_instruction", lambda _l, tid: f"build on {tid}")
    return state, loaded, adapters


async def test_run_heat_full_with_fakes_and_refusal(tmp_path, fake_heat):
    from aoe_tui.referee.heat import OutputExistsError, bundle_path, run_heat

    state, loaded, adapters = fake_heat
    provider = FakeProvider(state)
    out = tmp_path / "match"
    seen = []
    world = await run_heat(loaded, provider, adapters, out, drain_seconds=0.5, on_event=lambda r, w: seen.append(r.event.kind))
    assert world.match_state == "finished" and world.winner in SEATS
    assert seen[0] == "match_state_changed" and seen[-1] == "post_match_drain_finished"
    assert bundle_path(out).is_file()
    extra = json.loads((out / "aoe-extra.json").read_text())
    assert extra["provider"] == "fake" and "teardown_s" in extra["timings"]
    with pytest.raises(OutputExistsError):
        await run_heat(loaded, FakeProvider(state), adapters, out)


class NotingProvider(FakeProvider):
    """A fake provider with a note and limits, as an ssh host larger than its class."""

    async def provision(self, specs: Sequence[TerritorySpec]) -> list[Territory]:
        self.notes.append("host builder-one (192.0.2.10:22) offers 2 vCPUs, more than its class asks")
        return await super().provision(specs)

    def limits(self, territory_id: str) -> dict[str, object]:
        return {"enforced": [], "offered": {"vcpus": 2, "memory_mib": 4096, "disk_mib": 9000}, "id": territory_id}


async def test_run_heat_reports_territory_resources_and_notes(tmp_path, fake_heat):
    """aoe-extra.json gains ``territories`` (each seat's class resources and the provider's
    limits) and ``territory_notes`` (printed too), only when there are notes; the existing keys stay."""
    from aoe_tui.referee.heat import run_heat

    state, loaded, adapters = fake_heat
    said: list[str] = []
    await run_heat(loaded, NotingProvider(state), adapters, tmp_path / "m1", drain_seconds=0.5,
                   write_bundle_file=False, on_phase=said.append)
    extra = json.loads((tmp_path / "m1" / "aoe-extra.json").read_text())
    note = "host builder-one (192.0.2.10:22) offers 2 vCPUs, more than its class asks"
    assert extra["territory_notes"] == [note]
    assert f"note: {note}" in said
    assert said.index(f"note: {note}") < said.index("tearing down territories")
    assert sorted(extra["territories"]) == sorted(SEATS)
    assert extra["territories"]["builder-two"] == {
        "resources": {"vcpus": 1, "memory_mib": 768, "disk_mib": 2048, "tasks": 512},
        "limits": {"enforced": [], "offered": {"vcpus": 2, "memory_mib": 4096, "disk_mib": 9000}, "id": "builder-two"},
    }
    assert {"schema", "version", "provider", "timings"} <= set(extra) and extra["provider"] == "fake"
    # no notes: no territory_notes key; a provider that enforces nothing says {}
    await run_heat(loaded, FakeProvider(state), adapters, tmp_path / "m2", drain_seconds=0.5, write_bundle_file=False)
    extra = json.loads((tmp_path / "m2" / "aoe-extra.json").read_text())
    assert "territory_notes" not in extra
    assert extra["territories"]["builder-one"]["limits"] == {}
    assert "exhausted" not in extra["territories"]["builder-one"]
    # a territory that ran into one of its limits: named beside its limits
    oom = "out of memory in the territory (768 MiB)"
    await run_heat(loaded, FakeProvider(state, exhausted_before={"builder-three": [oom]}), adapters, tmp_path / "m3",
                   drain_seconds=0.5, write_bundle_file=False)
    extra = json.loads((tmp_path / "m3" / "aoe-extra.json").read_text())
    assert extra["territories"]["builder-three"]["exhausted"] == [oom]
    assert [t for t, v in extra["territories"].items() if "exhausted" in v] == ["builder-three"]


def test_territory_specs_passwords(tmp_path):
    from aoe_tui.referee.heat import territory_specs

    loaded = load_manifest(write_arena(tmp_path / "arena"))
    cred = tmp_path / "two.env"
    cred.write_text("OPENROUTER_API_KEY='k'\nAOE_SSH_PASSWORD='s3cret pass'\n")
    specs = territory_specs(loaded, {"builder-two": cred})
    assert [(s.id, s.password, s.index, s.service_port) for s in specs] == [
        ("builder-one", "builder-one-race", 0, 8080),
        ("builder-two", "s3cret pass", 1, 8080),
        ("builder-three", "builder-three-race", 2, 8080),
    ]


async def test_run_heat_cancelled_during_provisioning_cancels_it_before_the_teardown(tmp_path):
    """The season cancels a heat (a stop) while its territories provision: the provisioning is
    cancelled before the teardown runs, so it cannot finish (and start territories) behind it."""
    from aoe_tui.referee.heat import run_heat

    state = tmp_path / "state"
    state.mkdir()
    loaded = load_manifest(write_arena(tmp_path / "arena"))
    adapters = {a.id: FakeAdapter({"state": state}) for a in loaded.manifest.agents}
    provider = HangingProvider(state)
    heat = asyncio.ensure_future(run_heat(loaded, provider, adapters, tmp_path / "match", write_bundle_file=False))
    for _ in range(100):
        await asyncio.sleep(0.01)
        if getattr(provider, "events", None):
            break
    heat.cancel()
    with pytest.raises(asyncio.CancelledError):
        await heat
    assert provider.events == ["provision", "cancelled", "teardown"]


async def test_exhausted_territory_charges_its_own_seat(tmp_path):
    """Issue #26 item 2: a territory that ran out of its own resources (the provider's
    ``exhaustion``) is that seat's business. Its agent's harness crash is the player's
    failure with the limit named first, its failed reboot fails only its milestone (no
    infrastructure failure: the heat is not voided, the season does not re-run it), the
    limit is an activity line of the seat and in ``aoe-extra``'s facts; the other seats'
    results stand."""
    from aoe_tui.season.attempts import judge_attempt

    oom = "out of memory in the territory (768 MiB)"
    world, records, out, provider = await supervise(
        tmp_path,
        [{"crash": True}, {"steps": ALL}, {"steps": ALL, "delay": 0.3}],
        provider_kw={"exhausted": {"builder-one": [oom], "builder-two": ["disk full in the territory (2048 MiB)"]},
                     "fail_reboot": {"builder-two"}},
        duration=5,
    )
    a1 = world.agents["builder-one-agent"]
    # its crash ended it before builder-three won: it keeps that failure, it is not outraced
    assert (a1.failure_source, a1.terminal_state, a1.successful) == ("player", "failed", False)
    assert "builder-one-agent" not in {r.event.agent for r in kinds(records, "agent_outraced")}
    finished = [r.event for r in kinds(records, "agent_finished") if r.event.agent == "builder-one-agent"]
    assert finished[0].detail.startswith(oom + ": adapter exited with exit status: 1")
    # seat two's reboot failed in a territory with a full disk: its milestone fails, no infrastructure failure
    assert not kinds(records, "infrastructure_failure") and world.infrastructure_failures == 0
    failed = [r.event for r in kinds(records, "milestone_failed")
              if (r.event.territory, r.event.milestone) == ("builder-two", "host-reboot")]
    assert failed and "disk full in the territory (2048 MiB): host reboot failed" in failed[0].detail
    assert world.winner == "builder-three"  # the third seat raced on untouched
    ends = {r.event.territory: r.event.reason for r in kinds(records, "competitor_state_changed")
            if r.event.to in ("incomplete", "unavailable")}
    assert ends["builder-one"] == f"builder-three reached durable first; {oom}"  # the log says why it stalled
    assert not judge_attempt(world, records).spoiled
    from aoe_tui.replay.activity import read_activity

    recs, _torn = read_activity(out / "activity.jsonl")
    lines = [(a.agent, a.line) for a in recs]
    assert ("builder-one-agent", f"territory: {oom}") in lines
    assert lines.count(("builder-one-agent", f"territory: {oom}")) == 1  # once, however often polled


async def test_no_exhaustion_keeps_harness_failure(tmp_path):
    """Without a limit hit, a harness crash stays the harness's (an infrastructure source)."""
    world, records, _, _ = await supervise(tmp_path, [{"crash": True}, {"steps": ALL[:1]}, {"steps": ALL[:1]}],
                                     provider_kw={"exhausted": {"builder-two": ["out of tasks in the territory (2048)"]}},
                                     duration=1)
    a1 = world.agents["builder-one-agent"]
    assert (a1.failure_source, a1.terminal_state) == ("harness", "failed")
    details = {r.event.agent: r.event.detail for r in kinds(records, "agent_finished")}
    assert "out of" not in details["builder-one-agent"]
    assert details["builder-two-agent"] == "done"  # a completed run keeps its summary beside a hit limit


async def test_limits_hit_before_the_clock_are_not_charged(tmp_path):
    """A limit a territory had already run into when the clock started (its boot, an adapter's
    staging) is not the player's: a harness crash stays the harness's. After the clock, a
    model outage (``unavailable``) beside a full disk stays the provider's, while one after
    running out of memory (its SSH session lost with an OOM-killed sshd) is the player's."""
    oom = "out of memory in the territory (768 MiB)"
    world, records, _, _ = await supervise(
        tmp_path,
        [{"crash": True}, {"unavailable": "model API answered 503"}, {"unavailable": "lost the SSH session"}],
        provider_kw={"exhausted_before": {"builder-one": [oom]},
                     "exhausted": {"builder-two": ["disk full in the territory (2048 MiB)"], "builder-three": [oom]}},
        duration=1,
    )
    details = {r.event.agent: r.event.detail for r in kinds(records, "agent_finished")}
    sources = {a: v.failure_source for a, v in world.agents.items()}
    assert sources["builder-one-agent"] == "harness" and "out of" not in details["builder-one-agent"]
    assert sources["builder-two-agent"] == "provider"
    assert details["builder-two-agent"] == "disk full in the territory (2048 MiB): model API answered 503"
    assert sources["builder-three-agent"] == "player"
    assert details["builder-three-agent"] == f"{oom}: lost the SSH session"


async def test_reboot_timeout_of_an_exhausted_territory_is_its_own(tmp_path):
    """A territory that ran out of tasks and whose reboot then hangs past the referee's
    timeout fails its own milestone; no infrastructure failure voids the heat."""
    from aoe_tui.season.attempts import judge_attempt

    world, records, _, _ = await supervise(
        tmp_path, [{"steps": ALL}, {}, {}],
        provider_kw={"hang_reboot": {"builder-one"}, "exhausted": {"builder-one": ["out of tasks in the territory (2048)"]}},
        sup_kw={"reboot_timeout_s": 0.3}, duration=3,
    )
    assert not kinds(records, "infrastructure_failure") and not judge_attempt(world, records).spoiled
    failed = [r.event.detail for r in kinds(records, "milestone_failed")
              if (r.event.territory, r.event.milestone) == ("builder-one", "host-reboot")]
    assert failed and failed[0].startswith("out of tasks in the territory (2048): host reboot did not complete within 0 s")
