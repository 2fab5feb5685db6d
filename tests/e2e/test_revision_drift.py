"""Browser: a lane saved while it serves shows "running r1, latest r2" with the diff, on
its page and in the list, until a Restart applies r2."""

from __future__ import annotations

from typing import Any

import pytest

from jobs.models import Job, JobKind, JobState
from jobs.services import lane_job_create
from lanes.lane_services import lane_update
from lanes.models import Lane
from tests.conftest import browser_login, wait_for
from tests.jobs.conftest import call_in_thread

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_drift_is_shown_with_its_diff_and_cleared_by_a_restart(
    asgi_server: Any, page: Any, admin_user: Any, sim_lane: Any, job_threads: Any
) -> None:
    lane, _ = sim_lane(startup_s=1)
    launch = call_in_thread(lambda: lane_job_create(lane=lane, kind=JobKind.LAUNCH, user=admin_user,
                                                    params={"wait_poll_s": 0.3, "wait_timeout_s": 60}))
    wait_for(lambda: Job.objects.get(pk=launch.pk).is_final, timeout=60, what="the launch")
    assert Job.objects.get(pk=launch.pk).state == JobState.SUCCEEDED
    lane.refresh_from_db()
    assert lane.observed_state == "serving"

    browser_login(page, asgi_server.url, admin_user.username)
    page.goto(f"{asgi_server.url}/lanes/{lane.name}/")
    page.wait_for_selector("#live-status[data-state=open]")
    assert not page.is_visible("#lane-drift")
    assert page.inner_text("#lane-running") == " · running r1"

    call_in_thread(lambda: lane_update(lane=Lane.objects.get(pk=lane.pk), actor=admin_user,  # another admin saves
                                       data={"max_num_seqs": 8}))
    page.goto(f"{asgi_server.url}/lanes/")
    assert page.inner_text(f"#lanes tr[data-lane='{lane.name}'] [data-drift]") == "running r1, latest r2"
    page.goto(f"{asgi_server.url}/lanes/{lane.name}/")
    assert page.is_visible("#lane-drift")
    assert page.inner_text("#drift-summary") == "running r1, latest r2"
    assert "max_num_seqs: — → 8" in page.inner_text("#drift-changes")

    page.click("#drift-restart")
    plan = page.locator("[data-plan=restart]")
    plan.wait_for(state="visible")
    assert "--max-num-seqs 8" in plan.inner_text()
    page.click("[data-confirm=restart]")
    page.wait_for_url(f"{asgi_server.url}/jobs/*/")
    page.wait_for_selector("#job-state .state-succeeded", timeout=90_000)
    restart = Job.objects.get(kind=JobKind.RESTART)
    assert restart.lane_revision.number == 2

    page.goto(f"{asgi_server.url}/lanes/{lane.name}/")
    assert not page.is_visible("#lane-drift")
    assert page.inner_text("#lane-running") == " · running r2"
    page.goto(f"{asgi_server.url}/lanes/")
    assert page.locator(f"#lanes tr[data-lane='{lane.name}'] [data-drift]").count() == 0


def test_another_admins_save_and_the_restart_show_live_on_an_open_lane_page(
    asgi_server: Any, page: Any, admin_user: Any, lead_user: Any, sim_lane: Any, job_threads: Any
) -> None:
    lane, _ = sim_lane(startup_s=1)
    launch = call_in_thread(lambda: lane_job_create(lane=lane, kind=JobKind.LAUNCH, user=admin_user,
                                                    params={"wait_poll_s": 0.3, "wait_timeout_s": 60}))
    wait_for(lambda: Job.objects.get(pk=launch.pk).is_final, timeout=60, what="the launch")
    browser_login(page, asgi_server.url, lead_user.username)
    page.goto(f"{asgi_server.url}/lanes/{lane.name}/")
    page.wait_for_selector("#live-status[data-state=open]")
    assert page.inner_text("#lane-revision") == "1" and not page.is_visible("#lane-drift")
    page.evaluate("window.__notReloaded = true")

    call_in_thread(lambda: lane_update(lane=Lane.objects.get(pk=lane.pk), actor=admin_user,
                                       data={"max_num_seqs": 8}))
    page.wait_for_selector("#lane-revision:text-is('2')", timeout=30_000)
    page.wait_for_selector("#lane-saved-notice:not([hidden])")
    assert "r2 was just saved by ada-admin" in page.inner_text("#lane-saved-notice")
    page.wait_for_selector("#lane-drift:not([hidden])")
    assert page.inner_text("#drift-summary") == "running r1, latest r2"
    assert page.locator("#drift-restart").count() == 0  # a team lead reads; admins restart

    restart = call_in_thread(lambda: lane_job_create(lane=Lane.objects.get(pk=lane.pk), kind=JobKind.RESTART,
                                                     user=admin_user,
                                                     params={"wait_poll_s": 0.3, "wait_timeout_s": 60}))
    wait_for(lambda: Job.objects.get(pk=restart.pk).is_final, timeout=90, what="the restart")
    page.wait_for_selector("#lane-drift", state="hidden", timeout=30_000)
    page.wait_for_selector("#lane-running .running-number:text-is('2')", timeout=30_000)
    assert page.evaluate("window.__notReloaded") is True
