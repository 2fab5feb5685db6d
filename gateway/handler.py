"""One completion request, end to end: key → body → lane → admission (limits and
idempotency, one Redis round trip) → context guard → exactly one upstream send →
answer relayed → release, log and mirror after the answer.

The rule that keeps a request from ever being sent twice: the gateway tries the next lane
(the fallback) only while nothing has been sent — lane not serving, circuit open, or the
TCP connection refused. Once a connection is open, whatever happens (timeout, reset,
5xx, death mid-stream) the client gets an error and the request is not sent again; the
answer tells the official SDKs not to retry (`x-should-retry: false`), and a retry that
comes anyway with the same Idempotency-Key is answered from Redis, never upstream."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import random
import time
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from core.db import db_call
from gateway import limits
from gateway.admission import admit, refuse, release, trace_left
from gateway.budgets import budget_call
from gateway.capture import stored_prompt
from gateway.choose import RouteDecision, choose_lane
from gateway.directory import KeyInfo, LaneInfo
from gateway.fair import PRIORITY_HEADER, flow_of, request_class
from gateway.guard import check_context
from gateway.http import (
    Receive,
    Scope,
    Send,
    authenticate,
    check_declared_length,
    declared_length,
    header,
    read_body,
    send_error,
)
from gateway.judge import judge_after_answer, to_judge
from gateway.keys import key_names, key_namespace
from gateway.large import request_of
from gateway.large_pool import HELD, POOL, Holding
from gateway.mirror import LARGE_MIRRORS, answer_text, mirror_enabled, mirror_replay
from gateway.models import RouteReason
from gateway.outcome import Outcome, new_request_id
from gateway.relay import (
    judge_failure,
    lane_ignores_n,
    lost_request_recorded,
    n_unsupported,
    relay_stream,
    relay_whole,
    watch_disconnect,
)
from gateway.replicas import affinity_key
from gateway.request import ParsedRequest, parse_request, prompt_text, upstream_body
from gateway.route import conversation_digest, last_user_text
from gateway.runtime import GatewayRuntime, runtime
from gateway.services import captured_prompt_store
from gateway.shared_files import SharedBody, busy_error, read_shared_body
from gateway.upstream import provably_not_received, upstream_send
from gateway.wire import GatewayError

log = logging.getLogger(__name__)
UPSTREAM_PATHS = {"chat.completions": "/v1/chat/completions", "completions": "/v1/completions"}
MAX_FALLBACK_HOPS = 3


def fallback_chain(first: LaneInfo, lanes: dict[str, LaneInfo] | Any, key: KeyInfo) -> list[LaneInfo]:
    chain, seen, lane = [first], {first.name}, first
    while lane.fallback and len(chain) <= MAX_FALLBACK_HOPS:
        nxt = lanes.get(lane.fallback)
        if nxt is None or nxt.name in seen:
            break
        seen.add(nxt.name)
        if key.may_use(nxt.name):
            chain.append(nxt)
        lane = nxt
    return chain


def auto_alternatives(request: ParsedRequest, lanes: dict[str, LaneInfo] | Any, key: KeyInfo) -> list[LaneInfo]:
    """The lanes model="auto" could have chosen (serving, the key's), for the context guard's
    answer; a request that names its lane has none."""
    if request.body.get("model") != "auto":
        return []
    return [lane for lane in lanes.values() if lane.serving and key.may_use(lane.name)]


def large_body_limit() -> int:
    return settings.GATEWAY_LARGE_BODY_WORKERS + settings.GATEWAY_LARGE_BODY_QUEUE


async def read_request_body(scope: Scope, receive: Receive, limit: int, holding: Holding) -> bytes | SharedBody:
    """A body that announces a large length goes straight into shared memory (when it can).
    A large body counts in the process's held bytes (HELD, its key's or team's share) from
    before its first byte when its length is announced, else as it grows."""
    rate = settings.GATEWAY_LARGE_BODY_BYTES_PER_S
    if declared_large(scope):
        declared = int(header(scope, b"content-length") or 0)
        holding.grow_to(declared)
        shared = await read_shared_body(receive, declared, rate=rate)
        if shared is not None:
            return shared
    return await read_body(receive, limit, paced_after=settings.GATEWAY_LARGE_BODY_BYTES, rate=rate,
                           grow=holding.grow_to)


async def parse_body(raw: bytes | SharedBody, endpoint: str, key: KeyInfo, flow: str) -> ParsedRequest:
    """Parsed and validated here, or (a large body) in a worker process: gateway.large,
    gateway.large_pool (a place of the pool's, `flow`'s share)."""
    if isinstance(raw, bytes) and len(raw) <= settings.GATEWAY_LARGE_BODY_BYTES:
        return parse_request(raw, endpoint=endpoint, max_n=settings.GATEWAY_MAX_N)
    inspection = await POOL.inspect(
        raw, flow=flow, endpoint=endpoint, max_n=settings.GATEWAY_MAX_N,
        affinity_messages=settings.ROUTER_AFFINITY_MESSAGES,
        want_prompt=key.log_prompts, workers=settings.GATEWAY_LARGE_BODY_WORKERS,
        queue=settings.GATEWAY_LARGE_BODY_QUEUE, niceness=settings.GATEWAY_LARGE_BODY_NICENESS)
    return request_of(inspection, raw)


def declared_large(scope: Scope) -> bool:
    declared = declared_length(scope)
    return declared is not None and declared > settings.GATEWAY_LARGE_BODY_BYTES


async def handle_completion(scope: Scope, receive: Receive, send: Send, *, endpoint: str, path_lane: str | None) -> None:
    rt = runtime()
    outcome = Outcome(request_id=new_request_id(), started=time.perf_counter())
    key: KeyInfo | None = None
    request: ParsedRequest | None = None
    holding: Holding | None = None
    try:
        body_limit = settings.GATEWAY_MAX_BODY_BYTES
        check_declared_length(scope, body_limit)
        key = await authenticate(rt, scope)
        # Both bounds on large bodies are shared per key, or team (gateway.large_pool.admits).
        flow = flow_of(key)[0]
        if declared_large(scope) and POOL.full(large_body_limit(), flow):
            raise busy_error()  # before reading a byte of it
        holding = HELD.hold(settings.GATEWAY_LARGE_BODY_HELD_MAX_BYTES, flow, largest=body_limit)
        body = await read_request_body(scope, receive, body_limit, holding)
        request = await parse_body(body, endpoint, key, flow)
        outcome.priority = request_class(key, header(scope, PRIORITY_HEADER.encode()))
        raw = body if isinstance(body, bytes) else b""  # a large body is in request.large
        del body
        lanes = await rt.lanes.get()
        try:
            decision = await choose_lane(model=request.model, path_lane=path_lane, key=key, body=request.body,
                                         lanes=lanes, router=rt.router, raw_bytes=request.size)
        except GatewayError as error:
            if error.code != "model_not_found" or not await rt.lanes.refresh_on_miss():
                raise
            lanes = await rt.lanes.get()
            decision = await choose_lane(model=request.model, path_lane=path_lane, key=key, body=request.body,
                                         lanes=lanes, router=rt.router, raw_bytes=request.size)
        outcome.lane, outcome.reason, outcome.score, outcome.label = (
            decision.lane, decision.reason, decision.score, decision.label)
        outcome.auto = decision.auto
        await admit_and_send(rt, scope, receive, send, key, request, raw, decision, lanes, endpoint, outcome)
    except GatewayError as error:
        outcome.status, outcome.error_code = error.status, error.code
        await send_error(send, error, outcome.headers())
    except Exception:
        # A bug or an unreachable Redis: still an OpenAI-shaped answer, never a retry hint
        # (the request may have gone upstream). Secrets are not in the traceback's locals.
        log.exception("gateway: request %s failed", outcome.request_id)
        failure = GatewayError(500, "The gateway failed on this request.", code="internal_error",
                               type_="server_error", retryable=False)
        outcome.status, outcome.error_code = failure.status, failure.code
        with contextlib.suppress(Exception):  # the answer may already have started
            await send_error(send, failure, outcome.headers())
    finally:
        if holding is not None:
            holding.release()  # the body is answered (a mirror replay keeps its own bound: LARGE_MIRRORS)
        # A refused key is counted too (a row without key, never the secret it sent).
        if key is not None or outcome.status == 401:
            finish(rt, key, request, endpoint, outcome)


def idempotency_of(scope: Scope, raw: bytes, request: ParsedRequest) -> tuple[str, str, str]:
    """(record key, mode, the body's fingerprint). An explicit `Idempotency-Key` header is
    honoured as such, and bound to the body it first came with. The official Python SDK
    does not send one, but it marks its retries with `x-stainless-retry-count`; so every
    such request is registered under a fingerprint of its body, and a retry (count > 0) of
    a request still in flight or answered after the client gave up is recognised instead
    of being sent again."""
    explicit = header(scope, b"idempotency-key")
    retry = header(scope, b"x-stainless-retry-count")
    if not explicit and retry is None:  # not an SDK that retries on its own: nothing to recognise later
        return "", limits.IDEM_NONE, ""
    # A large body's digest was taken in its worker process.
    digest = request.large.digest if request.large is not None else hashlib.sha256(raw).hexdigest()
    fingerprint = digest[:limits.FINGERPRINT_CHARS]
    if explicit:
        return explicit.decode("latin-1"), limits.IDEM_EXPLICIT, fingerprint
    return "fp:" + digest[:40], limits.IDEM_RETRY if retry != b"0" else limits.IDEM_REGISTER, fingerprint


async def admit_and_send(
    rt: GatewayRuntime, scope: Scope, receive: Receive, send: Send, key: KeyInfo, request: ParsedRequest,
    raw: bytes, decision: RouteDecision, lanes: Any, endpoint: str, outcome: Outcome,
) -> None:
    idem_key, idem_mode, fingerprint = idempotency_of(scope, raw, request)
    names = key_names(settings.REDIS_PREFIX, key_namespace(key.secret_hash), idem_key)
    budgets = budget_call(key.budgets)  # the windows the request is checked and charged in
    admission = await admit(rt, key=key, names=names, mode=idem_mode, fingerprint=fingerprint,
                            request_id=outcome.request_id, budgets=budgets)
    if admission.code != limits.ALLOWED:
        await refuse(send, admission, outcome)
        return
    explicit = idem_mode == limits.IDEM_EXPLICIT
    # A large body is mirrored too (its mirror body cut from its raw bytes), within the
    # bound on large bodies held for replays (gateway.mirror.LARGE_MIRRORS).
    outcome.mirror = (mirror_enabled() and random.random() < settings.GATEWAY_MIRROR_SHARE
                      and (request.large is None or LARGE_MIRRORS.take()))
    outcome.judged = to_judge(outcome.auto, key, request, endpoint)
    outcome.keep_answer = explicit or outcome.mirror or outcome.judged
    # A client that left is not waited for: closing the upstream connection makes vLLM abort
    # the request, and the in-flight slot is freed now, not when the lane would have
    # answered. Except when the client said it will retry (an Idempotency-Key, or an SDK
    # that marks its retries) and the answer is a whole one: then the lane finishes, and
    # the retry gets that answer instead of a second run (never twice).
    cancel_on_leave = idem_mode == limits.IDEM_NONE or request.stream
    # An SDK's request is traced in the database only if its client leaves (gateway.durable).
    traces: list[asyncio.Task[None]] = []

    def trace_on_leave() -> None:
        traces.append(asyncio.create_task(trace_left(name=names[1], fingerprint=fingerprint,
                                                     request_id=outcome.request_id)))

    this_task = asyncio.current_task()
    watcher = asyncio.create_task(watch_disconnect(
        receive, outcome, this_task if cancel_on_leave else None,
        trace_on_leave if idem_mode in (limits.IDEM_REGISTER, limits.IDEM_RETRY) else None))
    try:
        await send_once(rt, send, key, request, decision, lanes, endpoint, outcome)
    except asyncio.CancelledError:
        if not (cancel_on_leave and outcome.gone.is_set()) or this_task is None:
            raise  # the server is stopping: not the client leaving
        this_task.uncancel()
        if not request.stream or not outcome.status:
            outcome.status = 499  # nginx's "client closed request"
        outcome.error_code = "client_disconnected"
    finally:
        watcher.cancel()
        # Keep the answer for a retry when the client asked for it (explicit key), or when
        # the client left before it had the answer (its SDK will retry); else forget.
        keep = outcome.sent_upstream and idem_mode != limits.IDEM_NONE and (explicit or outcome.gone.is_set())
        record = outcome.record or b""
        if keep and (not record or len(record) > settings.GATEWAY_IDEMPOTENCY_MAX_BYTES or outcome.gone.is_set()
                     and (request.stream or outcome.status == 499)):
            record = b"D" + str(outcome.status or 502).encode() + b"X|" + outcome.lane.encode() + b"|"
        if idem_mode != limits.IDEM_NONE or key.max_parallel or key.tpm or budgets.names:
            # The usage a stream's lane did not send was counted by the gateway (gateway.relay).
            release(rt, names=names, mode=idem_mode, fingerprint=fingerprint, request_id=outcome.request_id,
                    prompt_tokens=outcome.usage.prompt_tokens or 0,
                    completion_tokens=outcome.usage.completion_tokens or 0, record=record if keep else None,
                    holds_slot=key.max_parallel > 0, trace=traces[0] if traces else None, budgets=budgets)


async def send_once(
    rt: GatewayRuntime, send: Send, key: KeyInfo, request: ParsedRequest, decision: RouteDecision, lanes: Any,
    endpoint: str, outcome: Outcome,
) -> None:
    unavailable: list[str] = []
    for hop, lane in enumerate(fallback_chain(lanes[decision.lane], lanes, key)):
        if hop:
            outcome.lane, outcome.reason, outcome.score, outcome.label = lane.name, RouteReason.FALLBACK, None, ""
        if not lane.serving:
            unavailable.append(f"{lane.name} is {lane.observed_state}")
            continue
        n = request.body.get("n")
        if isinstance(n, int) and n > 1 and lane_ignores_n(rt, lane.name):
            raise n_unsupported(lane.name)  # learned from its answers: refused before sending
        await check_context(rt, lane, request, lambda: auto_alternatives(request, lanes, key))
        several = len(lane.replicas) > 1
        order = rt.health.order(lane, affinity_key(request.body) if several else None)
        if not order:
            unavailable.append(f"{lane.name}'s circuit is open" if not several
                               else f"every serving replica of {lane.name} has its circuit open")
            continue
        body = upstream_body(request, upstream_model=lane.public_model_name)
        for replica in order:
            where = f"{lane.name} replica {replica.index}" if several else lane.name
            breaker = rt.health.breaker(lane.name, replica.index, source=str(key.id))
            if not breaker.allows():
                unavailable.append(f"{where}'s circuit is open")
                continue
            slot = await rt.fair.take(lane, replica, key, outcome)  # its turn on a full lane, or 503 server_busy
            if lane.ranked:  # its `priority` from its class and share at its turn
                body = upstream_body(request, upstream_model=lane.public_model_name, priority=outcome.engine_priority)
            rt.health.acquire(lane.name, replica.index)
            try:
                sent_at = time.perf_counter()
                # Sent from the moment its first byte may leave, so a client that leaves
                # during the send (its task cancelled here) leaves the request marked sent;
                # only a refused connection, below, proves that nothing left.
                outcome.sent_upstream, outcome.replica = True, replica.index
                try:
                    response = await upstream_send(rt.transport, f"{replica.base_url}{UPSTREAM_PATHS[endpoint]}", body)
                except Exception as exc:
                    judge_failure(breaker, exc, sent_at)
                    if provably_not_received(exc):  # the next replica (or lane) may have it: never twice
                        outcome.sent_upstream, outcome.replica = False, None
                        unavailable.append(f"{where} refused the connection")
                        continue
                    raise lost_request_recorded(exc, outcome) from None
                try:
                    if request.stream and response.status_code == 200:
                        await relay_stream(send, response, request, breaker, outcome, sent_at, rt=rt, lane=lane)
                    else:
                        await relay_whole(send, response, breaker, outcome, sent_at, rt=rt, lane=lane, request=request)
                finally:
                    await response.aclose()
                return
            finally:
                rt.health.release(lane.name, replica.index)
                rt.fair.give_back(slot)
    raise GatewayError(503, "No lane can serve this request: " + "; ".join(unavailable) + ".",
                       code="no_lane_available", type_="server_error", retry_after_s=5, retryable=True)


def finish(rt: GatewayRuntime, key: KeyInfo | None, request: ParsedRequest | None, endpoint: str,
           outcome: Outcome) -> None:
    """After the answer: one request log row (batched), and maybe a mirror replay."""
    latency_ms = (time.perf_counter() - outcome.started) * 1000
    received_at = timezone.now() - timedelta(milliseconds=latency_ms)  # the wall clock at `started`
    rt.log_writer.add({
        "request_id": outcome.request_id, "key_id": key.id if key else None, "endpoint": endpoint,
        "requested_model": (request.model if request else "")[:200], "lane": outcome.lane,
        "replica": outcome.replica,
        "route_reason": outcome.reason if outcome.reason != "replay" else "", "route_score": outcome.score,
        "route_label": outcome.label, "stream": bool(request and request.stream), "status": outcome.status,
        "error_code": outcome.error_code, "prompt_tokens": outcome.usage.prompt_tokens,
        "completion_tokens": outcome.usage.completion_tokens, "usage_source": outcome.usage_source,
        "ttft_ms": outcome.ttft_ms,
        "latency_ms": latency_ms, "upstream_ms": outcome.upstream_ms, "received_at": received_at,
        "queue_ms": outcome.queue_ms, "priority": outcome.priority,
        "prompt_text": stored_prompt(prompt_text(request)) if request and key and key.log_prompts else "",
        "conversation": (conversation_digest(request.body) or "") if request else "",
        **outcome.router_columns(),
    })
    if key is not None and key.log_prompts and request is not None and request.large is None and outcome.status == 200:
        rt.spawn(db_call(captured_prompt_store, key_id=key.id, request_id=outcome.request_id,
                         text=last_user_text(request.body), lane=outcome.lane, route_label=outcome.label,
                         router_version=outcome.auto.version if outcome.auto else None))
    large_slot = outcome.mirror and request is not None and request.large is not None
    answered = key is not None and request is not None and outcome.status == 200 and outcome.record is not None
    if answered and outcome.judged and outcome.auto is not None and outcome.auto.judge is not None:
        assert request is not None and outcome.record is not None
        rt.spawn(judge_after_answer(rt, outcome.auto, request.body, answer_text(outcome.record, request.stream),
                                    outcome.request_id, outcome.lane))
    if key is not None and request is not None and outcome.mirror and outcome.status == 200 and outcome.record is not None:
        text = answer_text(outcome.record, request.stream)
        body = request.large.mirror(settings.GATEWAY_MIRROR_MODEL) if request.large is not None else request.body
        rt.spawn(mirror_replay(
            client=rt.client, endpoint=endpoint, body=body, request_id=outcome.request_id, key_id=key.id,
            lane=outcome.lane, local_text=text, local_latency_ms=latency_ms,
            local_completion_tokens=outcome.usage.completion_tokens, large_slot=large_slot,
        ))
    elif large_slot:
        LARGE_MIRRORS.give_back()  # chosen, but no answer to compare: no replay
