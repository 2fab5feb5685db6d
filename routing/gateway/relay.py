"""Relaying the lane's answer to the client: whole JSON answers, and SSE streams event by
event. Both feed the circuit breaker and fill the request's Outcome; neither ever sends
the request again."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import orjson
from django.conf import settings

from routing.gateway.http import Receive, Send, send_bytes, send_error
from routing.gateway.outcome import SSE_HEADERS, Outcome, make_record
from routing.gateway.upstream import is_timeout
from routing.gateway.wire import (
    SSE_DONE,
    GatewayError,
    ParsedRequest,
    StreamFilter,
    error_event,
    upstream_error,
    usage_from,
)


def lost_request_recorded(exc: BaseException, outcome: Outcome) -> GatewayError:
    """The error for a request the lane may have, kept as the answer a retry will get."""
    error = lost_request(exc)
    outcome.record = make_record(error.status, b"J", outcome.lane, error.body())
    return error


def lost_request(exc: BaseException) -> GatewayError:
    if is_timeout(exc):
        return GatewayError(504, "The lane did not answer in time; the request is not sent again.",
                            code="upstream_timeout", type_="server_error", retryable=False)
    return GatewayError(502, f"The connection to the lane failed after the request was sent ({type(exc).__name__}); "
                        "it is not sent again.", code="upstream_connection_error", type_="server_error",
                        retryable=False)


async def relay_whole(send: Send, response: httpx.Response, breaker: Any, outcome: Outcome, sent_at: float) -> None:
    try:
        content = await response.aread()
    except Exception as exc:
        breaker.record_failure()
        raise lost_request_recorded(exc, outcome) from None
    outcome.upstream_ms = (time.perf_counter() - sent_at) * 1000
    if response.status_code >= 500:
        breaker.record_failure()
    else:
        breaker.record_success()
    if response.status_code != 200:
        error = upstream_error(response.status_code, content)
        outcome.status, outcome.error_code = error.status, error.code
        outcome.record = make_record(error.status, b"J", outcome.lane, error.body())
        await send_error(send, error, outcome.headers())
        return
    try:
        payload = orjson.loads(content)
    except orjson.JSONDecodeError:
        payload = None
    outcome.usage = usage_from(payload)
    outcome.status = 200
    outcome.record = make_record(200, b"J", outcome.lane, content)  # cheap: kept only if needed
    await send_bytes(send, 200, content, outcome.headers())


async def relay_stream(
    send: Send, response: httpx.Response, request: ParsedRequest,
    breaker: Any, outcome: Outcome, sent_at: float,
) -> None:
    stream_filter = StreamFilter(client_wants_usage=request.client_wants_usage)
    keep: list[bytes] | None = [] if outcome.keep_answer else None
    kept, keep_limit = 0, settings.GATEWAY_IDEMPOTENCY_MAX_BYTES
    gone = outcome.gone
    outcome.status = 200
    await send({"type": "http.response.start", "status": 200, "headers": [*SSE_HEADERS, *outcome.headers()]})
    failure: GatewayError | None = None
    try:
        # The transport's byte stream itself: httpx's aiter_raw adds a generator layer and
        # bookkeeping per chunk that this relay does not need (errors are mapped either way).
        async for chunk in response.stream:  # type: ignore[union-attr]
            if outcome.ttft_ms is None:
                outcome.ttft_ms = (time.perf_counter() - outcome.started) * 1000
            out = stream_filter.feed(chunk)
            if out:
                if keep is not None:
                    kept += len(out)
                    if kept > keep_limit:  # too large to replay: stop holding it in memory
                        keep, outcome.keep_answer = None, False
                    else:
                        keep.append(out)
                await send({"type": "http.response.body", "body": out, "more_body": True})
            if gone.is_set():  # the client left: stop the lane's work too
                break
    except Exception as exc:
        failure = lost_request(exc) if is_timeout(exc) else GatewayError(
            502, f"The lane's stream broke off ({type(exc).__name__}); the request is not sent again.",
            code="upstream_stream_interrupted", type_="server_error", retryable=False)
    outcome.upstream_ms = (time.perf_counter() - sent_at) * 1000
    outcome.usage = stream_filter.usage
    if failure is None and not stream_filter.saw_done and not gone.is_set():
        failure = GatewayError(502, "The lane closed the stream before it finished; the request is not sent again.",
                               code="upstream_stream_interrupted", type_="server_error", retryable=False)
    if failure is not None:
        breaker.record_failure()
        outcome.error_code = failure.code
        tail = error_event(failure.message, type_=failure.type, code=failure.code) + SSE_DONE
    else:
        breaker.record_success()
        tail = stream_filter.leftover()
    if keep is not None:
        keep.append(tail)
    await send({"type": "http.response.body", "body": tail, "more_body": False})
    if keep is not None:
        joined = b"".join(keep)
        outcome.record = make_record(200, b"S", outcome.lane, joined)


async def watch_disconnect(receive: Receive, gone: asyncio.Event) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            gone.set()
            return
