"""The in-territory harness runner: what every real coding-agent CLI shares (issue 27).

A *harness* is a coding-agent CLI (Claude Code, Codex CLI, …) that runs **inside** the
agent's territory and reaches its model only through the credential proxy on the runner
(:class:`~aoe_tui.agents.proxy.CredentialProxy`, an SSH reverse tunnel makes it
``127.0.0.1:<guest port>`` in the guest). This module holds everything that is not one
CLI's own; a harness module (:mod:`aoe_tui.agents.claude_code`, :mod:`aoe_tui.agents.codex`)
is a :class:`Harness` subclass — its npm package, environment, command line and
event-stream parser — plus a :class:`HarnessAdapter` subclass naming it, and one registry
entry (:data:`aoe_tui.agents.registry.HARNESSES`).

What the runner does (measured facts per CLI: ``docs/harnesses.md``):

1. **Install** (:func:`ensure_npm_binary`): the CLI's npm package pinned to
   :attr:`Harness.version`, installed once into ``<user cache>/aoe-tui/<name>/<version>``
   (``npm install --prefix``; ``setup.sh`` does it), and only the native binary inside it
   is used (both CLIs run without node). :func:`harness_folder` links it into
   ``<user cache>/aoe-tui/<name>/<version>/harness/<binary>``, the folder shared read-only
   into territories (:meth:`HarnessAdapter.harness_shares`: nspawn ``--bind-ro``, QEMU
   share disk) at ``/opt/aoe-harness/<name>``.
2. **Staging, before the race clock** (:meth:`HarnessAdapter.stage` → :class:`HarnessStaged`):
   the credential proxy, an SSH connection with the reverse tunnel, the binary (the share,
   or an SFTP upload to ``/var/tmp/aoe-<name>/bin/`` where the provider could not share it,
   skipped when the size matches), a fresh run folder ``/var/tmp/aoe-<name>/<agent>/`` with
   HOME, a private temp dir, the prompt (``prompt.md``), the CLI's own files
   (:meth:`Harness.files`) and a launcher ``run.sh`` (``env -i`` with
   :meth:`Harness.env`, cwd ``/root``, the prompt on stdin).
3. **The run, at the clock** (:class:`HarnessRun`): ``run.sh`` in a transient systemd scope
   ``aoe-<name>-<agent>.scope``; each stdout line (JSON) goes to ``stdout.log`` and
   :meth:`Harness.on_event`, which folds it into the :class:`HarnessState` (usage, transcript
   parts, ``tool_trace``, activity lines, the final answer, the error seen). Cumulative
   ``usage.json`` checkpoints (§5.5) are written as usage changes and each second.
4. **Limits, all ours** (seconds): ``wall_clock_s`` (default: the heat deadline) →
   ``timed_out``; no JSON event and no model traffic through the proxy for
   ``idle_timeout_s`` → the run is killed (Claude Code hangs on a stalled stream; Codex
   retries for ever when the endpoint is down); after the final answer, ``exit_grace_s``
   without exit → killed, still ``completed``. Killing is ``systemctl kill -s KILL`` on the
   scope, so tool shells die too; a service the agent put under systemd lives on.
5. **Ending** (:meth:`HarnessRun._finish`): ``usage.json`` (§5.5), ``transcript.json``
   (the claux-like shape opencode writes: ``messages``, ``tool_trace``, ``timing``, §2.7),
   ``analysis.json`` (§9.2, :func:`~aoe_tui.agents.analysis.write_analysis`) and
   ``result.json`` (§5.3), then the manifest budget (§5.4).

Usage (tokens; µUSD): ``input_tokens`` counts every input token, cache reads and writes
included; ``output_tokens`` counts output, reasoning included; per field the larger of the
event stream's and the proxy's count wins. ``cost_microusd`` comes only from the season's
``[prices]`` (:attr:`Adapter.price`), never from a CLI's own price list (it knows nothing of
the model behind the proxy); unpriced, it is 0 and ``usage_detail`` says so.

Failure source rule (§3.9), first match wins (:meth:`HarnessRun._classify`): a final
answer → ``completed`` (player); our ``max_turns``, or the credential proxy refusing a call
past a live spend limit → ``budget_exceeded`` (player); the
referee's reboot cutting the session → ``interrupted`` (arena); the CLI reported a provider
error (HTTP 401/402/403/404-model/408/429/≥500, connection refused, timeouts; the parser
sets :attr:`HarnessState.failure`) → ``unavailable`` (provider); the proxy saw only upstream
failures → ``unavailable`` (provider); the idle limit → ``harness_error`` (harness: a hang);
anything else (a crash, an exit without an answer, a CLI error) → ``harness_error``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import threading
from urllib.parse import urlsplit
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import asyncssh

from aoe_tui.agents.base import Adapter, AdapterStatus, AgentContext, AgentOutcome, AgentRun, Staged
from aoe_tui.agents.command import DEADLINE_SUMMARY, REBOOT_SUMMARY, STOPPED_SUMMARY, apply_budget
from aoe_tui.domain.adapter_io import write_result_file, write_usage_file
from aoe_tui.domain.agent_usage import Usage
from aoe_tui.errors import AoeError
from aoe_tui.fsio import write_json_atomic

__all__ = [
    "ANSI_RE", "PLACEHOLDER_KEY", "Harness", "HarnessAdapter", "HarnessError", "HarnessOptions", "HarnessRun",
    "HarnessStaged", "HarnessState", "KeyedAdapter", "Seat", "SupervisedRun", "ensure_npm_binary", "fold_stream", "harness_folder", "limit_note",
    "bounded", "close_seat", "connect_territory", "guest_command", "idle_or_grace_cut", "npm_binary", "num", "prepared", "provider_status", "pump_stderr", "pump_stdout", "relevant_line",
    "start_proxy", "transcript_doc", "upload_if_changed", "watch_process", "write_artifacts",
]

#: The key the harness in the guest is given: a placeholder (the proxy strips it and adds the real one).
PLACEHOLDER_KEY = "aoe-credential-proxy"
#: ANSI colour codes (removed from stderr lines).
ANSI_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
STDERR_TAIL = 8192
_NAME_RE = re.compile(r"[^A-Za-z0-9_.-]+")
#: HTTP statuses that are the provider's fault (§3.9).
PROVIDER_STATUSES = frozenset({401, 402, 403, 408, 429})
_PROVIDER_WORDS = re.compile(
    r"connection refused|econnrefused|timed out|timeout|overloaded|rate limit|too many requests|high demand|"
    r"unavailable|reconnecting|stream disconnected|bad gateway|inference gateway|unauthori[sz]ed|invalid api key|"
    r"authentication|model[^\n]{0,80}?(not found|does not exist|unknown|not supported)|model_not_found|"
    r"exceeded retry limit|server error|internal server error|\b5\d\d\b", re.I)


class HarnessError(AoeError):
    """A harness could not be installed or found, or an adapter option is invalid (one line)."""


# ----------------------------------------------------------------------------- helpers


def num(v: Any) -> int:
    """``v`` as a non-negative int token count (anything else: 0)."""
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 else 0


def limit_note(name: str, value_s: float, elapsed_s: float, what: str, run_s: float) -> str:
    """One line naming the limit that fired, its configured value and the elapsed times (s)."""
    return f"{name} limit of {value_s:g} s fired after {elapsed_s:.1f} s {what} (run time {run_s:.1f} s)"


def relevant_line(tail: bytes | str) -> str | None:
    """The most relevant line of a stderr tail (one line, ANSI removed, ≤ 300 chars): the last
    line naming an error, else the last non-empty line; ``None`` if empty."""
    text = tail.decode("utf-8", "replace") if isinstance(tail, bytes) else tail
    lines = [" ".join(x.split()) for x in ANSI_RE.sub("", text).splitlines() if x.strip()]
    if not lines:
        return None
    errs = [x for x in lines if re.search(r"error|not found|unknown|invalid|denied|fail", x, re.I)]
    return (errs or lines)[-1][:300]


def provider_status(http_status: int | None, message: str) -> bool:
    """True when an error (HTTP status, message) is the model provider's (§3.9): 401, 402,
    403, 408, 429, ≥ 500, 404 naming a model, or a message about connections, timeouts,
    overload, rate limits or an unknown model."""
    if isinstance(http_status, int):
        if http_status in PROVIDER_STATUSES or http_status >= 500:
            return True
        if http_status == 404:
            return True
    return bool(_PROVIDER_WORDS.search(message or ""))


def _cache_dir(name: str, version: str) -> Path:
    from aoe_tui.runtime.image import cache_root

    return cache_root() / name / version


def npm_binary(name: str, version: str, rel_paths: tuple[str, ...], env_var: str | None = None) -> Path | None:
    """The installed native binary of harness ``name`` (``$env_var`` when set), or ``None``:
    the first of ``rel_paths`` (relative to ``<user cache>/aoe-tui/<name>/<version>/node_modules``)
    that is an executable file."""
    if env_var and os.environ.get(env_var):
        p = Path(os.environ[env_var])
        return p if p.is_file() else None
    base = _cache_dir(name, version) / "node_modules"
    for rel in rel_paths:
        cand = base / rel
        if cand.is_file() and os.access(cand, os.X_OK):
            return cand
    return None


#: the variables an install or a ``--version`` run of a harness keeps from the runner's
#: environment (issue 27: package install scripts and the CLI never see an entrant's key)
TOOL_ENV_KEEP = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "USER", "LOGNAME", "SHELL", "TERM",
                 "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY",
                 "http_proxy", "https_proxy", "no_proxy",
                 # the CAs a TLS-inspecting proxy needs trusted: `npm install --prefix DIR` reads
                 # DIR/etc/npmrc, not the system's global npmrc and its cafile, so node's own
                 # NODE_EXTRA_CA_CERTS is what lets it reach the registry there
                 "NODE_EXTRA_CA_CERTS", "SSL_CERT_FILE", "SSL_CERT_DIR")


def tool_environment() -> dict[str, str]:
    """The runner's environment cut to :data:`TOOL_ENV_KEEP` and ``npm_config_*`` (registry,
    cache): what ``npm install`` of a harness and its ``--version`` check run with."""
    return {k: v for k, v in os.environ.items() if k in TOOL_ENV_KEEP or k.lower().startswith("npm_config_")}


def ensure_npm_binary(name: str, package: str, version: str, rel_paths: tuple[str, ...], *,
                      env_var: str | None = None, version_marker: str | None = None,
                      timeout_s: float = 600.0) -> Path:
    """Return harness ``name``'s native binary, installing ``package@version`` from npm on
    first use (``npm install --prefix <user cache>/aoe-tui/<name>/<version>`` under a file
    lock; the registry must be reachable once), then check that ``<binary> --version``
    prints ``version_marker`` (default ``version``). Blocking; call it from a thread in
    async code.

    Raises:
        HarnessError: npm missing, the install failed, no binary, or the wrong version.
    """
    found = npm_binary(name, version, rel_paths, env_var)
    if found is None:
        if env_var and os.environ.get(env_var):
            raise HarnessError(f"{env_var}={os.environ[env_var]} is not a file")
        npm = shutil.which("npm")
        if npm is None:
            raise HarnessError(f"{name} is not installed and npm is missing (apt-get install npm, or run ./setup.sh)")
        import fcntl

        target = _cache_dir(name, version)
        target.mkdir(parents=True, exist_ok=True)
        with open(target.parent / f".install-{version}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            found = npm_binary(name, version, rel_paths, env_var)
            if found is None:
                try:
                    res = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--prefix", str(target),
                                          f"{package}@{version}"], capture_output=True, text=True, timeout=timeout_s,
                                         env=tool_environment())
                except subprocess.TimeoutExpired:
                    raise HarnessError(f"npm install {package}@{version} did not finish within {timeout_s:.0f} s") from None
                except OSError as exc:
                    raise HarnessError(f"npm install {package}@{version} could not run: {exc}") from None
                if res.returncode != 0:
                    tail = " ".join((res.stderr or res.stdout).split())[-300:]
                    raise HarnessError(f"npm install {package}@{version} failed: {tail}")
        found = npm_binary(name, version, rel_paths, env_var)
        if found is None:
            raise HarnessError(f"npm installed {package}@{version} but no {name} binary was found under {target}")
    try:
        out = subprocess.run([str(found), "--version"], capture_output=True, text=True, timeout=60,
                             env=tool_environment())
    except subprocess.TimeoutExpired:
        raise HarnessError(f"{found} --version did not answer within 60 s") from None
    except OSError as exc:
        raise HarnessError(f"{found} cannot run: {exc.strerror or exc}") from None
    if (version_marker or version) not in out.stdout:
        raise HarnessError(f"{found} reports version {out.stdout.strip()!r}, expected {version}")
    return found


def harness_folder(folder: Path, files: dict[str, Path]) -> Path:
    """Make ``folder`` hold ``files`` (guest name → runner file): hard links where the file
    system allows, else copies, mode 0755; a file whose size differs from its source is
    replaced atomically. Returns ``folder``. Blocking."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, src in files.items():
        src = src.resolve()
        dest = folder / name
        with contextlib.suppress(OSError):
            if dest.stat().st_size == src.stat().st_size:
                continue
        tmp = folder / f".{name}.{os.getpid()}.{threading.get_ident()}.part"
        tmp.unlink(missing_ok=True)
        try:
            os.link(src, tmp)
        except OSError:
            shutil.copy2(src, tmp)
        tmp.chmod(0o755)
        os.replace(tmp, dest)
    return folder


