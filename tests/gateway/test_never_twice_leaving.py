"""A client that gives up while the lane still holds its answer's headers, then retries (the
official SDK on its own timeout, or a caller repeating its Idempotency-Key): the lane gets
the request once. The counting upstream holds the headers until the test lets it go, so
every attempt leaves before any answer, however slow the machine."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from gateway.models import RequestLog
from tests.conftest import wait_for
from tests.gateway.conftest import Gateway
from tests.gateway.upstreams import CountingUpstream

MESSAGES = [{"role": "user", "content": "hi"}]


def impatient_client(gateway: Gateway) -> openai.OpenAI:
    """The SDK as callers use it: a short timeout and its default retries (2)."""
    return openai.OpenAI(base_url=gateway.base_url, api_key=gateway.secret, timeout=1.5)


def sent_and_left(request_count: int) -> list[RequestLog]:
    rows = list(RequestLog.objects.filter(error_code="client_disconnected"))
    return rows if len(rows) >= request_count else []


@pytest.mark.parametrize("stream", [True, False])
def test_sdk_retries_after_its_timeout_reach_a_holding_lane_once(
    fault_gateway: Gateway, upstream: CountingUpstream, stream: bool
) -> None:
    upstream.mode = "hold"
    with pytest.raises((openai.APIStatusError, openai.APITimeoutError)) as caught:
        answer = impatient_client(fault_gateway).chat.completions.create(
            model="qwen", messages=MESSAGES, stream=stream)  # type: ignore[call-overload]
        if stream:
            list(answer)
    if isinstance(caught.value, openai.APIStatusError):  # a retry was told the request is not sent twice
        assert caught.value.status_code == 409, caught.value
    upstream.let_go()
    assert upstream.completions == 1
    if stream:  # the row of the attempt that left shows where it went (a stream's leaving cancels it)
        row = wait_for(lambda: sent_and_left(1), what="the log row of the attempt that left")[0]
        assert row.status == 499 and row.lane == "qwen" and row.replica == 0


@pytest.mark.parametrize("stream", [True, False])
def test_three_attempts_with_one_idempotency_key_reach_a_holding_lane_once(
    fault_gateway: Gateway, upstream: CountingUpstream, stream: bool
) -> None:
    upstream.mode = "hold"
    headers = {**fault_gateway.headers(), "idempotency-key": f"leave-{stream}"}
    body: dict[str, Any] = {"model": "qwen", "messages": MESSAGES, "stream": stream}
    answers = []
    for _ in range(3):
        try:
            answers.append(httpx.post(f"{fault_gateway.base_url}/chat/completions", headers=headers, json=body,
                                      timeout=httpx.Timeout(30, read=1.0)))
        except httpx.ReadTimeout:
            answers.append(None)
    assert answers[0] is None  # the first left while the lane held it
    for retry in answers[1:]:
        if retry is not None:
            assert retry.status_code == 409 and retry.headers["x-should-retry"] in {"true", "false"}, retry.text
            assert retry.json()["error"]["code"] in {"idempotent_request_in_flight", "idempotent_request_done"}
    upstream.let_go()
    assert upstream.completions == 1
    if stream:
        wait_for(lambda: upstream.completions == 1 and sent_and_left(1), what="the first attempt's log row")
        done = httpx.post(f"{fault_gateway.base_url}/chat/completions", headers=headers, json=body)
        assert done.status_code == 409 and done.json()["error"]["code"] == "idempotent_request_done"
        assert done.headers["x-should-retry"] == "false"
        assert upstream.completions == 1
