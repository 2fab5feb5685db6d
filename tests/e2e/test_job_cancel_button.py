"""Browser: the job page offers Cancel only while there is something to cancel."""

from __future__ import annotations

from typing import Any

import pytest

from jobs.models import Job
from jobs.states import publish_job_state
from tests.conftest import browser_login
from tests.e2e.confirm import answer
from tests.jobs.conftest import call_in_thread

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_a_finished_job_page_shows_no_cancel_button(asgi_server: Any, page: Any, admin_user: Any) -> None:
    job = Job.objects.create(kind="status", state="succeeded", params={"nodes": ["spark1"]})
    browser_login(page, asgi_server.url, admin_user.username)
    page.goto(f"{asgi_server.url}/jobs/{job.pk}/")
    page.wait_for_selector("#job-state .state-succeeded")
    assert page.locator("#cancel-button").count() == 1  # rendered for an admin...
    assert not page.is_visible("#cancel-button")  # ...but hidden: nothing left to cancel


def test_the_cancel_button_disappears_live_when_the_job_ends(asgi_server: Any, page: Any, admin_user: Any) -> None:
    job = Job.objects.create(kind="status", state="running", params={"nodes": ["spark1"]})
    browser_login(page, asgi_server.url, admin_user.username)
    page.goto(f"{asgi_server.url}/jobs/{job.pk}/")
    page.wait_for_selector("#live-status[data-state=open]")
    assert page.is_visible("#cancel-button")
    page.evaluate("window.__notReloaded = true")
    Job.objects.filter(pk=job.pk).update(state="succeeded")
    job.refresh_from_db()
    call_in_thread(lambda: publish_job_state(job))  # the test thread runs Playwright's event loop
    page.wait_for_selector("#job-state .state-succeeded", timeout=30_000)
    page.wait_for_selector("#cancel-button", state="hidden", timeout=30_000)
    assert page.evaluate("window.__notReloaded") is True


def test_cancel_asks_for_confirmation_first(asgi_server: Any, page: Any, admin_user: Any) -> None:
    job = Job.objects.create(kind="status", state="running", params={"nodes": ["spark1"]})
    browser_login(page, asgi_server.url, admin_user.username)
    page.goto(f"{asgi_server.url}/jobs/{job.pk}/")
    # The live badge appears in the navigation bar when the page's socket opens, and the
    # socket's first message re-renders the state: click after both, not while the page
    # may move under the click (it once failed in CI with no dialog shown).
    page.wait_for_selector("#live-status[data-state=open]")
    page.wait_for_selector("#job-state .state-running")
    page.click("#cancel-button")
    assert f"Cancel job #{job.pk}?" in answer(page, "cancel")
    job.refresh_from_db()
    assert job.cancel_requested_at is None and job.state == "running"
