"""Built-in ``oracle`` adapter, and the machinery shared with the scripted builders.

The oracle deploys, over one asyncssh connection, a correct and durable first-build
records service: ``/opt/builder/app.py`` backed by sqlite at
``/var/lib/builder/records.sqlite3`` (the app template is package data,
``aoe_tui/agents/apps/builder_app.py.txt``), runs ``systemctl reset-failed`` +
``restart builder-app.service``, waits inside the guest until ``GET /health`` answers
``ready``, then writes ``usage.json`` and ``result.json`` exactly like upstream's
oracle adapters (spec §5.6: ``completed``, summary "oracle deployed durable service",
``usage {resource_units: 1}``, ``transcript: null``). It spends no tokens.

Built-in runs follow the same rules as command adapters: deadline → ``timed_out``,
budget check last (:func:`aoe_tui.agents.command.apply_budget`), :meth:`stop` →
``interrupted`` with ``run.stopped`` set; at the deadline and on a stop the territory's
login sessions end (:meth:`~aoe_tui.agents.base.AgentRun.end_territory_sessions`). An unreachable territory is ``unavailable``
(failure source ``provider``); an unexpected local error is ``harness_error``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aoe_tui.agents.base import AdapterStatus, Adapter, AgentContext, AgentOutcome, AgentRun
from aoe_tui.domain.agent_usage import Usage
from aoe_tui.agents.command import DEADLINE_SUMMARY, REBOOT_SUMMARY, STOPPED_SUMMARY, apply_budget
from aoe_tui.domain.adapter_io import write_result_file, write_usage_file

if TYPE_CHECKING:  # imported when first used: `aoe match run` starts its territories meanwhile
    import asyncssh

__all__ = [
    "APP_TEMPLATE",
    "DURABLE_STORAGE",
    "BuilderAdapter",
    "BuilderRun",
    "OracleAdapter",
    "deploy_script",
    "render_app",
]

#: Storage spec of a correct, durable deployment (sqlite on the guest's disk).
DURABLE_STORAGE = "sqlite:/var/lib/builder/records.sqlite3"
#: Package-relative path of the app template (``__STORAGE__`` and ``__WRAP_READS__`` are replaced).
APP_TEMPLATE = "apps/builder_app.py.txt"


def _template_bytes() -> bytes:
    return resources.files("aoe_tui.agents").joinpath(APP_TEMPLATE).read_bytes()


def render_app(storage: str, *, wrap_reads: bool = False) -> str:
    """The first-build service source for ``storage`` (``memory`` or ``sqlite:<abs path>``);
    ``wrap_reads`` (the ``scripted:hasty`` fault) answers record reads with a JSON document
    instead of the stored bytes.

    The rendered program honours ``BUILDER_PORT`` (default 8080) and ``BUILDER_STORAGE``
    environment overrides, which only tests use.

    Raises:
        ValueError: an unknown storage spec.
    """
    if storage != "memory" and not storage.startswith("sqlite:/"):
        raise ValueError(f"unknown builder storage {storage!r}")
    return (_template_bytes().decode("utf-8").replace("__STORAGE__", storage)
            .replace("__WRAP_READS__", repr(bool(wrap_reads))))


def deploy_script(health_wait_s: float = 15.0) -> str:
    """Guest shell script: install stdin as ``/opt/builder/app.py``, (re)start the slot, wait for health.

    Exits 0 once ``GET http://127.0.0.1:8080/health`` answers ``ready`` (polled every
    0.1 s for at most ``health_wait_s`` seconds), else 1 with the unit's status on stderr.
    """
    tries = max(1, int(health_wait_s / 0.1))
    return f"""set -e
mkdir -p /opt/builder /var/lib/builder
cat > /opt/builder/app.py.new
chmod 0755 /opt/builder/app.py.new
mv -f /opt/builder/app.py.new /opt/builder/app.py
sync
systemctl reset-failed builder-app.service >/dev/null 2>&1 || true
systemctl restart builder-app.service
set +e
health() {{
  if command -v curl >/dev/null 2>&1; then curl -fsS --max-time 1 http://127.0.0.1:8080/health 2>/dev/null
  else python3 -c 'import urllib.request as u; print(u.urlopen("http://127.0.0.1:8080/health", timeout=1).read().decode())' 2>/dev/null
  fi
}}
i=0
while [ $i -lt {tries} ]; do
  if [ "$(health)" = ready ]; then echo ready; exit 0; fi
  i=$((i + 1)); sleep 0.1
