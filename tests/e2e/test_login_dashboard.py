"""Browser: log in, see the dashboard, and watch a broadcast arrive without a reload."""

from __future__ import annotations

import threading

import pytest

from portal.broadcast import DASHBOARD_GROUP, broadcast
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
    assert "serving" in item.inner_text()


def test_wrong_password_is_refused_in_the_browser(asgi_server, page, viewer_user):
    browser_login(page, asgi_server.url, viewer_user.username, password="wrong")
    assert page.locator(".alert-danger").inner_text() == "Wrong user name or password."
