"""A wave (benchmarks.loadgen.run_wave): every stream sent at once, past httpx's default
pool of 100 connections, its records in the prompts' order, against a real sparksim engine."""

from __future__ import annotations

import asyncio
import threading

import httpx

from benchmarks.loadgen import LevelResult, Target, run_wave, wave_client
from sparksim.standalone import EngineHandle
from tests.benchmarks.conftest import SERVED
from tests.conftest import wait_for

STREAMS = 120  # more than httpx's default pool holds at once
OUTPUT_TOKENS = 8


def _wave(engine: EngineHandle, prompts: list[str]) -> LevelResult:
    async def go() -> LevelResult:
        async with wave_client(len(prompts), timeout_s=120.0) as client:
            return await run_wave(client, Target("direct", engine.url, SERVED), prompts, OUTPUT_TOKENS)

    return asyncio.run(go())


def _streams_received(engine: EngineHandle) -> int:
    received = httpx.get(f"{engine.url}/_sim/requests").json()
    return sum(1 for request in received if request["path"] == "/v1/chat/completions")


def test_a_wave_sends_every_stream_at_once_in_the_prompts_order(qwen_bench_engine: EngineHandle) -> None:
    # Prompts of growing length, so each record's prompt token count tells which prompt it ran.
    prompts = [" ".join(["wave"] * (index + 1)) for index in range(STREAMS)]
    faults = f"{qwen_bench_engine.url}/_sim/faults"
    # The engine holds every request it receives: all of them arrive only if none waited for another.
    httpx.post(faults, json={"hold": True}).raise_for_status()
    done: list[LevelResult] = []
    worker = threading.Thread(target=lambda: done.append(_wave(qwen_bench_engine, prompts)))
    worker.start()
    try:
        wait_for(lambda: _streams_received(qwen_bench_engine) == STREAMS, what=f"{STREAMS} streams at the engine")
    finally:
        httpx.post(faults, json={"hold": False}).raise_for_status()
        worker.join(timeout=120)
    (wave,) = done
    assert [record.error for record in wave.records] == [""] * STREAMS
    assert all(record.output_tokens == OUTPUT_TOKENS and record.decode_tok_s for record in wave.records)
    counts = [record.prompt_tokens for record in wave.records]
    assert counts == sorted(counts) and len(set(counts)) == STREAMS
    stats = wave.stats()
    assert stats["completed"] == STREAMS and stats["max_concurrent_requests"] == STREAMS
