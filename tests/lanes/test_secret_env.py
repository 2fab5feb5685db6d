"""Secret lane env: encrypted at rest, never returned by any page, API, revision, plan,
audit diff or socket to anyone (admins see "set"), replaced or cleared by admins, and
existing rows migrated."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection

from core.models import AuditEvent
from lanes.crypto import decrypt_secret
from lanes.models import Lane
from tests.lanes.rule_cases import lane_data

TOKEN = "hf_SuperSecretTokenValue1234567890"
PASSWORD = "p4ss-W0rd-that-must-never-show"
MARKED = "value-of-a-secret-marked-by-hand"


@pytest.fixture
def secret_lane(nodes: Any, admin_client: Any) -> Lane:
    body = {**lane_data(name="qwen"), "nodes": ["spark1"],
            "container_env": {"HF_TOKEN": TOKEN, "DB_PASSWORD": PASSWORD, "VLLM_LOGGING_LEVEL": "INFO"},
            "secret_env": {"ORG_HANDLE": MARKED}}
    response = admin_client.post("/api/lanes", body, content_type="application/json")
    assert response.status_code == 201, response.content
    return Lane.objects.get(name="qwen")


def everything_a_user_can_read(client: Any, lane: str) -> dict[str, str]:
    urls = [f"/api/lanes/{lane}", "/api/lanes", f"/api/lanes/{lane}/revisions",
            f"/api/lanes/{lane}/plan?action=launch", f"/api/lanes/{lane}/plan?action=status",
            f"/lanes/{lane}/", "/lanes/", "/", f"/lanes/{lane}/edit/"]
    return {url: client.get(url).content.decode() for url in urls}


@pytest.mark.parametrize("role", ["admin", "lead", "viewer"])
def test_no_role_ever_receives_a_secret_value(secret_lane, role_clients, role):
    for url, body in everything_a_user_can_read(role_clients[role], "qwen").items():
        for secret in (TOKEN, PASSWORD, MARKED):
            assert secret not in body, f"{secret[:6]}… in {url} for {role}"


def test_admins_see_which_secrets_are_set_and_the_plan_marks_them(secret_lane, admin_client):
    lane = admin_client.get("/api/lanes/qwen").json()
    assert lane["secret_env"] == {"DB_PASSWORD": "set", "HF_TOKEN": "set", "ORG_HANDLE": "set"}
    assert lane["container_env"] == {"VLLM_LOGGING_LEVEL": "INFO"}
    plan = admin_client.get("/api/lanes/qwen/plan?action=launch").json()["text"]
    assert "'HF_TOKEN=[secret]'" in plan and "'ORG_HANDLE=[secret]'" in plan
    page = admin_client.get("/lanes/qwen/").content.decode()
    assert "HF_TOKEN" in page and 'id="lane-secret-env"' in page


def test_the_database_holds_no_secret_in_clear(secret_lane, admin_client):
    admin_client.patch("/api/lanes/qwen", {"secret_env": {"HF_TOKEN": TOKEN + "-v2"}}, content_type="application/json")
    with connection.cursor() as cursor:
        cursor.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'")
        tables = [row[0] for row in cursor.fetchall()]
        dump = []
        for table in tables:
            cursor.execute(f'SELECT t::text FROM "{table}" t')  # noqa: S608 (names from the catalogue)
            dump += [row[0] for row in cursor.fetchall()]
    text = "\n".join(dump)
    assert "HF_TOKEN" in text  # the names are there...
    for secret in (TOKEN, PASSWORD, MARKED):
        assert secret not in text  # ...never the values
    stored = Lane.objects.get(name="qwen").secret_env
    assert decrypt_secret(stored["HF_TOKEN"]) == TOKEN + "-v2"


def test_replace_and_clear_are_audited_by_name_only(secret_lane, admin_client):
    before = secret_lane.revision
    response = admin_client.patch("/api/lanes/qwen", {"secret_env": {"HF_TOKEN": "hf_new", "DB_PASSWORD": None}},
                                  content_type="application/json")
    assert response.status_code == 200
    assert response.json()["secret_env"] == {"HF_TOKEN": "set", "ORG_HANDLE": "set"}
    lane = Lane.objects.get(name="qwen")
    assert lane.revision == before + 1 and decrypt_secret(lane.secret_env["HF_TOKEN"]) == "hf_new"
    event = AuditEvent.objects.filter(action="lane.update").latest("id")
    assert event.diff["secret_env_changes"] == [None, {"DB_PASSWORD": "cleared", "HF_TOKEN": "replaced"}]
    # Sending back the mark it was shown keeps the secret.
    admin_client.patch("/api/lanes/qwen", {"container_env": {"HF_TOKEN": "[secret]", "VLLM_LOGGING_LEVEL": "INFO"}},
                       content_type="application/json")
    assert decrypt_secret(Lane.objects.get(name="qwen").secret_env["HF_TOKEN"]) == "hf_new"


def test_only_admins_change_secrets(secret_lane, role_clients):
    for role in ("lead", "viewer", "outsider", "anonymous"):
        response = role_clients[role].patch("/api/lanes/qwen", {"secret_env": {"HF_TOKEN": "stolen"}},
                                            content_type="application/json")
        assert response.status_code in (401, 403), role
    assert decrypt_secret(Lane.objects.get(name="qwen").secret_env["HF_TOKEN"]) == TOKEN


def test_a_bad_secret_name_is_refused_naming_the_field(secret_lane, admin_client):
    response = admin_client.patch("/api/lanes/qwen", {"secret_env": {"1BAD NAME": "x"}},
                                  content_type="application/json")
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"][-1] == "secret_env"


def test_the_lane_form_sets_a_secret_and_never_shows_it(secret_lane, admin_client, admin_user):
    from lanes.forms import LaneForm

    initial = LaneForm.initial_for(secret_lane)
    assert TOKEN not in str(initial)
    post = {k: ("" if v is None else v) for k, v in initial.items() if k in LaneForm.base_fields}
    post.update(secret_env="NEW_SECRET_TOKEN=form-value-123\nDB_PASSWORD=", max_model_len="131072")
    response = admin_client.post("/lanes/qwen/edit/", post)
    assert response.status_code == 302, response.content.decode()[:2000]
    lane = Lane.objects.get(name="qwen")
    assert set(lane.secret_env) == {"HF_TOKEN", "ORG_HANDLE", "NEW_SECRET_TOKEN"}
    # A failing save shows the form again without the typed secret.
    post.update(secret_env="OTHER_TOKEN=typed-and-lost-on-purpose", gpu_memory_utilization="0.87",
                kv_cache_memory_bytes="")
    again = admin_client.post("/lanes/qwen/edit/", post)
    assert again.status_code == 200 and "typed-and-lost-on-purpose" not in again.content.decode()


def test_the_edit_form_says_which_secrets_are_set(secret_lane, admin_client):
    page = admin_client.get("/lanes/qwen/edit/").content.decode()
    assert "Set now: DB_PASSWORD, HF_TOKEN, ORG_HANDLE." in page
    assert MARKED not in page and TOKEN not in page
    assert "None is set." in admin_client.get("/lanes/new/").content.decode()


def test_the_migration_encrypts_existing_rows(nodes):
    from importlib import import_module

    from django.apps import apps

    from lanes.models import LaneRevision

    old = Lane.objects.create(name="old", model_id="m", image="img", max_model_len=4096,
                              container_env={"HF_TOKEN": TOKEN, "KEEP": "1"})
    LaneRevision.objects.create(lane=old, number=1, config={"container_env": {"HF_TOKEN": TOKEN, "KEEP": "1"}})
    AuditEvent.objects.create(action="lane.update", object_type="lanes.lane", object_id=str(old.pk),
                              diff={"container_env": [{}, {"HF_TOKEN": TOKEN}]})
    migration = import_module("lanes.migrations.0005_encrypt_secret_env")
    migration.encrypt_existing(apps, None)
    old.refresh_from_db()
    assert old.container_env == {"KEEP": "1"} and decrypt_secret(old.secret_env["HF_TOKEN"]) == TOKEN
    assert LaneRevision.objects.get(lane=old).config["container_env"] == {"HF_TOKEN": "[secret]", "KEEP": "1"}
    assert AuditEvent.objects.get(object_id=str(old.pk)).diff["container_env"][1] == {"HF_TOKEN": "[secret]"}


def test_no_socket_message_carries_a_secret(nodes, admin_client, monkeypatch):
    """Every live page message goes through core.broadcast.group_message: capture them all
    while a lane with secrets is created, changed, and changes state."""
    import json

    from core import broadcast
    from lanes.lane_states import lane_set_observed_state

    sent: list[dict[str, Any]] = []
    real = broadcast.group_message
    monkeypatch.setattr(broadcast, "group_message", lambda event, data: sent.append(real(event, data)) or sent[-1])
    body = {**lane_data(name="qwen"), "nodes": ["spark1"], "container_env": {"HF_TOKEN": TOKEN}}
    assert admin_client.post("/api/lanes", body, content_type="application/json").status_code == 201
    admin_client.patch("/api/lanes/qwen", {"secret_env": {"DB_PASSWORD": PASSWORD}}, content_type="application/json")
    lane_set_observed_state(lane=Lane.objects.get(name="qwen"), state="failed", reason="test")
    assert any(message["event"] == "lane.state" for message in sent)
    dump = json.dumps(sent)
    assert TOKEN not in dump and PASSWORD not in dump
