"""The adapter interface: how the referee starts an agent and learns what it did.

An *adapter* turns one manifest agent (spec §1.11) seated on one territory into
a running agent (:class:`AgentRun`). Every adapter — the upstream command
contract (spec §5), the built-in oracle and scripted builders, opencode —
reports the same things:

- live cumulative usage, via the ``AOE_USAGE_FILE`` checkpoint file
  ``agents/<id>/usage.json`` (spec §5.5), which the referee reads every tick
  and turns into ``usage_charged`` deltas;
- activity lines (latest tool calls / output lines) for the live view;
- one final :class:`AgentOutcome` (spec §5.3 result + §5.4 interpretation).
"""

from __future__ import annotations

import abc
import os
import collections
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aoe_tui.domain.agent_usage import Usage
from aoe_tui.domain.spend import SpendCap, SpendLedger
from aoe_tui.errors import AoeError
from aoe_tui.fsio import SubPath

if TYPE_CHECKING:  # pragma: no cover
    from aoe_tui.domain.prices import PriceRates
    from aoe_tui.domain.arena import AgentDef
    from aoe_tui.runtime.provider import HarnessShare, Territory


class PreflightError(AoeError):
    """An entrant's model or credentials did not answer the preflight request.

    The message names the entrant and the model, never a credential value.
    ``failure_source`` (spec §3.9) says whose fault it is — ``provider`` for a refused key, an
    unknown model or an unreachable endpoint — so the season records the spoiled attempt with
    that source instead of blaming the player.
    """

    def __init__(self, message: str, failure_source: str = "provider") -> None:
        super().__init__(message)
        self.failure_source = failure_source


class AdapterStatus(StrEnum):
    """``status`` of an adapter result (spec §5.3)."""

    COMPLETED = "completed"
    FAILED = "failed"
    UNAVAILABLE = "unavailable"
    TIMED_OUT = "timed_out"
    INTERRUPTED = "interrupted"
    BUDGET_EXCEEDED = "budget_exceeded"
    HARNESS_ERROR = "harness_error"

    @property
    def failure_source(self) -> str:
        """The ``FailureSource`` this status maps to (spec §3.9 table)."""
        return {
            AdapterStatus.UNAVAILABLE: "provider",
            AdapterStatus.HARNESS_ERROR: "harness",
            AdapterStatus.INTERRUPTED: "arena",
        }.get(self, "player")


@dataclass
class AgentOutcome:
    """The final, interpreted result of one agent run (spec §5.3–5.4).

    ``summary`` becomes the ``detail`` of ``agent_finished`` / ``agent_interrupted``.
    """

    status: AdapterStatus
    summary: str
    usage: Usage = field(default_factory=Usage)
    transcript: str | None = None


@dataclass
class AgentContext:
    """Everything an adapter needs to start one agent.

    Attributes:
        agent: the manifest agent (id, territory, adapter, model, reasoning_effort, budget).
        territory: the SSH-ready territory the agent is seated on.
        agent_dir: ``<match>/agents/<agent-id>/`` (exists); holds instruction.md, result.json,
            usage.json, stdout.log, stderr.log (spec §0, §5.1).
        instruction_file: ``agent_dir/instruction.md`` (already written, spec §5.2).
        deadline_s: wall-clock seconds the agent may run (the arena's ``duration_seconds``).
        arena_dir: the arena package folder (for adapters that need package files).
        staged: what :meth:`Adapter.stage` returned for this seat before the clock (``None``:
            the adapter stages nothing, or :meth:`Adapter.start` is called without staging);
            :meth:`Adapter.start` takes it over (it then owns its :meth:`Staged.close`).
        clock_started: ``time.monotonic()`` (s) when the match clock started
            (``match_started``); ``None`` outside a heat. Lets a run report its own
            milestones in match-clock ms (``first_model_request_ms``).
    """

    agent: AgentDef
    territory: Territory
    agent_dir: Path
    instruction_file: Path
    deadline_s: float
    arena_dir: Path
    staged: Staged | None = None
    clock_started: float | None = None

    result_file = SubPath("agent_dir", "result.json", "``AOE_RESULT_FILE``: ``agents/<id>/result.json``.")
    usage_file = SubPath("agent_dir", "usage.json",
                         "``AOE_USAGE_FILE``: ``agents/<id>/usage.json`` (cumulative checkpoints, spec §5.5).")
    stdout_file = SubPath("agent_dir", "stdout.log", "``AOE_STDOUT_FILE``: ``agents/<id>/stdout.log``.")
    stderr_file = SubPath("agent_dir", "stderr.log", "``AOE_STDERR_FILE``: ``agents/<id>/stderr.log``.")
    reboot_marker = SubPath("agent_dir", "referee-reboot",
                            "``agents/<id>/referee-reboot``: written by the referee before it reboots the guest (§3.4).")


