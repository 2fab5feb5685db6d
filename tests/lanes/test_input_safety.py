"""Inputs that must never hurt: node fields that would reach a shell or the host's real
tools, a failed form that would echo a pasted key, renames that would break routing, and the
Django admin that would skip the rules, revisions and audit."""

from __future__ import annotations

import asyncssh
import pytest
from django.core.exceptions import ValidationError
from django.test import Client

from core.models import AuditEvent
from lanes.lane_services import lane_update
from lanes.lane_states import lane_set_observed_state
from lanes.models import Lane, LaneRevision, Node
from lanes.node_services import node_create, node_update
from tests.conftest import make_superuser


def node_body(**overrides: str) -> dict[str, str]:
    body = {"name": "spark9", "address": "10.0.0.9", "transport": "ssh", "ssh_port": "22", "ssh_user": "spark",
            "runtime_command": "docker", "memory_gib": "128", "os_reserve_gib": "8", "state": "unknown"}
    body.update(overrides)
    return body


@pytest.mark.parametrize("sim_dir", ["../../../../etc/passwd", "/etc", "/tmp/does-not-exist-xyz", "spark1/../../.."])
def test_a_local_node_refuses_a_sim_dir_outside_the_simulated_root(nodes, admin_user, sim_dir):
    with pytest.raises(ValidationError) as caught:
        node_create(actor=admin_user, data={"name": "spark9", "address": "127.0.0.19", "transport": "local",
                                            "sim_dir": sim_dir})
    assert "sim_dir" in caught.value.message_dict


def test_a_local_node_needs_a_sim_dir_and_accepts_one_under_the_root(nodes, admin_user, sim_root):
    with pytest.raises(ValidationError) as caught:
        node_create(actor=admin_user, data={"name": "spark9", "address": "127.0.0.19", "transport": "local"})
    assert "sparksim directory" in caught.value.message_dict["sim_dir"][0]
    node = node_create(actor=admin_user, data={"name": "spark9", "address": "127.0.0.19", "transport": "local",
                                               "sim_dir": str(sim_root / "spark9")})
    assert node.sim_dir == str(sim_root / "spark9")


@pytest.mark.parametrize("command", ["docker\nrm -rf /", "docker;id", "'docker'", "docker $(id)", "docker\t-H x", ""])
def test_runtime_command_must_be_plain_words(nodes, admin_user, command):
    with pytest.raises(ValidationError) as caught:
        node_update(node=nodes["spark1"], actor=admin_user, data={"runtime_command": command})
    assert "runtime_command" in caught.value.message_dict
    assert Node.objects.get(name="spark1").runtime_command == "docker"


def test_runtime_command_accepts_sudo_docker(nodes, admin_user):
    node = node_update(node=nodes["spark1"], actor=admin_user, data={"runtime_command": "sudo -n docker"})
    assert node.runtime_command == "sudo -n docker"


def test_the_api_names_the_sim_dir_rule(nodes, admin_client):
    response = admin_client.post("/api/nodes", {"name": "spark9", "address": "127.0.0.19", "transport": "local",
                                                "sim_dir": "../../../../etc/passwd"}, content_type="application/json")
    assert response.status_code == 422
    assert any(item["loc"][-1] == "sim_dir" for item in response.json()["detail"])


def test_a_failed_node_form_never_contains_the_pasted_key(nodes, admin_client):
    key = asyncssh.generate_private_key("ssh-ed25519").export_private_key().decode()
    # Fails for another reason than the key: the name is taken.
    response = admin_client.post("/nodes/new/", node_body(name="spark1", ssh_private_key=key))
    assert response.status_code == 200
    html = response.content.decode()
    assert response.context["form"].errors
    assert "PRIVATE KEY" not in html and key.splitlines()[1] not in html
    edit = admin_client.post("/nodes/spark1/edit/", node_body(name="spark1", ssh_private_key=key, memory_gib="-1",
                                                              transport="local"))
    assert edit.status_code == 200 and "PRIVATE KEY" not in edit.content.decode()


def test_a_serving_lane_cannot_be_renamed(make_lane, admin_user):
    lane = make_lane("qwen")
    lane_set_observed_state(lane=lane, state="serving")
    Lane.objects.filter(pk=lane.pk).update(desired_state="serving")
    with pytest.raises(ValidationError) as caught:
        lane_update(lane=lane, actor=admin_user, data={"name": "qwen2"})
    assert "stop it before renaming" in caught.value.message_dict["name"][0]
    assert Lane.objects.filter(name="qwen").exists()


