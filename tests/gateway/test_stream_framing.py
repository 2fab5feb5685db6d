"""Streams as lanes frame them, relayed as OpenAI would send them: every line ending the SSE
spec allows (CRLF CRLF is some servers' default), and no `"usage": null` on the chunks of a
client that did not ask for usage (the gateway always asks the lane for it)."""

from __future__ import annotations

import re
from typing import Any

import httpx

from tests.gateway.conftest import Gateway
from tests.gateway.upstreams import CountingUpstream

MESSAGES = [{"role": "user", "content": "hi"}]
CREATED = re.compile(rb'"created": \d+')


def stream(url: str, headers: dict[str, str], **fields: Any) -> bytes:
    body = {"model": "qwen-test", "stream": True, "messages": MESSAGES, **fields}
    with httpx.stream("POST", f"{url}/chat/completions", headers=headers, json=body, timeout=30) as response:
        assert response.status_code == 200
        return response.read()


def test_a_crlf_framed_stream_is_relayed_byte_exact_without_counting_against_the_breaker(
    fault_gateway: Gateway, upstream: CountingUpstream, settings: Any
) -> None:
    settings.GATEWAY_BREAKER_FAILURES = 1  # one stream taken for a failure would open it
    upstream.event_end = b"\r\n\r\n"
    for _ in range(2):
        relayed = stream(fault_gateway.base_url, fault_gateway.headers(), stream_options={"include_usage": True})
        assert relayed == upstream.streams[-1]
        assert b"[DONE]\r\n\r\n" in relayed and b'"completion_tokens": 5' in relayed
    assert upstream.completions == 2


def test_a_client_that_did_not_ask_for_usage_gets_the_chunks_openai_would_send(
    fault_gateway: Gateway, upstream: CountingUpstream
) -> None:
    upstream.usage_nulls = True  # the lane, asked for usage, puts "usage": null on every chunk
    relayed = stream(fault_gateway.base_url, fault_gateway.headers())
    asked_for_usage = upstream.streams[-1]
    assert b'"usage": null' in asked_for_usage
    direct = stream(f"{upstream.url}/v1", {})  # what the lane sends a client that did not ask
    assert b'"usage"' not in relayed
    assert CREATED.sub(b"", relayed) == CREATED.sub(b"", direct)


def test_n_above_one_to_a_lane_that_ignores_it_is_refused_naming_n(
    fault_gateway: Gateway, upstream: CountingUpstream
) -> None:
    """The hand-written upstream, like llama.cpp, answers one choice whatever `n` asks: the
    client gets a 400 naming `n`, never a 200 with fewer choices; then the lane is known and
    n>1 is refused before it is sent."""
    for sent in (1, 1):
        refused = httpx.post(f"{fault_gateway.base_url}/chat/completions", headers=fault_gateway.headers(),
                             json={"model": "qwen", "messages": MESSAGES, "n": 2}, timeout=30)
        assert refused.status_code == 400, refused.text
        error = refused.json()["error"]
        assert error["param"] == "n" and error["code"] == "unsupported_value" and "`n`" in error["message"]
        assert upstream.completions == sent
    plain = httpx.post(f"{fault_gateway.base_url}/chat/completions", headers=fault_gateway.headers(),
                       json={"model": "qwen", "messages": MESSAGES, "n": 1}, timeout=30)
    assert plain.status_code == 200 and upstream.completions == 2
