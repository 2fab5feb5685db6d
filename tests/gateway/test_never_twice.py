"""Exactly one upstream request per client request, whatever fails — and failover only
when the upstream provably never received the request."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import openai
import pytest

from lanes.models import Lane
from tests.gateway.conftest import Gateway, make_lane, unused_port
from tests.gateway.upstreams import CountingUpstream

MESSAGES = [{"role": "user", "content": "hi"}]


def client(gateway: Gateway, **kwargs: Any) -> openai.OpenAI:
    kwargs.setdefault("max_retries", 2)
    return openai.OpenAI(base_url=gateway.base_url, api_key=gateway.secret, **kwargs)


def test_a_connection_reset_after_sending_is_not_retried(gateway: Gateway, upstream: CountingUpstream) -> None:
    upstream.mode = "reset"
    with pytest.raises(openai.APIStatusError) as caught:
        client(gateway).chat.completions.create(model="qwen", messages=MESSAGES)  # type: ignore[arg-type]
    assert caught.value.status_code == 502
    assert caught.value.response.headers["x-should-retry"] == "false"
    assert upstream.completions == 1


def test_an_upstream_timeout_is_not_retried(gateway: Gateway, upstream: CountingUpstream, settings: Any) -> None:
    settings.GATEWAY_READ_TIMEOUT_S = 1.0
    upstream.mode, upstream.hang_s = "hang", 3.0
    with pytest.raises(openai.APIStatusError) as caught:
        client(gateway).chat.completions.create(model="qwen", messages=MESSAGES)  # type: ignore[arg-type]
    assert caught.value.status_code == 504
    assert caught.value.body["code"] == "upstream_timeout"  # type: ignore[index]
    assert upstream.completions == 1


def test_an_upstream_5xx_is_not_retried(gateway: Gateway, upstream: CountingUpstream) -> None:
    upstream.mode = "500"
    with pytest.raises(openai.InternalServerError) as caught:
        client(gateway).chat.completions.create(model="qwen", messages=MESSAGES)  # type: ignore[arg-type]
    assert caught.value.status_code == 502
    assert upstream.completions == 1


def test_a_stream_that_dies_midway_ends_with_an_error_event(gateway: Gateway, upstream: CountingUpstream) -> None:
    upstream.mode = "die_mid_stream"
    stream = client(gateway).chat.completions.create(model="qwen", stream=True, messages=MESSAGES)  # type: ignore[arg-type]
    received = []
    with pytest.raises(openai.APIError) as caught:
        for chunk in stream:
            received.append(chunk)
    assert "the request is not sent again" in str(caught.value)
    assert len(received) == 2
    assert upstream.completions == 1
    raw = httpx.post(f"{gateway.base_url}/chat/completions", headers=gateway.headers(),
                     json={"model": "qwen", "stream": True, "messages": MESSAGES})
    assert raw.text.endswith('"code":"upstream_stream_interrupted"}}\n\ndata: [DONE]\n\n')


def test_a_client_retry_after_its_own_timeout_gets_the_first_answer(
    gateway: Gateway, upstream: CountingUpstream
) -> None:
    """The SDK times out, retries with the same Idempotency-Key: the gateway answers 409
    (retry later) while the first is in flight, then replays the first's answer."""
    upstream.mode, upstream.hang_s = "hang", 2.0
    completion = client(gateway, timeout=0.5).chat.completions.create(model="qwen", messages=MESSAGES)  # type: ignore[arg-type]
    assert completion.choices[0].message.content == "Hello from qwen-test choice 0."
    assert upstream.completions == 1


def test_a_repeated_idempotency_key_is_refused_while_in_flight_then_replayed(
    gateway: Gateway, upstream: CountingUpstream
) -> None:
    upstream.mode, upstream.hang_s = "hang", 1.5
    headers = {**gateway.headers(), "idempotency-key": "stainless-python-retry-1"}
    body = {"model": "qwen", "messages": MESSAGES}
    first: dict[str, httpx.Response] = {}
    thread = threading.Thread(target=lambda: first.setdefault(
        "r", httpx.post(f"{gateway.base_url}/chat/completions", headers=headers, json=body, timeout=10)))
    thread.start()
    from tests.conftest import wait_for

    wait_for(lambda: upstream.completions == 1, what="the first request upstream")
    second = httpx.post(f"{gateway.base_url}/chat/completions", headers=headers, json=body)
    assert second.status_code == 409
    assert second.json()["error"]["code"] == "idempotent_request_in_flight"
    assert second.headers["x-should-retry"] == "true" and int(second.headers["retry-after"]) >= 1
    thread.join(10)
    assert first["r"].status_code == 200
    wait_for(lambda: httpx.post(f"{gateway.base_url}/chat/completions", headers=headers, json=body).status_code == 200,
             what="the finished answer to be kept")
    third = httpx.post(f"{gateway.base_url}/chat/completions", headers=headers, json=body)
    assert third.headers["x-idempotent-replay"] == "true"
    assert third.json() == first["r"].json()
    assert upstream.completions == 1


def test_a_streamed_answer_is_replayed_for_its_idempotency_key(gateway: Gateway, upstream: CountingUpstream) -> None:
    headers = {**gateway.headers(), "idempotency-key": "stream-1"}
    body = {"model": "qwen", "stream": True, "messages": MESSAGES}
    first = httpx.post(f"{gateway.base_url}/chat/completions", headers=headers, json=body)
    from tests.conftest import wait_for

    replay = wait_for(lambda: (r := httpx.post(f"{gateway.base_url}/chat/completions", headers=headers, json=body))
                      .headers.get("x-idempotent-replay") and r, what="the replay")
    assert replay.text == first.text and replay.headers["content-type"] == "text/event-stream"
    assert upstream.completions == 1


