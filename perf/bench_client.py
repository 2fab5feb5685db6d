"""How honest the benchmark's own client is, against a sparksim engine process in real time:
open-loop levels on absolute deadlines (dispatch delay, achieved rate, TTFT from the schedule
beside TTFT from the send), the same level with a client blocked on every chunk (it falls
behind: the level must say so), connection reuse (streams read to their end) and a level of
256 concurrent streams against a lane that holds them (all 256 at the lane, or flagged).

    .venv/bin/python -m perf.bench_client [--rate 40] [--requests 400] [--block-ms 2]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks.loadgen import ChunkHook, LevelPlan, Target, level_client, run_level
from sparksim.standalone import EngineHandle, start_engine

MODEL = "Qwen/Qwen3.8-27B-FP8"
SERVED = "qwen-bench"


def level(engine: EngineHandle, plan: LevelPlan, hook: ChunkHook | None = None) -> dict[str, Any]:
    async def prompt_for(index: int) -> str:
        return f"bench client request {index}"

    async def go() -> dict[str, Any]:
        async with level_client(plan.concurrency, httpx.Timeout(600.0)) as client:
            result = await run_level(client, Target("direct", engine.url, SERVED), plan, prompt_for, hook=hook)
        return result.stats()

    return asyncio.run(go())


def open_loop_line(name: str, stats: dict[str, Any]) -> str:
    return (f"{name:26} sent {stats['achieved_request_rate']:6.2f} req/s of {stats['scheduled_request_rate']:6.2f} "
            f"scheduled; dispatch delay p50 {stats['median_dispatch_delay_ms']:7.2f} ms p99 "
            f"{stats['p99_dispatch_delay_ms']:8.2f} ms, last {stats['last_dispatch_delay_ms']:8.1f} ms; TTFT p50 "
            f"from the send {stats['median_ttft_ms']:6.1f} ms, from the schedule "
            f"{stats['median_ttft_from_schedule_ms']:8.1f} ms; flags: {len(stats['flags'])}"
            + "".join(f"\n{'':26} - {flag}" for flag in stats["flags"]))


def streams_received(engine: EngineHandle) -> int:
    received = httpx.get(f"{engine.url}/_sim/requests").json()
    return sum(1 for request in received if request["path"] == "/v1/chat/completions")


def held_level(engine: EngineHandle, concurrency: int) -> dict[str, Any]:
    before = streams_received(engine)  # the engine counts every stream since it started
    faults = f"{engine.url}/_sim/faults"
    httpx.post(faults, json={"hold": True}).raise_for_status()
    plan = LevelPlan(concurrency=concurrency, request_rate=None, requests=concurrency, duration_s=None,
                     output_tokens=4, timeout_s=600.0)
    done: list[dict[str, Any]] = []
    worker = threading.Thread(target=lambda: done.append(level(engine, plan)))
    worker.start()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if streams_received(engine) - before >= concurrency:
            break
        time.sleep(0.05)
    httpx.post(faults, json={"hold": False}).raise_for_status()
    worker.join()
    return done[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rate", type=float, default=40.0)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--block-ms", type=float, default=2.0)
    parser.add_argument("--output-tokens", type=int, default=32)
    parser.add_argument("--time-scale", type=float, default=0.01)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        engine = start_engine(MODEL, Path(scratch) / "engine.log", "--served-model-name", SERVED,
                              time_scale=args.time_scale)
        try:
            plan = LevelPlan(concurrency=None, request_rate=args.rate, requests=args.requests, duration_s=None,
                             output_tokens=args.output_tokens, timeout_s=600.0, seed=1)
            print(open_loop_line("idle client", level(engine, plan)))
            blocked = level(engine, plan, hook=lambda: time.sleep(args.block_ms / 1000))
            print(open_loop_line(f"blocked {args.block_ms:g} ms a chunk", blocked))
            reuse = level(engine, LevelPlan(concurrency=4, request_rate=None, requests=32, duration_s=None,
                                            output_tokens=8, timeout_s=600.0))
            print(f"{'C=4, 32 requests':26} connections opened: {reuse['connections_opened']}; pre-send p50 "
                  f"{reuse['median_pre_send_ms']:.2f} ms p95 {reuse['p95_pre_send_ms']:.2f} ms")
            held = held_level(engine, 256)
            print(f"{'C=256 against hold':26} in flight at the lane {held['max_in_flight_at_lane']}/256, connections "
                  f"{held['connections_opened']}, connection wait p99 {held['p99_connection_wait_ms']:.1f} ms, "
                  f"pre-send p95 {held['p95_pre_send_ms']:.1f} ms; flags: {held['flags']}")
            client = held["client"]
            print(f"{'':26} client CPU {client['cpu_share']:.0%} of a core; host CPUs {client['host_busy_share']:.0%} "
                  f"busy, load {client['host_load_per_core']:.2f} per core")
        finally:
            engine.stop()


if __name__ == "__main__":
    main()
