"""Issue 27, the proxy side: the credential proxy in front of the real scripted model server,
over real HTTP on localhost, for the three APIs (OpenAI chat completions, OpenAI Responses,
Anthropic Messages), streaming and not — auth header per API, usage counted and priced as
the server sent it, live spend limits (per heat and per season), and keys scrubbed from
whatever an upstream sends back (bodies split across chunks, headers, errors, redirects)."""

from __future__ import annotations

import asyncio
import gzip
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aoe_tui.agents.proxy import SCRUB_MIN, WARMUP_PREFIX, CredentialProxy, Scrubber
from aoe_tui.domain.prices import ModelPrice
from aoe_tui.domain.spend import SpendCap, SpendLedger
from aoe_tui.testing.model_server import ScriptedModelServer, ScriptStep, ToolCall, never_stop_step

KEY = "sk-live-7Qm2ZxP9aLkR4tWv8NcB3hYd6FgJ1sUe"
OTHER_KEY = "sk-ant-api03-OtherEntrantKey-0123456789abcdef"
PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "messages": "/v1/messages?beta=true"}
RATES = ModelPrice(input_per_mtok=1.0, output_per_mtok=4.0, cache_read_per_mtok=0.1, cache_write_per_mtok=1.25).rates()


def _tools(api: str) -> list[dict]:
    if api == "chat":
        return [{"type": "function", "function": {"name": "bash", "parameters": {}}},
                {"type": "function", "function": {"name": "write", "parameters": {}}}]
    if api == "responses":
        return [{"type": "function", "name": "exec_command", "parameters": {}}]
    return [{"name": "Bash", "description": "shell", "input_schema": {}}, {"name": "Write", "input_schema": {}}]


def _body(api: str, turns: int, stream: bool) -> dict:
    if api == "responses":
        items: list[dict] = [{"type": "message", "role": "developer", "content": "be brief"},
                             {"type": "message", "role": "user", "content": "go"}]
        for i in range(turns):
            items += [{"type": "function_call", "call_id": f"c{i}", "name": "exec_command", "arguments": "{}"},
                      {"type": "function_call_output", "call_id": f"c{i}", "output": "ok"}]
        return {"model": "m", "stream": stream, "input": items, "tools": _tools(api)}
    msgs: list[dict] = [{"role": "user", "content": "go"}]
    if api == "messages":
        msgs.append({"role": "system", "content": "# Environment"})  # as Claude Code sends it
    for _ in range(turns):
        msgs += [{"role": "assistant", "content": "x"}, {"role": "user", "content": "ok"}]
    return {"model": "m", "stream": stream, "messages": msgs, "tools": _tools(api), "max_tokens": 100}


async def _raw(port: int, method: str, path: str, body: dict | None = None,
               headers: dict[str, str] | None = None) -> tuple[int, bytes, bytes]:
    """One HTTP/1.1 exchange with the proxy as the guest makes it: (status, head bytes, body bytes)."""
    r, w = await asyncio.open_connection("127.0.0.1", port)
    data = json.dumps(body).encode() if body is not None else b""
    hdrs = {"Host": "127.0.0.1", "Content-Type": "application/json", "Content-Length": str(len(data)),
            "Authorization": "Bearer guest-placeholder", "x-api-key": "guest-placeholder", **(headers or {})}
    w.write(f"{method} {path} HTTP/1.1\r\n".encode() + "".join(f"{k}: {v}\r\n" for k, v in hdrs.items()).encode()
            + b"\r\n" + data)
    await w.drain()
    raw = await asyncio.wait_for(r.read(), 30)
    w.close()
    head, _, rest = raw.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), head, rest


def _no_key_piece(data: bytes, key: str = KEY) -> None:
    k = key.encode()
    pieces = {k[i:i + SCRUB_MIN] for i in range(len(k) - SCRUB_MIN + 1)}
    found = [p for p in pieces if p in data]
    assert not found, f"key pieces leaked: {found[:3]}"


def _events(api: str, body: bytes) -> list[dict]:
    out = []
    for line in body.split(b"\n"):
        if line.startswith(b"data:") and line[5:].strip() != b"[DONE]":
            out.append(json.loads(line[5:]))
    return out


