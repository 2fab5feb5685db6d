"""POST /v1/feedback: an agent tells how one of its requests (or a whole conversation) went.

    {"request_id": "req-…", "score": true | 0.0-1.0, "comment": "…", "task": "refactor",
     "scope": "request" | "conversation"}

The key may only rate its own requests: another key's request id is answered exactly like
an unknown one (404), so ids leak nothing. Rate-limited per key (FEEDBACK_PER_MINUTE).
Errors in OpenAI's shape, naming the field and the rule."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import orjson
from django.conf import settings

from core.db import db_call
from gateway.http import Receive, Scope, Send, authenticate, check_declared_length, read_body, send_bytes, send_error
from gateway.outcome import new_request_id
from gateway.request import json_object
from gateway.runtime import GatewayRuntime, runtime
from gateway.services import FeedbackRefused, request_outcome_record
from gateway.wire import GatewayError

FEEDBACK_BODY_LIMIT = 16 * 1024
FEEDBACK_BODY_RULE = "a feedback body is at most 16 KiB"
# Chosen with perf/router.py's ingestion run: an agent rates each of its requests, far under this.
FEEDBACK_PER_MINUTE = 600
COMMENT_MAX = 2000
TASK_MAX = 64
FIELDS = {"request_id", "score", "comment", "task", "scope"}


@dataclass(frozen=True)
class Feedback:
    request_id: str
    score: float
    comment: str
    task: str
    conversation: bool


def _invalid(param: str, message: str) -> GatewayError:
    return GatewayError(400, message, code="invalid_request", param=param)


def parse_feedback(raw: bytes) -> Feedback:
    """The body, checked field by field (pure)."""
    body = json_object(raw)
    unknown = sorted(set(body) - FIELDS)
    if unknown:
        raise _invalid(unknown[0], f"Unknown field `{unknown[0]}`: feedback takes {', '.join(sorted(FIELDS))}.")
    request_id = body.get("request_id")
    if not isinstance(request_id, str) or not request_id or len(request_id) > 40:
        raise _invalid("request_id", "`request_id` is required: the `x-request-id` header of the answer rated.")
    score = body.get("score")
    if isinstance(score, bool):
        value = 1.0 if score else 0.0
    elif isinstance(score, int | float) and 0 <= score <= 1:
        value = float(score)
    else:
        raise _invalid("score", "`score` is required: true/false, or a number from 0 (failure) to 1 (success).")
    comment = body.get("comment", "")
    if not isinstance(comment, str) or len(comment) > COMMENT_MAX:
        raise _invalid("comment", f"`comment` is a string of at most {COMMENT_MAX} characters.")
    task = body.get("task", "")
    if not isinstance(task, str) or len(task) > TASK_MAX or any(ord(c) < 32 for c in task):
        raise _invalid("task", f"`task` is a tag of at most {TASK_MAX} printable characters (e.g. refactor).")
    scope = body.get("scope", "request")
    if scope not in ("request", "conversation"):
        raise _invalid("scope", "`scope` is `request` (this request) or `conversation` (every request of its conversation).")
    return Feedback(request_id, value, comment, task.strip(), scope == "conversation")


async def _rate_limit(rt: GatewayRuntime, key_id: int) -> None:
    window = int(time.time() // 60)
    name = f"{settings.REDIS_PREFIX}:feedback:{key_id}:{window}"
    count = await rt.redis.incr(name)
    if count == 1:
        await rt.redis.expire(name, 120)
    if count > FEEDBACK_PER_MINUTE:
        raise GatewayError(429, f"Rate limit reached: at most {FEEDBACK_PER_MINUTE} feedback requests a minute per key.",
                           code="rate_limit_exceeded", type_="requests", retry_after_s=60 - time.time() % 60,
                           retryable=True)


async def handle_feedback(scope: Scope, receive: Receive, send: Send) -> None:
    rt = runtime()
    headers = [(b"x-request-id", new_request_id().encode())]
    try:
        key = await authenticate(rt, scope)
        check_declared_length(scope, FEEDBACK_BODY_LIMIT, FEEDBACK_BODY_RULE)
        raw = await read_body(receive, FEEDBACK_BODY_LIMIT, rule=FEEDBACK_BODY_RULE)
        await _rate_limit(rt, key.id)
        feedback = parse_feedback(raw)
        try:
            count = await db_call(request_outcome_record, key_id=key.id, request_id=feedback.request_id,
                                  score=feedback.score, comment=feedback.comment, task=feedback.task,
                                  conversation=feedback.conversation)
        except FeedbackRefused as exc:
            raise GatewayError(exc.status, exc.message, code=exc.code, param=exc.param) from None
        body: dict[str, Any] = {"object": "feedback", "request_id": feedback.request_id, "score": feedback.score,
                                "scope": "conversation" if feedback.conversation else "request", "requests": count}
        await send_bytes(send, 200, orjson.dumps(body), headers)
    except GatewayError as error:
        await send_error(send, error, headers)
