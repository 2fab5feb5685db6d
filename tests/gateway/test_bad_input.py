"""No client can hurt other clients: bad bodies are refused at the gateway before any
upstream call (counted by the sparksim engine on arrival), an upstream's own failure on a
body the gateway could not check does not switch the lane off, bodies are bounded, a client
that leaves frees its slot, and refused keys are counted."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from django.contrib.auth.models import User

from gateway.models import RequestLog
from gateway.services import gateway_invalidate
from lanes.models import Lane
from sparksim.standalone import EngineHandle
from tests.conftest import wait_for
from tests.gateway.conftest import (
    Gateway,
    create_key,
    engine_received,
    make_lane,
    set_engine_faults,
)
from tests.gateway.upstreams import CountingUpstream

MESSAGES = [{"role": "user", "content": "hi"}]
CHAT = "/v1/chat/completions"
TEXT = "/v1/completions"


def post(gateway: Gateway, body: Any, path: str = CHAT, secret: str | None = None, **headers: str) -> httpx.Response:
    content = body if isinstance(body, bytes) else orjson.dumps(body)
    return httpx.post(f"{gateway.url}{path}", content=content, timeout=15,
                      headers={**gateway.headers(secret), "content-type": "application/json", **headers})


def chat(**fields: Any) -> dict[str, Any]:
    return {"model": "qwen", "messages": MESSAGES, **fields}


# (body, path, expected code, expected param): every case is decided by the gateway alone.
BAD_INPUT: list[tuple[str, Any, str, str, str | None]] = [
    ("temperature hot", chat(temperature="hot"), CHAT, "invalid_type", "temperature"),
    ("temperature below 0", chat(temperature=-0.5), CHAT, "invalid_value", "temperature"),
    ("temperature above 2", chat(temperature=2.5), CHAT, "invalid_value", "temperature"),
    ("top_p 0", chat(top_p=0), CHAT, "invalid_value", "top_p"),
    ("top_p above 1", chat(top_p=1.01), CHAT, "invalid_value", "top_p"),
    ("n two", chat(n="two"), CHAT, "invalid_type", "n"),
    ("n 0", chat(n=0), CHAT, "invalid_value", "n"),
    ("n above the setting", chat(n=9), CHAT, "invalid_value", "n"),
    ("n 100000", chat(n=100_000), CHAT, "invalid_value", "n"),
    ("n beyond 64 bits", b'{"model": "qwen", "messages": [{"role": "user", "content": "hi"}], '
                         b'"n": 99999999999999999999999}', CHAT, "invalid_type", "n"),
    ("messages of numbers", chat(messages=[1, 2]), CHAT, "invalid_type", "messages[0]"),
    ("messages an object", chat(messages={"role": "user"}), CHAT, "invalid_type", "messages"),
    ("messages empty", chat(messages=[]), CHAT, "empty_array", "messages"),
    ("a message without role", chat(messages=[{"content": "x"}]), CHAT, "missing_required_parameter",
     "messages[0].role"),
    ("an unknown role", chat(messages=[{"role": "wizard", "content": "x"}]), CHAT, "invalid_value",
     "messages[0].role"),
    ("content a number", chat(messages=[{"role": "user", "content": 7}]), CHAT, "invalid_type",
     "messages[0].content"),
    ("a content part without type", chat(messages=[{"role": "user", "content": [{"text": "x"}]}]), CHAT,
     "invalid_value", "messages[0].content[0].type"),
    ("stream 1", chat(stream=1), CHAT, "invalid_type", "stream"),
    ("stream yes", chat(stream="yes"), CHAT, "invalid_type", "stream"),
    ("stream_options without stream", chat(stream_options={"include_usage": True}), CHAT, "invalid_value",
     "stream_options"),
    ("include_usage a string", chat(stream=True, stream_options={"include_usage": "yes"}), CHAT, "invalid_type",
     "stream_options.include_usage"),
    ("max_tokens 0", chat(max_tokens=0), CHAT, "invalid_value", "max_tokens"),
    ("max_tokens negative", chat(max_tokens=-1), CHAT, "invalid_value", "max_tokens"),
    ("max_tokens a float", chat(max_tokens=1.5), CHAT, "invalid_type", "max_tokens"),
    ("max_completion_tokens negative", chat(max_completion_tokens=-3), CHAT, "invalid_value",
     "max_completion_tokens"),
    ("tools true", chat(tools=True), CHAT, "invalid_type", "tools"),
    ("tools of numbers", chat(tools=[1]), CHAT, "invalid_type", "tools[0]"),
    ("a function tool without function", chat(tools=[{"type": "function"}]), CHAT, "missing_required_parameter",
     "tools[0].function"),
    ("a function without name", chat(tools=[{"type": "function", "function": {}}]), CHAT, "invalid_value",
     "tools[0].function.name"),
    ("tool_choice unknown", chat(tool_choice="sometimes"), CHAT, "invalid_value", "tool_choice"),
    ("stop a number", chat(stop=5), CHAT, "invalid_type", "stop"),
    ("logit_bias out of range", chat(logit_bias={"42": 500}), CHAT, "invalid_value", "logit_bias.42"),
    ("presence_penalty a string", chat(presence_penalty="high"), CHAT, "invalid_type", "presence_penalty"),
    ("logprobs an int on chat", chat(logprobs=3), CHAT, "invalid_type", "logprobs"),
    ("top_logprobs above 20", chat(top_logprobs=21), CHAT, "invalid_value", "top_logprobs"),
    ("seed a string", chat(seed="x"), CHAT, "invalid_type", "seed"),
    ("model missing", {"messages": MESSAGES}, CHAT, "missing_required_parameter", "model"),
    ("model a number", {"model": 5, "messages": MESSAGES}, CHAT, "invalid_value", "model"),
    ("not JSON", b"{nope", CHAT, "invalid_json", None),
    ("infinity", b'{"model": "qwen", "messages": [], "temperature": 1e999}', CHAT, "invalid_json", None),
    ("NaN", b'{"model": "qwen", "messages": [], "temperature": NaN}', CHAT, "invalid_json", None),
    ("a JSON array", [1, 2], CHAT, "invalid_request", None),
    ("prompt missing", {"model": "qwen"}, TEXT, "missing_required_parameter", "prompt"),
    ("prompt of floats", {"model": "qwen", "prompt": [1.5]}, TEXT, "invalid_type", "prompt"),
    ("completions logprobs above 5", {"model": "qwen", "prompt": "x", "logprobs": 6}, TEXT, "invalid_value",
     "logprobs"),
    ("completions echo a string", {"model": "qwen", "prompt": "x", "echo": "yes"}, TEXT, "invalid_type", "echo"),
]


@pytest.mark.parametrize("case, body, path, code, param", BAD_INPUT, ids=[case[0] for case in BAD_INPUT])
def test_bad_input_is_refused_at_the_gateway_naming_the_field(
    unreached_gateway: Gateway, unreached_engine: EngineHandle, case: str, body: Any, path: str, code: str,
    param: str | None
) -> None:
    response = post(unreached_gateway, body, path)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["code"], error["param"], error["type"]) == (code, param, "invalid_request_error")
    assert error["message"]
    assert engine_received(unreached_engine, ("/v1/chat/completions", "/v1/completions", "/tokenize")) == []


def test_unknown_fields_pass_through_and_max_completion_tokens_is_also_sent_as_max_tokens(
    gateway: Gateway, qwen_engine: EngineHandle
) -> None:
    extras = {"top_k": 5, "chat_template_kwargs": {"enable_thinking": False}, "x_vendor": [1, {"a": None}]}
    response = post(gateway, chat(max_completion_tokens=7, max_tokens=4000, temperature=0, top_p=1, n=2,
                                  seed=-1, stop=["\n"], **extras))
    assert response.status_code == 200, response.text
    sent = engine_received(qwen_engine)[-1]
    assert {name: sent[name] for name in extras} == extras
    assert sent["max_completion_tokens"] == 7 and sent["max_tokens"] == 7


def test_an_oversized_body_is_413_from_its_content_length_and_while_reading(
    gateway: Gateway, qwen_engine: EngineHandle, settings: Any
) -> None:
    settings.GATEWAY_MAX_BODY_BYTES = 4096
    big = chat(messages=[{"role": "user", "content": "x" * 5000}])
    declared = post(gateway, big)
    assert declared.status_code == 413 and declared.json()["error"]["code"] == "request_too_large"

    def chunks() -> Iterator[bytes]:  # no content-length: the limit must hold while reading
        raw = orjson.dumps(big)
        for start in range(0, len(raw), 1000):
            yield raw[start:start + 1000]

    streamed = httpx.post(f"{gateway.base_url}/chat/completions", content=chunks(), timeout=15,
                          headers={**gateway.headers(), "content-type": "application/json"})
    assert streamed.status_code == 413 and streamed.json()["error"]["code"] == "request_too_large"
    assert post(gateway, chat()).status_code == 200
    assert len(engine_received(qwen_engine)) == 1


def test_an_idempotency_key_reused_with_another_body_is_422(gateway: Gateway, qwen_engine: EngineHandle) -> None:
    first = post(gateway, chat(), **{"idempotency-key": "job-17"})
    assert first.status_code == 200
    other = post(gateway, chat(messages=[{"role": "user", "content": "something else"}]), **{"idempotency-key": "job-17"})
    assert other.status_code == 422, other.text
    error = other.json()["error"]
    assert error["code"] == "idempotency_key_reused" and error["param"] == "Idempotency-Key"
    replay = post(gateway, chat(), **{"idempotency-key": "job-17"})
    assert replay.status_code == 200 and replay.headers["x-idempotent-replay"] == "true"
    assert len(engine_received(qwen_engine)) == 1


def test_five_failures_on_bodies_the_gateway_could_not_check_leave_the_lane_to_other_keys(
    fault_gateway: Gateway, upstream: CountingUpstream, key_owner: User, settings: Any
) -> None:
    """llama.cpp answers a body it chokes on with a 500 and its traceback: that neither
    reaches the client nor opens the lane's breaker for everyone else."""
    settings.GATEWAY_BREAKER_FAILURES = 2
    upstream.mode = "traceback_500"
    gateway = fault_gateway
    for _ in range(5):
        failed = post(gateway, chat(llama_grammar={"weird": True}))
        assert failed.status_code == 502
        message = failed.json()["error"]["message"]
        assert "Traceback" not in message and "/srv/" not in message and "HTTP 500" in message
    assert upstream.completions == 5
    upstream.mode = "ok"
    other_secret, _ = create_key(key_owner, name="other-team")
    assert post(gateway, chat(), secret=other_secret).status_code == 200
    assert upstream.completions == 6


