"""Built-in ``claude-code`` adapter: Claude Code running inside its territory (issue 27).

What is Claude Code's own (the rest is the runner, :mod:`aoe_tui.agents.harness`; measured
facts: ``docs/harnesses.md``, Claude Code 2.1.332):

- **Binary**: npm ``@anthropic-ai/claude-code`` pinned to :data:`VERSION`; the native file is
  ``@anthropic-ai/claude-code-linux-x64/claude`` (a Bun executable, glibc ≥ 2.26, no node).
- **Command**: ``claude -p --output-format stream-json --verbose
  --dangerously-skip-permissions --model <model> --max-turns <max_turns>`` with the prompt on
  stdin. As root the bypass needs ``IS_SANDBOX=1``.
- **Environment**: ``ANTHROPIC_BASE_URL=http://127.0.0.1:<guest port>`` (no ``/v1``: the CLI
  appends ``/v1/messages``, which the proxy forwards to ``<base_url>/messages``),
  ``ANTHROPIC_API_KEY`` a placeholder (sent as ``x-api-key``; the proxy drops it),
  ``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1`` (alone removes telemetry, feature flags,
  bootstrap and update traffic), ``DISABLE_TELEMETRY``, ``DISABLE_AUTOUPDATER``,
  ``DISABLE_ERROR_REPORTING``, ``CLAUDE_CODE_TMPDIR`` and ``XDG_RUNTIME_DIR`` in the run folder.
- **Stream** (``stream-json``, one object per line): ``system/init`` (session), ``assistant``
  (a model message: ``text``/``thinking``/``tool_use`` blocks, ``message.usage`` from
  ``message_start``: input and cache counts right, output not yet), ``user`` (``tool_result``
  blocks), ``system/api_retry``, and the final ``result`` whose ``usage`` sums the server's
  numbers over all requests (it replaces the running sums). ``subtype`` is ``success`` even
  for API errors: ``is_error`` and ``terminal_reason`` say what happened.
- **Usage**: ``input_tokens`` = input + cache_creation + cache_read (Anthropic counts them
  apart); ``output_tokens`` as sent (thinking included). ``total_cost_usd`` is the CLI's
  list price by model name and is never reported (``usage_detail`` keeps it).
- **Failures**: a ``result`` with ``is_error`` and ``terminal_reason`` ``max_turns`` →
  ``budget_exceeded``; ``api_error`` (or an ``assistant`` line with ``is_api_error_message``)
  → ``unavailable`` (provider) when the status/message is the provider's, else
  ``harness_error``. Claude Code hangs on a stalled stream: the runner's idle limit ends it.
"""

from __future__ import annotations

from typing import Any

from aoe_tui.agents.base import AdapterStatus, AgentContext
from aoe_tui.agents.harness import (
    PLACEHOLDER_KEY, Harness, HarnessAdapter, HarnessOptions, HarnessState, num, provider_status,
)

__all__ = ["VERSION", "ClaudeCode", "ClaudeCodeAdapter"]

#: The pinned npm version of ``@anthropic-ai/claude-code``.
VERSION = "2.1.332"
_READ_ONLY = frozenset({"Read", "Glob", "Grep", "LS", "ListAgents", "ToolSearch", "WebFetch", "WebSearch"})


def _show(inp: dict[str, Any]) -> str:
    what = inp.get("command") or inp.get("file_path") or inp.get("pattern") or inp.get("path") or ""
    return " ".join(str(what).split())[:150]


