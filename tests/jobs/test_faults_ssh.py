"""Faults, each its own test: unreachable node, wrong host key, auth failure, a command
exiting non-zero, an engine that never becomes healthy, cancel during the health wait."""

from __future__ import annotations

import os
import subprocess

import pytest

from jobs.models import JobKind, JobLogLine, JobState, JobStep, StepState
from jobs.services import job_cancel, job_run, lane_job_create, node_network_check_create
from lanes.models import Lane, LaneState, Node, NodeState
from tests.conftest import free_port, wait_for
from tests.jobs.conftest import job_log_text, run_in_thread, run_job
from tests.jobs.sshd import client_keypair, keygen
from tests.portal.processes import engine_processes

pytestmark = pytest.mark.django_db(transaction=True)


def docker_ps(node: Node, container: str = "vllm_node") -> str:
    result = subprocess.run(
        [f"{node.sim_dir}/bin/docker", "ps", "-a", "--filter", f"name={container}", "--format", "{{.Names}} {{.Status}}"],
        capture_output=True, text=True, check=False,
    )
    return result.stdout


def test_unreachable_node_fails_the_check_and_marks_the_node(ssh_cluster, admin_user):
    spark1 = ssh_cluster.node("spark1")
    Node.objects.filter(pk=spark1.pk).update(ssh_port=free_port(spark1.address))  # nothing listens there
    job = run_job(node_network_check_create(node=Node.objects.get(pk=spark1.pk), user=admin_user))
    assert job.state == JobState.FAILED
    assert "spark1: unreachable" in job.error
    assert Node.objects.get(pk=spark1.pk).state == NodeState.UNREACHABLE


def test_wrong_host_key_is_refused_loudly(ssh_cluster, admin_user, tmp_path):
    spark1 = ssh_cluster.node("spark1")
    other = " ".join(keygen(tmp_path / "impostor", "impostor").split()[:2])
    Node.objects.filter(pk=spark1.pk).update(ssh_host_key=other)
    job = run_job(node_network_check_create(node=Node.objects.get(pk=spark1.pk), user=admin_user))
    assert job.state == JobState.FAILED
    assert "host key mismatch" in job.error
    assert "the server presented SHA256:" in job.error
    assert Node.objects.get(pk=spark1.pk).network_report == {}


def test_refused_client_key_is_an_authentication_failure(ssh_cluster, admin_user, tmp_path):
    from tests.jobs.conftest import encrypt

    spark1 = ssh_cluster.node("spark1")
    stranger, _ = client_keypair(tmp_path / "stranger")
    Node.objects.filter(pk=spark1.pk).update(ssh_private_key_encrypted=encrypt(stranger))
    job = run_job(node_network_check_create(node=Node.objects.get(pk=spark1.pk), user=admin_user))
    assert job.state == JobState.FAILED
    assert "SSH authentication failed for user 'root'" in job.error
    assert "PRIVATE KEY" not in job_log_text(job)


def test_a_command_exiting_non_zero_fails_its_step_and_the_lane(ssh_cluster, make_lane, admin_user):
    spark3 = ssh_cluster.node("spark3")
    lane = make_lane("qwen", [spark3])
    subprocess.run(
        [".venv/bin/python", "-m", "sparksim", "fault", "--node-dir", spark3.sim_dir, "image-missing",
         lane.revisions.get().config["image"]],
        check=True,
    )
    job = run_job(lane_job_create(lane=lane, kind=JobKind.LAUNCH, user=admin_user))
    assert job.state == JobState.FAILED
    step = JobStep.objects.get(job=job, key="preflight.image.spark3")
    assert step.state == StepState.FAILED and step.exit_code == 1
    assert "exited 1" in job.error
    assert "No such image" in job_log_text(job)
    assert Lane.objects.get(pk=lane.pk).observed_state == LaneState.FAILED


def test_engine_that_never_becomes_healthy_fails_and_leaves_containers(ssh_cluster, make_lane, admin_user):
    spark3 = ssh_cluster.node("spark3")
    lane = make_lane("qwen", [spark3], extra_args=["--sim-unavailable"], wait_timeout_s=3)
    job = run_job(lane_job_create(lane=lane, kind=JobKind.LAUNCH, user=admin_user))
    assert job.state == JobState.FAILED
    assert "not healthy after 3s" in job.error
    assert "left on spark3 for inspection" in job.error
    assert "left on spark3 for inspection" in job_log_text(job)
    assert "vllm_node" in docker_ps(spark3)  # still there to inspect
    assert Lane.objects.get(pk=lane.pk).observed_state == LaneState.FAILED


