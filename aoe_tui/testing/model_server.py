"""A scripted model server for tests and demos (issues 8 and 27), in three APIs.

It answers ``POST /v1/chat/completions`` (OpenAI chat completions: opencode),
``POST /v1/responses`` (OpenAI Responses: Codex CLI) and ``POST /v1/messages`` (Anthropic
Messages, ``?beta=true`` allowed: Claude Code) — streaming SSE when ``stream`` is true, or
one JSON body otherwise — with the **same** prepared sequence of :class:`ScriptStep` s: each
step is either tool calls or a final text message, with realistic usage numbers. A script
tool call (opencode's names: ``bash {command}``, ``write {filePath, content}``) becomes a chat
``tool_calls`` entry, a Responses ``function_call`` item for Codex's ``exec_command {cmd}``
(or ``shell``), or an Anthropic ``tool_use`` block for ``Bash {command}`` (``Write`` when
offered) — see :func:`translate_call`. Usage is sent in each API's shape
(:func:`step_usage`; the shapes are those of ``shared/notes/harnesses.md``) and recorded in
:attr:`ScriptedModelServer.sent`, so tests compare ``usage.json`` with what was sent.

Which step answers a request is decided by the request itself, not by a counter: step
``n`` answers a request whose conversation holds ``n`` model turns (assistant messages;
for Responses, runs of ``function_call`` / assistant items in ``input``). So a retried
request gets the same answer again and accounting stays exact. A request without
``tools`` (opencode's title request) gets a short title with no usage. Past the end of
the script the server answers ``"Done."`` with no usage.

Modes (``mode``): ``"ok"``; ``"429"`` (rate limited forever), ``"500"`` (server error
forever) — failures carry ``retry-after-ms`` (``retry_after_ms``) so clients that obey it
(opencode does) give up quickly; ``"endless"``: a model that never stops — past the script's
end the last step is answered again and again, usage included (:func:`never_stop_step`).

``plant_key``: a hostile upstream that plants that string everywhere it can — the model's
own text in every answer (which a harness prints, logs and keeps in its transcript), response
headers (``X-Debug-Upstream-Key``, ``X-Request-Id``), every JSON body (``debug``), every
stream (an SSE comment split across two chunks), every error message, and ``GET …/models``
answers a redirect whose ``Location`` holds it.

``expect_key``: when set, a request whose credential is not the key (``Authorization:
Bearer <expect_key>``; ``x-api-key: <expect_key>`` on ``/messages``) gets 401 — this is how
tests check that the credential proxy injected the key in the API's own header. Recorded
requests (:attr:`ScriptedModelServer.requests`) never hold a credential value; only
``auth_ok`` (bool) and the names of the credential headers received.

Usage::

    with ScriptedModelServer(durable_sqlite_script(), expect_key="sk-test") as srv:
        srv.base_url  # "http://127.0.0.1:PORT/v1"

Command line (demo): ``python -m aoe_tui.testing.model_server --port 18999 [--mode 429]``.
"""

from __future__ import annotations

import argparse
import base64
import json
import threading
import time
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = [
    "ScriptStep",
    "ScriptedModelServer",
    "ToolCall",
    "durable_sqlite_script",
    "kill_self_script",
    "never_stop_step",
    "script_totals",
    "step_usage",
    "translate_call",
]


@dataclass(frozen=True)
class ToolCall:
    """One tool call the scripted model makes: opencode tool ``name`` (``bash``, ``write``…) and its ``arguments``."""

    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class ScriptStep:
    """One model turn: ``tool_calls`` (non-empty) or a final ``text``, plus its usage (tokens).

    ``prompt_tokens`` includes ``cached_tokens`` (cache reads) and ``cache_write_tokens``;
    ``completion_tokens`` includes ``reasoning_tokens`` (OpenAI semantics; Anthropic's
    ``input_tokens`` is sent as ``prompt_tokens − cached − cache_write``). ``delay_s`` (s) is slept before answering. A
    streamed text answer is sent in ``stream_chunks`` pieces with ``chunk_delay_s`` (s) between
    them: a slow reasoning model that streams for a long time before its turn ends.
    """

    tool_calls: tuple[ToolCall, ...] = ()
    text: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    cache_write_tokens: int = 0
    delay_s: float = 0.0
    stream_chunks: int = 1
    chunk_delay_s: float = 0.0


