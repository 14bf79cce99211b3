"""Built-in ``opencode`` adapter: a real coding agent running inside its territory (issue 8).

Upstream never had one (spec §5.6); this follows the same contract as every adapter (§5):
``result.json`` (§5.3), cumulative ``usage.json`` checkpoints (§5.5), stdout/stderr logs,
plus ``transcript.json`` / ``transcript.live.json`` (a claux-like transcript with a
``tool_trace``, §2.7) and ``analysis.json`` (§9.2).

How a run works (facts from ``docs/opencode.md``):

1. On the runner: the opencode binary comes from npm (``opencode-ai`` pinned to
   :data:`OPENCODE_VERSION`), installed once into ``<user cache>/aoe-tui/opencode/<version>``
   by :func:`ensure_opencode` (``npm install``; needs node/npm). ``rg`` comes from the
   host's ripgrep (Debian ``ripgrep``).
2. A :class:`~aoe_tui.agents.proxy.CredentialProxy` starts on the runner with the real key
   read from the runner's environment variable named by ``api_key_env``.
3. Before the race clock (:meth:`OpencodeAdapter.stage` → :class:`OpencodeStaged`, the heat
   supervisor's staging phase; docs/opencode.md §8): the binary and ``rg`` are shared
   read-only into the territory at :data:`HARNESS_GUEST` (:meth:`OpencodeAdapter.harness_shares`,
   :func:`harness_dir`: a container's bind mount) or, where the provider cannot share,
   uploaded over SFTP to ``/var/tmp/aoe-opencode/bin/`` (skipped when the size already
   matches); a per-run folder ``/var/tmp/aoe-opencode/<agent>/`` gets a fresh HOME with XDG
   dirs, the plugin-install stub (so opencode never runs its embedded npm), the prompt
   (``instruction.md``) and a launcher (``run.sh``). A reverse tunnel (``forward_remote_port``)
   makes ``127.0.0.1:<port>`` in the guest reach the proxy. With ``warm_start`` (the default)
   ``run.sh`` then starts ``opencode serve``, warms it with one throwaway prompt the proxy
   answers itself (:data:`~aoe_tui.agents.proxy.WARMUP_PREFIX`) and leaves ``opencode run
   --attach`` loaded, waiting for its prompt on stdin.
4. At the clock the run writes the prompt on that stdin (warm), or starts ``run.sh`` (cold:
   ``opencode run --format json --model aoe/<model> --title …`` with the prompt file as
   stdin). Either way opencode runs in a transient systemd scope ``aoe-opencode-<agent>.scope``
   with a clean environment (``OPENCODE_CONFIG_CONTENT`` pointing at the tunnel with a
   placeholder key, ``OPENCODE_DISABLE_MODELS_FETCH=1``, ``OPENCODE_DISABLE_AUTOUPDATE=1``,
   ``OPENCODE_DISABLE_SHARE=1``, no proxies, ``NO_PROXY=127.0.0.1,localhost``), cwd
   ``/root``, stdin never interactive (opencode reads a non-TTY stdin to EOF as the
   message). The model's reasoning effort goes into the model's ``options.reasoningEffort``
   (sent as ``reasoning_effort``). A warm run's parts that ``run --attach`` did not print are
   read back from its server when it exits (:meth:`OpencodeRun._recover_parts`).
5. The JSON events are read live: ``step_finish`` tokens/cost → cumulative usage
   checkpoints (``input_tokens`` = input + cache read + cache write, ``output_tokens`` =
   output + reasoning, ``cost_microusd`` = round(cost × 1e6) µUSD — or, when the season's
   ``[prices]`` has the model, ours from the token counts — ``rounds`` = steps,
   ``tool_calls`` = finished tool calls, ``resource_units`` = 1); the proxy's own token
   counts are a second source (per field, the larger of the two wins); ``tool_use`` →
   ``tool_trace`` entries and activity lines.

Watchdog and limits (all ours, opencode's own step limit is soft; every value in seconds):
``wall_clock_s`` (default the heat deadline) → ``timed_out``; ``max_steps`` → ``budget_exceeded``;
no sign of life for ``idle_timeout_s`` → ``harness_error`` (hang) — signs of life are
opencode's JSON events and model traffic through the credential proxy
(:attr:`~aoe_tui.agents.proxy.ProxyStats.last_activity`: a request or streamed response
bytes), so a reasoning model streaming a long turn is alive; a final ``step_finish`` (reason
``stop``) followed by ``exit_grace_s`` (default 10) without exit → the run is ended and
counted ``completed``. Each limit that fires is named in the summary and the activity lines
with its configured value and the elapsed time (``idle_timeout_s limit of 600 s fired after
600.4 s without an opencode event or model traffic (run time 1312.0 s)``).
Stopping kills the whole scope (``systemctl kill -s KILL``), so shells the agent's tools
started die too; a service the agent started through systemd lives in its own unit and stays.

Failure source rule (§3.9; :meth:`OpencodeRun._classify` has it in order): classify by what
happened. A **final answer** (last ``step_finish`` ``stop`` with a text) is the player's
outcome — ``completed`` even after an ``error`` event opencode recovered from, exit status
1, a session cut while exiting or our ``exit_grace_s`` kill (the summary notes them). Without
one: the referee's reboot cutting the session → ``interrupted`` (``arena``); the idle limit →
``harness_error`` (``harness``), naming the permission when opencode's log shows one it asked
for (a non-interactive run cannot answer it: never the player's); an ``error`` event that is
retryable / HTTP 401, 402, 403, 404-model, 408, 429, ≥500 / "Cannot connect to API" / an
unknown model, a model that stderr says is unknown, or a proxy that saw only upstream failures
→ ``unavailable`` (``provider``); opencode crashing, being killed, exiting without a final
answer, or any other error → ``harness_error`` (``harness``). Summaries carry the relevant
stderr line (:meth:`OpencodeRun.stderr_line`).

Preflight (:meth:`OpencodeAdapter.preflight_model`): one ``max_tokens`` 1 request for the
model through a credential proxy, before any territory is provisioned — by ``aoe match run``
and by the season runner before each attempt's provisioning; a failure spoils the attempt with
source ``provider`` and names the entrant and the model, never the key.
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
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncssh

from aoe_tui.agents.base import AdapterStatus, AgentContext, AgentOutcome, AgentRun, Staged
from aoe_tui.agents.command import REBOOT_SUMMARY
from aoe_tui.agents.harness import (
    ANSI_RE, PLACEHOLDER_KEY, STDERR_TAIL, UNKNOWN_MODEL_RE, HarnessError, KeyedAdapter, Seat, SupervisedRun, bounded,
    close_seat, connect_territory, ensure_npm_binary, guest_command, harness_folder, npm_binary, num, prepared,
    start_proxy, transcript_doc, upload_if_changed, watch_process, write_artifacts,
)
from aoe_tui.agents.proxy import WARMUP_PREFIX
from aoe_tui.domain.agent_usage import Usage
from aoe_tui.fsio import write_atomic, write_json_atomic

__all__ = [
    "DEFAULT_API_KEY_ENV",
    "DEFAULT_BASE_URL",
    "OPENCODE_VERSION",
    "OpencodeAdapter",
    "OpencodeError",
    "OpencodeOptions",
    "OpencodeRun",
    "ensure_opencode",
    "opencode_binary",
]

#: The pinned npm version of ``opencode-ai`` (the one measured in docs/opencode.md).
OPENCODE_VERSION = "1.18.33"
#: Default provider base URL (opencode's "Go" gateway, for ``opencode-go/*`` models).
DEFAULT_BASE_URL = "https://opencode.ai/zen/go/v1"
#: Default name of the runner environment variable holding the provider key.
DEFAULT_API_KEY_ENV = "OPENCODE_API_KEY"
#: Guest folder for the binary, rg (when uploaded) and per-run folders.
GUEST_ROOT = "/var/tmp/aoe-opencode"
#: Where the harness folder (opencode + rg, :func:`harness_dir`) is shared read-only into a
#: territory (:meth:`OpencodeAdapter.harness_shares`); used in place when it is there.
HARNESS_GUEST = "/opt/aoe-harness/opencode"
#: Environment overrides for ``--agent opencode`` on the command line.
ENV_BASE_URL = "AOE_OPENCODE_BASE_URL"
ENV_KEY_ENV = "AOE_OPENCODE_API_KEY_ENV"
ENV_BINARY = "AOE_OPENCODE_BINARY"

#: opencode's provider for the warm-up prompt (its base URL is the proxy's :data:`WARMUP_PREFIX`)
WARMUP_PROVIDER = "aoe-warmup"
#: the line ``run.sh`` writes on stderr once opencode is warm and waits for the prompt on stdin
STAGED_MARK = "aoe-staged"


class OpencodeError(HarnessError):
    """opencode could not be installed or found, or an adapter option is invalid (one line)."""


# ----------------------------------------------------------------------------- install


#: where ``opencode-ai``'s native binary may be inside ``node_modules`` (first that exists)
_BINARY_PATHS = ("opencode-ai/bin/opencode.exe", "opencode-linux-x64/bin/opencode",
                 "opencode-linux-x64-baseline/bin/opencode")


def opencode_binary(version: str = OPENCODE_VERSION) -> Path | None:
    """The installed opencode binary for ``version`` (or ``$AOE_OPENCODE_BINARY``), or ``None``
    (:func:`~aoe_tui.agents.harness.npm_binary`)."""
    return npm_binary("opencode", version, _BINARY_PATHS, ENV_BINARY)


def ensure_opencode(version: str = OPENCODE_VERSION, *, timeout_s: float = 600.0) -> Path:
    """Return the opencode binary, installing ``opencode-ai@version`` from npm on first use
    (:func:`~aoe_tui.agents.harness.ensure_npm_binary`: ``npm install --prefix <user
    cache>/aoe-tui/opencode/<version>``, about 350 MB, under a file lock; then ``opencode
    --version``). Blocking; call it from a thread in async code.

    Raises:
        OpencodeError: npm missing, install failed, or the binary does not report ``version``.
    """
    try:
        return ensure_npm_binary("opencode", "opencode-ai", version, _BINARY_PATHS, env_var=ENV_BINARY,
                                 timeout_s=timeout_s)
    except OpencodeError:
        raise
    except HarnessError as exc:
        raise OpencodeError(str(exc)) from None


def _rg_binary() -> Path:
    rg = shutil.which("rg")
    if rg is None:
        raise OpencodeError("ripgrep (rg) is missing on the runner (apt-get install ripgrep, or run ./setup.sh)")
    return Path(rg)


def harness_dir(version: str = OPENCODE_VERSION) -> Path:
    """The runner's harness folder shared into territories: ``<user cache>/aoe-tui/opencode/
    <version>/harness/`` holding ``opencode`` (the binary of :func:`ensure_opencode`) and ``rg``
    (the runner's ripgrep), made once (hard links where the file system allows, else copies;
    a file whose size differs from its source is replaced). Blocking (may install opencode).

    Raises:
        OpencodeError: opencode cannot be installed, or ripgrep is missing.
    """
    from aoe_tui.runtime.image import cache_root

    return harness_folder(cache_root() / "opencode" / version / "harness",
                          {"opencode": ensure_opencode(version), "rg": _rg_binary()})


# ----------------------------------------------------------------------------- options


@dataclass
class OpencodeOptions:
    """Adapter options (season ``[[entrants]].options`` or constructor keywords).

    Attributes:
        base_url: provider's OpenAI-compatible base URL the proxy forwards to.
        api_key_env: NAME of the runner environment variable with the key (``None`` = no key).
        max_steps: our step cap (count of ``step_finish``) → ``budget_exceeded``.
        wall_clock_s: our wall-clock limit (s); ``None`` = the heat deadline.
        idle_timeout_s: no sign of life for this long (s) → hang → ``harness_error``. Signs of
            life are opencode's JSON events **and** model traffic through the credential proxy
            (a request, or any response bytes streamed back), so a reasoning model that streams
            for minutes before its first event is not taken for a hang.
        exit_grace_s: after the final answer, how long opencode may take to exit (s, at most
            10 by default); past it the run is ended and still counted ``completed``.
        context_tokens, output_tokens: the model's ``limit.context`` / ``limit.output``.
        cost_input_per_mtok, cost_output_per_mtok: USD per 1M tokens (opencode computes cost).
        upload_timeout_s: timeout of each binary's upload (s; two binaries, ``opencode`` and ``rg``).
        warm_start: start opencode before the race clock (``opencode serve``, warmed by one
            throwaway prompt the credential proxy answers itself), so at the clock only the
            prompt is handed over; ``False``: ``opencode run`` starts cold at the clock (about
            4–6 s to its first model request, measured; docs/opencode.md §8).
        warm_timeout_s: how long the warm start may take before the clock (s).
        stage_step_timeout_s: how long each other SSH step of staging may take (s): the guest's
            folders, the small files, the reverse tunnel, the launcher. A territory that stops
            answering fails its staging (its seat's harness failure at clock 0) in this time
            instead of holding every seat's clock until the supervisor's backstop.
    """

    base_url: str = DEFAULT_BASE_URL
    api_key_env: str | None = DEFAULT_API_KEY_ENV
    max_steps: int = 150
    wall_clock_s: float | None = None
    idle_timeout_s: float = 600.0
    exit_grace_s: float = 10.0
    context_tokens: int = 200_000
    output_tokens: int = 16_000
    cost_input_per_mtok: float | None = None
    cost_output_per_mtok: float | None = None
    upload_timeout_s: float = 300.0
    warm_start: bool = True
    warm_timeout_s: float = 180.0
    stage_step_timeout_s: float = 30.0

    @classmethod
    def from_mapping(cls, options: dict[str, Any] | None, *, where: str = "options") -> OpencodeOptions:
        """Build from a free-form mapping (season options); unknown keys or bad types raise :class:`OpencodeError`."""
        opts = cls()
        env_base, env_key = os.environ.get(ENV_BASE_URL), os.environ.get(ENV_KEY_ENV)
        if env_base:
            opts.base_url = env_base
        if env_key:
            opts.api_key_env = env_key
        for key, value in (options or {}).items():
            if key not in cls.__dataclass_fields__:
                known = ", ".join(cls.__dataclass_fields__)
                raise OpencodeError(f"{where}.{key}: unknown opencode option (known: {known})")
            default = getattr(cls(), key)
            try:
                if isinstance(default, bool):
                    if not isinstance(value, bool):
                        raise TypeError(value)
                elif key in ("base_url", "api_key_env"):
                    value = None if value in (None, "") and key == "api_key_env" else str(value)
                elif isinstance(default, int):
                    value = int(value)
                elif value is not None:
                    value = float(value)
            except (TypeError, ValueError):
                what = "true or false" if isinstance(default, bool) else "a number"
                raise OpencodeError(f"{where}.{key}: expected {what}, got {value!r}") from None
            setattr(opts, key, value)
        if opts.max_steps < 1:
            raise OpencodeError(f"{where}.max_steps must be at least 1")
        return opts


# ----------------------------------------------------------------------------- transcript state


@dataclass
class _State:
    t0_ms: int | None = None
    steps: int = 0
    tool_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read: int = 0
    cache_write: int = 0
    reasoning: int = 0
    cost_usd: float = 0.0
    final_text: str | None = None
    last_reason: str | None = None
    final_seen_at: float | None = None
    last_event_at: float = field(default_factory=time.monotonic)
    error: dict[str, Any] | None = None
    session_id: str | None = None
    parts: list[dict[str, Any]] = field(default_factory=list)
    trace: list[dict[str, Any]] = field(default_factory=list)
    rounds: list[dict[str, Any]] = field(default_factory=list)
    round_start_ms: int | None = None
    #: ``time.monotonic()`` (s, the runner's clock) when the first tool call started: the
    #: time its event arrived less the tool's own age in the event (never a wall-clock origin)
    first_tool_at: float | None = None
    #: ids of the parts seen in events (a warm run recovers the others from its server)
    seen_parts: set[str] = field(default_factory=set)


_READ_ONLY = {"read", "glob", "grep", "list", "ls", "webfetch", "todoread"}
#: opencode's log line for a permission check (docs/opencode.md §5): ``message=evaluated
#: permission=<class> pattern=<what> … action.action=<allow|deny|ask>``.
_PERMISSION_RE = re.compile(r'message=evaluated permission=(\S+) pattern=("(?:[^"\\]|\\.)*"|\S+).*?action\.action=ask\b')


def pending_permission(log_text: str) -> str | None:
    """The last permission opencode asked for in its log (``"<class> <pattern>"``, e.g.
    ``external_directory "/etc/*"``), or ``None``: a non-interactive run cannot answer it."""
    found = None
    for m in _PERMISSION_RE.finditer(log_text or ""):
        found = f"{m.group(1)} {m.group(2)}"[:200]
    return found


def _error_text(err: dict[str, Any], *, name: bool = True) -> str:
    """One line (≤ 300 chars) for an opencode ``error`` event: ``[name: ]message``."""
    data = err.get("data") if isinstance(err.get("data"), dict) else {}
    message = " ".join(str(data.get("message") or err.get("name") or "unknown error").split())[:300]
    return f"{err.get('name')}: {message}" if name and err.get("name") and err.get("name") != message else message


class _SeatSetup(Seat):
    """What the run and its staging share: the seat's names, opencode's config and launcher,
    and the guest-side preparation (needs ``ctx``, ``opts``, ``_prompt``)."""

    ctx: AgentContext
    opts: OpencodeOptions
    _prompt: str = ""

    seat_name = "opencode"
    _scope = Seat.scope
    _run_dir = Seat.run_dir

    def _bounded(self, step: str, limit: float | None = None, option: str = "stage_step_timeout_s"):
        """Bound one staging step (``limit`` s, default ``stage_step_timeout_s``).

        Raises:
            OpencodeError: the step took longer (one line naming the territory, the step and the option)."""
        limit = self.opts.stage_step_timeout_s if limit is None else limit
        return bounded(limit, f"staging in territory {self.ctx.territory.id}: {step} got no answer within "
                              f"{limit:g} s ({option})", OpencodeError)

    async def _connect(self) -> asyncssh.SSHClientConnection:
        return await self.connect()

    def _config(self, guest_port: int) -> dict[str, Any]:
        model_id = self.model_id
        model: dict[str, Any] = {"limit": {"context": self.opts.context_tokens, "output": self.opts.output_tokens}}
        effort = getattr(self.ctx.agent, "reasoning_effort", None)
        if effort and effort != "default":
            model["options"] = {"reasoningEffort": effort}
        if self.opts.cost_input_per_mtok is not None or self.opts.cost_output_per_mtok is not None:
            model["cost"] = {"input": self.opts.cost_input_per_mtok or 0, "output": self.opts.cost_output_per_mtok or 0}
        return {
            "$schema": "https://opencode.ai/config.json",
            "provider": {"aoe": {"npm": "@ai-sdk/openai-compatible", "name": "aoe credential proxy",
                                 "options": {"baseURL": f"http://127.0.0.1:{guest_port}/v1", "apiKey": PLACEHOLDER_KEY},
                                 "models": {model_id: model}},
                         WARMUP_PROVIDER: {"npm": "@ai-sdk/openai-compatible", "name": "aoe warm-up (answered by the proxy)",
                                           "options": {"baseURL": f"http://127.0.0.1:{guest_port}{WARMUP_PREFIX}/v1",
                                                       "apiKey": PLACEHOLDER_KEY},
                                           "models": {"warmup": {"limit": {"context": 8000, "output": 16}}}}},
            "enabled_providers": ["aoe", WARMUP_PROVIDER],
            "model": f"aoe/{model_id}",
            "autoupdate": False,
            "share": "disabled",
            "permission": {"external_directory": "allow", "bash": "allow", "edit": "allow", "webfetch": "deny"},
        }

    def _launcher(self, guest_port: int, bin_dir: str = f"{GUEST_ROOT}/bin", warm: bool | None = None) -> str:
        """The guest's ``run.sh``: ``opencode run`` with a clean environment, the binaries of
        ``bin_dir`` (the shared harness or the uploaded copy) first on ``PATH``."""
        d = self._run_dir
        h = f"{d}/home"
        env = {
            "HOME": h, "USER": "root", "LOGNAME": "root", "SHELL": "/bin/bash", "LANG": "C.UTF-8", "TERM": "dumb",
            "PATH": f"{bin_dir}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "XDG_CONFIG_HOME": f"{h}/.config", "XDG_DATA_HOME": f"{h}/.local/share", "XDG_CACHE_HOME": f"{h}/.cache",
            "XDG_STATE_HOME": f"{h}/.local/state",
            "OPENCODE_CONFIG_CONTENT": json.dumps(self._config(guest_port), separators=(",", ":")),
            "OPENCODE_DISABLE_MODELS_FETCH": "1", "OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_SHARE": "1",
            "OPENCODE_DISABLE_LSP_DOWNLOAD": "1", "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost",
        }
        title = f"aoe {self.ctx.agent.id} on {self.ctx.territory.id}"
        args = ["opencode", "run", "--format", "json", "--model", f"aoe/{self.model_id}", "--title", title]
        envs = " ".join(shlex.quote(f"{k}={v}") for k, v in env.items())
        run = " ".join(shlex.quote(a) for a in args)
        if not (self.opts.warm_start if warm is None else warm):
            return (
                "#!/bin/sh\n"
                f"cd /root 2>/dev/null || cd /\n"
                f"exec env -i {envs} {run} < {shlex.quote(d + '/prompt.md')}\n"
            )
        q = shlex.quote
        limit = max(1, int(self.opts.warm_timeout_s * 10))
        attached = run.replace("opencode run", 'opencode run --attach "$url"', 1)
        # warm start (docs/opencode.md §8): the server, one warm-up prompt the proxy answers,
        # then the real run attached to the warm server, its prompt on stdin at the clock
        return (
            "#!/bin/sh\n"
            f"cd /root 2>/dev/null || cd /\n"
            f"d={q(d)}\n"
            f"env -i {envs} opencode serve --hostname 127.0.0.1 --port 0 > \"$d/serve.log\" 2>&1 < /dev/null &\n"
            "serve=$!\n"
            'echo "$serve" > "$d/serve.pid"\n'
            "n=0; url=\n"
            'while [ -z "$url" ]; do\n'
            '  kill -0 "$serve" 2>/dev/null || { echo "aoe: opencode serve exited: $(tail -c 300 "$d/serve.log")" >&2; exit 70; }\n'
            f'  n=$((n+1)); [ "$n" -gt {limit} ] && {{ echo "aoe: opencode serve did not listen in time" >&2; exit 70; }}\n'
            "  sleep 0.1\n"
            '  url=$(sed -n \'s|.*listening on \\(http://[^ ]*\\).*|\\1|p\' "$d/serve.log" | head -n 1)\n'
            "done\n"
            'echo "$url" > "$d/serve.url"\n'
            f'env -i {envs} opencode run --attach "$url" --model {WARMUP_PROVIDER}/warmup --title aoe-warmup '
            '< "$d/warmup.md" > "$d/warmup.log" 2>&1 || echo "aoe: warm-up run ended with $?" >&2\n'
            # the attached run starts now (stdin: this session's, kept through fd 3) and loads;
            # once it has used no CPU for 0.3 s it waits for its prompt: staged
            "exec 3<&0\n"
            f"env -i {envs} {attached} 0<&3 3<&- &\n"
            "run=$!\n"
            "exec 3<&-\n"
            "prev=; same=0; n=0\n"
            'while [ "$same" -lt 3 ] && [ "$n" -lt 300 ] && kill -0 "$run" 2>/dev/null; do\n'
            "  sleep 0.1; n=$((n+1))\n"
            '  cur=$(cut -d " " -f 14,15 "/proc/$run/stat" 2>/dev/null)\n'
            '  if [ "$cur" = "$prev" ]; then same=$((same+1)); else same=0; fi\n'
            "  prev=$cur\n"
            "done\n"
            f"echo {STAGED_MARK} >&2\n"
            'wait "$run"\n'
        )

    async def _prepare(self, conn: asyncssh.SSHClientConnection, binary: Path, rg: Path,
                       detail: dict[str, Any]) -> str:
        """The run folder (fresh HOME, plugin stub, prompt) and the harness binaries: the shared
        folder (:data:`HARNESS_GUEST`) when the provider mounted it, else an upload to
        ``GUEST_ROOT/bin`` (skipped when the sizes match). Returns the binaries' guest folder;
        ``detail`` gets ``harness`` (``shared``/``uploaded``/``present``) and ``uploaded_bytes``.
        Every step is bounded (``stage_step_timeout_s``; an upload ``upload_timeout_s``).

        Raises:
            OpencodeError: a step took longer than its bound."""
        d, h = self._run_dir, f"{self._run_dir}/home"
        stub = f"{h}/.config/opencode"
        shared = shlex.quote(f"{HARNESS_GUEST}/opencode")
        async with self._bounded("preparing the run folder"):
            res = await conn.run(
                f"rm -rf {shlex.quote(d)} && "
                f"mkdir -p {shlex.quote(stub)}/node_modules {shlex.quote(h)}/.local/share {shlex.quote(h)}/.cache/opencode/bin "
                f"{shlex.quote(h)}/.local/state && "
                f"if [ -x {shared} ] && [ \"$(stat -c %s {shared})\" = {binary.stat().st_size} ]; then echo shared; "
                f"else mkdir -p {GUEST_ROOT}/bin; fi",
                check=True,
            )
        if str(res.stdout or "").strip() == "shared":
            bin_dir, detail["harness"], detail["uploaded_bytes"] = HARNESS_GUEST, "shared", 0
        else:
            bin_dir = f"{GUEST_ROOT}/bin"
            sent = 0
            for local, name in ((binary, "opencode"), (rg, "rg")):
                async with self._bounded(f"uploading {name}", self.opts.upload_timeout_s, "upload_timeout_s"):
                    sent += await upload_if_changed(conn, local, f"{bin_dir}/{name}")
            detail["harness"], detail["uploaded_bytes"] = ("uploaded" if sent else "present"), sent
        files = {
            f"{stub}/package.json": json.dumps({"dependencies": {"@opencode-ai/plugin": "0"}}),
            f"{stub}/package-lock.json": json.dumps(
                {"lockfileVersion": 3, "packages": {"": {"dependencies": {"@opencode-ai/plugin": "0"}}}}),
            f"{d}/prompt.md": self._prompt,
            f"{d}/warmup.md": "Reply with the single word: ready.\n",
        }
        async with self._bounded("writing the prompt and configuration"), conn.start_sftp_client() as sftp:
            for path, text in files.items():
                async with sftp.open(path, "w") as fh:
                    await fh.write(text)
        return bin_dir



class OpencodeStaged(_SeatSetup, Staged):
    """One seat's opencode, staged before the race clock (:meth:`OpencodeAdapter.stage`): the
    credential proxy listening, an SSH connection open with the reverse tunnel to the proxy,
    the harness in place (shared or uploaded), HOME, the plugin stub, the prompt and ``run.sh``
    written. At the clock the run only starts ``run.sh`` over this connection.

    Attributes:
        proxy: the started :class:`~aoe_tui.agents.proxy.CredentialProxy`.
        conn: the open SSH connection (root) to the territory.
        guest_port: the guest port the reverse tunnel listens on (``127.0.0.1``).
        bin_dir: the guest folder of ``opencode`` and ``rg`` used.
        prompt: the instruction text.
        steps_s: seconds per staging step (``install``, ``connect``, ``harness``, ``tunnel``, ``launcher``).
        harness: ``shared`` (the provider's read-only share), ``uploaded`` or ``present``
            (an earlier upload of the same size).
        uploaded_bytes: bytes sent over SFTP (0 when shared or present).
    """

    def __init__(self, ctx: AgentContext, adapter: OpencodeAdapter, *, warm: bool | None = None) -> None:
        self.ctx, self.adapter, self.opts = ctx, adapter, adapter.options
        #: start opencode warm (default: the ``warm_start`` option)
        self.want_warm = adapter.options.warm_start if warm is None else warm
        self.proxy: Any = None
        self.conn: asyncssh.SSHClientConnection | None = None
        self.guest_port = 0
        self.bin_dir = ""
        self.prompt = self._prompt = ""
        self.steps_s: dict[str, float] = {}
        self.harness = ""
        self.uploaded_bytes = 0
        #: with ``warm_start``: ``run.sh`` running (warm opencode waiting for the prompt on stdin)
        self.proc: Any = None
        #: True once opencode was started warm before the clock
        self.warm = False
        #: MiB of anonymous memory (``RssAnon``) of the waiting opencode processes at the end of
        #: staging: what the seat's memory limit surely charges for them; the binary's file pages
        #: are not in it (page cache, charged to whichever cgroup read them first; docs/opencode.md §8)
        self.rss_mib: int | None = None
        #: what ``run.sh`` wrote on stderr before it was warm
        self.stderr_head = b""

    def detail(self) -> dict[str, Any]:
        """``harness``, ``uploaded_bytes`` (bytes), ``warm_start``, ``steps_s`` (s per step) and,
        warm, ``rss_mib`` (MiB of anonymous memory of the waiting opencode processes) for ``aoe-extra.json``."""
        return {"harness": self.harness, "uploaded_bytes": self.uploaded_bytes, "warm_start": self.warm,
                "steps_s": dict(self.steps_s), **({"rss_mib": self.rss_mib} if self.rss_mib is not None else {})}

    async def _warm(self, conn: asyncssh.SSHClientConnection) -> None:
        """Start ``run.sh`` and wait (``warm_timeout_s``) for its :data:`STAGED_MARK` line: opencode's
        server is up and warm and the attached run waits for its prompt on stdin.

        Raises:
            OpencodeError: ``run.sh`` ended or did not get warm in time (its stderr's last line)."""
        async with self._bounded("starting run.sh"):
            self.proc = proc = await conn.create_process(self.launch_command(), stdin=asyncssh.PIPE, encoding=None)
        buf = b""

        async def read_mark() -> bool:
            nonlocal buf
            while True:
                line = await proc.stderr.readline()
                if not line:
                    return False
                if line.strip() == STAGED_MARK.encode():
                    return True
                buf += line

        try:
            ready = await asyncio.wait_for(read_mark(), self.opts.warm_timeout_s)
        except asyncio.TimeoutError:
            ready = False
        self.stderr_head = buf[-STDERR_TAIL:]
        if not ready:
            last = [x for x in ANSI_RE.sub("", buf.decode("utf-8", "replace")).splitlines() if x.strip()]
            raise OpencodeError(f"opencode did not get ready in the territory before the clock"
                                f"{': ' + last[-1].strip()[:300] if last else ''}")
        self.warm = True

    async def prepare(self) -> None:
        """Do the staging (see the class docstring). Raises :class:`OpencodeError` (no binary,
        no key, unreachable territory, a step past its bound: ``stage_step_timeout_s``,
        ``upload_timeout_s``, ``warm_timeout_s``) or an SSH/OS error; the caller closes on failure."""
        ctx = self.ctx
        t = time.monotonic()

        def step(name: str) -> None:
            nonlocal t
            now = time.monotonic()
            self.steps_s[name] = round(now - t, 3)
            t = now

        self.prompt = self._prompt = Path(ctx.instruction_file).read_text(encoding="utf-8")
        binary = await asyncio.to_thread(ensure_opencode)
        rg = _rg_binary()
        self.proxy = await start_proxy(self.adapter, self.opts.base_url, self.opts.api_key_env, ctx.agent,
                                       OpencodeError)
        step("install")
        self.conn = conn = await connect_territory(self._connect, ctx.territory.id, OpencodeError)
        step("connect")
        detail: dict[str, Any] = {}
        self.bin_dir = await self._prepare(conn, binary, rg, detail)
        self.harness, self.uploaded_bytes = detail["harness"], detail["uploaded_bytes"]
        step("harness")
        async with self._bounded("opening the reverse tunnel to the credential proxy"):
            listener = await conn.forward_remote_port("127.0.0.1", 0, "127.0.0.1", self.proxy.port)
        self.guest_port = listener.get_port()
        step("tunnel")
        async with self._bounded("writing run.sh"):
            async with conn.start_sftp_client() as sftp:
                async with sftp.open(f"{self._run_dir}/run.sh", "w") as fh:
                    await fh.write(self._launcher(self.guest_port, self.bin_dir, self.want_warm))
            await conn.run(f"chmod 0700 {self._run_dir}/run.sh", check=True)
        step("launcher")
        if self.want_warm:
            await self._warm(conn)
            step("warm")
            with contextlib.suppress(Exception):  # what the waiting harness holds of the seat's memory
                res = await asyncio.wait_for(conn.run(
                    "for p in $(pgrep -x opencode); do awk '/^RssAnon:/ {print $2}' /proc/$p/status; done",
                    check=False), 5)
                self.rss_mib = sum(int(x) for x in str(res.stdout or "").split() if x.isdigit()) // 1024

    async def close(self) -> None:
        """Stop a warm opencode that never got its prompt (its scope), the proxy, and close the
        connection (idempotent, never raises)."""
        proxy, conn, proc, self.proxy, self.conn, self.proc = self.proxy, self.conn, self.proc, None, None, None
        if proc is not None and conn is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.run(f"systemctl kill -s KILL {self._scope}.scope >/dev/null 2>&1; true",
                                                check=False), 10)
        await close_seat(proxy, conn)


class OpencodeRun(_SeatSetup, SupervisedRun):
    """One opencode agent run (see the module docstring). Created by :meth:`OpencodeAdapter.start`.

    Attributes:
        stopped: True once :meth:`stop` was called.
        proxy_stats: the credential proxy's :class:`~aoe_tui.agents.proxy.ProxyStats` (after start).
    """

    label = "opencode"
    adapter_name = "opencode"
    #: the limit line of the watchdog cut, if one fired (:func:`~aoe_tui.agents.harness.limit_note`).
    _cut_note: str | None = None
    #: watchdog period (s).
    _tick_s: float = 1.0
    #: the run was started warm (its prompt handed to an opencode staged before the clock)
    _warm: bool = False
    #: what staging handed over (:class:`OpencodeStaged`), once the run took it
    _staged: OpencodeStaged | None = None

    def __init__(self, ctx: AgentContext, adapter: OpencodeAdapter) -> None:
        super().__init__(ctx)
        self.adapter = adapter
        self.opts = adapter.options
        self.stopped = False
        self.state = _State()
        self.proxy_stats: Any = None
        self._conn: asyncssh.SSHClientConnection | None = None
        self._proc: asyncssh.SSHClientProcess | None = None
        self._prompt = ""
        self._last_usage: Usage | None = None
        self._task = asyncio.create_task(self._supervise(), name=f"opencode-{ctx.agent.id}")

    # ------------------------------------------------------------------ usage + transcript

    def usage(self) -> Usage:
        """Current cumulative usage: opencode's ``step_finish`` sums, raised to the proxy's counts.

        Tokens are token counts: ``input_tokens`` = input + cache read + cache write (the
        cache counts are also kept apart in ``cache_read_tokens`` / ``cache_write_tokens``),
        ``output_tokens`` = output + reasoning. ``cost_microusd`` (µUSD) is ours when the
        season prices the model (:attr:`Adapter.price`: uncached input, cache reads, cache
        writes and output at its rates), else opencode's own figure (no cache term), raised
        to the proxy's when the provider reports one.
        """
        s = self.state
        inp = s.input_tokens + s.cache_read + s.cache_write
        out = s.output_tokens + s.reasoning
        cost = s.cost_usd
        ps = self.proxy_stats
        if ps is not None:
            inp = max(inp, ps.prompt_tokens)
            out = max(out, ps.completion_tokens)
            cost = max(cost, ps.cost_usd)
        rates = getattr(self.adapter, "price", None)
        cost_micro = int(round(cost * 1e6)) if rates is None else rates.cost(
            max(0, inp - s.cache_read - s.cache_write), out, s.cache_read, s.cache_write)
        return Usage(rounds=s.steps, tool_calls=s.tool_calls, input_tokens=inp, output_tokens=out,
                     cost_microusd=cost_micro, resource_units=1,
                     cache_read_tokens=s.cache_read, cache_write_tokens=s.cache_write)

    def usage_detail(self) -> dict[str, Any] | None:
        """Ours, for ``aoe-extra.json`` (see :meth:`AgentRun.usage_detail`): cache tokens,
        who computed the cost, opencode's own cost (µUSD), and the two token counts —
        opencode's ``step_finish`` events and the credential proxy's (tokens)."""
        s = self.state
        detail: dict[str, Any] = {
            "cache_read_tokens": s.cache_read, "cache_write_tokens": s.cache_write,
            "cost_source": "adapter" if getattr(self.adapter, "price", None) is None else "price table",
            "adapter_cost_microusd": int(round(s.cost_usd * 1e6)),
            "events_input_tokens": s.input_tokens + s.cache_read + s.cache_write,
            "events_output_tokens": s.output_tokens + s.reasoning,
        }
        ps = self.proxy_stats
        if ps is not None and ps.responses_with_usage:
            detail["proxy_input_tokens"] = ps.prompt_tokens
            detail["proxy_output_tokens"] = ps.completion_tokens
        return detail

    def start_detail(self) -> dict[str, Any] | None:
        """``first_model_request_ms`` (the credential proxy's first request) and
        ``first_tool_call_ms`` (the start of opencode's first tool call), match-clock ms since
        ``match_started``, both measured on the monotonic clock (a wall-clock step on the runner
        or in the guest moves neither; never below 0); only those known."""
        out: dict[str, Any] = {}
        ps, t0 = self.proxy_stats, self.ctx.clock_started
        first = getattr(ps, "first_request_at", None)
        if isinstance(first, (int, float)) and t0 is not None:
            out["first_model_request_ms"] = int(round((first - t0) * 1000))
        tool = self.state.first_tool_at
        if tool is not None and t0 is not None:
            out["first_tool_call_ms"] = max(0, int(round((tool - t0) * 1000)))
        return out or None

    def transcript(self, status: str) -> dict[str, Any]:
        """The transcript object (:func:`~aoe_tui.agents.harness.transcript_doc`, claux-like, spec §2.7):
        model, outcome, usage (opencode's counts and cost), messages, tool_trace, timing."""
        s = self.state
        # input_tokens counts the cached tokens too, as claux's transcripts do (§2.7) and ATIF's
        # prompt_tokens (``aoe trajectory``), the same total as usage.json
        # cost_usd: the run's cost as usage.json has it (ours from [prices] when the season prices
        # the model; opencode's own figure knows nothing of the model behind the proxy)
        usage = {"input_tokens": s.input_tokens + s.cache_read + s.cache_write, "output_tokens": s.output_tokens + s.reasoning,
                 "cache_read_tokens": s.cache_read, "cache_creation_tokens": s.cache_write,
                 "cost_usd": (self.usage().cost_microusd or 0) / 1e6}
        return transcript_doc(model=self.ctx.agent.model, status=status, final_text=s.final_text, usage=usage,
                              prompt=self._prompt, parts=s.parts, trace=s.trace, model_rounds=s.rounds)

    def _write_live(self) -> None:
        with contextlib.suppress(OSError):
            write_json_atomic(self.ctx.agent_dir / "transcript.live.json", self.transcript("running"), fsync=False)

    def _rel(self, ms: Any) -> int:
        s = self.state
        if not isinstance(ms, (int, float)) or s.t0_ms is None:
            return 0
        return max(0, int(ms) - s.t0_ms)

    def on_event(self, ev: dict[str, Any]) -> None:
        """Fold one ``--format json`` event into the run state (tokens, trace, activity)."""
        s = self.state
        s.last_event_at = time.monotonic()
        etype = ev.get("type")
        ts = ev.get("timestamp")
        if s.t0_ms is None and isinstance(ts, (int, float)):
            s.t0_ms = int(ts)
        s.session_id = s.session_id or ev.get("sessionID")
        part = ev.get("part") if isinstance(ev.get("part"), dict) else {}
        if isinstance(part.get("id"), str):
            s.seen_parts.add(part["id"])
        if etype == "step_start":
            s.round_start_ms = self._rel(ts)
        elif etype == "tool_use":
            st = part.get("state") if isinstance(part.get("state"), dict) else {}
            tm = st.get("time") if isinstance(st.get("time"), dict) else {}
            start, end = tm.get("start"), tm.get("end")
            if s.first_tool_at is None:
                # opencode's stamps are the guest's wall clock: only their difference within
                # this one event (how long ago the tool started, seconds) is used, never an origin
                age_ms = ts - start if isinstance(ts, (int, float)) and isinstance(start, (int, float)) else 0
                s.first_tool_at = s.last_event_at - max(0.0, age_ms / 1000)
            is_error = st.get("status") == "error"
            output = st.get("error") if is_error else st.get("output")
            name = str(part.get("tool") or "tool")
            inp = st.get("input") if isinstance(st.get("input"), dict) else {}
            entry = {
                "id": str(part.get("callID") or part.get("id") or f"tool-{len(s.trace)}"),
                "name": name,
                "input": inp,
                "output": output if isinstance(output, str) else json.dumps(output),
                "is_error": is_error,
                "read_only": name.lower() in _READ_ONLY,
                "started_after_ms": self._rel(start if start is not None else ts),
                "duration_ms": max(0, int(end) - int(start)) if isinstance(start, (int, float)) and isinstance(end, (int, float)) else 0,
            }
            s.trace.append(entry)
            s.tool_calls += 1
            s.parts.append({"type": "tool_use", "id": entry["id"], "name": name, "input": inp})
            s.parts.append({"type": "tool_result", "tool_use_id": entry["id"], "content": entry["output"], "is_error": is_error})
            show = inp.get("command") or inp.get("filePath") or inp.get("pattern") or st.get("title") or ""
            self.activity.append(f"{name}{' ✗' if is_error else ''}: {' '.join(str(show).split())[:150]}")
        elif etype in ("text", "reasoning"):
            text = part.get("text")
            if isinstance(text, str):
                s.parts.append({"type": etype, "text": text})
                if etype == "text":
                    s.final_text = text
                    self.activity.append("says: " + " ".join(text.split())[:150])
        elif etype == "step_finish":
            tok = part.get("tokens") if isinstance(part.get("tokens"), dict) else {}
            cache = tok.get("cache") if isinstance(tok.get("cache"), dict) else {}
            s.steps += 1
            s.input_tokens += num(tok.get("input"))
            s.output_tokens += num(tok.get("output"))
            s.reasoning += num(tok.get("reasoning"))
            s.cache_read += num(cache.get("read"))
            s.cache_write += num(cache.get("write"))
            cost = part.get("cost")
            if isinstance(cost, (int, float)) and not isinstance(cost, bool) and cost > 0:
                s.cost_usd += float(cost)
            s.last_reason = part.get("reason")
            start = s.round_start_ms if s.round_start_ms is not None else self._rel(ts)
            s.rounds.append({
                "index": len(s.rounds), "started_after_ms": start, "duration_ms": max(0, self._rel(ts) - start),
                "status": str(part.get("reason") or "unknown"),
                "usage": {"input_tokens": num(tok.get("input")) + num(cache.get("read")) + num(cache.get("write")),
                          "output_tokens": num(tok.get("output")) + num(tok.get("reasoning")),
                          "cache_read_tokens": num(cache.get("read")), "cache_creation_tokens": num(cache.get("write"))},
            })
            s.final_seen_at = time.monotonic() if s.last_reason == "stop" else None
            self.checkpoint()
            self._write_live()
        elif etype == "error":
            err = ev.get("error") if isinstance(ev.get("error"), dict) else {}
            s.error = err
            data = err.get("data") if isinstance(err.get("data"), dict) else {}
            self.activity.append(f"error: {err.get('name')}: {' '.join(str(data.get('message') or '').split())[:150]}")

    # ------------------------------------------------------------------ guest side

    async def _kill_scope(self) -> None:
        """Kill every process of this run in the guest (its systemd scope). Best effort, bounded."""
        await self._guest_cleanup(
            f"systemctl kill -s KILL {self._scope}.scope >/dev/null 2>&1; "
            f"systemctl stop {self._scope}.scope >/dev/null 2>&1; systemctl reset-failed {self._scope}.scope >/dev/null 2>&1; true")

    async def _end_opencode(self) -> None:
        """End of a warm run, whatever its status: kill (``KILL``) every ``opencode`` process of
        this run's scope — the warm ``opencode serve`` (about 400 MB of the seat's memory) and an
        attached run still there — and nothing else: what the agent's tools started stays, as
        after a cold run (the player's service may be one). Best effort, bounded (about 15 s);
        reconnects when the run's connection is closed."""
        scope = shlex.quote(f"/{self._scope}.scope")
        await self._guest_cleanup(
            f"for p in $(cat {self._run_dir}/serve.pid 2>/dev/null) $(pgrep -x opencode); do "
            f"grep -qF {scope} /proc/$p/cgroup 2>/dev/null && kill -KILL $p 2>/dev/null; done; true")

    async def _guest_cleanup(self, cmd: str) -> None:
        """Run ``cmd`` in the guest over the run's connection, or a new one
        (:func:`~aoe_tui.agents.harness.guest_command`). Never raises."""
        await guest_command(self._connect, self._conn, cmd)

    # ------------------------------------------------------------------ the run

    async def _body(self) -> tuple[AdapterStatus, str]:
        ctx = self.ctx
        staged = ctx.staged if isinstance(ctx.staged, OpencodeStaged) else None
        ctx.staged = None
        if staged is None:  # not staged before the clock (a direct start): stage now, cold
            self.activity.append("preparing opencode in the territory")
            staged = await self.adapter.stage(ctx, warm=False)
        self._staged = staged
        self._prompt = staged.prompt
        self.proxy_stats = staged.proxy.stats
        self._conn = conn = staged.conn
        try:
            if staged.harness == "uploaded":
                self.activity.append(f"uploaded opencode and rg ({staged.uploaded_bytes // 1_000_000} MB) before the clock")
            self.activity.append(f"opencode run --model aoe/{self.model_id} (proxy via guest port {staged.guest_port})")
            self.state.last_event_at = time.monotonic()
            if staged.proc is not None:  # warm: hand the prompt over, the run starts now
                self._warm = True
                self._proc = proc = staged.proc
                staged.proc = None
                self._stderr_tail = staged.stderr_head
                with contextlib.suppress(OSError):
                    with open(ctx.stderr_file, "ab") as log:
                        log.write(staged.stderr_head)
                with contextlib.suppress(asyncssh.Error, OSError):  # an opencode already gone: _follow says how
                    proc.stdin.write(self._prompt.encode("utf-8"))
                    proc.stdin.write_eof()
            else:
                self._proc = proc = await conn.create_process(staged.launch_command(), stdin=asyncssh.DEVNULL,
                                                              encoding=None)
            return await self._follow(conn, proc)
        finally:
            if not self.stopped:
                with contextlib.suppress(Exception):
                    await self._collect_logs()
            await staged.proxy.close()

    async def _follow(self, conn: Any, proc: Any) -> tuple[AdapterStatus, str]:
        """Read events until opencode exits or the watchdog ends it; return (status, summary).

        ``conn`` needs ``is_closed()``; ``proc`` is an asyncssh-like process (``stdout.readline``,
        ``stderr.read``, ``wait_closed``, ``returncode``, ``exit_status``, ``exit_signal``) —
        tests drive it with a local opencode stub.
        """
        started = time.monotonic()

        def on_line(line: bytes) -> None:
            with contextlib.suppress(ValueError):
                ev = json.loads(line)
                if isinstance(ev, dict):
                    self.on_event(ev)

        found = await watch_process(
            proc, self.ctx, on_line=on_line, on_err=self.keep_stderr, tick_s=self._tick_s,
            check=lambda: self.limit_check(started, "steps" if self.state.steps > self.opts.max_steps else None),
            kill=self._kill_scope, activity=self.activity, label="opencode")
        cut = found[0] if found else None
        if found and found[1]:
            self._cut_note = found[1]
        if self._warm:
            await self._recover_parts(conn)
        self.checkpoint()
        rc = proc.exit_status if proc.returncode is not None else None
        signal_ = proc.exit_signal[0] if proc.exit_signal else None
        self.activity.append(f"opencode ended: rc={rc} signal={signal_} steps={self.state.steps}")
        permission = None
        final = self.state.last_reason == "stop" and self.state.final_text is not None
        if cut == "idle" or (cut is None and rc == 0 and not final):
            permission = pending_permission(await self._guest_log_tail())
        return self._classify(cut=cut, rc=rc, signal_=signal_, lost=conn.is_closed() or (rc is None and signal_ is None),
                              permission=permission)

    async def _recover_parts(self, conn: Any) -> None:
        """Warm start only: ``opencode run --attach`` can exit on the session going idle before
        it printed the last parts (measured: the final ``text`` and ``step_finish``). Read the
        session's messages from the warm server (``GET /session/<id>/message`` in the guest) and
        fold every part of the assistant's messages (``info.role`` ``assistant``; never the user's
        prompt) not seen as an event, as ``run --format json`` would have printed it (the server
        is ended afterwards, :meth:`_end_opencode`). Best effort, bounded (about 12 s); never raises."""
        sid, d = self.state.session_id, self._run_dir
        with contextlib.suppress(Exception):
            if sid and not conn.is_closed():
                res = await asyncio.wait_for(conn.run(
                    f"curl -s --max-time 10 \"$(cat {d}/serve.url)/session/{shlex.quote(sid)}/message\"", check=False), 12)
                out = res.stdout if isinstance(res.stdout, str) else bytes(res.stdout or b"").decode("utf-8", "replace")
                kinds = {"step-start": "step_start", "tool": "tool_use", "text": "text", "step-finish": "step_finish"}
                # only the model's messages: the user's (``info.role`` "user") holds the prompt,
                # which ``run --format json`` never prints, so it would be folded in as the answer
                messages = [m for m in json.loads(out or "[]") if isinstance(m, dict)
                            and isinstance(m.get("info"), dict) and m["info"].get("role") == "assistant"]
                info = messages[-1]["info"] if messages else None
                if isinstance(info, dict) and isinstance(info.get("error"), dict) and self.state.error is None:
                    self.on_event({"type": "error", "timestamp": int(time.time() * 1000), "sessionID": sid,
                                   "error": info["error"]})  # the error the run ended on
                for msg in messages:
                    for part in (msg.get("parts") or []):
                        kind = kinds.get(part.get("type")) if isinstance(part, dict) else None
                        if kind is None or part.get("id") in self.state.seen_parts:
                            continue
                        if kind == "tool_use" and (part.get("state") or {}).get("status") not in ("completed", "error"):
                            continue
                        tm = part.get("time") if isinstance(part.get("time"), dict) else {}
                        ts = tm.get("end") or tm.get("start") or int(time.time() * 1000)
                        self.on_event({"type": kind, "timestamp": ts, "sessionID": sid, "part": part})
                        self.activity.append(f"recovered opencode's unprinted {kind} from its server")

    def _classify(self, *, cut: str | None, rc: int | None, signal_: str | None, lost: bool,
                  permission: str | None = None) -> tuple[AdapterStatus, str]:
        """The run's (status, summary) from what happened (the failure source follows the status, §3.9).

        Rule, first match wins:

        1. our step cap fired, or the credential proxy refused a model call past a live spend
           limit (issue 27; the summary names the limit and the amount spent) → ``budget_exceeded`` (player);
        2. opencode gave a final answer (its last ``step_finish`` is ``stop`` with a text) →
           ``completed`` (player), whatever came before or after it: an ``error`` event that
           opencode recovered from, exit status 1, a session cut while exiting, or our
           ``exit_grace_s`` kill — the summary notes the recovered error / the kill;
        3. the session was cut while the referee rebooted the guest → ``interrupted`` (arena);
        4. the idle watchdog fired → ``harness_error`` (harness): a hang, or — when opencode's
           log shows a permission it asked for and nobody can answer — a permission stall
           naming the permission; never the player;
        5. an ``error`` event without a later final answer → :meth:`_classify_error`
           (provider for retryable / auth / rate / 5xx / unknown-model errors, else harness);
        6. stderr says the model is unknown → ``unavailable`` (provider), naming the model;
        7. the proxy saw only upstream failures and no step finished → ``unavailable`` (provider);
        8. anything else (lost session, exit without an answer, crash) → ``harness_error``
           (harness), with the relevant stderr line.
        """
        s = self.state
        err_line = self.stderr_line()
        tail = f" (stderr: {err_line})" if err_line else ""
        if cut == "steps":
            return AdapterStatus.BUDGET_EXCEEDED, f"opencode exceeded the step cap of {self.opts.max_steps} steps"
        refused = self.proxy_stats.refused if self.proxy_stats is not None else None
        if refused:
            return AdapterStatus.BUDGET_EXCEEDED, f"{refused}; the credential proxy refused the next model call"
        if s.last_reason == "stop" and s.final_text is not None:
            summary = self._summary()
            notes = []
            if s.error is not None:
                notes.append(f"recovered from an error: {_error_text(s.error)}")
            if cut == "no-exit" and self._cut_note:
                notes.append(f"opencode did not exit: {self._cut_note}; killed")
            elif rc not in (0, None):
                notes.append(f"opencode exit status {rc}")
            return AdapterStatus.COMPLETED, summary + (f" [{'; '.join(notes)}]" if notes else "")
        if lost and self.ctx.reboot_marker.exists():
            return AdapterStatus.INTERRUPTED, REBOOT_SUMMARY
        if cut == "idle":
            if permission:
                return (AdapterStatus.HARNESS_ERROR,
                        f"opencode stalled on a permission prompt ({permission}) that a non-interactive run cannot "
                        f"answer: {self._cut_note}; killed")
            return AdapterStatus.HARNESS_ERROR, f"opencode hung: {self._cut_note}; killed{tail}"
        if permission and cut is None and rc == 0 and s.error is None:
            return (AdapterStatus.HARNESS_ERROR, f"opencode stopped after {s.steps} steps when a permission it asked for "
                                                 f"({permission}) was refused by the non-interactive run")
        if s.error is not None:
            status, summary = self._classify_error(s.error)
            return status, summary + (tail if err_line and err_line not in summary else "")
        if err_line and UNKNOWN_MODEL_RE.search(err_line):
            return AdapterStatus.UNAVAILABLE, f"model {self.ctx.agent.model!r} is unknown to the provider: {err_line}"
        ps = self.proxy_stats
        if ps is not None and (ps.connect_failures or ps.error_statuses) and ps.responses_with_usage == 0 and s.steps == 0:
            return AdapterStatus.UNAVAILABLE, f"model endpoint unavailable: {ps.last_error}{tail}"
        if lost:
            return AdapterStatus.HARNESS_ERROR, f"the SSH session to the territory was lost while opencode ran{tail}"
        how = f"signal {signal_}" if signal_ else f"exit status {rc}"
        if rc == 0:
            return AdapterStatus.HARNESS_ERROR, f"opencode exited without a final answer after {s.steps} steps{tail}"
        return AdapterStatus.HARNESS_ERROR, f"opencode crashed ({how}) after {s.steps} steps without a result{tail}"

    def _summary(self) -> str:
        text = " ".join((self.state.final_text or "").split())
        return text[:1000] or "opencode finished"

    def _classify_error(self, err: dict[str, Any]) -> tuple[AdapterStatus, str]:
        """An ``error`` event → (status, summary): ``unavailable`` (provider) when retryable, HTTP
        401/402/403/404/408/429/≥500, "Cannot connect to API" or an unknown model; else
        ``harness_error`` (harness)."""
        data = err.get("data") if isinstance(err.get("data"), dict) else {}
        message = _error_text(err, name=False)
        status = data.get("statusCode")
        if UNKNOWN_MODEL_RE.search(message) or (status == 404 and "model" in message.lower()):
            return AdapterStatus.UNAVAILABLE, f"model {self.ctx.agent.model!r} is unknown to the provider: {message}"
        provider = bool(data.get("isRetryable")) or (isinstance(status, int) and (status in (401, 402, 403, 408, 429) or status >= 500))
        provider = provider or "cannot connect to api" in message.lower()
        if provider:
            code = f" (HTTP {status})" if isinstance(status, int) else ""
            return AdapterStatus.UNAVAILABLE, f"model provider unavailable{code}: {message}"
        return AdapterStatus.HARNESS_ERROR, f"opencode error {err.get('name') or ''}: {message}".replace("  ", " ")

    async def _guest_log_tail(self) -> str:
        """The tail (≤ 200 kB) of opencode's own log in the guest, or "" (best effort, bounded)."""
        conn = self._conn
        if conn is None or conn.is_closed():
            return ""
        with contextlib.suppress(Exception):
            res = await asyncio.wait_for(
                conn.run(f"cat {self._run_dir}/home/.local/share/opencode/log/*.log 2>/dev/null | tail -c 200000",
                         check=False), 5)
            out = res.stdout
            return out if isinstance(out, str) else bytes(out or b"").decode("utf-8", "replace")
        return ""

    async def _collect_logs(self) -> None:
        """Copy opencode's own log from the guest to ``agents/<id>/opencode.log`` (best effort)."""
        conn = self._conn
        if conn is None or conn.is_closed():
            return
        res = await asyncio.wait_for(
            conn.run(f"cat {self._run_dir}/home/.local/share/opencode/log/*.log 2>/dev/null | tail -c 2000000", check=False), 5)
        text = res.stdout if isinstance(res.stdout, str) else bytes(res.stdout or b"").decode("utf-8", "replace")
        if text:
            write_atomic(self.ctx.agent_dir / "opencode.log", text, fsync=False)

    def _finish(self, status: AdapterStatus, summary: str) -> AgentOutcome:
        status_text = str(status) if status != AdapterStatus.COMPLETED else "completed"
        return write_artifacts(self.ctx, status, summary, self.usage(), self.transcript(status_text), self.activity)

    async def kill(self) -> None:
        """Kill opencode's scope in the guest (:meth:`_kill_scope`). Never raises."""
        await self._kill_scope()

    async def wall_clock_outcome(self, note: str) -> tuple[AdapterStatus, str] | None:
        """``wall_clock_s`` fired: a permission prompt opencode's log shows it waiting on is the
        harness's stall (``harness_error``), not the player's time running out."""
        permission = pending_permission(await self._guest_log_tail())
        if permission:
            return (AdapterStatus.HARNESS_ERROR, f"opencode stalled on a permission prompt ({permission}) that a "
                                                 f"non-interactive run cannot answer: {note}; killed")
        return None

    async def cleanup(self) -> None:
        """End a warm run's opencode, close the connection and the staging. Never raises."""
        if self._warm:
            await self._end_opencode()
        if self._conn is not None:
            self._conn.close()
        staged = self._staged or (self.ctx.staged if isinstance(self.ctx.staged, OpencodeStaged) else None)
        if staged is not None:
            await staged.close()


class OpencodeAdapter(KeyedAdapter):
    """Built-in ``opencode`` adapter (see the module docstring).

    Args:
        options: :class:`OpencodeOptions`, or a mapping validated by
            :meth:`OpencodeOptions.from_mapping` (season ``[[entrants]].options``).
        **overrides: individual option values (e.g. ``base_url=..., api_key_env=...``).

    Raises:
        OpencodeError: unknown option or a bad value.
    """

    name = "opencode"
    error = OpencodeError

    def __init__(self, options: OpencodeOptions | dict[str, Any] | None = None, **overrides: Any) -> None:
        if not isinstance(options, OpencodeOptions):
            options = OpencodeOptions.from_mapping(dict(options or {}))
        self._set_options(options, overrides)

    def harness_shares(self, agent: Any) -> list[Any]:
        """The harness folder (:func:`harness_dir`: opencode and rg, made once in the user
        cache) shared read-only at :data:`HARNESS_GUEST`. Blocking the first time (it may
        install opencode). Raises :class:`OpencodeError` as :func:`harness_dir`."""
        from aoe_tui.runtime.provider import HarnessShare

        return [HarnessShare(harness_dir(), HARNESS_GUEST)]

    def stage_timeout_s(self) -> float:
        """The supervisor's backstop on this adapter's staging (s): the sum of its own bounds
        (SSH login 15 s, two uploads of ``upload_timeout_s``, the warm start's
        ``warm_timeout_s``, six other steps of ``stage_step_timeout_s``) plus a 60 s margin,
        so a step's own timeout, which names the step, always fires first. With the defaults:
        15 + 600 + 180 + 180 + 60 = 1035 s; a territory that does not answer at all fails in
        15 s (login) or 30 s (a step)."""
        o = self.options
        return 15.0 + 2 * o.upload_timeout_s + o.warm_timeout_s + 6 * o.stage_step_timeout_s + 60.0

    async def stage(self, ctx: AgentContext, *, warm: bool | None = None) -> OpencodeStaged:
        """Before the clock: the credential proxy, the SSH connection and its reverse tunnel,
        the harness (shared, or uploaded when the provider could not share it), HOME, the
        plugin stub, the prompt and ``run.sh`` (:class:`OpencodeStaged`), and with ``warm``
        (default: the ``warm_start`` option) opencode started and waiting for its prompt. On
        failure nothing is left open.

        Raises:
            OpencodeError: opencode missing, the key unset, the territory unreachable, a step
                past its bound (one line naming the step and the option; see :meth:`stage_timeout_s`).
            asyncssh.Error, OSError: the preparation over SSH failed.
        """
        ctx.agent_dir.mkdir(parents=True, exist_ok=True)
        return await prepared(OpencodeStaged(ctx, self, warm=warm))

    async def start(self, ctx: AgentContext) -> AgentRun:
        """Start the run in the background and return it at once: with ``ctx.staged`` (the
        heat staged it before the clock) only ``run.sh`` is left to start; without, the run
        stages first (:meth:`stage`, on the race clock)."""
        ctx.agent_dir.mkdir(parents=True, exist_ok=True)
        return OpencodeRun(ctx, self)

    def sha256(self) -> str | None:
        """sha256 over this module, the proxy and the pinned opencode version (provenance)."""
        h = hashlib.sha256()
        for mod in ("opencode.py", "proxy.py"):
            with contextlib.suppress(OSError):
                h.update((Path(__file__).parent / mod).read_bytes())
        h.update(OPENCODE_VERSION.encode())
        return h.hexdigest()
