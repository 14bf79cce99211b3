"""The credential proxy: the only place a real model API key is used (issues 8 and 27).

The agent in the territory talks to ``http://127.0.0.1:<guest port>/v1``; an SSH reverse
tunnel (``asyncssh`` ``forward_remote_port``) carries that to this proxy on the runner,
which

1. strips every inbound credential header (``Authorization``, ``X-Api-Key``,
   ``Api-Key``, ``Proxy-Authorization``, cookies),
2. adds the key in the header of the API the path names (:func:`api_of`):
   ``Authorization: Bearer <key>`` for OpenAI chat completions (``…/chat/completions``) and
   Responses (``…/responses``), ``x-api-key: <key>`` plus ``anthropic-version`` (the guest's,
   else ``2023-06-01``) for Anthropic Messages (``…/messages``). The key is read from the
   runner's environment by the caller and held only in memory — never logged, never
   written, never sent to the guest;
3. forwards only model calls (:func:`allowed`: the three APIs' endpoints and the model list);
   anything else — an admin API that could mint a key with the injected one — is answered 403,
   and a malformed head (:func:`bad_head`: a bare CR or LF that could smuggle a second request
   carrying the key, a method other than GET/POST/DELETE) 400; asks a streamed chat call for
   its usage (:func:`force_chat_usage`), so the live limits count every stream;
   refuses the call when the entrant is past a spend limit (:class:`~aoe_tui.domain.spend.SpendCap`,
   per heat and per season): HTTP 402 with an error body in the API's own shape (OpenAI
   ``{"error": {"message", "type": "insufficient_quota", "code": "budget_exceeded"}}``,
   Anthropic ``{"type": "error", "error": {"type": "billing_error", "message"}}``) — 402
   because the SDKs of all three harnesses retry 429 but not 402 —, and records the
   refusal in :attr:`ProxyStats.refused` so the adapter ends the harness (``budget_exceeded``, §5.4);
4. forwards the request to the provider base URL (``http`` or ``https``), mapping the
   guest path ``/v1/<rest>`` to ``<upstream base>/<rest>`` (query kept), and streams the
   response back (SSE chunks are relayed as they arrive),
5. **scrubs the response** of the key (:class:`Scrubber`): every byte of the status line,
   headers (``Location`` of a redirect included) and body (streamed or not, gzip/deflate
   decoded first) that lies in a run of ≥ :data:`SCRUB_MIN` characters equal to a piece of
   the key — written plainly or with JSON escapes (``\\u0073``) — is replaced by ``*``, on
   a rolling window, so a key split across chunks is caught (only a tail that could begin a
   piece waits for the next chunk). Bodies in another content encoding are refused (502).
   Replacement keeps lengths, so JSON stays JSON;
6. counts tokens from the responses (:class:`TokenCount`) — chat: the last ``usage``
   object (final SSE chunk or JSON body); Responses: ``response.completed``'s
   ``response.usage`` (or a JSON body's ``usage``); Anthropic: ``message_start.message.usage``
   updated by each ``message_delta.usage`` (or a JSON body's ``usage``) — and prices them at
   the season's ``[prices]`` rates when given (:class:`~aoe_tui.domain.prices.PriceRates`).

It is a small HTTP/1.1 forwarder on stdlib ``asyncio`` streams: one upstream connection
per request (``Connection: close`` upstream, ``Accept-Encoding: identity``), one response
per client connection (answered with ``Connection: close``). Upstream connection failures
are answered ``502`` with a JSON error body and counted in :attr:`ProxyStats.connect_failures`;
HTTP statuses ≥ 400 are counted in :attr:`ProxyStats.error_statuses`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import re
import ssl
import time
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from aoe_tui.domain.prices import PriceRates
from aoe_tui.domain.spend import SpendCap, SpendLedger
from aoe_tui.errors import AoeError

__all__ = [
    "API_CHAT", "API_MESSAGES", "API_RESPONSES", "CredentialProxy", "ProxyError", "ProxyStats", "SCRUB_MIN",
    "Scrubber", "TokenCount", "WARMUP_PREFIX", "allowed", "api_of", "error_body",
]

#: Requests under this path (``/aoe-warmup/v1/chat/completions``, ``…/v1/responses``,
#: ``…/v1/messages``) are the in-territory harness warming up before the race clock
#: (:mod:`aoe_tui.agents.opencode`): the proxy answers them itself with a canned one-word
#: reply in the API of the path (streamed when asked), never forwards them, never counts them
#: in :class:`ProxyStats`, never checks limits and never uses the key.
WARMUP_PREFIX = "/aoe-warmup"

#: The three APIs (see :func:`api_of`).
API_CHAT, API_RESPONSES, API_MESSAGES = "chat", "responses", "messages"

#: Shortest piece of a key that is scrubbed (characters): any run of this many characters
#: of the key, wherever it appears in a response, is masked.
SCRUB_MIN = 8

_DROP_REQUEST = {
    "authorization", "x-api-key", "api-key", "proxy-authorization", "cookie", "host", "connection", "keep-alive",
    "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade", "content-length", "accept-encoding",
    "expect",
}
_DROP_RESPONSE = {"connection", "keep-alive", "transfer-encoding", "content-length", "set-cookie", "trailer",
                  "content-encoding"}
_MAX_HEADER = 64 * 1024
_MAX_BODY = 64 * 1024 * 1024
_ANTHROPIC_VERSION = "2023-06-01"


class ProxyError(AoeError):
    """The proxy was misconfigured (bad upstream URL) or could not listen."""


def api_of(path: str) -> str:
    """The API a request path speaks: :data:`API_MESSAGES` for ``…/messages``,
    :data:`API_RESPONSES` for ``…/responses`` (and ``…/responses/<id>…``), else :data:`API_CHAT`
    (``…/chat/completions`` and anything else OpenAI-shaped). The query is ignored."""
    p = path.split("?", 1)[0].rstrip("/")
    if p.endswith("/messages"):
        return API_MESSAGES
    if p.endswith("/responses") or "/responses/" in p:
        return API_RESPONSES
    return API_CHAT


#: What the proxy forwards (method, path suffix after the base path): the model calls of the three
#: APIs and the model list, nothing else. Anything else — a provider's admin or billing API, which
#: could mint a new key with the injected one — is answered 403 without reaching the provider.
_ALLOWED = re.compile(
    r"^(?:POST /(?:chat/completions|responses|messages(?:/count_tokens)?)"
    r"|GET /(?:models(?:/[^?/]+)?|responses/[^?/]+)"
    r"|DELETE /responses/[^?/]+)/?(?:\?.*)?$")
#: a request target the proxy reads at all: printable ASCII, no space (RFC 7230 request-target)
_TARGET = re.compile(r"^/[!-~]*$")
#: a header name (RFC 7230 token)
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
#: a header value: visible characters, spaces and tabs only (no CR, LF or other controls)
_VALUE = re.compile(r"^[\t\x20-\x7e\x80-\xff]*$")


def allowed(method: str, path: str, prefix: str = "/v1") -> bool:
    """True when the proxy forwards ``method path`` (see :data:`_ALLOWED`): right after the
    guest ``prefix``, ``POST`` to ``chat/completions``, ``responses`` or
    ``messages[/count_tokens]``; ``GET`` of ``models[/<id>]`` and ``responses/<id>``;
    ``DELETE`` of ``responses/<id>``. Nothing before the endpoint (no ``/v1/threads/…/messages``)."""
    where = path.split("?", 1)[0]
    if "/.." in where or "%2" in where.lower() or "\\" in where:  # no way out of the endpoint's path
        return False
    prefix = prefix.rstrip("/")
    if prefix and not (path.startswith(prefix + "/") or path.startswith(prefix + "?")):
        return False
    return bool(_ALLOWED.match(f"{method.upper()} {path[len(prefix):]}"))


def bad_head(method: str, target: str, version: str, headers: list[tuple[str, str]]) -> str | None:
    """Why a request head is refused (400) before anything is forwarded, or None: a method
    other than GET/POST/DELETE, a target that is not printable ASCII without spaces, a
    version other than HTTP/1.0 or 1.1, a header name that is no token or a value holding a
    control character (a bare LF or CR in a value would smuggle a second request, carrying
    the injected key, to an upstream that ends lines at LF)."""
    if method not in ("GET", "POST", "DELETE"):
        return f"method {method[:20]!r} not forwarded"
    if not _TARGET.match(target):
        return "request target is not printable ASCII"
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        return "not HTTP/1.x"
    for k, v in headers:
        if not _TOKEN.match(k) or not _VALUE.match(v):
            return "a header name or value holds a control character"
    return None


def force_chat_usage(body: bytes) -> bytes:
    """A streamed chat-completions request body with ``stream_options.include_usage`` true
    (OpenAI sends a stream's usage only when asked, and the live limits count it); any other
    body (not JSON, not streamed) unchanged."""
    try:
        req = json.loads(body or b"{}")
    except ValueError:
        return body
    if not isinstance(req, dict) or req.get("stream") is not True:
        return body
    opts = req.get("stream_options") if isinstance(req.get("stream_options"), dict) else {}
    if opts.get("include_usage") is True:
        return body
    req["stream_options"] = {**opts, "include_usage": True}
    return json.dumps(req, separators=(",", ":")).encode()


def error_body(api: str, message: str, *, kind: str = "aoe_proxy_error", code: str | None = None) -> bytes:
    """A JSON error body in ``api``'s own shape (what the harness's SDK prints): OpenAI
    ``{"error": {"message", "type", "code"}}``; Anthropic ``{"type": "error", "error": {"type", "message"}}``."""
    if api == API_MESSAGES:
        return json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()
    return json.dumps({"error": {"message": message, "type": kind, "param": None, "code": code}}).encode()


def _num(d: Any, key: str) -> int:
    v = d.get(key) if isinstance(d, dict) else None
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 else 0


@dataclass
class TokenCount:
    """One response's usage in one convention (tokens): ``input`` includes the cache reads and
    writes, ``output`` includes the reasoning; ``cost_usd`` is a provider's own figure (OpenRouter's
    ``usage.cost``), else 0."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    reasoning: int = 0
    cost_usd: float = 0.0

    @classmethod
    def of(cls, api: str, usage: dict[str, Any]) -> TokenCount:
        """Read a ``usage`` object of ``api`` (missing or non-integer fields count 0):

        - chat: ``prompt_tokens`` (cached included), ``completion_tokens`` (reasoning included),
          ``prompt_tokens_details.{cached_tokens, cache_write_tokens}``, ``completion_tokens_details.reasoning_tokens``;
        - Responses: ``input_tokens`` (cached included), ``output_tokens`` (reasoning included),
          ``input_tokens_details.{cached_tokens, cache_write_tokens}``, ``output_tokens_details.reasoning_tokens``;
        - Anthropic: ``input_tokens`` (uncached only) + ``cache_creation_input_tokens`` + ``cache_read_input_tokens``, ``output_tokens``.
        """
        cost = usage.get("cost")
        cost_usd = float(cost) if isinstance(cost, (int, float)) and not isinstance(cost, bool) and cost > 0 else 0.0
        if api == API_MESSAGES:
            w, r = _num(usage, "cache_creation_input_tokens"), _num(usage, "cache_read_input_tokens")
            return cls(_num(usage, "input_tokens") + w + r, _num(usage, "output_tokens"), r, w, 0, cost_usd)
        if api == API_RESPONSES:
            det, odet = usage.get("input_tokens_details"), usage.get("output_tokens_details")
            return cls(_num(usage, "input_tokens"), _num(usage, "output_tokens"), _num(det, "cached_tokens"),
                       _num(det, "cache_write_tokens"), _num(odet, "reasoning_tokens"), cost_usd)
        det, odet = usage.get("prompt_tokens_details"), usage.get("completion_tokens_details")
        return cls(_num(usage, "prompt_tokens"), _num(usage, "completion_tokens"), _num(det, "cached_tokens"),
                   _num(det, "cache_write_tokens"), _num(odet, "reasoning_tokens"), cost_usd)


