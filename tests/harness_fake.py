"""A small fake model server for recording Claude Code's and Codex's event streams (issue 27).

It speaks just enough Anthropic Messages (``POST /v1/messages``, SSE with ``event:`` lines)
and OpenAI Responses (``POST /v1/responses``, SSE ``data:`` lines) to drive one tool call and a
final answer, as ``docs/harnesses.md`` describes:

- the last input turn holds a tool result → the final text :data:`FINAL`;
- tools are offered → one shell call running :data:`PROBE_CMD`;
- otherwise a short text.

Usage per response is fixed so it can be traced: :data:`USAGE` (input 1111, cache write 222,
cache read 333, output 44, reasoning 5). Modes: ``ok``; ``500`` (every request answered HTTP
500); ``stall`` (headers and the first event, then silence). :func:`record` runs a real harness
binary on the runner against it and returns its stdout lines (the recorded stream).
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

PROBE_CMD = "echo hello > probe.txt && cat probe.txt"
FINAL = "Done: probe.txt holds hello."
USAGE = {"input": 1111, "cache_write": 222, "cache_read": 333, "output": 44, "reasoning": 5}


def _has_tool_result(body: dict[str, Any]) -> bool:
    if "messages" in body:
        last = body["messages"][-1] if body["messages"] else {}
        content = last.get("content") if isinstance(last, dict) else None
        return isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)
    items = body.get("input") or []
    return bool(items) and isinstance(items[-1], dict) and items[-1].get("type") == "function_call_output"


def _sse_anthropic(tool: bool) -> bytes:
    u = USAGE
    events = [("message_start", {"type": "message_start", "message": {
        "id": f"msg_{time.monotonic_ns()}", "type": "message", "role": "assistant", "model": "fake", "content": [],
        "stop_reason": None, "usage": {"input_tokens": u["input"], "output_tokens": 1,
                                       "cache_creation_input_tokens": u["cache_write"],
                                       "cache_read_input_tokens": u["cache_read"]}}})]
    if tool:
        events += [("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {
                       "type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}}}),
                   ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {
                       "type": "input_json_delta", "partial_json": json.dumps({"command": PROBE_CMD})}})]
    else:
        events += [("content_block_start", {"type": "content_block_start", "index": 0,
                                            "content_block": {"type": "text", "text": ""}}),
                   ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                            "delta": {"type": "text_delta", "text": FINAL}})]
    events += [("content_block_stop", {"type": "content_block_stop", "index": 0}),
               ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use" if tool else "end_turn"},
                                  "usage": {"output_tokens": u["output"]}}),
               ("message_stop", {"type": "message_stop"})]
    return b"".join(f"event: {name}\ndata: {json.dumps(obj)}\n\n".encode() for name, obj in events)


def _sse_responses(tool: bool) -> bytes:
    u = USAGE
    if tool:
        item = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "exec_command",
                "arguments": json.dumps({"cmd": PROBE_CMD}), "status": "completed"}
    else:
        item = {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": FINAL, "annotations": []}]}
    usage = {"input_tokens": u["input"], "input_tokens_details": {"cached_tokens": u["cache_read"],
                                                                  "cache_write_tokens": u["cache_write"]},
             "output_tokens": u["output"], "output_tokens_details": {"reasoning_tokens": u["reasoning"]},
             "total_tokens": u["input"] + u["output"]}
    events = [{"type": "response.output_item.done", "output_index": 0, "item": item},
              {"type": "response.completed", "response": {"id": "resp_1", "status": "completed", "output": [],
                                                          "usage": usage}}]
    return b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in events)


class FakeServer:
    """The fake server on ``127.0.0.1:<port>`` (``with FakeServer("ok") as srv``); ``requests``
    holds each request's path and JSON body."""

    def __init__(self, mode: str = "ok") -> None:
        self.mode = mode
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.stop_event = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:
                pass

            def do_HEAD(self) -> None:  # noqa: N802
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_POST(self) -> None:  # noqa: N802
                n = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(n) or b"{}")
                outer.requests.append((self.path, body))
                if outer.mode == "500":
                    data = json.dumps({"type": "error", "error": {"type": "api_error", "message": "boom"}}).encode()
                    self.send_response(500)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                tool = bool(body.get("tools") or body.get("input")) and not _has_tool_result(body)
                if "messages" in body:
                    tool = bool(body.get("tools")) and not _has_tool_result(body)
                    data = _sse_anthropic(tool)
                else:
                    data = _sse_responses(tool)
                if outer.mode == "stall":
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.end_headers()
                    self.wfile.write(data.split(b"\n\n", 1)[0] + b"\n\n")
                    self.wfile.flush()
                    outer.stop_event.wait(120)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]

    def __enter__(self) -> FakeServer:
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_event.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def record(harness: Any, binary: Path, mode: str, workdir: Path, *, timeout_s: float = 60.0,
           model: str = "probe-model", extra_env: dict[str, str] | None = None) -> tuple[int | None, list[str], str]:
    """Run ``binary`` (the real CLI) on the runner with ``harness``'s own environment, files
    and command line (plus ``extra_env``), its model endpoint the fake server; returns (exit status or ``None``
    when it was killed at ``timeout_s``, stdout lines, stderr)."""
    from aoe_tui.agents.harness import HarnessOptions
    from types import SimpleNamespace

    run_dir = workdir / "run"
    (run_dir / "home").mkdir(parents=True, exist_ok=True)
    (run_dir / "tmp").mkdir(mode=0o700, exist_ok=True)
    cwd = workdir / "cwd"
    cwd.mkdir(exist_ok=True)
    opts = HarnessOptions(base_url="http://unused/v1", api_key_env=None, max_turns=5)
    ctx = SimpleNamespace(agent=SimpleNamespace(reasoning_effort=None, model=model, id="a"))
    with FakeServer(mode) as srv:
        for path, text in harness.files(str(run_dir), srv.port, model, opts, ctx).items():
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(text)
        env = {"HOME": str(run_dir / "home"), "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8",
               "TMPDIR": str(run_dir / "tmp"), "XDG_RUNTIME_DIR": str(run_dir / "tmp"), "SHELL": "/bin/bash",
               **harness.env(str(run_dir), srv.port, model, opts, ctx), **(extra_env or {})}
        argv = [str(binary)] + harness.argv(model, opts, ctx)[1:]
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
        try:
            out, err = proc.communicate(b"Create probe.txt holding hello, then say done.\n", timeout=timeout_s)
            rc: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            out, err = proc.communicate()
            rc = None
    return rc, out.decode("utf-8", "replace").splitlines(), err.decode("utf-8", "replace")
