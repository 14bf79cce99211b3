"""Built-in scripted builders that behave like an agent and fail realistically.

Each one works like a small agent would: a few discovery commands over SSH, writes
``/opt/builder/app.py``, restarts ``builder-app.service``, validates its own endpoints,
and reports ``completed``. Along the way it appends activity lines and rewrites
``usage.json`` with cumulative, made-up but deterministic token counts (spec §5.5), so the
referee emits ``usage_charged`` deltas as for a real model.

They are first-build's oracle (:class:`~aoe_tui.agents.oracle.OracleAdapter`, the same
service) with one fault each:

===================== ============================================ =====================
name                  the fault                                    milestones passed
===================== ============================================ =====================
``scripted:hasty``    reads answer a JSON wrapper, not the bytes   service-up
``scripted:memory``   records in the process (a dict)              … write-read
``scripted:volatile`` sqlite under ``/run/builder/`` (tmpfs)       … service-restart
``scripted:slow``     none (durable sqlite), but starts late       all
===================== ============================================ =====================

Arena packages with their own builders (``adapters/builders/oracle.sh`` and the faults it
declares, or ``adapters/builders/NAME.sh``; see ``docs/arena-packages.md``) get
:class:`PackageBuilderAdapter` instead: the same agent-like run (activity lines, usage
checkpoints), with the package's guest script doing the work.
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
from pathlib import Path

from aoe_tui.agents.base import AdapterStatus
from aoe_tui.domain.agent_usage import Usage
from aoe_tui.agents.oracle import DURABLE_STORAGE, BuilderAdapter, BuilderRun, deploy_script, exit_text, render_app
from aoe_tui.errors import AoeError

__all__ = ["FAULT_RE", "FAULT_VARIABLE", "SCRIPTED_BUILDERS", "PackageBuilderAdapter", "PackageBuilderRun",
           "ScriptedAdapter", "ScriptedRun", "builder_faults", "scripted_usage"]

#: name -> (storage spec, default start delay in seconds)
SCRIPTED_BUILDERS: dict[str, tuple[str, float]] = {
    "hasty": (DURABLE_STORAGE, 0.0),
    "memory": ("memory", 0.0),
    "volatile": ("sqlite:/run/builder/records.sqlite3", 0.0),
    "slow": (DURABLE_STORAGE, 20.0),
}

#: Default "thinking" pause before each of a scripted builder's steps (s).
STEP_DELAY_S = 0.6

#: When a scripted builder starts its deployment, in seconds after its first step began (after
#: any start delay), at the default pace (:data:`STEP_DELAY_S`; another pace scales it): its
#: service then answers at ~2.7-3.5 s of the heat clock (quiet to loaded machine), between
#: first-build's checks at 2 s and 4 s (a 2 s tick), never on one. Three relative 0.6 s pauses
#: used to put it there, until faster logins moved the answer to ~2.0-2.3 s, onto the 2 s check:
#: whether a builder passed service-up there then turned on tens of ms, and two runs of one
#: seeded season could disagree (with 1.0 s pauses it had run across the 4 s check the same way).
DEPLOY_AT_S = 2.5

#: Environment override of ``scripted:slow``'s start delay (seconds), for demos.
SLOW_DELAY_ENV = "AOE_SCRIPTED_SLOW_DELAY_S"


def slow_delay_s() -> float:
    """Start delay of the ``slow`` builders (s): ``AOE_SCRIPTED_SLOW_DELAY_S`` or 20.

    Raises:
        AoeError: the variable is set but is not a number.
    """
    text = os.environ.get(SLOW_DELAY_ENV)
    if not text:
        return SCRIPTED_BUILDERS["slow"][1]
    try:
        return float(text)
    except ValueError:
        raise AoeError(f"{SLOW_DELAY_ENV} must be a number of seconds, got {text!r}") from None


def scripted_usage(step: int) -> Usage:
    """Cumulative usage after ``step`` (1-based) agent steps: deterministic, monotone.

    Step ``i`` adds ``2100 + 700*i`` input tokens and ``180 + 90*i`` output tokens, one
    round and one tool call; of step ``i``'s input tokens, ``700*(i-1)`` are read from the
    prompt cache and 700 written to it (both included in ``input_tokens``); the builder's
    own cost is 1 micro-USD per input token and 4 per output token (no cache term, like
    opencode's; a season ``[prices]`` row replaces it); ``resource_units`` is 1 (as claux
    reports).
    """
    inp = sum(2100 + 700 * i for i in range(1, step + 1))
    out = sum(180 + 90 * i for i in range(1, step + 1))
    return Usage(
        rounds=step, tool_calls=step, input_tokens=inp, output_tokens=out, cost_microusd=inp + 4 * out, resource_units=1,
        cache_read_tokens=sum(700 * (i - 1) for i in range(1, step + 1)), cache_write_tokens=700 * step,
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
        loop = asyncio.get_running_loop()
        begun = loop.time()

        async def think(until_s: float = 0.0) -> None:
            """Pause one step's delay, and at least until ``until_s`` after ``begun``."""
            pause = max(a.step_delay_s, begun + until_s - loop.time())
            if pause > 0:
                await asyncio.sleep(pause)

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
            await think(a.deploy_at_s)
            res = await self.sh(
                conn, deploy_script(), input=render_app(a.storage, wrap_reads=a.variant == "hasty"),
                show="write /opt/builder/app.py; systemctl reset-failed/restart builder-app.service",
            )
            charge()
            if res.exit_status != 0:
                return AdapterStatus.FAILED, f"builder-app.service did not come up after deployment ({exit_text(res)})"
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
            return AdapterStatus.FAILED, f"self-check of the records service failed ({exit_text(res)})"
        return AdapterStatus.COMPLETED, "Deployed the records service on port 8080 and checked health, write and read."


