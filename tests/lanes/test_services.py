"""Node and lane services: rules through the service, revisions, audit, credentials,
host key pinning and the observed-state broadcast."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.layers import get_channel_layer
from django.core.exceptions import ValidationError

from core.broadcast import DASHBOARD_GROUP
from core.models import AuditEvent
from lanes.crypto import decrypt_private_key
from lanes.lane_services import lane_create, lane_delete, lane_update
from lanes.lane_states import lane_set_observed_state
from lanes.models import Lane, LaneRevision, Node
from lanes.node_services import (
    node_confirm_host_key,
    node_create,
    node_delete,
    node_pin_host_key,
    node_record_captured_host_key,
    node_set_state,
    node_update,
)
from lanes.selectors import lane_check, lane_plan, lane_revisions, node_memory_use
from tests.lanes.rule_cases import CASES, GIB, RuleCase, lane_data

pytestmark = pytest.mark.django_db


def _attempt(case: RuleCase, make_lane, admin_user, refused: bool) -> Lane:
    if case.other_lane is not None:
        make_lane("other", **case.other_lane)
    names = (case.refused_nodes or case.nodes) if refused else case.nodes
    overrides = case.refused if refused else case.accepted
    return lane_create(actor=admin_user, data=lane_data(**overrides), nodes=names)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_each_rule_accepts_its_good_case_through_the_service(case, make_lane, admin_user):
    lane = _attempt(case, make_lane, admin_user, refused=False)
    assert lane.pk and lane.revision == 1


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_each_rule_refuses_its_bad_case_through_the_service_naming_the_field(case, make_lane, admin_user):
    with pytest.raises(ValidationError) as info:
        _attempt(case, make_lane, admin_user, refused=True)
    messages = info.value.message_dict
    assert case.field in messages, messages
    assert any(case.message in m for m in messages[case.field]), messages
    assert not Lane.objects.filter(name="newlane").exists()


def test_a_refused_update_changes_nothing(make_lane, admin_user):
    lane = make_lane("qwen")
    with pytest.raises(ValidationError):
        lane_update(lane=lane, actor=admin_user, data={"gpu_memory_utilization": 0.87})
    lane.refresh_from_db()
    assert lane.gpu_memory_utilization == 0.8 and lane.revision == 1
    assert LaneRevision.objects.filter(lane=lane).count() == 1


def test_every_lane_change_writes_a_revision_and_an_audit_event_with_the_diff(make_lane, admin_user):
    lane = make_lane("qwen")
    lane_update(lane=lane, actor=admin_user, data={"max_model_len": 65536}, nodes=["spark2"])
    lane.refresh_from_db()
    assert lane.revision == 2 and [n.name for n in lane.ranked_nodes()] == ["spark2"]
    (latest, first) = lane_revisions(lane)
    assert latest.revision.number == 2 and latest.revision.created_by == admin_user
    assert ("max_model_len", 131072, 65536) in latest.changes
    assert ("nodes", ["spark1"], ["spark2"]) in latest.changes
    event = AuditEvent.objects.filter(action="lane.update").get()
    assert event.actor_name == "ada-admin" and event.diff["max_model_len"] == [131072, 65536]


def test_an_update_that_changes_nothing_makes_no_revision(make_lane, admin_user):
    lane = make_lane("qwen")
    lane_update(lane=lane, actor=admin_user, data={"max_model_len": 131072})
    assert LaneRevision.objects.filter(lane=lane).count() == 1


def test_revisions_are_immutable(make_lane):
    revision = make_lane("qwen").revisions.get()
    revision.config = {}
    with pytest.raises(ValueError, match="immutable"):
        revision.save()


def test_deleting_a_lane_is_audited_and_refused_while_it_serves(make_lane, admin_user):
    lane = make_lane("qwen")
    lane_set_observed_state(lane=lane, state="serving")
    with pytest.raises(ValidationError, match="stop it"):
        lane_delete(lane=lane, actor=admin_user)
    lane_set_observed_state(lane=lane, state="stopped")
    lane_delete(lane=lane, actor=admin_user)
    assert AuditEvent.objects.filter(action="lane.delete", object_repr="qwen").exists()


def test_a_lane_that_is_another_lanes_fallback_cannot_be_deleted(make_lane, admin_user):
    qwen = make_lane("qwen")
    make_lane("deepseek", ["spark2"], fallback="qwen", api_port=8000)
    with pytest.raises(ValidationError, match="fallback of deepseek") as info:
        lane_delete(lane=qwen, actor=admin_user)
    assert "name" in info.value.message_dict
    assert Lane.objects.get(name="deepseek").fallback == qwen  # deepseek's config is not changed behind its back


def test_fallback_must_be_another_existing_lane(make_lane, admin_user):
    qwen = make_lane("qwen")
    lane = make_lane("deepseek", ["spark2"], fallback="qwen", api_port=8000)
    assert lane.fallback == qwen
    with pytest.raises(ValidationError) as info:
        lane_update(lane=qwen, actor=admin_user, data={"fallback": "qwen"})
    assert "fallback" in info.value.message_dict
    with pytest.raises(ValidationError):
        lane_update(lane=qwen, actor=admin_user, data={"fallback": "nope"})


def test_unknown_and_duplicate_nodes_are_refused(nodes, admin_user):
    with pytest.raises(ValidationError) as info:
        lane_create(actor=admin_user, data=lane_data(tensor_parallel_size=2), nodes=["spark1", "spark1"])
    assert "nodes" in info.value.message_dict
    with pytest.raises(ValidationError) as info:
        lane_create(actor=admin_user, data=lane_data(), nodes=["spark9"])
    assert "Unknown node" in info.value.message_dict["nodes"][0]


def test_warnings_do_not_block_saving_and_are_reported(make_lane):
    lane = make_lane("qwen", image="vllm/vllm-openai:latest")
    assert [r.code for r in lane_check(lane).warnings] == ["image_pinned"]


def test_observed_state_is_saved_then_broadcast_to_the_dashboard_and_lane_groups(make_lane, monkeypatch):
    sent = []
    monkeypatch.setattr("lanes.lane_states.broadcast", lambda group, event, data: sent.append((group, event, data)))
    lane = make_lane("qwen")
    lane_set_observed_state(lane=lane, state="starting", reason="launch job 7")
    assert Lane.objects.get(pk=lane.pk).observed_state == "starting"
    changed_at = Lane.objects.get(pk=lane.pk).state_changed_at
    data = {"name": "qwen", "observed_state": "starting", "desired_state": "stopped", "reason": "launch job 7",
            "state_changed_at": changed_at.isoformat()}
    assert sent == [("dashboard", "lane.state", data)]
    event = AuditEvent.objects.get(action="lane.state", object_id=str(lane.pk))
    assert event.diff["observed_state"] == ["stopped", "starting"] and event.diff["reason"] == [None, "launch job 7"]
    with pytest.raises(ValueError):
        lane_set_observed_state(lane=lane, state="bogus")


def test_node_state_is_saved_then_broadcast_to_a_dashboard_listener(nodes):
    seen_at = datetime(2026, 11, 29, 20, 30, tzinfo=UTC)

    async def listen_while_setting() -> tuple[dict[str, Any], str]:
        layer = get_channel_layer()
        channel = await layer.new_channel()
        await layer.group_add(DASHBOARD_GROUP, channel)
        await sync_to_async(node_set_state)(node=nodes["spark2"], state="online", last_seen=seen_at)
        message = await asyncio.wait_for(layer.receive(channel), timeout=10)
        # What a browser then fetches must already say what the event said.
        saved = await sync_to_async(lambda: Node.objects.get(name="spark2").state)()
        await layer.group_discard(DASHBOARD_GROUP, channel)
        return message, saved

    message, saved = async_to_sync(listen_while_setting)()
    assert message["event"] == "node.state"
    assert message["data"] == {"name": "spark2", "state": "online", "last_seen": "2026-11-29T20:30:00+00:00"}
    assert saved == "online"
    assert Node.objects.get(name="spark2").last_seen == seen_at


def test_node_set_state_leaves_maintenance_alone_when_asked_and_refuses_unknown_states(nodes, monkeypatch):
    sent = []
    monkeypatch.setattr("lanes.node_services.broadcast", lambda group, event, data: sent.append((group, event, data)))
    Node.objects.filter(name="spark1").update(state="maintenance")
    assert node_set_state(node=nodes["spark1"], state="online", last_seen=datetime.now(UTC),
                          unless_maintenance=True) is False
    assert Node.objects.get(name="spark1").state == "maintenance" and sent == []
    assert node_set_state(node=nodes["spark3"], state="unreachable") is True
    assert sent == [("dashboard", "node.state", {"name": "spark3", "state": "unreachable", "last_seen": None})]
    with pytest.raises(ValueError):
        node_set_state(node=nodes["spark3"], state="bogus")


def test_an_admin_putting_a_node_in_maintenance_is_broadcast_after_commit(
    nodes, admin_user, monkeypatch, django_capture_on_commit_callbacks
):
    sent = []
    monkeypatch.setattr("lanes.node_services.broadcast", lambda group, event, data: sent.append((group, event, data)))
    with django_capture_on_commit_callbacks(execute=True):
        node_update(node=nodes["spark1"], actor=admin_user, data={"state": "maintenance"})
        assert sent == []
    assert sent == [("dashboard", "node.state", {"name": "spark1", "state": "maintenance", "last_seen": None})]
    node_update(node=nodes["spark1"], actor=admin_user, data={"memory_gib": 64})
    assert len(sent) == 1


def test_the_plan_of_a_lane_uses_its_current_revision(make_lane, nodes):
    lane = make_lane("qwen", node_names=["spark3"])
    plan = lane_plan(lane)
    assert plan.revision == 1 and plan.steps[-1].url == "http://127.0.0.13:8000/health"


def test_node_memory_use_lists_the_lanes_on_it(make_lane, nodes):
    make_lane("qwen", kv_cache_memory_bytes=11 * GIB, gpu_memory_utilization=None)
    (use,) = node_memory_use(nodes["spark1"])
    assert use.lane == "qwen" and use.gib == pytest.approx(37.0)


# ---------------------------------------------------------------- nodes

PRIVATE_KEY = None


def private_key() -> tuple[str, str]:
    import asyncssh

    key = asyncssh.generate_private_key("ssh-ed25519")
    return key.export_private_key().decode(), key.export_public_key().decode().strip()


def node_data(**overrides):
    data = {"name": "spark9", "address": "10.9.9.9", "ssh_user": "spark"}
    data.update(overrides)
    return data


def test_a_private_key_is_stored_encrypted_and_never_in_the_audit_log(db, admin_user):
    secret, _ = private_key()
    node = node_create(actor=admin_user, data=node_data(), private_key=secret)
    assert secret not in node.ssh_private_key_encrypted
    assert decrypt_private_key(node.ssh_private_key_encrypted).strip() == secret.strip()
    event = AuditEvent.objects.get(action="node.create")
    assert event.diff["ssh_private_key"] == [None, "set"]
    assert "PRIVATE" not in str(event.diff)


def test_a_private_key_that_does_not_parse_is_refused_without_echoing_it(db, admin_user):
    with pytest.raises(ValidationError) as info:
        node_create(actor=admin_user, data=node_data(), private_key="-----BEGIN garbage-sekrit-----")
    assert "sekrit" not in str(info.value.message_dict)
    assert "ssh_private_key" in info.value.message_dict


def test_a_host_key_line_is_validated_and_pinned_with_an_audit_event(db, admin_user):
    _, public = private_key()
    node = node_create(actor=admin_user, data=node_data())
    node_pin_host_key(node=node, host_key_line=public + " root@spark9", actor=admin_user)
    node.refresh_from_db()
    assert node.ssh_host_key == public
    assert AuditEvent.objects.filter(action="node.pin_host_key").exists()
    with pytest.raises(ValidationError) as info:
        node_pin_host_key(node=node, host_key_line="ssh-ed25519 AAAAnotakey", actor=admin_user)
    assert "ssh_host_key" in info.value.message_dict


def test_a_captured_host_key_is_pinned_only_once_an_admin_confirms_it(db, admin_user):
    _, public = private_key()
    node = node_create(actor=admin_user, data=node_data())
    node_record_captured_host_key(node=node, host_key_line=public)
    assert Node.objects.get(pk=node.pk).ssh_host_key == ""
    node_confirm_host_key(node=node, actor=admin_user)
    assert Node.objects.get(pk=node.pk).ssh_host_key == public


def test_node_address_and_runtime_command_are_validated(db, admin_user):
    with pytest.raises(ValidationError) as info:
        node_create(actor=admin_user, data=node_data(address="spark9; rm -rf /", runtime_command="docker $(id)"))
    assert {"address", "runtime_command"} <= set(info.value.message_dict)


def test_a_node_used_by_a_lane_cannot_be_deleted_or_shrunk_below_its_lanes(make_lane, nodes, admin_user):
    make_lane("qwen", kv_cache_memory_bytes=11 * GIB, gpu_memory_utilization=None)
    with pytest.raises(ValidationError, match="used by lane"):
        node_delete(node=nodes["spark1"], actor=admin_user)
    with pytest.raises(ValidationError) as info:
        node_update(node=nodes["spark1"], actor=admin_user, data={"memory_gib": 32})
    assert "memory_gib" in info.value.message_dict
    node_update(node=nodes["spark1"], actor=admin_user, data={"memory_gib": 64})
    node_delete(node=nodes["spark3"], actor=admin_user)
    assert AuditEvent.objects.filter(action="node.delete").count() == 1
