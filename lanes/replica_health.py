"""What every process knows of a lane's replicas beyond the database, kept in Redis:

- `…:gw:rh:open`: a hash, "lane|replica" → until when (epoch ms) that replica is skipped.
  A gateway worker whose circuit breaker opens writes it; the health watcher writes its
  verdicts (down: skip it; answering: clear it); every gateway worker reads it.
- `…:gw:rh:load:<worker>`: each gateway worker's requests in flight per replica, and
  `…:gw:rh:workers` the workers alive. A rolling restart waits for a replica's to drain.
- `…:gw:invalidate` message "health": read the hash now.

- `guardian:replica:<lane pk>|<index>` (Django's cache): what the guardian last saw of a
  replica (progress counters, last progress, canary), and `guardian:node:<node pk>` its
  node's MemAvailable; the guardian writes them, the lane page reads them.

The gateway (gateway.replicas) keeps all of it in process memory on the hot path;
this module is the contract, and the synchronous side used by the watcher and jobs."""

from __future__ import annotations

import time
from typing import Any

from django.conf import settings
from django.core.cache import cache

from core.redis_client import sync_redis

HEALTH_MESSAGE = "health"
# A worker's counts older than this are a worker that stopped: ignored.
WORKER_STALE_MS = 3000



def field_name(lane: str, index: int) -> str:
    return f"{lane}|{index}"


def open_hash_key() -> str:
    return f"{settings.REDIS_PREFIX}:gw:rh:open"


def load_key(worker: str) -> str:
    return f"{settings.REDIS_PREFIX}:gw:rh:load:{worker}"


def workers_key() -> str:
    return f"{settings.REDIS_PREFIX}:gw:rh:workers"


def invalidation_channel() -> str:
    return f"{settings.REDIS_PREFIX}:gw:invalidate"


# A replica's fair queue (gateway.fair): its held slots, its two queues (interactive, batch),
# when each waiter came, their heartbeats, the flows' counters, the waiters' wake channels, stats
# (the queues of flows, keys and requests live under the slots key: gateway/fair_lua.py).
FAIR_PARTS = ("slots", "qi", "qb", "since", "beat", "tags", "wake", "stats", "flows", "active")


def fair_keys(lane: str, index: int) -> list[str]:
    base = f"{settings.REDIS_PREFIX}:gw:fair:{field_name(lane, index)}"
    return [f"{base}:{part}" for part in FAIR_PARTS]


def fair_wake_channel(worker: str) -> str:
    return f"{settings.REDIS_PREFIX}:gw:fair-wake:{worker}"


def fair_queue_state(lane: str, index: int) -> dict[str, int]:
    """What a lane page shows of a replica's queue: slots held, waiting (by class), shed so far."""
    keys = fair_keys(lane, index)
    now_ms = int(time.time() * 1000)
    with sync_redis().pipeline(transaction=False) as pipe:
        pipe.zcount(keys[0], now_ms, "+inf")
        pipe.zcard(keys[1])
        pipe.zcard(keys[2])
        pipe.hget(keys[7], "shed")
        held, interactive, batch, shed = pipe.execute()
    return {"held": int(held), "interactive": int(interactive), "batch": int(batch), "shed": int(shed or 0)}




def replica_verdict(lane: str, index: int, *, down_for_s: float | None) -> None:
    """The watcher's verdict: down (skip it for that long) or answering (None: clear it)."""
    client = sync_redis()
    name = field_name(lane, index)
    if down_for_s is None:
        if client.hdel(open_hash_key(), name):  # announced only when it changes something
            client.publish(invalidation_channel(), HEALTH_MESSAGE)
        return
    with client.pipeline(transaction=False) as pipe:
        pipe.hset(open_hash_key(), name, str(int((time.time() + down_for_s) * 1000)))
        pipe.publish(invalidation_channel(), HEALTH_MESSAGE)
        pipe.execute()


def replica_skipped_until(lane: str, index: int) -> float | None:
    """Until when (epoch seconds) the gateways skip this replica; None when they do not."""
    value = sync_redis().hget(open_hash_key(), field_name(lane, index))
    if value is None:
        return None
    until = int(value) / 1000
    return until if until > time.time() else None


def replica_in_flight(lane: str, index: int) -> int:
    """Requests in flight to this replica, summed over the live gateway workers."""
    client = sync_redis()
    now_ms = int(time.time() * 1000)
    workers = client.zrangebyscore(workers_key(), now_ms - WORKER_STALE_MS, "+inf")
    if not workers:
        return 0
    name = field_name(lane, index)
    with client.pipeline(transaction=False) as pipe:
        for worker in workers:
            pipe.hget(load_key(worker.decode() if isinstance(worker, bytes) else str(worker)), name)
        counts = pipe.execute()
    return sum(int(count) for count in counts if count is not None)


def liveness_key(lane_pk: int, index: int) -> str:
    # By pk: a lane deleted and re-created under its name starts afresh.
    return f"guardian:replica:{lane_pk}|{index}"


def node_memory_key(node_pk: int) -> str:
    return f"guardian:node:{node_pk}"


def replica_liveness(lane_pk: int, index: int) -> dict[str, Any]:
    return dict(cache.get(liveness_key(lane_pk, index)) or {})


def node_memory_seen(node_pk: int) -> dict[str, Any]:
    return dict(cache.get(node_memory_key(node_pk)) or {})