def test_five_invalid_requests_from_one_key_leave_the_lane_answering_other_keys(
    gateway: Gateway, qwen_engine: EngineHandle, key_owner: User, settings: Any
) -> None:
    settings.GATEWAY_BREAKER_FAILURES = 2
    for body in (chat(temperature="hot"), chat(n="two"), chat(messages=[1, 2]), chat(stream=1), chat(tools=True)):
        assert post(gateway, body).status_code == 400
    other_secret, _ = create_key(key_owner, name="other-team")
    answer = post(gateway, chat(), secret=other_secret)
    assert answer.status_code == 200 and answer.headers["x-spark-lane"] == "qwen"
    assert len(engine_received(qwen_engine)) == 1


def test_a_dropped_connection_is_reported_as_such(fault_gateway: Gateway, upstream: CountingUpstream) -> None:
    upstream.mode = "reset"
    response = post(fault_gateway, chat())
    assert response.status_code == 502
    message = response.json()["error"]["message"]
    assert "closed the connection" in message or "reset the connection" in message, message
    assert "ConnectTimeout" not in message


def test_a_non_streaming_client_that_leaves_frees_its_slot_at_once(
    gateway: Gateway, qwen_engine: EngineHandle, key_owner: User
) -> None:
    """The lane is slow (60 s): the client gives up after 1 s. The gateway stops waiting on
    the lane and frees the key's only in-flight slot then, not 60 s later (clearing the
    fault does not shorten the first request's wait)."""
    secret, _ = create_key(key_owner, name="one-at-a-time", max_parallel=1)
    set_engine_faults(qwen_engine, latency_s=60.0)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{gateway.base_url}/chat/completions", json=chat(), headers=gateway.headers(secret),
                   timeout=httpx.Timeout(60, read=1.0))
    row = wait_for(lambda: RequestLog.objects.filter(error_code="client_disconnected").first(),
                   what="the abandoned request's log row")
    assert row.status == 499
    set_engine_faults(qwen_engine, clear=True)
    answer = post(gateway, chat(messages=[{"role": "user", "content": "next"}]), secret=secret)
    assert answer.status_code == 200, answer.text


