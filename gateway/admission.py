"""Admission before a request may go upstream, and its release after the answer: the one
Redis round trip each (limits, revocation, idempotency: gateway.limits; token budgets:
gateway.budgets), the durable trace of keyed requests (gateway.durable), and the answers a
refused request gets.

Fail closed, but retryably: when Redis (or, for a keyed request, PostgreSQL) cannot be
reached, nothing is sent upstream and the client gets 503 `service_unavailable` with
`retry-after`, never a 500. An admission that may have reached Redis before the failure
is taken back (its in-flight slot and idempotency record), so the retry is not told the
request is still in progress."""

from __future__ import annotations

import asyncio
import logging

from django.conf import settings
from django.db import DatabaseError

from core.db import db_call
from gateway import limits
from gateway.budgets import COUNT_TTL_S, NO_BUDGETS, BudgetCall, budget_refusal
from gateway.directory import KeyInfo
from gateway.durable import ADMITTED, DONE, IN_FLIGHT, keyed_request_admit, keyed_request_release
from gateway.http import Send, send_bytes, send_error
from gateway.outcome import SSE_HEADERS, Outcome
from gateway.runtime import GatewayRuntime
from gateway.scripts import NotSent, ScriptError
from gateway.wire import GatewayError

log = logging.getLogger(__name__)
# Redis's answers while it cannot take commands yet (loading its data, a script running long).
REDIS_NOT_READY = ("LOADING", "BUSY", "MASTERDOWN", "TRYAGAIN")
UNAVAILABLE_RETRY_S = 2


def store_unavailable(what: str) -> GatewayError:
    return GatewayError(503, f"The gateway cannot check this API key's limits, budgets and idempotency right now ({what} is "
                        "unreachable); the request was not sent to any lane. Retry shortly.",
                        code="service_unavailable", type_="server_error", retry_after_s=UNAVAILABLE_RETRY_S,
                        retryable=True)


def lease_s() -> int:
    # While in flight, the idempotency record and the in-flight slot outlive the longest
    # possible upstream call, so a crashed process cannot hold them forever.
    return int(settings.GATEWAY_READ_TIMEOUT_S + 60)


async def admit(rt: GatewayRuntime, *, key: KeyInfo, names: list[str], mode: str, fingerprint: str,
                request_id: str, budgets: BudgetCall = NO_BUDGETS) -> limits.Admission:
    """The admission script's verdict; BudgetExceeded (429 `budget_exceeded`) when a budget the
    key falls under is used up, with nothing registered (gateway.limits.ADMIT_LUA)."""
    lease = lease_s()
    args = [key.rpm, key.tpm, key.max_parallel, request_id, lease * 1000, lease, mode, fingerprint]
    try:
        reply = await rt.admit_script(keys=names + budgets.names if budgets.names else names,
                                      args=args + budgets.limits if budgets.names else args)
    except (ConnectionError, TimeoutError, OSError) as exc:  # NotSent is a ConnectionError
        log.warning("gateway: request %s refused, Redis unreachable: %s", request_id, exc)
        if not isinstance(exc, NotSent):  # the script may have run: take back what it registered
            take_back(rt, names=names, fingerprint=fingerprint, request_id=request_id)
        raise store_unavailable("its Redis") from None
    except ScriptError as exc:
        if not str(exc).startswith(REDIS_NOT_READY):
            raise
        raise store_unavailable("its Redis, still starting,") from None
    admission = limits.admission_from_reply(reply, rpm=key.rpm, tpm=key.tpm)
    if admission.code == limits.BUDGET_EXCEEDED:
        position, dimension, used = (int(part) for part in admission.record.split(b","))
        raise budget_refusal(key.budgets, budgets, position, dimension, used)
    if admission.code != limits.ALLOWED or mode == limits.IDEM_NONE:
        return admission
    # A Redis younger than the TTL may have lost records still alive: ask the durable trace.
    check = mode in (limits.IDEM_EXPLICIT, limits.IDEM_RETRY) and (
        admission.memory_age_s < settings.GATEWAY_IDEMPOTENCY_TTL_S)
    explicit = mode == limits.IDEM_EXPLICIT
    if not (check or explicit):
        return admission  # an SDK's request: its row is written only if its client leaves (trace_left)
    try:
        verdict = await db_call(keyed_request_admit, name=names[1], fingerprint=fingerprint, request_id=request_id,
                                lease_s=lease, check=check, write=explicit)
    except DatabaseError as exc:
        log.warning("gateway: request %s refused, PostgreSQL unreachable: %s", request_id, exc)
        take_back(rt, names=names, fingerprint=fingerprint, request_id=request_id)
        raise store_unavailable("its database") from None
    if verdict == ADMITTED:
        return admission
    take_back(rt, names=names, fingerprint=fingerprint, request_id=request_id)
    if verdict == IN_FLIGHT:
        return limits.Admission(limits.IDEMPOTENT_IN_FLIGHT)
    if verdict == DONE:  # its answer went with Redis's memory: refused, never re-run
        return limits.Admission(limits.IDEMPOTENT_DONE, record=limits.stored_record(b"D409X||", fingerprint))
    return limits.Admission(limits.IDEMPOTENCY_MISMATCH)