def test_a_lane_another_falls_back_to_cannot_be_renamed(make_lane, admin_user, admin_client):
    make_lane("qwen")
    make_lane("deepseek", node_names=["spark2"], fallback="qwen")
    response = admin_client.patch("/api/lanes/qwen", {"name": "qwen2"}, content_type="application/json")
    assert response.status_code == 422
    assert "fallback of deepseek" in str(response.json())
    assert Lane.objects.get(name="deepseek").fallback.name == "qwen"


def test_a_stopped_lane_is_renamed_with_a_revision_and_an_audit_event(make_lane, admin_user):
    lane = make_lane("qwen")
    lane = lane_update(lane=lane, actor=admin_user, data={"name": "qwen2"})
    assert lane.name == "qwen2"
    assert LaneRevision.objects.filter(lane=lane).order_by("-number")[0].config["name"] == "qwen2"
    assert AuditEvent.objects.filter(action="lane.update", diff__name=["qwen", "qwen2"]).exists()


@pytest.fixture
def superuser_client(db: None) -> Client:
    user = make_superuser("root")
    client = Client()
    client.force_login(user)
    return client


def test_the_admin_site_cannot_change_a_lane_behind_the_rules(make_lane, superuser_client):
    lane = make_lane("qwen")
    revisions = LaneRevision.objects.count()
    events = AuditEvent.objects.count()
    page = superuser_client.get(f"/admin/lanes/lane/{lane.pk}/change/")
    assert page.status_code == 200 and 'name="gpu_memory_utilization"' not in page.content.decode()
    response = superuser_client.post(f"/admin/lanes/lane/{lane.pk}/change/",
                                     {"name": "qwen", "gpu_memory_utilization": "0.87", "max_model_len": "131072"})
    assert response.status_code == 403
    assert Lane.objects.get(pk=lane.pk).gpu_memory_utilization == 0.8
    assert superuser_client.get("/admin/lanes/lane/add/").status_code == 403
    assert superuser_client.post(f"/admin/lanes/lane/{lane.pk}/delete/", {"post": "yes"}).status_code == 403
    assert superuser_client.post(f"/admin/lanes/node/{lane.ranked_nodes()[0].pk}/delete/",
                                 {"post": "yes"}).status_code == 403
    assert (LaneRevision.objects.count(), AuditEvent.objects.count()) == (revisions, events)


def test_audit_events_cannot_be_deleted_or_changed(make_lane, superuser_client):
    make_lane("qwen")
    event = AuditEvent.objects.first()
    assert event is not None
    assert superuser_client.post(f"/admin/portal/auditevent/{event.pk}/delete/", {"post": "yes"}).status_code == 403
    bulk = superuser_client.post("/admin/portal/auditevent/", {"action": "delete_selected", "_selected_action": [event.pk],
                                                              "post": "yes"})
    assert AuditEvent.objects.filter(pk=event.pk).exists(), bulk.status_code
    with pytest.raises(ValueError):
        event.delete()
    event.action = "lane.nothing"
    with pytest.raises(ValueError):
        event.save()




def test_the_transfer_key_is_set_on_the_node_form_encrypted_audited_and_cleared(db, admin_client, lead_client):
    """Model-file copies use the key an admin pasted on the node form: stored encrypted, never
    shown back, audited as set/not set, usable by the sync, removable; a team lead cannot set it."""
    from jobs.weights.sync import transfer_key

    key = asyncssh.generate_private_key("ssh-ed25519").export_private_key().decode()
    assert admin_client.post("/nodes/new/", node_body(transfer_key=key)).status_code == 302
    node = Node.objects.get(name="spark9")
    assert node.transfer_key_encrypted and key.splitlines()[1] not in node.transfer_key_encrypted
    assert transfer_key(node).strip() == key.strip()
    for url in ("/nodes/spark9/", "/nodes/spark9/edit/"):
        assert key.splitlines()[1] not in admin_client.get(url).content.decode()
    created = AuditEvent.objects.get(action="node.create", object_repr="spark9")
    assert created.diff["transfer_key"][-1] == "set" and key.splitlines()[1] not in str(created.diff)
    assert lead_client.post("/nodes/spark9/edit/", node_body(clear_transfer_key="on")).status_code == 403
    assert Node.objects.get(name="spark9").transfer_key_encrypted == node.transfer_key_encrypted
    kept = admin_client.post("/nodes/spark9/edit/", node_body())  # empty field: the key stays
    assert kept.status_code == 302 and Node.objects.get(name="spark9").transfer_key_encrypted
    bad = admin_client.post("/nodes/spark9/edit/", node_body(transfer_key="not a key"))
    assert bad.status_code == 200 and "transfer_key" in bad.context["form"].errors
    assert admin_client.post("/nodes/spark9/edit/", node_body(clear_transfer_key="on")).status_code == 302
    assert Node.objects.get(name="spark9").transfer_key_encrypted == ""
