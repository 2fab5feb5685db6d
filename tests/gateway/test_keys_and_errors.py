"""API keys at the gateway, and every error in OpenAI's shape with the right status; the
lanes are sparksim engines (real processes over HTTP)."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import openai
import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from gateway.models import ApiKey
from gateway.services import api_key_revoke
from lanes.models import Lane
from sparksim.standalone import EngineHandle
from tests.conftest import wait_for
from tests.gateway.conftest import SIM_SERVED, Gateway, create_key, engine_received, make_lane, set_engine_faults

MESSAGES = [{"role": "user", "content": "hi"}]
ERROR_FIELDS = {"message", "type", "param", "code"}


def sent(engine: EngineHandle, path: str = "/v1/chat/completions") -> int:
    return len(engine_received(engine, (path,)))


def post(gateway: Gateway, body: dict[str, Any], secret: str | None = None, path: str = "/v1/chat/completions",
         **headers: str) -> httpx.Response:
    return httpx.post(f"{gateway.url}{path}", json=body, headers={**gateway.headers(secret), **headers}, timeout=10)


def assert_error(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == ERROR_FIELDS and error["code"] == code
    assert response.headers["x-request-id"].startswith("req-")
    return error  # type: ignore[no-any-return]


def test_a_bad_or_missing_key_is_401(gateway: Gateway) -> None:
    assert_error(post(gateway, {"model": "qwen", "messages": MESSAGES}, secret="sk-spark-wrong"), 401, "invalid_api_key")
    bare = httpx.post(f"{gateway.base_url}/chat/completions", json={"model": "qwen", "messages": MESSAGES})
    assert_error(bare, 401, "invalid_api_key")
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=gateway.base_url, api_key="nope").models.list()


def test_a_revoked_key_is_refused_at_once(gateway: Gateway, qwen_engine: EngineHandle, key_owner: User) -> None:
    assert post(gateway, {"model": "qwen", "messages": MESSAGES}).status_code == 200  # now cached in the gateway
    api_key_revoke(actor=key_owner, key=ApiKey.objects.get(pk=gateway.key_id))
    assert_error(post(gateway, {"model": "qwen", "messages": MESSAGES}), 401, "invalid_api_key")
    assert sent(qwen_engine) == 1


def test_an_expired_key_is_refused(gateway: Gateway, key_owner: User) -> None:
    secret, key_id = create_key(key_owner, name="short-lived", expires_at=timezone.now() + timedelta(seconds=60))
    assert post(gateway, {"model": "qwen", "messages": MESSAGES}, secret=secret).status_code == 200
    ApiKey.objects.filter(pk=key_id).update(expires_at=timezone.now() - timedelta(seconds=1))
    from gateway.services import gateway_invalidate

    gateway_invalidate(f"key:{key_id}")
    wait_for(lambda: post(gateway, {"model": "qwen", "messages": MESSAGES}, secret=secret).status_code == 401,
             what="the expiry to reach the gateway")


def test_a_lane_outside_the_keys_allowed_lanes_is_403(
    gateway: Gateway, key_owner: User, second_engine: EngineHandle
) -> None:
    make_lane("deepseek", second_engine.port, served="deepseek-test")
    secret, _ = create_key(key_owner, name="qwen-only", allowed_lanes=["qwen"])
    assert_error(post(gateway, {"model": "deepseek", "messages": MESSAGES}, secret=secret), 403, "lane_not_allowed")
    assert post(gateway, {"model": "qwen", "messages": MESSAGES}, secret=secret).status_code == 200
    listed = httpx.get(f"{gateway.base_url}/models", headers=gateway.headers(secret)).json()
    assert [m["id"] for m in listed["data"]] == ["auto", SIM_SERVED]
    assert sent(second_engine) == 0


def test_a_key_pinned_to_a_lane_sends_auto_there(
    gateway: Gateway, key_owner: User, second_engine: EngineHandle
) -> None:
    make_lane("deepseek", second_engine.port, served="deepseek-test")
    secret, _ = create_key(key_owner, name="refactor-agent", default_route="deepseek")
    answer = post(gateway, {"model": "auto", "messages": MESSAGES}, secret=secret)
    assert answer.headers["x-spark-lane"] == "deepseek" and answer.headers["x-spark-route-reason"] == "key_default"
    assert sent(second_engine) == 1


def test_an_unknown_model_is_404_model_not_found(gateway: Gateway) -> None:
    error = assert_error(post(gateway, {"model": "gpt-9", "messages": MESSAGES}), 404, "model_not_found")
    assert error["param"] == "model"
    assert_error(post(gateway, {"model": "x", "messages": MESSAGES}, path="/lanes/nope/v1/chat/completions"),
                 404, "model_not_found")


def test_bad_bodies_are_400_naming_the_field(gateway: Gateway) -> None:
    assert assert_error(post(gateway, {"messages": MESSAGES}), 400, "missing_required_parameter")["param"] == "model"
    assert assert_error(post(gateway, {"model": "qwen"}), 400, "missing_required_parameter")["param"] == "messages"
    bad_json = httpx.post(f"{gateway.base_url}/chat/completions", content=b"{nope", headers=gateway.headers())
    assert_error(bad_json, 400, "invalid_json")
    assert assert_error(post(gateway, {"model": "qwen", "messages": MESSAGES, "max_tokens": -1}), 400,
                        "invalid_value")["param"] == "max_tokens"


def test_requests_per_minute_are_limited_across_the_gateway_with_retry_after(gateway: Gateway, key_owner: User) -> None:
    secret, _ = create_key(key_owner, name="slow-agent", rpm_limit=2)
    for _ in range(2):
        assert post(gateway, {"model": "qwen", "messages": MESSAGES}, secret=secret).status_code == 200
    refused = post(gateway, {"model": "qwen", "messages": MESSAGES}, secret=secret)
    assert_error(refused, 429, "rate_limit_exceeded")
    # A full current minute still weighs in the next one (sliding window): up to two minutes.
    assert 1 <= int(refused.headers["retry-after"]) <= 120
    assert refused.headers["x-should-retry"] == "true"


def test_tokens_per_minute_are_limited(gateway: Gateway, key_owner: User) -> None:
    secret, _ = create_key(key_owner, name="token-hungry", tpm_limit=10)
    assert post(gateway, {"model": "qwen", "max_tokens": 8, "messages": MESSAGES}, secret=secret).status_code == 200
    wait_for(lambda: post(gateway, {"model": "qwen", "messages": MESSAGES}, secret=secret).status_code == 429,
             what="the tokens to be counted")


def test_requests_in_flight_are_limited(gateway: Gateway, key_owner: User, qwen_engine: EngineHandle) -> None:
    import threading

    secret, _ = create_key(key_owner, name="one-at-a-time", max_parallel=1)
    set_engine_faults(qwen_engine, hold=True)  # the first stays in flight until the second was refused
    thread = threading.Thread(target=post, args=(gateway, {"model": "qwen", "messages": MESSAGES}, secret))
    thread.start()
    wait_for(lambda: sent(qwen_engine) == 1, what="the first request upstream")
    refused = post(gateway, {"model": "qwen", "messages": [{"role": "user", "content": "other"}]}, secret=secret)
    assert_error(refused, 429, "rate_limit_exceeded")
    set_engine_faults(qwen_engine, clear=True)
    thread.join(60)
    wait_for(lambda: post(gateway, {"model": "qwen", "messages": MESSAGES}, secret=secret).status_code == 200,
             what="the slot to be freed")


def test_a_prompt_longer_than_the_lanes_current_limit_is_400_before_sending(
    gateway: Gateway, second_engine: EngineHandle
) -> None:
    make_lane("deepseek", second_engine.port, served="deepseek-test", max_model_len=100_000, degraded_limit=1000,
              state="degraded")
    long_prompt = "word " * 900  # fits 100K, not the degraded 1000 with max_tokens 200
    error = assert_error(post(gateway, {"model": "deepseek", "max_tokens": 200,
                                        "messages": [{"role": "user", "content": long_prompt}]}),
                         400, "context_length_exceeded")
    assert "maximum context length is 1000 tokens" in error["message"]
    assert sent(second_engine, "/tokenize") == 1 and sent(second_engine) == 0
    short = post(gateway, {"model": "deepseek", "max_tokens": 10, "messages": MESSAGES})
    assert short.status_code == 200
    assert sent(second_engine, "/tokenize") == 1  # the cheap bound sufficed


def test_no_serving_lane_for_auto_is_503(gateway: Gateway, settings: Any) -> None:
    Lane.objects.filter(name="qwen").update(observed_state="stopped")
    settings.GATEWAY_DEFAULT_LANE = ""
    from gateway.services import gateway_invalidate

    gateway_invalidate("lanes")
    response = wait_for(lambda: (r := post(gateway, {"model": "auto", "messages": MESSAGES})).status_code == 503 and r,
                        what="the lane state to reach the gateway")
    assert_error(response, 503, "no_lane_available")
    assert int(response.headers["retry-after"]) >= 1


def test_unknown_endpoints_and_methods_answer_in_openai_shape(gateway: Gateway) -> None:
    assert_error(httpx.get(f"{gateway.base_url}/embeddings-nope", headers=gateway.headers()), 404, "unknown_url")
    wrong = httpx.get(f"{gateway.base_url}/chat/completions", headers=gateway.headers())
    assert wrong.status_code == 405 and wrong.json()["error"]["code"] == "method_not_allowed"


def test_prompt_text_is_logged_only_for_keys_that_opt_in(
    gateway: Gateway, key_owner: User, qwen_engine: EngineHandle
) -> None:
    from gateway.models import RequestLog

    secret, key_id = create_key(key_owner, name="audited", log_prompts=True)
    post(gateway, {"model": "qwen", "messages": [{"role": "user", "content": "remember this"}]}, secret=secret)
    post(gateway, {"model": "qwen", "messages": [{"role": "user", "content": "forget this"}]})
    rows = wait_for(lambda: list(RequestLog.objects.all()) if RequestLog.objects.count() == 2 else None,
                    what="two request log rows")
    by_key = {row.key_id: row for row in rows}
    assert by_key[key_id].prompt_text == "remember this"
    assert by_key[gateway.key_id].prompt_text == ""
    assert by_key[gateway.key_id].lane == "qwen" and by_key[gateway.key_id].route_reason == "explicit"
    counted = httpx.post(f"{qwen_engine.url}/tokenize",
                         json={"model": SIM_SERVED, "messages": [{"role": "user", "content": "forget this"}]})
    assert by_key[gateway.key_id].prompt_tokens == counted.json()["count"] and by_key[gateway.key_id].status == 200


def test_without_redis_the_gateway_fails_closed_in_openai_shape(
    asgi_server: Any, key_owner: User, qwen_engine: EngineHandle, settings: Any
) -> None:
    """Limits and idempotency cannot be checked: refuse rather than risk a double — a 503 the
    client may retry (nothing was sent upstream), never a 500."""
    from tests.conftest import free_port

    make_lane("qwen", qwen_engine.port, served=SIM_SERVED)
    secret, _ = create_key(key_owner)
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"  # read when the gateway's runtime starts
    response = httpx.post(f"{asgi_server.url}/v1/chat/completions", headers={"authorization": f"Bearer {secret}"},
                          json={"model": "qwen", "messages": MESSAGES}, timeout=30)
    error = assert_error(response, 503, "service_unavailable")
    assert error["type"] == "server_error" and response.headers["x-should-retry"] == "true"
    assert int(response.headers["retry-after"]) >= 1
    assert sent(qwen_engine) == 0


def test_a_redis_that_takes_calls_and_never_answers_fails_closed_in_bounded_time(
    asgi_server: Any, key_owner: User, qwen_engine: EngineHandle, settings: Any
) -> None:
    """A stalled Redis (it accepts the connection and the call, and answers nothing) is
    refused like an unreachable one after PORTAL_GATEWAY_REDIS_TIMEOUT_S, instead of holding
    the request (and every other one) until the client gives up."""
    make_lane("qwen", qwen_engine.port, served=SIM_SERVED)
    secret, _ = create_key(key_owner)
    with black_hole() as port:
        settings.REDIS_URL = f"redis://127.0.0.1:{port}/0"  # read when the gateway's runtime starts
        settings.GATEWAY_REDIS_TIMEOUT_S = 0.5
        response = httpx.post(f"{asgi_server.url}/v1/chat/completions",
                              headers={"authorization": f"Bearer {secret}"},
                              json={"model": "qwen", "messages": MESSAGES}, timeout=30)
    error = assert_error(response, 503, "service_unavailable")
    assert error["type"] == "server_error" and response.headers["x-should-retry"] == "true"
    assert int(response.headers["retry-after"]) >= 1
    assert sent(qwen_engine) == 0


@contextlib.contextmanager
def black_hole() -> Iterator[int]:
    """A TCP server that accepts connections and reads everything, and never writes a byte."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()
    accepted: list[socket.socket] = []

    def serve() -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                connection, _ = listener.accept()
                accepted.append(connection)  # kept open, never read from: the kernel buffers the calls

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield int(listener.getsockname()[1])
    finally:
        stop.set()
        thread.join()
        for connection in accepted:
            connection.close()
        listener.close()
