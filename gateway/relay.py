"""Relaying the lane's answer to the client: whole JSON answers, and SSE streams event by
event. Both feed the circuit breaker and fill the request's Outcome; neither ever sends
the request again."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import orjson
from django.conf import settings

from gateway.directory import LaneInfo
from gateway.http import Receive, Send, send_bytes, send_error
from gateway.outcome import SSE_HEADERS, Outcome, make_record
from gateway.request import ParsedRequest
from gateway.runtime import GatewayRuntime
from gateway.tokens import USAGE_ESTIMATE, count_usage
from gateway.upstream import UpstreamResponse, describe_failure, is_timeout
from gateway.wire import (
    SSE_DONE,
    GatewayError,
    StreamFilter,
    answer_text,
    error_event,
    stream_answer,
    upstream_error,
    usage_event,
    usage_from,
    usage_payload,
)

log = logging.getLogger(__name__)
# A stream is read back for counting only when its lane sent no usage; beyond this many
# bytes the rest is estimated from its length rather than kept.
COUNT_KEEP_MAX = 1024 * 1024


def lost_request_recorded(exc: BaseException, outcome: Outcome) -> GatewayError:
    """The error for a request the lane may have, kept as the answer a retry will get."""
    error = lost_request(exc)
    outcome.record = make_record(error.status, b"J", outcome.lane, error.body())
    return error


def lost_request(exc: BaseException) -> GatewayError:
    if is_timeout(exc):
        return GatewayError(504, "The lane did not answer in time; the request is not sent again.",
                            code="upstream_timeout", type_="server_error", retryable=False)
    what = describe_failure(exc)
    return GatewayError(502, f"The request reached the lane, then {what}; it is not sent again.",
                        code="upstream_connection_error", type_="server_error", retryable=False)


def judge_answer(breaker: Any, status: int, *, validated: bool) -> None:
    """Feed the lane's breaker from an HTTP answer. A lane that answers is alive: a 500 to a
    body carrying fields the gateway could not check (engine extras) may be that body's
    fault, not the lane's, so it counts as an answer like any other. 502/503/504
    (overloaded, dying) and a 500 to a fully validated body are error answers: evidence
    only across keys (gateway.breaker)."""
    if status >= 500 and (validated or status != 500):
        breaker.record_error_answer()
    else:
        breaker.record_success()


def judge_failure(breaker: Any, exc: BaseException, sent_at: float) -> None:
    """Feed the lane's breaker from a send or read that failed: a timeout counts only when
    the replica made no progress meanwhile (gateway.breaker); anything else always."""
    if is_timeout(exc):
        breaker.record_timeout(sent_at)
    else:
        breaker.record_failure()


async def relay_whole(send: Send, response: UpstreamResponse, breaker: Any, outcome: Outcome, sent_at: float,
                      *, rt: GatewayRuntime, lane: LaneInfo, request: ParsedRequest) -> None:
    headers_at = breaker.note_progress()
    try:
        content = await response.aread()
    except Exception as exc:
        judge_failure(breaker, exc, headers_at)
        raise lost_request_recorded(exc, outcome) from None
    breaker.note_progress()
    outcome.upstream_ms = (time.perf_counter() - sent_at) * 1000
    judge_answer(breaker, response.status_code, validated=request.validated)
    if response.status_code != 200:
        if response.status_code >= 500:
            log.warning("gateway: lane %s answered %d to request %s: %r", lane.name, response.status_code,
                        outcome.request_id, content[:500])
        error = upstream_error(response.status_code, content)
        outcome.status, outcome.error_code = error.status, error.code
        outcome.record = make_record(error.status, b"J", outcome.lane, error.body())
        outcome.answered = True
        await send_error(send, error, outcome.headers())
        return
    try:
        payload = orjson.loads(content)
    except orjson.JSONDecodeError:
        payload = None
    outcome.usage = usage_from(payload)
    if isinstance(payload, dict) and answered_fewer_choices(payload, request):
        rt.ignores_n[lane.name] = time.monotonic()
        error = n_unsupported(lane.name)
        outcome.status, outcome.error_code = error.status, error.code
        outcome.record = make_record(error.status, b"J", outcome.lane, error.body())
        outcome.answered = True
        await send_error(send, error, outcome.headers())
        return
    if isinstance(payload, dict) and (outcome.usage.prompt_tokens is None or outcome.usage.completion_tokens is None):
        # The lane reported no usage: count it, and give the client the usage OpenAI always sends.
        outcome.usage, outcome.usage_source = await count_usage(rt, lane, request, answer_text(payload),
                                                                outcome.usage)
        payload["usage"] = usage_payload(outcome.usage.prompt_tokens or 0, outcome.usage.completion_tokens or 0)
        content = orjson.dumps(payload)
    outcome.status = 200
    outcome.record = make_record(200, b"J", outcome.lane, content)  # cheap: kept only if needed
    outcome.answered = True
    await send_bytes(send, 200, content, outcome.headers())


def answered_fewer_choices(payload: dict[str, Any], request: ParsedRequest) -> bool:
    n = request.body.get("n")
    choices = payload.get("choices")
    return isinstance(n, int) and n > 1 and isinstance(choices, list) and len(choices) < n


IGNORES_N_REMEMBER_S = 600.0  # a relaunched lane may run another engine: ask again later


def lane_ignores_n(rt: GatewayRuntime, lane: str) -> bool:
    since = rt.ignores_n.get(lane)
    if since is not None and time.monotonic() - since > IGNORES_N_REMEMBER_S:
        del rt.ignores_n[lane]
        return False
    return since is not None


def n_unsupported(lane: str) -> GatewayError:
    """A lane that ignores `n` (llama.cpp answers one choice): refused, never a short answer."""
    return GatewayError(400, f"The lane `{lane}` does not support `n` > 1 (it answers a single choice); "
                        "send n=1, or one request per choice.", code="unsupported_value", param="n",
                        retryable=False)


async def relay_stream(
    send: Send, response: UpstreamResponse, request: ParsedRequest,
    breaker: Any, outcome: Outcome, sent_at: float, *, rt: GatewayRuntime, lane: LaneInfo,
) -> None:
    stream_filter = StreamFilter(client_wants_usage=request.client_wants_usage)
    keep: list[bytes] | None = [] if outcome.keep_answer else None
    kept, keep_limit = 0, settings.GATEWAY_IDEMPOTENCY_MAX_BYTES
    # Holding references to the chunks already sent costs no copy; they are read back only
    # if the lane sends no usage.
    relayed: list[bytes] = []
    relayed_bytes = 0
    gone = outcome.gone
    outcome.status = 200
    await send({"type": "http.response.start", "status": 200, "headers": [*SSE_HEADERS, *outcome.headers()]})
    failure: GatewayError | None = None
    last_byte = breaker.note_progress()  # a stall counts against the lane unless another request progressed since
    try:
        async for chunk in response.stream:
            last_byte = breaker.note_progress()
            if outcome.ttft_ms is None:
                outcome.ttft_ms = (time.perf_counter() - outcome.started) * 1000
            out = stream_filter.feed(chunk)
            if out:
                relayed_bytes += len(out)
                if relayed_bytes <= COUNT_KEEP_MAX:
                    relayed.append(out)
                if keep is not None:
                    kept += len(out)
                    if kept > keep_limit:  # too large to replay: stop holding it in memory
                        keep, outcome.keep_answer = None, False
                    else:
                        keep.append(out)
                await send({"type": "http.response.body", "body": out, "more_body": True})
                if stream_filter.saw_done and not stream_filter.held_done:
                    # The client has its whole answer and may hang up now (the openai SDK
                    # does on [DONE]): that is not a client leaving mid-answer.
                    outcome.answered = True
            if gone.is_set():  # the client left: stop the lane's work too
                break
    except Exception as exc:
        judge_failure(breaker, exc, last_byte)
        failure = lost_request(exc) if is_timeout(exc) else GatewayError(
            502, f"The lane's stream broke off: {describe_failure(exc)}; the request is not sent again.",
            code="upstream_stream_interrupted", type_="server_error", retryable=False)
    outcome.upstream_ms = (time.perf_counter() - sent_at) * 1000
    outcome.usage = stream_filter.usage
    tail = await stream_tail(failure, stream_filter, relayed, relayed_bytes, breaker, outcome,
                             rt=rt, lane=lane, request=request)
    if keep is not None:
        keep.append(tail)
    outcome.answered = True
    await send({"type": "http.response.body", "body": tail, "more_body": False})
    if keep is not None:
        joined = b"".join(keep)
        outcome.record = make_record(200, b"S", outcome.lane, joined)


async def stream_tail(
    failure: GatewayError | None, stream_filter: StreamFilter, relayed: list[bytes], relayed_bytes: int,
    breaker: Any, outcome: Outcome, *, rt: GatewayRuntime, lane: LaneInfo, request: ParsedRequest,
) -> bytes:
    """What ends the client's stream once the lane's has ended (or the client left): an
    error event if the lane broke it off or closed it before [DONE], else what the filter
    held back, with the usage chunk counted here if the lane sent none. Feeds the breaker
    (a failure that was an exception was judged where it was caught)."""
    if failure is None and not stream_filter.saw_done and not outcome.gone.is_set():
        failure = GatewayError(502, "The lane closed the stream before it finished; the request is not sent again.",
                               code="upstream_stream_interrupted", type_="server_error", retryable=False)
        breaker.record_failure()
    if failure is not None:
        outcome.error_code = failure.code
        return error_event(failure.message, type_=failure.type, code=failure.code) + SSE_DONE
    breaker.record_success()
    tail = stream_filter.leftover()
    if stream_filter.held_done:
        tail += await counted_usage_tail(rt, lane, request, outcome, b"".join(relayed),
                                         relayed_bytes - min(relayed_bytes, COUNT_KEEP_MAX))
    return tail


async def counted_usage_tail(rt: GatewayRuntime, lane: LaneInfo, request: ParsedRequest, outcome: Outcome,
                             relayed: bytes, unread_bytes: int) -> bytes:
    """The lane ended its stream without usage: count it (the tokens-per-minute limit and
    the request log need it) and, if the client asked, send the usage chunk before [DONE]."""
    answer = stream_answer(relayed)
    outcome.usage, outcome.usage_source = await count_usage(rt, lane, request, answer.text, outcome.usage)
    if unread_bytes and outcome.usage.completion_tokens is not None:
        # Too long to keep whole: the rest is taken to say as much per byte as what was read.
        scale = (len(relayed) + unread_bytes) / max(1, len(relayed))
        outcome.usage.completion_tokens = int(outcome.usage.completion_tokens * scale)
        outcome.usage_source = USAGE_ESTIMATE
    head = usage_event(answer.head, outcome.usage, chat="messages" in request.body) \
        if request.client_wants_usage else b""
    return head + SSE_DONE


async def watch_disconnect(receive: Receive, outcome: Outcome, cancel: asyncio.Task[Any] | None,
                           on_leave: Callable[[], None] | None = None) -> None:
    """Set `outcome.gone` (call `on_leave`, and cancel the request's task, if given) when the
    client leaves before its whole answer was sent; the server also reports a disconnect
    once the response is complete, which is not a client leaving."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            if not outcome.answered:
                outcome.gone.set()
                if on_leave is not None:
                    on_leave()
                if cancel is not None:
                    cancel.cancel()
            return