def script_totals(steps: list[ScriptStep]) -> dict[str, int]:
    """Sums over the script: ``{"prompt_tokens", "completion_tokens", "cached_tokens", "reasoning_tokens", "tool_calls", "steps"}``."""
    return {
        "prompt_tokens": sum(s.prompt_tokens for s in steps),
        "completion_tokens": sum(s.completion_tokens for s in steps),
        "cached_tokens": sum(s.cached_tokens for s in steps),
        "reasoning_tokens": sum(s.reasoning_tokens for s in steps),
        "tool_calls": sum(len(s.tool_calls) for s in steps),
        "steps": len(steps),
    }


def _bash(command: str) -> ToolCall:
    return ToolCall("bash", {"command": command})


#: Seconds between the scripted agent's last tool call and the service coming up.
DEFERRED_START_S = 10

#: Commands of :func:`durable_sqlite_script`, with the §9.2 kind each one must be classified as.
#: The last tool call *schedules* the restart (``systemd-run --on-active``) instead of doing it,
#: so the agent gives its final answer and exits before the service answers: otherwise the
#: referee can pass every milestone and reboot the guest while the agent is still in its last
#: turn (as happened to the seed bundle's winner), which makes the scripted outcome and token
#: totals depend on machine load.
DURABLE_SCRIPT_KINDS: tuple[tuple[str, str], ...] = (
    ("systemctl cat builder-app.service 2>&1 | head -n 20; command -v python3 sqlite3", "discovery"),
    ("systemctl status builder-app.service --no-pager 2>&1 | head -n 5; ss -ltn", "validation"),
    ("mkdir -p /opt/builder /var/lib/builder", "mutation"),
    ("write /opt/builder/app.py", "mutation"),
    (
        "chmod 0755 /opt/builder/app.py && systemctl reset-failed builder-app.service; "
        f"systemd-run --quiet --on-active={DEFERRED_START_S} systemctl restart builder-app.service "
        f"&& echo 'builder-app.service restarts in {DEFERRED_START_S} s'",
        "lifecycle",
    ),
)


def durable_sqlite_script(app_source: str | None = None, *, step_delay_s: float = 0.0) -> list[ScriptStep]:
    """A 6-step script that deploys the durable sqlite records service (the oracle's app).

    Steps: two looks around (``systemctl cat``, ``systemctl status``), ``mkdir``,
    ``write /opt/builder/app.py`` (the oracle's sqlite app source), a ``systemctl restart``
    scheduled :data:`DEFERRED_START_S` seconds ahead, then a final text. Usage grows per step like a real
    conversation (prompt about 11–18 K tokens, some cached, some reasoning tokens).
    """
    if app_source is None:
        from aoe_tui.agents.oracle import DURABLE_STORAGE, render_app

        app_source = render_app(DURABLE_STORAGE)
    calls = [
        _bash(DURABLE_SCRIPT_KINDS[0][0]),
        _bash(DURABLE_SCRIPT_KINDS[1][0]),
        _bash(DURABLE_SCRIPT_KINDS[2][0]),
        ToolCall("write", {"filePath": "/opt/builder/app.py", "content": app_source}),
        _bash(DURABLE_SCRIPT_KINDS[4][0]),
    ]
    steps = []
    for i, call in enumerate(calls):
        steps.append(ScriptStep(
            tool_calls=(call,), prompt_tokens=11_000 + 1_300 * i, completion_tokens=120 + 45 * i + (900 if call.name == "write" else 0),
            cached_tokens=0 if i == 0 else 8_000, reasoning_tokens=30 + 5 * i, delay_s=step_delay_s,
        ))
    steps.append(ScriptStep(
        text="Deployed the records service (sqlite under /var/lib/builder) as builder-app.service; it starts in a few seconds.",
        prompt_tokens=17_600, completion_tokens=64, cached_tokens=8_000, reasoning_tokens=12, delay_s=step_delay_s,
    ))
    return steps


