"""Benchmark fixtures: a lane in front of a sparksim engine (a real process over HTTP), a
dispatcher that records queued jobs so tests run them with the real runner, and a helper
that starts a sweep and runs it to its end."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User

from benchmarks.models import BenchmarkRun
from benchmarks.services import benchmark_start
from jobs.models import Job
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
