"""Node and lane pages: each rule through the form (its message next to its field), every
role reads, only admins see the buttons and may POST, the dry-run plan and revisions show."""

from __future__ import annotations

import json
import shlex

import pytest

from core.models import AuditEvent
from lanes.models import Lane, Node
from tests.lanes.rule_cases import CASES, RuleCase, lane_data

pytestmark = pytest.mark.django_db


def form_data(data: dict, nodes: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in data.items():
        if value is None:
            out[key] = ""
        elif key == "extra_args":
            out[key] = shlex.join(value)
        elif key == "container_env":
            out[key] = "\n".join(f"{k}={v}" for k, v in value.items())
        elif key == "speculative_config":
            out[key] = json.dumps(value)
        elif isinstance(value, bool):
            out[key] = "true" if value else "false"
        else:
            out[key] = str(value)
    out["nodes"] = ", ".join(nodes)
    return out


def submit(client, case: RuleCase, make_lane, refused: bool):
    if case.other_lane is not None:
        make_lane("other", **case.other_lane)
    names = (case.refused_nodes or case.nodes) if refused else case.nodes
    return client.post("/lanes/new/", form_data(lane_data(**(case.refused if refused else case.accepted)), names))


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_each_rule_accepts_its_good_case_through_the_form(case, make_lane, admin_client):
    response = submit(admin_client, case, make_lane, refused=False)
    assert response.status_code == 302, response.content.decode()[:3000]
    assert response["Location"] == "/lanes/newlane/"


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_each_rule_refuses_its_bad_case_through_the_form_next_to_its_field(case, make_lane, admin_client):
    response = submit(admin_client, case, make_lane, refused=True)
    assert response.status_code == 200
    form = response.context["form"]
    assert any(case.message in message for message in form.errors[case.field]), form.errors
    html = response.content.decode()
    block = html[html.index(f'id="field-{case.field}"'):]
    block = block[: block.index('<div class="mb-3"', 10)] if '<div class="mb-3"' in block[10:] else block
    assert "rule-error" in block and 'data-field="' + case.field + '"' in block
    assert not Lane.objects.filter(name="newlane").exists()


def test_editing_a_lane_makes_a_revision_shown_with_its_diff(make_lane, admin_client):
    make_lane("qwen")
    page = admin_client.get("/lanes/qwen/edit/")
    assert page.status_code == 200
    data = {k: v if v is not None else "" for k, v in page.context["form"].initial.items()}
    data.update(max_model_len="65536", nodes="spark2")
    response = admin_client.post("/lanes/qwen/edit/", {k: str(v) for k, v in data.items() if k in page.context["form"].fields})
    assert response.status_code == 302, response.context["form"].errors if response.context else ""
    detail = admin_client.get("/lanes/qwen/").content.decode()
    assert 'data-revision="2"' in detail and "<del>131072</del> → <ins>65536</ins>" in detail


def test_the_lane_page_shows_state_budget_rules_and_the_dry_run(make_lane, viewer_client):
    make_lane("qwen", image="vllm/vllm-openai:latest")
    html = viewer_client.get("/lanes/qwen/").content.decode()
    assert 'id="lane-state" data-lane="qwen"' in html and "/ws/dashboard/" in html
    assert 'class="progress-stacked budget-bar"' in html
    assert 'data-code="image_pinned"' in html
    assert "Launch plan for lane qwen, revision 1" in html and "vllm serve org/model" in html
    stop = viewer_client.get("/lanes/qwen/?plan=stop").content.decode()
    assert "Stop plan for lane qwen" in stop


def test_the_edit_form_shows_the_current_warnings_next_to_their_fields(make_lane, admin_client):
    make_lane("qwen", image="vllm/vllm-openai:latest")
    html = admin_client.get("/lanes/qwen/edit/").content.decode()
    block = html[html.index('id="field-image"'):]
    assert 'data-code="image_pinned"' in block[: block.index('id="field-', 10)]


def test_the_node_pages_show_lanes_memory_and_the_network_report(make_lane, nodes, viewer_client):
    make_lane("qwen")
    Node.objects.filter(name="spark1").update(network_report={"verdict": "ok", "fabric_ip": "192.168.100.11",
                                                                 "eth_if": "enp1s0f0np0", "ib_hca": ["rocep1s0f0"],
                                                                 "gid_index": 3, "devices": []})
    listing = viewer_client.get("/nodes/").content.decode()
    assert 'data-node="spark1"' in listing and "qwen" in listing
    detail = viewer_client.get("/nodes/spark1/").content.decode()
    assert "192.168.100.11" in detail and 'id="node-memory"' in detail and "qwen" in detail


def test_admin_registers_a_node_with_a_key_that_is_never_shown_back(db, admin_client):
    import asyncssh

    secret = asyncssh.generate_private_key("ssh-ed25519").export_private_key().decode()
    response = admin_client.post("/nodes/new/", {
        "name": "spark9", "address": "10.0.0.9", "transport": "ssh", "ssh_port": "22", "ssh_user": "spark",
        "ssh_private_key": secret, "runtime_command": "docker", "memory_gib": "128", "os_reserve_gib": "8",
        "state": "unknown", "labels": "rack-a"})
    assert response.status_code == 302
    for url in ("/nodes/spark9/", "/nodes/spark9/edit/", "/nodes/"):
        html = admin_client.get(url).content.decode()
        assert secret.splitlines()[1] not in html and "PRIVATE KEY" not in html
    assert AuditEvent.objects.filter(action="node.create", actor_name="ada-admin").exists()


def test_the_node_form_shows_a_bad_key_next_to_its_field(db, admin_client):
    response = admin_client.post("/nodes/new/", {
        "name": "spark9", "address": "10.0.0.9", "transport": "ssh", "ssh_port": "22", "ssh_user": "spark",
        "ssh_private_key": "not a key", "runtime_command": "docker", "memory_gib": "128", "os_reserve_gib": "8",
        "state": "unknown"})
    assert response.status_code == 200 and "ssh_private_key" in response.context["form"].errors


def test_admin_pins_a_host_key_from_the_node_page(nodes, admin_client):
    import asyncssh

    public = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode()
    assert admin_client.post("/nodes/spark1/host-key/", {"host_key_line": public}).status_code == 302
    assert Node.objects.get(name="spark1").ssh_host_key == public.strip()


def test_form_labels_spell_units_acronyms_and_vllm_settings_as_operators_read_them(make_lane, admin_client):
    make_lane("qwen")
    node = admin_client.get("/nodes/spark1/edit/").content.decode()
    assert "SSH port" in node and "Memory (GiB)" in node and "Ssh port" not in node and "Memory gib" not in node
    lane = admin_client.get("/lanes/qwen/edit/").content.decode()
    assert ">gpu_memory_utilization</label>" in lane and "Gpu memory utilization" not in lane
    assert "API port" in lane and "KV bytes per token" in lane


def test_only_an_existing_node_offers_to_remove_its_stored_private_key(nodes, admin_client):
    assert "Remove the stored private key" not in admin_client.get("/nodes/new/").content.decode()
    assert "Remove the stored private key" in admin_client.get("/nodes/spark1/edit/").content.decode()


def test_the_host_key_form_is_offered_only_for_nodes_reached_over_ssh(nodes, admin_client):
    local = admin_client.get("/nodes/spark1/").content.decode()
    assert "not needed (local transport)" in local and "Pin the SSH host key" not in local
    Node.objects.filter(name="spark2").update(transport="ssh")
    assert "Pin the SSH host key" in admin_client.get("/nodes/spark2/").content.decode()


def test_the_actions_placeholders_are_included_for_the_jobs_app(make_lane, admin_client):
    make_lane("qwen")
    assert "lanes/_lane_actions.html" in [t.name for t in admin_client.get("/lanes/qwen/").templates]
    assert "lanes/_node_actions.html" in [t.name for t in admin_client.get("/nodes/spark1/").templates]


# ---------------------------------------------------------------- permissions

READ_PAGES = ["/nodes/", "/nodes/spark1/", "/lanes/", "/lanes/qwen/"]
WRITE_PAGES = ["/nodes/new/", "/nodes/spark1/edit/", "/lanes/new/", "/lanes/qwen/edit/"]
POSTS = ["/nodes/new/", "/nodes/spark1/edit/", "/nodes/spark2/delete/", "/nodes/spark1/host-key/", "/lanes/new/",
         "/lanes/qwen/edit/", "/lanes/qwen/delete/"]
BUTTONS = ['id="node-add"', 'id="node-edit"', 'id="lane-add"', 'id="lane-edit"', 'id="lane-delete"',
           'id="node-delete"', "Pin this key"]


@pytest.mark.parametrize("role", ["admin", "lead", "viewer"])
@pytest.mark.parametrize("url", READ_PAGES)
def test_every_role_reads_the_pages(make_lane, role_clients, role, url):
    make_lane("qwen")
    assert role_clients[role].get(url).status_code == 200


@pytest.mark.parametrize("url", READ_PAGES + WRITE_PAGES)
def test_outsiders_get_403_and_anonymous_users_the_login(make_lane, role_clients, url):
    make_lane("qwen")
    assert role_clients["outsider"].get(url).status_code == 403
    response = role_clients["anonymous"].get(url)
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


@pytest.mark.parametrize("role", ["lead", "viewer"])
def test_leads_and_viewers_see_no_change_buttons(make_lane, role_clients, role):
    make_lane("qwen")
    html = "".join(role_clients[role].get(url).content.decode() for url in READ_PAGES)
    assert not [button for button in BUTTONS if button in html]


def test_admins_see_the_change_buttons(make_lane, admin_client):
    make_lane("qwen")
    Node.objects.filter(name="spark1").update(transport="ssh")  # the host key form is for SSH nodes
    html = "".join(admin_client.get(url).content.decode() for url in READ_PAGES)
    assert [button for button in BUTTONS if button not in html] == []


@pytest.mark.parametrize("role", ["lead", "viewer", "outsider"])
@pytest.mark.parametrize("url", POSTS)
def test_leads_and_viewers_cannot_change_anything_by_post(make_lane, role_clients, role, url):
    make_lane("qwen")
    before = (list(Node.objects.values()), list(Lane.objects.values()), AuditEvent.objects.count())
    payload = form_data(lane_data(name="qwen", max_model_len=1024), ["spark1"])
    assert role_clients[role].post(url, payload).status_code == 403
    assert role_clients[role].get(url.replace("delete/", "").replace("host-key/", "")).status_code in (200, 403)
    assert (list(Node.objects.values()), list(Lane.objects.values()), AuditEvent.objects.count()) == before


def test_the_django_admin_lists_nodes_lanes_and_revisions(make_lane, admin_user, client):
    from django.contrib.auth.models import User

    make_lane("qwen")
    User.objects.filter(pk=admin_user.pk).update(is_superuser=True)  # with its admin role: Django admin
    client.force_login(admin_user)
    for url in ("/admin/lanes/node/", "/admin/lanes/lane/", "/admin/lanes/lanerevision/"):
        assert client.get(url).status_code == 200
    html = client.get(f"/admin/lanes/node/{Node.objects.get(name='spark1').pk}/change/").content.decode()
    assert "ssh_private_key_encrypted" not in html


def test_the_lane_form_groups_every_field_once():
    from lanes.forms import LaneForm

    grouped = [name for _, _, names in LaneForm.GROUPS for name in names]
    assert sorted(grouped) == sorted(LaneForm.base_fields) and len(grouped) == len(set(grouped)) == 32  # 30 settings + the write-only secret env + more replicas


def test_the_node_picker_ranks_online_well_connected_roomy_nodes_first(db, admin_client):
    from lanes.models import Node
    from lanes.node_picker import node_candidates

    Node.objects.create(name="a-down", address="127.0.0.21", transport="local", state="unreachable")
    Node.objects.create(name="b-fail", address="127.0.0.22", transport="local", state="online",
                        network_report={"verdict": "fail"})
    Node.objects.create(name="c-small", address="127.0.0.23", transport="local", state="online", memory_gib=64,
                        network_report={"verdict": "ok"})
    Node.objects.create(name="d-big", address="127.0.0.24", transport="local", state="online",
                        network_report={"verdict": "ok"})
    assert [c.name for c in node_candidates()] == ["d-big", "c-small", "b-fail", "a-down"]
    page = admin_client.get("/lanes/new/").content.decode()
    assert page.index('data-node="d-big"') < page.index('data-node="a-down"')
    assert 'id="group-memory"' in page and 'id="group-advanced"' in page


def test_one_submit_shows_the_field_errors_and_every_rule_the_valid_fields_decide(nodes, admin_client):
    """The issue: rule errors appeared only on the second submit, once the fields were valid.
    Here a bad API port and a bad speculative config (field errors) come with three rules
    broken by valid fields (TP 2 on one node, gpu_memory_utilization 0.87, a container
    setting a launcher flag); the memory budget, which reads the unreadable weights, stays
    unsaid rather than guessed."""
    data = form_data(lane_data(tensor_parallel_size=2, gpu_memory_utilization=0.87, extra_args=["--port", "9"]),
                     ["spark1"])
    data |= {"api_port": "eighty", "speculative_config": "{not json", "weights_gib": "lots"}
    response = admin_client.post("/lanes/new/", data)
    assert response.status_code == 200
    errors = response.context["form"].errors
    assert set(errors) >= {"api_port", "speculative_config", "weights_gib",  # the fields'
                           "tensor_parallel_size", "gpu_memory_utilization", "extra_args"}  # the rules'
    assert any("must equal the number of ranked nodes" in m for m in errors["tensor_parallel_size"])
    assert any("0.87 froze both" in m for m in errors["gpu_memory_utilization"])
    assert not any("exceeds the node" in m for field in errors for m in errors[field])
    assert errors["api_port"] == ["Enter a whole number."]  # a field's own message, once
    assert not Lane.objects.filter(name="newlane").exists()
    # Fixed fields: the same rules, and nothing else, on the next submit
    data |= {"api_port": "8000", "speculative_config": "", "weights_gib": "20"}
    again = admin_client.post("/lanes/new/", data).context["form"].errors
    assert set(again) == {"tensor_parallel_size", "gpu_memory_utilization", "extra_args"}