STEPS = [
    ScriptStep(tool_calls=(ToolCall("bash", {"command": "echo hello > probe.txt"}),), prompt_tokens=1_000,
               completion_tokens=50, cached_tokens=200, cache_write_tokens=100, reasoning_tokens=7),
    ScriptStep(tool_calls=(ToolCall("write", {"filePath": "/opt/a.py", "content": "print(1)\n"}),),
               prompt_tokens=1_400, completion_tokens=80, cached_tokens=900, reasoning_tokens=3),
    ScriptStep(text="done", prompt_tokens=1_600, completion_tokens=20, cached_tokens=1_300),
]


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
async def test_each_api_forwards_with_its_auth_header_and_counts_usage(api, stream):
    with ScriptedModelServer(STEPS, expect_key=KEY) as srv:
        async with CredentialProxy(srv.base_url, KEY, rates=RATES) as proxy:
            bodies = []
            for turn in range(3):
                status, head, body = await _raw(proxy.port, "POST", PATHS[api], _body(api, turn, stream))
                assert status == 200, body
                bodies.append(body)
                _no_key_piece(head + body)
            # the answers are in the API's own shape, tool calls translated for the harness's tools
            if api == "chat":
                first = b"".join(bodies[:1])
                assert b'"tool_calls"' in first and b'"bash"' in first
            elif api == "responses":
                items = [e["item"] for e in _events(api, bodies[0]) if e.get("type") == "response.output_item.done"] \
                    if stream else json.loads(bodies[0])["output"]
                assert items[0]["type"] == "function_call" and items[0]["name"] == "exec_command"
                assert json.loads(items[0]["arguments"]) == {"cmd": "echo hello > probe.txt"}
            else:
                if stream:
                    evs = _events(api, bodies[1])
                    assert bodies[1].startswith(b"event: message_start")
                    block = next(e for e in evs if e["type"] == "content_block_start")["content_block"]
                else:
                    block = json.loads(bodies[1])["content"][0]
                assert block["type"] == "tool_use" and block["name"] == "Write"
        reqs = srv.requests
        assert [r["api"] for r in reqs] == [api] * 3 and all(r["auth_ok"] for r in reqs)
        want_cred = ["x-api-key"] if api == "messages" else ["authorization"]
        assert all(r["inbound_credentials"] == want_cred for r in reqs)
        if api == "messages":
            assert all(r["anthropic_version"] == "2023-06-01" for r in reqs)
        sent = srv.sent_totals()
        assert sent["responses"] == 3
        s = proxy.stats
        assert (s.prompt_tokens, s.completion_tokens, s.cached_tokens, s.cache_write_tokens) == (
            sent["prompt_tokens"], sent["completion_tokens"], sent["cached_tokens"], sent["cache_write_tokens"])
        if api != "messages":  # Anthropic has no reasoning count
            assert s.reasoning_tokens == sent["reasoning_tokens"]
        assert s.by_api == {api: 3} and s.requests == 3
        want_cost = sum(RATES.cost(x["prompt_tokens"] - x["cached_tokens"] - x["cache_write_tokens"],
                                   x["completion_tokens"], x["cached_tokens"], x["cache_write_tokens"]) for x in srv.sent)
        assert s.cost_microusd == want_cost > 0


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
async def test_warm_up_is_answered_in_the_api_asked(api):
    with ScriptedModelServer(STEPS, expect_key=KEY) as srv:
        async with CredentialProxy(srv.base_url, KEY) as proxy:
            path = WARMUP_PREFIX + PATHS[api]
            status, _, body = await _raw(proxy.port, "POST", path, {"model": "w", "stream": True, "messages": []})
            assert status == 200 and b"ready" in body
            kinds = [e.get("type") or e.get("object") for e in _events(api, body)]
            want = {"chat": "chat.completion.chunk", "responses": "response.completed", "messages": "message_stop"}[api]
            assert want in kinds
            status, _, body = await _raw(proxy.port, "POST", path, {"model": "w"})
            assert status == 200 and b"ready" in body and json.loads(body)
        assert srv.requests == [] and proxy.stats.requests == 0


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
async def test_a_model_that_never_stops_is_refused_past_its_heat_budget(api):
    """Each turn costs 2000×1 + 100×4 = 2400 tokens·rate → 600 µUSD at these rates: the
    fourth call brings the spend to 2400 > 2000 µUSD, the fifth is refused with 402 in the
    API's own error shape; another seat on the same model is untouched."""
    rates = ModelPrice(input_per_mtok=0.1, output_per_mtok=4.0).rates()  # 200 + 400 = 600 µUSD a turn
    step = never_stop_step(prompt_tokens=2_000, completion_tokens=100)
    with ScriptedModelServer([step], mode="endless", expect_key=KEY) as srv:
        async with CredentialProxy(srv.base_url, KEY, rates=rates,
                                   heat_cap=SpendCap(max_cost_microusd=2_000)) as seat, \
                CredentialProxy(srv.base_url, KEY, rates=rates, heat_cap=SpendCap(max_cost_microusd=100_000)) as other:
            for turn in range(4):
                status, _, body = await _raw(seat.port, "POST", PATHS[api], _body(api, turn, True))
                assert status == 200, body
            assert seat.stats.cost_microusd == 2_400 and seat.stats.refused is None
            status, _, body = await _raw(seat.port, "POST", PATHS[api], _body(api, 4, True))
            assert status == 402
            err = json.loads(body)
            msg = "budget exceeded: spent 2400 µUSD of 2000 µUSD"
            if api == "messages":
                assert err == {"type": "error", "error": {"type": "billing_error", "message": msg}}
            else:
                assert err["error"]["message"] == msg and err["error"]["code"] == "budget_exceeded"
            assert seat.stats.refused == msg and seat.stats.refusals == 1 and seat.stats.requests == 4
            assert len(srv.requests) == 4  # the refused call never reached the provider
            status, _, _ = await _raw(other.port, "POST", PATHS[api], _body(api, 0, False))
            assert status == 200 and other.stats.refused is None and other.stats.cost_microusd == 600


