"""Fair share of a saturated lane: per-replica admission, weighted fair queueing across
keys, priority classes, bounded waiting and honest shedding.

A replica takes at most its lane's slots (`Lane.gateway_slots`, else `max_num_seqs`) of
requests at once, counted across every web worker in Redis (the slots zset: request id →
lease). A request that finds the replica full, or others already waiting, waits in the
replica's queue instead of piling onto the engine (whose own queue is first come, first
served: whoever sends most gets the lane).

Order of the queue: virtual counters over flows (VTC, Sheng et al., as start-time fair
queueing orders packets) — a flow is an API key, or its team (`flow_of`). Each flow counts
the work it was given ÷ its weight; a free slot goes to the waiting flow of the lowest
count (inside a team, to its key of the lowest count; inside a key, first come first
served). Work is slot time: a request is charged its key's mean slot time when it gets a
slot and set right by the time it really held when it gives it back (a slot unused, or a
place in the queue, costs nothing). A flow with nothing queued is lifted to V, the count of
the latest flow given a slot: it builds no credit while idle, and its request goes ahead of
a flooder's queue. So a key that sent one request goes next beside a key with 40 queued, so
does a key that sends short requests often beside a key of long streams, and two flooding
keys of weights 2:1 get slot time 2:1. Classes: `interactive` before `batch`; a batch
request that has waited GATEWAY_FAIR_BATCH_AGING_S gives its class the next turn whatever
waits (aging: never starved).

Bounded and honest: a queue longer than GATEWAY_FAIR_MAX_QUEUE, or a wait longer than
GATEWAY_FAIR_MAX_WAIT_S, is answered 503 `server_busy` with `retry-after` from the queue
(waiting ÷ slots × the replica's mean slot time) — before any upstream call, so never a
duplicate. A client that leaves while queued gives its place back and is never sent.

Wake-up: the script that frees a slot gives it to the head of the queue and publishes its
request id on the waiter's worker channel (gateway.runtime's listener calls `wake`); every
GATEWAY_FAIR_TICK_S each worker also refreshes its waiters' heartbeats and its held slots'
leases and asks for a dispatch, so a lost message or a crashed worker costs a tick, not
the lane (a crashed worker's waiters and slots expire: GATEWAY_FAIR_HEARTBEAT_S)."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from gateway.directory import KeyInfo, LaneInfo, ReplicaInfo
from gateway.fair_lua import GIVE_LUA, TAKE_LUA, TICK_LUA, WITHDRAW_LUA
from gateway.loops import stop_loop
from gateway.outcome import Outcome
from gateway.replicas import SharedHealth
from gateway.scripts import Script, ScriptPipe
from gateway.wire import GatewayError
from lanes.replica_health import fair_keys, fair_wake_channel, field_name

log = logging.getLogger(__name__)

INTERACTIVE, BATCH = "interactive", "batch"
CLASSES = (INTERACTIVE, BATCH)
PRIORITY_HEADER = "x-spark-priority"

GRANTED, QUEUED, SHED = 1, 0, 2

def headroom() -> tuple[int, int]:
    """The scripts' RESERVE and ACTIVE_MS (COMMON_LUA): slots kept for a flow holding none,
    and how recent a flow's latest request must be for it to count as active."""
    return settings.GATEWAY_FAIR_RESERVE_SLOTS, int(settings.GATEWAY_FAIR_ACTIVE_S * 1000)


def lane_slots(lane: LaneInfo) -> int | None:
    """Requests one replica of the lane takes at once; None: unknown, not admitted here."""
    if not settings.GATEWAY_FAIR_QUEUE:
        return None
    return lane.slots


def flow_of(key: KeyInfo) -> tuple[str, float, str, float]:
    """The flow a request shares the lane as and its weight, and the key inside it: a key of
    a team shares as the team (`t<id>`, the team's weight), its keys inside it by their own
    weights; a key of no team is its own flow."""
    if key.team_id is not None:
        return f"t{key.team_id}", float(max(key.team_weight, 1)), f"k{key.id}", float(max(key.weight, 1))
    return f"k{key.id}", float(max(key.weight, 1)), "", 0.0


def request_class(key: KeyInfo, asked: bytes | None) -> str:
    """The key's class, or a lower one the request asked for (never a higher one)."""
    if asked is None:
        return key.priority
    wanted = asked.decode("latin-1").strip().lower()
    if wanted not in CLASSES:
        raise GatewayError(400, f"The header `{PRIORITY_HEADER}` must be `interactive` or `batch`, not "
                           f"`{wanted[:40]}`.", code="invalid_priority", param=PRIORITY_HEADER)
    return BATCH if BATCH in (wanted, key.priority) else INTERACTIVE


