"""The upstream command-adapter contract (spec §5.1, §5.4): any executable is an adapter.

:class:`CommandAdapter` runs the executable **on the host** with stdin ``/dev/null``,
stdout/stderr appended to ``agents/<id>/stdout.log`` / ``stderr.log`` and the exact
``AOE_*`` environment of spec §5.1 (see :func:`adapter_environment`). The process runs
in its own session / process group so the deadline and :meth:`CommandRun.stop` kill the
whole tree (upstream kills only the direct child; we go further so nothing leaks), and
then end the territory's login sessions, so what the adapter started inside the
territory over SSH stops too (:meth:`~aoe_tui.agents.base.AgentRun.end_territory_sessions`).

Interpretation of how it ended (spec §5.4) is :func:`interpret_exit`; the budget check
(applied last, to every outcome) is :func:`apply_budget`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import signal
import time
from pathlib import Path
from typing import Any

from aoe_tui.agents.base import AdapterStatus, Adapter, AgentContext, AgentOutcome, AgentRun
from aoe_tui.domain.agent_usage import Usage
from aoe_tui.domain.adapter_io import AdapterFileError, read_result_file, usage_from_report

__all__ = [
    "BUDGET_SUMMARY",
    "DEADLINE_SUMMARY",
    "STOPPED_SUMMARY",
    "CommandAdapter",
    "CommandRun",
    "adapter_environment",
    "apply_budget",
    "own_environment",
    "exit_status_text",
    "interpret_exit",
]

#: Summary of a result turned into ``budget_exceeded`` (spec §5.4).
BUDGET_SUMMARY = "agent exceeded its configured budget"
#: Summary of an adapter killed at its deadline (spec §5.4).
DEADLINE_SUMMARY = "agent exceeded its deadline"
#: Summary of an adapter killed by :meth:`AgentRun.stop` (ours; the referee emits ``agent_terminated``).
STOPPED_SUMMARY = "agent was stopped by the controller"
#: Summary of an agent whose SSH session the referee's own host reboot cut (status
#: ``interrupted``, failure source ``arena``: never a retry), when ``agents/<id>/referee-reboot``
#: exists (upstream-format.md §3.4 and §5.6, upstream's claux adapter; the exact text of
#: upstream's ``agent_interrupted`` events).
REBOOT_SUMMARY = "agent session was interrupted by the referee's host reboot"


def adapter_environment(ctx: AgentContext, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of an adapter process (spec §5.1).

    ``base`` (default: this process's environment, which upstream adapters inherit) plus
    ``AOE_AGENT_ID``, ``AOE_TERRITORY_ID``, ``AOE_TERRITORY_HOST`` (= ``territory.host``;
    upstream always says ``127.0.0.1``, our container territories have their own
    address), ``AOE_SSH_PORT``, ``AOE_MODEL``, ``AOE_REASONING_EFFORT``,
    ``AOE_INSTRUCTION_FILE``, ``AOE_RESULT_FILE``, ``AOE_USAGE_FILE``, ``AOE_STDOUT_FILE``,
    ``AOE_STDERR_FILE`` and, only when the territory has one, ``AOE_CREDENTIAL_FILE``.
    All paths are absolute. A stale ``AOE_CREDENTIAL_FILE`` inherited from ``base`` is
    removed when the territory has none, and so is the referee's ``AOE_TUI_VERIFY_KIT``
    (the verifiers' toolkit; nothing of the agent's).
    """
    env = dict(os.environ if base is None else base)
    env.pop("AOE_TUI_VERIFY_KIT", None)
    agent, territory = ctx.agent, ctx.territory
    env.update(
        {
            "AOE_AGENT_ID": agent.id,
            "AOE_TERRITORY_ID": territory.id,
            "AOE_TERRITORY_HOST": territory.host,
            "AOE_SSH_PORT": str(territory.ssh_port),
            "AOE_MODEL": agent.model,
            "AOE_REASONING_EFFORT": getattr(agent, "reasoning_effort", None) or "default",
            "AOE_INSTRUCTION_FILE": str(Path(ctx.instruction_file).absolute()),
            "AOE_RESULT_FILE": str(ctx.result_file.absolute()),
            "AOE_USAGE_FILE": str(ctx.usage_file.absolute()),
            "AOE_STDOUT_FILE": str(ctx.stdout_file.absolute()),
            "AOE_STDERR_FILE": str(ctx.stderr_file.absolute()),
        }
    )
    cred = getattr(territory, "credential_file", None)
    if cred:
        env["AOE_CREDENTIAL_FILE"] = str(Path(cred).absolute())
    else:
        env.pop("AOE_CREDENTIAL_FILE", None)
    return env


