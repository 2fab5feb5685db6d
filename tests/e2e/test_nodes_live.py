"""Browser: the nodes list, the node page and the dashboard's node summary follow
node.state events without a reload."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import pytest
from django.db import connection

from lanes.models import Node
from lanes.node_services import node_set_state
from tests.conftest import browser_login

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def set_state_from_a_worker_thread(name: str, state: str, last_seen: datetime | None = None) -> None:
    """As the jobs app would (Playwright's loop runs in this thread): save, then broadcast."""
    def run() -> None:
        try:
            node_set_state(node=Node.objects.get(name=name), state=state, last_seen=last_seen)
        finally:
            connection.close()  # this thread's own connection, or the test database cannot be dropped

    sender = threading.Thread(target=run)
    sender.start()
    sender.join()


@pytest.fixture
def spark_nodes(db: None) -> None:
    for i, name in enumerate(["spark1", "spark2"], start=1):
        Node.objects.create(name=name, address=f"127.0.0.{10 + i}", transport="local")


def test_the_nodes_list_badge_follows_the_node_state_live(asgi_server, page, viewer_user, spark_nodes):
    browser_login(page, asgi_server.url, viewer_user.username)
    page.wait_for_selector("h1:has-text('Dashboard')")
    page.goto(f"{asgi_server.url}/nodes/")
    page.wait_for_selector("#live-status[data-state='open']")
    page.evaluate("window.__notReloaded = true")
    assert page.inner_text("#nodes tr[data-node='spark2'] .node-state") == "unknown"
    set_state_from_a_worker_thread("spark2", "online", datetime(2026, 11, 29, 20, 30, 5, tzinfo=UTC))
    page.wait_for_selector("#nodes tr[data-node='spark2'] .node-state.state-online")
    assert page.inner_text("#nodes tr[data-node='spark2'] .node-last-seen") == "2026-11-29 20:30:05"
    assert page.inner_text("#nodes tr[data-node='spark1'] .node-state") == "unknown"
    set_state_from_a_worker_thread("spark2", "unreachable")
    page.wait_for_selector("#nodes tr[data-node='spark2'] .node-state.state-unreachable")
    assert page.evaluate("window.__notReloaded") is True


def test_the_node_page_and_the_dashboard_summary_follow_the_node_state_live(
    asgi_server, page, viewer_user, spark_nodes
):
    browser_login(page, asgi_server.url, viewer_user.username)
    page.wait_for_selector("#live-status[data-state='open']")
    assert page.inner_text("#node-state-counts") == "2 unknown"
    set_state_from_a_worker_thread("spark1", "online")
    page.wait_for_selector("#node-states li[data-node='spark1'] .state-online")
    page.wait_for_selector("#node-state-counts .state-online:text-is('1 online')", timeout=30_000)
    assert page.locator("#node-state-counts .state").all_inner_texts() == ["1 online", "1 unknown"]

    page.goto(f"{asgi_server.url}/nodes/spark1/")
    page.wait_for_selector("#live-status[data-state='open']")
    page.evaluate("window.__notReloaded = true")
    set_state_from_a_worker_thread("spark1", "maintenance", datetime(2026, 11, 29, 20, 31, tzinfo=UTC))
    page.wait_for_selector("#node-state.state-maintenance")
    assert page.inner_text("#node-last-seen") == "2026-11-29 20:31:00"
    assert page.evaluate("window.__notReloaded") is True