@dataclass
class ProxyStats:
    """What the proxy saw (cumulative since start).

    Attributes:
        requests: requests forwarded (or answered 502); refused ones are not counted.
        responses_with_usage: responses that carried usage.
        prompt_tokens, completion_tokens: input tokens (cache reads and writes included) and
            output tokens (reasoning included), summed over the three APIs (:class:`TokenCount`).
        cached_tokens, cache_write_tokens, reasoning_tokens: the sub-counts (tokens).
        cost_usd: sum of ``usage.cost`` when the provider reports one (OpenRouter does), else 0.
        cost_microusd: cost at the season's ``[prices]`` rates (µUSD; each response priced
            and rounded on its own), or ``round(cost_usd × 10⁶)`` without rates.
        by_api: API (:data:`API_CHAT`…) → responses with usage.
        connect_failures: upstream connections that failed (answered 502).
        error_statuses: HTTP status → count, for upstream statuses ≥ 400.
        last_error: one line describing the last upstream failure (no credentials in it).
        refused: the first spend-limit refusal (one line, e.g. ``budget exceeded: spent 2150 µUSD
            of 2000 µUSD``) or ``None``; the adapter ends the harness when it is set.
        refusals: model calls refused for a spend limit.
        scrubbed: bytes of responses masked because they matched a piece of the key.
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
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    cost_usd: float = 0.0
    cost_microusd: int = 0
    by_api: dict[str, int] = field(default_factory=dict)
    connect_failures: int = 0
    error_statuses: dict[int, int] = field(default_factory=dict)
    last_error: str | None = None
    refused: str | None = None
    refusals: int = 0
    scrubbed: int = 0
    last_activity: float | None = None
    first_request_at: float | None = None

    def touch(self) -> None:
        """Record model traffic now (see :attr:`last_activity`)."""
        self.last_activity = time.monotonic()

    def add_usage(self, usage: dict[str, Any], api: str = API_CHAT, rates: PriceRates | None = None) -> int:
        """Add one ``usage`` object of ``api`` (see :meth:`TokenCount.of`); returns its cost (µUSD)."""
        return self.add_count(TokenCount.of(api, usage), api, rates)

    def add_count(self, t: TokenCount, api: str = API_CHAT, rates: PriceRates | None = None) -> int:
        """Add one response's :class:`TokenCount`; returns its cost (µUSD, see :attr:`cost_microusd`)."""
        self.responses_with_usage += 1
        self.by_api[api] = self.by_api.get(api, 0) + 1
        self.prompt_tokens += t.input
        self.completion_tokens += t.output
        self.cached_tokens += t.cache_read
        self.cache_write_tokens += t.cache_write
        self.reasoning_tokens += t.reasoning
        self.cost_usd += t.cost_usd
        if rates is not None:
            cost = rates.cost(max(0, t.input - t.cache_read - t.cache_write), t.output, t.cache_read, t.cache_write)
        else:
            cost = int(round(t.cost_usd * 1e6))
        self.cost_microusd += cost
        return cost

    def ledger(self) -> SpendLedger:
        """This proxy's spend so far (the per-heat ledger)."""
        return SpendLedger(self.cost_microusd, self.prompt_tokens + self.completion_tokens, self.requests)