async def upload_if_changed(conn: asyncssh.SSHClientConnection, local: Path, remote: str) -> int:
    """Upload ``local`` to the guest's ``remote`` (mode 0755, through ``remote.part``) unless a
    file of its size is there; returns the bytes sent (0: skipped)."""
    size = local.stat().st_size
    res = await conn.run(f"stat -c %s {shlex.quote(remote)} 2>/dev/null", check=False)
    if str(res.stdout or "").strip() == str(size):
        return 0
    tmp = remote + ".part"
    async with conn.start_sftp_client() as sftp:
        await sftp.put(str(local), tmp, block_size=65536, max_requests=64)  # sftp-server drops >256 KiB packets
    await conn.run(f"chmod 0755 {shlex.quote(tmp)} && mv -f {shlex.quote(tmp)} {shlex.quote(remote)}", check=True)
    return size


@contextlib.asynccontextmanager
async def bounded(limit_s: float, what: str, error: type[AoeError] = HarnessError):
    """Bound one step to ``limit_s`` seconds. Raises ``error(what)`` (one line) past it."""
    try:
        async with asyncio.timeout(limit_s):
            yield
    except TimeoutError:
        raise error(what) from None


async def guest_command(connect: Any, conn: Any, cmd: str) -> None:
    """Run ``cmd`` in the guest over ``conn`` (10 s), or over a new connection from
    ``await connect()`` (15 s) when ``conn`` is missing, closed or failed. Never raises."""
    with contextlib.suppress(Exception):
        if conn is not None and not conn.is_closed():
            await asyncio.wait_for(conn.run(cmd, check=False), 10)
            return
    with contextlib.suppress(Exception):
        async with asyncio.timeout(15):
            c = await connect()
            try:
                await c.run(cmd, check=False)
            finally:
                c.close()


async def pump_stdout(proc: Any, log_path: Path, on_line: Any) -> None:
    """Copy ``proc``'s stdout lines to ``log_path`` (appended, flushed per line) and hand each to ``on_line``."""
    with open(log_path, "ab") as log:
        while True:
            line = await proc.stdout.readline()
            if not line:
                return
            log.write(line)
            log.flush()
            on_line(line)


async def pump_stderr(proc: Any, log_path: Path, on_data: Any) -> None:
    """Copy ``proc``'s stderr to ``log_path`` (appended) and hand each chunk to ``on_data``."""
    with open(log_path, "ab") as log:
        while True:
            data = await proc.stderr.read(65536)
            if not data:
                return
            log.write(data)
            log.flush()
            on_data(bytes(data))


async def start_proxy(adapter: Adapter, base_url: str, api_key_env: str | None, agent: Any,
                      error: type[AoeError] = HarnessError) -> Any:
    """Start a :class:`~aoe_tui.agents.proxy.CredentialProxy` to ``base_url`` holding the key
    read from the runner variable ``api_key_env`` (:meth:`Adapter.credential`; ``None``: no
    key), with the adapter's live limits for ``agent`` (its ``[prices]`` rates, the heat's
    cap :meth:`Adapter.heat_cap`, the season ledger :attr:`Adapter.season_spend`) and the other
    entrants' keys to scrub (:attr:`Adapter.foreign_credentials`). The key lives only in the
    proxy. Raises ``error`` when the variable is unset."""
    from aoe_tui.agents.proxy import CredentialProxy

    key = None
    if api_key_env:
        key = adapter.credential(api_key_env)
        if not key:
            raise error(f"environment variable {api_key_env} (the model API key) is not set on the runner")
    proxy = CredentialProxy(base_url, key, rates=getattr(adapter, "price", None), heat_cap=adapter.heat_cap(agent),
                            season=adapter.season_spend,
                            scrub=[adapter.credential(n) for n in sorted(adapter.foreign_credentials)])
    del key
    await proxy.start()
    return proxy


