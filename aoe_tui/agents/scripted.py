"""Built-in scripted builders that behave like an agent and fail realistically.

Each one works like a small agent would: a few discovery commands over SSH, writes
``/opt/builder/app.py``, restarts ``builder-app.service``, validates its own endpoints,
and reports ``completed``. Along the way it appends activity lines and rewrites
``usage.json`` with cumulative, made-up but deterministic token counts (spec §5.5), so the
referee emits ``usage_charged`` deltas as for a real model.

===================== ============================================ =====================
name                  where the records live                       milestones passed
===================== ============================================ =====================
``scripted:memory``   in the process (a dict)                      service-up, write-read
``scripted:volatile`` sqlite under ``/run/builder/`` (tmpfs)       … service-restart
``scripted:slow``     sqlite under ``/var/lib/builder/`` (durable) all, but starts late
===================== ============================================ =====================
"""

from __future__ import annotations

import asyncio
import os

from aoe_tui.agents.base import AdapterStatus, Usage
from aoe_tui.agents.oracle import DURABLE_STORAGE, BuilderAdapter, BuilderRun, deploy_script, render_app
from aoe_tui.errors import AoeError

__all__ = ["SCRIPTED_BUILDERS", "ScriptedAdapter", "ScriptedRun", "scripted_usage"]

#: name -> (storage spec, default start delay in seconds)
SCRIPTED_BUILDERS: dict[str, tuple[str, float]] = {
    "memory": ("memory", 0.0),
    "volatile": ("sqlite:/run/builder/records.sqlite3", 0.0),
    "slow": (DURABLE_STORAGE, 20.0),
}

#: Environment override of ``scripted:slow``'s start delay (seconds), for demos.
SLOW_DELAY_ENV = "AOE_SCRIPTED_SLOW_DELAY_S"


def scripted_usage(step: int) -> Usage:
    """Cumulative usage after ``step`` (1-based) agent steps: deterministic, monotone.

    Step ``i`` adds ``2100 + 700*i`` input tokens and ``180 + 90*i`` output tokens, one
    round and one tool call; cost is 1 micro-USD per input token and 4 per output token;
    ``resource_units`` is 1 (as claux reports).
    """
    inp = sum(2100 + 700 * i for i in range(1, step + 1))
    out = sum(180 + 90 * i for i in range(1, step + 1))
    return Usage(
        rounds=step, tool_calls=step, input_tokens=inp, output_tokens=out, cost_microusd=inp + 4 * out, resource_units=1
    )


class ScriptedRun(BuilderRun):
    """The scripted agent: discovery, write, restart, validate; a usage checkpoint per step."""

    adapter: ScriptedAdapter

    async def body(self) -> tuple[AdapterStatus, str]:
        a = self.adapter
        if a.start_delay_s > 0:
            self.activity.append(f"thinking about the contract ({a.start_delay_s:.0f} s)")
            await asyncio.sleep(a.start_delay_s)
        step = 0

        async def think() -> None:
            if a.step_delay_s > 0:
                await asyncio.sleep(a.step_delay_s)

        def charge() -> None:
            nonlocal step
            step += 1
            self.checkpoint(scripted_usage(step))

        conn = await self.connect()
        try:
            await think()
            await self.sh(conn, "systemctl cat builder-app.service 2>&1 | head -n 20; command -v python3")
            charge()
            await think()
            await self.sh(conn, "ls -la /opt/builder 2>&1 | head -n 5; df -h / | tail -n 1; ss -ltn 2>/dev/null | grep -c 8080 || true")
            charge()
            await think()
            res = await self.sh(
                conn, deploy_script(), input=render_app(a.storage),
                show="write /opt/builder/app.py; systemctl reset-failed/restart builder-app.service",
            )
            charge()
            if res.exit_status != 0:
                return AdapterStatus.FAILED, "builder-app.service did not come up after deployment"
            await think()
            check = (
                "curl -fsS http://127.0.0.1:8080/health && echo && "
                "curl -fsS -X PUT --data-binary selftest-value http://127.0.0.1:8080/records/selftest && "
                "curl -fsS http://127.0.0.1:8080/records/selftest && echo"
            )
            res = await self.sh(conn, check, show="curl /health; PUT+GET /records/selftest")
            charge()
        finally:
            conn.close()
        if res.exit_status != 0:
            return AdapterStatus.FAILED, "self-check of the records service failed"
        return AdapterStatus.COMPLETED, "Deployed the records service on port 8080 and checked health, write and read."


class ScriptedAdapter(BuilderAdapter):
    """``scripted:NAME`` built-in builder.

    Args:
        variant: ``memory``, ``volatile`` or ``slow`` (see :data:`SCRIPTED_BUILDERS`).
        start_delay_s: seconds to wait before the first command (default: 20 for ``slow``,
            overridable with the ``AOE_SCRIPTED_SLOW_DELAY_S`` environment variable; 0 otherwise).
        step_delay_s: "thinking" pause before each step, seconds (default 1.0, so a
            live referee reading ``usage.json`` every tick sees several ``usage_charged`` deltas).

    Raises:
        AoeError: unknown variant.
    """

    run_class = ScriptedRun

    def __init__(self, variant: str, *, start_delay_s: float | None = None, step_delay_s: float = 1.0) -> None:
        if variant not in SCRIPTED_BUILDERS:
            known = ", ".join(f"scripted:{n}" for n in SCRIPTED_BUILDERS)
            raise AoeError(f"unknown scripted builder 'scripted:{variant}' (known: {known})")
        self.variant = variant
        self.name = f"scripted:{variant}"
        self.builtin_model = self.name
        self.storage, default_delay = SCRIPTED_BUILDERS[variant]
        if start_delay_s is None:
            start_delay_s = default_delay
            if variant == "slow" and os.environ.get(SLOW_DELAY_ENV):
                try:
                    start_delay_s = float(os.environ[SLOW_DELAY_ENV])
                except ValueError:
                    raise AoeError(f"{SLOW_DELAY_ENV} must be a number of seconds, got {os.environ[SLOW_DELAY_ENV]!r}") from None
        self.start_delay_s = float(start_delay_s)
        self.step_delay_s = float(step_delay_s)