def kill_self_script(*, step_delay_s: float = 0.0) -> list[ScriptStep]:
    """A script whose second step kills opencode from inside (``pkill -KILL -x opencode``): a harness crash."""
    return [
        ScriptStep(tool_calls=(_bash("uname -a"),), prompt_tokens=10_000, completion_tokens=40, delay_s=step_delay_s),
        ScriptStep(tool_calls=(_bash("pkill -KILL -x opencode; sleep 5"),), prompt_tokens=10_500, completion_tokens=40,
                   delay_s=step_delay_s),
        ScriptStep(text="unreachable", prompt_tokens=1, completion_tokens=1),
    ]


def never_stop_step(*, prompt_tokens: int = 2_000, completion_tokens: int = 100,
                    command: str = "echo still working") -> ScriptStep:
    """The one step of a model that never stops (``mode="endless"`` repeats it for ever): a
    shell call with ``prompt_tokens`` / ``completion_tokens`` of usage each turn."""
    return ScriptStep(tool_calls=(_bash(command),), prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)


#: Modes of :class:`ScriptedModelServer`.
MODES = ("ok", "429", "500", "endless")

#: What a ``plant_key`` server answers ``GET …/models`` with: a redirect whose ``Location`` holds the key.
HOSTILE_REDIRECT = 302


@dataclass
class _State:
    steps: list[ScriptStep]
    mode: str
    retry_after_ms: int
    expect_key: str | None
    model: str
    served: frozenset[str] | None = None
    plant_key: str | None = None
    requests: list[dict[str, Any]] = field(default_factory=list)
    sent: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _api(path: str) -> str | None:
    p = path.split("?", 1)[0].rstrip("/")
    for suffix, api in (("/chat/completions", "chat"), ("/responses", "responses"), ("/messages", "messages")):
        if p.endswith(suffix):
            return api
    return None


def _model_turns(api: str, body: dict[str, Any]) -> int:
    """How many model turns the request's conversation already holds (which step answers it)."""
    if api == "responses":
        items = body.get("input")
        if not isinstance(items, list):
            return 0
        turns, in_model = 0, False
        for it in items:
            model = isinstance(it, dict) and (it.get("type") in ("function_call", "reasoning", "custom_tool_call")
                                              or it.get("role") == "assistant")
            if model and not in_model:
                turns += 1
            in_model = bool(model)
        return turns
    return sum(1 for m in body.get("messages") or [] if isinstance(m, dict) and m.get("role") == "assistant")


def _tool_names(api: str, body: dict[str, Any]) -> list[str]:
    names = []
    for t in body.get("tools") or []:
        if isinstance(t, dict):
            name = (t.get("function") or {}).get("name") if api == "chat" else t.get("name")
            if isinstance(name, str):
                names.append(name)
    return names


def _shell_of(call: ToolCall) -> str:
    """A script tool call as one shell command (for harnesses whose only tool is a shell)."""
    if call.name == "bash":
        return str(call.arguments.get("command", ""))
    if call.name == "write":
        path = str(call.arguments.get("filePath") or call.arguments.get("file_path"))
        data = base64.b64encode(str(call.arguments.get("content", "")).encode()).decode()
        return f"mkdir -p \"$(dirname {path})\" && echo {data} | base64 -d > {path}"
    return str(call.arguments.get("command", json.dumps(call.arguments)))


def translate_call(api: str, call: ToolCall, offered: list[str]) -> tuple[str, dict[str, Any]]:
    """A script tool call (opencode's tool names: ``bash {command}``, ``write {filePath, content}``)
    in the tools a request offers: chat keeps it as is; Responses (Codex) becomes
    ``exec_command {cmd}`` (or ``shell {command: ["bash", "-lc", cmd]}`` when that is offered);
    Anthropic (Claude Code) becomes ``Bash {command}``, or ``Write {file_path, content}`` when
    offered. Returns (tool name, arguments)."""
    if api == "chat":
        return call.name, call.arguments
    if api == "messages":
        if call.name == "write" and "Write" in offered:
            return "Write", {"file_path": call.arguments.get("filePath"), "content": call.arguments.get("content")}
        return "Bash", {"command": _shell_of(call)}
    if "shell" in offered and "exec_command" not in offered:
        return "shell", {"command": ["bash", "-lc", _shell_of(call)]}
    return "exec_command", {"cmd": _shell_of(call)}