def test_auto_chooses_only_among_the_keys_allowed_lanes(
    gateway: Gateway, qwen_engine: EngineHandle, second_engine: EngineHandle, key_owner: User
) -> None:
    make_lane("deepseek", second_engine.port, served="deepseek-test")
    secret, _ = create_key(key_owner, name="deepseek-only", allowed_lanes=["deepseek"])
    answer = post(gateway, {"model": "auto", "messages": MESSAGES}, secret=secret)
    assert answer.status_code == 200 and answer.headers["x-spark-lane"] == "deepseek"
    assert engine_received(qwen_engine) == []


def test_models_lists_only_lanes_that_can_answer_now(gateway: Gateway, second_engine: EngineHandle) -> None:
    make_lane("deepseek", second_engine.port, served="deepseek-test", state="stopped")
    gateway_invalidate("lanes")
    listed = wait_for(lambda: httpx.get(f"{gateway.base_url}/models", headers=gateway.headers()).json(),
                      what="the models list")
    assert [m["id"] for m in listed["data"]] == ["auto", "qwen-test"]
    Lane.objects.filter(name="qwen").update(observed_state="failed")
    gateway_invalidate("lanes")
    wait_for(lambda: [m["id"] for m in httpx.get(f"{gateway.base_url}/models", headers=gateway.headers())
                      .json()["data"]] == ["auto"], what="the failed lane to leave the list")