async def connect_territory(connect: Any, territory_id: str, error: type[AoeError] = HarnessError) -> Any:
    """``await connect()`` (an SSH login to the territory); raises ``error`` naming the territory when it fails."""
    try:
        return await connect()
    except (asyncssh.Error, OSError, asyncio.TimeoutError) as exc:
        raise error(f"cannot reach territory {territory_id} over SSH: {exc or type(exc).__name__}") from None


def idle_or_grace_cut(*, started: float, final_seen_at: float | None, exit_grace_s: float, last_alive: float,
                      idle_timeout_s: float, what: str) -> tuple[str, str] | None:
    """The watchdog's two time limits (monotonic seconds): ``("no-exit", note)`` when the final
    answer came more than ``exit_grace_s`` ago, ``("idle", note)`` when nothing happened for
    more than ``idle_timeout_s`` (``what``: "without a <CLI> event or model traffic"); else ``None``."""
    now = time.monotonic()
    if final_seen_at is not None and now - final_seen_at > exit_grace_s:
        return "no-exit", limit_note("exit_grace_s", exit_grace_s, now - final_seen_at,
                                     "after the final answer without exiting", now - started)
    if now - last_alive > idle_timeout_s:
        return "idle", limit_note("idle_timeout_s", idle_timeout_s, now - last_alive, what, now - started)
    return None


async def watch_process(proc: Any, ctx: AgentContext, *, on_line: Any, on_err: Any, tick_s: float, check: Any,
                        kill: Any, activity: Any, label: str) -> tuple[str, str | None] | None:
    """Follow a CLI in the guest until it exits or a limit ends it.

    ``proc``'s stdout lines go to ``ctx.stdout_file`` and ``on_line``, its stderr to
    ``ctx.stderr_file`` and ``on_err`` (:func:`pump_stdout`, :func:`pump_stderr`). Every
    ``tick_s`` seconds ``check()`` may return ``(cut, note)``: then ``activity`` gets
    "watchdog: <note>; killing <label>", ``await kill()`` ends the process (its exit is awaited
    up to 10 s) and ``(cut, note)`` is returned; ``None`` when the process exited by itself.
    The pumps are drained (10 s at most); SSH/OS errors while waiting end the wait quietly.
    """
    cut: tuple[str, str | None] | None = None

    async def watchdog() -> tuple[str, str | None]:
        while True:
            await asyncio.sleep(tick_s)
            found = check()
            if found:
                return found

    pumps = asyncio.gather(pump_stdout(proc, ctx.stdout_file, on_line), pump_stderr(proc, ctx.stderr_file, on_err))
    dog = asyncio.create_task(watchdog())
    exit_task = asyncio.ensure_future(proc.wait_closed())
    try:
        await asyncio.wait({exit_task, dog}, return_when=asyncio.FIRST_COMPLETED)
        if dog.done() and not exit_task.done():
            cut = dog.result()
            activity.append(f"watchdog: {cut[1] or cut[0]}; killing {label}")
            await kill()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(exit_task), 10)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(pumps, 10)
    except (asyncssh.Error, OSError):
        pass
    finally:
        dog.cancel()
        pumps.cancel()
        with contextlib.suppress(BaseException):
            await pumps
    return cut


async def close_seat(proxy: Any, conn: Any) -> None:
    """Close a seat's credential proxy and SSH connection (either may be ``None``). Never raises."""
    with contextlib.suppress(Exception):
        if proxy is not None:
            await proxy.close()
    with contextlib.suppress(Exception):
        if conn is not None:
            conn.close()


async def prepared(staged: Any) -> Any:
    """``await staged.prepare()`` and return ``staged``; on any failure (cancellation too)
    ``await staged.close()`` first, so nothing is left open, then re-raise."""
    try:
        await staged.prepare()
    except BaseException:
        await staged.close()
        raise
    return staged


def transcript_doc(*, model: str, status: str, final_text: str | None, usage: dict[str, Any], prompt: str,
                   parts: list[dict[str, Any]], trace: list[dict[str, Any]], model_rounds: list[dict[str, Any]],
                   **extra: Any) -> dict[str, Any]:
    """The transcript document (claux-like, §2.7; ``docs/formats.md``): ``schema_version`` 2,
    ``model``, ``extra`` keys (e.g. ``harness``), ``outcome`` (``status``, and ``result`` =
    ``final_text`` when completed), ``usage`` (tokens; ``cost_usd``), ``messages`` (the prompt,
    then the assistant's ``parts``), ``tool_trace`` and ``timing`` (``total_duration_ms``: the
    end of the last model round, ms)."""
    outcome: dict[str, Any] = {"status": status}
    if final_text is not None and status == "completed":
        outcome["result"] = final_text
    total = max((r["started_after_ms"] + r["duration_ms"] for r in model_rounds), default=0)
    return {
        "schema_version": 2, "model": model, **extra, "outcome": outcome, "usage": usage,
        "messages": [{"role": "user", "content": prompt}] + ([{"role": "assistant", "content": parts}] if parts else []),
        "tool_trace": trace,
        "timing": {"total_duration_ms": total, "model_rounds": model_rounds},
    }


def write_artifacts(ctx: AgentContext, status: AdapterStatus, summary: str, usage: Usage,
                    transcript: dict[str, Any], activity: Any) -> AgentOutcome:
    """The end of a run: ``usage.json`` (§5.5), ``transcript.json`` (§2.7), ``analysis.json``
    (§9.2; a note in ``activity`` when the transcript is unusable), ``result.json`` (§5.3), then
    the manifest budget (§5.4). File errors are swallowed (the outcome still stands)."""
    transcript_path = ctx.agent_dir / "transcript.json"
    with contextlib.suppress(OSError):
        write_usage_file(ctx.usage_file, agent=ctx.agent.id, territory=ctx.territory.id, usage=usage)
    with contextlib.suppress(OSError):  # apart: a failed usage write must not cost the transcript
        write_json_atomic(transcript_path, transcript)
    with contextlib.suppress(Exception):
        from aoe_tui.agents.analysis import write_analysis

        made = write_analysis(transcript_path, ctx.agent_dir / "analysis.json", agent=ctx.agent.id,
                              territory=ctx.territory.id, model=ctx.agent.model, outcome=str(status))
        if isinstance(made, dict) and made.get("unavailable"):
            activity.append(str(made["unavailable"]))
    path = str(transcript_path) if transcript_path.exists() else None
    with contextlib.suppress(OSError):
        write_result_file(ctx.result_file, agent=ctx.agent.id, territory=ctx.territory.id, status=status,
                          summary=summary, usage=usage, transcript=path)
    return apply_budget(AgentOutcome(status, summary, usage, path), getattr(ctx.agent, "budget", None))


# ----------------------------------------------------------------------------- options


@dataclass
class HarnessOptions:
    """Adapter options of a harness (season ``[[entrants]].options``).

    Attributes:
        base_url: the provider's base URL the proxy forwards to (guest ``/v1/<rest>`` →
            ``<base_url>/<rest>``); default :attr:`Harness.default_base_url`.
        api_key_env: NAME of the runner environment variable with the key (``None``/"" = no key).
        max_turns: our cap on model turns (the CLI's own where it has one) → ``budget_exceeded``.
        wall_clock_s: our wall-clock limit (s); ``None`` = the heat deadline.
        idle_timeout_s: no JSON event and no model traffic through the proxy for this long (s)
            → the run is killed as hung (``harness_error``).
        exit_grace_s: after the final answer, how long the CLI may take to exit (s).
        upload_timeout_s: bound on the binary's upload where it is not shared (s).
        stage_step_timeout_s: bound on each other SSH step of staging (s).
    """

    base_url: str = ""
    api_key_env: str | None = None
    max_turns: int = 150
    wall_clock_s: float | None = None
    idle_timeout_s: float = 600.0
    exit_grace_s: float = 10.0
    upload_timeout_s: float = 300.0
    stage_step_timeout_s: float = 30.0

    @classmethod
    def from_mapping(cls, options: dict[str, Any] | None, harness: Harness, *, where: str = "options") -> HarnessOptions:
        """Build from a free-form mapping; defaults from ``harness``.

        Raises:
            HarnessError: an unknown key or a value of the wrong type (one line naming ``where.key``).
        """
        opts = cls(base_url=harness.default_base_url, api_key_env=harness.default_api_key_env)
        for key, value in (options or {}).items():
            if key not in cls.__dataclass_fields__:
                known = ", ".join(cls.__dataclass_fields__)
                raise HarnessError(f"{where}.{key}: unknown {harness.name} option (known: {known})")
            try:
                if key in ("base_url", "api_key_env"):
                    value = None if value in (None, "") and key == "api_key_env" else str(value)
                elif key == "max_turns":
                    if isinstance(value, bool):
                        raise TypeError(value)
                    value = int(value)
                elif value is not None or key != "wall_clock_s":
                    if isinstance(value, bool):
                        raise TypeError(value)
                    value = float(value)
            except (TypeError, ValueError):
                raise HarnessError(f"{where}.{key}: expected a number, got {value!r}") from None
            setattr(opts, key, value)
        if opts.max_turns < 1:
            raise HarnessError(f"{where}.max_turns must be at least 1")
        if not opts.base_url.startswith(("http://", "https://")):
            raise HarnessError(f"{where}.base_url must be an http(s) URL, got {opts.base_url!r}")
        return opts


