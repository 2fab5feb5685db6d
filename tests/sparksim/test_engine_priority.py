"""--scheduling-policy, as vLLM's V1 scheduler applies it (sparksim.engine.priority): the
waiting queue by (priority, arrival) with `priority`, no preemption of a running request to
admit a waiting one, the worst priority preempted under KV pressure; `priority` refused
with fcfs as vLLM refuses it."""

import asyncio
import json
from collections.abc import Callable
from typing import Any

import httpx

from sparksim.standalone import EngineHandle
from tests.sparksim.conftest import QWEN
from tests.sparksim.test_engine_metrics import sample


def body(tokens: int, priority: int | None = None, prompt: str = "p") -> dict[str, Any]:
    out: dict[str, Any] = {"model": QWEN, "prompt": prompt, "max_tokens": tokens, "ignore_eos": True,
                           "stream": True}
    if priority is not None:
        out["priority"] = priority
    return out


async def stream(client: httpx.AsyncClient, url: str, payload: dict[str, Any], marks: dict[str, float],
                 name: str) -> int:
    """Streams the request; marks[name + '.first'/'.last'/'.end'] (loop time); the tokens."""
    loop, tokens = asyncio.get_running_loop(), 0
    async with client.stream("POST", f"{url}/v1/completions", json=payload) as response:
        assert response.status_code == 200, await response.aread()
        async for line in response.aiter_lines():
            if line.startswith("data: {") and json.loads(line[6:])["choices"][0].get("text"):
                tokens += 1
                marks.setdefault(f"{name}.first", loop.time())
                marks[f"{name}.last"] = loop.time()
    marks[f"{name}.end"] = loop.time()
    return tokens


async def until_waiting(client: httpx.AsyncClient, url: str, count: int) -> None:
    for _ in range(400):
        if (await client.get(f"{url}/_sim/state")).json()["waiting"] >= count:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never {count} waiting")


async def run_order(engine: EngineHandle, priorities: tuple[int | None, int | None, int | None]) -> dict[str, float]:
    """One slot: L runs; B then A arrive and wait. Marks of all three."""
    marks: dict[str, float] = {}
    running, first, second = priorities
    async with httpx.AsyncClient(timeout=60) as client:
        # L runs ~1 s (600 tokens at time scale 0.2): time for B and A to arrive on a loaded machine.
        tasks = [asyncio.ensure_future(stream(client, engine.url, body(600, running), marks, "L"))]
        await until_waiting(client, engine.url, 0)
        while "L.first" not in marks:
            await asyncio.sleep(0.01)
        tasks.append(asyncio.ensure_future(stream(client, engine.url, body(5, first, "b"), marks, "B")))
        await until_waiting(client, engine.url, 1)
        tasks.append(asyncio.ensure_future(stream(client, engine.url, body(5, second, "a"), marks, "A")))
        await until_waiting(client, engine.url, 2)
        assert await asyncio.gather(*tasks) == [600, 5, 5]
    return marks


def test_fcfs_refuses_a_priority_as_vllm_does_and_takes_zero(engine_factory: Callable[..., EngineHandle]) -> None:
    engine = engine_factory(QWEN, "--max-num-seqs", "2")
    refused = httpx.post(f"{engine.url}/v1/completions", json={**body(3, 1), "stream": False})
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["message"] == "Got priority 1 but Priority scheduling is not enabled."
    assert error["type"] == "BadRequestError"
    typed = httpx.post(f"{engine.url}/v1/completions", json={**body(3), "priority": "high", "stream": False})
    assert typed.status_code == 400 and "'priority'" in typed.json()["error"]["message"]
    assert httpx.post(f"{engine.url}/v1/completions", json={**body(3, 0), "stream": False}).status_code == 200