def test_a_models_request_with_a_body_is_read_within_a_small_bound(gateway: Gateway) -> None:
    """A models request carries no body: a stray one is read (nothing left in the socket), but
    one past 64 KiB is a 413, announced or not — it would escape the large bodies' pace and bound."""
    small = httpx.request("GET", f"{gateway.base_url}/models", headers=gateway.headers(), content=b"{}")
    assert small.status_code == 200 and small.json()["object"] == "list"
    announced = httpx.request("GET", f"{gateway.base_url}/models", headers=gateway.headers(),
                              content=b"x" * 100_000)
    unannounced = httpx.request("GET", f"{gateway.base_url}/models", headers=gateway.headers(),
                                content=iter([b"x" * 40_000, b"x" * 40_000]))
    for refused in (announced, unannounced):
        assert refused.status_code == 413
        error = refused.json()["error"]
        assert error["code"] == "request_too_large" and "65536 bytes (this request carries no body)" in error["message"]


def test_a_failed_authentication_is_counted_without_the_key(gateway: Gateway) -> None:
    wrong = "sk-spark-" + "q" * 40
    assert post(gateway, chat(), secret=wrong).status_code == 401
    assert httpx.get(f"{gateway.base_url}/models", headers={"authorization": f"Bearer {wrong}"}).status_code == 401
    rows = wait_for(lambda: list(RequestLog.objects.filter(status=401)) if RequestLog.objects.filter(
        status=401).count() == 2 else None, what="two refused requests in the log")
    for row in rows:
        assert row.key_id is None and row.error_code == "invalid_api_key"
        assert "q" * 10 not in repr(row.__dict__)
