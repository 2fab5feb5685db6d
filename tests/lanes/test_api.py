"""The nodes and lanes API: every rule through the API (422 naming the field), reads for
every role, writes for admins only, the private key never output, revisions and plans."""

from __future__ import annotations

import json

import pytest

from lanes.models import Lane, Node
from tests.lanes.rule_cases import CASES, GIB, RuleCase, lane_data

pytestmark = pytest.mark.django_db


def post(client, url, body):
    return client.post(url, data=json.dumps(body), content_type="application/json")


def patch(client, url, body):
    return client.patch(url, data=json.dumps(body), content_type="application/json")


def api_body(case: RuleCase, refused: bool) -> dict:
    body = lane_data(**(case.refused if refused else case.accepted))
    body["nodes"] = (case.refused_nodes or case.nodes) if refused else case.nodes
    return body


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_each_rule_accepts_its_good_case_through_the_api(case, make_lane, admin_client):
    if case.other_lane is not None:
        make_lane("other", **case.other_lane)
    response = post(admin_client, "/api/lanes", api_body(case, refused=False))
    assert response.status_code == 201, response.content
    assert response.json()["revision"] == 1


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_each_rule_refuses_its_bad_case_through_the_api_with_422_naming_the_field(case, make_lane, admin_client):
    if case.other_lane is not None:
        make_lane("other", **case.other_lane)
    response = post(admin_client, "/api/lanes", api_body(case, refused=True))
    assert response.status_code == 422, response.content
    errors = response.json()["detail"]
    assert any(e["loc"] == ["body", case.field] and case.message in e["msg"] for e in errors), errors
    assert not Lane.objects.filter(name="newlane").exists()


def test_a_wrongly_typed_field_is_a_422_naming_it(nodes, admin_client):
    body = lane_data(tensor_parallel_size="two")
    body["nodes"] = ["spark1"]
    response = post(admin_client, "/api/lanes", body)
    assert response.status_code == 422
    assert any("tensor_parallel_size" in e["loc"] for e in response.json()["detail"])


def test_kv_cache_memory_bytes_accepts_vllms_11g(nodes, admin_client):
    body = lane_data(kv_cache_memory_bytes="11G", gpu_memory_utilization=None)
    body["nodes"] = ["spark1"]
    response = post(admin_client, "/api/lanes", body)
    assert response.status_code == 201, response.content
    assert response.json()["kv_cache_memory_bytes"] == 11 * GIB
    body.update(name="other", kv_cache_memory_bytes="lots")
    response = post(admin_client, "/api/lanes", body)
    assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["body", "kv_cache_memory_bytes"]


def test_the_lane_output_carries_rules_budget_and_kv_pool(make_lane, viewer_client):
    make_lane("qwen", image="vllm/vllm-openai:latest", kv_cache_memory_bytes=11 * GIB, gpu_memory_utilization=None,
              kv_bytes_per_token=10302)
    body = viewer_client.get("/api/lanes/qwen").json()
    assert {"code": "image_pinned", "field": "image", "level": "warning"}.items() <= body["rules"][0].items()
    assert body["budgets"][0]["kv_gib"] == pytest.approx(11.0)
    assert body["kv_pool"]["tokens"] > 1_000_000
    assert body["nodes"] == ["spark1"] and body["base_url"] == "http://127.0.0.11:8000"


def test_patch_changes_a_lane_and_its_revisions_show_the_diff(make_lane, admin_client, viewer_client):
    make_lane("qwen")
    response = patch(admin_client, "/api/lanes/qwen", {"max_model_len": 65536})
    assert response.status_code == 200 and response.json()["revision"] == 2
    revisions = viewer_client.get("/api/lanes/qwen/revisions").json()
    assert [r["number"] for r in revisions] == [2, 1]
    assert revisions[0]["changes"]["max_model_len"] == [131072, 65536]
    assert revisions[0]["created_by"] == "ada-admin"
    response = patch(admin_client, "/api/lanes/qwen", {"max_model_len": "auto"})
    assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["body", "max_model_len"]


@pytest.mark.parametrize("action", ["launch", "stop", "status"])
def test_the_plan_preview_renders_the_dry_run(make_lane, viewer_client, action):
    make_lane("qwen")
    body = viewer_client.get(f"/api/lanes/qwen/plan?action={action}").json()
    assert body["action"] == action and body["steps"]
    assert body["text"].startswith(f"{action.capitalize()} plan for lane qwen, revision 1")


