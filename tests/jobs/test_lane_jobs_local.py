"""Network check, launch, status and stop end to end with the local transport against
sparksim nodes (the demo's setup)."""

from __future__ import annotations

import subprocess

import pytest

from jobs.models import JobKind, JobState, StepState
from jobs.services import dispatch_job as REAL_DISPATCH
from jobs.services import lane_job_create, node_network_check_create
from lanes.models import Lane, LaneState, Node, NodeState
from tests.jobs.conftest import job_log_text, run_job

pytestmark = pytest.mark.django_db(transaction=True)


def test_network_check_saves_a_report_with_paired_links_and_computed_gid(local_cluster, make_lane, admin_user):
    make_lane("deepseek", [local_cluster.node("spark1"), local_cluster.node("spark2")], executor="ray")
    job = run_job(node_network_check_create(node=local_cluster.node("spark1"), user=admin_user))
    assert job.state == JobState.SUCCEEDED, job.error + job_log_text(job)
    report = Node.objects.get(name="spark1").network_report
    assert report["verdict"] == "ok"
    assert report["gid_index"] == 3
    assert report["fabric_ip"].startswith("192.168.10")
    assert {link["peer"] for link in report["links"]} == {"spark2"}
    assert all(link["ping_ok"] for link in report["links"])
    assert Node.objects.get(name="spark2").network_report["links"][0]["peer"] == "spark1"


def test_a_warn_verdict_shows_as_warned_steps_and_job_warnings_but_the_job_succeeds(
    local_cluster, make_lane, admin_user, admin_client
):
    spark1, spark2 = local_cluster.node("spark1"), local_cluster.node("spark2")
    make_lane("deepseek", [spark1, spark2], executor="ray")
    for node in (spark1, spark2):  # MTU 1500 on both ends: the ping passes, the verdict is "warn"
        subprocess.run([".venv/bin/python", "-m", "sparksim", "fault", "--node-dir", node.sim_dir, "mtu",
                        "enp1s0f0np0", "1500"], check=True)
    job = run_job(node_network_check_create(node=spark1, user=admin_user))
    assert job.state == JobState.SUCCEEDED, job.error + job_log_text(job)  # a warning is not a failure
    assert Node.objects.get(name="spark1").network_report["verdict"] == "warn"
    pings = {step.node: step for step in job.steps.filter(key__startswith="ping.")}
    assert {step.state for step in pings.values()} == {StepState.WARNED}
    assert "MTU 1500, want 9000" in pings["spark1"].detail
    assert any(w.startswith("spark1: ") and "MTU 1500, want 9000" in w for w in job.result["warnings"])

    page = admin_client.get(f"/jobs/{job.pk}/").content.decode()
    assert page.count('class="badge state state-warned"') >= 2
    assert 'id="job-warnings"' in page and "MTU 1500, want 9000" in page
    assert 'id="job-warnings" hidden' not in page


def test_an_ok_network_check_has_no_warnings(local_cluster, make_lane, admin_user, admin_client):
    make_lane("deepseek", [local_cluster.node("spark1"), local_cluster.node("spark2")], executor="ray")
    job = run_job(node_network_check_create(node=local_cluster.node("spark1"), user=admin_user))
    assert job.state == JobState.SUCCEEDED and job.result["warnings"] == []
    assert StepState.WARNED not in set(job.steps.values_list("state", flat=True))
    assert 'id="job-warnings" hidden' in admin_client.get(f"/jobs/{job.pk}/").content.decode()