def test_a_refused_connection_fails_over_to_the_fallback(
    gateway: Gateway, upstream: CountingUpstream, second_upstream: CountingUpstream
) -> None:
    backup = make_lane("deepseek", second_upstream.port, served="deepseek-test")
    make_lane("broken", unused_port(), fallback=backup)
    raw = client(gateway).chat.completions.with_raw_response.create(model="broken", messages=MESSAGES)  # type: ignore[arg-type]
    assert raw.headers["x-spark-lane"] == "deepseek" and raw.headers["x-spark-route-reason"] == "fallback"
    assert second_upstream.bodies[0]["model"] == "deepseek-test"
    assert second_upstream.completions == 1


@pytest.mark.parametrize("mode", ["hang", "500", "reset"])
def test_it_never_fails_over_once_the_lane_may_have_the_request(
    gateway: Gateway, upstream: CountingUpstream, second_upstream: CountingUpstream, settings: Any, mode: str
) -> None:
    settings.GATEWAY_READ_TIMEOUT_S = 1.0
    upstream.mode, upstream.hang_s = mode, 3.0
    Lane.objects.filter(name="qwen").update(fallback=make_lane("deepseek", second_upstream.port))
    with pytest.raises(openai.APIStatusError):
        client(gateway).chat.completions.create(model="qwen", messages=MESSAGES)  # type: ignore[arg-type]
    assert upstream.completions == 1
    assert second_upstream.completions == 0


def test_a_lane_that_is_not_serving_goes_to_its_fallback_else_503(
    gateway: Gateway, upstream: CountingUpstream, second_upstream: CountingUpstream
) -> None:
    backup = make_lane("deepseek", second_upstream.port)
    make_lane("starting", upstream.port, state="starting", fallback=backup)
    raw = client(gateway).chat.completions.with_raw_response.create(model="starting", messages=MESSAGES)  # type: ignore[arg-type]
    assert raw.headers["x-spark-lane"] == "deepseek"
    make_lane("failed", upstream.port, state="failed")
    with pytest.raises(openai.InternalServerError) as caught:
        client(gateway, max_retries=0).chat.completions.create(model="failed", messages=MESSAGES)  # type: ignore[arg-type]
    assert caught.value.status_code == 503 and caught.value.body["code"] == "no_lane_available"  # type: ignore[index]
    assert upstream.completions == 0


def test_an_open_circuit_sends_to_the_fallback_without_touching_the_lane(
    gateway: Gateway, upstream: CountingUpstream, second_upstream: CountingUpstream, settings: Any
) -> None:
    settings.GATEWAY_BREAKER_FAILURES = 2
    settings.GATEWAY_BREAKER_COOLDOWN_S = 60
    upstream.mode = "500"
    Lane.objects.filter(name="qwen").update(fallback=make_lane("deepseek", second_upstream.port))
    plain = client(gateway, max_retries=0)
    for _ in range(2):
        with pytest.raises(openai.InternalServerError):
            plain.chat.completions.create(model="qwen", messages=MESSAGES)  # type: ignore[arg-type]
    raw = plain.chat.completions.with_raw_response.create(model="qwen", messages=MESSAGES)  # type: ignore[arg-type]
    assert raw.headers["x-spark-lane"] == "deepseek"
    assert upstream.completions == 2 and second_upstream.completions == 1


def test_a_lane_saved_in_the_portal_reaches_the_gateway_without_waiting_for_the_cache(
    gateway: Gateway, upstream: CountingUpstream, settings: Any
) -> None:
    settings.GATEWAY_LANE_CACHE_TTL_S = 600  # only the change message can explain a quick update
    assert client(gateway).chat.completions.create(model="qwen", messages=MESSAGES).choices  # type: ignore[arg-type]
    lane = Lane.objects.get(name="qwen")
    lane.observed_state = "stopped"
    lane.save()
    from tests.conftest import wait_for

    # Well before the 600 s cache lifetime (a request racing the change message may still pass).
    wait_for(lambda: httpx.post(f"{gateway.base_url}/chat/completions", headers=gateway.headers(),
                                json={"model": "qwen", "messages": MESSAGES}).status_code == 503,
             what="the stopped lane to be skipped")


def test_a_retry_of_a_timed_out_request_gets_the_same_error_not_a_second_send(
    gateway: Gateway, upstream: CountingUpstream, settings: Any
) -> None:
    settings.GATEWAY_READ_TIMEOUT_S = 1.0
    upstream.mode, upstream.hang_s = "hang", 3.0
    headers = {**gateway.headers(), "idempotency-key": "agent-42"}
    body = {"model": "qwen", "messages": MESSAGES}
    first = httpx.post(f"{gateway.base_url}/chat/completions", headers=headers, json=body, timeout=10)
    assert first.status_code == 504
    from tests.conftest import wait_for

    again = wait_for(lambda: (r := httpx.post(f"{gateway.base_url}/chat/completions", headers=headers, json=body))
                     .headers.get("x-idempotent-replay") and r, what="the recorded answer")
    assert again.status_code == 504 and again.json() == first.json()
    assert again.headers["x-should-retry"] == "false"
    assert upstream.completions == 1