# ---------------------------------------------------------------------------- scrubbing


#: A JSON escape that stands for one printable ASCII character (``\\u0073``, ``\\/``), behind up to 8
#: backslashes (an escape inside a JSON string inside a JSON string, as in a tool call's arguments).
_ESC = re.compile(rb"\\{1,8}(?:u(00[2-7][0-9a-fA-F])|(/))")
#: The start of such an escape cut off at the end of a chunk.
_ESC_TAIL = re.compile(rb"\\{1,8}(?:u[0-9a-fA-F]{0,3})?\Z")


def _trie_pattern(words: Iterable[bytes]) -> bytes:
    """A regex matching any of ``words``, written as a trie (``ab(?:c|d)`` for ``abc``, ``abd``):
    the engine then follows one branch per byte instead of trying every word at every offset
    (4-5x faster than a flat alternation of the ~300 pieces of one key's forms)."""
    trie: dict[int | None, dict] = {}
    for w in words:
        node = trie
        for c in w:
            node = node.setdefault(c, {})
        node[None] = {}

    def build(node: dict[int | None, dict]) -> bytes:
        alts = [re.escape(bytes([c])) + build(child) for c, child in sorted((k, v) for k, v in node.items() if k is not None)]
        if not alts:
            return b""
        if len(alts) == 1 and None not in node:
            return alts[0]
        return b"(?:" + b"|".join(alts) + b")" + (b"?" if None in node else b"")

    return build(trie)