def engine_priority(klass: str, held: int = 0, active: int = 1, slots: int = 1) -> int:
    """vLLM's `priority` (lower first) for a lane in priority mode: interactive 0, batch 2; while
    other flows are active, one more for a flow holding over its equal share of the replica's
    slots (a flooder), and an interactive one one less (-1) within it. The engine then orders
    its own queue, and picks whom to preempt under KV pressure, the same way. A request's
    priority is fixed when it is sent: the -1 puts a light key's request ahead of the streams a
    flooder started while it was alone (0 then), which the engine would otherwise serve first
    from its waiting queue (older, same priority) and preempt after the light one (newer)."""
    base = 0 if klass == INTERACTIVE else 2
    if active <= 1:
        return base
    if held > math.ceil(slots / active):
        return base + 1
    return base - 1 if klass == INTERACTIVE and held <= slots // active else base


def retry_after_s(waiting: int, slots: int, mean_slot_ms: float) -> int:
    """When a place is likely free: the queue ahead, served `slots` at a time, each for the
    replica's mean slot time (1 s when none is known yet); 1..300 s."""
    per_slot_s = mean_slot_ms / 1000 if mean_slot_ms > 0 else 1.0
    return int(min(300, max(1, math.ceil(max(waiting, 1) / max(slots, 1) * per_slot_s))))


def busy(lane: str, waiting: int, slots: int, mean_slot_ms: float, *, waited: bool) -> GatewayError:
    why = (f"waited {settings.GATEWAY_FAIR_MAX_WAIT_S:g} s in its queue" if waited
           else f"has {waiting} requests waiting (the bound is {settings.GATEWAY_FAIR_MAX_QUEUE})")
    return GatewayError(503, f"The lane `{lane}` is full: this request {why}. It was not sent to the lane; "
                        "retry after the time in `retry-after`.", code="server_busy", type_="server_error",
                        retry_after_s=retry_after_s(waiting, slots, mean_slot_ms), retryable=True)


@dataclass
class Slot:
    """A replica's slot held by one request (give it back exactly once)."""

    replica: str  # "lane|index"
    keys: list[str]
    request_id: str
    slots: int
    since: float = field(default_factory=time.perf_counter)
    counted: bool = True  # in Redis's slots zset (a slot taken without asking is, from its first tick)


