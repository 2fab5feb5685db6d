"""Browser: a page whose socket dropped shows, once it reconnects, the state the API shows —
a change made while the socket was down is not lost until the next change or a reload — and
a message older than what the page holds never puts an older state back."""

from __future__ import annotations

import time
from typing import Any

import pytest
import uvicorn
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from core.broadcast import DASHBOARD_GROUP, group_message
from lanes.models import Lane, LaneState, Node, NodeState
from tests.conftest import AsgiServer, browser_login
from tests.e2e.test_live_indicator import _serve_on, record
from tests.jobs.conftest import call_in_thread

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

LANE_BADGE = "#lanes tr[data-lane='qwen'] .lane-state"


def test_a_reconnect_shows_what_the_api_shows_and_an_older_message_is_dropped(page: Any, admin_user: Any) -> None:
    Lane.objects.create(name="qwen", max_model_len=4096, observed_state=LaneState.SERVING, desired_state="serving")
    Node.objects.create(name="spark1", address="127.0.0.11", transport="local", state=NodeState.ONLINE)
    record(page)
    server = AsgiServer().start()
    second: uvicorn.Server | None = None
    thread = None
    try:
        browser_login(page, server.url, admin_user.username)
        page.goto(f"{server.url}/lanes/")
        page.wait_for_selector("#live-status[data-state=open]")
        assert page.inner_text(LANE_BADGE) == "serving"

        server.stop()  # a portal restart: the socket drops...
        page.wait_for_selector("#live-status[data-state=closed]")
        # ...and meanwhile the lane is checked again (no broadcast reaches this page).
        Lane.objects.filter(name="qwen").update(observed_state=LaneState.CHECKING)
        second, thread = _serve_on(server.port)
        page.wait_for_selector("#live-status[data-state=open]", timeout=30_000)
        api = page.request.get(f"{server.url}/api/lanes/qwen").json()
        assert api["observed_state"] == "checking"
        page.wait_for_function(f"document.querySelector(\"{LANE_BADGE}\").textContent === 'checking'", timeout=15_000)

        # A message sent before the snapshot (a slow process's "serving") arrives late: dropped.
        def send() -> None:
            group_send = async_to_sync(get_channel_layer().group_send)
            group_send(DASHBOARD_GROUP, group_message("lane.state", {"name": "qwen", "observed_state": "serving"},
                                                      at=time.time() - 60))
            group_send(DASHBOARD_GROUP, group_message("lane.saved", {"name": "qwen", "revision": 7}))  # newer, after it

        call_in_thread(send)  # (this thread runs Playwright's loop)
        page.wait_for_function("document.querySelector(\"#lanes tr[data-lane='qwen'] .revision-number\").textContent === '7'",
                               timeout=15_000)
        assert page.inner_text(LANE_BADGE) == "checking"
        assert page.request.get(f"{server.url}/api/lanes/qwen").json()["observed_state"] == page.inner_text(LANE_BADGE)
    finally:
        if second is not None:
            second.should_exit = True
            if thread is not None:
                thread.join(timeout=10)
        else:
            server.stop()
