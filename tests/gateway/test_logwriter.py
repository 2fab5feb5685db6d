"""The request log writer: rows leave the hot path and reach the database in batches."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from gateway import logwriter
from gateway.logwriter import RequestLogWriter
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


@pytest.mark.django_db
def test_a_batch_is_copied_into_the_table_with_every_column_and_the_models_defaults() -> None:
    from gateway.logwriter import COLUMN_DEFAULTS
    from gateway.models import ApiKey, RequestLog

    key = ApiKey.objects.create(name="log", prefix="sk-log", secret_hash="0" * 64)
    full = {"request_id": "req-full", "key_id": key.id, "endpoint": "chat.completions",
            "requested_model": "auto\x00", "lane": "qwen", "replica": 1, "route_reason": "router",
            "route_score": 0.75, "route_label": "code", "route_prototype": "write a function",
            "router_version": 3, "shadow_version": 4, "shadow_lane": "deepseek", "shadow_label": "chat",
            "shadow_score": 0.5, "stream": True, "status": 200, "error_code": "", "prompt_tokens": 12,
            "completion_tokens": 34, "usage_source": "tokenize", "ttft_ms": 5.5, "latency_ms": 80.25,
            "upstream_ms": 70.0, "queue_ms": 12.5, "priority": "batch", "prompt_text": "a\x00b ü",
            "conversation": "c" * 32, "received_at": datetime(2026, 11, 24, 14, 0, 0, 250_000, tzinfo=UTC)}
    assert set(full) == set(COLUMN_DEFAULTS)  # the test names every column the writer copies
    logwriter.write_rows([full, {"request_id": "req-bare", "endpoint": "completions", "status": 401,
                                 "latency_ms": 0.5}])
    rows = {row.request_id: row for row in RequestLog.objects.all()}
    saved = rows["req-full"]
    for name, value in full.items():
        expected = value.replace("\x00", "\ufffd") if isinstance(value, str) else value
        assert getattr(saved, name) == expected, name  # PostgreSQL text holds no NUL
    bare = rows["req-bare"]
    assert (bare.key_id, bare.lane, bare.stream, bare.prompt_tokens, bare.route_prototype, bare.usage_source,
            bare.conversation) == (None, "", False, None, "", "", "")
    assert saved.created_at == bare.created_at and saved.created_at is not None  # stamped when written


@pytest.mark.django_db
def test_without_postgresql_the_batch_goes_through_bulk_create(monkeypatch: pytest.MonkeyPatch) -> None:
    """The embedded SQLite of `make run` has no COPY: the same rows reach the table."""
    from django.db import connection

    from gateway.models import RequestLog

    monkeypatch.setattr(connection, "vendor", "sqlite")
    logwriter.write_rows([{"request_id": "req-lite", "endpoint": "completions", "status": 200, "latency_ms": 2.5,
                           "lane": "qwen", "stream": True, "prompt_tokens": 7}])
    saved = RequestLog.objects.get(request_id="req-lite")
    assert (saved.lane, saved.stream, saved.prompt_tokens, saved.latency_ms, saved.route_prototype) == (
        "qwen", True, 7, 2.5, "")
    assert saved.created_at is not None