class FairQueue:
    """This worker's side of the replicas' queues: its waiters, its held slots, the tick."""

    def __init__(self, pipe: ScriptPipe, worker: str, health: SharedHealth | None = None) -> None:
        self.health = health  # every worker's requests in flight per replica (gateway.replicas)
        self.take_script = Script(pipe, TAKE_LUA)
        self.give_script = Script(pipe, GIVE_LUA)
        self.withdraw_script = Script(pipe, WITHDRAW_LUA)
        self.tick_script = Script(pipe, TICK_LUA)
        self.channel = fair_wake_channel(worker)
        self.waiters: dict[str, tuple[asyncio.Future[None], Slot]] = {}
        self.held: dict[str, Slot] = {}
        self.full_until: dict[str, float] = {}  # replica → until when this worker takes it as full (monotonic)
        self.background: set[asyncio.Task[Any]] = set()
        self._task: asyncio.Task[None] | None = None
        self.closed = False

    def wake(self, request_id: str) -> None:
        waiter = self.waiters.get(request_id)
        if waiter is not None and not waiter[0].done():
            waiter[0].set_result(None)

    async def take(self, lane: LaneInfo, replica: ReplicaInfo, key: KeyInfo, outcome: Outcome) -> Slot | None:
        """A slot of this replica for the request, waiting for it in turn; None when the lane
        has no known slots. Raises 503 server_busy when shed, 499 when the client left."""
        request_id, klass, gone = outcome.request_id, outcome.priority or key.priority, outcome.gone
        if lane.ranked:
            outcome.engine_priority = engine_priority(klass)  # its class; its share below, when asked
        slots = lane_slots(lane)
        if slots is None:
            return None
        name = field_name(lane.name, replica.index)
        slot = Slot(name, fair_keys(lane.name, replica.index), request_id, slots)
        flow, weight, inner, inner_weight = flow_of(key)
        args = [request_id, flow, weight, "b" if klass == BATCH else "i", slots, self.lease_ms(),
                settings.GATEWAY_FAIR_MAX_QUEUE, self.channel, int(settings.GATEWAY_FAIR_HEARTBEAT_S * 1000),
                int(settings.GATEWAY_FAIR_BATCH_AGING_S * 1000), *headroom(), 1 if lane.ranked else 0,
                inner, inner_weight]
        if self.under_half(name, lane.name, replica.index, slots):
            # Far from full as this worker last saw every worker's load (GATEWAY_HEALTH_SYNC_S old
            # at most): no Redis call on the hot path. A request that outlives a tick is counted
            # there from that tick on; a shorter one never needs to be.
            slot.counted = False
            self.held[request_id] = slot
            self._ensure_running()
            return slot
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiters[request_id] = (future, slot)  # before the call: a wake may come first
        try:
            try:
                code, waiting, mean, *share = await self.take_script(keys=slot.keys, args=args)
            except (ConnectionError, TimeoutError, OSError) as exc:
                log.warning("gateway: request %s refused, the fair queue's Redis is unreachable: %s", request_id, exc)
                raise GatewayError(503, "The gateway cannot reach its Redis to take a slot of the lane; the request "
                                   "was not sent. Retry shortly.", code="service_unavailable", type_="server_error",
                                   retry_after_s=2, retryable=True) from None
            if lane.ranked and share:
                outcome.engine_priority = engine_priority(klass, int(share[0]), int(share[1]), slots)
            if code != GRANTED:
                self.full_until[name] = time.monotonic() + settings.GATEWAY_FAIR_TICK_S * 4
            if code == SHED:
                raise busy(lane.name, int(waiting), slots, float(mean), waited=False)
            if code == QUEUED:
                self._ensure_running()
                await self._wait(future, slot, lane.name, gone)
        except BaseException as exc:
            # Shed: nothing of it is left in Redis. Else (the client left, a failure) its place,
            # or the slot that came meanwhile, goes to the next in turn.
            if not (isinstance(exc, GatewayError) and exc.code == "server_busy"):
                self._spawn(self._give(slot, held_ms=0))
            raise
        finally:
            self.waiters.pop(request_id, None)
        if code == QUEUED:
            outcome.queue_ms = (time.perf_counter() - slot.since) * 1000
        slot.since = time.perf_counter()
        self.held[request_id] = slot
        self._ensure_running()
        return slot

    def under_half(self, name: str, lane: str, index: int, slots: int) -> bool:
        """A lane of many slots, under half full as this worker sees it, and not found full
        by this worker for a while: no request of it waits (a burst is checked in Redis)."""
        if self.health is None or slots < settings.GATEWAY_FAIR_FAST_MIN_SLOTS:
            return False
        if self.health.load(lane, index) + 1 > slots // 2 or time.monotonic() < self.full_until.get(name, 0.0):
            return False
        return not any(slot.replica == name for _, slot in self.waiters.values())

    async def _wait(self, future: asyncio.Future[None], slot: Slot, lane: str, gone: asyncio.Event) -> None:
        leaving: asyncio.Future[Any] = asyncio.ensure_future(gone.wait())
        either: set[asyncio.Future[Any]] = {future, leaving}
        try:
            done, _ = await asyncio.wait(either, timeout=settings.GATEWAY_FAIR_MAX_WAIT_S,
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            leaving.cancel()
        if future in done:
            return
        if leaving in done:
            raise GatewayError(499, "The client left while its request was queued; it was not sent.",
                               code="client_disconnected")
        code, waiting, mean = await self.withdraw_script(keys=slot.keys, args=[slot.request_id])
        if code != GRANTED:
            raise busy(lane, int(waiting), slot.slots, float(mean), waited=True)

    def give_back(self, slot: Slot | None) -> None:
        """After the answer (or a failure before sending): the slot to the next in turn."""
        if slot is None or self.held.pop(slot.request_id, None) is None or not slot.counted:
            return
        self._spawn(self._give(slot, held_ms=(time.perf_counter() - slot.since) * 1000))

    async def _give(self, slot: Slot, *, held_ms: float) -> None:
        try:
            await self.give_script(keys=slot.keys, args=[
                slot.request_id, slot.slots, self.lease_ms(), int(settings.GATEWAY_FAIR_BATCH_AGING_S * 1000),
                int(held_ms), *headroom()])
        except Exception as exc:  # its lease (a heartbeat's length) frees it
            log.warning("gateway: a lane slot was not given back (%s); its lease frees it", exc)

    @staticmethod
    def lease_ms() -> int:
        return int(settings.GATEWAY_FAIR_HEARTBEAT_S * 1000)

    # --- the tick ------------------------------------------------------------------------
    def _ensure_running(self) -> None:
        if (self._task is None or self._task.done()) and not self.closed:
            self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while not self.closed and (self.waiters or self.held):
            await asyncio.sleep(settings.GATEWAY_FAIR_TICK_S)  # first: a request shorter than a tick costs none
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.warning("gateway: fair queue tick failed; retrying", exc_info=True)

    async def tick(self) -> None:
        """Heartbeats of this worker's waiters and leases of its slots, and a dispatch, per replica."""
        by_field: dict[str, tuple[Slot, list[str], list[str]]] = {}
        for request_id, (_, slot) in list(self.waiters.items()):
            by_field.setdefault(slot.replica, (slot, [], []))[1].append(request_id)
        for request_id, slot in list(self.held.items()):
            by_field.setdefault(slot.replica, (slot, [], []))[2].append(request_id)
            slot.counted = True  # from this call on (a give-back after it goes after it, on one connection)
        for slot, waiting, held in by_field.values():
            granted = await self.tick_script(keys=slot.keys, args=[
                slot.slots, self.lease_ms(), int(settings.GATEWAY_FAIR_BATCH_AGING_S * 1000),
                int(settings.GATEWAY_FAIR_HEARTBEAT_S * 1000), *headroom(), len(waiting), *waiting, *held])
            for request_id, got in zip(waiting, granted, strict=False):
                if int(got):
                    self.wake(request_id)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    async def close(self) -> None:
        self.closed = True
        await stop_loop(self._task, "fair queue tick")
        if self.background:
            await asyncio.wait(self.background, timeout=5)