def step_usage(api: str, step: ScriptStep) -> dict[str, Any]:
    """The ``usage`` object the server sends for ``step`` in ``api``'s shape (the final one for
    Anthropic streams, whose ``message_start`` carries ``output_tokens: 1``)."""
    if api == "messages":
        return {"input_tokens": step.prompt_tokens - step.cached_tokens - step.cache_write_tokens,
                "cache_creation_input_tokens": step.cache_write_tokens,
                "cache_read_input_tokens": step.cached_tokens, "output_tokens": step.completion_tokens}
    if api == "responses":
        return {"input_tokens": step.prompt_tokens,
                "input_tokens_details": {"cached_tokens": step.cached_tokens, "cache_write_tokens": step.cache_write_tokens},
                "output_tokens": step.completion_tokens,
                "output_tokens_details": {"reasoning_tokens": step.reasoning_tokens},
                "total_tokens": step.prompt_tokens + step.completion_tokens}
    details: dict[str, Any] = {"cached_tokens": step.cached_tokens}
    if step.cache_write_tokens:
        details["cache_write_tokens"] = step.cache_write_tokens
    return {"prompt_tokens": step.prompt_tokens, "completion_tokens": step.completion_tokens,
            "total_tokens": step.prompt_tokens + step.completion_tokens, "prompt_tokens_details": details,
            "completion_tokens_details": {"reasoning_tokens": step.reasoning_tokens}}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "aoe-scripted-model/1"
    state: _State  # set on the subclass

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
        return

    def _planted_headers(self) -> dict[str, str]:
        key = self.state.plant_key
        return {"X-Debug-Upstream-Key": key, "X-Request-Id": f"req-{key}"} if key else {}

    def _json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in {**self._planted_headers(), **(headers or {})}.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _error(self, api: str | None, status: int, message: str, kind: str,
               headers: dict[str, str] | None = None) -> None:
        if self.state.plant_key:
            message += f" (upstream key {self.state.plant_key})"
        if api == "messages":
            self._json(status, {"type": "error", "error": {"type": kind, "message": message}}, headers)
        else:
            self._json(status, {"error": {"message": message, "type": kind}}, headers)

    def do_GET(self) -> None:  # noqa: N802
        st = self.state
        if self.path.rstrip("/").endswith("/models"):
            if st.plant_key:
                self.send_response(HOSTILE_REDIRECT)
                self.send_header("Location", f"https://gateway.example/login?key={st.plant_key}")
                self.send_header("Content-Length", "0")
                for k, v in self._planted_headers().items():
                    self.send_header(k, v)
                self.end_headers()
                return
            self._json(200, {"object": "list", "data": [{"id": st.model, "object": "model"}]})
        else:
            self._error(None, 404, "not found", "not_found_error")

    def do_POST(self) -> None:  # noqa: N802
        st = self.state
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        api = _api(self.path)
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            self._error(api, 400, "body is not JSON", "invalid_request_error")
            return
        if api == "messages":
            auth_ok = st.expect_key is None or self.headers.get("x-api-key") == st.expect_key
        else:
            auth_ok = st.expect_key is None or (self.headers.get("Authorization") or "") == f"Bearer {st.expect_key}"
        turns = _model_turns(api or "chat", body) if isinstance(body, dict) else 0
        record = {
            "time": time.time(), "path": self.path, "api": api, "auth_ok": auth_ok, "stream": bool(body.get("stream")),
            "has_tools": bool(body.get("tools")), "assistant_messages": turns, "model": body.get("model"),
            "reasoning_effort": body.get("reasoning_effort"), "max_tokens": body.get("max_tokens"),
            "user_agent": self.headers.get("User-Agent"),
            "anthropic_version": self.headers.get("anthropic-version"),
            "inbound_credentials": sorted(h.lower() for h in self.headers if h.lower() in ("authorization", "x-api-key")),
        }
        with st.lock:
            st.requests.append(record)
        if api is None:
            self._error(api, 404, f"unknown path {self.path}", "not_found_error")
            return
        if not auth_ok:
            self._error(api, 401, "invalid API key", "authentication_error" if api == "messages" else "invalid_request_error")
            return
        if st.served is not None and body.get("model") not in st.served:
            self._error(api, 404, f"The model `{body.get('model')}` does not exist", "not_found_error"
                        if api == "messages" else "invalid_request_error")
            return
        if st.mode in ("429", "500"):
            status = int(st.mode)
            msg = "Rate limit exceeded (scripted)" if status == 429 else "Internal server error (scripted)"
            self._error(api, status, msg, "scripted_failure", {"retry-after-ms": str(st.retry_after_ms)})
            return
        if not body.get("tools"):
            self._answer(api, body, ScriptStep(text="Deploy the records service"), usage=False)
            return
        if turns < len(st.steps):
            step, usage = st.steps[turns], True
        elif st.mode == "endless" and st.steps:
            step, usage = st.steps[-1], True
        else:
            step, usage = ScriptStep(text="Done."), False
        if step.delay_s > 0:
            time.sleep(step.delay_s)
        self._answer(api, body, step, usage=usage, call_prefix=f"call_{turns:02d}")

    def _answer(self, api: str, body: dict[str, Any], step: ScriptStep, *, usage: bool, call_prefix: str = "call") -> None:
        offered = _tool_names(api, body)
        if self.state.plant_key:  # the model's own words hold the key: what a harness shows and keeps
            step = replace(step, text=f"{step.text or ''} [upstream key {self.state.plant_key}]".strip())
        calls = [(f"{call_prefix}_{i}", *translate_call(api, c, offered)) for i, c in enumerate(step.tool_calls)]
        u = step_usage(api, step) if usage else None
        if u is not None:
            with self.state.lock:
                self.state.sent.append({"api": api, "usage": u, "prompt_tokens": step.prompt_tokens,
                                        "completion_tokens": step.completion_tokens,
                                        "cached_tokens": step.cached_tokens,
                                        "cache_write_tokens": step.cache_write_tokens,
                                        "reasoning_tokens": step.reasoning_tokens})
        stream = bool(body.get("stream"))
        if not stream:
            obj = getattr(self, f"_{api}_body")(body, step, calls, u)
            if self.state.plant_key:
                obj["debug"] = f"served with key {self.state.plant_key}"
            self._json(200, obj)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        for k, v in self._planted_headers().items():
            self.send_header(k, v)
        self.end_headers()

        def raw(data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        def event(obj: Any, name: str | None = None) -> None:
            data = (f"event: {name}\n".encode() if name else b"") + b"data: " + (
                obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"
            raw(data)

        if self.state.plant_key:  # an SSE comment holding the key, split across two chunks
            key = self.state.plant_key.encode()
            raw(b": upstream trace " + key[: len(key) // 2])
            raw(key[len(key) // 2:] + b"\n\n")
        getattr(self, f"_{api}_stream")(body, step, calls, u, event)
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _pieces(self, step: ScriptStep) -> list[str]:
        text = step.text or ""
        n = max(1, step.stream_chunks)
        size = -(-len(text) // n) if text else 0
        return [text[i * size:(i + 1) * size] for i in range(n)] if size else [text]

    # ------------------------------------------------------------ chat completions

    def _chat_body(self, body: dict[str, Any], step: ScriptStep, calls: list, u: dict | None) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": step.text}
        if calls:
            message["tool_calls"] = [{"id": cid, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
                                     for cid, n, a in calls]
        obj: dict[str, Any] = {"id": f"chatcmpl-{int(time.time() * 1000)}", "object": "chat.completion",
                               "created": int(time.time()), "model": body.get("model") or self.state.model,
                               "choices": [{"index": 0, "message": message,
                                            "finish_reason": "tool_calls" if calls else "stop"}]}
        if u is not None:
            obj["usage"] = u
        return obj

    def _chat_stream(self, body: dict[str, Any], step: ScriptStep, calls: list, u: dict | None, event: Any) -> None:
        base = {"id": f"chatcmpl-{int(time.time() * 1000)}", "object": "chat.completion.chunk",
                "created": int(time.time()), "model": body.get("model") or self.state.model}
        tool_calls = [{"index": i, "id": cid, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
                      for i, (cid, n, a) in enumerate(calls)]
        pieces = [""] if calls else self._pieces(step)
        for i, piece in enumerate(pieces):
            if i:
                time.sleep(step.chunk_delay_s)
            delta: dict[str, Any] = {"content": piece} if i else {"role": "assistant", "content": piece}
            if tool_calls:
                delta["tool_calls"] = tool_calls
            event({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
        event({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls" if calls else "stop"}]})
        if u is not None and (body.get("stream_options") or {}).get("include_usage", False):
            event({**base, "choices": [], "usage": u})
        event(b"[DONE]")

    # ------------------------------------------------------------ Responses

    def _responses_items(self, step: ScriptStep, calls: list) -> list[dict[str, Any]]:
        if calls:
            return [{"type": "function_call", "id": f"fc_{cid}", "call_id": cid, "name": n, "arguments": json.dumps(a),
                     "status": "completed"} for cid, n, a in calls]
        return [{"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                 "content": [{"type": "output_text", "text": step.text or "", "annotations": []}]}]

    def _responses_body(self, body: dict[str, Any], step: ScriptStep, calls: list, u: dict | None) -> dict[str, Any]:
        obj: dict[str, Any] = {"id": f"resp_{int(time.time() * 1000)}", "object": "response",
                               "created_at": int(time.time()), "status": "completed",
                               "model": body.get("model") or self.state.model,
                               "output": self._responses_items(step, calls)}
        if u is not None:
            obj["usage"] = u
        return obj

    def _responses_stream(self, body: dict[str, Any], step: ScriptStep, calls: list, u: dict | None, event: Any) -> None:
        resp = self._responses_body(body, step, calls, u)
        event({"type": "response.created", "response": {**resp, "status": "in_progress", "output": [], "usage": None}},
              "response.created")
        if not calls:
            for i, piece in enumerate(self._pieces(step)):
                if i:
                    time.sleep(step.chunk_delay_s)
                event({"type": "response.output_text.delta", "output_index": 0, "content_index": 0, "delta": piece},
                      "response.output_text.delta")
        for i, item in enumerate(resp["output"]):
            event({"type": "response.output_item.done", "output_index": i, "item": item}, "response.output_item.done")
        event({"type": "response.completed", "response": resp}, "response.completed")

    # ------------------------------------------------------------ Anthropic Messages

    def _messages_body(self, body: dict[str, Any], step: ScriptStep, calls: list, u: dict | None) -> dict[str, Any]:
        content = [{"type": "tool_use", "id": cid, "name": n, "input": a} for cid, n, a in calls] or \
            [{"type": "text", "text": step.text or ""}]
        return {"id": f"msg_{int(time.time() * 1000)}", "type": "message", "role": "assistant",
                "model": body.get("model") or self.state.model, "content": content,
                "stop_reason": "tool_use" if calls else "end_turn", "stop_sequence": None,
                "usage": u or {"input_tokens": 0, "output_tokens": 0}}

    def _messages_stream(self, body: dict[str, Any], step: ScriptStep, calls: list, u: dict | None, event: Any) -> None:
        msg = self._messages_body(body, step, calls, u)
        start_usage = {**(u or {"input_tokens": 0}), "output_tokens": 1 if u else 0}
        event({"type": "message_start", "message": {**msg, "content": [], "stop_reason": None, "usage": start_usage}},
              "message_start")
        for i, (cid, n, a) in enumerate(calls):
            event({"type": "content_block_start", "index": i,
                   "content_block": {"type": "tool_use", "id": cid, "name": n, "input": {}}}, "content_block_start")
            event({"type": "content_block_delta", "index": i,
                   "delta": {"type": "input_json_delta", "partial_json": json.dumps(a)}}, "content_block_delta")
            event({"type": "content_block_stop", "index": i}, "content_block_stop")
        if not calls:
            event({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                  "content_block_start")
            for i, piece in enumerate(self._pieces(step)):
                if i:
                    time.sleep(step.chunk_delay_s)
                event({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}},
                      "content_block_delta")
            event({"type": "content_block_stop", "index": 0}, "content_block_stop")
        event({"type": "message_delta", "delta": {"stop_reason": msg["stop_reason"], "stop_sequence": None},
               "usage": {"output_tokens": (u or {}).get("output_tokens", 0)}}, "message_delta")
        event({"type": "message_stop"}, "message_stop")


class ScriptedModelServer:
    """The scripted endpoint, served from a background thread (stdlib ``ThreadingHTTPServer``).

    Args:
        steps: the script (see :func:`durable_sqlite_script`).
        mode: ``"ok"``, ``"429"`` or ``"500"`` (every model request fails with that status), or
            ``"endless"`` (the last step repeats for ever: a model that never stops).
        plant_key: a hostile upstream: plant this string in every place it can (module docstring).
        host, port: listen address (port 0 = any free port).
        retry_after_ms: ``retry-after-ms`` header value on failures.
        expect_key: require ``Authorization: Bearer <expect_key>`` (else 401).
        model: model id reported by ``GET /v1/models``.
        served: model ids the server knows (``None``: any); a chat request for another model
            gets 404 ``model_not_found`` ("The model `x` does not exist"), as OpenAI answers.

    Attributes:
        requests: one dict per request received (path, auth_ok, stream, has_tools,
            api, assistant_messages, model, reasoning_effort, max_tokens, user_agent,
            anthropic_version, inbound_credentials) — never the key.
        sent: one dict per response that carried usage: ``api``, ``usage`` (the object sent) and
            the step's ``prompt_tokens``, ``completion_tokens``, ``cached_tokens``,
            ``cache_write_tokens``, ``reasoning_tokens``.
    """

    def __init__(self, steps: list[ScriptStep] | None = None, *, mode: str = "ok", host: str = "127.0.0.1",
                 port: int = 0, retry_after_ms: int = 200, expect_key: str | None = None,
                 model: str = "scripted-model", served: set[str] | None = None,
                 plant_key: str | None = None) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r} ({', '.join(MODES)})")
        self._state = _State(list(steps or []), mode, retry_after_ms, expect_key, model,
                             frozenset(served) if served is not None else None, plant_key)
        handler = type("ScriptedHandler", (_Handler,), {"state": self._state})
        self._httpd = ThreadingHTTPServer((host, port), handler)
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The TCP port listened on."""
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        """``http://HOST:PORT/v1`` (an OpenAI-compatible base URL)."""
        return f"http://{self._httpd.server_address[0]}:{self.port}/v1"

    @property
    def requests(self) -> list[dict[str, Any]]:
        """A copy of the recorded requests (see the class docstring)."""
        with self._state.lock:
            return list(self._state.requests)

    @property
    def sent(self) -> list[dict[str, Any]]:
        """A copy of the usage sent, one dict per response with usage (see the class docstring)."""
        with self._state.lock:
            return list(self._state.sent)

    def sent_totals(self) -> dict[str, int]:
        """Sums of :attr:`sent` (tokens): ``prompt_tokens`` (cache included), ``completion_tokens``
        (reasoning included), ``cached_tokens``, ``cache_write_tokens``, ``reasoning_tokens``, ``responses``."""
        sent = self.sent
        keys = ("prompt_tokens", "completion_tokens", "cached_tokens", "cache_write_tokens", "reasoning_tokens")
        return {**{k: sum(x[k] for x in sent) for k in keys}, "responses": len(sent)}

    def start(self) -> ScriptedModelServer:
        """Start serving in a daemon thread; returns self."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._httpd.serve_forever, name="scripted-model", daemon=True)
            self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving and close the socket. Idempotent."""
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(5)
            self._thread = None
        self._httpd.server_close()

    def __enter__(self) -> ScriptedModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def main(argv: list[str] | None = None) -> int:
    """``python -m aoe_tui.testing.model_server``: serve :func:`durable_sqlite_script` until Ctrl-C."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=18999)
    p.add_argument("--mode", default="ok", choices=list(MODES))
    p.add_argument("--expect-key", default=None)
    p.add_argument("--step-delay", type=float, default=0.0)
    a = p.parse_args(argv)
    srv = ScriptedModelServer(durable_sqlite_script(step_delay_s=a.step_delay), mode=a.mode, host=a.host, port=a.port,
                              expect_key=a.expect_key)
    print(f"scripted model server on {srv.base_url} (mode {a.mode})", flush=True)
    try:
        srv.start()
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        srv.close()
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
