"""Browser: search and filters on the nodes and lanes lists (kept in the URL), and the
nodes list's Network column following a network check without a reload."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection

from core.broadcast import DASHBOARD_GROUP, broadcast
from lanes.models import Lane, LaneNode, Node
from lanes.node_services import node_network_payload, node_record_network_report
from tests.conftest import browser_login

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def cluster_rows(db: None) -> None:
    for i, (name, state) in enumerate([("spark1", "online"), ("spark2", "unreachable"), ("spark3", "online")], 1):
        Node.objects.create(name=name, address=f"127.0.0.{10 + i}", transport="local", state=state,
                            labels=["rack-a"] if i < 3 else ["rack-b"])
    for name, nodes, state in (("deepseek", ["spark1", "spark2"], "serving"), ("qwen", ["spark3"], "stopped")):
        lane = Lane.objects.create(name=name, model_id=f"org/{name}-model", image="img@sha256:" + "a" * 64,
                                   max_model_len=32768, observed_state=state, revision=1)
        for rank, node in enumerate(nodes):
            LaneNode.objects.create(lane=lane, node=Node.objects.get(name=node), rank=rank)


def _visible_rows(page: Any, table: str, key: str) -> list[str]:
    return page.eval_on_selector_all(f"{table} tbody tr[data-{key}]:not([hidden])",
                                     f"rows => rows.map(r => r.dataset.{key})")


def test_nodes_list_search_and_filters(asgi_server: Any, page: Any, viewer_user: Any, cluster_rows: None) -> None:
    browser_login(page, asgi_server.url, viewer_user.username)
    page.goto(f"{asgi_server.url}/nodes/")
    page.fill("#nf-q", "rack-b")
    assert _visible_rows(page, "#nodes", "node") == ["spark3"]
    page.fill("#nf-q", "")
    page.select_option("#nf-state", "online")
    assert _visible_rows(page, "#nodes", "node") == ["spark1", "spark3"]
    assert page.inner_text("#node-filters [data-filter-count]") == "2 of 3 shown"
    page.select_option("#nf-network", "ok")
    assert _visible_rows(page, "#nodes", "node") == []
    assert page.is_visible("#nodes tr.no-match")
    page.reload()  # the filters live in the URL
    assert page.input_value("#nf-state") == "online" and page.input_value("#nf-network") == "ok"
    assert _visible_rows(page, "#nodes", "node") == []

    page.wait_for_selector("#live-status[data-state=open]")

    def check_saved() -> None:  # as the network check does: saved first, then broadcast
        try:
            node = node_record_network_report(node=Node.objects.get(name="spark3"),
                                              report={"verdict": "ok", "checked_at": "2026-11-30T20:01:02Z"})
            broadcast(DASHBOARD_GROUP, "node.network", node_network_payload(node))
        finally:
            connection.close()

    sender = threading.Thread(target=check_saved)
    sender.start()
    sender.join()
    page.wait_for_selector("#nodes tr[data-node='spark3'] .network-verdict:text-is('ok')")
    assert page.inner_text("#nodes tr[data-node='spark3'] .network-checked") == "2026-11-30 20:01"
    assert _visible_rows(page, "#nodes", "node") == ["spark3"]  # now matches network = ok


def test_lanes_list_search_and_filters(asgi_server: Any, page: Any, viewer_user: Any, cluster_rows: None) -> None:
    browser_login(page, asgi_server.url, viewer_user.username)
    page.goto(f"{asgi_server.url}/lanes/")
    assert _visible_rows(page, "#lanes", "lane") == ["deepseek", "qwen"]
    page.select_option("#lf-node", "spark2")
    assert _visible_rows(page, "#lanes", "lane") == ["deepseek"]
    page.select_option("#lf-node", "")
    page.select_option("#lf-state", "stopped")
    assert _visible_rows(page, "#lanes", "lane") == ["qwen"]
    page.select_option("#lf-state", "")
    page.fill("#lf-q", "DEEPSEEK-model")
    assert _visible_rows(page, "#lanes", "lane") == ["deepseek"]
    page.click("#lane-filters button[type=reset]")
    page.wait_for_function("document.querySelectorAll('#lanes tbody tr[data-lane]:not([hidden])').length === 2")
