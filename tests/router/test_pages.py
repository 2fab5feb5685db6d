"""Routing pages: who may read, who may change, and what each change does."""

from __future__ import annotations

import json
import re

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from core.models import AuditEvent
from routing.models import EvalPrompt, Prototype, RouterVersion, VersionStatus
from tests.router.conftest import evaluate_now

READ_PAGES = ["/routing/", "/routing/playground/", "/routing/versions/", "/routing/eval/", "/routing/shadow/",
              "/routing/prototypes/export?format=csv", "/routing/outcomes/", "/routing/replay/"]


def upload(content: str, name: str = "p.csv") -> SimpleUploadedFile:
    return SimpleUploadedFile(name, content.encode(), content_type="text/plain")


def edit_posts(prototype_id: int, draft: int) -> list[tuple[str, dict]]:
    return [
        ("/routing/", {"text": "Explain the proof of Fermat's last theorem.", "label": "long_reasoning", "enabled": "on"}),
        (f"/routing/prototypes/{prototype_id}/", {"text": "changed", "label": "short_factual"}),
        (f"/routing/prototypes/{prototype_id}/delete", {}),
        ("/routing/prototypes/import", {"file": upload("label,text\nshort_factual,What is DNS?\n"), "format": "csv"}),
        ("/routing/eval/import", {"file": upload("label,text\nshort_factual,What is ARP?\n"), "format": "csv"}),
        ("/routing/versions/", {}),
        (f"/routing/versions/{draft}/", {"threshold": "0.5", "aggregation": "max", "top_k": "3",
                                         "label_lanes": "long_reasoning = deepseek", "default_lane": "qwen"}),
        (f"/routing/versions/{draft}/publish", {}),
        ("/routing/shadow/", {"version": str(draft)}),
    ]


@pytest.fixture
def draft(starter, admin_user) -> RouterVersion:
    from routing.selectors import published_version
    from routing.services import router_version_create_draft

    return router_version_create_draft(actor=admin_user, source=published_version())


@pytest.mark.parametrize("role", ["admin", "lead", "viewer"])
def test_every_role_reads_the_routing_pages(starter, role_clients, role):
    for page in READ_PAGES:
        assert role_clients[role].get(page).status_code == 200, page


def test_outsiders_get_403_and_anonymous_users_the_login_page(starter, role_clients):
    for page in READ_PAGES:
        assert role_clients["outsider"].get(page).status_code == 403, page
        response = role_clients["anonymous"].get(page)
        assert response.status_code == 302 and "/accounts/login/" in response["Location"], page


@pytest.mark.parametrize("role", ["viewer", "outsider"])
def test_a_viewer_or_outsider_cannot_change_routing(starter, draft, role_clients, role):
    prototype = Prototype.objects.first()
    assert prototype is not None
    before = (Prototype.objects.count(), EvalPrompt.objects.count(), RouterVersion.objects.count(), AuditEvent.objects.count())
    for url, data in edit_posts(prototype.pk, draft.number):
        assert role_clients[role].post(url, data).status_code == 403, url
    after = (Prototype.objects.count(), EvalPrompt.objects.count(), RouterVersion.objects.count(), AuditEvent.objects.count())
    assert after == before
    assert RouterVersion.objects.get(status=VersionStatus.PUBLISHED).number == 1
    assert not RouterVersion.objects.filter(shadow=True).exists()


def test_a_viewer_sees_no_edit_controls(starter, viewer_client):
    content = viewer_client.get("/routing/").content.decode()
    assert 'id="prototype-add"' not in content and 'id="prototype-import"' not in content
    assert "Delete</button>" not in content


def test_deleting_a_prototype_asks_first(starter, lead_client):
    content = lead_client.get("/routing/").content.decode()
    forms = re.findall(r'<form method="post" action="/routing/prototypes/\d+/delete"[^>]*>', content)
    # the portal's one dialog (tests/e2e/test_confirm_dialog.py answers it in a browser)
    assert forms and all('data-confirm-title="Delete this ' in form and 'data-confirm-label="Delete"' in form
                         for form in forms)


def test_a_team_lead_edits_routing(starter, draft, lead_client):
    prototype = Prototype.objects.get(text="What is the default port of PostgreSQL?")
    for url, data in edit_posts(prototype.pk, draft.number)[:-1]:  # the draft is published last: no shadow after
        assert lead_client.post(url, data).status_code == 302, url
    assert Prototype.objects.filter(text__startswith="Explain the proof", label="long_reasoning").exists()
    assert not Prototype.objects.filter(pk=prototype.pk).exists()
    assert EvalPrompt.objects.filter(text="What is ARP?").exists()
    draft.refresh_from_db()
    assert draft.status == VersionStatus.PUBLISHED and draft.threshold == 0.5
    assert draft.label_lanes == {"long_reasoning": "deepseek"}
    assert {"text": "What is DNS?", "label": "short_factual"} in draft.prototypes
    actions = set(AuditEvent.objects.values_list("action", flat=True))
    assert {"prototype.create", "prototype.update", "prototype.delete", "prototype.import", "router.update",
            "router.publish"} <= actions


