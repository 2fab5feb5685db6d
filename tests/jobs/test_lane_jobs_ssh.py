"""Network check, launch, status and stop through a real OpenSSH server per simulated
Spark (127.0.0.x), with the node runtime `docker` resolved from the sim PATH."""

from __future__ import annotations

import pytest

from jobs.models import JobKind, JobState
from jobs.services import lane_job_create, node_network_check_create
from lanes.models import Lane, LaneState, Node
from tests.jobs.conftest import job_log_text, run_job

pytestmark = pytest.mark.django_db(transaction=True)


def test_network_check_then_ray_launch_status_and_stop_over_ssh(ssh_cluster, make_lane, admin_user):
    spark1, spark2 = ssh_cluster.node("spark1"), ssh_cluster.node("spark2")
    lane = make_lane("deepseek", [spark1, spark2], executor="ray")

    check = run_job(node_network_check_create(node=spark1, user=admin_user))
    assert check.state == JobState.SUCCEEDED, check.error + job_log_text(check)
    for name in ("spark1", "spark2"):
        report = Node.objects.get(name=name).network_report
        assert report["verdict"] == "ok", report
        assert report["ib_hca"], report

    launch = run_job(lane_job_create(lane=lane, kind=JobKind.LAUNCH, user=admin_user))
    assert launch.state == JobState.SUCCEEDED, launch.error + job_log_text(launch)
    text = job_log_text(launch)
    assert "ray start" in text and "vllm serve" in text
    assert "NCCL_IB_HCA=" in text  # the fabric settings came from the network reports
    assert Lane.objects.get(pk=lane.pk).observed_state == LaneState.SERVING

    status = run_job(lane_job_create(lane=lane, kind=JobKind.STATUS, user=admin_user))
    assert status.state == JobState.SUCCEEDED, status.error
    assert status.result["state"] == LaneState.SERVING

    stop = run_job(lane_job_create(lane=lane, kind=JobKind.STOP, user=admin_user))
    assert stop.state == JobState.SUCCEEDED, stop.error + job_log_text(stop)
    assert Lane.objects.get(pk=lane.pk).observed_state == LaneState.STOPPED

    after = run_job(lane_job_create(lane=lane, kind=JobKind.STATUS, user=admin_user))
    assert after.result["state"] == LaneState.STOPPED
