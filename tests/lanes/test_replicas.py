"""A lane of several replicas: saved with each replica's nodes and port, every rule checked
per replica (its own budget, its conflicts on shared nodes), its state the summary of its
replicas', shown and edited on the API, the page and the form, with the denied cases."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.apps import apps
from django.core.exceptions import ValidationError

from lanes.lane_services import lane_create, lane_update
from lanes.lane_states import lane_set_observed_state
from lanes.models import Lane, LaneNode, LaneReplica, LaneState
from lanes.selectors import lane_plans, replica_configs
from tests.lanes.rule_cases import lane_data
from tests.lanes.test_pages import form_data

pytestmark = pytest.mark.django_db

TWO = [{"nodes": ["spark1"]}, {"nodes": ["spark2"], "api_port": 8001}]


def two_replicas(admin_user: Any, **overrides: Any) -> Lane:
    return lane_create(actor=admin_user, data=lane_data(name="qwen", **overrides), replicas=TWO)


def test_a_lane_of_two_replicas_keeps_each_ones_nodes_port_and_plan(nodes: Any, admin_user: Any) -> None:
    lane = two_replicas(admin_user)
    assert [(r.index, r.api_port, r.observed_state) for r in lane.replicas.order_by("index")] == [
        (0, None, "stopped"), (1, 8001, "stopped")]
    assert lane.base_url(0) == "http://127.0.0.11:8000" and lane.base_url(1) == "http://127.0.0.12:8001"
    config = lane.revisions.get().config
    assert config["nodes"] == ["spark1"]
    assert config["replicas"] == [{"nodes": ["spark1"], "api_port": None}, {"nodes": ["spark2"], "api_port": 8001}]
    assert [c["api_port"] for c in replica_configs(config)] == [8000, 8001]
    plans = lane_plans(lane)
    assert [plan.steps[-1].url for plan in plans] == ["http://127.0.0.11:8000/health", "http://127.0.0.12:8001/health"]


def test_each_replica_is_checked_against_the_lanes_sharing_its_nodes(nodes: Any, admin_user: Any) -> None:
    lane_create(actor=admin_user, data=lane_data(name="other", api_port=8001, master_port=29502,
                                                 container_name="vllm_b"), nodes=["spark2"])
    with pytest.raises(ValidationError) as refused:
        two_replicas(admin_user)  # replica 1's port 8001 is taken on spark2
    messages = [m for ms in refused.value.message_dict.values() for m in ms]
    assert any(m.startswith("Replica 1: ") and "8001" in m for m in messages), messages
    assert not any(m.startswith("Replica 0") for m in messages)


def test_each_replica_needs_tp_nodes_and_a_node_serves_one_replica(nodes: Any, admin_user: Any) -> None:
    with pytest.raises(ValidationError) as tp:
        lane_create(actor=admin_user, data=lane_data(name="qwen"),
                    replicas=[{"nodes": ["spark1"]}, {"nodes": ["spark2", "spark3"]}])
    assert any(m.startswith("Replica 1: ") for m in tp.value.message_dict["tensor_parallel_size"])
    with pytest.raises(ValidationError) as shared:
        lane_create(actor=admin_user, data=lane_data(name="qwen"),
                    replicas=[{"nodes": ["spark1"]}, {"nodes": ["spark1"]}])
    assert "a node serves one replica of a lane" in " ".join(shared.value.message_dict["replicas"])
    with pytest.raises(ValidationError) as port:
        lane_create(actor=admin_user, data=lane_data(name="qwen"), replicas=[{"nodes": ["spark1"], "api_port": 0}])
    assert "api_port must be a port" in " ".join(port.value.message_dict["replicas"])
    assert not Lane.objects.exists()


def test_a_serving_replica_cannot_be_removed_a_stopped_one_can(nodes: Any, admin_user: Any) -> None:
    lane = two_replicas(admin_user)
    lane_set_observed_state(lane=lane, state=LaneState.SERVING, replica=1)
    with pytest.raises(ValidationError) as refused:
        lane_update(lane=lane, actor=admin_user, data={}, replicas=TWO[:1])
    assert "Replica 1 is serving: stop it before removing it." in refused.value.message_dict["replicas"]
    lane_set_observed_state(lane=lane, state=LaneState.STOPPED, replica=1)
    lane_update(lane=lane, actor=admin_user, data={}, replicas=TWO[:1])
    assert list(lane.replicas.values_list("index", flat=True)) == [0]
    assert not LaneNode.objects.filter(lane=lane, replica=1).exists()
    assert "replicas" not in lane.revisions.order_by("-number").first().config  # type: ignore[union-attr]


def test_the_lanes_state_is_the_summary_of_its_replicas(nodes: Any, admin_user: Any) -> None:
    lane = two_replicas(admin_user)
    lane_set_observed_state(lane=lane, state=LaneState.SERVING, replica=0, reason="launch")
    lane_set_observed_state(lane=lane, state=LaneState.FAILED, replica=1, reason="/health answered 500")
    lane.refresh_from_db()
    assert lane.observed_state == LaneState.SERVING
    assert lane.state_reason.startswith("replica 0 serving; replica 1 failed")
    lane_set_observed_state(lane=lane, state=LaneState.FAILED, replica=0)
    lane.refresh_from_db()
    assert lane.observed_state == LaneState.FAILED
    # The whole lane moved (a job on a lane of one replica, the RDMA watchdog): every replica too.
    lane_set_observed_state(lane=lane, state=LaneState.STOPPED)
    assert set(lane.replicas.values_list("observed_state", flat=True)) == {LaneState.STOPPED}
    # `expected` guards the replica's own state.
    assert not lane_set_observed_state(lane=lane, state=LaneState.SERVING, replica=1, expected=LaneState.FAILED)


def test_the_migration_makes_each_existing_lane_one_replica(nodes: Any, admin_user: Any) -> None:
    from importlib import import_module

    lane = lane_create(actor=admin_user, data=lane_data(name="qwen"), nodes=["spark1"])
    Lane.objects.filter(pk=lane.pk).update(observed_state="serving", state_reason="launch #3")
    LaneReplica.objects.all().delete()
    migration = import_module("lanes.migrations.0007_lane_replicas")
    migration.one_replica_each(apps, None)
    row = LaneReplica.objects.get(lane=lane)
    assert (row.index, row.observed_state, row.state_reason, row.api_port) == (0, "serving", "launch #3", None)


# --- API ---------------------------------------------------------------------------------

def post(client: Any, url: str, body: dict[str, Any]) -> Any:
    return client.post(url, data=json.dumps(body), content_type="application/json")


def test_the_api_creates_shows_and_edits_replicas(nodes: Any, admin_client: Any, viewer_client: Any) -> None:
    body = {**lane_data(name="qwen"), "replicas": TWO}
    created = post(admin_client, "/api/lanes", body)
    assert created.status_code == 201, created.content
    replicas = viewer_client.get("/api/lanes/qwen").json()["replicas"]
    assert [(r["index"], r["nodes"], r["api_port"], r["observed_state"], r["in_flight"], r["skipped_until"])
            for r in replicas] == [(0, ["spark1"], 8000, "stopped", 0, None), (1, ["spark2"], 8001, "stopped", 0, None)]
    plan = viewer_client.get("/api/lanes/qwen/plan").json()
    assert [p["replica"] for p in plan["replicas"]] == [0, 1]
    assert "# replica 0" in plan["text"] and "# replica 1" in plan["text"]
    assert "127.0.0.12:8001/health" in plan["replicas"][1]["text"]

    more = [*TWO, {"nodes": ["spark3"], "api_port": 8002}]
    denied = viewer_client.patch("/api/lanes/qwen", data=json.dumps({"replicas": more}), content_type="application/json")
    assert denied.status_code == 403
    bad = admin_client.patch("/api/lanes/qwen", data=json.dumps({"replicas": [{"nodes": ["spark1"], "api_port": 70000}]}),
                             content_type="application/json")
    assert bad.status_code == 422
    assert any(e["loc"][-1] == "replicas" for e in bad.json()["detail"])
    edited = admin_client.patch("/api/lanes/qwen", data=json.dumps({"replicas": more}), content_type="application/json")
    assert edited.status_code == 200 and [r["index"] for r in edited.json()["replicas"]] == [0, 1, 2]


# --- pages -------------------------------------------------------------------------------

def test_the_lane_page_shows_replicas_and_offers_their_jobs_to_operators_only(
    nodes: Any, admin_user: Any, admin_client: Any, viewer_client: Any,
) -> None:
    two_replicas(admin_user)
    page = admin_client.get("/lanes/qwen/").content.decode()
    assert 'id="lane-replicas"' in page and 'data-replica="1"' in page
    assert page.count('data-replica-action="restart"') == 2
    assert "# replica 1" in page  # the dry run shows every replica's plan
    seen = viewer_client.get("/lanes/qwen/").content.decode()
    assert 'data-replica="1"' in seen and "data-replica-action" not in seen
    assert viewer_client.post("/jobs/lanes/qwen/restart/", {"replica": "1"}).status_code == 403


def test_the_lane_form_adds_replicas_and_explains_a_bad_line(nodes: Any, admin_client: Any) -> None:
    data = form_data(lane_data(name="qwen"), ["spark1"])
    bad = admin_client.post("/lanes/new/", {**data, "replicas": "spark2 port=eighty"})
    assert bad.status_code == 200
    assert "Line 1: port= takes a port from 1 to 65,535." in bad.content.decode()
    shared = admin_client.post("/lanes/new/", {**data, "replicas": "spark1"})
    assert "a node serves one replica of a lane" in shared.content.decode()
    saved = admin_client.post("/lanes/new/", {**data, "replicas": "spark2 port=8001\nspark3"})
    assert saved.status_code == 302
    lane = Lane.objects.get(name="qwen")
    assert [(r.index, r.api_port) for r in lane.replicas.order_by("index")] == [(0, None), (1, 8001), (2, None)]
    edit = admin_client.get("/lanes/qwen/edit/").content.decode()
    assert "spark2 port=8001\nspark3" in edit


def test_a_replica_job_from_the_page_and_the_api_names_its_replica(
    nodes: Any, admin_user: Any, admin_client: Any,
) -> None:
    from jobs.models import Job

    two_replicas(admin_user)
    response = admin_client.post("/jobs/lanes/qwen/stop/", {"replica": "1"})
    assert response.status_code == 302
    job = Job.objects.get()
    assert job.params["replica"] == 1 and job.params["nodes"] == ["spark2"]
    assert job.target_label == "lane qwen replica 1"
    assert Lane.objects.get(name="qwen").desired_state == "serving"  # one replica of two stops
    refused = post(admin_client, "/api/jobs/lanes/qwen/restart", {"params": {"replica": 5}})
    assert refused.status_code == 422
    assert any(e["loc"][-1] == "replica" and "replicas 0 to 1" in e["msg"] for e in refused.json()["detail"])


def test_after_a_portal_start_a_stopped_replica_stays_stopped(nodes: Any, admin_user: Any) -> None:
    from lanes.lane_states import lanes_mark_checking

    lane = two_replicas(admin_user)
    lane_set_observed_state(lane=lane, state=LaneState.SERVING, replica=0)
    assert lanes_mark_checking(reason="the portal started") == ["qwen"]
    assert list(lane.replicas.order_by("index").values_list("observed_state", flat=True)) == [
        LaneState.CHECKING, LaneState.STOPPED]


def test_a_lane_wide_degrade_moves_the_serving_replicas_only(nodes: Any, admin_user: Any) -> None:
    lane = two_replicas(admin_user)
    lane_set_observed_state(lane=lane, state=LaneState.SERVING, replica=0)
    lane_set_observed_state(lane=lane, state=LaneState.DEGRADED, reason="RDMA watchdog: slow link")
    assert list(lane.replicas.order_by("index").values_list("observed_state", flat=True)) == [
        LaneState.DEGRADED, LaneState.STOPPED]
    assert Lane.objects.get(pk=lane.pk).observed_state == LaneState.DEGRADED


def test_the_rdma_watchdog_measures_every_replicas_links(nodes: Any, sim_root: Any, admin_user: Any) -> None:
    from jobs.fabric.watchdog import lane_head_worker_pairs, watched_lanes
    from lanes.models import Node

    Node.objects.create(name="spark9", address="127.0.0.19", transport="local", sim_dir=str(sim_root / "spark9"))
    lane = lane_create(actor=admin_user, data=lane_data(name="qwen", tensor_parallel_size=2, weights_gib=20.0),
                       replicas=[{"nodes": ["spark1", "spark2"]}, {"nodes": ["spark3", "spark9"]}])
    assert [(head.name, worker.name) for head, worker in lane_head_worker_pairs(lane)] == [
        ("spark1", "spark2"), ("spark3", "spark9")]
    lane_set_observed_state(lane=lane, state=LaneState.SERVING, replica=1)
    assert [watched.name for watched in watched_lanes()] == ["qwen"]
