"""Browser: cancelling a launch marks the steps it never ran `skipped` (not `pending` for
ever), and Relaunch starts a new job with the same kind, target and parameters."""

from __future__ import annotations

from typing import Any

import pytest

from jobs.models import Job, JobKind, JobState, StepState
from jobs.services import lane_job_create
from lanes.models import Lane
from tests.conftest import browser_login, wait_for
from tests.e2e.confirm import answer
from tests.jobs.conftest import call_in_thread

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_a_cancelled_launch_shows_its_later_steps_skipped(
    asgi_server: Any, page: Any, admin_user: Any, sim_lane: Any, job_threads: Any
) -> None:
    lane, cluster = sim_lane()
    # The node's kernel answers slowly: the launch sits in its first preflight step.
    slow = cluster.root / "spark3" / "bin" / "uname"
    slow.write_text("#!/bin/sh\nsleep 120\n")
    slow.chmod(0o755)
    browser_login(page, asgi_server.url, admin_user.username)
    page.goto(f"{asgi_server.url}/lanes/{lane.name}/")
    page.click("#lane-launch")
    page.click("[data-confirm=launch]")
    page.wait_for_url(f"{asgi_server.url}/jobs/*/")
    page.wait_for_selector("#step-0 .state-running", timeout=30_000)
    total = page.locator("#job-steps tbody tr").count()
    assert total >= 5
    assert page.locator("#job-steps .state-pending").count() == total - 1
    assert page.inner_text("#job-progress-text") == f"0 of {total} steps done"

    page.click("#cancel-button")
    answer(page, "confirm")
    page.wait_for_selector("#job-state .state-cancelled", timeout=30_000)
    page.wait_for_selector(f"#step-{total - 1} .state-skipped", timeout=30_000)
    assert page.locator("#job-steps .state-pending").count() == 0
    assert page.locator("#job-steps .state-skipped").count() == total - 1
    assert page.locator("#step-0 .state-cancelled").count() == 1
    assert "not run: the job was cancelled" in page.inner_text(f"#step-{total - 1}")
    assert page.inner_text("#job-progress-text") == f"{total} of {total} steps done"
    assert page.is_visible("#relaunch-button") and not page.is_visible("#cancel-button")
    job = Job.objects.get()
    assert set(job.steps.exclude(position=0).values_list("state", flat=True)) == {StepState.SKIPPED}


def test_relaunch_runs_a_new_job_with_the_same_parameters(
    asgi_server: Any, page: Any, admin_user: Any, sim_lane: Any, job_threads: Any
) -> None:
    lane, _ = sim_lane(startup_s=1)
    failed = call_in_thread(lambda: lane_job_create(
        lane=lane, kind=JobKind.LAUNCH, user=admin_user,
        params={"wait_poll_s": 0.3, "wait_timeout_s": 60, "reason": "first try"}))
    wait_for(lambda: Job.objects.filter(pk=failed.pk, state__in=["succeeded", "failed"]).exists(), timeout=60,
             what="the first launch to end")
    # Its runner may still be finishing (locks, last events) after the state is final: a
    # relaunch while it runs can be refused, and its last writes could undo the edit below.
    wait_for(lambda: not any(thread.is_alive() for thread in job_threads), timeout=60,
             what="the first launch's runner to finish")
    Job.objects.filter(pk=failed.pk).update(state=JobState.FAILED, error="pretend it failed")
    Lane.objects.filter(pk=lane.pk).update(observed_state="failed")

    browser_login(page, asgi_server.url, admin_user.username)
    page.goto(f"{asgi_server.url}/jobs/{failed.pk}/")
    # The live badge appears in the navigation bar when the page's socket opens, which can
    # move the page under a click in flight: click after it (a CI run once clicked beside
    # the button, so no dialog and no relaunch).
    page.wait_for_selector("#live-status[data-state=open]")
    page.click("#relaunch-button")
    questions = [answer(page, "confirm")]
    page.wait_for_url(lambda url: url.rstrip("/").split("/")[-1] not in ("", str(failed.pk)) and "/jobs/" in url)
    assert "same parameters" in questions[0]
    new = Job.objects.exclude(pk=failed.pk).get()
    assert page.url.endswith(f"/jobs/{new.pk}/")
    page.wait_for_selector("#job-state .state-succeeded", timeout=60_000)
    assert page.inner_text("#job-progress-text").startswith(f"{new.steps.count()} of {new.steps.count()}")
    new.refresh_from_db()
    assert (new.kind, new.lane_id) == (JobKind.LAUNCH, lane.pk)
    assert new.params == failed.params