def test_a_team_lead_cannot_change_lanes_or_api_keys(starter, lead_client, seed_lanes):
    assert lead_client.post("/lanes/qwen/edit/", {"name": "qwen", "max_model_len": "1"}).status_code == 403
    assert lead_client.post("/gateway/", {"name": "mine", "default_route": "auto"}).status_code == 403
    assert lead_client.post("/api/gateway/keys", json.dumps({"name": "mine"}), content_type="application/json").status_code == 403
    assert lead_client.get("/gateway/").status_code == 403
    assert lead_client.patch("/api/lanes/qwen", json.dumps({"max_model_len": 1}), content_type="application/json").status_code == 403


def test_a_malformed_import_names_the_line_and_changes_nothing(starter, lead_client):
    before = set(Prototype.objects.values_list("text", "label"))
    bad = "label,text\nshort_factual,What is DNS?\nshort_factual,What is NTP?\nNot A Label,What is BGP?\n"
    response = lead_client.post("/routing/prototypes/import", {"file": upload(bad), "format": "csv"}, follow=True)
    assert "Import refused, nothing changed: line 4: `label` &#x27;Not A Label&#x27;" in response.content.decode()
    bad_json = '[\n {"text": "What is DNS?", "label": "short_factual"},\n {"text": "", "label": "short_factual"}\n]'
    response = lead_client.post("/routing/prototypes/import", {"file": upload(bad_json, "p.json"), "format": "json"}, follow=True)
    assert "line 3: `text` is missing or empty" in response.content.decode()
    assert set(Prototype.objects.values_list("text", "label")) == before


def test_export_then_import_round_trips(starter, lead_client):
    exported = lead_client.get("/routing/prototypes/export?format=json").content.decode()
    Prototype.objects.all().delete()
    response = lead_client.post("/routing/prototypes/import", {"file": upload(exported, "p.json"), "format": "json"}, follow=True)
    assert "Imported 245; 0 were already there." in response.content.decode()


def test_the_playground_shows_the_decision_and_the_top_five(starter, viewer_client):
    response = viewer_client.post("/routing/playground/", {"prompt": "Prove that the square root of 3 is irrational.", "version": "1"})
    content = response.content.decode()
    assert 'id="decision-lane">deepseek<' in content and 'id="decision-reason">router<' in content
    assert content.count("<tr><td>0.") == 5


def test_the_evaluation_page_shows_accuracy_confusion_baselines_and_the_chart(starter, draft, viewer_client, lead_user):
    evaluate_now(draft, lead_user)
    response = viewer_client.get(f"/routing/versions/{draft.number}/evaluate")
    content = response.content.decode()
    assert response.status_code == 200
    assert 'id="confusion"' in content and "baseline: length only" in content and "baseline: keywords" in content
    assert 'id="published-accuracy"' in content
    chart = response.context["chart"]
    assert chart["published"]["number"] == 1 and set(chart["shares"]) == {"deepseek", "qwen"}
    assert len(chart["accuracy"]) == len(chart["thresholds"]) == len(chart["published"]["accuracy"])
    report = response.context["report"]
    assert report.evaluation.count >= 150
    assert report.evaluation.accuracy >= 0.9
    assert report.evaluation.accuracy >= max(b.accuracy for b in report.baselines) + 0.1


def test_publish_shows_what_changes_and_rollback_republishes_an_old_version(starter, draft, lead_client):
    lead_client.post(f"/routing/versions/{draft.number}/", {
        "threshold": "0.4", "aggregation": "max", "top_k": "3", "label_lanes": "long_reasoning = deepseek", "default_lane": "qwen"})
    confirm = lead_client.get(f"/routing/versions/{draft.number}/publish").content.decode()
    assert "threshold" in confirm and "<code>0.2</code>" in confirm and "<code>0.4</code>" in confirm
    lead_client.post(f"/routing/versions/{draft.number}/publish")
    assert RouterVersion.objects.get(status=VersionStatus.PUBLISHED).number == draft.number
    assert "Roll back" in lead_client.get("/routing/versions/1/publish").content.decode()
    lead_client.post("/routing/versions/1/publish")
    assert RouterVersion.objects.get(status=VersionStatus.PUBLISHED).number == 1
    assert RouterVersion.objects.get(number=draft.number).status == VersionStatus.RETIRED
    assert AuditEvent.objects.filter(action="router.rollback").exists()


def test_a_bad_version_setting_is_refused_next_to_its_field(starter, draft, lead_client):
    response = lead_client.post(f"/routing/versions/{draft.number}/", {
        "threshold": "1.5", "aggregation": "max", "top_k": "3", "label_lanes": "x = nowhere", "default_lane": "qwen"})
    content = response.content.decode()
    assert response.status_code == 200
    assert "Ensure this value is less than or equal to 1" in content
    response = lead_client.post(f"/routing/versions/{draft.number}/", {
        "threshold": "0.5", "aggregation": "max", "top_k": "3", "label_lanes": "x = nowhere", "default_lane": "qwen"})
    assert "x: no lane named &#x27;nowhere&#x27;." in response.content.decode()


def test_a_published_version_cannot_be_edited(starter, lead_client):
    response = lead_client.post("/routing/versions/1/", {
        "threshold": "0.5", "aggregation": "max", "top_k": "3", "label_lanes": "a = qwen", "default_lane": "qwen"})
    assert "make a draft from it to change it" in response.content.decode()
    assert RouterVersion.objects.get(number=1).threshold != 0.5