class ScriptedAdapter(BuilderAdapter):
    """``scripted:NAME`` built-in builder.

    Args:
        variant: ``hasty``, ``memory``, ``volatile`` or ``slow`` (see :data:`SCRIPTED_BUILDERS`).
        start_delay_s: seconds to wait before the first command (default: 20 for ``slow``,
            overridable with the ``AOE_SCRIPTED_SLOW_DELAY_S`` environment variable; 0 otherwise).
        step_delay_s: "thinking" pause before each step, seconds (default
            :data:`STEP_DELAY_S`, so a live referee reading ``usage.json`` every tick sees
            several ``usage_charged`` deltas).
        deploy_at_s: the deployment starts no earlier than this many seconds after the first
            step began (default: :data:`DEPLOY_AT_S` scaled by ``step_delay_s`` /
            :data:`STEP_DELAY_S`), so its service answers between two of the referee's checks
            however long the discovery commands took.

    Raises:
        AoeError: unknown variant.
    """

    run_class = ScriptedRun

    def __init__(self, variant: str, *, start_delay_s: float | None = None, step_delay_s: float = STEP_DELAY_S,
                 deploy_at_s: float | None = None) -> None:
        if variant not in SCRIPTED_BUILDERS:
            known = ", ".join(f"scripted:{n}" for n in SCRIPTED_BUILDERS)
            raise AoeError(f"unknown scripted builder 'scripted:{variant}' (known: {known})")
        self.variant = variant
        self.name = f"scripted:{variant}"
        self.builtin_model = self.name
        self.storage, default_delay = SCRIPTED_BUILDERS[variant]
        if start_delay_s is None:
            start_delay_s = slow_delay_s() if variant == "slow" else default_delay
        self.start_delay_s = float(start_delay_s)
        self.step_delay_s = float(step_delay_s)
        self.deploy_at_s = DEPLOY_AT_S * self.step_delay_s / STEP_DELAY_S if deploy_at_s is None else float(deploy_at_s)


#: A fault an arena's ``adapters/builders/oracle.sh`` declares: a comment line
#: ``# fault NAME: WHY`` (WHY: which milestone it fails, and the realistic reason).
FAULT_RE = re.compile(r"^# fault ([A-Za-z0-9][A-Za-z0-9._-]*):[ \t]*(.*?)\s*$", re.M)
#: The shell variable a builder run gets first: the fault's name, empty for the oracle itself.
FAULT_VARIABLE = "AOE_FAULT"


def builder_faults(oracle: Path) -> dict[str, str]:
    """The faults an oracle builder script declares: ``{NAME: WHY}`` from its ``# fault NAME:
    WHY`` comment lines (:data:`FAULT_RE`), in file order; ``{}`` when it declares none or
    cannot be read (the run then reports the read error). ``oracle`` and ``slow`` are not
    faults (the oracle itself, and the oracle after a delay)."""
    try:
        text = Path(oracle).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    return {m.group(1): m.group(2) for m in FAULT_RE.finditer(text) if m.group(1) not in ("oracle", "slow")}


#: Prefix of a builder script's progress lines (``aoe-step: TEXT``); each is one agent step.
STEP_PREFIX = "aoe-step:"
#: Prefix of a builder script's final summary line (optional; becomes the result summary).
SUMMARY_PREFIX = "aoe-summary:"


