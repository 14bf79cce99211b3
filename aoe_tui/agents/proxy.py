"""The credential proxy: the only place a real model API key is used (issue 8).

The agent in the territory talks to ``http://127.0.0.1:<guest port>/v1``; an SSH reverse
tunnel (``asyncssh`` ``forward_remote_port``) carries that to this proxy on the runner,
which

1. strips every inbound credential header (``Authorization``, ``X-Api-Key``,
   ``Api-Key``, ``Proxy-Authorization``, cookies),
2. adds ``Authorization: Bearer <key>`` (the key is read from the runner's environment by
   the caller and held only in memory — never logged, never written, never sent to the
   guest),
3. forwards the request to the provider base URL (``http`` or ``https``), mapping the
   guest path ``/v1/<rest>`` to ``<upstream base>/<rest>``, and streams the response back
   (SSE chunks are relayed as they arrive),
4. counts tokens from the responses (the final SSE ``usage`` chunk, or a JSON body's
   ``usage``): a second usage source besides opencode's own ``step_finish`` events.

It is a small HTTP/1.1 forwarder on stdlib ``asyncio`` streams: one upstream connection
per request (``Connection: close`` upstream, ``Accept-Encoding: identity`` so bodies can
be read), one response per client connection (answered with ``Connection: close``).
Upstream connection failures are answered ``502`` with a JSON error body and counted in
:attr:`ProxyStats.connect_failures`; HTTP statuses ≥ 400 are counted in
:attr:`ProxyStats.error_statuses`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from aoe_tui.errors import AoeError

__all__ = ["CredentialProxy", "ProxyError", "ProxyStats", "WARMUP_PREFIX"]

#: Requests under this path (``/aoe-warmup/v1/chat/completions``) are the in-territory harness
#: warming up before the race clock (:mod:`aoe_tui.agents.opencode`): the proxy answers them
#: itself with a canned one-word reply (streamed when asked), never forwards them, never
#: counts them in :class:`ProxyStats` and never uses the key.
WARMUP_PREFIX = "/aoe-warmup"

_DROP_REQUEST = {
    "authorization", "x-api-key", "api-key", "proxy-authorization", "cookie", "host", "connection", "keep-alive",
    "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade", "content-length", "accept-encoding",
}
_DROP_RESPONSE = {"connection", "keep-alive", "transfer-encoding", "content-length", "set-cookie", "trailer"}
_MAX_HEADER = 64 * 1024
_MAX_BODY = 64 * 1024 * 1024


class ProxyError(AoeError):
    """The proxy was misconfigured (bad upstream URL) or could not listen."""


@dataclass
class ProxyStats:
    """What the proxy saw (cumulative since start).

    Attributes:
        requests: requests forwarded (or answered 502).
        responses_with_usage: responses that carried a ``usage`` object.
        prompt_tokens, completion_tokens: sums of ``usage.prompt_tokens`` /
            ``usage.completion_tokens`` (OpenAI semantics: cached and reasoning included).
        cached_tokens, reasoning_tokens: sums of the ``*_details`` sub-counts.
        cost_usd: sum of ``usage.cost`` when the provider reports one (OpenRouter does), else 0.
        connect_failures: upstream connections that failed (answered 502).
        error_statuses: HTTP status → count, for upstream statuses ≥ 400.
        last_error: one line describing the last upstream failure (no credentials in it).
        last_activity: ``time.monotonic()`` (s) of the last model traffic: a request received
            or response bytes relayed back (``None`` before any). The opencode watchdog counts
            it as liveness, so a model streaming a long answer is not taken for a hang.
        first_request_at: ``time.monotonic()`` (s) when the first request arrived (``None``
            before any): the agent's first model request, for ``first_model_request_ms``.
    """

    requests: int = 0
    responses_with_usage: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    cost_usd: float = 0.0
    connect_failures: int = 0
    error_statuses: dict[int, int] = field(default_factory=dict)
    last_error: str | None = None
    last_activity: float | None = None
    first_request_at: float | None = None

    def touch(self) -> None:
        """Record model traffic now (see :attr:`last_activity`)."""
        self.last_activity = time.monotonic()

    def add_usage(self, usage: dict[str, Any]) -> None:
        """Add one OpenAI-style ``usage`` object (missing or non-integer fields count 0)."""

        def num(d: Any, key: str) -> int:
            v = d.get(key) if isinstance(d, dict) else None
            return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 else 0

        self.responses_with_usage += 1
        self.prompt_tokens += num(usage, "prompt_tokens")
        self.completion_tokens += num(usage, "completion_tokens")
        self.cached_tokens += num(usage.get("prompt_tokens_details"), "cached_tokens")
        self.reasoning_tokens += num(usage.get("completion_tokens_details"), "reasoning_tokens")
        cost = usage.get("cost")
        if isinstance(cost, (int, float)) and not isinstance(cost, bool) and cost > 0:
            self.cost_usd += float(cost)


async def _send_warmup(writer: asyncio.StreamWriter, body: bytes) -> None:
    """The canned answer to a warm-up request (:data:`WARMUP_PREFIX`): ``ready``, finish
    ``stop``, no usage; an SSE stream when the request asked for one."""
    try:
        stream = bool(json.loads(body or b"{}").get("stream"))
    except (ValueError, AttributeError):
        stream = False
    base = {"id": "aoe-warmup", "object": "chat.completion", "created": int(time.time()), "model": "aoe-warmup"}
    if stream:
        chunks = [
            {**base, "object": "chat.completion.chunk",
             "choices": [{"index": 0, "delta": {"role": "assistant", "content": "ready"}, "finish_reason": None}]},
            {**base, "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        ]
        data = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
        ctype = "text/event-stream"
    else:
        data = json.dumps({**base, "choices": [{"index": 0, "message": {"role": "assistant", "content": "ready"},
                                                "finish_reason": "stop"}]}).encode()
        ctype = "application/json"
    writer.write(f"HTTP/1.1 200 OK\r\nContent-Type: {ctype}\r\nContent-Length: {len(data)}\r\n"
                 "Connection: close\r\n\r\n".encode() + data)
    await writer.drain()


class _UsageSniffer:
    """Finds the last ``usage`` object in an SSE stream or a JSON body (fed decoded bytes)."""

    def __init__(self, sse: bool) -> None:
        self.sse = sse
        self.buf = b""
        self.usage: dict[str, Any] | None = None

    def feed(self, data: bytes) -> None:
        self.buf += data
        if not self.sse:
            if len(self.buf) > _MAX_BODY:
                self.buf = b""
            return
        *lines, self.buf = self.buf.split(b"\n")
        for line in lines:
            self._line(line.strip())

    def _line(self, line: bytes) -> None:
        if not line.startswith(b"data:"):
            return
        payload = line[5:].strip()
        if not payload or payload == b"[DONE]" or b'"usage"' not in payload:
            return
        with contextlib.suppress(ValueError):
            obj = json.loads(payload)
            if isinstance(obj, dict) and isinstance(obj.get("usage"), dict):
                self.usage = obj["usage"]

    def finish(self) -> dict[str, Any] | None:
        if self.sse:
            self._line(self.buf.strip())
        else:
            with contextlib.suppress(ValueError):
                obj = json.loads(self.buf or b"null")
                if isinstance(obj, dict) and isinstance(obj.get("usage"), dict):
                    self.usage = obj["usage"]
        self.buf = b""
        return self.usage


class CredentialProxy:
    """A local HTTP forwarder that injects the API key (see the module docstring).

    Args:
        upstream_base_url: the provider's OpenAI-compatible base URL, e.g.
            ``https://opencode.ai/zen/go/v1`` (must be ``http://`` or ``https://``).
        api_key: the real key, or ``None`` to forward without one (scripted tests may do so).
            Never logged or stored.
        listen_host: where to listen (default ``127.0.0.1``; the SSH tunnel connects here).
        connect_timeout_s: upstream connect timeout (s).
        guest_prefix: the path prefix the guest uses (``/v1``), replaced by the upstream base path.

    Raises:
        ProxyError: the upstream URL is not http(s) with a host.
    """

    def __init__(self, upstream_base_url: str, api_key: str | None, *, listen_host: str = "127.0.0.1",
                 connect_timeout_s: float = 30.0, guest_prefix: str = "/v1") -> None:
        u = urlsplit(upstream_base_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ProxyError(f"model base URL {upstream_base_url!r} is not an http(s) URL")
        self._scheme = u.scheme
        self._host = u.hostname
        self._port = u.port or (443 if u.scheme == "https" else 80)
        self._base_path = u.path.rstrip("/")
        self._hostport = u.netloc.rsplit("@", 1)[-1]
        self.__key = api_key
        self.listen_host = listen_host
        self.connect_timeout_s = connect_timeout_s
        self.guest_prefix = guest_prefix.rstrip("/")
        self.stats = ProxyStats()
        self._server: asyncio.AbstractServer | None = None
        self._conns: set[asyncio.Task] = set()

    def __repr__(self) -> str:  # never show the key
        return f"CredentialProxy({self._scheme}://{self._hostport}{self._base_path}, key={'set' if self.__key else 'none'})"

    @property
    def port(self) -> int:
        """The listening port (after :meth:`start`)."""
        if self._server is None or not self._server.sockets:
            raise ProxyError("credential proxy is not started")
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> int:
        """Listen on ``listen_host`` at an ephemeral port; returns the port. Raises :class:`ProxyError`."""
        try:
            self._server = await asyncio.start_server(self._client, self.listen_host, 0)
        except OSError as exc:
            raise ProxyError(f"credential proxy cannot listen on {self.listen_host}: {exc.strerror or exc}") from None
        return self.port

    async def close(self) -> None:
        """Stop listening and drop open connections. Idempotent."""
        if self._server is not None:
            self._server.close()
            self._server = None
        for t in list(self._conns):
            t.cancel()
        if self._conns:
            await asyncio.gather(*self._conns, return_exceptions=True)

    async def __aenter__(self) -> CredentialProxy:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ---------------------------------------------------------------- request handling

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._conns.add(task)
        try:
            await self._handle(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass
        finally:
            if task is not None:
                self._conns.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        if len(head) > _MAX_HEADER:
            raise ValueError("header too large")
        lines = head.decode("latin-1").split("\r\n")
        method, target, _version = lines[0].split(" ", 2)
        headers: list[tuple[str, str]] = []
        for line in lines[1:]:
            if ":" in line:
                k, v = line.split(":", 1)
                headers.append((k.strip(), v.strip()))
        hmap = {k.lower(): v for k, v in headers}
        body = b""
        if "chunked" in hmap.get("transfer-encoding", "").lower():
            body = await _read_chunked(reader, None)
        elif hmap.get("content-length"):
            n = int(hmap["content-length"])
            if n > _MAX_BODY:
                raise ValueError("body too large")
            body = await reader.readexactly(n)
        if target.startswith(WARMUP_PREFIX + "/"):  # the harness warming up before the clock: never upstream
            await _send_warmup(writer, body)
            return
        path = target
        if path.startswith(self.guest_prefix + "/") or path == self.guest_prefix:
            path = path[len(self.guest_prefix):]
        up_path = (self._base_path + path) or "/"
        out = [f"{method} {up_path} HTTP/1.1", f"Host: {self._hostport}"]
        out += [f"{k}: {v}" for k, v in headers if k.lower() not in _DROP_REQUEST]
        if self.__key:
            out.append(f"Authorization: Bearer {self.__key}")
        out += ["Accept-Encoding: identity", "Connection: close", f"Content-Length: {len(body)}", "", ""]
        self.stats.requests += 1
        self.stats.touch()
        if self.stats.first_request_at is None:
            self.stats.first_request_at = self.stats.last_activity
        try:
            ctx = ssl.create_default_context() if self._scheme == "https" else None
            up_r, up_w = await asyncio.wait_for(
                asyncio.open_connection(self._host, self._port, ssl=ctx, server_hostname=self._host if ctx else None),
                self.connect_timeout_s,
            )
        except (OSError, asyncio.TimeoutError, ssl.SSLError) as exc:
            self.stats.connect_failures += 1
            reason = getattr(exc, "strerror", None) or type(exc).__name__
            self.stats.last_error = f"cannot connect to model endpoint {self._hostport}: {reason}"
            await _send_error(writer, 502, self.stats.last_error)
            return
        try:
            up_w.write("\r\n".join(out).encode("latin-1") + body)
            await up_w.drain()
            await self._relay(up_r, writer)
        finally:
            up_w.close()
            with contextlib.suppress(Exception):
                await up_w.wait_closed()

    async def _relay(self, up: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await up.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status_line = lines[0]
        try:
            status = int(status_line.split(" ", 2)[1])
        except (IndexError, ValueError):
            status = 502
        headers = []
        for line in lines[1:]:
            if ":" in line:
                k, v = line.split(":", 1)
                headers.append((k.strip(), v.strip()))
        hmap = {k.lower(): v for k, v in headers}
        if status >= 400:
            self.stats.error_statuses[status] = self.stats.error_statuses.get(status, 0) + 1
            self.stats.last_error = f"model endpoint answered HTTP {status}"
        chunked = "chunked" in hmap.get("transfer-encoding", "").lower()
        length = int(hmap["content-length"]) if hmap.get("content-length", "").isdigit() and not chunked else None
        out = [status_line] + [f"{k}: {v}" for k, v in headers if k.lower() not in _DROP_RESPONSE]
        if length is not None:
            out.append(f"Content-Length: {length}")
        out += ["Connection: close", "", ""]
        writer.write("\r\n".join(out).encode("latin-1"))
        await writer.drain()
        sniffer = _UsageSniffer("event-stream" in hmap.get("content-type", ""))

        async def emit(data: bytes) -> None:
            self.stats.touch()
            sniffer.feed(data)
            writer.write(data)
            await writer.drain()

        if chunked:
            await _read_chunked(up, emit)
        elif length is not None:
            remaining = length
            while remaining > 0:
                data = await up.read(min(65536, remaining))
                if not data:
                    break
                remaining -= len(data)
                await emit(data)
        else:
            while data := await up.read(65536):
                await emit(data)
        usage = sniffer.finish()
        if usage is not None and status < 400:
            self.stats.add_usage(usage)


async def _read_chunked(reader: asyncio.StreamReader, emit: Any) -> bytes:
    """Decode a chunked body; call ``await emit(data)`` per chunk, or collect and return it."""
    collected = bytearray()
    while True:
        size_line = await reader.readuntil(b"\r\n")
        size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
        if size == 0:
            # trailers until an empty line
            while (await reader.readuntil(b"\r\n")) != b"\r\n":
                pass
            break
        data = await reader.readexactly(size)
        await reader.readexactly(2)
        if emit is None:
            collected += data
            if len(collected) > _MAX_BODY:
                raise ValueError("body too large")
        else:
            await emit(data)
    return bytes(collected)


async def _send_error(writer: asyncio.StreamWriter, status: int, message: str) -> None:
    body = json.dumps({"error": {"message": message, "type": "aoe_proxy_error"}}).encode()
    reason = {502: "Bad Gateway"}.get(status, "Error")
    writer.write(
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        f"Connection: close\r\n\r\n".encode() + body
    )
    with contextlib.suppress(ConnectionError):
        await writer.drain()