class Staged:
    """What an adapter prepared for one seat before the race clock (:meth:`Adapter.stage`):
    uploads done, configuration written, connections open. The supervisor hands it to
    :meth:`Adapter.start` through :attr:`AgentContext.staged` at the clock; a seat that never
    starts (an abort during staging, a heat cancelled) gets :meth:`close` instead.

    Subclasses hold their own resources; :meth:`close` must be idempotent and never raise.
    """

    def detail(self) -> dict[str, Any]:
        """Ours, for ``aoe-extra.json`` ``agents[id].staging`` (e.g. what was uploaded or
        shared, each step's seconds); ``{}`` by default. Never a credential."""
        return {}

    async def close(self) -> None:
        """Release what staging holds (connections, listeners). Idempotent, never raises."""


class ActivityLines(collections.deque):
    """:attr:`AgentRun.activity`: the latest activity lines (a bounded ``deque``, newest
    last) that also tells a listener about each line as it is appended.

    Adapters only ``append`` to it. The heat supervisor calls :meth:`listen` once the run
    has started: the listener gets the lines already there, then every new one at once
    (``listener(line)``; it must be cheap and must not raise — exceptions are swallowed so
    a broken listener cannot break an adapter)."""

    def __init__(self, maxlen: int) -> None:
        super().__init__(maxlen=maxlen)
        self._listener: Callable[[str], None] | None = None

    def listen(self, listener: Callable[[str], None] | None) -> None:
        """Send every line (those already kept first) to ``listener``; None stops it."""
        self._listener = listener
        if listener is not None:
            for line in list(self):
                self._tell(line)

    def _tell(self, line: str) -> None:
        listener = self._listener
        if listener is not None:
            try:
                listener(line)
            except Exception:
                pass

    def append(self, line: str) -> None:  # type: ignore[override]
        super().append(line)
        self._tell(line)


class AgentRun(abc.ABC):
    """One running agent. Created by :meth:`Adapter.start`; owned by the referee.

    **Containment.** When an agent's time ends (``timed_out``) or it is stopped
    (outraced, the drain deadline, an abort), every adapter ends what the agent started
    inside its territory, not only its own process on the host:
    :meth:`end_territory_sessions` ends the territory's login sessions, so the shells
    the agent opened and anything it left running from them (``nohup``, ``setsid``,
    ``&``) stop, while the service it deployed under systemd keeps running. An agent
    that finishes on its own is left alone: its heat goes on (verifiers log in to check
    it) and what it left running may be its deployment.
    """

    def __init__(self, ctx: AgentContext, activity_lines: int = 50) -> None:
        self.ctx = ctx
        #: Most recent human-readable activity lines (tool calls, output), newest last;
        #: the supervisor listens to it (:meth:`ActivityLines.listen`) to write ``activity.jsonl``.
        self.activity: ActivityLines = ActivityLines(activity_lines)

    async def end_territory_sessions(self) -> None:
        """End the territory's login sessions (see the class docstring) and say so in
        :attr:`activity`. A territory that runs in host-side cgroups (a container's
        ``extra["cgroups"]``) has them killed from the host
        (:func:`aoe_tui.runtime.cgroups.end_sessions`: the player cannot remove that, unlike
        the guest's own ``loginctl``); any other over SSH with the guest's ``loginctl``
        (:func:`aoe_tui.runtime.ssh.end_login_sessions`). Best effort, at most about 16 s;
        never raises (an unreachable territory, e.g. one rebooting, is one activity line)."""
        import asyncio

        import asyncssh

        from aoe_tui.runtime.cgroups import end_sessions
        from aoe_tui.runtime.ssh import end_login_sessions

        t = self.ctx.territory
        groups = t.extra.get("cgroups")
        try:
            if groups:
                ended = await asyncio.to_thread(end_sessions, [str(g) for g in groups])  # type: ignore[union-attr]
            else:
                ended = await end_login_sessions(t.host, t.ssh_port, t.password)
        except (asyncssh.Error, OSError, asyncio.TimeoutError, RuntimeError) as exc:
            self.activity.append(f"could not end the agent's sessions in {t.id}: {exc or type(exc).__name__}")
            return
        if ended:
            self.activity.append(f"ended {len(ended)} login session(s) left in {t.id} and what ran in them")

    @abc.abstractmethod
    async def wait(self) -> AgentOutcome:
        """Wait for the agent to end and return its interpreted outcome (spec §5.4).

        Never raises for agent misbehaviour: a crash is ``harness_error``, a deadline
        overrun ``timed_out``, a budget overrun ``budget_exceeded``.
        """

    @abc.abstractmethod
    async def stop(self) -> None:
        """Kill the agent and everything it started (host processes and guest processes).

        Safe to call at any time and more than once.
        """

    def usage_detail(self) -> dict[str, Any] | None:
        """Ours, beyond §5.5: what the upstream usage fields cannot hold, for the agent's
        ``usage`` entry in ``aoe-extra.json`` (None: nothing). Keys (all optional):
        ``cache_read_tokens`` / ``cache_write_tokens`` (tokens, included in the reported
        ``input_tokens``), ``cost_source`` (``"price table"`` or ``"adapter"``: who
        computed the reported ``cost_microusd``), ``adapter_cost_microusd`` (µUSD, the
        adapter's own figure), ``events_input_tokens`` / ``events_output_tokens`` and
        ``proxy_input_tokens`` / ``proxy_output_tokens`` (tokens: the two counts of an
        adapter behind the credential proxy). Never a credential."""
        return None

    def start_detail(self) -> dict[str, Any] | None:
        """Ours, for ``aoe-extra.json`` ``agents[id]``: how soon the agent got going after the
        clock, in match-clock ms (since ``match_started``). Keys (all optional):
        ``first_model_request_ms`` (the first request the credential proxy saw) and
        ``first_tool_call_ms`` (the start of the first tool call the agent reported).
        ``None``: nothing to tell (the default)."""
        return None


