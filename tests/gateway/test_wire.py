"""Pure rules of the wire format, tested without I/O."""

from __future__ import annotations

import json

import orjson
import pytest

from gateway import request as gateway_request
from gateway.context import context_bound, exceeds
from gateway.mirror import divergence, text_of_stream
from gateway.request import ParsedRequest, upstream_body
from gateway.wire import GatewayError, StreamFilter, upstream_error


def parse_request(raw: bytes, *, endpoint: str) -> ParsedRequest:
    return gateway_request.parse_request(raw, endpoint=endpoint, max_n=8)


def sse(payload: object) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


CHUNK = sse({"id": "c", "choices": [{"index": 0, "delta": {"content": "hi"}}], "usage": None})
# The same chunk as OpenAI sends it to a client that did not ask for usage: no usage field.
PLAIN = sse({"id": "c", "choices": [{"index": 0, "delta": {"content": "hi"}}]})
USAGE = sse({"id": "c", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 5}})
DONE = b"data: [DONE]\n\n"


def test_the_upstream_body_patches_only_model_and_include_usage() -> None:
    raw = orjson.dumps({"model": "auto", "stream": True, "messages": [{"role": "user", "content": "x"}],
                        "stream_options": {"continuous_usage_stats": True}, "top_k": 5, "weird": {"a": [1]}})
    request = parse_request(raw, endpoint="chat.completions")
    sent = orjson.loads(upstream_body(request, upstream_model="Qwen/Qwen3"))
    assert sent == {**orjson.loads(raw), "model": "Qwen/Qwen3",
                    "stream_options": {"continuous_usage_stats": True, "include_usage": True}}
    assert request.client_wants_usage is False


def test_a_plain_request_gets_no_stream_options() -> None:
    request = parse_request(b'{"model": "q", "prompt": "x"}', endpoint="completions")
    assert "stream_options" not in orjson.loads(upstream_body(request, upstream_model="q"))


@pytest.mark.parametrize("raw, param", [
    (b'{"messages": [{"role": "user"}]}', "model"),
    (b'{"model": "q", "messages": []}', "messages"),
    (b'{"model": "q", "messages": [{"role": "user"}], "max_completion_tokens": "many"}', "max_completion_tokens"),
])
def test_it_refuses_bad_requests_naming_the_field(raw: bytes, param: str) -> None:
    with pytest.raises(GatewayError) as caught:
        parse_request(raw, endpoint="chat.completions")
    assert caught.value.status == 400 and caught.value.param == param


def test_the_stream_filter_drops_the_usage_chunk_when_not_asked_but_counts_it() -> None:
    stream_filter = StreamFilter(client_wants_usage=False)
    out = stream_filter.feed(CHUNK + CHUNK + USAGE + DONE)
    assert out == PLAIN + PLAIN + DONE
    assert stream_filter.usage.completion_tokens == 5 and stream_filter.saw_done


def test_the_stream_filter_keeps_the_usage_chunk_when_asked() -> None:
    stream_filter = StreamFilter(client_wants_usage=True)
    assert stream_filter.feed(CHUNK + USAGE + DONE) == CHUNK + USAGE + DONE


def test_the_stream_filter_passes_events_split_across_reads_as_soon_as_whole() -> None:
    stream_filter = StreamFilter(client_wants_usage=False)
    assert stream_filter.feed(CHUNK[:10]) == b""
    assert stream_filter.feed(CHUNK[10:] + CHUNK[:5]) == PLAIN
    assert stream_filter.feed(CHUNK[5:]) == PLAIN


@pytest.mark.parametrize("end", [b"\r\n\r\n", b"\r\r", b"\n\r\n", b"\r\n\n", b"\r\n\r"])
def test_the_stream_filter_splits_events_on_every_line_ending_the_sse_spec_allows(end: bytes) -> None:
    """CRLF CRLF (some servers' default), CR CR, and mixed endings: relayed byte for byte,
    usage and [DONE] found, whatever the reads' boundaries."""
    framed = [e.replace(b"\n\n", end) for e in (CHUNK, CHUNK, USAGE, DONE)]
    stream = b"".join(framed)
    for size in (1, 7, len(stream)):
        stream_filter = StreamFilter(client_wants_usage=True)
        out = b"".join(stream_filter.feed(stream[at:at + size]) for at in range(0, len(stream), size))
        out += stream_filter.leftover()
        assert out == stream, size
        assert stream_filter.saw_done and not stream_filter.held_done
        assert stream_filter.usage.completion_tokens == 5
    not_asked = StreamFilter(client_wants_usage=False)
    assert not_asked.feed(stream) == framed[0].replace(b', "usage": null', b"") * 2 + framed[3]
    assert text_of_stream(stream) == "hihi"


def test_no_usage_null_reaches_a_client_that_did_not_ask_whatever_the_spacing() -> None:
    compact = b'data: {"id":"c","usage":null,"choices":[{"delta":{"content":"\\"usage\\":null"}}]}\n\n'
    last = b'data: {"id":"c","choices":[],"usage":null}\n\n'
    out = StreamFilter(client_wants_usage=False).feed(compact + last)
    assert out == (b'data: {"id":"c","choices":[{"delta":{"content":"\\"usage\\":null"}}]}\n\n'
                   b'data: {"id":"c","choices":[]}\n\n')
    assert StreamFilter(client_wants_usage=True).feed(compact + last) == compact + last


def test_usage_riding_on_a_chunk_with_choices_is_split_off() -> None:
    final = {"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
             "usage": {"prompt_tokens": 3, "completion_tokens": 5}}
    asked = StreamFilter(client_wants_usage=True).feed(sse(final) + DONE)
    events = [orjson.loads(e[6:]) for e in asked.split(b"\n\n") if e.startswith(b"data: {")]
    assert events[0]["choices"] and events[0]["usage"] is None
    assert events[1]["choices"] == [] and events[1]["usage"]["completion_tokens"] == 5
    not_asked = StreamFilter(client_wants_usage=False).feed(sse(final) + DONE)
    events = [orjson.loads(e[6:]) for e in not_asked.split(b"\n\n") if e.startswith(b"data: {")]
    assert len(events) == 1 and "usage" not in events[0]


def test_upstream_context_errors_get_the_context_length_code() -> None:
    error = upstream_error(400, b'{"object":"error","message":"This model\'s maximum context length is 4096 tokens."}')
    assert error.code == "context_length_exceeded" and error.status == 400
    server = upstream_error(500, b"boom")
    assert server.status == 502 and server.retryable is False
    assert orjson.loads(server.body())["error"]["type"] == "server_error"


def test_the_context_bound_only_asks_for_exact_counts_near_the_limit() -> None:
    assert not context_bound(prompt_bytes=1000, messages=2, max_tokens=100, limit=100_000, threshold=0.5).needs_exact
    assert context_bound(prompt_bytes=60_000, messages=2, max_tokens=100, limit=100_000, threshold=0.5).needs_exact
    assert exceeds(900, max_tokens=200, limit=1000) and not exceeds(800, max_tokens=200, limit=1000)


def test_divergence_is_zero_for_the_same_words_and_one_for_none_in_common() -> None:
    assert divergence("The cat sat.", "the CAT sat") == 0.0
    assert divergence("alpha beta", "gamma delta") == 1.0
    assert 0 < divergence("the cat sat on the mat", "the dog sat on the rug") < 1


def test_text_of_a_stream_joins_the_deltas() -> None:
    assert text_of_stream(CHUNK + CHUNK + USAGE + DONE) == "hihi"