def secret_forms(secret: str) -> set[str]:
    """The forms of ``secret`` a reply may carry it in, each scrubbed like the secret itself:
    as it is, JSON-escaped, fully percent-encoded (upper- and lower-case hex: a redirect's
    query), and base64 (standard and URL-safe, at each of the three byte alignments, the
    characters that depend on the neighbouring bytes trimmed)."""
    forms = {secret, json.dumps(secret)[1:-1]}
    raw = secret.encode()
    forms.add("".join(f"%{c:02X}" for c in raw))
    forms.add("".join(f"%{c:02x}" for c in raw))
    for shift in range(3):
        enc = base64.b64encode(b"\0" * shift + raw).decode().rstrip("=")
        # the first ceil(4*shift/3) characters mix in the padding bytes, the last may mix the next byte
        core = enc[(4 * shift + 2) // 3: len(enc) - 1]
        forms.add(core)
        forms.add(core.replace("+", "-").replace("/", "_"))
    return {f for f in forms if f}


class Scrubber:
    """Masks every piece (≥ :data:`SCRUB_MIN` characters) of some secrets in a byte stream.

    Each byte lying inside an occurrence of any :data:`SCRUB_MIN`-byte run of a secret (or
    of its JSON-escaped form) is replaced by ``*``; longer pieces are covered by their runs.
    Runs are also looked for in the text with its JSON escapes of printable ASCII characters
    decoded (``\\u0073k-…``, ``\\/``, at any nesting depth up to 8 backslashes): the escapes
    that spell a piece are masked whole. :meth:`feed` returns what is safe to pass on and
    holds back only a tail that could begin a piece the next chunk completes (the longest
    tail, at most ``SCRUB_MIN - 1`` characters once decoded, that is the start of a piece,
    plus an escape cut in two); :meth:`finish` returns the rest. The output has exactly the
    input's length, whatever the split, and equals :meth:`scrub` of the whole. Secrets shorter
    than :data:`SCRUB_MIN` are not scrubbed (no real key is that short; masking ``x`` would
    wreck every answer).
    """

    def __init__(self, secrets: Iterable[str | None]) -> None:
        grams: set[bytes] = set()
        for s in secrets:
            for form in secret_forms(s) if s and len(s) >= SCRUB_MIN else ():
                b = form.encode()
                grams.update(b[i:i + SCRUB_MIN] for i in range(len(b) - SCRUB_MIN + 1))
        self._re = re.compile(b"(?=(" + _trie_pattern(grams) + b"))") if grams else None
        self._prefixes = {g[:k] for g in grams for k in range(1, SCRUB_MIN)}
        self._held = b""
        self._held_mask: list[bool] = []
        self.masked = 0

    @property
    def active(self) -> bool:
        """True when there is something to scrub."""
        return self._re is not None

    def scrub(self, data: bytes) -> bytes:
        """Mask a whole piece of data at once (a header block, a complete body)."""
        if self._re is None:
            return data
        mask = [False] * len(data)
        self._mark(data, mask, final=True)
        return self._masked(data, mask)

    @staticmethod
    def _view(data: bytes) -> tuple[bytes, list[int] | None]:
        """``data`` with its escapes decoded, and the offset in ``data`` of each view byte (plus
        the end); ``None`` when nothing was decoded (the view is ``data``)."""
        parts: list[bytes] = []
        offs: list[int] = []
        last = 0
        for m in _ESC.finditer(data):
            parts.append(data[last:m.start()])
            offs.extend(range(last, m.start()))
            parts.append(bytes([int(m.group(1), 16)]) if m.group(1) else b"/")
            offs.append(m.start())
            last = m.end()
        if not parts:
            return data, None
        parts.append(data[last:])
        offs.extend(range(last, len(data) + 1))
        return b"".join(parts), offs

    def _mark(self, buf: bytes, mask: list[bool], *, final: bool) -> int:
        """Mark the bytes of ``buf`` to mask; returns where the tail to hold back starts."""
        assert self._re is not None
        for m in self._re.finditer(buf):
            mask[m.start():m.start() + SCRUB_MIN] = [True] * SCRUB_MIN
        tail = len(buf)
        if not final and (cut := _ESC_TAIL.search(buf)) is not None:
            tail = cut.start()
        view, offs = self._view(buf[:tail])
        if offs is not None:
            for m in self._re.finditer(view):
                start, end = offs[m.start()], offs[m.start() + SCRUB_MIN]
                mask[start:end] = [True] * (end - start)
        if final:
            return len(buf)
        k = next((k for k in range(min(SCRUB_MIN - 1, len(view)), 0, -1) if view[-k:] in self._prefixes), 0)
        if not k:
            return tail
        return len(view) - k if offs is None else offs[len(view) - k]

    def _masked(self, data: bytes, mask: list[bool]) -> bytes:
        n = sum(mask)
        if not n:
            return data
        self.masked += n
        return bytes(42 if k else c for c, k in zip(data, mask))

    def feed(self, data: bytes) -> bytes:
        """Add stream bytes; returns the bytes now safe to pass on (masked)."""
        if self._re is None:
            return data
        buf = self._held + data
        mask = self._held_mask + [False] * len(data)
        cut = self._mark(buf, mask, final=False)
        self._held, self._held_mask = buf[cut:], mask[cut:]
        return self._masked(buf[:cut], mask[:cut])

    def finish(self) -> bytes:
        """The held-back bytes (masked) at the end of the stream."""
        rest, mask = self._held, self._held_mask
        self._held, self._held_mask = b"", []
        if rest and self._re is not None:
            self._mark(rest, mask, final=True)
        return self._masked(rest, mask)


# ---------------------------------------------------------------------------- warm-up


def _warmup_reply(api: str, stream: bool) -> tuple[bytes, str]:
    """The canned answer ``ready`` in ``api``'s shape (no usage): (body, content type)."""
    now = int(time.time())

    def sse(events: list[tuple[str | None, Any]]) -> bytes:
        out = b""
        for name, obj in events:
            if name:
                out += f"event: {name}\n".encode()
            out += b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"
        return out

    if api == API_MESSAGES:
        msg = {"id": "msg_aoe_warmup", "type": "message", "role": "assistant", "model": "aoe-warmup",
               "content": [{"type": "text", "text": "ready"}], "stop_reason": "end_turn", "stop_sequence": None,
               "usage": {"input_tokens": 0, "output_tokens": 0}}
        if not stream:
            return json.dumps(msg).encode(), "application/json"
        return sse([
            ("message_start", {"type": "message_start", "message": {**msg, "content": [], "stop_reason": None}}),
            ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "ready"}}),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 0}}),
            ("message_stop", {"type": "message_stop"}),
        ]), "text/event-stream"
    if api == API_RESPONSES:
        item = {"type": "message", "id": "msg_aoe_warmup", "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": "ready", "annotations": []}]}
        resp = {"id": "resp_aoe_warmup", "object": "response", "created_at": now, "status": "completed",
                "model": "aoe-warmup", "output": [item]}
        if not stream:
            return json.dumps(resp).encode(), "application/json"
        return sse([
            ("response.output_item.done", {"type": "response.output_item.done", "output_index": 0, "item": item}),
            ("response.completed", {"type": "response.completed", "response": resp}),
        ]), "text/event-stream"
    base = {"id": "aoe-warmup", "object": "chat.completion", "created": now, "model": "aoe-warmup"}
    if not stream:
        return json.dumps({**base, "choices": [{"index": 0, "message": {"role": "assistant", "content": "ready"},
                                                "finish_reason": "stop"}]}).encode(), "application/json"
    return sse([
        (None, {**base, "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": {"role": "assistant", "content": "ready"}, "finish_reason": None}]}),
        (None, {**base, "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
        (None, b"[DONE]"),
    ]), "text/event-stream"


