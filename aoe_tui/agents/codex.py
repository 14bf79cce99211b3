"""Built-in ``codex`` adapter: Codex CLI running inside its territory (issue 27).

What is Codex's own (the rest is the runner, :mod:`aoe_tui.agents.harness`; measured facts:
``docs/harnesses.md``, Codex CLI 0.171.0):

- **Binary**: npm ``@openai/codex`` pinned to :data:`VERSION`; the native file is
  ``@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex`` (static musl, no
  node, no libc; bwrap is not needed with the sandbox bypassed).
- **Command**: ``codex exec --json --skip-git-repo-check
  --dangerously-bypass-approvals-and-sandbox -c analytics.enabled=false --disable plugins -m
  <model>`` with the prompt on stdin (no prompt argument: stdin is the prompt).
- **Provider** (``$CODEX_HOME/config.toml``, :meth:`Codex.files`): a custom
  ``model_providers.aoe`` with ``base_url = "http://127.0.0.1:<guest port>/v1"`` (the CLI
  appends ``/responses``), ``env_key`` naming a variable holding a placeholder (sent as
  ``Authorization: Bearer``; the proxy drops it) and ``wire_api = "responses"`` — the only API
  0.171.0 speaks; ``OPENAI_BASE_URL`` is not read. A custom provider uses plain HTTP POST (the
  built-in one tries a WebSocket first). Use a model name outside Codex's catalog with the
  scripted server: catalog gpt-6.x models get "code mode" tools only.
- **Stream** (``exec --json``): ``thread.started``, ``turn.started``,
  ``item.started``/``item.completed`` (``command_execution``, ``agent_message``,
  ``reasoning``, ``file_change``, ``error`` = a non-fatal warning), ``error`` lines (one per
  retry), and ``turn.completed`` with ``usage`` — the only place usage appears, summed over the
  turn — or ``turn.failed``.
- **Rounds**: the stream does not mark model responses; a round is counted per command
  started and per answer, so parallel calls in one response count as several rounds (an
  approximation; the token counts are exact).
- **Usage**: ``input_tokens`` as sent (OpenAI convention: cached included),
  ``cached_input_tokens`` → cache reads, ``cache_write_input_tokens`` → cache writes,
  ``output_tokens`` as sent (reasoning included). Codex reports no cost.
- **Failures**: ``turn.failed`` → ``unavailable`` (provider) when its message is about HTTP
  statuses, retries, connections or timeouts, else ``harness_error``. Codex retries for ever
  when the endpoint is down: the runner's idle and wall-clock limits end it.
"""

from __future__ import annotations

import json
from typing import Any

from aoe_tui.agents.base import AdapterStatus, AgentContext
from aoe_tui.agents.harness import (
    PLACEHOLDER_KEY, Harness, HarnessAdapter, HarnessOptions, HarnessState, num, provider_status,
)

__all__ = ["VERSION", "Codex", "CodexAdapter"]

#: The pinned npm version of ``@openai/codex``.
VERSION = "0.171.0"
#: the variable the custom provider's ``env_key`` names (holds the placeholder)
KEY_VAR = "AOE_PROXY_KEY"


def _toml(s: str) -> str:
    return json.dumps(s)  # a JSON string is a valid TOML basic string