class Adapter(abc.ABC):
    """Starts agents of one kind (``oracle``, ``scripted:memory``, ``command:PATH``, ``opencode``)."""

    #: The adapter name as registered (``--adapter NAME=PATH`` or a built-in name).
    name: str = ""

    #: For built-in builders that use no model (oracle, scripted): the ``model`` they stand
    #: for in ``arena.json`` when they replace a manifest agent's adapter (``--agent``), so a
    #: ``scripted:memory`` seat is not shown with the manifest's ``oracle`` model. ``None``
    #: keeps the manifest's model (command adapters, opencode).
    builtin_model: str | None = None

    #: The model's prices when the season file's ``[prices]`` has them
    #: (:class:`aoe_tui.domain.prices.PriceRates`, µUSD per million tokens; set by the
    #: season runner). An adapter that honours it reports its ``cost_microusd`` at these
    #: rates (built-in builders, opencode); ``None``: the adapter's own cost.
    price: PriceRates | None = None

    #: Credentials handed to this adapter explicitly (environment variable name → value),
    #: read before the process environment by :meth:`credential`. Set on a cluster worker
    #: (:mod:`aoe_tui.cluster.remote`), where the runner's environment is not there and the
    #: worker's own must not carry the key (its children would inherit it). ``None``: none.
    credentials: dict[str, str] | None = None

    #: Live spend limits of issue 27 (set by the season runner; enforced by adapters that run
    #: a credential proxy, :mod:`aoe_tui.agents.proxy`): the per-heat token and request limits
    #: (:class:`~aoe_tui.domain.spend.SpendCap`; its cost limit is the agent's
    #: ``budget.max_cost_microusd``, see :meth:`heat_cap`), or ``None``.
    heat_limits: SpendCap | None = None

    #: This entrant's season-wide ledger and cap (the ledger is shared by its heats), or ``None``.
    season_spend: tuple[SpendLedger, SpendCap] | None = None

    #: Names of environment variables that hold **other** entrants' credentials: a process this
    #: adapter starts must not inherit them (set by the season runner).
    foreign_credentials: frozenset[str] = frozenset()

    #: Names of the variables holding **this** entrant's credentials (its adapter's
    #: ``credential_names()`` and its ``[entrants.options] api_key_env``), set by the season
    #: runner: a process this adapter starts then inherits no other variable that looks like
    #: a credential (:func:`aoe_tui.agents.command.own_environment`). ``None`` (a single
    #: ``aoe match run``): only :attr:`foreign_credentials` are withheld.
    own_credentials: frozenset[str] | None = None

    #: Whether the adapter's own process inherits the runner's environment (a ``command:``
    #: adapter: :func:`aoe_tui.agents.command.own_environment`), so the season runner says
    #: which credential variables it withholds.
    inherits_environment: bool = False

    def heat_cap(self, agent: Any) -> SpendCap | None:
        """The live per-heat cap for ``agent`` (a manifest agent): its ``budget.max_cost_microusd``
        (µUSD) plus :attr:`heat_limits`' tokens and requests; ``None`` when nothing is limited."""
        cost = getattr(getattr(agent, "budget", None), "max_cost_microusd", None)
        lim = self.heat_limits or SpendCap()
        cap = SpendCap(cost, lim.max_tokens, lim.max_requests, "heat")
        return None if cap.is_empty() else cap

    def credential(self, name: str | None) -> str | None:
        """The value of credential variable ``name``: :attr:`credentials` first, then this
        process's environment; ``None`` when unset, empty or ``name`` is None."""
        if not name:
            return None
        return (self.credentials or {}).get(name) or os.environ.get(name) or None

    def credential_names(self) -> list[str]:
        """Names of the environment variables holding this adapter's credentials (what a
        cluster runner seals and ships to the worker); ``[]`` by default."""
        return []

    def preflight(self) -> None:
        """Check, before any territory is provisioned, what the adapter needs on the runner.

        Raises:
            aoe_tui.errors.AoeError: one line saying what is missing (e.g. a model key).
        """

    async def preflight_model(self, model: str, *, timeout_s: float = 30.0) -> None:
        """Check, before any territory is provisioned, that ``model`` and the credentials answer
        one request (at most ``timeout_s`` seconds). Adapters without a model endpoint do nothing.

        Raises:
            PreflightError: one line naming the model and what failed (never a credential value).
        """

    def harness_shares(self, agent: AgentDef) -> list[HarnessShare]:
        """Host folders this adapter wants shared read-only into ``agent``'s territory
        (:class:`~aoe_tui.runtime.provider.HarnessShare`): the in-territory harness, built and
        cached once on the runner, so nothing is copied per seat where the provider can share
        (a container's bind mount, a QEMU read-only disk). ``run_heat`` puts them in the seat's
        ``TerritorySpec.shares`` before provisioning; a provider that cannot share ignores them,
        so :meth:`stage` checks in the guest and uploads what is missing. Called before
        provisioning, from the event loop: it may do blocking work once (cached).
        ``[]`` by default.

        Raises:
            aoe_tui.errors.AoeError: the harness cannot be prepared on the runner (one line);
                ``run_heat`` then shares nothing for that seat and staging reports the error.
        """
        return []

    async def stage(self, ctx: AgentContext) -> Staged | None:
        """Prepare the seat before the race clock starts: uploads, installs, configuration,
        connections (``ctx.instruction_file`` is already written). The supervisor stages every
        seat concurrently after provisioning and starts the clock (``match_started``) only
        when all are done, so the seats start equal; each seat's time is
        ``timings.staging_s[agent]`` (s) in ``aoe-extra.json``. A raised exception becomes
        that seat's ``harness_error`` at clock 0 while the others race. It may be cancelled
        (an abort, Ctrl-C): it must then release what it holds.

        The default stages nothing (``None``): upstream command adapters (§5) and the
        built-in builders do all their work from :meth:`start`, at the clock, as upstream's do.
        """
        return None

    def stage_timeout_s(self) -> float | None:
        """The supervisor's backstop on :meth:`stage` (s), past which the seat is a harness
        failure at clock 0; ``None`` (the default): the supervisor's ``STAGE_TIMEOUT_S``.
        An adapter that bounds its own steps returns their sum plus a margin, so its own
        timeout, which names the step, fires first."""
        return None

    @abc.abstractmethod
    async def start(self, ctx: AgentContext) -> AgentRun:
        """Start the agent in the background and return its :class:`AgentRun` at once.

        ``ctx.staged`` holds what :meth:`stage` returned (``None`` without staging); the run
        takes it over and closes it when it ends."""

    def sha256(self) -> str | None:
        """sha256 of the adapter's file for provenance ``adapter_sha256`` (spec §7.3), if any."""
        return None


async def preflight_entrants(checks: list[tuple[str, Adapter, str]], *, timeout_s: float = 30.0) -> None:
    """Run :meth:`Adapter.preflight_model` for each ``(who, adapter, model)``, one at a time.

    Called by ``aoe match run`` before its territories are provisioned and by the season runner
    before each attempt's territories are provisioned.

    Raises:
        PreflightError: ``"<who> (model <model>): <what failed>"`` for the first that fails.
    """
    for who, adapter, model in checks:
        check = getattr(adapter, "preflight_model", None)
        if check is None:
            continue
        try:
            await check(model, timeout_s=timeout_s)
        except PreflightError as err:
            raise PreflightError(f"{who} (model {model}): {err}", err.failure_source) from None