def cancel_in_health_wait(cluster, make_lane, admin_user, keep_running: bool):
    spark3 = cluster.node("spark3")
    lane = make_lane("qwen", [spark3], extra_args=["--sim-startup-s", "100000"], wait_timeout_s=600)
    job = lane_job_create(lane=lane, kind=JobKind.LAUNCH, user=admin_user)
    thread = run_in_thread(lambda: job_run(job_id=job.pk))
    wait_for(lambda: JobStep.objects.filter(job=job, key="wait.health", state=StepState.RUNNING).exists(),
             timeout=60, what="the health wait")
    assert "vllm_node" in docker_ps(spark3)
    job_cancel(job=job, user=admin_user, keep_running=keep_running)
    thread.join(timeout=120)
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED
    assert job.error == f"cancelled by {admin_user.username}"
    assert JobStep.objects.get(job=job, key="wait.health").state == StepState.CANCELLED
    return spark3, Lane.objects.get(pk=lane.pk), job


def test_cancel_during_the_health_wait_stops_what_the_launch_started(ssh_cluster, make_lane, admin_user):
    spark3, lane, job = cancel_in_health_wait(ssh_cluster, make_lane, admin_user, keep_running=False)
    assert "vllm_node" not in docker_ps(spark3)  # the container is gone...
    assert engine_processes(lane.api_port) == []  # ...and no engine process is left behind
    assert (lane.observed_state, lane.desired_state) == (LaneState.STOPPED, "stopped")
    assert "stopped what it started" in lane.state_reason
    assert JobStep.objects.filter(job=job, key__startswith="stop.", state=StepState.SUCCEEDED).exists()


def test_cancel_leaving_it_for_inspection_says_the_engine_still_runs(ssh_cluster, make_lane, admin_user):
    spark3, lane, job = cancel_in_health_wait(ssh_cluster, make_lane, admin_user, keep_running=True)
    assert "vllm_node" in docker_ps(spark3)
    assert engine_processes(lane.api_port)
    assert lane.observed_state == LaneState.FAILED and "the engine may still be running" in lane.state_reason
    assert "left on spark3 for inspection" in lane.state_reason
    subprocess.run([f"{spark3.sim_dir}/bin/docker", "rm", "-f", "vllm_node"], check=True, capture_output=True)


def test_cancel_kills_the_remote_command_over_ssh(ssh_cluster, admin_user, tmp_path):
    from jobs.models import JobKind as Kind
    from jobs.runner import JobContext, job_execute
    from jobs.services import job_create

    spark1 = ssh_cluster.node("spark1")
    marker = tmp_path / "remote-still-ran"
    sleep = f"sleep 47.{os.getpid()}"  # no other test run on this machine runs this very command
    job = job_create(kind=Kind.STATUS, user=admin_user, nodes=[spark1])

    def kind(ctx: JobContext) -> dict:
        ctx.run(ctx.endpoint(spark1), f"echo started; {sleep}; touch {marker}")
        return {}

    outcome: list[str | None] = []
    thread = run_in_thread(lambda: outcome.append(job_execute(job_id=job.pk, kinds={Kind.STATUS: kind})))
    wait_for(lambda: JobLogLine.objects.filter(job=job, text="started").exists(), what="the remote command")
    job_cancel(job=job, user=admin_user)
    thread.join(timeout=30)
    assert outcome == [JobState.CANCELLED]
    processes = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert sleep not in processes  # killed on the node, not just disconnected
    assert not marker.exists()


def test_an_unpinned_host_key_is_captured_for_confirmation_not_trusted(ssh_cluster, admin_user):
    spark1 = ssh_cluster.node("spark1")
    server_key = spark1.ssh_host_key
    Node.objects.filter(pk=spark1.pk).update(ssh_host_key="")
    job = run_job(node_network_check_create(node=Node.objects.get(pk=spark1.pk), user=admin_user))
    assert job.state == JobState.FAILED
    assert "no pinned SSH host key: refusing to trust any" in job.error
    node = Node.objects.get(pk=spark1.pk)
    assert node.ssh_host_key == "" and node.ssh_host_key_pending == server_key
