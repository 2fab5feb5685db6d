"""Replicas: which engine of a lane answers a request, and what every gateway worker knows
of each replica's health and load.

Balancing. A conversation keeps its prefix (KV) cache only on the replica that served it,
so a request goes to the replica its conversation hashes to: rendezvous (highest random
weight) hashing of the conversation's first messages, a consistent hash (a replica that
leaves moves only its own conversations). The hash is load-bounded (Mirrokni et al.): a
replica with `factor × (all outstanding + 1) / replicas + slack` requests in flight takes
no new one, which goes to the conversation's next replica under the bound; replicas over
it come last, least outstanding first, and a request with no conversation to hash goes to
the least-outstanding replica. The gateway moves on to the next replica only when the
request provably never reached the one before (never twice).

Shared health. Each worker keeps, per replica, a circuit breaker and its own count of
requests in flight; the hot path reads only process memory. A background task publishes
this worker's counts to Redis and reads every other worker's, plus the shared breaker
hash (lanes.replica_health) (a replica some worker or the health watcher found down, until when), every
GATEWAY_HEALTH_SYNC_S; a breaker that opens (or closes) is written at once and announced,
so every worker skips a dead replica after the first one found it."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import os
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from django.conf import settings

from gateway.breaker import CircuitBreaker
from gateway.directory import LaneInfo, ReplicaInfo
from gateway.loops import stop_loop
from lanes.replica_health import (
    HEALTH_MESSAGE,
    WORKER_STALE_MS,
    field_name,
    invalidation_channel,
    load_key,
    open_hash_key,
    workers_key,
)

log = logging.getLogger(__name__)

# What identifies a conversation: its messages up to the first user message (the system
# prompt and the opening question stay the same while the conversation grows), at most
# this many bytes of them; for a completion, the start of its prompt.
AFFINITY_BYTES = 4096
AFFINITY_MESSAGES = 3


def affinity_key(body: Mapping[str, Any]) -> bytes | None:
    """The conversation's identity, or None when the request has none to keep."""
    messages = body.get("messages")
    if isinstance(messages, list) and messages:
        head: list[Any] = []
        for message in messages[:AFFINITY_MESSAGES]:
            if not isinstance(message, dict):
                break
            head.append((message.get("role"), message.get("content")))
            if message.get("role") == "user":
                break
        try:
            return orjson.dumps(head)[:AFFINITY_BYTES] if head else None
        except TypeError:
            return None
    prompt = body.get("prompt")
    if isinstance(prompt, str) and prompt:
        return prompt.encode("utf-8", "replace")[:AFFINITY_BYTES]
    return None


def _weight(key: bytes, lane: str, index: int) -> int:
    digest = hashlib.blake2b(key, digest_size=8, key=f"{lane}|{index}".encode()[:64]).digest()
    return int.from_bytes(digest, "big")


def hash_order(key: bytes, lane: str, replicas: Sequence[ReplicaInfo]) -> list[ReplicaInfo]:
    """Rendezvous order of the replicas for this conversation (first = its home)."""
    return sorted(replicas, key=lambda replica: _weight(key, lane, replica.index), reverse=True)


def balance(lane: str, replicas: Sequence[ReplicaInfo], key: bytes | None, load: Mapping[int, int],
            *, factor: float, slack: int) -> list[ReplicaInfo]:
    """The replicas to try, in order. With a conversation: its rendezvous order, skipping
    the replicas over the load bound (they go last, fewest outstanding first), so a hot
    conversation spills to its next replica and comes back when the load drops. Without
    one: fewest outstanding first."""
    if not replicas:
        return []
    ranked = hash_order(key, lane, replicas) if key is not None else list(replicas)
    rank = {replica.index: position for position, replica in enumerate(ranked)}
    if key is None or len(replicas) == 1:
        return sorted(ranked, key=lambda replica: (load.get(replica.index, 0), rank[replica.index]))
    total = sum(load.get(replica.index, 0) for replica in replicas)
    bound = math.ceil(factor * (total + 1) / len(replicas)) + slack
    within = [replica for replica in ranked if load.get(replica.index, 0) + 1 <= bound]
    over = sorted((replica for replica in ranked if load.get(replica.index, 0) + 1 > bound),
                  key=lambda replica: (load.get(replica.index, 0), rank[replica.index]))
    return within + over


