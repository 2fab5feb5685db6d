"""Browser: the lane page's state badge follows lane.state events without a reload."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from lanes.lane_states import lane_set_observed_state
from tests.conftest import browser_login
from tests.jobs.conftest import call_in_thread

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_the_state_badge_follows_the_lane_state_live(asgi_server, page, viewer_user, make_lane):
    lane = call_in_thread(lambda: make_lane("qwen"))  # saving broadcasts lane.saved: not from Playwright's loop
    browser_login(page, asgi_server.url, viewer_user.username)
    page.wait_for_selector("h1:has-text('Dashboard')")
    page.goto(f"{asgi_server.url}/lanes/qwen/")
    page.wait_for_selector("#live-status[data-state='open']")
    assert page.inner_text("#lane-state") == "stopped"
    # As the jobs app would, from a worker thread: save, then broadcast.
    def set_serving() -> None:
        try:
            lane_set_observed_state(lane=lane, state="serving")
        finally:
            connection.close()  # this thread's own connection, or the test database cannot be dropped

    sender = threading.Thread(target=set_serving)
    sender.start()
    sender.join()
    page.wait_for_selector("#lane-state.state-serving")
    assert page.inner_text("#lane-state") == "serving"


def test_the_lane_list_follows_observed_and_desired_state_live(asgi_server, page, viewer_user, make_lane):
    from core.broadcast import DASHBOARD_GROUP, broadcast

    call_in_thread(lambda: make_lane("qwen"))
    browser_login(page, asgi_server.url, viewer_user.username)
    page.wait_for_selector("h1:has-text('Dashboard')")
    page.goto(f"{asgi_server.url}/lanes/")
    page.wait_for_selector("#live-status[data-state='open']")
    page.evaluate("window.__notReloaded = true")
    sender = threading.Thread(target=broadcast, args=(
        DASHBOARD_GROUP, "lane.state", {"name": "qwen", "observed_state": "starting", "desired_state": "serving"}))
    sender.start()
    sender.join()
    page.wait_for_selector("#lanes tr[data-lane='qwen'] .state-starting")
    page.wait_for_selector("#lanes tr[data-lane='qwen'] .lane-desired:text-is('serving')", timeout=30_000)
    assert page.evaluate("window.__notReloaded") is True