def exit_status_text(returncode: int) -> str:
    """Upstream's wording of a process exit: ``exit status: N`` or ``signal: N (SIGNAME)``."""
    if returncode >= 0:
        return f"exit status: {returncode}"
    signo = -returncode
    try:
        name = signal.Signals(signo).name
    except ValueError:
        return f"signal: {signo}"
    return f"signal: {signo} ({name})"


#: A variable name that looks like a credential (``OPENAI_API_KEY``, ``HF_TOKEN``,
#: ``AWS_SECRET_ACCESS_KEY``, ``DB_PASSWORD``, ``AZURE_OPENAI_KEY``...): in a season, an
#: adapter's process inherits one only when its own entrant declares it (:func:`own_environment`)
CREDENTIAL_NAME = re.compile(r"(?:^|_)(?:API_?KEY|KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?)(?:_|$)"
                             r"|^AWS_(?:SECRET_ACCESS_KEY|SESSION_TOKEN|ACCESS_KEY_ID)$", re.I)


def withheld_credentials(adapter: Adapter, base: dict[str, str] | None = None) -> list[str]:
    """The names (sorted) of the variables of ``base`` (default this process's environment)
    that :func:`own_environment` withholds from ``adapter``'s process: other entrants'
    (:attr:`~aoe_tui.agents.base.Adapter.foreign_credentials`) and, in a season
    (``own_credentials`` set), every other :data:`CREDENTIAL_NAME` its entrant did not declare."""
    env = os.environ if base is None else base
    own = adapter.own_credentials
    return sorted(n for n in env if n in adapter.foreign_credentials
                  or (own is not None and n not in own and CREDENTIAL_NAME.search(n)))