async def test_season_ledger_carries_across_heats():
    """One entrant's season ledger passes from heat to heat: requests and tokens add up,
    and the cap refuses the call that would go past it in a later heat."""
    ledger = SpendLedger()
    cap = SpendCap(max_requests=3, max_tokens=10_000_000, scope="season")
    step = never_stop_step(prompt_tokens=1_000, completion_tokens=10)
    with ScriptedModelServer([step], mode="endless") as srv:
        for heat in range(2):
            async with CredentialProxy(srv.base_url, KEY, season=(ledger, cap)) as proxy:
                for turn in range(2):
                    status, _, body = await _raw(proxy.port, "POST", PATHS["chat"], _body("chat", turn, False))
                    if heat == 1 and turn == 1:
                        assert status == 402
                        assert json.loads(body)["error"]["message"] == \
                            "season budget exceeded: made 3 model requests of 3"
                    else:
                        assert status == 200
    assert ledger.requests == 3 and ledger.tokens == 3 * 1_010 and len(srv.requests) == 3


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
async def test_a_hostile_upstream_cannot_leak_the_key(api, stream):
    with ScriptedModelServer(STEPS, expect_key=KEY, plant_key=KEY, served={"m"}) as srv:
        async with CredentialProxy(srv.base_url, KEY, scrub=[OTHER_KEY]) as proxy:
            status, head, body = await _raw(proxy.port, "POST", PATHS[api], _body(api, 0, stream))
            assert status == 200 and b"X-Debug-Upstream-Key: ****" in head
            _no_key_piece(head + body)
            if stream:  # the stream is still well-formed for the harness
                assert _events(api, body)
            else:
                assert json.loads(body)["debug"].startswith("served with key ***")
            # an error body from upstream (a model it does not serve)
            status, head, body = await _raw(proxy.port, "POST", PATHS[api], {**_body(api, 0, stream), "model": "x"})
            assert status == 404 and b"upstream key ***" in body
            _no_key_piece(head + body)
            # a redirect's Location
            status, head, body = await _raw(proxy.port, "GET", "/v1/models")
            assert status == 302 and b"Location: https://gateway.example/login?key=****" in head
            _no_key_piece(head + body)
        assert proxy.stats.scrubbed > 0
        assert proxy.stats.prompt_tokens == 1_000  # usage still counted


