"""Fabric checks and the RDMA watchdog on pages and in the API: admins start checks and
change a lane's watchdog; viewers and leads read results; outsiders get 403, anonymous
users 401 (API) or the login page."""

from __future__ import annotations

import pytest

from core.models import AuditEvent
from jobs.models import FabricResult, Job, JobKind, LaneWatchdog
from jobs.results import fabric_result_record
from lanes.models import Lane, LaneNode, LaneState, Node
from tests.jobs.conftest import create_lane

pytestmark = pytest.mark.django_db

REPORT = {"devices": [{"name": "rocep1s0f0", "ipv4": "192.168.100.11/24"}], "ib_hca": ["rocep1s0f0"],
          "fabric_ip": "192.168.100.11", "gid_index": 3}


@pytest.fixture
def pair(db: None) -> list[Node]:
    return [Node.objects.create(name=name, address=f"127.0.0.{20 + i}", transport="local", network_report=REPORT)
            for i, name in enumerate(("spark1", "spark2"))]


@pytest.fixture
def matrix_result(pair: list[Node]) -> FabricResult:
    job = Job.objects.create(kind=JobKind.LATENCY_MATRIX, params={"nodes": ["spark1", "spark2"]})
    cells = {"ib_send_lat": {"spark1>spark2": {"avg_us": 3.1, "p99_us": 4.0, "state": "ok"},
                             "spark2>spark1": {"avg_us": 13.2, "p99_us": 15.0, "state": "fail"}}}
    return fabric_result_record(job=job, kind=JobKind.LATENCY_MATRIX, nodes=pair, verdict="fail", headline=13.2,
                                headline_unit="us", summary={"cells": cells, "nodes": ["spark1", "spark2"],
                                                             "device": "rocep1s0f0", "text": "send latency"})


@pytest.mark.parametrize("role, status", [("admin", 200), ("lead", 200), ("viewer", 200), ("outsider", 403),
                                          ("anonymous", 302)])
def test_result_page_by_role(role_clients, matrix_result, role, status):
    response = role_clients[role].get(f"/jobs/fabric/results/{matrix_result.pk}/")
    assert response.status_code == status
    if status == 200:
        page = response.content.decode()
        assert "13.20us p99=15.00" in page and "cell-fail" in page and "cell-ok" in page


def test_job_page_links_its_fabric_result(viewer_client, matrix_result):
    page = viewer_client.get(f"/jobs/{matrix_result.job_id}/").content.decode()
    assert f'href="/jobs/fabric/results/{matrix_result.pk}/"' in page and "Fabric result: fail, 13.20 us" in page


def test_node_page_lists_the_nodes_fabric_history(viewer_client, admin_client, matrix_result):
    page = viewer_client.get("/nodes/spark2/").content.decode()
    assert f'data-result="{matrix_result.pk}"' in page and "13.20 us" in page
    assert 'id="fabric-form"' not in page  # viewers read only
    assert 'id="fabric-form"' in admin_client.get("/nodes/spark2/").content.decode()


@pytest.mark.parametrize("role, status", [("viewer", 200), ("lead", 200), ("outsider", 403), ("anonymous", 401)])
def test_api_results_by_role(role_clients, matrix_result, role, status):
    response = role_clients[role].get("/api/fabric/results?node=spark1")
    assert response.status_code == status
    if status == 200:
        assert [item["id"] for item in response.json()] == [matrix_result.pk]


def test_api_results_refuse_an_unknown_kind(viewer_client, matrix_result):
    response = viewer_client.get("/api/fabric/results?kind=bogus")
    assert response.status_code == 422 and response.json()["detail"][0]["loc"][-1] == "kind"


@pytest.mark.parametrize("role, status", [("lead", 403), ("viewer", 403), ("outsider", 403), ("anonymous", 401)])
def test_api_fabric_actions_are_denied_to_non_admins(role_clients, pair, role, status):
    lane = create_lane("deepseek", pair)
    client = role_clients[role]
    body = {"nodes": ["spark1", "spark2"]}
    assert client.post("/api/jobs/fabric/nccl-test", body, content_type="application/json").status_code == status
    assert client.patch(f"/api/fabric/watchdogs/{lane.name}", {"enabled": False},
                        content_type="application/json").status_code == status
    assert not Job.objects.filter(kind=JobKind.NCCL_TEST).exists()


@pytest.mark.parametrize("role, status", [("lead", 403), ("viewer", 403), ("outsider", 403), ("anonymous", 302)])
def test_fabric_forms_are_denied_to_non_admins(role_clients, pair, role, status):
    create_lane("deepseek", pair)
    client = role_clients[role]
    assert client.post("/jobs/fabric/", {"action": "nccl-test", "nodes": ["spark1", "spark2"]}).status_code == status
    assert client.post("/jobs/fabric/watchdogs/deepseek/", {"enabled": "false"}).status_code == status
    assert not LaneWatchdog.objects.filter(enabled=False).exists()


