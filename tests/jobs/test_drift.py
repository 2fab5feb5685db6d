"""Revision drift: which revision runs (the last launch or restart that started an engine)
against the latest saved one."""

from __future__ import annotations

import pytest
from django.utils import timezone

from jobs.drift import lane_drift
from jobs.models import Job, JobKind, JobState, JobStep, StepState
from lanes.models import Lane, LaneNode, LaneRevision, Node
from tests.lanes.seed_configs import base_config

pytestmark = pytest.mark.django_db


@pytest.fixture
def lane() -> Lane:
    node = Node.objects.create(name="spark3", address="127.0.0.13", transport="local")
    lane = Lane.objects.create(name="qwen", model_id="Qwen/Qwen3.8-27B-FP8", image="img@sha256:" + "a" * 64,
                               max_model_len=32768, revision=1, observed_state="serving")
    LaneNode.objects.create(lane=lane, node=node, rank=0)
    LaneRevision.objects.create(lane=lane, number=1, config=base_config(name="qwen", nodes=["spark3"]))
    return lane


def _save_revision(lane: Lane, number: int, **changes: object) -> None:
    LaneRevision.objects.create(lane=lane, number=number, config=base_config(name="qwen", nodes=["spark3"],
                                                                               revision=number, **changes))
    Lane.objects.filter(pk=lane.pk).update(revision=number)
    lane.refresh_from_db()


def _job(lane: Lane, kind: str, number: int, serve: str | None = StepState.SUCCEEDED) -> Job:
    job = Job.objects.create(kind=kind, lane=lane, state=JobState.SUCCEEDED, finished_at=timezone.now(),
                             lane_revision=lane.revisions.get(number=number), params={"nodes": ["spark3"]})
    if serve is not None:
        JobStep.objects.create(job=job, position=0, key="serve.spark3", phase="serve", title="serve", state=serve)
    return job


def test_no_drift_without_a_launch_or_after_a_stop(lane):
    assert lane_drift(lane).running is None
    _job(lane, JobKind.LAUNCH, 1)
    _save_revision(lane, 2, max_num_seqs=8)
    assert lane_drift(lane).drifted
    _job(lane, JobKind.STOP, 2, serve=None)
    assert lane_drift(lane).running is None and not lane_drift(lane).drifted


def test_drift_names_the_running_and_latest_revision_and_the_diff(lane):
    launch = _job(lane, JobKind.LAUNCH, 1)
    _save_revision(lane, 2, max_num_seqs=8)
    _save_revision(lane, 3, max_num_seqs=16, kv_cache_dtype="fp8")
    drift = lane_drift(lane)
    assert (drift.running, drift.latest, drift.job_id) == (1, 3, launch.pk)
    assert drift.changes == [("kv_cache_dtype", "", "fp8"), ("max_num_seqs", None, 16)]


def test_a_launch_that_found_vllm_already_serving_leaves_the_older_revision_running(lane):
    _job(lane, JobKind.LAUNCH, 1)
    _save_revision(lane, 2, max_num_seqs=8)
    _job(lane, JobKind.LAUNCH, 2, serve=StepState.SKIPPED)  # skip_if: already serving
    assert lane_drift(lane).running == 1
    _job(lane, JobKind.RESTART, 2, serve=StepState.SKIPPED)  # a restart always starts it again
    assert lane_drift(lane).running == 2 and not lane_drift(lane).drifted


def test_a_stopped_lane_runs_nothing_whatever_its_jobs(lane):
    _job(lane, JobKind.LAUNCH, 1)
    _save_revision(lane, 2, max_num_seqs=8)
    Lane.objects.filter(pk=lane.pk).update(observed_state="stopped")
    lane.refresh_from_db()
    assert lane_drift(lane).running is None


@pytest.mark.parametrize("role, status", [("viewer", 200), ("lead", 200), ("outsider", 403), ("anonymous", 401)])
def test_drift_api_by_role(role_clients, lane, role, status):
    _job(lane, JobKind.LAUNCH, 1)
    _save_revision(lane, 2, max_num_seqs=8)
    response = role_clients[role].get("/api/jobs/lanes/qwen/drift")
    assert response.status_code == status
    if status == 200:
        assert response.json() == {"running": 1, "latest": 2, "drifted": True, "job": response.json()["job"],
                                   "changes": [{"field": "max_num_seqs", "running": None, "latest": 8}]}


def test_lane_pages_show_the_drift(viewer_client, lane):
    _job(lane, JobKind.LAUNCH, 1)
    _save_revision(lane, 2, max_num_seqs=8)
    assert "running r1, latest r2" in viewer_client.get("/lanes/").content.decode()
    page = viewer_client.get("/lanes/qwen/").content.decode()
    assert "running r1, latest r2" in page and 'id="drift-restart"' not in page  # viewers cannot restart


def test_drift_of_many_lanes_takes_as_many_queries_as_of_two():
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from jobs.drift import lanes_drift

    node = Node.objects.create(name="spark9", address="127.0.0.19", transport="local")
    lanes = []
    for i in range(10):
        lane = Lane.objects.create(name=f"lane{i}", model_id="m", image="img@sha256:" + "a" * 64,
                                   max_model_len=32768, revision=1, observed_state="serving", api_port=9000 + i)
        LaneNode.objects.create(lane=lane, node=node, rank=0)
        LaneRevision.objects.create(lane=lane, number=1, config=base_config(name=lane.name, nodes=["spark9"]))
        _job(lane, JobKind.LAUNCH, 1)
        _save_revision(lane, 2, max_num_seqs=8)
        lanes.append(lane)

    def count(subset: list[Lane]) -> int:
        with CaptureQueriesContext(connection) as captured:
            drifts = lanes_drift(subset)
        assert all(d.drifted and d.running == 1 for d in drifts.values())
        return len(captured)

    assert count(lanes[:2]) == count(lanes) <= 3


def test_a_status_jobs_revision_is_its_own_or_the_one_every_replica_agrees_on():
    from jobs.drift import status_revision

    assert status_revision({"running_revision": 3}) == 3
    assert status_revision({"running_revision": None}) is None and status_revision({}) is None
    assert status_revision({"replicas": [{"running_revision": 2}, {"running_revision": 2}]}) == 2
    assert status_revision({"replicas": [{"running_revision": 2}, {"running_revision": 3}]}) is None