class _GzipLeak(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        return

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        enc = self.server.encoding  # type: ignore[attr-defined]
        raw = json.dumps({"error": {"message": f"bad key {OTHER_KEY} and {KEY}"}}).encode()
        data = gzip.compress(raw) if enc == "gzip" else raw
        self.send_response(401, f"Unauthorized {KEY}")
        self.send_header("Content-Encoding", enc)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Set-Cookie", f"k={KEY}")
        self.end_headers()
        self.wfile.write(data)


@pytest.mark.parametrize("encoding", ["gzip", "br"])
async def test_encoded_bodies_are_decoded_and_scrubbed_or_refused(encoding):
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _GzipLeak)
    httpd.encoding = encoding  # type: ignore[attr-defined]
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    try:
        base = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
        async with CredentialProxy(base, KEY, scrub=[OTHER_KEY]) as proxy:
            status, head, body = await _raw(proxy.port, "POST", PATHS["chat"], _body("chat", 0, False))
            _no_key_piece(head + body)
            _no_key_piece(head + body, OTHER_KEY)
            if encoding == "gzip":
                assert status == 401 and json.loads(body)["error"]["message"].startswith("bad key ****")
            else:
                assert status == 502 and b"content encoding 'br'" in body
    finally:
        httpd.shutdown()
        httpd.server_close()


def _escaped(text: str, how: list[int]) -> bytes:
    """``text`` with some characters written as JSON escapes: ``how[i]`` 0 = as is,
    1 = ``\\uXXXX``, 2 = ``\\\\uXXXX`` (an escape inside an escaped string)."""
    out = b""
    for c, h in zip(text, how + [0] * len(text)):
        out += c.encode() if h == 0 else b"\\" * (2 * h - 1) + f"u{ord(c):04x}".encode()
    return out


@settings(max_examples=300, deadline=None)
@given(prefix=st.binary(max_size=40), suffix=st.binary(max_size=40), cut_a=st.integers(0, len(KEY)),
       cut_b=st.integers(0, len(KEY)), how=st.lists(st.integers(0, 2), max_size=len(KEY)),
       splits=st.lists(st.integers(0, 400), max_size=10))
def test_scrubbing_any_split_of_a_stream_equals_scrubbing_it_whole(prefix, suffix, cut_a, cut_b, how, splits):
    """Whatever the chunking, the scrubbed stream equals the whole data scrubbed at once, keeps
    its length, and holds no piece of ≥ SCRUB_MIN characters of the key — written plainly or
    with any of its characters as JSON escapes (one or two levels deep)."""
    lo, hi = sorted((cut_a, cut_b))
    data = prefix + KEY.encode()[lo:hi] + b"|" + KEY.encode() + b"|" + _escaped(KEY, how) + suffix
    whole = Scrubber([KEY]).scrub(data)
    s = Scrubber([KEY])
    out, last = b"", 0
    for cut in sorted(min(c, len(data)) for c in splits):
        out += s.feed(data[last:cut])
        last = cut
    out += s.feed(data[last:]) + s.finish()
    assert out == whole and len(out) == len(data)
    decoded = out.replace(b"\\\\", b"\\")
    for _ in range(2):
        decoded = re.sub(rb"\\u00([2-7][0-9a-f])", lambda m: bytes([int(m.group(1), 16)]), decoded)
    k = KEY.encode()
    assert not any(k[i:i + SCRUB_MIN] in decoded for i in range(len(k) - SCRUB_MIN + 1))


def test_a_stream_is_held_back_only_where_a_key_piece_could_begin():
    """An SSE event is passed on whole at once (no latency); only a tail that could start a
    piece of the key, or an escape cut in two, waits for the next chunk."""
    s = Scrubber([KEY])
    assert s.feed(b'data: {"type":"message_stop"}\n\n') == b'data: {"type":"message_stop"}\n\n'
    assert s.feed(b"text sk-li") == b"text " and s.feed(b"ve-7Qm2 more!") == b"*" * 12 + b" more!"
    assert s.feed(b"a \\u00") == b"a "  # an escape cut in two waits for its end
    out = s.feed(b"41 b")
    assert out.startswith(b"\\u0041 ") and out + s.finish() == b"\\u0041 b"


def test_short_or_absent_secrets_change_nothing():
    assert Scrubber([None, "", "x"]).scrub(b"x marks the spot") == b"x marks the spot"
    assert not Scrubber(["short"]).active