class ClaudeCode(Harness):
    """Claude Code (see the module docstring)."""

    name = "claude-code"
    label = "Claude Code"
    npm_package = "@anthropic-ai/claude-code"
    version = VERSION
    binary_paths = ("@anthropic-ai/claude-code-linux-x64/claude", "@anthropic-ai/claude-code/bin/claude.exe")
    binary_name = "claude"
    env_binary = "AOE_CLAUDE_CODE_BINARY"
    default_base_url = "https://api.anthropic.com/v1"
    default_api_key_env = "ANTHROPIC_API_KEY"
    read_only_tools = _READ_ONLY

    def preflight_call(self, model_id: str) -> tuple[str, dict[str, Any]]:
        """A one-token Anthropic Messages request (what ``claude -p`` sends, without tools)."""
        return "/v1/messages", {"model": model_id, "max_tokens": 1, "stream": False,
                                "messages": [{"role": "user", "content": "Reply with OK."}]}

    def env(self, run_dir: str, guest_port: int, model_id: str, opts: HarnessOptions, ctx: AgentContext) -> dict[str, str]:
        """Base URL (no ``/v1``), the placeholder key, the offline switches, temp dirs."""
        return {
            "IS_SANDBOX": "1", "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{guest_port}",
            "ANTHROPIC_API_KEY": PLACEHOLDER_KEY, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1", "DISABLE_ERROR_REPORTING": "1",
            "CLAUDE_CODE_TMPDIR": f"{run_dir}/tmp",
        }

    def argv(self, model_id: str, opts: HarnessOptions, ctx: AgentContext) -> list[str]:
        """``claude -p`` (prompt on stdin) with stream-json, no permission prompts, our turn cap."""
        return ["claude", "-p", "--output-format", "stream-json", "--verbose", "--dangerously-skip-permissions",
                "--model", model_id, "--max-turns", str(opts.max_turns)]

    def on_event(self, state: HarnessState, ev: dict[str, Any], activity: Any) -> None:
        """Fold one ``stream-json`` line (see the module docstring)."""
        etype = ev.get("type")
        state.session_id = state.session_id or ev.get("session_id")
        msg = ev.get("message") if isinstance(ev.get("message"), dict) else {}
        content = msg.get("content") if isinstance(msg.get("content"), list) else []
        if etype == "system" and ev.get("subtype") == "init":
            activity(f"Claude Code {ev.get('claude_code_version') or ''} started, model {ev.get('model')}".replace("  ", " "))
        elif etype == "system" and ev.get("subtype") == "api_retry":
            status = ev.get("error_status")
            activity(f"API retry {ev.get('attempt')}/{ev.get('max_retries')}"
                     f"{f' (HTTP {status})' if status else ''}: {ev.get('error') or ''}".rstrip(": "))
        elif etype == "assistant":
            if ev.get("is_api_error_message") or (ev.get("error") and msg.get("model") == "<synthetic>"):
                text = " ".join(" ".join(str(b.get("text") or "") for b in content if isinstance(b, dict)).split())
                kind = str(ev.get("error") or "unknown")
                provider = kind in ("authentication_failed", "server_error", "model_not_found", "rate_limit") \
                    or provider_status(None, text)
                state.failure = (AdapterStatus.UNAVAILABLE if provider else AdapterStatus.HARNESS_ERROR,
                                 f"{'model provider unavailable' if provider else 'Claude Code error'} ({kind}): "
                                 f"{text[:300]}")
                activity(f"API error {kind}: {text[:150]}")
                return
            mid = str(msg.get("id") or ev.get("uuid") or "")
            if mid and f"msg:{mid}" not in state.seen:
                state.seen.add(f"msg:{mid}")
                u = msg.get("usage") if isinstance(msg.get("usage"), dict) else {}
                read, write = num(u.get("cache_read_input_tokens")), num(u.get("cache_creation_input_tokens"))
                state.input_tokens += num(u.get("input_tokens")) + read + write
                state.cache_read += read
                state.cache_write += write
                state.output_tokens += num(u.get("output_tokens"))
                state.model_round(str(msg.get("stop_reason") or "message"),
                                  {"input_tokens": num(u.get("input_tokens")) + read + write,
                                   "output_tokens": num(u.get("output_tokens")),
                                   "cache_read_tokens": read, "cache_creation_tokens": write})
            for block in content:
                if not isinstance(block, dict):
                    continue
                btype = block.get("type")
                if btype == "text" and isinstance(block.get("text"), str):
                    state.parts.append({"type": "text", "text": block["text"]})
                    state.final_text = block["text"]
                    activity("says: " + " ".join(block["text"].split())[:150])
                elif btype == "thinking" and isinstance(block.get("thinking"), str):
                    state.parts.append({"type": "reasoning", "text": block["thinking"]})
                elif btype == "tool_use":
                    inp = block.get("input") if isinstance(block.get("input"), dict) else {}
                    name = str(block.get("name") or "tool")
                    state.tool_started(str(block.get("id") or f"tool-{len(state.trace)}"), name, inp)
                    activity(f"{name}: {_show(inp)}")
        elif etype == "user":
            for block in content:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    out = block.get("content")
                    if isinstance(out, list):
                        out = "\n".join(str(c.get("text") or "") for c in out if isinstance(c, dict))
                    call_id = str(block.get("tool_use_id") or "")
                    name = state.open_tools.get(call_id, ("tool", {}, 0))[0]
                    entry = state.tool_finished(call_id, out if out is not None else "", bool(block.get("is_error")),
                                                read_only=name in _READ_ONLY)
                    if entry["is_error"]:
                        activity(f"{entry['name']} ✗: {' '.join(entry['output'].split())[:150]}")
        elif etype == "result":
            self._result(state, ev, activity)

    def _result(self, state: HarnessState, ev: dict[str, Any], activity: Any) -> None:
        u = ev.get("usage") if isinstance(ev.get("usage"), dict) else None
        if u is not None:
            read, write = num(u.get("cache_read_input_tokens")), num(u.get("cache_creation_input_tokens"))
            state.input_tokens = num(u.get("input_tokens")) + read + write
            state.cache_read, state.cache_write = read, write
            state.output_tokens = num(u.get("output_tokens"))
            details = u.get("output_tokens_details") if isinstance(u.get("output_tokens_details"), dict) else {}
            state.reasoning = num(details.get("thinking_tokens"))
        cost = ev.get("total_cost_usd")
        if isinstance(cost, (int, float)) and not isinstance(cost, bool):
            state.harness_cost_usd = float(cost)
        state.rounds = max(state.rounds, len(state.model_rounds))
        text = ev.get("result") if isinstance(ev.get("result"), str) else None
        reason = str(ev.get("terminal_reason") or "")
        if not ev.get("is_error"):
            state.final = True
            if text is not None:
                state.final_text = text
            activity(f"Claude Code finished after {ev.get('num_turns')} turns")
            return
        one = " ".join((text or "; ".join(str(e) for e in ev.get("errors") or []) or "unknown error").split())[:300]
        activity(f"Claude Code ended with an error ({reason or ev.get('subtype')}): {one[:150]}")
        if reason == "max_turns" or ev.get("subtype") == "error_max_turns":
            state.max_turns_hit = True
        elif state.failure is None or reason == "api_error":
            status = ev.get("api_error_status")
            if reason == "api_error" or provider_status(status if isinstance(status, int) else None, one):
                code = f" (HTTP {status})" if isinstance(status, int) else ""
                state.failure = (AdapterStatus.UNAVAILABLE, f"model provider unavailable{code}: {one}")
            else:
                state.failure = (AdapterStatus.HARNESS_ERROR, f"Claude Code ended with an error "
                                                              f"({reason or ev.get('subtype')}): {one}")


class ClaudeCodeAdapter(HarnessAdapter):
    """Built-in ``claude-code`` adapter (options: :class:`~aoe_tui.agents.harness.HarnessOptions`)."""

    harness = ClaudeCode()
