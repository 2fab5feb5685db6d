"""Relaunch (a new job like an old one), search inside a log, steps a finished job never
ran ending `skipped`, and jobs with warnings flagged in the list."""

from __future__ import annotations

import pytest
from django.utils import timezone

from jobs.models import Job, JobKind, JobLogLine, JobState, JobStep, StepState
from jobs.runner import job_finish
from jobs.services import job_create, job_reap_lost, lane_job_create
from lanes.models import Lane, LaneNode, LaneRevision, Node
from tests.lanes.seed_configs import base_config

pytestmark = pytest.mark.django_db


@pytest.fixture
def lane() -> Lane:
    node = Node.objects.create(name="spark3", address="127.0.0.13", transport="local")
    lane = Lane.objects.create(name="qwen", model_id="Qwen/Qwen3.8-27B-FP8", image="img@sha256:" + "a" * 64,
                               max_model_len=32768, revision=1)
    LaneNode.objects.create(lane=lane, node=node, rank=0)
    LaneRevision.objects.create(lane=lane, number=1, config=base_config(name="qwen", nodes=["spark3"],
                                                                          image="img@sha256:" + "a" * 64))
    return lane


@pytest.fixture
def finished_launch(lane: Lane, admin_user) -> Job:
    job = lane_job_create(lane=lane, kind=JobKind.LAUNCH, user=admin_user, params={"wait_timeout_s": 30})
    Job.objects.filter(pk=job.pk).update(state=JobState.FAILED, finished_at=timezone.now())
    job.refresh_from_db()
    return job


# ---------------------------------------------------------------- relaunch


@pytest.mark.parametrize("role, status", [("lead", 403), ("viewer", 403), ("outsider", 403), ("anonymous", 302)])
def test_relaunch_page_action_is_for_admins_only(role_clients, finished_launch, role, status):
    assert role_clients[role].post(f"/jobs/{finished_launch.pk}/relaunch/").status_code == status
    assert Job.objects.count() == 1


@pytest.mark.parametrize("role, status", [("lead", 403), ("viewer", 403), ("outsider", 403), ("anonymous", 401)])
def test_relaunch_api_is_for_admins_only(role_clients, finished_launch, role, status):
    assert role_clients[role].post(f"/api/jobs/{finished_launch.pk}/relaunch").status_code == status
    assert Job.objects.count() == 1


def test_relaunch_makes_a_new_job_with_the_same_kind_target_and_parameters(admin_client, finished_launch, lane):
    LaneRevision.objects.create(lane=lane, number=2, config={**finished_launch.lane_revision.config, "max_num_seqs": 8})
    response = admin_client.post(f"/jobs/{finished_launch.pk}/relaunch/")
    new = Job.objects.exclude(pk=finished_launch.pk).get()
    assert response.status_code == 302 and response["Location"] == f"/jobs/{new.pk}/"
    assert (new.kind, new.lane, new.state) == (JobKind.LAUNCH, lane, JobState.QUEUED)
    assert new.params == finished_launch.params
    assert new.lane_revision.number == 2  # what Launch would run now


def test_relaunch_api_answers_201_and_refuses_a_running_job(admin_client, finished_launch):
    response = admin_client.post(f"/api/jobs/{finished_launch.pk}/relaunch")
    assert response.status_code == 201
    new_id = response.json()["id"]
    refused = admin_client.post(f"/api/jobs/{new_id}/relaunch")
    assert refused.status_code == 422
    assert "still queued" in refused.json()["detail"][0]["msg"]


def test_relaunch_of_a_network_check_checks_the_same_node(admin_client, admin_user, lane):
    check = job_create(kind=JobKind.NETWORK_CHECK, user=admin_user, nodes=lane.ranked_nodes())
    Job.objects.filter(pk=check.pk).update(state=JobState.SUCCEEDED)
    assert admin_client.post(f"/api/jobs/{check.pk}/relaunch").status_code == 201
    new = Job.objects.exclude(pk=check.pk).get()
    assert new.kind == JobKind.NETWORK_CHECK and new.params["nodes"] == ["spark3"]


def test_the_job_page_offers_relaunch_to_admins_once_the_job_is_final(admin_client, viewer_client, finished_launch):
    page = admin_client.get(f"/jobs/{finished_launch.pk}/").content.decode()
    assert 'id="relaunch-button"' in page
    assert 'id="relaunch-button"' not in viewer_client.get(f"/jobs/{finished_launch.pk}/").content.decode()