@pytest.mark.parametrize("method, path", [
    ("POST", "/v1/organizations/api_keys"), ("GET", "/v1/dashboard/billing"), ("POST", "/v1/nowhere"),
    ("POST", "/v1/../v1/organizations/api_keys/chat/completions"), ("POST", "/v1/x%2f..%2fadmin/messages"),
    ("GET", "/v1/chat/completions"), ("POST", "/v1/threads/t1/messages"), ("POST", "/v1/embeddings"),
    ("POST", "/admin/v1/chat/completions"),
])
async def test_only_model_calls_are_forwarded(method, path):
    """An admin or billing API could mint a new key with the injected one: the proxy answers
    anything but the model calls itself (403), without reaching the provider or counting it."""
    with ScriptedModelServer(STEPS, expect_key=KEY) as srv:
        async with CredentialProxy(srv.base_url, KEY) as proxy:
            status, _, body = await _raw(proxy.port, method, path, {"model": "m"})
            assert status == 403 and b"forwards only model calls" in body
            status, _, _ = await _raw(proxy.port, "POST", "/v1/messages/count_tokens", {"model": "m"})
            assert status == 404  # forwarded: the scripted server has no such endpoint
        assert [r["path"] for r in srv.requests] == ["/v1/messages/count_tokens"]
        assert proxy.stats.requests == 1



@pytest.mark.parametrize("head", [
    # a bare LF in a header value: an upstream that ends lines at LF would read a second request
    b"POST /v1/chat/completions HTTP/1.1\r\nX-Foo: a\n\nGET /v1/organization/admin_api_keys HTTP/1.1\nX-Bar: b\r\n",
    b"POST /v1/chat/completions HTTP/1.1\r\nX-Foo: a\rb\r\n",
    b"POST /v1/chat/completions\nGET /admin HTTP/1.1\r\n",
    b"PUT /v1/chat/completions HTTP/1.1\r\n",
    b"POST /v1/chat/completions HTTP/1.1\r\nBad Name: x\r\n",
    b"POST /v1/chat/completions HTTP/1.1\r\nno colon here\r\n",
])
async def test_a_request_head_that_could_smuggle_a_second_request_is_refused(head):
    """Nothing of a malformed head reaches the provider (the injected key with it): 400."""
    with ScriptedModelServer(STEPS, expect_key=KEY) as srv:
        async with CredentialProxy(srv.base_url, KEY) as proxy:
            reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
            body = b'{"model":"m"}'
            writer.write(head + b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            await writer.drain()
            raw = await asyncio.wait_for(reader.read(-1), 10)
            writer.close()
            assert raw.startswith(b"HTTP/1.1 400 ") and b"refused" in raw, raw[:200]
        assert srv.requests == [] and proxy.stats.requests == 0


async def test_a_chat_stream_is_counted_even_when_the_harness_does_not_ask_for_usage():
    """OpenAI sends a stream's usage only with ``stream_options.include_usage``: the proxy asks
    for it, so a guest that leaves it out (or calls the proxy itself) is still counted."""
    with ScriptedModelServer(STEPS, expect_key=KEY) as srv:
        async with CredentialProxy(srv.base_url, KEY) as proxy:
            body = _body("chat", 0, True)
            assert "stream_options" not in body
            status, _, _ = await _raw(proxy.port, "POST", "/v1/chat/completions", body)
            assert status == 200
            assert proxy.stats.responses_with_usage == 1 and proxy.stats.prompt_tokens > 0


@pytest.mark.parametrize("wrap", [
    lambda k: "".join(f"%{c:02X}" for c in k.encode()),
    lambda k: "".join(f"%{c:02x}" for c in k.encode()),
    lambda k: __import__("base64").b64encode(k.encode()).decode(),
    lambda k: __import__("base64").b64encode(b"x" + k.encode()).decode(),
    lambda k: __import__("base64").urlsafe_b64encode(b"xy" + k.encode() + b"!").decode(),
])
def test_a_key_percent_encoded_or_in_base64_is_scrubbed_too(wrap):
    """A gateway may echo the key URL-encoded in a redirect or base64 in a token: no run of 8
    characters of that form passes either."""
    form = wrap(KEY)
    out = Scrubber([KEY]).scrub(f"Location: https://gw.example/?k={form}&x=1".encode()).decode()
    assert not any(form[i:i + 8] in out for i in range(len(form) - 12)), out
    assert out.startswith("Location: https://gw.example/?k=") and out.endswith("&x=1")
