"""A scripted OpenAI-compatible model server for tests and demos (issue 8).

It answers ``POST /v1/chat/completions`` (streaming SSE when ``stream`` is true, as
opencode always asks, or one JSON body otherwise) with a prepared sequence of
:class:`ScriptStep` s: each step is either tool calls or a final text message, with
realistic ``usage`` numbers (``prompt_tokens``, ``completion_tokens``,
``prompt_tokens_details.cached_tokens``, ``completion_tokens_details.reasoning_tokens``).

Which step answers a request is decided by the request itself, not by a counter: step
``n`` answers a request whose ``messages`` hold ``n`` assistant messages. So a retried
request gets the same answer again and accounting stays exact. A request without
``tools`` (opencode's title request) gets a short title with no usage. Past the end of
the script the server answers ``"Done."`` with no usage.

Failure modes (``mode``): ``"ok"``, ``"429"`` (rate limited forever), ``"500"`` (server
error forever); failures carry ``retry-after-ms`` (``retry_after_ms``) so clients that
obey it (opencode does) give up quickly.

``expect_key``: when set, a request whose ``Authorization`` is not ``Bearer <expect_key>``
gets 401 — this is how tests check that the credential proxy injected the key. Recorded
requests (:attr:`ScriptedModelServer.requests`) never hold the Authorization value; only
``auth_ok`` (bool).

Usage::

    with ScriptedModelServer(durable_sqlite_script(), expect_key="sk-test") as srv:
        srv.base_url  # "http://127.0.0.1:PORT/v1"

Command line (demo): ``python -m aoe_tui.testing.model_server --port 18999 [--mode 429]``.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = [
    "ScriptStep",
    "ScriptedModelServer",
    "ToolCall",
    "durable_sqlite_script",
    "kill_self_script",
    "script_totals",
]


@dataclass(frozen=True)
class ToolCall:
    """One tool call the scripted model makes: opencode tool ``name`` (``bash``, ``write``…) and its ``arguments``."""

    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class ScriptStep:
    """One model turn: ``tool_calls`` (non-empty) or a final ``text``, plus its usage (tokens).

    ``prompt_tokens`` includes ``cached_tokens``; ``completion_tokens`` includes
    ``reasoning_tokens`` (OpenAI semantics). ``delay_s`` (s) is slept before answering. A
    streamed text answer is sent in ``stream_chunks`` pieces with ``chunk_delay_s`` (s) between
    them: a slow reasoning model that streams for a long time before its turn ends.
    """

    tool_calls: tuple[ToolCall, ...] = ()
    text: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0
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


@dataclass
class _State:
    steps: list[ScriptStep]
    mode: str
    retry_after_ms: int
    expect_key: str | None
    model: str
    served: frozenset[str] | None = None
    requests: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "aoe-scripted-model/1"
    state: _State  # set on the subclass

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
        return

    def _json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802
        if self.path.rstrip("/").endswith("/models"):
            self._json(200, {"object": "list", "data": [{"id": self.state.model, "object": "model"}]})
        else:
            self._json(404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:  # noqa: N802
        st = self.state
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            self._json(400, {"error": {"message": "body is not JSON"}})
            return
        auth = self.headers.get("Authorization") or ""
        auth_ok = st.expect_key is None or auth == f"Bearer {st.expect_key}"
        messages = body.get("messages") or []
        n_assistant = sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")
        record = {
            "time": time.time(), "path": self.path, "auth_ok": auth_ok, "stream": bool(body.get("stream")),
            "has_tools": bool(body.get("tools")), "assistant_messages": n_assistant, "model": body.get("model"),
            "reasoning_effort": body.get("reasoning_effort"), "max_tokens": body.get("max_tokens"),
            "user_agent": self.headers.get("User-Agent"),
        }
        with st.lock:
            st.requests.append(record)
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._json(404, {"error": {"message": f"unknown path {self.path}"}})
            return
        if not auth_ok:
            self._json(401, {"error": {"message": "invalid API key", "type": "invalid_request_error"}})
            return
        if st.served is not None and body.get("model") not in st.served:
            self._json(404, {"error": {"message": f"The model `{body.get('model')}` does not exist",
                                       "type": "invalid_request_error", "code": "model_not_found"}})
            return
        if st.mode in ("429", "500"):
            status = int(st.mode)
            msg = "Rate limit exceeded (scripted)" if status == 429 else "Internal server error (scripted)"
            self._json(status, {"error": {"message": msg, "type": "scripted_failure"}},
                       {"retry-after-ms": str(st.retry_after_ms)})
            return
        if not body.get("tools"):
            self._answer(body, ScriptStep(text="Deploy the records service"), usage=False)
            return
        step = st.steps[n_assistant] if n_assistant < len(st.steps) else ScriptStep(text="Done.")
        if step.delay_s > 0:
            time.sleep(step.delay_s)
        self._answer(body, step, usage=n_assistant < len(st.steps), call_prefix=f"call_{n_assistant:02d}")

    def _usage(self, step: ScriptStep) -> dict[str, Any]:
        return {
            "prompt_tokens": step.prompt_tokens,
            "completion_tokens": step.completion_tokens,
            "total_tokens": step.prompt_tokens + step.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": step.cached_tokens},
            "completion_tokens_details": {"reasoning_tokens": step.reasoning_tokens},
        }

    def _answer(self, body: dict[str, Any], step: ScriptStep, *, usage: bool, call_prefix: str = "call") -> None:
        model = body.get("model") or self.state.model
        cid = f"chatcmpl-{int(time.time() * 1000)}"
        created = int(time.time())
        tool_calls = [
            {"index": i, "id": f"{call_prefix}_{i}", "type": "function",
             "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
            for i, c in enumerate(step.tool_calls)
        ]
        finish = "tool_calls" if tool_calls else "stop"
        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": step.text}
            if tool_calls:
                message["tool_calls"] = [{k: v for k, v in tc.items() if k != "index"} for tc in tool_calls]
            obj: dict[str, Any] = {"id": cid, "object": "chat.completion", "created": created, "model": model,
                                   "choices": [{"index": 0, "message": message, "finish_reason": finish}]}
            if usage:
                obj["usage"] = self._usage(step)
            self._json(200, obj)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def chunk(obj: Any) -> None:
            data = b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        base = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model}
        text = "" if tool_calls else (step.text or "")
        n = max(1, step.stream_chunks) if not tool_calls else 1
        size = -(-len(text) // n) if text else 0
        pieces = [text[i * size:(i + 1) * size] for i in range(n)] if size else [text]
        for i, piece in enumerate(pieces):
            if i:
                time.sleep(step.chunk_delay_s)
            delta: dict[str, Any] = {"content": piece} if i else {"role": "assistant", "content": piece}
            if tool_calls:
                delta["tool_calls"] = tool_calls
            chunk({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
        chunk({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        if usage and (body.get("stream_options") or {}).get("include_usage", True):
            chunk({**base, "choices": [], "usage": self._usage(step)})
        chunk(b"[DONE]")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


class ScriptedModelServer:
    """The scripted endpoint, served from a background thread (stdlib ``ThreadingHTTPServer``).

    Args:
        steps: the script (see :func:`durable_sqlite_script`).
        mode: ``"ok"``, ``"429"`` or ``"500"`` (every chat request fails with that status).
        host, port: listen address (port 0 = any free port).
        retry_after_ms: ``retry-after-ms`` header value on failures.
        expect_key: require ``Authorization: Bearer <expect_key>`` (else 401).
        model: model id reported by ``GET /v1/models``.
        served: model ids the server knows (``None``: any); a chat request for another model
            gets 404 ``model_not_found`` ("The model `x` does not exist"), as OpenAI answers.

    Attributes:
        requests: one dict per request received (path, auth_ok, stream, has_tools,
            assistant_messages, model, reasoning_effort, max_tokens, user_agent) — never the key.
    """

    def __init__(self, steps: list[ScriptStep] | None = None, *, mode: str = "ok", host: str = "127.0.0.1",
                 port: int = 0, retry_after_ms: int = 200, expect_key: str | None = None,
                 model: str = "scripted-model", served: set[str] | None = None) -> None:
        if mode not in ("ok", "429", "500"):
            raise ValueError(f"unknown mode {mode!r} (ok, 429, 500)")
        self._state = _State(list(steps or []), mode, retry_after_ms, expect_key, model,
                             frozenset(served) if served is not None else None)
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
    p.add_argument("--mode", default="ok", choices=["ok", "429", "500"])
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
