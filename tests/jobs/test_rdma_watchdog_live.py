"""Browser: the lane page shows the RDMA watchdog's two transitions live — degraded with
its reason when the measured round trip rises, serving again once it recovered."""

from __future__ import annotations

import pytest

from jobs.fabric.watchdog import watchdog_tick
from jobs.models import LaneWatchdog
from lanes.models import Lane, LaneState
from tests.conftest import browser_login
from tests.jobs.conftest import call_in_thread, checked, create_lane, fault

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_lane_page_follows_degraded_and_recovered_live(asgi_server, page, viewer_user, admin_user, local_cluster):
    # Jobs broadcast with async_to_sync: not from this thread, where Playwright runs its loop.
    nodes = call_in_thread(lambda: checked(local_cluster, admin_user, ["spark1", "spark2"]))
    lane = create_lane("deepseek", nodes, max_model_len=1_048_576)
    Lane.objects.filter(pk=lane.pk).update(observed_state=LaneState.SERVING, max_model_len=1_048_576)
    LaneWatchdog.objects.create(lane=lane, window=1)
    browser_login(page, asgi_server.url, viewer_user.username)
    page.wait_for_selector("h1:has-text('Dashboard')")
    page.goto(f"{asgi_server.url}/lanes/deepseek/")
    page.wait_for_selector("#live-status[data-state='open']")
    page.evaluate("window.__notReloaded = true")
    assert page.inner_text("#lane-state") == "serving"

    fault(local_cluster, "spark2", "slow-rtt", "20")  # the round trip gains 20 us
    assert call_in_thread(watchdog_tick) == {"deepseek": "degrade"}
    page.wait_for_selector("#lane-state.state-degraded")
    reason = page.inner_text("#lane-state-reason")
    assert "RDMA watchdog" in reason and "above 12 us" in reason and "524,288 tokens" in reason

    fault(local_cluster, "spark2", "clear")
    assert call_in_thread(watchdog_tick) == {"deepseek": "recover"}
    page.wait_for_selector("#lane-state.state-serving")
    assert "back below 9.6 us" in page.inner_text("#lane-state-reason")
    assert page.evaluate("window.__notReloaded") is True
