"""Request log rows are queued in memory and written in batches by a background task, so
the client's answer never waits for PostgreSQL. The queue is bounded: if the database
stalls, the oldest unsaved rows are dropped (and counted) rather than growing the
process until it is killed (LiteLLM #12685, #21908).

A batch goes in with one `COPY ... FROM STDIN` (psycopg formats the rows in C), not the
ORM's bulk_create: building an INSERT of 500 rows through Django's SQL compiler cost the
gateway process a fifth of its CPU at 650 requests/s (py-spy), CPU and GIL taken from the
event loop that serves the requests."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from typing import Any

from django.conf import settings
from django.db import connection
from django.utils import timezone

from core.db import db_call
from gateway.models import RequestLog

log = logging.getLogger(__name__)

MAX_QUEUED = 100_000


def column_default(field: Any) -> Any:
    """The value a row that does not name the column gets (as bulk_create gave it)."""
    if field.has_default():
        return field.get_default()
    return "" if field.empty_strings_allowed and not field.null else None


# Every column but the id and the time. Rows name columns (`key_id`, not `key`).
COLUMN_DEFAULTS: dict[str, Any] = {
    str(field.column): column_default(field)
    for field in RequestLog._meta.concrete_fields if not field.primary_key and field.column != "created_at"
}
COPY_SQL = f"COPY {RequestLog._meta.db_table} (created_at, {', '.join(COLUMN_DEFAULTS)}) FROM STDIN"


def cell(value: Any) -> Any:
    # PostgreSQL text cannot hold NUL; a client's prompt or model name may carry one.
    return value.replace("\x00", "\ufffd") if isinstance(value, str) and "\x00" in value else value


def write_rows(rows: list[dict[str, Any]]) -> None:
    """The batch, stamped with the time it is written: one COPY on PostgreSQL, bulk_create
    elsewhere (the embedded SQLite of `make run`), as the job log does (jobs.logsink)."""
    now = timezone.now()
    if connection.vendor != "postgresql":
        RequestLog.objects.bulk_create([RequestLog(created_at=now, **row) for row in rows], batch_size=1000)
        return
    with connection.cursor() as cursor, cursor.cursor.copy(COPY_SQL) as copy:
        for row in rows:
            copy.write_row([now, *(cell(row.get(name, default)) for name, default in COLUMN_DEFAULTS.items())])


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