# ----------------------------------------------------------------------------- state


@dataclass
class HarnessState:
    """What the event stream told so far (folded by :meth:`Harness.on_event`).

    Token fields are token counts: ``input_tokens`` is every input token (cache reads and
    writes included), ``output_tokens`` every output token (reasoning included).
    ``started_at`` / ``last_event_at`` are ``time.monotonic()`` seconds.
    """

    started_at: float = field(default_factory=time.monotonic)
    last_event_at: float = field(default_factory=time.monotonic)
    rounds: int = 0
    tool_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read: int = 0
    cache_write: int = 0
    reasoning: int = 0
    #: the CLI's own cost figure (USD), kept for ``usage_detail`` only — never reported
    harness_cost_usd: float = 0.0
    final_text: str | None = None
    #: True once the CLI said the run ended with an answer (Claude's ``result`` without
    #: ``is_error``; Codex's ``turn.completed``)
    final: bool = False
    final_seen_at: float | None = None
    #: ``(status, summary)`` of an error the CLI reported (provider or harness)
    failure: tuple[AdapterStatus, str] | None = None
    #: our turn cap fired (the CLI's ``max_turns`` result)
    max_turns_hit: bool = False
    session_id: str | None = None
    parts: list[dict[str, Any]] = field(default_factory=list)
    trace: list[dict[str, Any]] = field(default_factory=list)
    model_rounds: list[dict[str, Any]] = field(default_factory=list)
    #: tool calls started and not finished: id → (name, input, started_after_ms)
    open_tools: dict[str, tuple[str, dict[str, Any], int]] = field(default_factory=dict)
    first_tool_at: float | None = None
    #: ids already counted (message ids, item ids)
    seen: set[str] = field(default_factory=set)

    def elapsed_ms(self) -> int:
        """ms since the run started (monotonic)."""
        return max(0, int((time.monotonic() - self.started_at) * 1000))

    def tool_started(self, call_id: str, name: str, inp: dict[str, Any]) -> None:
        """A tool call began (counted when it finishes, :meth:`tool_finished`)."""
        if self.first_tool_at is None:
            self.first_tool_at = time.monotonic()
        self.open_tools.setdefault(call_id, (name, inp, self.elapsed_ms()))
        self.parts.append({"type": "tool_use", "id": call_id, "name": name, "input": inp})

    def tool_finished(self, call_id: str, output: Any, is_error: bool, *, read_only: bool = False,
                      name: str | None = None, inp: dict[str, Any] | None = None) -> dict[str, Any]:
        """A tool call ended: one ``tool_trace`` entry (§2.7) and a ``tool_result`` part."""
        if call_id not in self.open_tools:
            self.tool_started(call_id, name or "tool", inp or {})
        tname, tinp, start = self.open_tools.pop(call_id)
        text = output if isinstance(output, str) else json.dumps(output)
        entry = {"id": call_id, "name": tname, "input": tinp, "output": text, "is_error": bool(is_error),
                 "read_only": read_only, "started_after_ms": start, "duration_ms": max(0, self.elapsed_ms() - start)}
        self.trace.append(entry)
        self.tool_calls += 1
        self.parts.append({"type": "tool_result", "tool_use_id": call_id, "content": text, "is_error": bool(is_error)})
        return entry

    def model_round(self, status: str, usage: dict[str, int]) -> None:
        """One model response ended: a ``timing.model_rounds`` entry."""
        now = self.elapsed_ms()
        prev = self.model_rounds[-1]["started_after_ms"] + self.model_rounds[-1]["duration_ms"] if self.model_rounds else 0
        self.model_rounds.append({"index": len(self.model_rounds), "started_after_ms": prev,
                                  "duration_ms": max(0, now - prev), "status": status, "usage": usage})
        self.rounds = max(self.rounds, len(self.model_rounds))


def fold_stream(harness: Harness, lines: list[str] | list[bytes]) -> tuple[HarnessState, list[str]]:
    """Fold a recorded event stream (one JSON object per line) with ``harness``'s parser;
    returns the state and the activity lines. Lines that are not JSON objects are skipped."""
    state, activity = HarnessState(), []
    for line in lines:
        with contextlib.suppress(ValueError):
            ev = json.loads(line)
            if isinstance(ev, dict):
                harness.on_event(state, ev, activity.append)
    return state, activity


# ----------------------------------------------------------------------------- the harness


class Harness:
    """One coding-agent CLI: what differs between harnesses. Subclasses set the class
    attributes and implement :meth:`env`, :meth:`argv` and :meth:`on_event`."""

    #: adapter / registry name (``claude-code``)
    name: ClassVar[str] = ""
    #: shown in summaries (``Claude Code``)
    label: ClassVar[str] = ""
    npm_package: ClassVar[str] = ""
    version: ClassVar[str] = ""
    #: what ``<binary> --version`` prints (default :attr:`version`)
    version_marker: ClassVar[str | None] = None
    #: the native binary inside ``node_modules`` (first that exists)
    binary_paths: ClassVar[tuple[str, ...]] = ()
    #: its name in the guest
    binary_name: ClassVar[str] = ""
    #: runner env var naming a binary to use instead of the npm one
    env_binary: ClassVar[str | None] = None
    default_base_url: ClassVar[str] = ""
    default_api_key_env: ClassVar[str | None] = None
    #: tool names that only read
    read_only_tools: ClassVar[frozenset[str]] = frozenset()

    def guest_root(self) -> str:
        """Guest folder for an uploaded binary and the per-run folders."""
        return f"/var/tmp/aoe-{self.name}"

    def share_guest(self) -> str:
        """Where the harness folder is shared read-only in the guest."""
        return f"/opt/aoe-harness/{self.name}"

    def binary(self) -> Path | None:
        """The installed binary, or ``None`` (:func:`npm_binary`)."""
        return npm_binary(self.name, self.version, self.binary_paths, self.env_binary)

    def ensure(self) -> Path:
        """The binary, installed from npm on first use (:func:`ensure_npm_binary`). Raises :class:`HarnessError`."""
        return ensure_npm_binary(self.name, self.npm_package, self.version, self.binary_paths,
                                 env_var=self.env_binary, version_marker=self.version_marker)

    def preflight_call(self, model_id: str) -> tuple[str, dict[str, Any]]:
        """The one-token request (guest path, JSON body) that checks key and model before any
        territory boots (:meth:`KeyedAdapter.preflight_model`), in the API this CLI speaks;
        a subclass overrides it (default: an OpenAI chat completion)."""
        return "/v1/chat/completions", {"model": model_id, "messages": [{"role": "user", "content": "Reply with OK."}],
                                        "max_tokens": 1, "stream": False}

    def folder(self) -> Path:
        """The runner folder shared into territories (``<cache>/<name>/<version>/harness``). Raises :class:`HarnessError`."""
        return harness_folder(_cache_dir(self.name, self.version) / "harness", {self.binary_name: self.ensure()})

    def env(self, run_dir: str, guest_port: int, model_id: str, opts: HarnessOptions, ctx: AgentContext) -> dict[str, str]:
        """The CLI's own environment variables (added to HOME, PATH, TMPDIR, …)."""
        raise NotImplementedError

    def argv(self, model_id: str, opts: HarnessOptions, ctx: AgentContext) -> list[str]:
        """The command line (argv[0] = :attr:`binary_name`); the prompt comes on stdin."""
        raise NotImplementedError

    def files(self, run_dir: str, guest_port: int, model_id: str, opts: HarnessOptions,
              ctx: AgentContext) -> dict[str, str]:
        """Extra files written into the run folder before the clock (guest path → text)."""
        return {}

    def on_event(self, state: HarnessState, ev: dict[str, Any], activity: Any) -> None:
        """Fold one JSON event of the CLI's stream into ``state``; ``activity(line)`` adds an activity line."""
        raise NotImplementedError

    def exit_failure(self, state: HarnessState, rc: int | None, stderr_line: str | None) -> tuple[AdapterStatus, str] | None:
        """A CLI's own reading of an exit without an answer (e.g. a config error on stderr); ``None``: the runner's rule."""
        return None


