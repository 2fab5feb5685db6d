"""Gateway pages and management API: admins only; secrets shown once and stored hashed."""

from __future__ import annotations

import hashlib

import pytest
from django.test import Client

from core.models import AuditEvent
from gateway.models import ApiKey, RequestLog
from tests.gateway.conftest import make_lane

PAGES = ["/gateway/", "/gateway/requests/", "/gateway/mirror/"]
API = ["/api/gateway/keys", "/api/gateway/requests", "/api/gateway/totals/lane"]


@pytest.mark.parametrize("url", PAGES)
def test_gateway_pages_are_for_admins_only(role_clients: dict[str, Client], url: str) -> None:
    assert role_clients["admin"].get(url).status_code == 200
    for who in ("lead", "viewer", "outsider"):
        assert role_clients[who].get(url).status_code == 403, who
    assert role_clients["anonymous"].get(url).status_code == 302


@pytest.mark.parametrize("url", API)
def test_the_management_api_is_for_admins_only(role_clients: dict[str, Client], url: str) -> None:
    assert role_clients["admin"].get(url).status_code == 200
    for who in ("lead", "viewer", "outsider"):
        assert role_clients[who].get(url).status_code == 403, who
    assert role_clients["anonymous"].get(url).status_code == 401


def test_creating_and_revoking_keys_is_denied_to_non_admins(role_clients: dict[str, Client], db: None) -> None:
    for who in ("viewer", "outsider"):
        assert role_clients[who].post("/api/gateway/keys", {"name": "x"}, content_type="application/json").status_code == 403
        assert role_clients[who].post("/gateway/", {"name": "x", "default_route": "auto"}).status_code == 403
    key = ApiKey.objects.create(name="k", prefix="sk-spark-abc", secret_hash="0" * 64)
    assert role_clients["viewer"].post(f"/api/gateway/keys/{key.pk}/revoke").status_code == 403
    assert role_clients["viewer"].post(f"/gateway/keys/{key.pk}/revoke").status_code == 403
    assert ApiKey.objects.get(pk=key.pk).revoked_at is None
    assert not ApiKey.objects.exclude(pk=key.pk).exists()


def test_the_api_creates_a_key_whose_secret_is_shown_once_and_stored_hashed(admin_client: Client) -> None:
    make_lane("qwen", 8000)
    created = admin_client.post("/api/gateway/keys", {"name": "review-agent", "allowed_lanes": ["qwen"],
                                                      "rpm_limit": 60}, content_type="application/json")
    assert created.status_code == 201
    body = created.json()
    secret = body["secret"]
    key = ApiKey.objects.get(pk=body["id"])
    assert key.secret_hash == hashlib.sha256(secret.encode()).hexdigest() and secret not in key.secret_hash
    assert secret.startswith(key.prefix) and len(key.prefix) < len(secret) // 2
    assert body["allowed_lanes"] == ["qwen"] and body["rpm_limit"] == 60
    listed = admin_client.get("/api/gateway/keys").json()
    assert "secret" not in listed[0] and secret not in str(listed)
    assert AuditEvent.objects.filter(action="api_key.create", object_id=str(key.pk)).exists()
    revoked = admin_client.post(f"/api/gateway/keys/{key.pk}/revoke").json()
    assert revoked["active"] is False
    assert AuditEvent.objects.filter(action="api_key.revoke", object_id=str(key.pk)).exists()


def test_bad_key_settings_are_refused_naming_the_field(admin_client: Client) -> None:
    response = admin_client.post("/api/gateway/keys", {"name": "x", "allowed_lanes": ["nope"], "rpm_limit": 0,
                                                       "default_route": "ghost"}, content_type="application/json")
    assert response.status_code == 422
    fields = {error["loc"][-1] for error in response.json()["detail"]}
    assert fields == {"allowed_lanes", "rpm_limit", "default_route"}
    assert not ApiKey.objects.exists()


def _form_token(client: Client) -> str:
    return str(client.get("/gateway/").context["form_token"])


def test_the_page_shows_a_new_secret_once(admin_client: Client) -> None:
    page = admin_client.post("/gateway/", {"name": "docs-agent", "default_route": "auto",
                                           "form_token": _form_token(admin_client)})
    key = ApiKey.objects.get(name="docs-agent")
    assert page.status_code == 200
    secret = page.context["created"].secret
    assert secret in page.content.decode() and key.prefix in page.content.decode()
    again = admin_client.get("/gateway/").content.decode()
    assert secret not in again and key.prefix in again


def test_reloading_the_page_that_showed_a_secret_creates_no_second_key(admin_client: Client) -> None:
    form = {"name": "docs-agent", "default_route": "auto", "form_token": _form_token(admin_client)}
    first = admin_client.post("/gateway/", form)
    assert first.status_code == 200 and first.context["created"] is not None
    again = admin_client.post("/gateway/", form, follow=True)  # the browser's "resend the form?"
    assert ApiKey.objects.filter(name="docs-agent").count() == 1
    assert again.redirect_chain == [("/gateway/", 302)]
    body = again.content.decode()
    assert "no second key was created" in body and first.context["created"].secret not in body


def test_a_refused_key_form_keeps_its_token_usable(admin_client: Client) -> None:
    token = _form_token(admin_client)
    refused = admin_client.post("/gateway/", {"name": "", "default_route": "auto", "form_token": token})
    assert refused.status_code == 200 and "name" in refused.context["form"].errors
    created = admin_client.post("/gateway/", {"name": "docs-agent", "default_route": "auto",
                                              "form_token": refused.context["form_token"]})
    assert created.context["created"] is not None and ApiKey.objects.filter(name="docs-agent").count() == 1


def test_the_new_key_form_is_styled_like_the_other_forms(admin_client: Client) -> None:
    html = admin_client.get("/gateway/").content.decode()
    assert 'class="form-control form-control-sm"' in html and 'class="form-select form-select-sm"' in html
    assert 'class="form-check-input"' in html


def test_the_requests_page_filters_by_lane_and_status(admin_client: Client) -> None:
    RequestLog.objects.create(request_id="req-ok", endpoint="chat.completions", lane="qwen", status=200, latency_ms=5)
    RequestLog.objects.create(request_id="req-bad", endpoint="chat.completions", lane="deepseek", status=502,
                              error_code="upstream_error", latency_ms=9)
    errors = admin_client.get("/gateway/requests/?status=error").content.decode()
    assert "req-bad" in errors and "req-ok" not in errors
    qwen = admin_client.get("/gateway/requests/?lane=qwen").content.decode()
    assert "req-ok" in qwen and "req-bad" not in qwen
    api = admin_client.get("/api/gateway/requests?lane=deepseek").json()
    assert [row["request_id"] for row in api] == ["req-bad"]
    totals = {row["name"]: row for row in admin_client.get("/api/gateway/totals/lane").json()}
    assert totals["deepseek"]["errors"] == 1 and totals["qwen"]["requests"] == 1


def test_the_mirror_page_shows_samples_and_their_divergence(admin_client: Client) -> None:
    from gateway.models import MirrorSample

    MirrorSample.objects.create(request_id="req-mirrored", lane="qwen", external_model="gpt-5.5", local_latency_ms=420,
                                external_latency_ms=900, local_chars=120, external_chars=150, divergence=0.375)
    page = admin_client.get("/gateway/mirror/").content.decode()
    assert "req-mirrored" in page and "gpt-5.5" in page and "0.375" in page