def test_launch_status_stop_a_single_node_lane(local_cluster, make_lane, admin_user):
    lane = make_lane("qwen", [local_cluster.node("spark3")])
    launch = run_job(lane_job_create(lane=lane, kind=JobKind.LAUNCH, user=admin_user))
    assert launch.state == JobState.SUCCEEDED, launch.error + job_log_text(launch)
    assert Lane.objects.get(pk=lane.pk).observed_state == LaneState.SERVING
    assert launch.lane_revision is not None and launch.lane_revision.number == 1
    assert set(launch.steps.values_list("state", flat=True)) <= {StepState.SUCCEEDED, StepState.WARNED}

    Lane.objects.filter(pk=lane.pk).update(observed_state=LaneState.FAILED)  # pretend we lost track
    status = run_job(lane_job_create(lane=lane, kind=JobKind.STATUS, user=admin_user))
    assert status.state == JobState.SUCCEEDED, status.error
    assert Lane.objects.get(pk=lane.pk).observed_state == LaneState.SERVING

    stop = run_job(lane_job_create(lane=lane, kind=JobKind.STOP, user=admin_user))
    assert stop.state == JobState.SUCCEEDED, stop.error + job_log_text(stop)
    assert Lane.objects.get(pk=lane.pk).observed_state == LaneState.STOPPED


def test_a_lane_job_marks_the_nodes_it_reached_online_but_leaves_maintenance_alone(
    local_cluster, make_lane, admin_user
):
    spark1, spark2 = local_cluster.node("spark1"), local_cluster.node("spark2")
    lane = make_lane("deepseek", [spark1, spark2], executor="ray")
    Node.objects.filter(pk=spark1.pk).update(state=NodeState.UNKNOWN, last_seen=None)
    Node.objects.filter(pk=spark2.pk).update(state=NodeState.MAINTENANCE)
    assert run_job(lane_job_create(lane=lane, kind=JobKind.STATUS, user=admin_user)).state == JobState.SUCCEEDED
    reached = Node.objects.get(pk=spark1.pk)
    assert reached.state == NodeState.ONLINE and reached.last_seen is not None
    assert Node.objects.get(pk=spark2.pk).state == NodeState.MAINTENANCE  # an admin's choice stays


def test_an_engine_that_dies_while_loading_shows_why_on_the_job_page(local_cluster, make_lane, admin_user):
    lane = make_lane("qwen", [local_cluster.node("spark3")],
                     extra_args=["--sim-fail-start", "AssertionError: profiled KV cache below max_model_len"])
    job = run_job(lane_job_create(lane=lane, kind=JobKind.LAUNCH, user=admin_user))
    assert job.state == JobState.FAILED and "died before becoming healthy" in job.error
    log = job_log_text(job)
    assert "the engine's last lines ($ docker logs --tail 40 vllm_node)" in log
    assert "AssertionError: profiled KV cache below max_model_len" in log  # the reason, not only "exited 1"


def test_restart_stops_then_launches_in_one_job(local_cluster, make_lane, admin_user):
    lane = make_lane("qwen", [local_cluster.node("spark3")])
    assert run_job(lane_job_create(lane=lane, kind=JobKind.LAUNCH, user=admin_user)).state == JobState.SUCCEEDED
    restart = run_job(lane_job_create(lane=lane, kind=JobKind.RESTART, user=admin_user))
    assert restart.state == JobState.SUCCEEDED, restart.error + job_log_text(restart)
    keys = list(restart.steps.order_by("position").values_list("key", flat=True))
    assert keys[0].startswith("stop.") and keys[-1] == "wait.health"
    text = job_log_text(restart)
    assert text.index("lane qwen: stopped") < text.index("lane qwen: serving")
    assert Lane.objects.get(pk=lane.pk).observed_state == LaneState.SERVING
    run_job(lane_job_create(lane=lane, kind=JobKind.STOP, user=admin_user))


def test_a_broker_outage_fails_the_job_instead_of_leaving_it_queued(local_cluster, admin_user, monkeypatch):
    from jobs import services
    from portal.celery import app

    monkeypatch.setattr(services, "dispatch_job", REAL_DISPATCH)  # not the recording stand-in

    def refuse(*args, **kwargs):
        raise ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    monkeypatch.setattr(app, "send_task", refuse)
    job = services.job_create(kind=JobKind.STATUS, user=admin_user, nodes=[local_cluster.node("spark1")])
    job.refresh_from_db()
    assert job.state == JobState.FAILED and "could not be queued (is Redis up?)" in job.error