# ----------------------------------------------------------------------------- staging


class Seat:
    """Names and guest paths of one seat of an in-territory CLI (needs ``ctx``; the harness
    runner's and opencode's staging and runs): the transient systemd scope
    ``aoe-<seat_name>-<agent>``, the run folder ``/var/tmp/aoe-<seat_name>/<agent>``, the model
    id, the SSH login, guest commands and the launch command."""

    ctx: AgentContext
    harness: Harness
    opts: Any

    @property
    def seat_name(self) -> str:
        """The CLI's name in guest paths and units (the harness's name)."""
        return self.harness.name

    @property
    def scope(self) -> str:
        return f"aoe-{self.seat_name}-{_NAME_RE.sub('-', self.ctx.agent.id)}"

    @property
    def run_dir(self) -> str:
        return f"/var/tmp/aoe-{self.seat_name}/{_NAME_RE.sub('-', self.ctx.agent.id)}"

    def launch_command(self) -> str:
        """The guest command that starts ``run.sh`` in the run's transient systemd scope."""
        return (f"systemctl reset-failed {self.scope}.scope >/dev/null 2>&1; "
                f"exec systemd-run --scope --quiet --collect --unit={self.scope} {self.run_dir}/run.sh")

    @property
    def model_id(self) -> str:
        """The manifest model without its provider prefix (``anthropic/claude-x`` → ``claude-x``)."""
        model = self.ctx.agent.model
        return model.split("/", 1)[1] if "/" in model else model

    async def connect(self) -> asyncssh.SSHClientConnection:
        from aoe_tui.runtime.ssh import connect

        t = self.ctx.territory
        return await connect(t.host, t.ssh_port, t.password, connect_timeout_s=15.0)

    async def guest_run(self, cmd: str, conn: asyncssh.SSHClientConnection | None = None) -> None:
        """Run ``cmd`` in the guest (:func:`guest_command`). Never raises."""
        await guest_command(self.connect, conn, cmd)

    def kill_command(self) -> str:
        return f"systemctl kill -s KILL {self.scope}.scope >/dev/null 2>&1; true"


class HarnessStaged(Seat, Staged):
    """One seat's harness staged before the clock (:meth:`HarnessAdapter.stage`): the proxy
    listening, an SSH connection with the reverse tunnel, the binary in place, the run folder
    and ``run.sh`` written.

    Attributes:
        proxy: the started credential proxy. conn: the SSH connection. guest_port: the tunnel's guest port.
        bin_dir: the guest folder of the binary. prompt: the instruction text.
        steps_s: seconds per staging step. harness_mode: ``shared``, ``uploaded`` or ``present``.
        uploaded_bytes: bytes sent over SFTP.
    """

    def __init__(self, ctx: AgentContext, adapter: HarnessAdapter) -> None:
        self.ctx, self.adapter, self.harness, self.opts = ctx, adapter, adapter.harness, adapter.options
        self.proxy: Any = None
        self.conn: asyncssh.SSHClientConnection | None = None
        self.guest_port = 0
        self.bin_dir = ""
        self.prompt = ""
        self.steps_s: dict[str, float] = {}
        self.harness_mode = ""
        self.uploaded_bytes = 0

    def detail(self) -> dict[str, Any]:
        """``harness`` (shared/uploaded/present), ``uploaded_bytes`` and ``steps_s`` (s) for ``aoe-extra.json``."""
        return {"harness": self.harness_mode, "uploaded_bytes": self.uploaded_bytes, "steps_s": dict(self.steps_s)}

    def bounded(self, step: str, limit: float | None = None, option: str = "stage_step_timeout_s"):
        """Bound one staging step (:func:`bounded`). Raises :class:`HarnessError` naming the step and the option."""
        limit = self.opts.stage_step_timeout_s if limit is None else limit
        return bounded(limit, f"staging {self.harness.name} in territory {self.ctx.territory.id}: {step} got no "
                              f"answer within {limit:g} s ({option})")

    def launcher(self) -> str:
        """``run.sh``: the CLI with a clean environment, cwd ``/root``, the prompt on stdin."""
        d, h = self.run_dir, f"{self.run_dir}/home"
        env = {
            "HOME": h, "USER": "root", "LOGNAME": "root", "SHELL": "/bin/bash", "LANG": "C.UTF-8", "TERM": "dumb",
            "PATH": f"{self.bin_dir}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "TMPDIR": f"{d}/tmp", "XDG_RUNTIME_DIR": f"{d}/tmp", "XDG_CONFIG_HOME": f"{h}/.config",
            "XDG_CACHE_HOME": f"{h}/.cache", "XDG_DATA_HOME": f"{h}/.local/share", "XDG_STATE_HOME": f"{h}/.local/state",
            "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost",
            **self.harness.env(d, self.guest_port, self.model_id, self.opts, self.ctx),
        }
        envs = " ".join(shlex.quote(f"{k}={v}") for k, v in env.items())
        run = " ".join(shlex.quote(a) for a in self.harness.argv(self.model_id, self.opts, self.ctx))
        return ("#!/bin/sh\n"
                "cd /root 2>/dev/null || cd /\n"
                f"exec env -i {envs} {run} < {shlex.quote(d + '/prompt.md')}\n")

    async def prepare(self) -> None:
        """Do the staging (see the class docstring); the caller closes on failure.

        Raises:
            HarnessError: no binary, no key, unreachable territory, a step past its bound.
            asyncssh.Error, OSError: an SSH step failed.
        """
        ctx, h = self.ctx, self.harness
        t = time.monotonic()

        def step(name: str) -> None:
            nonlocal t
            now = time.monotonic()
            self.steps_s[name] = round(now - t, 3)
            t = now

        self.prompt = Path(ctx.instruction_file).read_text(encoding="utf-8")
        binary = await asyncio.to_thread(h.ensure)
        self.proxy = await start_proxy(self.adapter, self.opts.base_url, self.opts.api_key_env, self.ctx.agent)
        step("install")
        self.conn = conn = await connect_territory(self.connect, ctx.territory.id)
        step("connect")
        d, shared = self.run_dir, shlex.quote(f"{h.share_guest()}/{h.binary_name}")
        async with self.bounded("preparing the run folder"):
            res = await conn.run(
                f"rm -rf {shlex.quote(d)} && mkdir -p {shlex.quote(d)}/home {shlex.quote(d)}/tmp && "
                f"chmod 0700 {shlex.quote(d)}/tmp && "
                f"if [ -x {shared} ] && [ \"$(stat -c %s {shared})\" = {binary.stat().st_size} ]; then echo shared; "
                f"else mkdir -p {h.guest_root()}/bin; fi", check=True)
        if str(res.stdout or "").strip() == "shared":
            self.bin_dir, self.harness_mode = h.share_guest(), "shared"
        else:
            self.bin_dir = f"{h.guest_root()}/bin"
            async with self.bounded(f"uploading {h.binary_name}", self.opts.upload_timeout_s, "upload_timeout_s"):
                self.uploaded_bytes = await upload_if_changed(conn, binary, f"{self.bin_dir}/{h.binary_name}")
            self.harness_mode = "uploaded" if self.uploaded_bytes else "present"
        step("harness")
        async with self.bounded("opening the reverse tunnel to the credential proxy"):
            listener = await conn.forward_remote_port("127.0.0.1", 0, "127.0.0.1", self.proxy.port)
        self.guest_port = listener.get_port()
        step("tunnel")
        files = {f"{d}/prompt.md": self.prompt, f"{d}/run.sh": self.launcher(),
                 **h.files(d, self.guest_port, self.model_id, self.opts, ctx)}
        async with self.bounded("writing the prompt, configuration and run.sh"):
            async with conn.start_sftp_client() as sftp:
                for path, text in files.items():
                    await conn.run(f"mkdir -p {shlex.quote(os.path.dirname(path))}", check=True)
                    async with sftp.open(path, "w") as fh:
                        await fh.write(text)
            await conn.run(f"chmod 0700 {shlex.quote(d)}/run.sh", check=True)
        step("launcher")

    async def close(self) -> None:
        """Close the proxy and the connection (idempotent, never raises)."""
        proxy, conn, self.proxy, self.conn = self.proxy, self.conn, None, None
        await close_seat(proxy, conn)


# ----------------------------------------------------------------------------- the run


