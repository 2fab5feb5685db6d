"""Never twice across a Redis that loses its memory, and a Redis outage answered as a
retryable 503: a real redis-server of the test's own, restarted (without persistence, as
make run's embedded one) or stopped, in front of the counting upstream."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest

from gateway.models import KeyedRequest
from tests.conftest import wait_for
from tests.gateway.conftest import Gateway
from tests.gateway.redis_server import RedisServer
from tests.gateway.upstreams import CountingUpstream


def post(gateway: Gateway, headers: dict[str, str] | None = None, **fields: Any) -> httpx.Response:
    body = {"model": "qwen", "messages": [{"role": "user", "content": "hi"}], **fields}
    return httpx.post(f"{gateway.base_url}/chat/completions", headers={**gateway.headers(), **(headers or {})},
                      json=body, timeout=30)


def once_redis_answers(send: Any) -> httpx.Response:
    """The first answer that is not the 503 of a gateway still reconnecting to Redis."""
    return wait_for(lambda: (r := send()).status_code != 503 and r, what="an answer past the reconnection")


@pytest.mark.parametrize("stream", [False, True])
def test_a_finished_keyed_request_resent_after_a_redis_restart_is_not_sent_again(
    own_redis: RedisServer, fault_gateway: Gateway, upstream: CountingUpstream, stream: bool
) -> None:
    key = {"idempotency-key": f"restart-{stream}"}
    assert post(fault_gateway, key, stream=stream).status_code == 200
    wait_for(lambda: KeyedRequest.objects.filter(done=True).exists(), what="the request's durable trace done")
    own_redis.restart()
    again = once_redis_answers(lambda: post(fault_gateway, key, stream=stream))
    assert again.status_code == 409 and again.json()["error"]["code"] == "idempotent_request_done", again.text
    assert again.headers["x-should-retry"] == "false"
    assert upstream.completions == 1
    other = post(fault_gateway, {"idempotency-key": "a-new-one"}, stream=stream)  # a new key still runs
    assert other.status_code == 200 and upstream.completions == 2


def test_a_keyed_request_in_flight_across_a_redis_restart_is_not_sent_again(
    own_redis: RedisServer, fault_gateway: Gateway, upstream: CountingUpstream
) -> None:
    """An explicit key's first attempt waits for its answer; an SDK's first attempt times out
    (its client leaves, as the SDK does before it retries) while Redis restarts."""
    upstream.mode = "hold"
    key = {"idempotency-key": "in-flight-restart"}
    sdk_first, sdk_retry = {"x-stainless-retry-count": "0"}, {"x-stainless-retry-count": "1"}
    first: dict[str, httpx.Response] = {}
    gave_up: list[BaseException] = []

    def impatient_sdk() -> None:
        try:
            httpx.post(f"{fault_gateway.base_url}/chat/completions", headers={**fault_gateway.headers(), **sdk_first},
                       json={"model": "qwen", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 9},
                       timeout=httpx.Timeout(30, read=3.0))
        except httpx.ReadTimeout as exc:
            gave_up.append(exc)

    threads = [threading.Thread(target=lambda: first.setdefault("key", post(fault_gateway, key))),
               threading.Thread(target=impatient_sdk)]
    for thread in threads:
        thread.start()
    wait_for(lambda: upstream.completions == 2, what="both requests upstream")
    own_redis.restart()
    again = once_redis_answers(lambda: post(fault_gateway, key))
    assert again.status_code == 409 and again.json()["error"]["code"] == "idempotent_request_in_flight", again.text
    threads[1].join(30)
    assert gave_up  # the SDK's client left; its retry of the same body follows
    wait_for(lambda: KeyedRequest.objects.count() == 2, what="the left request's durable trace")
    retried = post(fault_gateway, sdk_retry, max_tokens=9)
    assert retried.status_code == 409 and retried.json()["error"]["code"] == "idempotent_request_in_flight"
    upstream.let_go()
    threads[0].join(30)
    assert first["key"].status_code == 200
    # It finished after the restart: its answer is in the new Redis, and is replayed.
    replay = wait_for(lambda: (r := post(fault_gateway, key)).headers.get("x-idempotent-replay") and r,
                      what="the first one's answer kept")
    assert replay.status_code == 200 and replay.json() == first["key"].json()
    assert upstream.completions == 2


def test_a_redis_outage_is_a_retryable_503_and_nothing_goes_upstream(
    own_redis: RedisServer, fault_gateway: Gateway, upstream: CountingUpstream
) -> None:
    assert post(fault_gateway).status_code == 200
    own_redis.stop()
    for headers in ({}, {"idempotency-key": "during-outage"}, {"x-stainless-retry-count": "0"}):
        refused = post(fault_gateway, headers)
        assert refused.status_code == 503, refused.text
        error = refused.json()["error"]
        assert error["code"] == "service_unavailable" and error["type"] == "server_error"
        assert "not sent" in error["message"]
        assert int(refused.headers["retry-after"]) >= 1 and refused.headers["x-should-retry"] == "true"
    assert upstream.completions == 1
    own_redis.start()
    assert once_redis_answers(lambda: post(fault_gateway, {"idempotency-key": "during-outage"})).status_code == 200
    assert upstream.completions == 2
