"""A benchmark of a tensor-parallel lane on simulated Sparks reached over SSH (a real OpenSSH
server per node): each level's RoCE byte counters are read on every node of the lane over its
transport (the node's own /sys tree), and what moved is the group's all-reduce traffic for the
tokens of that level."""

from __future__ import annotations

import pytest

from benchmarks.models import BenchmarkRun
from benchmarks.services import benchmark_start
from jobs.models import JobKind, JobState
from jobs.services import lane_job_create, node_network_check_create
from sparksim.engine.runner import FABRIC_OCTETS_PER_TOKEN
from sparksim.host.node import ROCE_DEVICES
from tests.jobs.conftest import job_log_text, run_job

pytestmark = pytest.mark.django_db(transaction=True)


def test_roce_bytes_per_node_and_device_over_ssh(ssh_cluster, make_lane, admin_user):
    spark1, spark2 = ssh_cluster.node("spark1"), ssh_cluster.node("spark2")
    lane = make_lane("deepseek", [spark1, spark2])
    check = run_job(node_network_check_create(node=spark1, user=admin_user))
    assert check.state == JobState.SUCCEEDED, check.error + job_log_text(check)
    launch = run_job(lane_job_create(lane=lane, kind=JobKind.LAUNCH, user=admin_user))
    assert launch.state == JobState.SUCCEEDED, launch.error + job_log_text(launch)

    job = run_job(benchmark_start(lane=lane, user=admin_user, params={
        "concurrency": [1, 2], "prompt_tokens": 200, "output_tokens": 16}))
    assert job.state == JobState.SUCCEEDED, job.error + job_log_text(job)
    run = BenchmarkRun.objects.get(job=job)
    levels = list(run.levels.order_by("position"))
    assert len(levels) == 2
    expected_keys = {f"{node}/{device}" for node in ("spark1", "spark2") for device in ROCE_DEVICES}
    for level in levels:
        fabric = level.fabric
        assert set(fabric) == expected_keys, fabric
        counters = level.metrics["counters"]
        tokens = counters["vllm:prompt_tokens"] + counters["vllm:generation_tokens"]
        assert tokens >= (200 + 16) * level.concurrency * 0.9
        for node in ("spark1", "spark2"):
            sent = sum(fabric[f"{node}/{device}"]["tx_bytes"] for device in ROCE_DEVICES)
            received = sum(fabric[f"{node}/{device}"]["rx_bytes"] for device in ROCE_DEVICES)
            # The group's all-reduce volume for the level's tokens, half on each node, spread
            # over its devices (the counters count 4-octet words: rounding only).
            share = tokens * FABRIC_OCTETS_PER_TOKEN / 2
            assert sent == pytest.approx(share, rel=0.01) and received == pytest.approx(share, rel=0.01)
            assert all(fabric[f"{node}/{device}"]["tx_bytes"] > 0 for device in ROCE_DEVICES)
    # The third node is not the lane's: never read.
    assert not any(key.startswith("spark3/") for level in levels for key in level.fabric)
    stop = run_job(lane_job_create(lane=lane, kind=JobKind.STOP, user=admin_user))
    assert stop.state == JobState.SUCCEEDED, stop.error