class SupervisedRun(AgentRun):
    """What every run of a CLI inside a territory shares (:class:`HarnessRun`, and opencode's
    own run): the limits ladder around the run's body (:meth:`_supervise`), cumulative usage
    checkpoints (:meth:`checkpoint`), :meth:`wait` and :meth:`stop`.

    A subclass sets :attr:`label` (shown in lines) and :attr:`adapter_name`, and implements
    :meth:`usage`, :meth:`kill` (end the CLI and what it started), :meth:`_body` (start, follow,
    classify: ``(status, summary)``) and :meth:`_finish` (artifacts → outcome); it may override
    :meth:`wall_clock_outcome` and :meth:`cleanup`. ``opts.wall_clock_s`` (s, ``None``: the
    heat deadline) bounds the body.
    """

    label: str = ""
    adapter_name: str = ""
    stopped: bool = False
    state: Any
    proxy_stats: Any = None
    _stderr_tail: bytes = b""
    _last_usage: Usage | None = None
    _task: asyncio.Task[AgentOutcome]
    opts: Any

    def usage(self) -> Usage:
        raise NotImplementedError

    async def kill(self) -> None:
        """End the CLI and everything it started in the guest (best effort, never raises)."""
        raise NotImplementedError

    async def _body(self) -> tuple[AdapterStatus, str]:
        raise NotImplementedError

    def _finish(self, status: AdapterStatus, summary: str) -> AgentOutcome:
        raise NotImplementedError

    async def wall_clock_outcome(self, note: str) -> tuple[AdapterStatus, str] | None:
        """Called when ``wall_clock_s`` fired, before the kill: another reading than ``timed_out``, or ``None``."""
        return None

    async def cleanup(self) -> None:
        """Release what the run holds once it ended (connections, staging). Never raises."""

    def last_alive(self) -> float:
        """``time.monotonic()`` (s) of the last sign of life: a JSON event of the CLI
        (``state.last_event_at``) or model traffic through the credential proxy
        (``proxy_stats.last_activity``), whichever is later."""
        alive = self.state.last_event_at
        last = getattr(self.proxy_stats, "last_activity", None)
        return max(alive, last) if isinstance(last, (int, float)) else alive

    def keep_stderr(self, data: bytes) -> None:
        """Keep the CLI's last :data:`STDERR_TAIL` bytes of stderr (for :meth:`stderr_line`)."""
        self._stderr_tail = (self._stderr_tail + data)[-STDERR_TAIL:]

    def stderr_line(self) -> str | None:
        """The most relevant line of the CLI's stderr (:func:`relevant_line`): the last line
        naming an error, else the last non-empty line; ``None`` if empty."""
        return relevant_line(self._stderr_tail)

    def limit_check(self, started: float, cap: str | None) -> tuple[str, str | None] | None:
        """One watchdog tick: a usage checkpoint, then ``(cap, None)`` when the run's own cap
        fired (``cap`` given), ``("budget", line)`` when the credential proxy refused a model
        call past a live spend limit (issue 27; ``proxy_stats.refused``: the limit and the
        amount spent), else :func:`idle_or_grace_cut` on ``opts`` (``exit_grace_s``,
        ``idle_timeout_s``) since ``started`` (monotonic s)."""
        self.checkpoint()
        if cap:
            return cap, None
        refused = getattr(self.proxy_stats, "refused", None)
        if refused:
            return "budget", str(refused)
        return idle_or_grace_cut(started=started, final_seen_at=self.state.final_seen_at,
                                 exit_grace_s=self.opts.exit_grace_s, last_alive=self.last_alive(),
                                 idle_timeout_s=self.opts.idle_timeout_s,
                                 what=f"without {'an' if self.label[:1].lower() in 'aeiou' else 'a'} {self.label} event "
                                      "or model traffic")

    def checkpoint(self) -> None:
        """Write ``usage.json`` (§5.5) when :meth:`usage` changed."""
        u = self.usage()
        if u == self._last_usage:
            return
        self._last_usage = u
        with contextlib.suppress(OSError):
            write_usage_file(self.ctx.usage_file, agent=self.ctx.agent.id, territory=self.ctx.territory.id, usage=u)

    async def _supervise(self) -> AgentOutcome:
        """The body under the wall-clock limit; every way it can end becomes an outcome:
        the limit → ``timed_out`` (or :meth:`wall_clock_outcome`); :meth:`stop` →
        ``interrupted``; a :class:`HarnessError` → ``harness_error``; SSH/OS errors →
        ``interrupted`` when the referee rebooted the guest, else ``unavailable``; any other
        exception (a bug) → ``harness_error`` naming it, never a traceback."""
        limit = self.opts.wall_clock_s if self.opts.wall_clock_s is not None else self.ctx.deadline_s
        started = time.monotonic()
        try:
            try:
                status, summary = await asyncio.wait_for(self._body(), timeout=max(0.0, float(limit)))
            except asyncio.TimeoutError:
                run_s = time.monotonic() - started
                note = limit_note("wall_clock_s", float(limit), run_s, "since the run started", run_s)
                self.activity.append(f"watchdog: {note}; killing {self.label}")
                other = await self.wall_clock_outcome(note)
                await self.kill()
                if other is not None:
                    return self._finish(*other)
                return self._finish(AdapterStatus.TIMED_OUT, f"{DEADLINE_SUMMARY} ({note})")
            except asyncio.CancelledError:
                if self.stopped:
                    await self.kill()
                    return self._finish(AdapterStatus.INTERRUPTED, STOPPED_SUMMARY)
                raise
            except HarnessError as exc:
                self.activity.append(str(exc))
                return self._finish(AdapterStatus.HARNESS_ERROR, str(exc))
            except (asyncssh.Error, OSError) as exc:
                if self.ctx.reboot_marker.exists():
                    return self._finish(AdapterStatus.INTERRUPTED, REBOOT_SUMMARY)
                summary = f"SSH to territory {self.ctx.territory.id} failed: {exc or type(exc).__name__}"
                return self._finish(AdapterStatus.UNAVAILABLE, " ".join(summary.split())[:300])
            except Exception as exc:  # a bug: never a traceback to the referee
                summary = f"{self.adapter_name} adapter failed: {type(exc).__name__}: {exc}"
                return self._finish(AdapterStatus.HARNESS_ERROR, " ".join(summary.split())[:300])
            if self.stopped:
                return self._finish(AdapterStatus.INTERRUPTED, STOPPED_SUMMARY)
            if status != AdapterStatus.COMPLETED:
                await self.kill()
            return self._finish(status, summary)
        finally:
            await self.cleanup()

    async def wait(self) -> AgentOutcome:
        """Wait for the run to end; returns its outcome (never raises)."""
        return await asyncio.shield(self._task)

    async def stop(self) -> None:
        """Kill the CLI and everything it started in the guest, then finish ``interrupted``. Idempotent."""
        if self._task.done():
            return
        self.stopped = True
        await self.kill()
        self._task.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.shield(self._task)