def take_back(rt: GatewayRuntime, *, names: list[str], fingerprint: str, request_id: str) -> None:
    """Undo an admission that will not be sent: its slot, and its record if still its own."""
    rt.spawn(rt.release(keys=[names[4], names[3], names[1]],
                        args=[request_id, 0, "forget", b"", 0, f"I{fingerprint}{request_id}"]))


async def trace_left(*, name: str, fingerprint: str, request_id: str) -> None:
    """An SDK's request whose client left before its answer will be retried: its durable
    row is written now, before the retry comes."""
    try:
        await db_call(keyed_request_admit, name=name, fingerprint=fingerprint, request_id=request_id,
                      lease_s=lease_s(), check=False)
    except DatabaseError as exc:
        log.warning("gateway: keyed request %s not traced in the database: %s", request_id, exc)


def release(rt: GatewayRuntime, *, names: list[str], mode: str, fingerprint: str, request_id: str,
            prompt_tokens: int, completion_tokens: int, record: bytes | None, holds_slot: bool,
            trace: asyncio.Task[None] | None = None, budgets: BudgetCall = NO_BUDGETS) -> None:
    """After the answer: free the slot, count the tokens (this minute's, and against the
    budgets in the windows the request was admitted in), keep `record` for a retry (None:
    forget it), in Redis and in the durable trace (an SDK's request has a row only when its
    client left: `trace` wrote it). Without an in-flight slot to free (the key has no
    max_parallel) the release may wait a moment for the next admission's write
    (GATEWAY_RELEASE_LINGER_S) instead of taking a write and a wake-up of Redis of its own; a
    slot is freed at once (the key's next request may come to another worker)."""
    keep = record is not None
    args = [request_id, prompt_tokens + completion_tokens,
            "keep" if keep else "none" if mode == limits.IDEM_NONE else "forget",
            limits.stored_record(record, fingerprint) if record is not None else b"",
            settings.GATEWAY_IDEMPOTENCY_TTL_S * 1000, f"I{fingerprint}{request_id}"]
    keys = [names[4], names[3], names[1]]
    if budgets.names:
        keys += budgets.names
        args += [prompt_tokens, completion_tokens, COUNT_TTL_S]
    rt.spawn(rt.release(keys=keys, args=args, linger=0.0 if holds_slot else settings.GATEWAY_RELEASE_LINGER_S))
    if mode == limits.IDEM_EXPLICIT or trace is not None:
        rt.spawn(durable_release(name=names[1], request_id=request_id, keep=keep, after=trace))


async def durable_release(*, name: str, request_id: str, keep: bool, after: asyncio.Task[None] | None) -> None:
    if after is not None:
        await after  # its row first: the release marks it done
    try:
        await db_call(keyed_request_release, name=name, request_id=request_id, keep=keep,
                      ttl_s=settings.GATEWAY_IDEMPOTENCY_TTL_S)
    except DatabaseError as exc:  # the row's lease bounds it: a retry is refused meanwhile, never re-run
        log.warning("gateway: keyed request %s not released in the database: %s", request_id, exc)


async def refuse(send: Send, admission: limits.Admission, outcome: Outcome) -> None:
    code = admission.code
    if code == limits.REVOKED:
        error = GatewayError(401, "This API key has been revoked.", code="invalid_api_key", type_="authentication_error")
    elif code == limits.IDEMPOTENT_IN_FLIGHT:
        error = GatewayError(409, "The same request (same Idempotency-Key, or a retry of the same body) is still in progress; "
                             "it is not sent twice. "
                             "Retry later to receive its answer.", code="idempotent_request_in_flight",
                             type_="conflict_error", retry_after_s=2, retryable=True)
    elif code == limits.IDEMPOTENT_DONE:
        await replay(send, limits.record_content(admission.record), outcome)
        return
    elif code == limits.IDEMPOTENCY_MISMATCH:
        error = GatewayError(422, "This Idempotency-Key was already used with a different request body. "
                             "Use a new key for a new request.", code="idempotency_key_reused",
                             param="Idempotency-Key", retryable=False)
    else:
        what = {limits.RPM_EXCEEDED: "requests per minute", limits.TPM_EXCEEDED: "tokens per minute",
                limits.PARALLEL_EXCEEDED: "requests in flight"}[code]
        error = GatewayError(429, f"Rate limit reached for this API key: {what}.", code="rate_limit_exceeded",
                             type_="rate_limit_error", retry_after_s=admission.retry_after_s, retryable=True)
    outcome.status, outcome.error_code = error.status, error.code
    await send_error(send, error, outcome.headers())


async def replay(send: Send, record: bytes, outcome: Outcome) -> None:
    status, kind = int(record[1:4]), record[4:5]
    lane, _, body = record[6:].partition(b"|")
    outcome.lane, outcome.reason, outcome.status, outcome.error_code = lane.decode(), "replay", status, "replayed"
    headers = [*outcome.headers(), (b"x-idempotent-replay", b"true")]
    if kind == b"X":
        error = GatewayError(409, "This request was already sent to the lane; its answer cannot be replayed "
                             "(too large, or its client left before the whole answer: outcome unknown), "
                             "and it is not sent twice.", code="idempotent_request_done",
                             type_="conflict_error", retryable=False)
        await send_error(send, error, headers)
        return
    if kind == b"S":
        await send_bytes(send, status, body, [*headers, *SSE_HEADERS[1:]], content_type=b"text/event-stream")
    else:
        await send_bytes(send, status, body, [*headers, (b"x-should-retry", b"false")] if status >= 400 else headers)