done
echo "builder-app.service did not answer /health" >&2
systemctl status builder-app.service --no-pager 2>&1 | tail -n 5 >&2
exit 1
"""


def exit_text(res: asyncssh.SSHCompletedProcess) -> str:
    """How a guest command ended, in a few words: ``exit N``, or ``killed by SIGNAME``."""
    return f"killed by SIG{res.exit_signal[0]}" if res.exit_signal else f"exit {res.exit_status}"


class _Unreachable(Exception):
    """The territory could not be reached over SSH, or the session was lost: ``unavailable``
    (failure source ``provider``: the attempt is re-run), or ``interrupted`` (source
    ``arena``, :data:`~aoe_tui.agents.command.REBOOT_SUMMARY`) once the referee has written
    ``agents/<id>/referee-reboot`` (§3.4: its host reboot ends every session)."""


class BuilderRun(AgentRun):
    """A built-in builder running as an asyncio task (see :class:`BuilderAdapter`).

    Attributes:
        stopped: True once :meth:`stop` cancelled it.
    """

    def __init__(self, ctx: AgentContext, adapter: BuilderAdapter) -> None:
        super().__init__(ctx)
        self.adapter = adapter
        self.stopped = False
        self.usage = Usage()
        self._task = asyncio.create_task(self._supervise(), name=f"{adapter.name}-{ctx.agent.id}")

    # -- helpers for subclasses -------------------------------------------------------

    def checkpoint(self, usage: Usage) -> None:
        """Record cumulative ``usage`` and atomically rewrite ``usage.json`` (spec §5.5).

        With a price (:attr:`aoe_tui.agents.base.Adapter.price`) and known tokens, the
        reported ``cost_microusd`` (µUSD) is ours: uncached input, cache reads, cache writes
        and output tokens at the model's rates; the builder's own figure stays in
        :meth:`usage_detail`."""
        self._adapter_cost = usage.cost_microusd
        self._priced = False
        rates = getattr(self.adapter, "price", None)
        if rates is not None and usage.input_tokens is not None and usage.output_tokens is not None:
            import dataclasses

            cr, cw = usage.cache_read_tokens or 0, usage.cache_write_tokens or 0
            usage = dataclasses.replace(usage, cost_microusd=rates.cost(
                usage.input_tokens - cr - cw, usage.output_tokens, cr, cw))
            self._priced = True
        self.usage = usage
        write_usage_file(self.ctx.usage_file, agent=self.ctx.agent.id, territory=self.ctx.territory.id, usage=usage)

    def usage_detail(self) -> dict[str, Any] | None:
        """Cache tokens (tokens) and who computed the cost (see :meth:`AgentRun.usage_detail`)."""
        u = self.usage
        if u.input_tokens is None and u.cost_microusd is None:
            return None
        detail: dict[str, Any] = {"cost_source": "price table" if getattr(self, "_priced", False) else "adapter",
                                  "adapter_cost_microusd": getattr(self, "_adapter_cost", u.cost_microusd)}
        if u.cache_read_tokens is not None:
            detail["cache_read_tokens"] = u.cache_read_tokens
        if u.cache_write_tokens is not None:
            detail["cache_write_tokens"] = u.cache_write_tokens
        return detail

    async def connect(self) -> asyncssh.SSHClientConnection:
        """One root SSH connection to the territory (password auth); raises ``_Unreachable``."""
        import asyncssh

        from aoe_tui.runtime.ssh import connect

        t = self.ctx.territory
        try:
            return await connect(t.host, t.ssh_port, t.password, connect_timeout_s=10.0)
        except (asyncssh.Error, OSError, asyncio.TimeoutError) as exc:
            raise _Unreachable(f"cannot reach territory {t.id} over SSH: {exc or type(exc).__name__}") from None

    def check_reboot_kill(self, res: asyncssh.SSHCompletedProcess) -> None:
        """Raise :class:`_Unreachable` when ``res`` (a finished guest command) was killed by a
        signal once the referee's host reboot had begun (``agents/<id>/referee-reboot``,
        §3.4): the reboot's shutdown killed it, which ends the session as a lost connection
        does (``interrupted``), not the player's failure. A signal without the reboot stays
        the command's own failure."""
        if res.exit_signal is not None and self.ctx.reboot_marker.exists():
            raise _Unreachable(f"the command on {self.ctx.territory.id} was killed by SIG{res.exit_signal[0]} "
                               "in the referee's host reboot")

    async def sh(
        self, conn: asyncssh.SSHClientConnection, command: str, *, input: str | None = None, show: str | None = None,
        timeout_s: float = 60.0,
    ) -> asyncssh.SSHCompletedProcess:
        """Run ``command`` in the guest, logging ``$ show`` and the first output line as activity."""
        import asyncssh

        self.activity.append(f"$ {show or command.splitlines()[0]}")
        try:
            res = await asyncio.wait_for(conn.run(command, input=input, check=False), timeout=timeout_s)
        except (asyncssh.Error, OSError) as exc:
            raise _Unreachable(f"SSH session to {self.ctx.territory.id} failed: {exc}") from None
        self.check_reboot_kill(res)
        text = (str(res.stdout or "") + str(res.stderr or "")).strip()
        if text:
            first = text.splitlines()[0].strip()
            self.activity.append(f"  {first[:160]}")
        return res

    # -- the run -----------------------------------------------------------------------

    async def body(self) -> tuple[AdapterStatus, str]:  # pragma: no cover - abstract
        """Do the work; return the final ``(status, summary)``. Usage is ``self.usage``."""
        raise NotImplementedError

    def _finish(self, status: AdapterStatus, summary: str, usage: Usage) -> AgentOutcome:
        try:
            write_result_file(
                self.ctx.result_file, agent=self.ctx.agent.id, territory=self.ctx.territory.id,
                status=status, summary=summary, usage=usage, transcript=None,
            )
        except OSError:
            pass
        return apply_budget(AgentOutcome(status, summary, usage, None), getattr(self.ctx.agent, "budget", None))

    async def _supervise(self) -> AgentOutcome:
        try:
            status, summary = await asyncio.wait_for(self.body(), timeout=max(0.0, float(self.ctx.deadline_s)))
        except asyncio.TimeoutError:
            self.activity.append("deadline reached")
            await self.end_territory_sessions()
            return self._finish(AdapterStatus.TIMED_OUT, DEADLINE_SUMMARY, self.usage)
        except asyncio.CancelledError:
            if self.stopped:
                await self.end_territory_sessions()
                return self._finish(AdapterStatus.INTERRUPTED, STOPPED_SUMMARY, self.usage)
            raise
        except _Unreachable as exc:
            self.activity.append(str(exc))
            if self.ctx.reboot_marker.exists():  # the referee's reboot cut the session (§3.4)
                return self._finish(AdapterStatus.INTERRUPTED, REBOOT_SUMMARY, self.usage)
            return self._finish(AdapterStatus.UNAVAILABLE, str(exc), self.usage)
        except Exception as exc:  # a bug or a local I/O error: never a traceback to the referee
            summary = f"{self.adapter.name} adapter failed: {type(exc).__name__}: {exc}".splitlines()[0][:300]
            self.activity.append(summary)
            return self._finish(AdapterStatus.HARNESS_ERROR, summary, self.usage)
        return self._finish(status, summary, self.usage)

    async def wait(self) -> AgentOutcome:
        """Wait for the builder to finish; returns its outcome (never raises)."""
        return await asyncio.shield(self._task)

    async def stop(self) -> None:
        """Cancel the builder and end its territory's login sessions (the deployed service stays). Idempotent."""
        if self._task.done():
            return
        self.stopped = True
        self._task.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.shield(self._task)


