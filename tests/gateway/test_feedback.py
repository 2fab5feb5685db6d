"""POST /v1/feedback through the real gateway: an agent rates its own requests (or a whole
conversation); another key's request, bad fields and a flood are refused in OpenAI's shape."""

from __future__ import annotations

import time
from typing import Any

import httpx
import orjson
import pytest
import redis
from django.conf import settings

from gateway.feedback import FEEDBACK_PER_MINUTE, parse_feedback
from gateway.models import RequestLog, RequestOutcome
from gateway.wire import GatewayError
from tests.conftest import wait_for
from tests.gateway.conftest import Gateway, create_key

ERROR_FIELDS = {"message", "type", "param", "code"}


def chat(gateway: Gateway, messages: list[dict[str, str]], secret: str | None = None) -> str:
    response = httpx.post(f"{gateway.base_url}/chat/completions", headers=gateway.headers(secret), timeout=30,
                          json={"model": "qwen", "messages": messages, "max_tokens": 4})
    assert response.status_code == 200, response.text
    request_id = response.headers["x-request-id"]
    wait_for(lambda: RequestLog.objects.filter(request_id=request_id).exists(), what="the request's log row")
    return request_id


def feedback(gateway: Gateway, body: Any, secret: str | None = None) -> httpx.Response:
    return httpx.post(f"{gateway.base_url}/feedback", json=body, headers=gateway.headers(secret), timeout=10)


def error_of(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == ERROR_FIELDS and error["code"] == code
    assert response.headers["x-request-id"].startswith("req-")
    return error  # type: ignore[no-any-return]


def test_an_agent_rates_its_own_request_and_a_later_rating_replaces_it(gateway):
    request_id = chat(gateway, [{"role": "user", "content": "What port does SSH use?"}])
    answer = feedback(gateway, {"request_id": request_id, "score": True, "task": "review", "comment": "right"})
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"object": "feedback", "request_id": request_id, "score": 1.0, "scope": "request", "requests": 1}
    assert answer.headers["x-request-id"].startswith("req-")
    row = RequestOutcome.objects.get(request_id=request_id)
    assert (row.key_id, row.score, row.task, row.comment, row.conversation) == (gateway.key_id, 1.0, "review", "right", False)
    assert feedback(gateway, {"request_id": request_id, "score": 0.25}).status_code == 200
    assert RequestOutcome.objects.get(request_id=request_id).score == 0.25
    assert RequestOutcome.objects.count() == 1


def test_feedback_on_another_keys_request_is_refused_like_an_unknown_one(gateway, key_owner):
    theirs = chat(gateway, [{"role": "user", "content": "What is DNS?"}])
    other_secret, _ = create_key(key_owner, name="other-agent")
    refused = error_of(feedback(gateway, {"request_id": theirs, "score": 1}, secret=other_secret), 404, "request_not_found")
    unknown = error_of(feedback(gateway, {"request_id": "req-unknown", "score": 1}, secret=other_secret), 404,
                       "request_not_found")
    assert refused["param"] == unknown["param"] == "request_id"
    assert refused["message"].replace(theirs, "X") == unknown["message"].replace("req-unknown", "X")
    assert not RequestOutcome.objects.exists()


def test_a_conversation_outcome_attaches_to_every_request_of_that_conversation(gateway):
    opening = [{"role": "system", "content": "You are the migration agent."},
               {"role": "user", "content": "Port this snippet to Python 3."}]
    first = chat(gateway, opening)
    second = chat(gateway, [*opening, {"role": "assistant", "content": "Done."}, {"role": "user", "content": "Now the tests."}])
    unrelated = chat(gateway, [{"role": "user", "content": "What is the capital of Peru?"}])
    answer = feedback(gateway, {"request_id": second, "score": False, "scope": "conversation", "task": "migration"})
    assert answer.status_code == 200 and answer.json()["requests"] == 2
    assert set(RequestOutcome.objects.values_list("request_id", "score", "conversation")) == {
        (first, 0.0, True), (second, 0.0, True)}
    assert not RequestOutcome.objects.filter(request_id=unrelated).exists()


@pytest.mark.parametrize(("body", "param"), [
    ({"score": 1}, "request_id"),
    ({"request_id": "req-x", "score": 1.5}, "score"),
    ({"request_id": "req-x", "score": "good"}, "score"),
    ({"request_id": "req-x"}, "score"),
    ({"request_id": "req-x", "score": 1, "comment": "x" * 2001}, "comment"),
    ({"request_id": "req-x", "score": 1, "task": "a\\nb"}, "task"),
    ({"request_id": "req-x", "score": 1, "scope": "everything"}, "scope"),
    ({"request_id": "req-x", "score": 1, "rating": 5}, "rating"),
])
def test_a_bad_field_is_named_with_its_rule(body, param):
    body = {k: (v.replace("\\n", "\n") if isinstance(v, str) else v) for k, v in body.items()}
    with pytest.raises(GatewayError) as caught:
        parse_feedback(orjson.dumps(body))
    assert (caught.value.status, caught.value.param) == (400, param)


def test_bad_feedback_through_the_gateway_is_400_and_stores_nothing(gateway):
    request_id = chat(gateway, [{"role": "user", "content": "hi"}])
    assert error_of(feedback(gateway, {"request_id": request_id, "score": 7}), 400, "invalid_request")["param"] == "score"
    bad_json = httpx.post(f"{gateway.base_url}/feedback", content=b"{nope", headers=gateway.headers(), timeout=10)
    error_of(bad_json, 400, "invalid_json")
    assert not RequestOutcome.objects.exists()


def test_feedback_needs_a_key_and_a_post(gateway):
    error_of(httpx.post(f"{gateway.base_url}/feedback", json={"request_id": "r", "score": 1}, timeout=10), 401,
             "invalid_api_key")
    wrong = httpx.get(f"{gateway.base_url}/feedback", headers=gateway.headers(), timeout=10)
    error_of(wrong, 405, "method_not_allowed")
    assert wrong.headers["allow"] == "POST"


def test_a_flood_of_feedback_is_rate_limited_per_key(gateway, key_owner):
    request_id = chat(gateway, [{"role": "user", "content": "hi"}])
    client = redis.Redis.from_url(settings.REDIS_URL)
    window = int(time.time() // 60)
    # This minute's budget is spent (and the next one's, should it turn now).
    counters = [f"{settings.REDIS_PREFIX}:feedback:{gateway.key_id}:{w}" for w in (window, window + 1)]
    try:
        for name in counters:
            client.set(name, FEEDBACK_PER_MINUTE, ex=180)
        error = error_of(feedback(gateway, {"request_id": request_id, "score": 1}), 429, "rate_limit_exceeded")
        assert str(FEEDBACK_PER_MINUTE) in error["message"] and not RequestOutcome.objects.exists()
        other_secret, _ = create_key(key_owner, name="other-agent")  # another key has its own budget
        error_of(feedback(gateway, {"request_id": request_id, "score": 1}, secret=other_secret), 404, "request_not_found")
    finally:  # key ids come back in the next test's database
        client.delete(*counters)