class ReplicaBreaker:
    """A replica's breaker as one request's relay sees it (allows / record_success /
    record_failure / record_error_answer / record_timeout): this worker's CircuitBreaker,
    plus what every worker and the watcher said. `source` is the request's API key (5xx
    answers count by key: gateway.breaker)."""

    def __init__(self, health: SharedHealth, lane: str, index: int, local: CircuitBreaker, source: str = "") -> None:
        self.health, self.field, self.local, self.source = health, field_name(lane, index), local, source

    def allows(self) -> bool:
        if self.health.shared_open(self.field):
            return False
        return self.local.allows()

    def record_success(self) -> None:
        was_open = self.local.opened_at is not None
        self.local.record_success()
        if was_open or self.field in self.health.open_until:
            self.health.announce_closed(self.field)

    def record_failure(self) -> None:
        was_open = self.local.opened_at is not None
        self.local.record_failure()
        self._announce(was_open)

    def record_error_answer(self) -> None:
        was_open = self.local.opened_at is not None
        self.local.record_error_answer(self.source)
        self._announce(was_open)

    def record_timeout(self, sent_at: float) -> None:
        """A timeout is a failure only when the replica made no progress at all since the
        request was sent; else it waited in a full lane (overload), which counts neither way."""
        if not self.health.progressed_since(self.field, sent_at):
            self.record_failure()

    def note_progress(self) -> float:
        """Bytes arrived from the replica (an answer's headers, a stream's chunk): when."""
        now = self.health.progress[self.field] = time.perf_counter()
        return now

    def _announce(self, was_open: bool) -> None:
        if self.local.opened_at is not None and (not was_open or self.local.failures >= self.local.failures_to_open):
            self.health.announce_open(self.field, self.local.cooldown_s)

    @property
    def state(self) -> str:
        return "open" if self.health.shared_open(self.field) else self.local.state


