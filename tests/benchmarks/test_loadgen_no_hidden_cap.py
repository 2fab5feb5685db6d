"""A level's client never hides a cap: it holds a connection per stream of its level (httpx's
default pool stops at 100), reuses them (streams read to their end), stamps when each request
reached the wire, and a level whose requests did not all reach the lane is flagged."""

from __future__ import annotations

import asyncio
import threading

import httpx

from benchmarks.loadgen import LevelPlan, LevelResult, Target, level_client, run_level
from core.http import async_http_client
from sparksim.standalone import EngineHandle
from tests.benchmarks.conftest import SERVED
from tests.conftest import wait_for

CONCURRENCY = 256


def _streams_received(engine: EngineHandle) -> int:
    received = httpx.get(f"{engine.url}/_sim/requests").json()
    return sum(1 for request in received if request["path"] == "/v1/chat/completions")


def _level(engine: EngineHandle, plan: LevelPlan, client: httpx.AsyncClient | None = None) -> LevelResult:
    async def prompt_for(index: int) -> str:
        return f"cap request {index}"

    async def go() -> LevelResult:
        async with client or level_client(plan.concurrency, httpx.Timeout(120.0)) as used:
            return await run_level(used, Target("direct", engine.url, SERVED), plan, prompt_for)

    return asyncio.run(go())


def _held_level(engine: EngineHandle, expected_at_lane: int, client: httpx.AsyncClient | None = None) -> LevelResult:
    """A level of CONCURRENCY requests while the lane holds every one it receives: released
    once `expected_at_lane` are there."""
    plan = LevelPlan(concurrency=CONCURRENCY, request_rate=None, requests=CONCURRENCY, duration_s=None,
                     output_tokens=4, timeout_s=120.0)
    faults = f"{engine.url}/_sim/faults"
    httpx.post(faults, json={"hold": True}).raise_for_status()
    done: list[LevelResult] = []
    worker = threading.Thread(target=lambda: done.append(_level(engine, plan, client)))
    worker.start()
    try:
        wait_for(lambda: _streams_received(engine) >= expected_at_lane, timeout=120,
                 what=f"{expected_at_lane} streams at the lane")
    finally:
        httpx.post(faults, json={"hold": False}).raise_for_status()
        worker.join(timeout=120)
    (result,) = done
    return result


def test_concurrency_256_has_256_requests_in_flight_at_the_lane(qwen_bench_engine: EngineHandle) -> None:
    result = _held_level(qwen_bench_engine, CONCURRENCY)
    stats = result.stats()
    assert stats["completed"] == CONCURRENCY
    assert stats["max_in_flight_at_lane"] == CONCURRENCY == _streams_received(qwen_bench_engine)
    assert stats["connections_opened"] == CONCURRENCY
    assert not [flag for flag in stats["flags"] if "in flight" in flag]
    assert all(record.headers_at is not None and record.pre_send is not None and record.pre_send >= 0
               for record in result.records)
    assert stats["p95_pre_send_ms"] >= stats["median_pre_send_ms"] >= 0


def test_a_client_capped_under_the_level_is_flagged(qwen_bench_engine: EngineHandle) -> None:
    # httpx's default pool: 100 connections. The lane never sees more; the level says so.
    capped = async_http_client(timeout=httpx.Timeout(120.0))
    result = _held_level(qwen_bench_engine, 100, client=capped)
    stats = result.stats()
    assert stats["completed"] == CONCURRENCY
    assert stats["max_in_flight_at_lane"] == 100
    (flag,) = [flag for flag in stats["flags"] if "in flight" in flag]
    assert "at most 100 of 256 requests" in flag
    # The requests that waited for a connection show it in their connection wait.
    assert stats["p99_connection_wait_ms"] > stats["median_connection_wait_ms"]


def test_streams_are_read_to_their_end_so_connections_are_reused(qwen_bench_engine: EngineHandle) -> None:
    plan = LevelPlan(concurrency=4, request_rate=None, requests=32, duration_s=None, output_tokens=8, timeout_s=60.0)
    stats = _level(qwen_bench_engine, plan).stats()
    assert stats["completed"] == 32
    assert stats["connections_opened"] == 4
