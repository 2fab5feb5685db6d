"""The demo's own lanes (created through the lanes services, rules and all): network
check, then launch deepseek (TP=2 over Ray on spark1+spark2) and qwen (spark3) at once —
different nodes, so both run — both serving, then both stopped."""

from __future__ import annotations

import pytest

from jobs.models import JobKind, JobLogLine, JobState
from jobs.services import job_run, lane_job_create, node_network_check_create
from lanes.demo import seed_demo_weights
from lanes.lane_services import lane_create
from lanes.models import Lane, LaneState
from tests.conftest import free_port
from tests.jobs.conftest import IMAGE, call_in_thread, run_in_thread

pytestmark = pytest.mark.django_db(transaction=True)
GIB = 1024**3


def test_demo_lanes_launch_side_by_side_and_stop(local_cluster, admin_user):
    address = local_cluster.node("spark1").address
    qwen = lane_create(actor=admin_user, nodes=["spark3"], data={
        "name": "qwen", "model_id": "Qwen/Qwen3.8-27B-FP8", "image": IMAGE, "tensor_parallel_size": 1,
        "executor": "ray", "max_model_len": 262144, "gpu_memory_utilization": 0.85, "api_port": free_port(address),
        "extra_args": ["--quantization", "fp8"], "weights_gib": 27.0,
    })
    deepseek = lane_create(actor=admin_user, nodes=["spark1", "spark2"], data={
        "name": "deepseek", "model_id": "deepseek-ai/DeepSeek-V4-Flash-0731", "image": IMAGE,
        "tensor_parallel_size": 2, "executor": "ray", "api_port": free_port(address),
        "master_port": free_port(address), "max_model_len": 1048576, "kv_cache_memory_bytes": 11 * GIB,
        "gpu_memory_utilization": None, "weights_gib": 145.3, "kv_bytes_per_token": 10302,
        "degraded_context_limit": 524288, "fallback": "qwen",
    })
    seed_demo_weights()  # what demo_setup does: each simulated rank holds its lane's model
    check = node_network_check_create(node=local_cluster.node("spark1"), user=admin_user)
    call_in_thread(lambda: job_run(job_id=check.pk))

    jobs = [lane_job_create(lane=lane, kind=JobKind.LAUNCH, user=admin_user, params={"wait_poll_s": 0.3})
            for lane in (deepseek, qwen)]
    threads = [run_in_thread(lambda job=job: job_run(job_id=job.pk)) for job in jobs]
    for thread in threads:
        thread.join(timeout=240)
    for job in jobs:
        job.refresh_from_db()
        log = "\n".join(JobLogLine.objects.filter(job=job).values_list("text", flat=True))
        assert job.state == JobState.SUCCEEDED, job.error + log[-3000:]
    assert set(Lane.objects.values_list("observed_state", flat=True)) == {LaneState.SERVING}

    for lane in (deepseek, qwen):
        stop = lane_job_create(lane=lane, kind=JobKind.STOP, user=admin_user)
        call_in_thread(lambda stop=stop: job_run(job_id=stop.pk))
        stop.refresh_from_db()
        assert stop.state == JobState.SUCCEEDED, stop.error
    assert set(Lane.objects.values_list("observed_state", flat=True)) == {LaneState.STOPPED}
