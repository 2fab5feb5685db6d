"""A lane that never reports usage (llama.cpp ignores include_usage): the gateway counts,
sends the usage chunk the client asked for, and enforces tokens per minute anyway. The
context guard never posts a prompt to a lane without /tokenize twice, nor one too large."""

from __future__ import annotations

import httpx
import openai
import pytest
from django.contrib.auth.models import User

from gateway.models import RequestLog
from tests.conftest import wait_for
from tests.gateway.conftest import Gateway, create_key, make_lane
from tests.gateway.upstreams import CountingUpstream

MESSAGES = [{"role": "user", "content": "count these four words"}]


def sdk(gateway: Gateway, secret: str | None = None) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.base_url, api_key=secret or gateway.secret, max_retries=0)


def test_a_stream_without_upstream_usage_ends_with_the_usage_chunk_counted_by_tokenize(
    fault_gateway: Gateway, upstream: CountingUpstream
) -> None:
    gateway = fault_gateway
    upstream.sends_usage = False
    chunks = list(sdk(gateway).chat.completions.create(
        model="qwen", stream=True, stream_options={"include_usage": True}, messages=MESSAGES))  # type: ignore[arg-type]
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    # The upstream's /tokenize: 4 words + 4 for the prompt; the answer's 5 words.
    assert (last.usage.prompt_tokens, last.usage.completion_tokens, last.usage.total_tokens) == (8, 5, 13)
    assert all(chunk.usage is None for chunk in chunks[:-1]) and last.id == chunks[0].id
    answer = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert answer in [body.get("prompt") for body in upstream.tokenize_bodies]
    plain = httpx.post(f"{gateway.base_url}/chat/completions", headers=gateway.headers(), timeout=10,
                       json={"model": "qwen", "stream": True, "messages": MESSAGES})
    assert plain.text.endswith("data: [DONE]\n\n") and '"usage":{' not in plain.text
    rows = wait_for(lambda: (r := list(RequestLog.objects.filter(stream=True))) and len(r) == 2 and r,
                    what="both streams' log rows")  # written in batches: the one or the other may come first
    assert [(row.usage_source, row.completion_tokens) for row in rows] == [("tokenize", 5)] * 2


def test_a_client_hanging_up_on_done_before_the_lane_closes_keeps_the_usage_in_the_log(
    fault_gateway: Gateway, upstream: CountingUpstream
) -> None:
    """The openai SDK closes the connection as soon as it reads [DONE]: the answer was whole,
    so the request is logged with the lane's usage, not as a client that left."""
    upstream.mode = "linger_after_done"
    chunks = list(sdk(fault_gateway).chat.completions.create(model="qwen", stream=True, messages=MESSAGES))
    assert chunks and all(chunk.usage is None for chunk in chunks)
    row = wait_for(lambda: RequestLog.objects.filter(stream=True).first(), what="the log row")
    assert (row.status, row.prompt_tokens, row.completion_tokens, row.usage_source) == (200, 11, 5, "")


def test_tokens_per_minute_hold_for_streams_from_a_lane_that_reports_no_usage(
    fault_gateway: Gateway, upstream: CountingUpstream, key_owner: User
) -> None:
    gateway = fault_gateway
    upstream.sends_usage = False
    secret, _ = create_key(key_owner, name="token-hungry", tpm_limit=10)
    list(sdk(gateway, secret).chat.completions.create(model="qwen", stream=True, messages=MESSAGES))  # 13 tokens
    refused = wait_for(lambda: (r := httpx.post(
        f"{gateway.base_url}/chat/completions", headers=gateway.headers(secret), timeout=10,
        json={"model": "qwen", "stream": True, "messages": MESSAGES})).status_code == 429 and r,
        what="the counted tokens to reach the limit")
    assert refused.json()["error"]["code"] == "rate_limit_exceeded"
    assert upstream.completions == 1


def test_without_tokenize_the_usage_is_an_estimate_marked_in_the_log_and_tokenize_is_not_asked_again(
    fault_gateway: Gateway, upstream: CountingUpstream
) -> None:
    gateway = fault_gateway
    upstream.sends_usage, upstream.has_tokenize = False, False
    whole = sdk(gateway).chat.completions.create(model="qwen", messages=MESSAGES)  # type: ignore[arg-type]
    assert whole.usage is not None and whole.usage.completion_tokens > 0 and whole.usage.prompt_tokens > 0
    asked = upstream.counts["/tokenize"]
    assert 1 <= asked <= 2  # prompt and answer, asked at once; both found missing
    list(sdk(gateway).chat.completions.create(model="qwen", stream=True, stream_options={"include_usage": True},
                                              messages=MESSAGES))  # type: ignore[arg-type]
    assert upstream.counts["/tokenize"] == asked
    rows = wait_for(lambda: list(RequestLog.objects.all()) if RequestLog.objects.count() == 2 else None,
                    what="two log rows")
    assert {row.usage_source for row in rows} == {"estimate"}


@pytest.mark.parametrize("tokenize", ["missing", "answers_without_count"])
def test_the_context_guard_never_posts_a_prompt_to_a_lane_without_tokenize_again(
    fault_gateway: Gateway, second_upstream: CountingUpstream, tokenize: str
) -> None:
    gateway = fault_gateway
    if tokenize == "missing":
        second_upstream.has_tokenize = False
    else:
        second_upstream.tokenize_counts = False
    make_lane("deepseek", second_upstream.port, max_model_len=1000)
    long_prompt = [{"role": "user", "content": "word " * 900}]
    for _ in range(3):
        refused = httpx.post(f"{gateway.base_url}/chat/completions", headers=gateway.headers(), timeout=10,
                             json={"model": "deepseek", "max_tokens": 200, "messages": long_prompt})
        assert refused.status_code == 400 and refused.json()["error"]["code"] == "context_length_exceeded"
        assert "about" in refused.json()["error"]["message"]
    assert second_upstream.counts["/tokenize"] == 1 and second_upstream.completions == 0


def test_the_context_guard_does_not_post_a_prompt_far_beyond_any_context(
    fault_gateway: Gateway, second_upstream: CountingUpstream
) -> None:
    gateway = fault_gateway
    make_lane("deepseek", second_upstream.port, max_model_len=1000)
    huge = [{"role": "user", "content": "x" * (1024 * 1024 + 10)}]
    refused = httpx.post(f"{gateway.base_url}/chat/completions", headers=gateway.headers(), timeout=30,
                         json={"model": "deepseek", "messages": huge})
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "context_length_exceeded"
    assert second_upstream.counts["/tokenize"] == 0 and second_upstream.completions == 0