class PackageBuilderRun(BuilderRun):
    """Runs the package's builder script in the territory (``bash -s`` over one SSH session),
    after a first line ``AOE_FAULT=NAME`` (the adapter's fault; empty for the oracle).

    Each ``aoe-step: TEXT`` line the script prints becomes an activity line and one usage
    step (:func:`scripted_usage`); other output lines become activity too. Exit 0 →
    ``completed``; otherwise ``failed`` with the last stderr line. A lost session is
    ``unavailable``, or ``interrupted`` after the referee's reboot (see
    :class:`~aoe_tui.agents.oracle.BuilderRun`); a ``usage.json`` that cannot be written is a
    ``harness_error`` naming it.
    """

    adapter: PackageBuilderAdapter

    async def body(self) -> tuple[AdapterStatus, str]:
        a = self.adapter
        if a.start_delay_s > 0:
            self.activity.append(f"thinking about the task ({a.start_delay_s:.0f} s)")
            await asyncio.sleep(a.start_delay_s)
        try:
            script = a.script.read_text(encoding="utf-8")
        except OSError as exc:
            return AdapterStatus.HARNESS_ERROR, f"{a.name}: cannot read {a.script}: {exc.strerror or exc}"
        import asyncssh

        step = 0
        summary = ""
        errors: list[str] = []
        conn = await self.connect()
        try:
            shown = f"bash -s < {a.script.parent.name}/{a.script.name}"
            self.activity.append(f"$ {FAULT_VARIABLE}={a.fault} {shown}" if a.fault else f"$ {shown}")
            try:
                proc = await conn.create_process("bash -s", encoding="utf-8", errors="replace")
            except Exception as exc:  # noqa: BLE001 - asyncssh channel errors
                from aoe_tui.agents.oracle import _Unreachable

                raise _Unreachable(f"SSH session to {self.ctx.territory.id} failed: {exc}") from None
            proc.stdin.write(f"{FAULT_VARIABLE}={shlex.quote(a.fault)}\n")
            proc.stdin.write(script)
            proc.stdin.write_eof()

            async def read_out() -> None:
                nonlocal step, summary
                async for raw in proc.stdout:
                    line = raw.rstrip("\n").strip()
                    if line.startswith(STEP_PREFIX):
                        step += 1
                        try:
                            self.checkpoint(scripted_usage(step))
                        except OSError as exc:  # our own file, not the session: a harness error
                            raise RuntimeError(f"cannot write {self.ctx.usage_file.name}: "
                                               f"{exc.strerror or exc}") from None
                        self.activity.append("▸ " + line[len(STEP_PREFIX):].strip()[:160])
                    elif line.startswith(SUMMARY_PREFIX):
                        summary = line[len(SUMMARY_PREFIX):].strip()[:300]
                    elif line:
                        self.activity.append("  " + line[:160])

            async def read_err() -> None:
                async for raw in proc.stderr:
                    line = raw.strip()
                    if line:
                        errors.append(line[:300])
                        del errors[:-20]

            try:
                await asyncio.gather(read_out(), read_err())
                res = await proc.wait()
            except (asyncssh.Error, OSError) as exc:  # the session was lost (a reboot, a dead guest)
                from aoe_tui.agents.oracle import _Unreachable

                raise _Unreachable(f"SSH session to {self.ctx.territory.id} lost: {exc}") from None
        finally:
            conn.close()
        self.check_reboot_kill(res)
        if step == 0:
            self.checkpoint(scripted_usage(1))
        if res.exit_status != 0:
            why = errors[-1] if errors else exit_text(res)
            self.activity.append(f"failed: {why}")
            return AdapterStatus.FAILED, f"{a.name}: deployment failed: {why}"
        return AdapterStatus.COMPLETED, summary or f"{a.name}: deployed and checked the service"


class PackageBuilderAdapter(BuilderAdapter):
    """``scripted:NAME`` of an arena package: runs ``adapters/builders/NAME.sh`` in the guest.

    Args:
        variant: the builder's name (``hasty``, ``memory``, ``volatile``, ``slow``...).
        script: the guest script (``slow`` and a declared fault run the package's ``oracle.sh``).
        fault: the fault of ``oracle.sh`` to run (:func:`builder_faults`), ``""`` for none.
        slow: wait before starting: ``start_delay_s`` or the ``AOE_SCRIPTED_SLOW_DELAY_S``
            environment variable or 20 s.
        start_delay_s: seconds to wait before the first command.

    Raises:
        AoeError: ``AOE_SCRIPTED_SLOW_DELAY_S`` is not a number.
    """

    run_class = PackageBuilderRun

    def __init__(self, variant: str, script: Path, *, slow: bool = False, start_delay_s: float | None = None,
                 fault: str = "") -> None:
        self.variant = variant
        self.script = Path(script)
        self.fault = fault
        self.name = f"scripted:{variant}"
        self.builtin_model = self.name
        if start_delay_s is None:
            start_delay_s = slow_delay_s() if slow else 0.0
        self.start_delay_s = float(start_delay_s)

    def sha256(self) -> str | None:
        """sha256 over this module, the builder script and its fault, if any (provenance
        ``adapter_sha256``)."""
        import hashlib

        h = hashlib.sha256(Path(__file__).read_bytes())
        try:
            h.update(self.script.read_bytes())
        except OSError:
            return None
        if self.fault:
            h.update(f"\0{FAULT_VARIABLE}={self.fault}".encode())
        return h.hexdigest()
