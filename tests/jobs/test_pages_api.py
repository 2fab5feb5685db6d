"""Job pages and API: admins act, viewers and leads read, outsiders get 403, anonymous
users are sent to log in (pages) or get 401 (API)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from jobs.models import Job, JobKind, JobLogLine, JobState, JobStep
from jobs.services import job_create
from lanes.models import Lane

pytestmark = pytest.mark.django_db


@pytest.fixture
def lane(qwen_lane: Lane) -> Lane:
    return qwen_lane


@pytest.fixture
def job(lane: Lane, admin_user) -> Job:
    job = job_create(kind=JobKind.STATUS, user=admin_user, nodes=lane.ranked_nodes(), lane=lane,
                     revision=lane.revisions.get())
    now = timezone.now()
    JobLogLine.objects.bulk_create(
        [JobLogLine(job=job, seq=i, created_at=now, node="spark3", stream="stdout", text=f"line {i}")
         for i in range(1, 2501)]
    )
    Job.objects.filter(pk=job.pk).update(last_seq=2500)
    JobStep.objects.create(job=job, position=0, key="status.container.spark3", title="container",
                           state="succeeded", started_at=now - timedelta(seconds=2), finished_at=now)
    return job


@pytest.mark.parametrize("role, status", [("admin", 200), ("lead", 200), ("viewer", 200), ("outsider", 403),
                                          ("anonymous", 302)])
def test_job_pages_by_role(role_clients, job, role, status):
    for url in ("/jobs/", f"/jobs/{job.pk}/", f"/jobs/{job.pk}/log.txt"):
        assert role_clients[role].get(url).status_code == status, url


def test_job_list_filters_by_kind_state_node_and_lane(admin_client, job, lane, admin_user):
    other = job_create(kind=JobKind.NETWORK_CHECK, user=admin_user, nodes=lane.ranked_nodes())
    page = admin_client.get("/jobs/?kind=network_check").content.decode()
    assert f"job-row-{other.pk}" in page and f"job-row-{job.pk}" not in page
    page = admin_client.get("/jobs/?lane=qwen").content.decode()
    assert f"job-row-{job.pk}" in page and f"job-row-{other.pk}" not in page
    page = admin_client.get("/jobs/?node=spark3&state=queued").content.decode()
    assert f"job-row-{job.pk}" in page and f"job-row-{other.pk}" in page
    assert f"job-row-{job.pk}" not in admin_client.get("/jobs/?state=failed").content.decode()


def test_job_detail_shows_steps_and_a_cancel_button_for_admins_only(admin_client, viewer_client, job):
    page = admin_client.get(f"/jobs/{job.pk}/").content.decode()
    assert 'id="step-0"' in page and 'id="cancel-button"' in page and 'id="job-log"' in page
    assert 'id="cancel-button"' not in viewer_client.get(f"/jobs/{job.pk}/").content.decode()


def test_log_download_has_every_line(admin_client, job):
    response = admin_client.get(f"/jobs/{job.pk}/log.txt")
    body = b"".join(response.streaming_content).decode()
    assert body.count("\n") == 2500 and "[spark3] line 2500" in body


def test_api_log_tail_after_and_before(viewer_client, job):
    tail = viewer_client.get(f"/api/jobs/{job.pk}/log?limit=100").json()
    assert [line["seq"] for line in tail["lines"]] == list(range(2401, 2501))
    assert tail["has_earlier"] is True and tail["last_seq"] == 2500 and tail["first_seq"] == 1
    after = viewer_client.get(f"/api/jobs/{job.pk}/log?after_seq=2490").json()
    assert [line["seq"] for line in after["lines"]] == list(range(2491, 2501))
    before = viewer_client.get(f"/api/jobs/{job.pk}/log?before_seq=11").json()
    assert [line["seq"] for line in before["lines"]] == list(range(1, 11)) and before["has_earlier"] is False


def test_api_log_refuses_bad_windows_naming_the_field(viewer_client, job):
    response = viewer_client.get(f"/api/jobs/{job.pk}/log?limit=0")
    assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["query", "limit"]
    response = viewer_client.get(f"/api/jobs/{job.pk}/log?after_seq=1&before_seq=5")
    assert response.status_code == 422 and "after_seq" in str(response.json())


def test_api_list_and_detail(viewer_client, job):
    jobs = viewer_client.get("/api/jobs?lane=qwen").json()
    assert [j["id"] for j in jobs] == [job.pk] and jobs[0]["lane"] == "qwen"
    detail = viewer_client.get(f"/api/jobs/{job.pk}").json()
    assert detail["steps"][0]["key"] == "status.container.spark3" and detail["revision"] == 1
    assert viewer_client.get("/api/jobs/999999").status_code == 404


@pytest.mark.parametrize("role, status", [("lead", 403), ("viewer", 403), ("outsider", 403), ("anonymous", 401)])
def test_api_actions_are_denied_to_non_admins(role_clients, job, lane, role, status):
    client = role_clients[role]
    assert client.post(f"/api/jobs/{job.pk}/cancel").status_code == status
    assert client.post("/api/jobs/lanes/qwen/launch", {}, content_type="application/json").status_code == status
    assert client.post("/api/jobs/nodes/spark3/network-check").status_code == status


@pytest.mark.parametrize("role, status", [("outsider", 403), ("anonymous", 401)])
def test_api_reads_are_denied_to_outsiders(role_clients, job, role, status):
    for url in ("/api/jobs", f"/api/jobs/{job.pk}", f"/api/jobs/{job.pk}/log"):
        assert role_clients[role].get(url).status_code == status


def test_api_launch_queues_a_job_and_a_second_is_refused_with_409(admin_client, lane, dispatched,
                                                                 django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        first = admin_client.post("/api/jobs/lanes/qwen/launch", {"params": {"wait_timeout_s": 60}},
                                  content_type="application/json")
    assert first.status_code == 201 and first.json()["kind"] == "launch"
    assert dispatched == [first.json()["id"]]
    second = admin_client.post("/api/jobs/lanes/qwen/restart", {}, content_type="application/json")
    assert second.status_code == 409
    assert f"job #{first.json()['id']}" in second.json()["detail"] and "spark3 is busy" in second.json()["detail"]
    assert Lane.objects.get(pk=lane.pk).desired_state == "serving"


def test_api_launch_refuses_bad_params_naming_the_field(admin_client, lane):
    response = admin_client.post("/api/jobs/lanes/qwen/launch", {"params": {"wait_timeout_s": -1, "colour": 1}},
                                 content_type="application/json")
    assert response.status_code == 422
    fields = {item["loc"][-1]: item["msg"] for item in response.json()["detail"]}
    assert fields == {"wait_timeout_s": "must be between 1 and 7,200 seconds", "colour": "unknown parameter"}
    assert admin_client.post("/api/jobs/lanes/qwen/explode", {}, content_type="application/json").status_code == 422


def test_api_cancel_of_a_queued_job_and_of_a_finished_one(admin_client, job):
    assert admin_client.post(f"/api/jobs/{job.pk}/cancel").json()["state"] == JobState.CANCELLED
    again = admin_client.post(f"/api/jobs/{job.pk}/cancel")
    assert again.status_code == 422 and "already cancelled" in str(again.json())


def test_lane_action_form_redirects_to_the_job_page(admin_client, lane, dispatched,
                                                   django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client.post("/jobs/lanes/qwen/launch/")
    job = Job.objects.get(kind=JobKind.LAUNCH)
    assert response.status_code == 302 and response["Location"] == f"/jobs/{job.pk}/"
    assert job.pk in dispatched


@pytest.mark.parametrize("role, status", [("lead", 403), ("viewer", 403), ("outsider", 403), ("anonymous", 302)])
def test_action_forms_are_denied_to_non_admins(role_clients, job, lane, role, status):
    client = role_clients[role]
    assert client.post("/jobs/lanes/qwen/launch/").status_code == status
    assert client.post("/jobs/nodes/spark3/network-check/").status_code == status
    assert client.post(f"/jobs/{job.pk}/cancel/").status_code == status
    assert not Job.objects.filter(kind=JobKind.LAUNCH).exists()


def test_lane_actions_partial_shows_the_plans_to_admins(rf, admin_user, viewer_user, lane):
    from django.template.loader import render_to_string

    html = render_to_string("lanes/_lane_actions.html", {"lane": lane, "can_operate": True, "request": rf.get("/")})
    assert 'data-plan="launch"' in html and "vllm serve" in html and "rm -f vllm_node" in html
    html = render_to_string("lanes/_lane_actions.html", {"lane": lane, "can_operate": False})
    assert "data-plan" not in html and "data-recent-jobs" in html
    node = lane.ranked_nodes()[0]
    html = render_to_string("lanes/_node_actions.html", {"node": node, "can_operate": True, "request": rf.get("/")})
    assert "/jobs/nodes/spark3/network-check/" in html


def test_jobs_are_read_only_in_the_django_admin(admin_client, job):
    from tests.conftest import make_superuser

    admin_client.force_login(make_superuser("root-admin"))
    assert admin_client.get(f"/admin/jobs/job/{job.pk}/change/").status_code == 200
    assert admin_client.get("/admin/jobs/job/add/").status_code == 403
    assert admin_client.get(f"/admin/jobs/job/{job.pk}/delete/").status_code == 403  # evidence


def test_recent_jobs_and_live_events_name_the_kind_in_words(viewer_client, job, lane):
    from jobs.states import job_payload

    assert job_payload(job)["kind_label"] == "Status"
    page = viewer_client.get(f"/lanes/{lane.name}/").content.decode()
    assert f"#{job.pk} Status</a>" in page and f"#{job.pk} status</a>" not in page


def test_cancel_can_leave_a_launch_for_inspection_from_the_page_and_the_api(admin_client, lane, admin_user):
    launch = job_create(kind=JobKind.LAUNCH, user=admin_user, nodes=lane.ranked_nodes(), lane=lane)
    Job.objects.filter(pk=launch.pk).update(state=JobState.RUNNING)
    page = admin_client.get(f"/jobs/{launch.pk}/").content.decode()
    assert 'name="keep_running"' in page and "leave for inspection" in page
    admin_client.post(f"/jobs/{launch.pk}/cancel/", {"keep_running": "on"})
    launch.refresh_from_db()
    assert launch.cancel_requested_at is not None and launch.cancel_keep_running

    other = job_create(kind=JobKind.STATUS, user=admin_user, nodes=lane.ranked_nodes(), lane=lane)
    Job.objects.filter(pk=other.pk).update(state=JobState.RUNNING)
    assert 'name="keep_running"' not in admin_client.get(f"/jobs/{other.pk}/").content.decode()
    admin_client.post(f"/api/jobs/{other.pk}/cancel?keep_running=false")
    other.refresh_from_db()
    assert other.cancel_requested_at is not None and not other.cancel_keep_running
