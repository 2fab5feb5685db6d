"""A lane's scheduling policy (vLLM's --scheduling-policy): set by its own field (API and
form), validated with a 422 naming it, never through extra args, and on the launch command."""

from __future__ import annotations

from lanes.models import Lane
from lanes.plans import render_launch_plan
from tests.lanes import seed_configs as seeds
from tests.lanes.rule_cases import lane_data
from tests.lanes.test_api import post
from tests.lanes.test_plans import all_commands


def test_the_policy_is_a_lane_field_validated_and_never_an_extra_arg(nodes, admin_client):
    body = {**lane_data(scheduling_policy="lifo"), "nodes": ["spark1"]}
    refused = post(admin_client, "/api/lanes", body)
    assert refused.status_code == 422
    assert any(e["loc"] == ["body", "scheduling_policy"] for e in refused.json()["detail"]), refused.json()
    body = {**lane_data(extra_args=["--scheduling-policy", "priority"]), "nodes": ["spark1"]}
    refused = post(admin_client, "/api/lanes", body)
    assert refused.status_code == 422
    assert any(e["loc"] == ["body", "extra_args"] and "scheduling_policy" in e["msg"]
               for e in refused.json()["detail"]), refused.json()
    assert not Lane.objects.exists()
    created = post(admin_client, "/api/lanes", {**lane_data(scheduling_policy="priority"), "nodes": ["spark1"]})
    assert created.status_code == 201 and created.json()["scheduling_policy"] == "priority"
    assert Lane.objects.get().scheduling_policy == "priority"


def test_priority_is_on_the_launch_command_and_fcfs_leaves_vllms_default():
    for policy, expected in (("priority", True), ("fcfs", False)):
        config = {**seeds.qwen_single(), "scheduling_policy": policy}
        commands = " ".join(all_commands(render_launch_plan(config, seeds.targets(["spark3"]))))
        assert ("--scheduling-policy priority" in commands) is expected, commands
