"""The breaker opens on evidence that the lane is unhealthy, not on what one client does:
one key's bodies that a strict lane answers with a 500 never switch the lane off for
another key (5xx answers count across keys), and waiting in a full lane's queue past the
read timeout is overload, not failure — while a lane that answers nothing still opens it."""

from __future__ import annotations

import threading
from typing import Any

import httpx
from django.contrib.auth.models import User

from tests.conftest import wait_for
from tests.gateway.conftest import Gateway, create_key
from tests.gateway.upstreams import CountingUpstream


def chat(gateway: Gateway, secret: str | None = None, timeout: float = 30, **fields: Any) -> httpx.Response:
    body = {"model": "qwen", "messages": [{"role": "user", "content": "hi"}], **fields}
    return httpx.post(f"{gateway.base_url}/chat/completions", headers=gateway.headers(secret), json=body,
                      timeout=timeout)


def test_one_keys_500_causing_bodies_never_open_the_breaker_for_another_key(
    fault_gateway: Gateway, upstream: CountingUpstream, key_owner: User, settings: Any
) -> None:
    settings.GATEWAY_BREAKER_FAILURES = 2
    upstream.mode = "strict_null"  # "temperature": null is valid for OpenAI; this lane answers 500
    for attempt in range(6):
        failed = chat(fault_gateway, temperature=None, messages=[{"role": "user", "content": f"try {attempt}"}])
        assert failed.status_code == 502 and failed.json()["error"]["code"] == "upstream_error"
    other, _ = create_key(key_owner, name="other-team")
    answer = chat(fault_gateway, other)
    assert answer.status_code == 200, answer.text
    assert upstream.completions == 7
    # 5xx answers from two keys are evidence against the lane: now it opens.
    assert chat(fault_gateway, other, temperature=None).status_code == 502
    assert chat(fault_gateway, temperature=None).status_code == 502
    refused = chat(fault_gateway, other)
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "no_lane_available"
    assert upstream.completions == 9


def test_waiting_in_a_full_lane_past_the_read_timeout_does_not_open_the_breaker(
    fault_gateway: Gateway, upstream: CountingUpstream, key_owner: User, settings: Any
) -> None:
    """The lane runs one request at a time: a long stream, and key X's flood queued behind it
    gets no byte within the read timeout (504 each). The lane made progress all along (the
    stream's tokens): key Y is served once the queue drains, not refused by an open breaker."""
    settings.GATEWAY_READ_TIMEOUT_S = 1.0
    settings.GATEWAY_BREAKER_FAILURES = 2
    upstream.one_at_a_time, upstream.word_delay_s, upstream.text = True, 0.2, " ".join(["token"] * 25)
    long: dict[str, httpx.Response] = {}
    thread = threading.Thread(target=lambda: long.setdefault("r", chat(fault_gateway, stream=True)))
    thread.start()
    wait_for(lambda: upstream.completions == 1, what="the long stream to hold the lane")
    for _ in range(3):
        queued = chat(fault_gateway)
        assert queued.status_code == 504 and queued.json()["error"]["code"] == "upstream_timeout"
    thread.join(30)
    assert long["r"].status_code == 200 and long["r"].text.endswith("data: [DONE]\n\n")
    other, _ = create_key(key_owner, name="other-team")
    wait_for(lambda: upstream.completions == 4 and not upstream._slot.locked(), what="the queue to drain")
    answer = chat(fault_gateway, other)
    assert answer.status_code == 200, answer.text


def test_a_lane_that_answers_nothing_still_opens_the_breaker(
    fault_gateway: Gateway, upstream: CountingUpstream, key_owner: User, settings: Any
) -> None:
    settings.GATEWAY_READ_TIMEOUT_S = 1.0
    settings.GATEWAY_BREAKER_FAILURES = 2
    upstream.mode = "hold"  # no progress at all: a hung engine
    for _ in range(2):
        assert chat(fault_gateway).status_code == 504
    other, _ = create_key(key_owner, name="other-team")
    refused = chat(fault_gateway, other)
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "no_lane_available"
    assert upstream.completions == 2
