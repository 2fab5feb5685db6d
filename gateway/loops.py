"""Stopping the gateway's background loops (replica health sync, cache invalidation
listener) without trusting one cancellation to end them.

A loop that catches `Exception` to survive Redis restarts ends only if the CancelledError
reaches it intact; a library that replaces it while cleaning up (an error raised from its
own disconnect, say) turns the cancellation into an ordinary failure, and the loop goes on.
An unbounded `await task` then holds shutdown (or a test) forever. So each loop also checks
a stop flag, and the wait is bounded, cancelling again until the task is done."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

log = logging.getLogger(__name__)


async def stop_loop(task: asyncio.Task[Any] | None, what: str, *, grace_s: float = 5.0, tries: int = 5) -> bool:
    """Cancel `task` and wait for it, at most `grace_s` in all; True when it has ended."""
    if task is None:
        return True
    for _ in range(tries):
        if task.done():
            break
        task.cancel()
        await asyncio.wait({task}, timeout=grace_s / tries)
    if not task.done():
        log.warning("gateway: the %s did not stop within %g s; left behind", what, grace_s)
        return False
    if not task.cancelled() and task.exception() is not None:
        log.warning("gateway: the %s ended with %r", what, task.exception())
    return True