def test_priority_orders_the_waiting_queue_but_never_evicts_a_running_request(
        engine_factory: Callable[..., EngineHandle]) -> None:
    engine = engine_factory(QWEN, "--max-num-seqs", "1", "--scheduling-policy", "priority", time_scale=0.2)
    marks = asyncio.run(run_order(engine, (5, 5, 0)))
    # A (priority 0) arrived after B (5) and goes first; the running L (5) is not preempted for it.
    assert marks["A.first"] < marks["B.first"]
    assert marks["L.last"] < marks["A.first"]
    assert sample(engine, "vllm:num_preemptions_total") == 0


def test_fcfs_serves_the_waiting_queue_in_arrival_order(engine_factory: Callable[..., EngineHandle]) -> None:
    engine = engine_factory(QWEN, "--max-num-seqs", "1", time_scale=0.2)
    marks = asyncio.run(run_order(engine, (None, None, None)))
    assert marks["B.first"] < marks["A.first"]


async def race(engine: EngineHandle, older: int | None, newer: int | None) -> dict[str, float]:
    marks: dict[str, float] = {}
    async with httpx.AsyncClient(timeout=120) as client:
        first = asyncio.ensure_future(stream(client, engine.url, body(300, older, "old"), marks, "old"))
        while "old.first" not in marks:
            await asyncio.sleep(0.01)
        assert await asyncio.gather(first, stream(client, engine.url, body(300, newer, "new"), marks, "new")) == [
            300, 300]
    return marks


def test_kv_pressure_preempts_the_worst_priority_not_the_newest(engine_factory: Callable[..., EngineHandle]) -> None:
    """Two generations outgrow a ~400-token pool: fcfs preempts the newer request (the older
    finishes first); priority preempts the worse-priority one, here the older."""
    flags = ("--sim-profile", "deepseek", "--kv-cache-memory-bytes", "4M", "--max-model-len", "400")
    fcfs = engine_factory(QWEN, *flags, time_scale=0.5)
    marks = asyncio.run(race(fcfs, None, None))
    assert marks["old.end"] < marks["new.end"] and sample(fcfs, "vllm:num_preemptions_total") >= 1
    ranked = engine_factory(QWEN, *flags, "--scheduling-policy", "priority", time_scale=0.5)
    marks = asyncio.run(race(ranked, 10, 0))
    assert marks["new.end"] < marks["old.end"] and sample(ranked, "vllm:num_preemptions_total") >= 1


def test_a_better_priority_waiting_request_takes_the_blocks_a_preemption_frees(
        engine_factory: Callable[..., EngineHandle]) -> None:
    """vLLM admits what waits at its next step after a preemption (never in the step that
    preempted), not only when a request ends: two long streams fill max_num_seqs and outgrow
    a ~400-token pool; the short request of priority 0 waiting behind them starts right after
    the worse of them is preempted, and is done before the other ends."""
    engine = engine_factory(QWEN, "--sim-profile", "deepseek", "--kv-cache-memory-bytes", "4M",
                            "--max-model-len", "400", "--max-num-seqs", "2", "--scheduling-policy", "priority",
                            time_scale=0.5)

    async def scenario() -> dict[str, float]:
        marks: dict[str, float] = {}
        async with httpx.AsyncClient(timeout=120) as client:
            longs = [asyncio.ensure_future(stream(client, engine.url, body(300, 5, name), marks, name))
                     for name in ("one", "two")]
            while not {"one.first", "two.first"} <= set(marks):
                await asyncio.sleep(0.01)
            short = asyncio.ensure_future(stream(client, engine.url, body(3, 0, "short"), marks, "short"))
            await until_waiting(client, engine.url, 1)  # max_num_seqs: it waits, nothing is evicted for it
            assert await asyncio.gather(*longs, short) == [300, 300, 3]
        return marks

    marks = asyncio.run(scenario())
    assert sample(engine, "vllm:num_preemptions_total") >= 1
    assert marks["short.end"] < marks["one.end"]  # in at the preemption, not at a stream's end
