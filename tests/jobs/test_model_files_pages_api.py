"""Model files pages and API: only admins start an inventory, a download or a sync (team
leads, viewers, outsiders: 403; anonymous: 401 on the API, the login page on pages); bad
input is refused naming the field; the node and lane pages show what each node holds."""

from __future__ import annotations

import pytest

from jobs.models import Job, JobKind
from lanes.models import Lane, Node

pytestmark = pytest.mark.django_db

INVENTORY = {
    "models": [{"model_id": "Qwen/Qwen3.8-27B-FP8", "commit": "a" * 40, "refs": ["main"], "files": 2, "bytes": 2048,
                "expected_files": 2, "expected_bytes": 2048, "complete": True, "problem": "", "missing": []}],
    "images": [], "free_bytes": 10 * 1024**3, "disk_bytes": 100 * 1024**3, "errors": [], "checked_at": "2026-12-01T00:00:00",
}


@pytest.fixture
def lane(qwen_lane: Lane) -> Lane:
    Node.objects.create(name="spark1", address="127.0.0.11", transport="local", inventory=INVENTORY)
    return qwen_lane


SYNC = {"model_id": "Qwen/Qwen3.8-27B-FP8", "source": "spark1", "targets": ["spark3"]}


@pytest.mark.parametrize("role, status", [("lead", 403), ("viewer", 403), ("outsider", 403), ("anonymous", 401)])
def test_api_transfers_are_denied_to_non_admins(role_clients, lane, role, status):
    client = role_clients[role]
    assert client.post("/api/model-files/sync", SYNC, content_type="application/json").status_code == status
    assert client.post("/api/model-files/lanes/qwen/sync", {}, content_type="application/json").status_code == status
    assert client.post("/api/model-files/download", {"node": "spark3", "model_id": "a/b", "lane": "qwen"},
                       content_type="application/json").status_code == status
    assert client.post("/api/model-files/inventory", {"nodes": ["spark3"]},
                       content_type="application/json").status_code == status
    assert client.post("/api/model-files/images/sync", {"image": lane.image, "targets": ["spark3"]},
                       content_type="application/json").status_code == status
    assert not Job.objects.exists()


@pytest.mark.parametrize("role, status", [("lead", 403), ("viewer", 403), ("outsider", 403), ("anonymous", 302)])
def test_page_transfers_are_denied_to_non_admins(role_clients, lane, role, status):
    client = role_clients[role]
    for url, data in (("/model-files/lanes/qwen/sync/", {}), ("/model-files/nodes/spark3/inventory/", {}),
                      ("/model-files/nodes/spark3/download/", {"model_id": "a/b", "lane": "qwen"})):
        response = client.post(url, data)
        assert response.status_code == status, url
        if status == 302:
            assert "/login" in response["Location"]
    assert not Job.objects.exists()


def test_admin_sync_over_the_api_queues_a_job_and_bad_input_names_the_field(admin_client, lane, dispatched):
    ok = admin_client.post("/api/model-files/sync", SYNC, content_type="application/json")
    assert ok.status_code == 201 and ok.json()["kind"] == JobKind.MODEL_SYNC
    job = Job.objects.get(pk=ok.json()["id"])
    assert job.params["nodes"] == ["spark1", "spark3"] and job.params["network"] == "fabric"
    bad = admin_client.post("/api/model-files/sync", {**SYNC, "model_id": "../etc/passwd"},
                            content_type="application/json")
    assert bad.status_code == 422 and "model_id" in str(bad.json()) and "org/name" in str(bad.json())
    same = admin_client.post("/api/model-files/sync", {**SYNC, "targets": ["spark1"]}, content_type="application/json")
    assert same.status_code == 422 and "cannot also be a target" in str(same.json())
    unknown = admin_client.post("/api/model-files/sync", {**SYNC, "targets": ["nope"]}, content_type="application/json")
    assert unknown.status_code == 422 and "no node named nope" in str(unknown.json())
    network = admin_client.post("/api/model-files/sync", {**SYNC, "network": "wifi"}, content_type="application/json")
    assert network.status_code == 422 and "fabric, management" in str(network.json())
    pattern = admin_client.post("/api/model-files/download", {"node": "spark3", "model_id": "a/b", "lane": "qwen",
                                                              "include": ["$(reboot)"]}, content_type="application/json")
    assert pattern.status_code == 422 and "include" in str(pattern.json())
    no_image = admin_client.post("/api/model-files/download", {"node": "spark3", "model_id": "a/b"},
                                 content_type="application/json")
    assert no_image.status_code == 422 and "image" in str(no_image.json())


def test_the_lane_sync_picks_a_holder_and_the_ranks_that_lack_it(admin_client, lane, dispatched):
    response = admin_client.post("/model-files/lanes/qwen/sync/", {"network": "management"})
    job = Job.objects.get(kind=JobKind.MODEL_SYNC)
    assert response.status_code == 302 and response["Location"] == f"/jobs/{job.pk}/"
    assert job.params["source"] == "spark1" and job.params["targets"] == ["spark3"]
    assert job.params["network"] == "management"


def test_pages_show_what_each_node_holds(admin_client, viewer_client, lane):
    node_page = viewer_client.get("/nodes/spark1/").content.decode()
    assert "Qwen/Qwen3.8-27B-FP8" in node_page and "complete" in node_page and "free 10.0 GiB" in node_page
    assert 'id="download-form"' not in node_page and 'id="inventory-refresh"' not in node_page
    assert 'id="download-form"' in admin_client.get("/nodes/spark1/").content.decode()
    lane_page = viewer_client.get("/lanes/qwen/").content.decode()
    assert 'id="lane-files"' in lane_page and "files-unknown" in lane_page  # spark3 never inventoried
    assert 'id="lane-sync"' not in lane_page
    assert 'id="lane-sync"' in admin_client.get("/lanes/qwen/").content.decode()
    Node.objects.filter(name="spark3").update(inventory={**INVENTORY, "models": []})
    assert "files-missing" in viewer_client.get("/lanes/qwen/").content.decode()
    picker = admin_client.get("/lanes/qwen/edit/").content.decode()  # the node picker: holders first
    assert "weights-complete" in picker and picker.index('data-node="spark1"') < picker.index('data-node="spark3"')
    listed = viewer_client.get("/api/model-files/nodes").json()
    assert {item["node"] for item in listed} == {"spark1", "spark3"}
