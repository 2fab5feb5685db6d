"""The bounds on the large bodies of one web process (gateway.large): the bytes they hold
(HELD) and the worker processes that inspect them (POOL), each refusing past its bound with
503 `server_busy` (gateway.shared_files.busy_error).

Both are shared per flow — a key, or its team (gateway.fair.flow_of, as on a full lane) —
by one rule (`admits`), so that one key's flood of large bodies (within its own rate limits)
cannot keep another key's single body out. A flow's first body (one that comes while its
flow holds no other) may take the bound to its end. A further body must leave the reserve
free — one place of the pool, one largest body (PORTAL_GATEWAY_MAX_BODY_BYTES) of the held
bytes — and, while other flows hold some too, may not take its flow past an equal share of
the rest (bound − reserve, ÷ the flows holding). What that proves: the further bodies of all
flows together never hold more than the rest, so a first body is refused only while other
flows' first bodies hold the reserve; and a further body only once its flow holds its share,
or the rest is full. A flow over its share (it flooded before the others came) drains: its
next bodies are refused until its held ones end. A body alone is always let in, whatever its
size. Unweighted: a key's weight shares a lane (gateway.fair), not these bounds."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from gateway.large import Inspection, inspect, inspect_shared
from gateway.lifeline import Lifeline, stop_executor, stop_resource_tracker, worker_start
from gateway.shared_files import SharedBody, busy_error, sweep_shared_files


def admits(total: int, mine: int, flows: int, size: int, *, limit: int, reserve: int, own: int = 0) -> bool:
    """Whether a body may take `size` more of a bound of `limit` (0: unbounded) that holds
    `total`, of which its flow holds `mine` (this body's `own` counted in it) and `flows`
    flows hold some: the rule of the module docstring, for both bounds."""
    if not limit or total == own:  # unbounded, or a body alone
        return True
    if mine == own:  # its flow's first body: the reserve too
        return total + size <= limit
    rest = limit - reserve
    return total + size <= rest and (mine + size) * flows <= rest


class Flows:
    """What each flow holds of one bound (its owner's lock held): entries above zero only,
    so `len` is the flows holding some."""

    def __init__(self) -> None:
        self.held: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.held)

    def of(self, flow: str) -> int:
        return self.held.get(flow, 0)

    def add(self, flow: str, size: int) -> None:
        left = self.held.get(flow, 0) + size
        if left > 0:
            self.held[flow] = left
        else:
            self.held.pop(flow, None)

    def clear(self) -> None:
        self.held.clear()


class HeldBytes:
    """The bytes of large bodies this web process holds, from the first byte read until
    their request ends (PORTAL_GATEWAY_LARGE_BODY_HELD_MAX_BYTES). Each body alone is bounded
    (PORTAL_GATEWAY_MAX_BODY_BYTES), but not how many arrive at once; and the pace that
    keeps them from taking the event loop also makes each one stay longer. Past the bound a
    body is refused with 503 `server_busy` — before a byte of it is read when its length is
    announced, as it grows past the bound otherwise — so slow uploads in numbers cannot fill
    the process's memory or /dev/shm. Shared per flow (`admits`): the reserve is one largest
    body (`largest`, PORTAL_GATEWAY_MAX_BODY_BYTES)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # tests run gateways on several event loops
        self.held = 0
        self.flows = Flows()

    def hold(self, limit: int, flow: str, largest: int) -> Holding:
        return Holding(self, limit, flow, largest)

    def _take(self, holding: Holding, size: int) -> None:
        with self._lock:
            if not admits(self.held, self.flows.of(holding.flow), len(self.flows), size, limit=holding.limit,
                          reserve=holding.largest, own=holding.size):
                raise busy_error()
            self.held += size
            self.flows.add(holding.flow, size)

    def _give(self, flow: str, size: int) -> None:
        with self._lock:
            self.held -= size
            self.flows.add(flow, -size)


class Holding:
    """One request's share of HELD, its flow's (gateway.fair.flow_of): grown as its body is
    known, given back once."""

    def __init__(self, owner: HeldBytes, limit: int, flow: str, largest: int) -> None:
        self.owner, self.limit, self.flow, self.largest, self.size = owner, limit, flow, largest, 0

    def grow_to(self, size: int) -> None:
        if size > self.size:
            self.owner._take(self, size - self.size)
            self.size = size

    def release(self) -> None:
        size, self.size = self.size, 0
        if size:
            self.owner._give(self.flow, size)


HELD = HeldBytes()


class LargeBodyPool:
    """The worker processes (started on the first large body) and the bound on how many
    large bodies may be in them or waiting for them, shared per flow (`admits`: the reserve
    is one place). One per web process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # tests run several event loops (servers) in one process
        self._executor: ProcessPoolExecutor | None = None
        self._lifeline: Lifeline | None = None  # the workers end with this process (gateway.lifeline)
        self._shape = (0, 0)
        self.pending = 0
        self.flows = Flows()

    def full(self, limit: int, flow: str) -> bool:
        """No place for a body of `flow` now (asked before its first byte is read)."""
        return not admits(self.pending, self.flows.of(flow), len(self.flows), 1, limit=limit, reserve=1)

    def _take(self, limit: int, flow: str, workers: int, niceness: int) -> ProcessPoolExecutor:
        with self._lock:
            if self.full(limit, flow):
                raise busy_error()
            executor = self._executor_for(workers, niceness)
            self.pending += 1
            self.flows.add(flow, 1)
            return executor

    def warm(self, workers: int, niceness: int) -> None:
        """Start the worker processes now (at the web process's start), not on the first
        large body: a spawned interpreter takes a while to import, longer at low priority.
        Also clears shared-memory files a killed web process left behind."""
        sweep_shared_files()
        with self._lock:
            executor = self._executor_for(workers, niceness)
        for _ in range(workers):
            executor.submit(os.getpid)

    def _executor_for(self, workers: int, niceness: int) -> ProcessPoolExecutor:
        if self._executor is None or self._shape != (workers, niceness):
            if self._executor is not None:
                self._executor.shutdown(wait=False)
            if self._lifeline is None:
                self._lifeline = Lifeline()
            # spawn: a fork of a threaded web process could inherit a held lock.
            self._executor = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                                                 initializer=worker_start, initargs=(niceness, self._lifeline.reader))
            self._shape = (workers, niceness)
        return self._executor

    def _release(self, flow: str) -> None:
        with self._lock:
            self.pending -= 1
            self.flows.add(flow, -1)

    def _reset(self, broken: ProcessPoolExecutor) -> None:
        with self._lock:
            if self._executor is broken:
                self._executor = None

    async def inspect(self, raw: bytes | SharedBody, *, flow: str, endpoint: str, max_n: int,
                      affinity_messages: int, want_prompt: bool, workers: int, queue: int,
                      niceness: int) -> Inspection:
        """Bytes are pickled to the worker; a SharedBody is read there by name. `flow`: whose
        place it takes (gateway.fair.flow_of)."""
        executor = self._take(workers + queue, flow, workers, niceness)
        try:
            if isinstance(raw, SharedBody):
                future = executor.submit(inspect_shared, raw.path, raw.size, endpoint, max_n,
                                         affinity_messages, want_prompt)
            else:
                future = executor.submit(inspect, raw, endpoint, max_n, affinity_messages, want_prompt)
        except (BrokenProcessPool, RuntimeError):
            self._release(flow)
            self._reset(executor)
            raise busy_error() from None
        # The slot is freed when the worker is done, not when the client leaves: the bound
        # counts the work really in the processes.
        future.add_done_callback(lambda _: self._release(flow))
        try:
            return await asyncio.wrap_future(future)
        except BrokenProcessPool:  # a worker died (killed): start afresh on the next body
            self._reset(executor)
            raise busy_error() from None

    def shutdown(self) -> None:
        """The web process stops: the worker processes exit (bounded) before it does."""
        with self._lock:
            executor, self._executor = self._executor, None
            lifeline, self._lifeline = self._lifeline, None
        if executor is not None:
            stop_executor(executor)
        if lifeline is not None:
            lifeline.cut()  # and the workers of an executor replaced earlier (another shape)
            stop_resource_tracker()


POOL = LargeBodyPool()
