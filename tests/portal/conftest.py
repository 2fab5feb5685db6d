"""The portal tests' shared world: what the hostile-input table and the property-based API
test drive their requests against."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from benchmarks.models import BenchmarkLevel, BenchmarkRun
from benchmarks.services import benchmark_start
from benchmarks.stats import RequestRecord, level_stats
from gateway.models import ApiKey, RequestLog
from lanes.lane_services import lane_create
from lanes.node_services import node_create
from metrics.models import Alert
from routing.models import Prototype, RouterVersion
from tests.lanes.rule_cases import lane_data


@pytest.fixture
def world(db: None, admin_user: User, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Two nodes, a lane of two replicas (saved through the services, so it has a real
    revision), a finished benchmark run, an open alert, an API key, a request-log row, a
    router version and a prototype."""
    monkeypatch.setattr("jobs.services.dispatch_job", lambda job_id, time_limit_s: None)
    for index in (1, 2):
        node_create(actor=admin_user, data={"name": f"spark{index}", "address": f"10.0.0.{index}", "transport": "ssh"})
    lane = lane_create(actor=admin_user, data=lane_data(name="qwen", kv_cache_memory_bytes=8 * 2**30,
                                                        gpu_memory_utilization=None),
                       replicas=[{"nodes": ["spark1"]}, {"nodes": ["spark2"]}])
    job = benchmark_start(lane=lane, user=admin_user, params={"concurrency": [1]})
    run = BenchmarkRun.objects.get(job=job)
    record = RequestRecord(sent_at=0.0, chunk_times=[0.5, 0.6], prompt_tokens=10, output_tokens=2)
    BenchmarkLevel.objects.create(run=run, position=0, target="direct", concurrency=1,
                                  stats=level_stats([record], started_at=0.0, ended_at=0.6))
    Alert.objects.create(rule="lane_down", kind="lane", target="qwen", state="open", message="down",
                         opened_at=timezone.now())
    key = ApiKey.objects.create(name="agent", prefix="sk-test", secret_hash="x")
    RequestLog.objects.create(request_id="r1", endpoint="chat.completions", key=key, lane="qwen", status=200,
                              latency_ms=5.0)
    RouterVersion.objects.create(number=1, status="draft", default_lane="qwen")
    Prototype.objects.create(text="hello", label="chat")
    return {"run": run.job_id, "job": job.pk}


