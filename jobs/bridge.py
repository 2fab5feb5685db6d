"""An asyncio event loop in its own thread: the transports are asyncio, the job runner is a
plain Celery task (sync ORM) that submits their coroutines here."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")


class AsyncBridge:
    """An event loop in its own thread: transports are asyncio, the runner is a plain
    Celery task (sync ORM)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="job-transport-loop", daemon=True)
        self.thread.start()

    def submit(self, coro: Coroutine[Any, Any, T], stop: threading.Event | None = None) -> Future[T]:
        """Runs `coro` on the loop. Setting `stop` cancels it *inside* the loop, so its
        cleanup (killing the process on the node) finishes before the future does."""
        return asyncio.run_coroutine_threadsafe(_stoppable(coro, stop or threading.Event()), self.loop)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        if not self.thread.is_alive():
            self.loop.close()


async def _stoppable(coro: Coroutine[Any, Any, T], stop: threading.Event) -> T:
    task = asyncio.ensure_future(coro)
    cancelled = False
    while not task.done():
        if stop.is_set() and not cancelled:
            task.cancel()  # once: a second cancel would interrupt the remote kill it triggers
            cancelled = True
        await asyncio.wait({task}, timeout=0.05)
    return task.result()
