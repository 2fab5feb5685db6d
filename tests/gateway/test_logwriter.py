"""The request log writer: rows leave the hot path and reach the database in batches."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from routing.gateway import logwriter
from routing.gateway.logwriter import RequestLogWriter
from tests.gateway.conftest import run_async


def test_rows_are_written_in_batches_by_a_background_task(monkeypatch: pytest.MonkeyPatch, settings: Any) -> None:
    settings.GATEWAY_LOG_BATCH = 500
    settings.GATEWAY_LOG_FLUSH_S = 0.05
    batches: list[int] = []
    monkeypatch.setattr(logwriter, "write_rows", lambda rows: batches.append(len(rows)))

    async def scenario() -> None:
        writer = RequestLogWriter()
        for n in range(1200):
            writer.add({"n": n})  # returns at once: nothing is written on the caller's time
        assert batches == []
        deadline = asyncio.get_running_loop().time() + 30  # a loaded machine's thread pool may be slow
        while sum(batches) < 1200 and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.02)

    run_async(scenario)
    assert batches == [500, 500, 200]


def test_a_failing_database_loses_the_batch_but_not_the_process(monkeypatch: pytest.MonkeyPatch,
                                                                settings: Any) -> None:
    settings.GATEWAY_LOG_FLUSH_S = 0.01

    def broken(rows: list[dict[str, Any]]) -> None:
        raise RuntimeError("database down")

    monkeypatch.setattr(logwriter, "write_rows", broken)

    async def scenario() -> RequestLogWriter:
        writer = RequestLogWriter()
        writer.add({"n": 1})
        await writer.flush()
        return writer

    assert not run_async(scenario).queue
