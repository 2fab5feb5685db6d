"""The benchmark job kind against a sparksim engine over HTTP, under the one job runner."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from typing import Any

import httpx
import pytest
from django.contrib.auth.models import User

from benchmarks.loadgen import LevelPlan, Target, run_level
from benchmarks.models import BenchmarkLevel, BenchmarkRun
from benchmarks.services import benchmark_start
from jobs.models import JobState
from jobs.services import job_cancel, job_run
from lanes.models import Lane
from sparksim.standalone import EngineHandle
from tests.benchmarks.conftest import SERVED, lane_for, start_and_run
from tests.conftest import SIM_QWEN, wait_for


def test_a_sweep_saves_every_level_with_the_lane_revision(bench_lane: Lane, admin_user: User,
                                                          dispatched: list[int]) -> None:
    run = start_and_run(bench_lane, admin_user, dispatched, concurrency=[1, 4], prompt_tokens=300,
                        output_tokens=16)
    assert run.job.state == JobState.SUCCEEDED, run.job.error
    assert run.revision_number == 1
    levels = list(run.levels.order_by("position"))
    assert [(level.target, level.concurrency) for level in levels] == [("direct", 1), ("direct", 4)]
    for level in levels:
        assert level.stats["completed"] == level.concurrency and level.stats["failed"] == 0
        assert level.stats["total_output_tokens"] == 16 * level.concurrency
        # The lane's own counters over the level: every prompt token of the level was queried.
        assert level.metrics["counters"]["vllm:generation_tokens"] == 16 * level.concurrency
        assert 300 * level.concurrency * 0.95 <= level.metrics["counters"]["vllm:prompt_tokens"]
    assert isinstance(BenchmarkRun.objects.get(pk=run.pk).params["concurrency"], list)


def test_bad_parameters_are_refused_naming_the_field(bench_lane: Lane, admin_user: User) -> None:
    from django.core.exceptions import ValidationError

    from benchmarks.services import benchmark_start

    for params, field, rule in (
        ({"concurrency": [0]}, "concurrency", "between 1 and 4,096"),
        ({"concurrency": "4"}, "concurrency", "non-empty list"),
        ({"concurrency": [1], "request_rates": [2.0]}, "request_rates", "not both"),
        ({"request_rates": [2.0]}, "requests_per_level", "Poisson"),
        ({"concurrency": [1], "targets": ["elsewhere"]}, "targets", "direct, gateway"),
        ({"concurrency": [1], "cache_mode": "warm"}, "cache_mode", "cold, cache_hit"),
        ({"concurrency": [1], "output_tokens": 2.5}, "output_tokens", "whole number"),
        ({"concurrency": [1], "timeout_s": 0}, "timeout_s", "between 1 and 7,200"),
        ({"concurrency": [1], "prompt_tokens": 10**12}, "prompt_tokens", "between 1 and 2,000,000"),
        ({"concurrency": [1], "bogus": 1}, "bogus", "unknown parameter"),
    ):
        with pytest.raises(ValidationError) as caught:
            benchmark_start(lane=bench_lane, user=admin_user, params=params)
        assert rule in " ".join(caught.value.message_dict[field]), (params, caught.value.message_dict)
    assert not BenchmarkRun.objects.exists()


def test_a_level_with_failures_counts_them(bench_lane: Lane, qwen_bench_engine: EngineHandle, admin_user: User,
                                           dispatched: list[int]) -> None:
    # The engine dies mid-stream after 20 tokens: some requests finish, the rest fail.
    httpx.post(f"{qwen_bench_engine.url}/_sim/faults", json={"die_mid_stream_after_tokens": 20}).raise_for_status()
    run = start_and_run(bench_lane, admin_user, dispatched, concurrency=[4], prompt_tokens=64, output_tokens=8)
    assert run.job.state == JobState.SUCCEEDED, run.job.error
    (level,) = run.levels.all()
    stats = level.stats
    assert stats["total"] == 4 and stats["completed"] + stats["failed"] == 4
    assert 1 <= stats["failed"] <= 3 and stats["errors"]
    # Only completed requests enter the latency figures; all of them produced 8 tokens.
    assert stats["total_output_tokens"] == 8 * stats["completed"]
    assert any("failed requests" in line for line in run.job.log_lines.values_list("text", flat=True))


def test_cancel_mid_sweep_keeps_the_finished_levels(transactional_db: None, engine_factory: Any,
                                                    admin_user: User, dispatched: list[int]) -> None:
    # Real time: a level lasts seconds. Once the first level is stored, the lane holds every
    # request that arrives, so the sweep cannot finish before Cancel, however slow the machine
    # (it would need levels 2 to 4 done in the moment the test takes to notice level 1).
    engine = engine_factory(SIM_QWEN, "--served-model-name", SERVED, time_scale=1.0)
    lane = lane_for(engine, "slow")
    job = benchmark_start(lane=lane, user=admin_user, params={
        "concurrency": [1, 2, 4, 8], "prompt_tokens": 64, "output_tokens": 200})
    worker = threading.Thread(target=job_run, kwargs={"job_id": job.pk})
    worker.start()
    try:
        wait_for(lambda: BenchmarkLevel.objects.filter(run__job=job).exists(), timeout=120, what="a first level")
        httpx.post(f"{engine.url}/_sim/faults", json={"hold": True}).raise_for_status()
        job_cancel(job=job, user=admin_user)
    finally:
        worker.join(timeout=120)
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED
    done = BenchmarkLevel.objects.filter(run__job=job).count()
    assert 1 <= done < 4
    steps = list(job.steps.order_by("position").values_list("state", flat=True))
    # Finished levels stay succeeded; the level under way when Cancel came is cancelled (or
    # finishes); the levels never reached are skipped. How far the sweep got depends on timing.
    letters = "".join({"succeeded": "s", "cancelled": "c", "skipped": "k"}.get(state, "?") for state in steps)
    assert re.fullmatch(r"s+c?k*", letters) and letters != "s" * len(steps), steps


def test_a_saturated_client_is_reported(qwen_bench_engine: EngineHandle) -> None:
    """A client too slow for its load (each chunk costs it 60 ms of blocked event loop) says
    so in the level's figures instead of passing its slowness off as the lane's."""

    async def level() -> dict[str, Any]:
        target = Target("direct", qwen_bench_engine.url, SERVED)
        plan = LevelPlan(concurrency=2, request_rate=None, requests=2, duration_s=None, output_tokens=8,
                         timeout_s=60)

        async def prompt(index: int) -> str:
            return f"saturate {index}"

        async with httpx.AsyncClient(timeout=60, trust_env=False) as client:
            result = await run_level(client, target, plan, prompt, hook=lambda: time.sleep(0.06))
        return result.stats()

    stats = asyncio.run(level())
    assert stats["completed"] == 2
    assert stats["client"]["saturated"] and stats["client"]["saturated_because"]
    assert stats["client"]["loop_lag_p99_ms"] >= 50


def test_poisson_arrivals_and_a_duration_level(qwen_bench_engine: EngineHandle) -> None:
    """At a request rate the requests are sent one by one at random gaps, not all at once;
    a level by duration keeps sending until its time is up."""

    async def levels() -> tuple[Any, Any]:
        target = Target("direct", qwen_bench_engine.url, SERVED)

        async def prompt(index: int) -> str:
            return f"poisson {index}"

        async with httpx.AsyncClient(timeout=60, trust_env=False) as client:
            rated = await run_level(client, target, LevelPlan(
                concurrency=None, request_rate=50.0, requests=6, duration_s=None, output_tokens=4, timeout_s=60),
                prompt)
            timed = await run_level(client, target, LevelPlan(
                concurrency=2, request_rate=None, requests=None, duration_s=0.3, output_tokens=4, timeout_s=60),
                prompt)
        return rated, timed

    rated, timed = asyncio.run(levels())
    sent = [record.sent_at for record in rated.records]
    assert len(sent) == 6 and len(set(sent)) == 6
    assert rated.stats()["completed"] == 6
    stats = timed.stats()
    assert stats["completed"] == stats["total"] >= 2 and stats["max_concurrent_requests"] <= 2


def test_a_sweep_where_nothing_answers_fails_and_keeps_its_levels(transactional_db: None, admin_user: User,
                                                                  dispatched: list[int]) -> None:
    from tests.conftest import free_port

    class Nowhere:
        host, port = "127.0.0.1", free_port()

    lane = lane_for(Nowhere(), "gone")  # type: ignore[arg-type]  # nothing listens there
    run = start_and_run(lane, admin_user, dispatched, concurrency=[1, 2], prompt_tokens=32, output_tokens=4)
    assert run.job.state == JobState.FAILED and "no request succeeded" in run.job.error
    assert [level.stats["failed"] for level in run.levels.order_by("position")] == [1, 2]
    log = "\n".join(run.job.log_lines.values_list("text", flat=True))
    assert "path check (direct, one token, not measured) failed:" in log  # said first; the levels still ran


def test_relaunch_repeats_the_sweep_on_the_lanes_current_revision(bench_lane: Lane, admin_user: User,
                                                                  dispatched: list[int]) -> None:
    from jobs.services import job_relaunch
    from lanes.models import LaneRevision

    first = start_and_run(bench_lane, admin_user, dispatched, concurrency=[1], prompt_tokens=32, output_tokens=4,
                          label="before")
    LaneRevision.objects.create(lane=bench_lane, number=2, config={"tensor_parallel_size": 1})
    again = job_relaunch(job=first.job, user=admin_user)
    job_run(job_id=again.pk)
    run = BenchmarkRun.objects.get(job=again)
    assert run.job.state == JobState.SUCCEEDED and run.revision_number == 2 and run.label == "before"
    assert run.levels.get().stats["completed"] == 1
