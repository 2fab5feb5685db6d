"""The bounds on the large bodies of one web process (gateway.large): the bytes they hold
(HELD) and the worker processes that inspect them (POOL), each refusing past its bound with
503 `server_busy` (gateway.shared_files.busy_error)."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import threading
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from gateway.large import Inspection, inspect, inspect_shared
from gateway.lifeline import Lifeline, stop_executor, stop_resource_tracker, worker_start
from gateway.shared_files import SharedBody, busy_error, sweep_shared_files


class HeldBytes:
    """The bytes of large bodies this web process holds, from the first byte read until
    their request ends (PORTAL_GATEWAY_LARGE_BODY_HELD_MAX_BYTES). Each body alone is bounded
    (PORTAL_GATEWAY_MAX_BODY_BYTES), but not how many arrive at once; and the pace that
    keeps them from taking the event loop also makes each one stay longer. Past the bound a
    body is refused with 503 `server_busy` — before a byte of it is read when its length is
    announced, as it grows past the bound otherwise — so slow uploads in numbers cannot fill
    the process's memory or /dev/shm. A body alone is always let in, whatever its size."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # tests run gateways on several event loops
        self.held = 0

    def hold(self, limit: int) -> Holding:
        return Holding(self, limit)

    def _take(self, size: int, limit: int, own: int) -> None:
        """`own`: what the taker holds already (a body alone is never refused)."""
        with self._lock:
            if limit and self.held > own and self.held + size > limit:
                raise busy_error()
            self.held += size

    def _give(self, size: int) -> None:
        with self._lock:
            self.held -= size


class Holding:
    """One request's share of HELD: grown as its body is known, given back once."""

    def __init__(self, owner: HeldBytes, limit: int) -> None:
        self.owner, self.limit, self.size = owner, limit, 0

    def grow_to(self, size: int) -> None:
        if size > self.size:
            self.owner._take(size - self.size, self.limit, self.size)
            self.size = size

    def release(self) -> None:
        size, self.size = self.size, 0
        if size:
            self.owner._give(size)


HELD = HeldBytes()


class LargeBodyPool:
    """The worker processes (started on the first large body) and the bound on how many
    large bodies may be in them or waiting for them. One per web process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # tests run several event loops (servers) in one process
        self._executor: ProcessPoolExecutor | None = None
        self._lifeline: Lifeline | None = None  # the workers end with this process (gateway.lifeline)
        self._shape = (0, 0)
        self.pending = 0

    def full(self, limit: int) -> bool:
        return self.pending >= limit

    def _take(self, limit: int, workers: int, niceness: int) -> ProcessPoolExecutor:
        with self._lock:
            if self.pending >= limit:
                raise busy_error()
            executor = self._executor_for(workers, niceness)
            self.pending += 1
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

    def _release(self, _: Future[Inspection]) -> None:
        with self._lock:
            self.pending -= 1

    def _reset(self, broken: ProcessPoolExecutor) -> None:
        with self._lock:
            if self._executor is broken:
                self._executor = None

    async def inspect(self, raw: bytes | SharedBody, *, endpoint: str, max_n: int, affinity_messages: int,
                      want_prompt: bool, workers: int, queue: int, niceness: int) -> Inspection:
        """Bytes are pickled to the worker; a SharedBody is read there by name."""
        executor = self._take(workers + queue, workers, niceness)
        try:
            if isinstance(raw, SharedBody):
                future = executor.submit(inspect_shared, raw.path, raw.size, endpoint, max_n,
                                         affinity_messages, want_prompt)
            else:
                future = executor.submit(inspect, raw, endpoint, max_n, affinity_messages, want_prompt)
        except (BrokenProcessPool, RuntimeError):
            self._release(Future())
            self._reset(executor)
            raise busy_error() from None
        # The slot is freed when the worker is done, not when the client leaves: the bound
        # counts the work really in the processes.
        future.add_done_callback(self._release)
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
