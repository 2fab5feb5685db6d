"""Browser: log in, see the dashboard, and watch a broadcast arrive without a reload."""

from __future__ import annotations

import threading

import pytest

from core.broadcast import DASHBOARD_GROUP, broadcast
from tests.conftest import browser_login

pytestmark = pytest.mark.e2e


def test_login_shows_the_dashboard_and_live_events(asgi_server, page, viewer_user):
    browser_login(page, asgi_server.url, viewer_user.username)
    page.wait_for_selector("h1:has-text('Dashboard')")
    page.wait_for_selector("#live-status[data-state='open']")
    page.wait_for_selector("#events li[data-event='hello']")
    # From another thread, as a worker would (Playwright's loop runs in this one).
    sender = threading.Thread(
        target=broadcast, args=(DASHBOARD_GROUP, "lane.state", {"name": "qwen", "observed_state": "serving"})
    )
    sender.start()
    sender.join()
    item = page.wait_for_selector("#events li[data-event='lane.state']")
    assert item.inner_text().endswith("Lane qwen is serving")


def test_wrong_password_is_refused_in_the_browser(asgi_server, page, viewer_user):
    browser_login(page, asgi_server.url, viewer_user.username, password="wrong")
    assert page.locator(".alert-danger").inner_text() == "Wrong user name or password."


def test_the_dashboard_follows_a_lanes_observed_and_desired_state_live(asgi_server, page, viewer_user):
    from lanes.models import Lane

    Lane.objects.create(name="qwen", model_id="Qwen/Qwen3.8-27B-FP8", image="img@sha256:" + "a" * 64,
                        max_model_len=32768, observed_state="serving", desired_state="serving")
    browser_login(page, asgi_server.url, viewer_user.username)
    page.wait_for_selector("#live-status[data-state='open']")
    page.evaluate("window.__notReloaded = true")
    sender = threading.Thread(target=broadcast, args=(
        DASHBOARD_GROUP, "lane.state", {"name": "qwen", "observed_state": "stopping", "desired_state": "stopped"}))
    sender.start()
    sender.join()
    page.wait_for_selector("#lane-states tr[data-lane='qwen'] .state-stopping")
    page.wait_for_selector("#lane-states tr[data-lane='qwen'] .desired:text-is('stopped')", timeout=30_000)
    assert page.evaluate("window.__notReloaded") is True
