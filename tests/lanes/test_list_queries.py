"""The node and lane lists (API and pages) run a fixed number of queries: no membership
query per node, no rule check that queries per lane."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from lanes.lane_services import lane_create
from lanes.models import Node
from tests.lanes.rule_cases import APART, SMALL, lane_data

pytestmark = pytest.mark.django_db

LISTS = ["/api/nodes", "/api/lanes", "/nodes/", "/lanes/"]


def add_rows(admin_user: Any, start: int, stop: int) -> None:
    """Nodes n<start..stop>, and as many lanes, two to a node (so rule checks see a neighbour)."""
    for i in range(start, stop):
        Node.objects.create(name=f"n{i}", address=f"127.0.1.{i + 1}", transport="local")
    for i in range(start, stop):
        apart = APART if i % 2 else {}
        lane_create(actor=admin_user, nodes=[f"n{i // 2}"], data=lane_data(name=f"lane{i}", **SMALL, **apart))


def queries(client: Client, url: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    assert response.status_code == 200, response.content
    return len(captured.captured_queries)


@pytest.mark.parametrize("url", LISTS)
def test_a_list_runs_as_many_queries_for_ten_rows_as_for_two(url: str, admin_user: Any, admin_client: Client) -> None:
    add_rows(admin_user, 0, 2)
    with_two = queries(admin_client, url)
    add_rows(admin_user, 2, 10)
    with_ten = queries(admin_client, url)
    assert with_ten == with_two


def test_the_lane_list_still_reports_a_neighbour_on_the_same_node(admin_user: Any, admin_client: Client) -> None:
    add_rows(admin_user, 0, 2)
    lanes = {lane["name"]: lane for lane in admin_client.get("/api/lanes").json()}
    assert [budget["other_lanes_gib"] > 0 for budget in lanes["lane0"]["budgets"]] == [True]
    nodes = {node["name"]: node for node in admin_client.get("/api/nodes").json()}
    assert nodes["n0"]["lanes"] == ["lane0", "lane1"] and nodes["n1"]["lanes"] == []
