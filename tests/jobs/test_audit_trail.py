"""D5: every action on jobs leaves an audit event naming its actor, with before/after where
it changes state — cancel, relaunch (a benchmark relaunch leaves `benchmark.start` like a first
start), network and fabric checks, lane status jobs (the reaper's as "system"), alert
acknowledge; and D7: a benchmark run's gateway key is revoked when its job is lost."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from benchmarks.models import BenchmarkRun
from benchmarks.services import benchmark_job_ended, benchmark_start, run_key_name
from core.models import AuditEvent
from gateway.models import ApiKey
from gateway.services import api_key_create
from jobs.models import Job, JobKind, JobState
from jobs.services import job_create, job_reap_lost
from lanes.models import Lane, Node
from metrics.models import Alert

pytestmark = pytest.mark.django_db


def events(action: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=action).order_by("id"))


def test_cancel_is_audited_with_its_actor_and_the_state_change(admin_client, admin_user, qwen_lane):
    job = job_create(kind=JobKind.STATUS, user=admin_user, nodes=qwen_lane.ranked_nodes(), lane=qwen_lane)
    assert admin_client.post(f"/api/jobs/{job.pk}/cancel").status_code == 200
    (event,) = events("job.cancel")
    assert event.actor == admin_user and event.object_id == str(job.pk)
    assert event.diff["state"] == [JobState.QUEUED, JobState.CANCELLED]
    assert admin_client.post(f"/api/jobs/{job.pk}/cancel").status_code == 422
    assert len(events("job.cancel")) == 1  # a refused cancel changes nothing and records nothing


def test_a_lane_status_job_and_its_relaunch_are_audited(admin_client, admin_user, qwen_lane):
    assert admin_client.post("/api/jobs/lanes/qwen/status", {}, content_type="application/json").status_code == 201
    first = Job.objects.get(kind=JobKind.STATUS)
    (status_event,) = events("lane.status")
    assert status_event.actor == admin_user and status_event.diff["job"] == [None, first.pk]
    Job.objects.filter(pk=first.pk).update(state=JobState.SUCCEEDED, finished_at=timezone.now())
    response = admin_client.post(f"/api/jobs/{first.pk}/relaunch")
    assert response.status_code == 201
    again = response.json()["id"]
    (relaunch,) = events("job.relaunch")
    assert relaunch.actor == admin_user and relaunch.object_id == str(again)
    assert relaunch.diff["relaunch_of"] == [None, first.pk]
    assert [e.diff["job"][1] for e in events("lane.status")] == [first.pk, again]


def test_a_benchmark_relaunch_leaves_benchmark_start_and_its_run_row(admin_client, admin_user, qwen_lane):
    first = benchmark_start(lane=qwen_lane, user=admin_user, params={"concurrency": [1]})
    Job.objects.filter(pk=first.pk).update(state=JobState.FAILED, finished_at=timezone.now())
    response = admin_client.post(f"/api/jobs/{first.pk}/relaunch")
    assert response.status_code == 201, response.content
    again = response.json()["id"]
    assert [e.diff["job"][1] for e in events("benchmark.start")] == [first.pk, again]
    assert events("benchmark.start")[-1].actor == admin_user
    assert BenchmarkRun.objects.filter(job_id=again).exists()


def test_network_and_fabric_checks_are_audited(admin_client, admin_user, qwen_lane):
    assert admin_client.post("/api/jobs/nodes/spark3/network-check", {}, content_type="application/json").status_code == 201
    (check,) = events("node.network_check")
    assert check.actor == admin_user and check.object_repr == "spark3"
    report = {"devices": [{"name": "roceP2p1s0f0"}]}
    Node.objects.create(name="spark4", address="127.0.0.14", transport="local", network_report=report)
    Node.objects.filter(name="spark3").update(network_report=report)
    response = admin_client.post("/api/jobs/fabric/latency-matrix", {"nodes": ["spark3", "spark4"]},
                                 content_type="application/json")
    assert response.status_code == 201, response.content
    (fabric,) = events(f"fabric.{JobKind.LATENCY_MATRIX}")
    assert fabric.actor == admin_user and fabric.diff["nodes"] == [None, ["spark3", "spark4"]]


def test_the_reapers_status_job_is_audited_as_system(admin_user, qwen_lane):
    launch = job_create(kind=JobKind.LAUNCH, user=admin_user, nodes=qwen_lane.ranked_nodes(), lane=qwen_lane,
                        revision=qwen_lane.revisions.get())
    Job.objects.filter(pk=launch.pk).update(state=JobState.RUNNING, heartbeat_at=timezone.now() - timedelta(hours=1))
    assert job_reap_lost(lost_after_s=60) == [launch.pk]
    (event,) = events("lane.status")
    assert event.actor is None and event.actor_name == "system"
    assert f"job #{launch.pk} was lost" in event.diff["reason"][1]


def test_alert_acknowledge_is_audited(admin_client, admin_user):
    alert = Alert.objects.create(rule="lane_down", kind="lane", target="qwen", state="open", message="down",
                                 opened_at=timezone.now())
    assert admin_client.post(f"/monitor/alerts/{alert.pk}/ack").status_code == 302
    (event,) = events("alert.acknowledge")
    assert event.actor == admin_user and event.diff["acknowledged"] == [False, True]


def test_a_lost_benchmarks_gateway_key_is_revoked(admin_user, qwen_lane: Lane):
    """D7: the worker was killed mid-run, so the run's own `finally` never revoked the key:
    the reaper's `lost` does."""
    job = benchmark_start(lane=qwen_lane, user=admin_user, params={"concurrency": [1]})
    key = api_key_create(actor=admin_user, name=run_key_name(job.pk), allowed_lanes=["qwen"],
                         expires_at=timezone.now() + timedelta(hours=1)).key
    other = api_key_create(actor=admin_user, name="agent").key
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING, heartbeat_at=timezone.now() - timedelta(hours=1))
    assert job_reap_lost(lost_after_s=60) == [job.pk]
    key.refresh_from_db()
    other.refresh_from_db()
    assert key.revoked_at is not None and other.revoked_at is None
    assert AuditEvent.objects.filter(action="api_key.revoke", object_id=str(key.pk)).exists()
    benchmark_job_ended(job.pk)  # again (a late runner's clean-up): nothing more to do
    assert ApiKey.objects.filter(revoked_at__isnull=False).count() == 1