def own_environment(adapter: Adapter, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment an adapter's process inherits (issue 27): ``base`` (default this
    process's environment) **minus** :func:`withheld_credentials` — other entrants' key
    variables and, in a season, any other credential-looking variable its own entrant did not
    declare (``[entrants.options] api_key_env``) — plus the credentials handed to it explicitly
    (a cluster worker) that are its own. An adapter can read only its own entrant's credentials."""
    env = {**(os.environ if base is None else base)}
    for name in withheld_credentials(adapter, env):
        env.pop(name, None)
    for name, value in (adapter.credentials or {}).items():
        if name not in adapter.foreign_credentials:
            env[name] = value
    return env


def apply_budget(outcome: AgentOutcome, budget: Any) -> AgentOutcome:
    """The budget check of spec §5.4, applied after every other interpretation.

    ``budget`` has ``resource_units`` (int) and ``max_cost_microusd`` (int or ``None``).
    If ``usage.resource_units`` exceeds ``budget.resource_units``, or both
    ``usage.cost_microusd`` and ``max_cost_microusd`` are set and the cost is greater,
    the outcome becomes ``budget_exceeded`` with summary :data:`BUDGET_SUMMARY`
    (usage and transcript are kept). Otherwise — or when the outcome is already
    ``budget_exceeded`` (a live limit, issue 27, whose summary names the limit and the
    amount spent) — ``outcome`` is returned unchanged.
    """
    if budget is None or outcome.status == AdapterStatus.BUDGET_EXCEEDED:
        return outcome  # a live limit's refusal already says what was spent of which limit
    usage = outcome.usage
    limit_units = getattr(budget, "resource_units", None)
    limit_cost = getattr(budget, "max_cost_microusd", None)
    over = limit_units is not None and usage.resource_units > limit_units
    if limit_cost is not None and usage.cost_microusd is not None and usage.cost_microusd > limit_cost:
        over = True
    if not over:
        return outcome
    return AgentOutcome(AdapterStatus.BUDGET_EXCEEDED, BUDGET_SUMMARY, usage, outcome.transcript)


def interpret_exit(ctx: AgentContext, returncode: int | None, *, timed_out: bool = False, stopped: bool = False) -> AgentOutcome:
    """Turn how an adapter process ended into an :class:`AgentOutcome` (spec §5.4).

    - ``timed_out``: status ``timed_out``, summary :data:`DEADLINE_SUMMARY`; usage and
      transcript from a valid result file if one exists, else transcript = ``stdout.log``.
    - ``stopped`` (killed by :meth:`CommandRun.stop`): status ``interrupted``, summary
      :data:`STOPPED_SUMMARY`, usage from a valid result file if any.
    - exit 0: the result file must exist, parse and match the identity, else ``harness_error``
      with the error text.
    - non-zero exit: a result file, if present, is used as is (an invalid one is a
      ``harness_error`` with the error text); without one, ``harness_error``
      ``adapter exited with exit status: N``.

    The budget check (:func:`apply_budget`) is applied last. Never raises.
    """
    agent_id, territory_id = ctx.agent.id, ctx.territory.id
    path = ctx.result_file
    budget = getattr(ctx.agent, "budget", None)

    def read() -> tuple[AgentOutcome | None, str | None]:
        try:
            res = read_result_file(path, agent_id, territory_id)
        except AdapterFileError as exc:
            return None, str(exc)
        return AgentOutcome(AdapterStatus(res.status), res.summary, usage_from_report(res.usage), res.transcript), None

    if timed_out or stopped:
        outcome, _ = read() if path.exists() else (None, None)
        if timed_out:
            if outcome is None:
                result = AgentOutcome(AdapterStatus.TIMED_OUT, DEADLINE_SUMMARY, Usage(), str(ctx.stdout_file))
            else:
                result = AgentOutcome(AdapterStatus.TIMED_OUT, DEADLINE_SUMMARY, outcome.usage, outcome.transcript)
        else:
            usage = outcome.usage if outcome else Usage()
            transcript = outcome.transcript if outcome else None
            result = AgentOutcome(AdapterStatus.INTERRUPTED, STOPPED_SUMMARY, usage, transcript)
        return apply_budget(result, budget)

    if returncode == 0 or path.exists():
        outcome, error = read()
        if outcome is None:
            outcome = AgentOutcome(AdapterStatus.HARNESS_ERROR, error or "invalid adapter result file")
        return apply_budget(outcome, budget)
    text = exit_status_text(returncode if returncode is not None else -int(signal.SIGKILL))
    return apply_budget(AgentOutcome(AdapterStatus.HARNESS_ERROR, f"adapter exited with {text}"), budget)


def _kill_group(pgid: int, sig: int) -> bool:
    """Signal a whole process group; False if it no longer exists."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False
    return True


class CommandRun(AgentRun):
    """One running command adapter process (see :class:`CommandAdapter`).

    Attributes:
        pid: host pid of the adapter (also its process group id).
        returncode: exit code once it ended (negative = killed by that signal).
        timed_out: True if it was killed at the deadline.
        stopped: True if :meth:`stop` killed it.
    """

    def __init__(self, ctx: AgentContext, proc: asyncio.subprocess.Process, kill_grace_s: float) -> None:
        super().__init__(ctx)
        self.proc = proc
        self.pid = proc.pid
        self.returncode: int | None = None
        self.timed_out = False
        self.stopped = False
        self._kill_grace_s = kill_grace_s
        self._started = time.monotonic()
        self._offsets = {ctx.stdout_file: 0, ctx.stderr_file: 0}
        self._task = asyncio.create_task(self._supervise(), name=f"adapter-{ctx.agent.id}")
        self._tail = asyncio.create_task(self._tail_logs(), name=f"adapter-tail-{ctx.agent.id}")

    async def _terminate_group(self) -> None:
        """SIGTERM the process group, wait ``kill_grace_s``, then SIGKILL whatever is left."""
        if _kill_group(self.pid, signal.SIGTERM):
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.proc.wait(), timeout=self._kill_grace_s)
        _kill_group(self.pid, signal.SIGKILL)
        await self.proc.wait()

    async def _supervise(self) -> AgentOutcome:
        remaining = max(0.0, float(self.ctx.deadline_s) - (time.monotonic() - self._started))
        try:
            await asyncio.wait_for(self.proc.wait(), timeout=remaining)
        except asyncio.TimeoutError:
            if not self.stopped:
                self.timed_out = True
            await self._terminate_group()
        # Leftover children (background loops, tunnels) end with the adapter.
        _kill_group(self.pid, signal.SIGKILL)
        if self.timed_out or self.stopped:  # and what it started inside the territory
            await self.end_territory_sessions()
        self.returncode = self.proc.returncode
        self._read_new_log_lines()
        self._tail.cancel()
        return interpret_exit(self.ctx, self.returncode, timed_out=self.timed_out, stopped=self.stopped)

    def _read_new_log_lines(self) -> None:
        for path, offset in list(self._offsets.items()):
            try:
                with open(path, "rb") as fh:
                    fh.seek(offset)
                    data = fh.read(65536)
            except OSError:
                continue
            if not data:
                continue
            # Only consume complete lines (the rest is read next time).
            cut = data.rfind(b"\n")
            if cut < 0:
                if len(data) < 65536:
                    continue
                cut = len(data) - 1
            self._offsets[path] = offset + cut + 1
            prefix = "" if path == self.ctx.stdout_file else "stderr: "
            for line in data[: cut + 1].decode("utf-8", "replace").splitlines():
                line = line.strip()
                if line:
                    self.activity.append(prefix + (line if len(line) <= 200 else line[:199] + "…"))

    async def _tail_logs(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            self._read_new_log_lines()

    async def wait(self) -> AgentOutcome:
        """Wait for the process to end; return the §5.4 interpretation (never raises)."""
        return await asyncio.shield(self._task)

    async def stop(self) -> None:
        """Kill the adapter's whole process group (SIGTERM, grace, SIGKILL). Idempotent."""
        if self._task.done():
            return
        self.stopped = True
        await self._terminate_group()
        with contextlib.suppress(Exception):
            await asyncio.shield(self._task)


class CommandAdapter(Adapter):
    """An external executable following the upstream adapter contract (spec §5).

    Args:
        name: the registered adapter name (``--adapter NAME=PATH``; for ``command:PATH``
            the file name). Used as the provenance ``adapter_sha256`` key.
        path: the executable. Resolved to an absolute path at construction.
        kill_grace_s: seconds between SIGTERM and SIGKILL when killing the process group.
    """

    inherits_environment = True

    def __init__(self, name: str, path: Path | str, *, kill_grace_s: float = 2.0) -> None:
        self.name = name
        self.path = Path(path).absolute()
        self.kill_grace_s = kill_grace_s

    def sha256(self) -> str | None:
        """sha256 (hex) of the executable's bytes, or ``None`` if it cannot be read."""
        try:
            return hashlib.sha256(self.path.read_bytes()).hexdigest()
        except OSError:
            return None

    async def start(self, ctx: AgentContext) -> AgentRun:
        """Spawn the executable in a new session and return its :class:`CommandRun`.

        If it cannot be spawned (missing, not executable), the returned run ends at once
        with ``harness_error`` naming the path.
        """
        ctx.agent_dir.mkdir(parents=True, exist_ok=True)
        env = adapter_environment(ctx, own_environment(self))
        out = open(ctx.stdout_file, "ab")
        err = open(ctx.stderr_file, "ab")
        try:
            proc = await asyncio.create_subprocess_exec(
                str(self.path),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env=env,
                start_new_session=True,
            )
        except OSError as exc:
            return _FailedRun(ctx, f"cannot start adapter {self.path}: {exc.strerror or exc}")
        finally:
            out.close()
            err.close()
        return CommandRun(ctx, proc, self.kill_grace_s)


class _FailedRun(AgentRun):
    """A run that could not start: ends immediately with ``harness_error``."""

    def __init__(self, ctx: AgentContext, summary: str) -> None:
        super().__init__(ctx)
        self.activity.append(summary)
        self._outcome = AgentOutcome(AdapterStatus.HARNESS_ERROR, summary)

    async def wait(self) -> AgentOutcome:
        return self._outcome

    async def stop(self) -> None:
        return None