def test_api_creates_a_fabric_job_and_refuses_bad_input(admin_client, pair, dispatched,
                                                        django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        created = admin_client.post("/api/jobs/fabric/latency-matrix", {"nodes": ["spark2", "spark1"],
                                    "params": {"tests": ["send"], "iterations": 1000}},
                                    content_type="application/json")
    assert created.status_code == 201 and created.json()["kind"] == "latency_matrix"
    assert created.json()["nodes"] == ["spark2", "spark1"] and dispatched == [created.json()["id"]]
    # A second fabric test on the same nodes waits for the first: their ports and links are shared.
    busy = admin_client.post("/api/jobs/fabric/nccl-test", {"nodes": ["spark1", "spark2"]},
                             content_type="application/json")
    assert busy.status_code == 409 and "is busy" in busy.json()["detail"]
    Job.objects.all().delete()
    huge = admin_client.post("/api/jobs/fabric/nccl-test", {"nodes": ["spark1", "spark2"],
                             "params": {"max_bytes": 16 * 2**30}}, content_type="application/json")
    assert huge.status_code == 422 and huge.json()["detail"][0]["loc"][-1] == "max_bytes"
    single = admin_client.post("/api/jobs/fabric/nccl-test", {"nodes": ["spark1"]}, content_type="application/json")
    assert single.status_code == 422 and "at least two" in single.json()["detail"][0]["msg"]
    unknown = admin_client.post("/api/jobs/fabric/ping-pong", {"nodes": ["spark1", "spark2"]},
                                content_type="application/json")
    assert unknown.status_code == 422 and unknown.json()["detail"][0]["loc"][-1] == "action"


def test_api_refuses_nodes_without_a_report_and_nodes_a_lane_serves(admin_client, pair):
    Node.objects.filter(name="spark2").update(network_report={})
    missing = admin_client.post("/api/jobs/fabric/link-bandwidth", {"nodes": ["spark1", "spark2"]},
                                content_type="application/json")
    assert missing.status_code == 422 and "spark2: no network report yet" in missing.json()["detail"][0]["msg"]
    Node.objects.filter(name="spark2").update(network_report=REPORT)
    lane = create_lane("deepseek", pair)
    Lane.objects.filter(pk=lane.pk).update(observed_state=LaneState.DEGRADED)
    serving = admin_client.post("/api/jobs/fabric/link-bandwidth", {"nodes": ["spark1", "spark2"]},
                                content_type="application/json")
    assert serving.status_code == 409 and "lane deepseek is degraded on spark1, spark2" in serving.json()["detail"]


def test_a_lane_opts_out_of_the_watchdog_through_the_api_audited(admin_client, viewer_client, pair):
    lane = create_lane("deepseek", pair)
    assert viewer_client.get("/api/fabric/watchdogs/deepseek").json()["threshold_us"] == 12.0
    changed = admin_client.patch("/api/fabric/watchdogs/deepseek", {"enabled": False},
                                 content_type="application/json")
    assert changed.status_code == 200 and changed.json()["enabled"] is False
    event = AuditEvent.objects.get(action="lane.watchdog", object_id=str(lane.pk))
    assert event.diff["enabled"] == [True, False]
    bad = admin_client.patch("/api/fabric/watchdogs/deepseek", {"threshold_us": 10, "recover_below_us": 11},
                             content_type="application/json")
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"][-1] == "recover_below_us"
    page = admin_client.get("/lanes/deepseek/").content.decode()
    assert 'id="lane-watchdog"' in page and "opted out" in page and "Opt in" in page


def test_the_lane_page_form_opts_back_in(admin_client, pair):
    lane = create_lane("deepseek", pair)
    LaneWatchdog.objects.create(lane=lane, enabled=False)
    response = admin_client.post("/jobs/fabric/watchdogs/deepseek/", {"enabled": "true"})
    assert response.status_code == 302 and LaneWatchdog.objects.get(lane=lane).enabled


def test_the_watchdog_line_is_only_for_a_lane_whose_replica_spans_nodes(admin_client, viewer_client, pair):
    """A lane of single-node replicas has no link to measure: no RDMA line (it once showed
    one because the lane had two members). The API gives the context limit the line shows."""
    lane = create_lane("deepseek", pair)
    page = admin_client.get("/lanes/deepseek/").content.decode()
    assert 'id="lane-watchdog"' in page and 'id="watchdog-context">32768<' in page
    assert viewer_client.get("/api/fabric/watchdogs/deepseek").json()["context_limit"] == 32768
    LaneNode.objects.filter(lane=lane, node=pair[1]).update(replica=1, rank=0)  # two replicas of one node
    assert 'id="lane-watchdog"' not in admin_client.get("/lanes/deepseek/").content.decode()
