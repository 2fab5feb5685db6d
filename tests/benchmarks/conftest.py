"""Benchmark fixtures: a lane in front of a sparksim engine (a real process over HTTP), a
dispatcher that records queued jobs so tests run them with the real runner, and a helper
that starts a sweep and runs it to its end."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User

from benchmarks.models import BenchmarkLevel, BenchmarkRun
from benchmarks.services import benchmark_start
from benchmarks.stats import RequestRecord, level_stats
from jobs.models import Job, JobKind, JobState
from jobs.services import job_run
from lanes.models import Lane, LaneNode, LaneRevision, Node
from sparksim.standalone import EngineHandle
from tests.conftest import SIM_QWEN

SERVED = "qwen-bench"


@pytest.fixture
def dispatched(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    queued: list[int] = []
    monkeypatch.setattr("jobs.services.dispatch_job", lambda job_id, time_limit_s: queued.append(job_id))
    return queued


def lane_for(engine: EngineHandle, name: str = "qwen") -> Lane:
    node = Node.objects.create(name=f"bench-{name}", address=engine.host, transport="local")
    lane = Lane.objects.create(
        name=name, model_id=SIM_QWEN, served_model_name=SERVED, image="vllm/vllm-openai@sha256:" + "0" * 64,
        api_port=engine.port, max_model_len=32768, observed_state="serving", desired_state="serving",
    )
    LaneNode.objects.create(lane=lane, node=node, rank=0)
    LaneRevision.objects.create(lane=lane, number=1, config={"tensor_parallel_size": 1})
    return lane


@pytest.fixture
def qwen_bench_engine(engine_factory: Callable[..., EngineHandle]) -> EngineHandle:
    return engine_factory(SIM_QWEN, "--served-model-name", SERVED, time_scale=0.001)


@pytest.fixture
def bench_lane(transactional_db: None, qwen_bench_engine: EngineHandle) -> Lane:
    return lane_for(qwen_bench_engine)


def start_and_run(lane: Lane, user: User, dispatched: list[int], **params: Any) -> BenchmarkRun:
    job = benchmark_start(lane=lane, user=user, params=params)
    assert dispatched[-1] == job.pk
    job_run(job_id=job.pk)
    return BenchmarkRun.objects.select_related("job").get(job=Job.objects.get(pk=job.pk))


@pytest.fixture
def finished_runs(db: None, admin_user: User) -> tuple[BenchmarkRun, BenchmarkRun]:
    node = Node.objects.create(name="spark9", address="127.0.0.9", transport="local")
    lane = Lane.objects.create(name="qwen", model_id="Qwen/Qwen3.8-27B-FP8", image="img@sha256:" + "0" * 64,
                               max_model_len=32768)
    LaneNode.objects.create(lane=lane, node=node, rank=0)
    runs = []
    for number, ttft in ((1, 0.5), (2, 0.25)):
        revision = LaneRevision.objects.create(lane=lane, number=number, config={})
        job = Job.objects.create(kind=JobKind.BENCHMARK, lane=lane, lane_revision=revision, state=JobState.SUCCEEDED,
                                 params={"concurrency": [1]})
        run = BenchmarkRun.objects.create(job=job, lane=lane, lane_name="qwen", lane_revision=revision,
                                          revision_number=number, label=f"r{number}", levels_planned=1,
                                          params={"concurrency": [1], "targets": ["direct"], "cache_mode": "cold",
                                                  "prompt_tokens": 100, "output_tokens": 3})
        record = RequestRecord(sent_at=0.0, chunk_times=[ttft, ttft + 0.1, ttft + 0.2], prompt_tokens=100,
                               output_tokens=3)
        BenchmarkLevel.objects.create(run=run, position=0, target="direct", concurrency=1,
                                      stats=level_stats([record], started_at=0.0, ended_at=ttft + 0.2))
        runs.append(run)
    return runs[0], runs[1]
