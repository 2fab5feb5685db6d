"""The jobs and gateway lists (API and pages) run a fixed number of queries however many
rows they show."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from gateway.models import RequestLog
from gateway.services import api_key_create
from jobs.models import Job
from lanes.lane_services import lane_create
from lanes.models import Lane, Node
from tests.lanes.rule_cases import lane_data

pytestmark = pytest.mark.django_db


def queries(client: Client, url: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    assert response.status_code == 200, response.content
    return len(captured.captured_queries)


def add_jobs(admin: Any, start: int, stop: int) -> None:
    lane = Lane.objects.get(name="qwen")
    for _ in range(start, stop):
        job = Job.objects.create(kind="status", state="succeeded", lane=lane, created_by=admin,
                                 params={"nodes": ["spark1"]})
        job.nodes.set(Node.objects.filter(name="spark1"))


def add_keys(admin: Any, start: int, stop: int) -> None:
    for i in range(start, stop):
        created = api_key_create(actor=admin, name=f"key{i}", allowed_lanes=["qwen"], default_route="qwen")
        RequestLog.objects.create(request_id=f"req-{i}", endpoint="chat", requested_model="qwen", lane="qwen",
                                  key=created.key, status=200, latency_ms=12.5)


LISTS: list[tuple[str, Callable[[Any, int, int], None]]] = [
    ("/api/jobs", add_jobs), ("/jobs/", add_jobs),
    ("/api/gateway/keys", add_keys), ("/gateway/", add_keys),
    ("/api/gateway/requests", add_keys), ("/monitor/requests/", add_keys),
    ("/api/gateway/totals/key", add_keys),
]


@pytest.mark.parametrize(("url", "add_rows"), LISTS, ids=[url for url, _ in LISTS])
def test_a_list_runs_as_many_queries_for_ten_rows_as_for_two(
    url: str, add_rows: Callable[[Any, int, int], None], admin_user: Any, admin_client: Client
) -> None:
    Node.objects.create(name="spark1", address="127.0.0.11", transport="local")
    lane_create(actor=admin_user, nodes=["spark1"], data=lane_data(name="qwen"))
    add_rows(admin_user, 0, 2)
    with_two = queries(admin_client, url)
    add_rows(admin_user, 2, 10)
    assert queries(admin_client, url) == with_two