class HarnessRun(Seat, SupervisedRun):
    """One harness run (see the module docstring). Created by :meth:`HarnessAdapter.start`.

    Attributes:
        state: the folded :class:`HarnessState`. stopped: True once :meth:`stop` was called.
        proxy_stats: the credential proxy's stats (after start).
    """

    #: watchdog period (s)
    tick_s: float = 1.0

    def __init__(self, ctx: AgentContext, adapter: HarnessAdapter) -> None:
        self.setup(ctx, adapter)
        self._task = asyncio.create_task(self._supervise(), name=f"{self.harness.name}-{ctx.agent.id}")

    def setup(self, ctx: AgentContext, adapter: HarnessAdapter) -> None:
        """Set the run's fields without starting it (``__init__`` then starts :meth:`_supervise`;
        tests drive :meth:`follow` on a run made with ``HarnessRun.__new__`` + :meth:`setup`)."""
        AgentRun.__init__(self, ctx)
        self.adapter, self.harness, self.opts = adapter, adapter.harness, adapter.options
        self.label, self.adapter_name = self.harness.label, self.harness.name
        self.state = HarnessState()
        self.stopped = False
        self.proxy_stats: Any = None
        self.prompt = ""
        self._conn: asyncssh.SSHClientConnection | None = None
        self._staged: HarnessStaged | None = None
        self._cut_note: str | None = None
        self._last_usage: Usage | None = None

    # ------------------------------------------------------------------ usage + transcript

    def usage(self) -> Usage:
        """Cumulative usage (see the module docstring): the event stream's counts raised to
        the proxy's; cost (µUSD) from the season's ``[prices]`` only, else 0."""
        s, ps = self.state, self.proxy_stats
        inp, out, rounds = s.input_tokens, s.output_tokens, s.rounds
        read, write = s.cache_read, s.cache_write
        if ps is not None:
            inp = max(inp, num(getattr(ps, "prompt_tokens", 0)))
            out = max(out, num(getattr(ps, "completion_tokens", 0)))
            read = max(read, num(getattr(ps, "cached_tokens", 0)))
            write = max(write, num(getattr(ps, "cache_write_tokens", 0)))
        rates = getattr(self.adapter, "price", None)
        cost = 0 if rates is None else rates.cost(max(0, inp - read - write), out, read, write)
        if rates is not None and ps is not None and num(getattr(ps, "responses_with_usage", 0)):
            # the proxy priced every response as it came (what the live limits enforce and the
            # budget line quotes): never report less than that
            cost = max(cost, num(getattr(ps, "cost_microusd", 0)))
        return Usage(rounds=rounds, tool_calls=s.tool_calls, input_tokens=inp, output_tokens=out, cost_microusd=cost,
                     resource_units=1, cache_read_tokens=read, cache_write_tokens=write)

    def usage_detail(self) -> dict[str, Any] | None:
        """Cache tokens (as :meth:`usage` charged them), who computed the cost (``price table``, or ``unpriced``: the CLI's own
        figure is never used), the CLI's own cost (µUSD), the two token counts."""
        s, ps, u = self.state, self.proxy_stats, self.usage()
        detail: dict[str, Any] = {  # the cache counts usage() charged (the proxy's when the events lack them)
            "cache_read_tokens": u.cache_read_tokens, "cache_write_tokens": u.cache_write_tokens,
            "cost_source": "price table" if getattr(self.adapter, "price", None) is not None else "unpriced",
            "adapter_cost_microusd": int(round(s.harness_cost_usd * 1e6)),
            "events_input_tokens": s.input_tokens, "events_output_tokens": s.output_tokens,
        }
        if ps is not None and getattr(ps, "responses_with_usage", 0):
            detail["proxy_input_tokens"] = ps.prompt_tokens
            detail["proxy_output_tokens"] = ps.completion_tokens
        return detail

    def start_detail(self) -> dict[str, Any] | None:
        """``first_model_request_ms`` and ``first_tool_call_ms`` (match-clock ms), those known."""
        out: dict[str, Any] = {}
        t0 = self.ctx.clock_started
        first = getattr(self.proxy_stats, "first_request_at", None)
        if isinstance(first, (int, float)) and t0 is not None:
            out["first_model_request_ms"] = int(round((first - t0) * 1000))
        if self.state.first_tool_at is not None and t0 is not None:
            out["first_tool_call_ms"] = int(round((self.state.first_tool_at - t0) * 1000))
        return out or None

    def transcript(self, status: str) -> dict[str, Any]:
        """The transcript (:func:`transcript_doc`, §2.7) with ``harness: {name, version}``;
        ``usage.input_tokens`` counts every input token, cache reads and writes included (as
        opencode's transcript, claux's and ``usage.json``: ATIF's prompt tokens), ``cost_usd``
        ours from ``[prices]``."""
        s = self.state
        usage = {"input_tokens": s.input_tokens, "output_tokens": s.output_tokens,
                 "cache_read_tokens": s.cache_read, "cache_creation_tokens": s.cache_write,
                 "cost_usd": (self.usage().cost_microusd or 0) / 1e6}
        return transcript_doc(model=self.ctx.agent.model, status=status, final_text=s.final_text, usage=usage,
                              prompt=self.prompt, parts=s.parts, trace=s.trace, model_rounds=s.model_rounds,
                              harness={"name": self.harness.name, "version": self.harness.version})

    def on_line(self, line: bytes) -> None:
        """One stdout line: folded when it is a JSON object; usage checkpoint and live transcript."""
        with contextlib.suppress(ValueError):
            ev = json.loads(line)
            if isinstance(ev, dict):
                self.state.last_event_at = time.monotonic()
                before = (self.state.rounds, self.state.tool_calls)
                self.harness.on_event(self.state, ev, self.activity.append)
                if self.state.final and self.state.final_seen_at is None:
                    self.state.final_seen_at = time.monotonic()
                if (self.state.rounds, self.state.tool_calls) != before:
                    self.checkpoint()
                    with contextlib.suppress(OSError):
                        write_json_atomic(self.ctx.agent_dir / "transcript.live.json", self.transcript("running"),
                                          fsync=False)

    # ------------------------------------------------------------------ the run

    async def _body(self) -> tuple[AdapterStatus, str]:
        ctx = self.ctx
        staged = ctx.staged if isinstance(ctx.staged, HarnessStaged) else None
        ctx.staged = None
        if staged is None:
            self.activity.append(f"preparing {self.harness.label} in the territory")
            staged = await self.adapter.stage(ctx)
        self._staged = staged
        self.prompt = staged.prompt
        self.proxy_stats = staged.proxy.stats
        self._conn = conn = staged.conn
        try:
            if staged.harness_mode == "uploaded":
                self.activity.append(f"uploaded {self.harness.binary_name} ({staged.uploaded_bytes // 1_000_000} MB) "
                                     "before the clock")
            self.activity.append(f"{self.harness.binary_name} --model {self.model_id} (proxy via guest port "
                                 f"{staged.guest_port})")
            self.state = HarnessState()
            proc = await conn.create_process(staged.launch_command(), stdin=asyncssh.DEVNULL, encoding=None)
            return await self.follow(conn, proc)
        finally:
            await staged.proxy.close()

    async def follow(self, conn: Any, proc: Any) -> tuple[AdapterStatus, str]:
        """Read events until the CLI exits or a limit ends it; return (status, summary).

        ``conn`` needs ``is_closed()``; ``proc`` is asyncssh-like (``stdout.readline``,
        ``stderr.read``, ``wait_closed``, ``returncode``, ``exit_status``, ``exit_signal``).
        """
        started = time.monotonic()
        found = await watch_process(
            proc, self.ctx, on_line=self.on_line, on_err=self.keep_stderr, tick_s=self.tick_s,
            check=lambda: self.limit_check(started, "turns" if self.state.rounds > self.opts.max_turns else None),
            kill=lambda: self.guest_run(self.kill_command(), conn), activity=self.activity, label=self.harness.label)
        cut = found[0] if found else None
        self._cut_note = found[1] if found else None
        self.checkpoint()
        rc = proc.exit_status if proc.returncode is not None else None
        signal_ = proc.exit_signal[0] if proc.exit_signal else None
        self.activity.append(f"{self.harness.binary_name} ended: rc={rc} signal={signal_} rounds={self.state.rounds}")
        return self.classify(cut=cut, rc=rc, signal_=signal_, lost=conn.is_closed() or (rc is None and signal_ is None))

    def classify(self, *, cut: str | None, rc: int | None, signal_: str | None, lost: bool) -> tuple[AdapterStatus, str]:
        """The run's (status, summary); the rule is in the module docstring (first match wins)."""
        s, label = self.state, self.harness.label
        err_line = self.stderr_line()
        tail = f" (stderr: {err_line})" if err_line else ""
        if s.final and s.failure is None:
            text = " ".join((s.final_text or "").split())[:1000] or f"{label} finished"
            if cut == "no-exit" and self._cut_note:
                text += f" [{label} did not exit: {self._cut_note}; killed]"
            return AdapterStatus.COMPLETED, text
        if cut == "turns" or s.max_turns_hit:
            return AdapterStatus.BUDGET_EXCEEDED, f"{label} exceeded the turn cap of {self.opts.max_turns} turns"
        refused = getattr(self.proxy_stats, "refused", None)
        if refused:  # the CLI saw the proxy's 402 as an API error: the limit is why it stopped
            return AdapterStatus.BUDGET_EXCEEDED, f"{refused}; the credential proxy refused the next model call"
        if lost and self.ctx.reboot_marker.exists():
            return AdapterStatus.INTERRUPTED, REBOOT_SUMMARY
        if s.failure is not None:
            status, summary = s.failure
            return status, summary + (tail if err_line and err_line not in summary else "")
        ps = self.proxy_stats
        if ps is not None and (getattr(ps, "connect_failures", 0) or getattr(ps, "error_statuses", None)) \
                and not getattr(ps, "responses_with_usage", 0) and s.rounds == 0:
            what = "stalled" if cut == "idle" else "failed"
            return AdapterStatus.UNAVAILABLE, f"model endpoint unavailable ({label} {what}): {ps.last_error}"
        if cut == "idle":
            return AdapterStatus.HARNESS_ERROR, f"{label} hung: {self._cut_note}; killed{tail}"
        own = self.harness.exit_failure(s, rc, err_line)
        if own is not None:
            return own
        if lost:
            return AdapterStatus.HARNESS_ERROR, f"the SSH session to the territory was lost while {label} ran{tail}"
        how = f"signal {signal_}" if signal_ else f"exit status {rc}"
        if rc == 0:
            return AdapterStatus.HARNESS_ERROR, f"{label} exited without a final answer after {s.rounds} turns{tail}"
        return AdapterStatus.HARNESS_ERROR, f"{label} crashed ({how}) after {s.rounds} turns without a result{tail}"

    def _finish(self, status: AdapterStatus, summary: str) -> AgentOutcome:
        return write_artifacts(self.ctx, status, summary, self.usage(), self.transcript(str(status)), self.activity)

    async def kill(self) -> None:
        """Kill the run's systemd scope in the guest (the CLI and its tools). Never raises."""
        await self.guest_run(self.kill_command(), self._conn)

    async def cleanup(self) -> None:
        """Close the connection and the staging (proxy). Never raises."""
        if self._conn is not None:
            self._conn.close()
        staged = self._staged or (self.ctx.staged if isinstance(self.ctx.staged, HarnessStaged) else None)
        if staged is not None:
            await staged.close()