def test_the_plan_preview_refuses_an_unknown_action(make_lane, viewer_client):
    make_lane("qwen")
    assert viewer_client.get("/api/lanes/qwen/plan?action=explode").status_code == 422


def test_an_unknown_lane_is_404(nodes, viewer_client):
    assert viewer_client.get("/api/lanes/nope").status_code == 404


# ---------------------------------------------------------------- nodes


def test_admin_creates_a_node_and_the_private_key_never_comes_back(db, admin_client, viewer_client):
    import asyncssh

    key = asyncssh.generate_private_key("ssh-ed25519")
    secret = key.export_private_key().decode()
    response = post(admin_client, "/api/nodes", {"name": "spark9", "address": "10.0.0.9", "ssh_private_key": secret,
                                                 "ssh_host_key": key.export_public_key().decode()})
    assert response.status_code == 201, response.content
    for client in (admin_client, viewer_client):
        text = client.get("/api/nodes/spark9").content.decode() + client.get("/api/nodes").content.decode()
        assert "PRIVATE KEY" not in text and secret.splitlines()[1] not in text
        assert json.loads(client.get("/api/nodes/spark9").content)["has_private_key"] is True
    assert Node.objects.get(name="spark9").ssh_host_key.startswith("ssh-ed25519 ")


def test_node_fields_are_validated_with_422(db, admin_client):
    response = post(admin_client, "/api/nodes", {"name": "bad name", "address": "x; rm -rf /"})
    assert response.status_code == 422
    fields = {e["loc"][-1] for e in response.json()["detail"]}
    assert {"name", "address"} <= fields


def test_pinning_a_host_key_through_the_api(nodes, admin_client):
    import asyncssh

    public = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
    response = post(admin_client, "/api/nodes/spark1/host-key", {"host_key_line": public})
    assert response.status_code == 200 and response.json()["ssh_host_key_fingerprint"].startswith("SHA256:")
    bad = post(admin_client, "/api/nodes/spark1/host-key", {"host_key_line": "nonsense"})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "ssh_host_key"]


def test_patch_and_delete_a_node(nodes, admin_client):
    assert patch(admin_client, "/api/nodes/spark3", {"memory_gib": 121}).json()["memory_gib"] == 121
    assert admin_client.delete("/api/nodes/spark3").status_code == 204
    assert not Node.objects.filter(name="spark3").exists()


# ---------------------------------------------------------------- permissions

WRITES = [
    ("post", "/api/nodes", {"name": "spark9", "address": "10.0.0.9"}),
    ("patch", "/api/nodes/spark1", {"memory_gib": 64}),
    ("delete", "/api/nodes/spark2", None),
    ("post", "/api/nodes/spark1/host-key", {"host_key_line": "x"}),
    ("post", "/api/lanes", {**lane_data(), "nodes": ["spark2"]}),
    ("patch", "/api/lanes/qwen", {"max_model_len": 1024}),
    ("delete", "/api/lanes/qwen", None),
]
READS = ["/api/nodes", "/api/nodes/spark1", "/api/lanes", "/api/lanes/qwen", "/api/lanes/qwen/revisions",
         "/api/lanes/qwen/plan"]


def _call(client, method, url, body):
    if body is None:
        return getattr(client, method)(url)
    return getattr(client, method)(url, data=json.dumps(body), content_type="application/json")


@pytest.mark.parametrize(("role", "status"), [("lead", 403), ("viewer", 403), ("outsider", 403), ("anonymous", 401)])
@pytest.mark.parametrize(("method", "url", "body"), WRITES)
def test_only_admins_change_nodes_and_lanes_through_the_api(make_lane, role_clients, role, status, method, url, body):
    make_lane("qwen")
    before = (list(Node.objects.values()), list(Lane.objects.values()))
    assert _call(role_clients[role], method, url, body).status_code == status
    assert (list(Node.objects.values()), list(Lane.objects.values())) == before


@pytest.mark.parametrize(("role", "status"), [("admin", 200), ("lead", 200), ("viewer", 200), ("outsider", 403),
                                              ("anonymous", 401)])
@pytest.mark.parametrize("url", READS)
def test_every_role_reads_and_outsiders_do_not(make_lane, role_clients, role, status, url):
    make_lane("qwen")
    assert role_clients[role].get(url).status_code == status