class Codex(Harness):
    """Codex CLI (see the module docstring)."""

    name = "codex"
    label = "Codex"
    npm_package = "@openai/codex"
    version = VERSION
    version_marker = f"codex-cli {VERSION}"
    binary_paths = ("@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex",
                    "@openai/codex/vendor/x86_64-unknown-linux-musl/bin/codex")
    binary_name = "codex"
    env_binary = "AOE_CODEX_BINARY"
    default_base_url = "https://api.openai.com/v1"
    default_api_key_env = "OPENAI_API_KEY"

    def preflight_call(self, model_id: str) -> tuple[str, dict[str, Any]]:
        """A small OpenAI Responses request (what ``codex exec`` sends, without tools; the
        Responses API's smallest ``max_output_tokens`` is 16)."""
        return "/v1/responses", {"model": model_id, "input": "Reply with OK.", "max_output_tokens": 16,
                                 "stream": False}

    def env(self, run_dir: str, guest_port: int, model_id: str, opts: HarnessOptions, ctx: AgentContext) -> dict[str, str]:
        """``CODEX_HOME`` in the run folder and the placeholder key variable."""
        return {"CODEX_HOME": f"{run_dir}/home/.codex", KEY_VAR: PLACEHOLDER_KEY}

    def files(self, run_dir: str, guest_port: int, model_id: str, opts: HarnessOptions,
              ctx: AgentContext) -> dict[str, str]:
        """``$CODEX_HOME/config.toml``: the custom provider through the proxy, analytics and plugins off."""
        effort = getattr(ctx.agent, "reasoning_effort", None)
        lines = [
            'model_provider = "aoe"',
            f"model = {_toml(model_id)}",
            *([f"model_reasoning_effort = {_toml(effort)}"] if effort and effort != "default" else []),
            "",
            "[model_providers.aoe]",
            'name = "aoe credential proxy"',
            f'base_url = "http://127.0.0.1:{guest_port}/v1"',
            f'env_key = "{KEY_VAR}"',
            'wire_api = "responses"',
            "",
            "[analytics]",
            "enabled = false",
            "",
            "[features]",
            "plugins = false",
            "",
        ]
        return {f"{run_dir}/home/.codex/config.toml": "\n".join(lines)}

    def argv(self, model_id: str, opts: HarnessOptions, ctx: AgentContext) -> list[str]:
        """``codex exec --json`` (prompt on stdin) with the sandbox and approvals bypassed, offline switches."""
        return ["codex", "exec", "--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox",
                "-c", "analytics.enabled=false", "--disable", "plugins", "-m", model_id]

    def on_event(self, state: HarnessState, ev: dict[str, Any], activity: Any) -> None:
        """Fold one ``exec --json`` line (see the module docstring)."""
        etype = ev.get("type")
        item = ev.get("item") if isinstance(ev.get("item"), dict) else {}
        itype, iid = item.get("type"), str(item.get("id") or "")
        if etype == "thread.started":
            state.session_id = state.session_id or ev.get("thread_id")
            activity("Codex started")
        elif etype == "item.started" and itype == "command_execution":
            cmd = str(item.get("command") or "")
            state.tool_started(iid, "exec_command", {"command": cmd})
            state.model_round("tool_call", {})
            activity(f"exec_command: {' '.join(cmd.split())[:150]}")
        elif etype == "item.completed":
            self._completed(state, item, itype, iid, activity)
        elif etype == "error":
            activity(f"Codex: {' '.join(str(ev.get('message') or '').split())[:150]}")
        elif etype == "turn.completed":
            u = ev.get("usage") if isinstance(ev.get("usage"), dict) else {}
            state.input_tokens += num(u.get("input_tokens"))
            state.cache_read += num(u.get("cached_input_tokens"))
            state.cache_write += num(u.get("cache_write_input_tokens"))
            state.output_tokens += num(u.get("output_tokens"))
            state.reasoning += num(u.get("reasoning_output_tokens"))
            state.final = state.final_text is not None
            activity(f"Codex finished the turn ({num(u.get('input_tokens'))} in, {num(u.get('output_tokens'))} out)")
        elif etype == "turn.failed":
            err = ev.get("error") if isinstance(ev.get("error"), dict) else {}
            msg = " ".join(str(err.get("message") or "unknown error").split())[:300]
            state.failure = ((AdapterStatus.UNAVAILABLE, f"model provider unavailable: {msg}") if provider_status(None, msg)
                             else (AdapterStatus.HARNESS_ERROR, f"Codex turn failed: {msg}"))
            activity(f"Codex turn failed: {msg[:150]}")

    def _completed(self, state: HarnessState, item: dict[str, Any], itype: Any, iid: str, activity: Any) -> None:
        if itype == "command_execution":
            code = item.get("exit_code")
            failed = item.get("status") == "failed" or (isinstance(code, int) and code != 0)
            entry = state.tool_finished(iid, str(item.get("aggregated_output") or ""), failed, name="exec_command",
                                        inp={"command": str(item.get("command") or "")})
            if failed:
                activity(f"exec_command ✗ (exit {code}): {' '.join(entry['input'].get('command', '').split())[:120]}")
        elif itype == "agent_message" and isinstance(item.get("text"), str):
            state.parts.append({"type": "text", "text": item["text"]})
            state.final_text = item["text"]
            state.model_round("message", {})
            activity("says: " + " ".join(item["text"].split())[:150])
        elif itype == "reasoning" and isinstance(item.get("text"), str):
            state.parts.append({"type": "reasoning", "text": item["text"]})
        elif itype in ("file_change", "mcp_tool_call", "web_search"):
            inp = {k: v for k, v in item.items() if k not in ("id", "type", "status")}
            state.tool_finished(iid or f"item-{len(state.trace)}", item.get("status") or "", item.get("status") == "failed",
                                name=str(itype), inp=inp, read_only=itype == "web_search")
            activity(f"{itype}: {json.dumps(inp)[:150]}")
        elif itype == "error":
            activity(f"Codex warning: {' '.join(str(item.get('message') or '').split())[:150]}")


class CodexAdapter(HarnessAdapter):
    """Built-in ``codex`` adapter (options: :class:`~aoe_tui.agents.harness.HarnessOptions`)."""

    harness = Codex()