async def _send(writer: asyncio.StreamWriter, status: int, reason: str, body: bytes,
                ctype: str = "application/json") -> None:
    writer.write(f"HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                 "Connection: close\r\n\r\n".encode() + body)
    with contextlib.suppress(ConnectionError):
        await writer.drain()


# ---------------------------------------------------------------------------- usage


class _UsageSniffer:
    """Finds the usage of one response of ``api`` in an SSE stream or a JSON body (fed decoded bytes)."""

    def __init__(self, sse: bool, api: str = API_CHAT) -> None:
        self.sse = sse
        self.api = api
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
            if isinstance(obj, dict):
                self._event(obj)

    def _event(self, obj: dict[str, Any]) -> None:
        kind = obj.get("type")
        if self.api == API_RESPONSES:
            resp = obj.get("response")
            if kind in ("response.completed", "response.incomplete", "response.failed", "response.done") \
                    and isinstance(resp, dict) and isinstance(resp.get("usage"), dict):
                self.usage = resp["usage"]
        elif self.api == API_MESSAGES:
            if kind == "message_start" and isinstance(obj.get("message"), dict) \
                    and isinstance(obj["message"].get("usage"), dict):
                self.usage = dict(obj["message"]["usage"])
            elif kind == "message_delta" and isinstance(obj.get("usage"), dict):
                # message_delta's counts are cumulative: they replace message_start's
                self.usage = {**(self.usage or {}), **{k: v for k, v in obj["usage"].items() if v is not None}}
        elif isinstance(obj.get("usage"), dict):
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


# ---------------------------------------------------------------------------- the proxy


class CredentialProxy:
    """A local HTTP forwarder that injects the API key (see the module docstring).

    Args:
        upstream_base_url: the provider's base URL, e.g. ``https://opencode.ai/zen/go/v1`` or
            ``https://api.anthropic.com/v1`` (must be ``http://`` or ``https://``).
        api_key: the real key, or ``None`` to forward without one (scripted tests may do so).
            Never logged or stored.
        listen_host: where to listen (default ``127.0.0.1``; the SSH tunnel connects here).
        connect_timeout_s: upstream connect timeout (s).
        guest_prefix: the path prefix the guest uses (``/v1``), replaced by the upstream base path.
        rates: the model's ``[prices]`` rates (µUSD per million tokens), or ``None`` (provider cost).
        heat_cap: this entrant's limit for this heat (its ``budget.max_cost_microusd``…), or ``None``.
        season: ``(ledger, cap)``: this entrant's season-wide ledger (shared across heats; this
            proxy adds to it) and its cap, or ``None``.
        scrub: further secrets to scrub from responses besides ``api_key`` (other entrants' keys).

    Raises:
        ProxyError: the upstream URL is not http(s) with a host.
    """

    def __init__(self, upstream_base_url: str, api_key: str | None, *, listen_host: str = "127.0.0.1",
                 connect_timeout_s: float = 30.0, guest_prefix: str = "/v1", rates: PriceRates | None = None,
                 heat_cap: SpendCap | None = None, season: tuple[SpendLedger, SpendCap] | None = None,
                 scrub: Iterable[str | None] = ()) -> None:
        u = urlsplit(upstream_base_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ProxyError(f"model base URL {upstream_base_url!r} is not an http(s) URL")
        self._scheme = u.scheme
        self._host = u.hostname
        self._port = u.port or (443 if u.scheme == "https" else 80)
        self._base_path = u.path.rstrip("/")
        self._hostport = u.netloc.rsplit("@", 1)[-1]
        self.__key = api_key
        self.__secrets = tuple(s for s in (api_key, *scrub) if s)
        self.listen_host = listen_host
        self.connect_timeout_s = connect_timeout_s
        self.guest_prefix = guest_prefix.rstrip("/")
        self.rates = rates
        self.heat_cap = heat_cap if heat_cap is not None and not heat_cap.is_empty() else None
        self.season = season
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

    def limit_crossed(self) -> str | None:
        """The first spend limit this entrant is past (one line, see :meth:`SpendCap.crossed`), or ``None``."""
        if self.heat_cap is not None and (why := self.heat_cap.crossed(self.stats.ledger())):
            return why
        if self.season is not None and (why := self.season[1].crossed(self.season[0])):
            return why
        return None

    # ---------------------------------------------------------------- request handling

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._conns.add(task)
        try:
            await self._handle(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError, zlib.error):
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
        lines = head[:-4].decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        headers: list[tuple[str, str]] = []
        malformed = len(parts) != 3
        for line in lines[1:]:
            k, sep, v = line.partition(":")
            if not sep:
                malformed = True
                continue
            headers.append((k, v.strip(" \t")))
        method, target, version = parts if len(parts) == 3 else ("", "", "")
        why = "malformed request head" if malformed else bad_head(method, target, version, headers)
        if why is not None:
            await _send(writer, 400, "Bad Request", error_body(api_of(target), f"the credential proxy refused it: {why}"))
            return
        hmap = {k.lower(): v for k, v in headers}
        body = b""
        if "chunked" in hmap.get("transfer-encoding", "").lower():
            body = await _read_chunked(reader, None)
        elif hmap.get("content-length"):
            n = int(hmap["content-length"])
            if n > _MAX_BODY:
                raise ValueError("body too large")
            body = await reader.readexactly(n)
        api = api_of(target)
        if target.startswith(WARMUP_PREFIX + "/"):  # the harness warming up before the clock: never upstream
            try:
                stream = bool(json.loads(body or b"{}").get("stream"))
            except (ValueError, AttributeError):
                stream = False
            data, ctype = _warmup_reply(api, stream)
            await _send(writer, 200, "OK", data, ctype)
            return
        if not allowed(method, target, self.guest_prefix):
            await _send(writer, 403, "Forbidden", error_body(
                api, f"the credential proxy forwards only model calls, not {method} {target.split('?', 1)[0]}",
                kind="permission_error" if api == API_MESSAGES else "aoe_proxy_error"))
            return
        self.stats.touch()
        if (why := self.limit_crossed()) is not None:
            self.stats.refusals += 1
            if self.stats.refused is None:
                self.stats.refused = why
            kind = "billing_error" if api == API_MESSAGES else "insufficient_quota"
            await _send(writer, 402, "Payment Required", error_body(api, why, kind=kind, code="budget_exceeded"))
            return
        path = target
        if path.startswith(self.guest_prefix + "/") or path == self.guest_prefix:
            path = path[len(self.guest_prefix):]
        up_path = (self._base_path + path) or "/"
        out = [f"{method} {up_path} HTTP/1.1", f"Host: {self._hostport}"]
        out += [f"{k}: {v}" for k, v in headers if k.lower() not in _DROP_REQUEST]
        if self.__key:
            if api == API_MESSAGES:
                out.append(f"x-api-key: {self.__key}")
            else:
                out.append(f"Authorization: Bearer {self.__key}")
        if api == API_MESSAGES and "anthropic-version" not in hmap:
            out.append(f"anthropic-version: {_ANTHROPIC_VERSION}")
        if api == API_CHAT and method == "POST":
            body = force_chat_usage(body)
        out += ["Accept-Encoding: identity", "Connection: close", f"Content-Length: {len(body)}", "", ""]
        self.stats.requests += 1
        if self.season is not None:
            self.season[0].add(requests=1)
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
            await _send(writer, 502, "Bad Gateway", error_body(api, self.stats.last_error))
            return
        try:
            up_w.write("\r\n".join(out).encode("latin-1") + body)
            await up_w.drain()
            await self._relay(up_r, writer, api)
        finally:
            up_w.close()
            with contextlib.suppress(Exception):
                await up_w.wait_closed()

    async def _relay(self, up: asyncio.StreamReader, writer: asyncio.StreamWriter, api: str) -> None:
        head = await up.readuntil(b"\r\n\r\n")
        while re.match(rb"HTTP/1\.[01] 1\d\d ", head):  # 100 Continue, 103 Early Hints: the response follows
            head = await up.readuntil(b"\r\n\r\n")
        if len(head) > _MAX_HEADER:
            raise ValueError("header too large")
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
        encoding = hmap.get("content-encoding", "identity").strip().lower()
        if encoding in ("gzip", "x-gzip", "deflate"):
            inflate: Any = zlib.decompressobj(47)  # gzip or zlib header, auto-detected
        elif encoding in ("identity", ""):
            inflate = None
        else:
            self.stats.last_error = f"model endpoint sent a body in content encoding {encoding!r}, which the proxy cannot check"
            await _send(writer, 502, "Bad Gateway", error_body(api, self.stats.last_error))
            return
        chunked = "chunked" in hmap.get("transfer-encoding", "").lower()
        length = int(hmap["content-length"]) if hmap.get("content-length", "").isdigit() and not chunked else None
        scrub = Scrubber(self.__secrets)
        out = [status_line] + [f"{k}: {v}" for k, v in headers if k.lower() not in _DROP_RESPONSE]
        if length is not None and inflate is None:
            out.append(f"Content-Length: {length}")  # scrubbing keeps lengths
        out += ["Connection: close", "", ""]
        head_out = scrub.scrub("\r\n".join(out).encode("latin-1"))
        writer.write(head_out)
        await writer.drain()
        sniffer = _UsageSniffer("event-stream" in hmap.get("content-type", ""), api)

        async def emit(data: bytes) -> None:
            self.stats.touch()
            if inflate is not None:
                data = inflate.decompress(data)
            sniffer.feed(data)
            safe = scrub.feed(data)
            if safe:
                writer.write(safe)
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
        if inflate is not None:
            tail = inflate.flush()
            sniffer.feed(tail)
            writer.write(scrub.feed(tail))
        writer.write(scrub.finish())
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        self.stats.scrubbed += scrub.masked
        usage = sniffer.finish()
        if usage is not None and status < 400:
            t = TokenCount.of(api, usage)
            cost = self.stats.add_count(t, api, self.rates)
            if self.season is not None:
                self.season[0].add(cost_microusd=cost, tokens=t.input + t.output)


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