@dataclass
class SharedHealth:
    redis: Any
    worker: str = field(default_factory=lambda: f"{os.getpid()}-{uuid.uuid4().hex[:8]}")
    breakers: dict[str, CircuitBreaker] = field(default_factory=dict)
    local_load: dict[str, int] = field(default_factory=dict)
    remote_load: dict[str, int] = field(default_factory=dict)
    open_until: dict[str, float] = field(default_factory=dict)  # epoch seconds
    progress: dict[str, float] = field(default_factory=dict)  # last bytes from a replica (perf_counter)
    background: set[asyncio.Task[Any]] = field(default_factory=set)
    synced_at: float = 0.0
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    _task: asyncio.Task[None] | None = None
    closed: bool = False

    # --- hot path: process memory only ----------------------------------------------------
    def breaker(self, lane: str, index: int, source: str = "") -> ReplicaBreaker:
        name = field_name(lane, index)
        local = self.breakers.get(name)
        if local is None:
            local = self.breakers[name] = CircuitBreaker(
                failures_to_open=settings.GATEWAY_BREAKER_FAILURES, cooldown_s=settings.GATEWAY_BREAKER_COOLDOWN_S)
        self._ensure_running()
        return ReplicaBreaker(self, lane, index, local, source)

    def progressed_since(self, name: str, since: float) -> bool:
        return self.progress.get(name, float("-inf")) > since

    def shared_open(self, name: str) -> bool:
        until = self.open_until.get(name)
        return until is not None and until > time.time()

    def available(self, lane: str, replica: ReplicaInfo) -> bool:
        """Serving and no breaker open (does not take a half-open probe)."""
        if not replica.serving:
            return False
        name = field_name(lane, replica.index)
        local = self.breakers.get(name)
        return not self.shared_open(name) and (local is None or local.state != "open")

    def load(self, lane: str, index: int) -> int:
        name = field_name(lane, index)
        return self.local_load.get(name, 0) + self.remote_load.get(name, 0)

    def order(self, lane: LaneInfo, key: bytes | None) -> list[ReplicaInfo]:
        self._ensure_running()
        candidates = [replica for replica in lane.replicas if self.available(lane.name, replica)]
        load = {replica.index: self.load(lane.name, replica.index) for replica in candidates}
        return balance(lane.name, candidates, key, load, factor=settings.GATEWAY_REPLICA_LOAD_FACTOR,
                       slack=settings.GATEWAY_REPLICA_LOAD_SLACK)

    def acquire(self, lane: str, index: int) -> None:
        name = field_name(lane, index)
        self.local_load[name] = self.local_load.get(name, 0) + 1

    def release(self, lane: str, index: int) -> None:
        name = field_name(lane, index)
        left = self.local_load.get(name, 0) - 1
        if left > 0:
            self.local_load[name] = left
        else:
            self.local_load.pop(name, None)

    # --- shared state: written when a breaker changes, read in the background --------------
    def announce_open(self, name: str, cooldown_s: float) -> None:
        until = time.time() + cooldown_s
        self.open_until[name] = until
        self._spawn(self._write_open(name, until))

    def announce_closed(self, name: str) -> None:
        self.open_until.pop(name, None)
        self._spawn(self._write_closed(name))

    async def _write_open(self, name: str, until: float) -> None:
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hset(open_hash_key(), name, str(int(until * 1000)))
            pipe.publish(invalidation_channel(), HEALTH_MESSAGE)
            await pipe.execute()

    async def _write_closed(self, name: str) -> None:
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hdel(open_hash_key(), name)
            pipe.publish(invalidation_channel(), HEALTH_MESSAGE)
            await pipe.execute()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self.background.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self.background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("gateway: could not share a replica's breaker: %s", task.exception())

    def wake(self) -> None:
        """Another worker (or the watcher) changed a breaker: read it now."""
        self._wake.set()

    def _ensure_running(self) -> None:
        if (self._task is None or self._task.done()) and not self.closed:
            self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while not self.closed:  # as well as the cancellation: see gateway.loops
            try:
                await self.sync()
            except asyncio.CancelledError:
                raise
            except Exception:  # Redis restarting: keep what was known, try again
                log.warning("gateway: replica health sync failed; retrying", exc_info=True)
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation that
            # arrives as the wake-up completes, and this loop would then never end.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(settings.GATEWAY_HEALTH_SYNC_S):
                    await self._wake.wait()
            self._wake.clear()

    async def sync(self) -> None:
        """Publish this worker's load; read every other worker's and the shared breakers."""
        now_ms = int(time.time() * 1000)
        mine = load_key(self.worker)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.delete(mine)
            if self.local_load:
                pipe.hset(mine, mapping=dict(self.local_load))
                pipe.pexpire(mine, WORKER_STALE_MS)
            pipe.zadd(workers_key(), {self.worker: now_ms})
            pipe.zremrangebyscore(workers_key(), "-inf", now_ms - WORKER_STALE_MS)
            pipe.zrange(workers_key(), 0, -1)
            pipe.hgetall(open_hash_key())
            replies = await pipe.execute()
        workers = [w.decode() if isinstance(w, bytes) else str(w) for w in replies[-2]]
        others = [w for w in workers if w != self.worker]
        remote: dict[str, int] = {}
        if others:
            async with self.redis.pipeline(transaction=False) as pipe:
                for worker in others:
                    pipe.hgetall(load_key(worker))
                for counts in await pipe.execute():
                    for name, count in counts.items():
                        key = name.decode() if isinstance(name, bytes) else str(name)
                        remote[key] = remote.get(key, 0) + int(count)
        self.remote_load = remote
        self.open_until = {(name.decode() if isinstance(name, bytes) else str(name)): int(until) / 1000
                           for name, until in replies[-1].items()}
        self.synced_at = time.monotonic()

    async def close(self) -> None:
        self.closed = True
        await stop_loop(self._task, "replica health sync")
        if self.background:
            await asyncio.wait(self.background, timeout=5)
        with contextlib.suppress(Exception):
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.delete(load_key(self.worker))
                pipe.zrem(workers_key(), self.worker)
                await pipe.execute()
