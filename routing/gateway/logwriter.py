"""Request log rows are queued in memory and written in batches by a background task, so
the client's answer never waits for PostgreSQL. The queue is bounded: if the database
stalls, the oldest unsaved rows are dropped (and counted) rather than growing the
process until it is killed (LiteLLM #12685, #21908)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from typing import Any

from django.conf import settings

from routing.gateway.db import db_call
from routing.models import RequestLog

log = logging.getLogger(__name__)

MAX_QUEUED = 100_000


def write_rows(rows: list[dict[str, Any]]) -> None:
    RequestLog.objects.bulk_create([RequestLog(**row) for row in rows], batch_size=1000)


class RequestLogWriter:
    def __init__(self) -> None:
        self.queue: deque[dict[str, Any]] = deque(maxlen=MAX_QUEUED)
        self.dropped = 0
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def add(self, row: dict[str, Any]) -> None:
        if len(self.queue) == MAX_QUEUED:
            self.dropped += 1
        self.queue.append(row)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run())
        if len(self.queue) >= settings.GATEWAY_LOG_BATCH:
            self._wake.set()

    async def _run(self) -> None:
        while self.queue:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(settings.GATEWAY_LOG_FLUSH_S):  # not wait_for: see replicas._run
                    await self._wake.wait()
            self._wake.clear()
            await self.flush()

    async def flush(self) -> None:
        while self.queue:
            batch = [self.queue.popleft() for _ in range(min(len(self.queue), settings.GATEWAY_LOG_BATCH))]
            try:
                await db_call(write_rows, batch)
            except Exception:
                log.exception("gateway: could not write %d request log rows", len(batch))
                return