# ---------------------------------------------------------------- search


@pytest.fixture
def logged(finished_launch: Job) -> Job:
    now = timezone.now()
    JobLogLine.objects.bulk_create(
        [JobLogLine(job=finished_launch, seq=i, created_at=now, node="spark3",
                    text=f"line {i}" + (" NCCL WARN timeout" if i % 500 == 0 else "")) for i in range(1, 3001)])
    return finished_launch


def test_log_search_finds_lines_across_the_whole_log(viewer_client, logged):
    found = viewer_client.get(f"/api/jobs/{logged.pk}/log/search?q=nccl warn").json()
    assert found["total"] == 6
    assert [line["seq"] for line in found["lines"]] == [500, 1000, 1500, 2000, 2500, 3000]
    limited = viewer_client.get(f"/api/jobs/{logged.pk}/log/search?q=line&limit=10").json()
    assert limited["total"] == 3000 and len(limited["lines"]) == 10


def test_log_search_refuses_an_empty_term_naming_the_field(viewer_client, logged):
    response = viewer_client.get(f"/api/jobs/{logged.pk}/log/search?q=%20")
    assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["body", "q"]


@pytest.mark.parametrize("role, status", [("outsider", 403), ("anonymous", 401)])
def test_log_search_is_denied_to_outsiders(role_clients, logged, role, status):
    assert role_clients[role].get(f"/api/jobs/{logged.pk}/log/search?q=line").status_code == status


# ---------------------------------------------------------------- skipped steps


def _steps(job: Job, states: list[str]) -> None:
    for position, state in enumerate(states):
        JobStep.objects.create(job=job, position=position, key=f"s{position}", title=f"step {position}", state=state)


def test_a_cancelled_job_marks_the_steps_it_never_ran_skipped(lane, admin_user):
    job = lane_job_create(lane=lane, kind=JobKind.LAUNCH, user=admin_user)
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING)
    _steps(job, [StepState.SUCCEEDED, StepState.CANCELLED, StepState.PENDING, StepState.PENDING])
    job_finish(job=job, state=JobState.CANCELLED, error="cancelled by ada")
    states = list(job.steps.order_by("position").values_list("state", "detail"))
    assert states[2:] == [(StepState.SKIPPED, "not run: the job was cancelled")] * 2
    assert states[0][0] == StepState.SUCCEEDED and states[1][0] == StepState.CANCELLED


def test_a_lost_job_marks_its_pending_steps_skipped(lane, admin_user):
    job = lane_job_create(lane=lane, kind=JobKind.LAUNCH, user=admin_user)
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING, heartbeat_at=timezone.now() - timezone.timedelta(hours=1))
    _steps(job, [StepState.RUNNING, StepState.PENDING])
    assert job_reap_lost(lost_after_s=60) == [job.pk]
    assert list(job.steps.order_by("position").values_list("state", flat=True)) == [StepState.FAILED, StepState.SKIPPED]


# ---------------------------------------------------------------- warnings in the list


def test_jobs_with_warnings_are_flagged_in_the_list(viewer_client, lane, admin_user):
    quiet = job_create(kind=JobKind.NETWORK_CHECK, user=admin_user, nodes=lane.ranked_nodes())
    warned = job_create(kind=JobKind.NETWORK_CHECK, user=admin_user, nodes=lane.ranked_nodes())
    Job.objects.filter(pk=warned.pk).update(state=JobState.SUCCEEDED, result={"warnings": ["spark3: MTU 1500"]})
    stepped = job_create(kind=JobKind.NETWORK_CHECK, user=admin_user, nodes=lane.ranked_nodes())
    _steps(stepped, [StepState.WARNED, StepState.SUCCEEDED])
    html = viewer_client.get("/jobs/").content.decode()

    def row(job: Job) -> str:
        start = html.index(f'id="job-row-{job.pk}"')
        return html[start:html.index("</tr>", start)]

    assert "⚠ 1 warning" in row(warned) and "spark3: MTU 1500" in row(warned)
    assert "⚠ 1 warning" in row(stepped)
    assert "hidden>⚠ 0 warnings" in row(quiet)
