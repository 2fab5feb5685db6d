"""Never twice across a Redis restart: keyed requests (an Idempotency-Key, or an SDK's retry
marker) leave a durable trace in PostgreSQL beside their Redis record.

Redis decides on the hot path (gateway.limits' admission script). A Redis restarted without
its data (make run's embedded one keeps none; compose's append-only file may lose its last
second) has forgotten every record, so a retry of a request already sent would look new.
The admission script therefore reports how long this Redis has kept its memory: the age
of an epoch marker it writes the first time it finds none. While that age is below the
idempotency TTL, Redis may have lost records still alive, and a keyed request that Redis
does not know is checked against the durable rows before it may go upstream. After that,
Redis alone is enough; rows are still written, ready for the next restart.

Which requests write a row: one with an explicit Idempotency-Key, at admission (awaited,
before the send: its client may retry at any time). An SDK's request (marked by its retry
counter, without a key) only when its client leaves before the whole answer — the only
case in which the SDK retries a request that reached the lane — at that moment, before
the retry can come (the SDK backs off 0.5 s or more). So the common path, a client that
stays for its answer, never touches the database (perf/gateway_overhead.py measured a
row per request at a third of the gateway's throughput).

A row says only "admitted (may be sent)" and then "done"; it never holds the answer. So
across a restart a retry is refused, never re-run: 409 `idempotent_request_in_flight`
while the first still runs, then 409 `idempotent_request_done` (its answer cannot be
replayed). Rows expire like the Redis records (lease while in flight, TTL once done);
the storage purge deletes expired rows."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.utils import timezone

from gateway.models import KeyedRequest

ADMITTED = ""
IN_FLIGHT = "in_flight"
DONE = "done"
MISMATCH = "mismatch"


def keyed_request_admit(*, name: str, fingerprint: str, request_id: str, lease_s: float, check: bool,
                        write: bool = True) -> str:
    """Write the request's row (in flight, for its lease), unless not `write`. With `check`
    (Redis may have lost its records), an unexpired row of an earlier request under the same
    name refuses it: IN_FLIGHT, DONE, or MISMATCH (another body under the same key)."""
    now = timezone.now()
    if check:
        row = KeyedRequest.objects.filter(name=name, expires_at__gt=now).first()
        if row is not None:
            if row.fingerprint != fingerprint:
                return MISMATCH
            return DONE if row.done else IN_FLIGHT
    if not write:
        return ADMITTED
    KeyedRequest.objects.bulk_create(
        [KeyedRequest(name=name, fingerprint=fingerprint, request_id=request_id, done=False,
                      expires_at=now + timedelta(seconds=lease_s))],
        update_conflicts=True, unique_fields=["name"], update_fields=["fingerprint", "request_id", "done", "expires_at"],
    )
    return ADMITTED


def keyed_request_release(*, name: str, request_id: str, keep: bool, ttl_s: float) -> None:
    """After the answer: done (kept for the TTL: a retry is refused), or forgotten (nothing
    was sent, or nobody will retry). Only this request's own row is touched."""
    rows = KeyedRequest.objects.filter(name=name, request_id=request_id)
    if keep:
        rows.update(done=True, expires_at=timezone.now() + timedelta(seconds=ttl_s))
    else:
        rows.delete()


def keyed_request_purge(*, now: datetime | None = None) -> int:
    deleted, _ = KeyedRequest.objects.filter(expires_at__lt=now or timezone.now()).delete()
    return deleted
