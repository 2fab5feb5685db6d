"""Open-loop levels send on absolute deadlines from a seeded schedule and report latency from
it: a client that falls behind cannot make its level look faster than it was."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from benchmarks.loadgen import ChunkHook, LevelPlan, LevelResult, Target, level_client, poisson_schedule, run_level
from core.stats import percentile_linear
from sparksim.standalone import EngineHandle
from tests.benchmarks.conftest import SERVED

RATE = 40.0
REQUESTS = 40
OUTPUT_TOKENS = 16
SEED = 7
BLOCK_PER_CHUNK_S = 0.004  # the client's loop blocked this long per chunk: 64 ms a request


def _level(engine: EngineHandle, plan: LevelPlan, hook: ChunkHook | None = None) -> LevelResult:
    async def prompt_for(index: int) -> str:
        return f"open loop request {index}"

    async def go() -> LevelResult:
        async with level_client(plan.concurrency, httpx.Timeout(60.0)) as client:
            return await run_level(client, Target("direct", engine.url, SERVED), plan, prompt_for,
                                   hook=hook)

    return asyncio.run(go())


def test_the_schedule_is_seeded_absolute_offsets() -> None:
    offsets = poisson_schedule(RATE, SEED, count=REQUESTS)
    assert offsets == poisson_schedule(RATE, SEED, count=REQUESTS) != poisson_schedule(RATE, SEED + 1, count=REQUESTS)
    assert offsets[0] == 0.0 and offsets == sorted(offsets) and len(offsets) == REQUESTS
    assert poisson_schedule(RATE, SEED, duration_s=0.5) == [at for at in offsets if at < 0.5]


def test_a_client_blocked_per_chunk_reports_latency_from_the_schedule_and_is_flagged(
        qwen_bench_engine: EngineHandle) -> None:
    plan = LevelPlan(concurrency=None, request_rate=RATE, requests=REQUESTS, duration_s=None,
                     output_tokens=OUTPUT_TOKENS, timeout_s=60.0, seed=SEED)
    result = _level(qwen_bench_engine, plan, hook=lambda: time.sleep(BLOCK_PER_CHUNK_S))
    stats = result.stats()
    assert stats["completed"] == REQUESTS
    # tᵢ is the seeded schedule's, kept per request, whatever the sends did.
    intended = [result.started_at + offset for offset in poisson_schedule(RATE, SEED, count=REQUESTS)]
    assert [record.scheduled_at for record in result.records] == pytest.approx(intended, abs=1e-9)
    assert stats["schedule_s"] == pytest.approx(poisson_schedule(RATE, SEED, count=REQUESTS), abs=1e-5)
    # The truth: each first chunk seen against the time it was meant to be sent.
    truth = [record.chunk_times[0] - at for record, at in zip(result.records, intended, strict=True)]
    for q, key in ((0.5, "median"), (0.95, "p95"), (0.99, "p99")):
        assert stats[f"{key}_ttft_from_schedule_ms"] >= (percentile_linear(truth, q) or 0) * 1000 - 1e-6
    assert all(record.ttft_from_schedule is not None and record.ttft_from_schedule >= record.ttft
               for record in result.records)
    # The client fell behind (64 ms of blocked loop per request against 25 ms between them):
    # the sends say so, the latency from the send hides it, the level is flagged with figures.
    assert stats["achieved_request_rate"] < stats["scheduled_request_rate"] * 0.95
    assert stats["last_dispatch_delay_ms"] > 0 and stats["max_dispatch_delay_ms"] >= stats["last_dispatch_delay_ms"]
    assert stats["median_ttft_from_schedule_ms"] > stats["median_ttft_ms"]
    (flag,) = [flag for flag in stats["flags"] if "against a schedule of" in flag]
    assert f"{stats['achieved_request_rate']:.2f} requests/s" in flag and "late" in flag


def test_a_concurrency_level_has_no_schedule(qwen_bench_engine: EngineHandle) -> None:
    plan = LevelPlan(concurrency=2, request_rate=None, requests=4, duration_s=None, output_tokens=4, timeout_s=60.0)
    stats = _level(qwen_bench_engine, plan).stats()
    assert stats["completed"] == 4
    assert "achieved_request_rate" not in stats and "schedule_s" not in stats