class BuilderAdapter(Adapter):
    """Base of the built-in builders: subclasses set ``name`` and ``run_class``."""

    run_class: type[BuilderRun] = BuilderRun

    async def start(self, ctx: AgentContext) -> AgentRun:
        """Start the builder as a background task and return its run at once."""
        ctx.agent_dir.mkdir(parents=True, exist_ok=True)
        return self.run_class(ctx, self)

    def sha256(self) -> str | None:
        """sha256 over this adapter's module source and the app template (provenance)."""
        import inspect
        import sys

        h = hashlib.sha256()
        # in name order: a set of modules iterates in memory-address order, which made the
        # digest of a subclass (scripted builders) differ from one process to the next
        for name in sorted({__name__, type(self).__module__}):
            mod = sys.modules[name]
            with contextlib.suppress(OSError, TypeError):
                h.update(Path(inspect.getfile(mod)).read_bytes())
        h.update(_template_bytes())
        return h.hexdigest()


class OracleRun(BuilderRun):
    """The oracle's run: one SSH connection, one deploy command, result."""

    async def body(self) -> tuple[AdapterStatus, str]:
        source = render_app(DURABLE_STORAGE)
        conn = await self.connect()
        try:
            res = await self.sh(conn, deploy_script(), input=source, show="deploy /opt/builder/app.py (sqlite) and restart builder-app.service")
        finally:
            conn.close()
        if res.exit_status != 0:
            detail = " ".join(str(res.stderr or "").split())[:200]
            self.checkpoint(Usage(resource_units=1))
            return AdapterStatus.FAILED, f"oracle deployment failed: {detail or exit_text(res)}"
        self.checkpoint(Usage(resource_units=1))
        return AdapterStatus.COMPLETED, "oracle deployed durable service"


class OracleAdapter(BuilderAdapter):
    """Built-in ``oracle``: a correct durable deployment, as fast as possible. No constructor args."""

    name = "oracle"
    builtin_model = "oracle"
    run_class = OracleRun