async def post_json(port: int, path: str, body: dict[str, Any]) -> tuple[int, str]:
    """POST ``body`` as JSON to ``127.0.0.1:port`` (the credential proxy) and read the whole
    answer (the proxy closes the connection); returns (HTTP status, body text)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        data = json.dumps(body).encode()
        writer.write(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode() + data)
        await writer.drain()
        raw = await reader.read(-1)
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
    head, _, rest = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, rest.decode("utf-8", "replace")


def error_message(text: str) -> str:
    """``error.message`` of a JSON error body, else the body's first 200 chars, one line."""
    with contextlib.suppress(ValueError):
        obj = json.loads(text)
        err = obj.get("error") if isinstance(obj, dict) else None
        msg = err.get("message") if isinstance(err, dict) else err if isinstance(err, str) else None
        if msg:
            text = str(msg)
    return " ".join(text.split())[:200]


def scrub_key(text: str, key: str | None) -> str:
    """``text`` without the key value or anything that looks like a key (``sk-…``)."""
    if key:
        text = text.replace(key, "***")
    return re.sub(r"\b(sk|key|pk)-[A-Za-z0-9_\-*]{6,}", r"\1-***", text)


#: Provider/opencode wording for a model id nobody serves.
UNKNOWN_MODEL_RE = re.compile(
    r"model[^\n]{0,80}?(not found|does not exist|unknown|not supported|invalid)|unknown model|ProviderModelNotFound"
    r"|model_not_found", re.I)


# ----------------------------------------------------------------------------- the adapter


class KeyedAdapter(Adapter):
    """An adapter whose model key is the runner variable named by ``options.api_key_env``
    (opencode's and the harness runner's): the options with keyword overrides, the
    credential's name, and the preflight that refuses a missing key. Subclasses set
    :attr:`error` (the one-line error class)."""

    options: Any
    error: ClassVar[type[AoeError]] = HarnessError

    def _set_options(self, options: Any, overrides: dict[str, Any]) -> None:
        """Keep ``options`` with ``overrides`` applied. Raises :attr:`error` for an unknown name."""
        for k, v in overrides.items():
            if k not in type(options).__dataclass_fields__:
                raise self.error(f"unknown {self.name} option {k!r}")
            setattr(options, k, v)
        self.options = options

    def credential_names(self) -> list[str]:
        """``[api_key_env]`` (``[]`` without a key)."""
        return [self.options.api_key_env] if self.options.api_key_env else []

    def preflight(self) -> None:
        """Refuse to start a heat whose model key is missing on the runner (before provisioning).

        Raises:
            HarnessError: (:attr:`error`) the variable named by ``api_key_env`` is unset or empty.
        """
        if self.options.api_key_env and not self.credential(self.options.api_key_env):
            raise self.error(f"environment variable {self.options.api_key_env} (the model API key) is not set on the runner")

    def preflight_call(self, model_id: str) -> tuple[str, dict[str, Any]]:
        """The preflight request (guest path, JSON body): a one-token OpenAI chat completion
        (opencode); :class:`HarnessAdapter` asks its harness."""
        return "/v1/chat/completions", {"model": model_id, "messages": [{"role": "user", "content": "Reply with OK."}],
                                        "max_tokens": 1, "stream": False}

    async def preflight_model(self, model: str, *, timeout_s: float = 30.0) -> None:
        """One tiny request (:meth:`preflight_call`: in the API the harness speaks, no tools) for
        ``model`` through a :class:`~aoe_tui.agents.proxy.CredentialProxy` holding the runner's
        key, exactly the way a run reaches the model — before any territory is provisioned.

        ``timeout_s`` (s) bounds the whole request. Every failure is the provider's (source
        ``provider``): the key refused (HTTP 401/403), the model unknown (HTTP 404, or a 400
        whose message names the model), the endpoint unreachable, rate-limited or failing (429,
        5xx, connection errors). The message names the model and the endpoint's host, and its
        error text with the key value removed — never the key.

        Raises:
            PreflightError: as above.
        """
        from aoe_tui.agents.base import PreflightError
        from aoe_tui.agents.proxy import CredentialProxy

        self.preflight()
        key = self.credential(self.options.api_key_env)
        model_id = model.split("/", 1)[1] if "/" in model else model
        proxy = CredentialProxy(self.options.base_url, key)
        host = urlsplit(self.options.base_url).netloc.rsplit("@", 1)[-1]
        path, body = self.preflight_call(model_id)
        await proxy.start()
        try:
            status, text = await asyncio.wait_for(post_json(proxy.port, path, body), timeout_s)
        except (OSError, asyncio.TimeoutError, ValueError) as exc:
            raise PreflightError(f"model endpoint {host} did not answer within {timeout_s:g} s "
                                 f"({type(exc).__name__})") from None
        finally:
            await proxy.close()
            del key
        if 200 <= status < 300:
            return
        message = scrub_key(error_message(text), self.credential(self.options.api_key_env))
        detail = f"HTTP {status}" + (f": {message}" if message else "")
        if status in (401, 403):
            raise PreflightError(f"credentials refused by {host} ({detail})")
        if status == 404 or (status in (400, 422) and UNKNOWN_MODEL_RE.search(message or "")):
            raise PreflightError(f"model {model_id!r} unknown to {host} ({detail})")
        raise PreflightError(f"model endpoint {host} failed the preflight request ({detail})")

class HarnessAdapter(KeyedAdapter):



    """An adapter running :attr:`harness` in the territory (a subclass per CLI sets it).

    Args:
        options: :class:`HarnessOptions` or a mapping (season ``[[entrants]].options``).
        **overrides: individual option values.

    Raises:
        HarnessError: unknown option or a bad value.
    """

    harness: ClassVar[Harness]

    def __init__(self, options: HarnessOptions | dict[str, Any] | None = None, **overrides: Any) -> None:
        self.name = self.harness.name
        if not isinstance(options, HarnessOptions):
            options = HarnessOptions.from_mapping(dict(options or {}), self.harness)
        self._set_options(options, overrides)

    def preflight_call(self, model_id: str) -> tuple[str, dict[str, Any]]:
        """The preflight request in the API this harness speaks (:meth:`Harness.preflight_call`)."""
        return self.harness.preflight_call(model_id)

    def harness_shares(self, agent: Any) -> list[Any]:
        """The harness folder (the native binary, made once in the user cache) shared read-only
        at :meth:`Harness.share_guest`. Blocking the first time. Raises :class:`HarnessError`."""
        from aoe_tui.runtime.provider import HarnessShare

        return [HarnessShare(self.harness.folder(), self.harness.share_guest())]

    def stage_timeout_s(self) -> float:
        """SSH login 15 s + one upload + four steps + a 60 s margin (s)."""
        o = self.options
        return 15.0 + o.upload_timeout_s + 4 * o.stage_step_timeout_s + 60.0

    async def stage(self, ctx: AgentContext) -> HarnessStaged:
        """Before the clock: proxy, SSH and tunnel, binary, run folder, ``run.sh``
        (:class:`HarnessStaged`). On failure nothing is left open.

        Raises:
            HarnessError: binary missing, key unset, territory unreachable, a step past its bound.
            asyncssh.Error, OSError: an SSH step failed.
        """
        ctx.agent_dir.mkdir(parents=True, exist_ok=True)
        return await prepared(HarnessStaged(ctx, self))

    async def start(self, ctx: AgentContext) -> AgentRun:
        """Start the run in the background (stages first, on the clock, without ``ctx.staged``)."""
        ctx.agent_dir.mkdir(parents=True, exist_ok=True)
        return HarnessRun(ctx, self)

    def sha256(self) -> str | None:
        """sha256 over the harness module, this runner, the proxy and the pinned version."""
        import sys

        h = hashlib.sha256()
        for path in (sys.modules[type(self.harness).__module__].__file__, __file__,
                     str(Path(__file__).parent / "proxy.py")):
            with contextlib.suppress(OSError, TypeError):
                h.update(Path(path).read_bytes())
        h.update(self.harness.version.encode())
        return h.hexdigest()
