"""Exactly one upstream request per client request, whatever fails — and failover only
when the upstream provably never received the request. The lanes are sparksim engines with
their fault switches; the hand-written upstream only resets a connection after the request
arrived, which sparksim cannot do."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import openai
import pytest
from django.contrib.auth.models import User

from lanes.models import Lane
from sparksim.standalone import EngineHandle
from tests.conftest import wait_for
from tests.gateway.conftest import (
    Gateway,
    create_key,
    engine_received,
    make_lane,
    set_engine_faults,
    unused_port,
)
from tests.gateway.upstreams import CountingUpstream

MESSAGES = [{"role": "user", "content": "hi"}]


def client(gateway: Gateway, **kwargs: Any) -> openai.OpenAI:
    kwargs.setdefault("max_retries", 2)
    return openai.OpenAI(base_url=gateway.base_url, api_key=gateway.secret, **kwargs)


def sent(engine: EngineHandle) -> int:
    return len(engine_received(engine))


def test_a_connection_reset_after_sending_is_not_retried(fault_gateway: Gateway, upstream: CountingUpstream) -> None:
    upstream.mode = "reset"
    with pytest.raises(openai.APIStatusError) as caught:
        client(fault_gateway).chat.completions.create(model="qwen", messages=MESSAGES)  # type: ignore[arg-type]
    assert caught.value.status_code == 502
    assert caught.value.response.headers["x-should-retry"] == "false"
    assert upstream.completions == 1


def test_an_upstream_timeout_is_not_retried(gateway: Gateway, qwen_engine: EngineHandle, settings: Any) -> None:
    settings.GATEWAY_READ_TIMEOUT_S = 1.0
    set_engine_faults(qwen_engine, hold=True)  # the lane never answers in time, however slow the machine
    with pytest.raises(openai.APIStatusError) as caught:
        client(gateway).chat.completions.create(model="qwen", messages=MESSAGES)  # type: ignore[arg-type]
    assert caught.value.status_code == 504
    assert caught.value.body["code"] == "upstream_timeout"  # type: ignore[index]
    assert sent(qwen_engine) == 1


def test_an_upstream_5xx_is_not_retried(gateway: Gateway, qwen_engine: EngineHandle) -> None:
    set_engine_faults(qwen_engine, die=True)  # a dead vLLM answers 500
    with pytest.raises(openai.InternalServerError) as caught:
        client(gateway).chat.completions.create(model="qwen", messages=MESSAGES)  # type: ignore[arg-type]
    assert caught.value.status_code == 502
    assert sent(qwen_engine) == 1


def test_a_stream_that_dies_midway_ends_with_an_error_event(gateway: Gateway, qwen_engine: EngineHandle) -> None:
    set_engine_faults(qwen_engine, die_mid_stream_after_tokens=2)
    stream = client(gateway).chat.completions.create(
        model="qwen", stream=True, max_tokens=50, messages=MESSAGES, extra_body={"ignore_eos": True})  # type: ignore[arg-type]
    received = []
    with pytest.raises(openai.APIError) as caught:
        for chunk in stream:
            received.append(chunk)
    assert "the request is not sent again" in str(caught.value)
    assert len([c for c in received if c.choices and c.choices[0].delta.content]) == 2
    assert sent(qwen_engine) == 1
    set_engine_faults(qwen_engine, clear=True, die_mid_stream_after_tokens=2)
    raw = httpx.post(f"{gateway.base_url}/chat/completions", headers=gateway.headers(),
                     json={"model": "qwen", "stream": True, "max_tokens": 50, "ignore_eos": True, "messages": MESSAGES})
    assert raw.text.endswith('"code":"upstream_stream_interrupted"}}\n\ndata: [DONE]\n\n')


def test_a_client_retry_after_its_own_timeout_gets_the_first_answer(
    gateway: Gateway, qwen_engine: EngineHandle
) -> None:
    """The SDK times out and retries the same body (marked x-stainless-retry-count): the
    gateway answers 409 (retry later) while the first is in flight, then replays the first's
    answer. The lane holds the first request until the gateway has refused a retry, so the
    order is the same however slow the machine."""
    expected = httpx.post(f"{qwen_engine.url}/v1/chat/completions",
                          json={"model": "qwen-test", "max_tokens": 8, "messages": MESSAGES}).json()
    set_engine_faults(qwen_engine, hold=True)
    attempts: list[tuple[str | None, bytes]] = []
    answers: list[tuple[int, str | None]] = []

    def first_attempt_is_impatient(request: httpx.Request) -> None:
        attempts.append((request.headers.get("x-stainless-retry-count"), request.read()))
        if len(attempts) == 1:  # the lane holds it: this attempt times out, whatever the machine's speed
            request.extensions["timeout"] = httpx.Timeout(60, read=0.5).as_dict()

    def on_answer(response: httpx.Response) -> None:
        answers.append((response.status_code, response.headers.get("x-idempotent-replay")))
        if response.status_code == 409:
            set_engine_faults(qwen_engine, hold=False)  # the first request may finish now

    hooks: dict[str, list[Any]] = {"request": [first_attempt_is_impatient], "response": [on_answer]}
    with httpx.Client(event_hooks=hooks) as http_client:
        completion = client(gateway, timeout=60, max_retries=20, http_client=http_client).chat.completions.create(
            model="qwen", max_tokens=8, messages=MESSAGES)  # type: ignore[arg-type]
    assert completion.choices[0].message.content == expected["choices"][0]["message"]["content"]
    # Timed out, refused, replayed: retries of one body.
    assert [count for count, _ in attempts] == [str(n) for n in range(len(attempts))] and len(attempts) >= 3
    assert {body for _, body in attempts} == {attempts[0][1]}
    assert answers[0][0] == 409 and answers[-1] == (200, "true"), answers
    assert sent(qwen_engine) == 2  # the direct call above, and the client's request once


def test_a_repeated_idempotency_key_is_refused_while_in_flight_then_replayed(
    gateway: Gateway, qwen_engine: EngineHandle
) -> None:
    set_engine_faults(qwen_engine, hold=True)  # the first stays in flight until the second was refused
    headers = {**gateway.headers(), "idempotency-key": "stainless-python-retry-1"}
    body = {"model": "qwen", "max_tokens": 8, "messages": MESSAGES}
    first: dict[str, httpx.Response] = {}
    thread = threading.Thread(target=lambda: first.setdefault(
        "r", httpx.post(f"{gateway.base_url}/chat/completions", headers=headers, json=body, timeout=60)))
    thread.start()
    wait_for(lambda: sent(qwen_engine) == 1, what="the first request upstream")
    second = httpx.post(f"{gateway.base_url}/chat/completions", headers=headers, json=body)
    assert second.status_code == 409
    assert second.json()["error"]["code"] == "idempotent_request_in_flight"
    assert second.headers["x-should-retry"] == "true" and int(second.headers["retry-after"]) >= 1
    set_engine_faults(qwen_engine, hold=False)
    thread.join(60)
    assert first["r"].status_code == 200
    wait_for(lambda: httpx.post(f"{gateway.base_url}/chat/completions", headers=headers,
                                json=body).status_code == 200, what="the finished answer to be kept")
    third = httpx.post(f"{gateway.base_url}/chat/completions", headers=headers, json=body)
    assert third.headers["x-idempotent-replay"] == "true"
    assert third.json() == first["r"].json()
    assert sent(qwen_engine) == 1


def test_a_streamed_answer_is_replayed_for_its_idempotency_key(gateway: Gateway, qwen_engine: EngineHandle) -> None:
    headers = {**gateway.headers(), "idempotency-key": "stream-1"}
    body = {"model": "qwen", "stream": True, "max_tokens": 8, "messages": MESSAGES}
    first = httpx.post(f"{gateway.base_url}/chat/completions", headers=headers, json=body)
    replay = wait_for(lambda: (r := httpx.post(f"{gateway.base_url}/chat/completions", headers=headers, json=body))
                      .headers.get("x-idempotent-replay") and r, what="the replay")
    assert replay.text == first.text and replay.headers["content-type"] == "text/event-stream"
    assert sent(qwen_engine) == 1


def test_a_refused_connection_fails_over_to_the_fallback(gateway: Gateway, second_engine: EngineHandle) -> None:
    backup = make_lane("deepseek", second_engine.port, served="deepseek-test")
    make_lane("broken", unused_port(), fallback=backup)
    raw = client(gateway).chat.completions.with_raw_response.create(
        model="broken", max_tokens=8, messages=MESSAGES)  # type: ignore[arg-type]
    assert raw.headers["x-spark-lane"] == "deepseek" and raw.headers["x-spark-route-reason"] == "fallback"
    assert [body["model"] for body in engine_received(second_engine)] == ["deepseek-test"]


@pytest.mark.parametrize("fault", [{"hold": True}, {"die": True}])
def test_it_never_fails_over_once_the_lane_may_have_the_request(
    gateway: Gateway, qwen_engine: EngineHandle, second_engine: EngineHandle, settings: Any,
    fault: dict[str, object]
) -> None:
    settings.GATEWAY_READ_TIMEOUT_S = 1.0
    set_engine_faults(qwen_engine, **fault)
    Lane.objects.filter(name="qwen").update(fallback=make_lane("deepseek", second_engine.port, served="deepseek-test"))
    with pytest.raises(openai.APIStatusError):
        client(gateway).chat.completions.create(model="qwen", messages=MESSAGES)  # type: ignore[arg-type]
    assert sent(qwen_engine) == 1
    assert sent(second_engine) == 0


def test_a_reset_after_the_request_arrived_never_fails_over(
    fault_gateway: Gateway, upstream: CountingUpstream, second_upstream: CountingUpstream
) -> None:
    upstream.mode = "reset"
    Lane.objects.filter(name="qwen").update(fallback=make_lane("deepseek", second_upstream.port))
    with pytest.raises(openai.APIStatusError):
        client(fault_gateway).chat.completions.create(model="qwen", messages=MESSAGES)  # type: ignore[arg-type]
    assert upstream.completions == 1
    assert second_upstream.completions == 0


def test_a_lane_that_is_not_serving_goes_to_its_fallback_else_503(
    gateway: Gateway, qwen_engine: EngineHandle, second_engine: EngineHandle
) -> None:
    backup = make_lane("deepseek", second_engine.port, served="deepseek-test")
    make_lane("starting", qwen_engine.port, state="starting", fallback=backup)
    raw = client(gateway).chat.completions.with_raw_response.create(
        model="starting", max_tokens=8, messages=MESSAGES)  # type: ignore[arg-type]
    assert raw.headers["x-spark-lane"] == "deepseek"
    make_lane("failed", qwen_engine.port, state="failed")
    with pytest.raises(openai.InternalServerError) as caught:
        client(gateway, max_retries=0).chat.completions.create(model="failed", messages=MESSAGES)  # type: ignore[arg-type]
    assert caught.value.status_code == 503 and caught.value.body["code"] == "no_lane_available"  # type: ignore[index]
    assert sent(qwen_engine) == 0 and sent(second_engine) == 1


def test_an_open_circuit_sends_to_the_fallback_without_touching_the_lane(
    gateway: Gateway, qwen_engine: EngineHandle, second_engine: EngineHandle, settings: Any, key_owner: User
) -> None:
    settings.GATEWAY_BREAKER_FAILURES = 2
    settings.GATEWAY_BREAKER_COOLDOWN_S = 60
    set_engine_faults(qwen_engine, die=True)
    Lane.objects.filter(name="qwen").update(fallback=make_lane("deepseek", second_engine.port, served="deepseek-test"))
    plain = client(gateway, max_retries=0)
    other_secret, _ = create_key(key_owner, name="other-team")
    other = openai.OpenAI(base_url=gateway.base_url, api_key=other_secret, max_retries=0)
    for caller in (plain, other):  # 5xx answers are evidence against the lane across keys (gateway.breaker)
        with pytest.raises(openai.InternalServerError):
            caller.chat.completions.create(model="qwen", messages=MESSAGES)  # type: ignore[arg-type]
    raw = plain.chat.completions.with_raw_response.create(model="qwen", max_tokens=8, messages=MESSAGES)  # type: ignore[arg-type]
    assert raw.headers["x-spark-lane"] == "deepseek"
    assert sent(qwen_engine) == 2 and sent(second_engine) == 1


def test_a_lane_saved_in_the_portal_reaches_the_gateway_without_waiting_for_the_cache(
    gateway: Gateway, settings: Any
) -> None:
    settings.GATEWAY_LANE_CACHE_TTL_S = 600  # only the change message can explain a quick update
    assert client(gateway).chat.completions.create(model="qwen", max_tokens=4, messages=MESSAGES).choices  # type: ignore[arg-type]
    lane = Lane.objects.get(name="qwen")
    lane.observed_state = "stopped"
    lane.save()
    # Well before the 600 s cache lifetime (a request racing the change message may still pass).
    wait_for(lambda: httpx.post(f"{gateway.base_url}/chat/completions", headers=gateway.headers(),
                                json={"model": "qwen", "max_tokens": 4, "messages": MESSAGES}).status_code == 503,
             what="the stopped lane to be skipped")


def test_a_retry_of_a_timed_out_request_gets_the_same_error_not_a_second_send(
    gateway: Gateway, qwen_engine: EngineHandle, settings: Any
) -> None:
    settings.GATEWAY_READ_TIMEOUT_S = 1.0
    set_engine_faults(qwen_engine, hold=True)  # the lane never answers in time
    headers = {**gateway.headers(), "idempotency-key": "agent-42"}
    body = {"model": "qwen", "messages": MESSAGES}
    first = httpx.post(f"{gateway.base_url}/chat/completions", headers=headers, json=body, timeout=60)
    assert first.status_code == 504
    again = wait_for(lambda: (r := httpx.post(f"{gateway.base_url}/chat/completions", headers=headers, json=body))
                     .headers.get("x-idempotent-replay") and r, what="the recorded answer")
    assert again.status_code == 504 and again.json() == first.json()
    assert sent(qwen_engine) == 1
