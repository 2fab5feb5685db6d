"""Gateway pages and management API: admins only; secrets shown once and stored hashed."""

from __future__ import annotations

import hashlib

import pytest
from django.test import Client

from core.models import AuditEvent
from gateway.models import ApiKey, RequestLog
from tests.gateway.conftest import make_lane

# The request log page is metrics' (/monitor/requests/): the gateway's old one redirects there.
PAGES = ["/gateway/", "/monitor/requests/", "/gateway/mirror/"]
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


def test_the_request_log_page_filters_by_lane_and_status(admin_client: Client) -> None:
    """The one request log page and the API share one filter: "error" is 400 and above,
    "ok" below, a number that status."""
    RequestLog.objects.create(request_id="req-ok", endpoint="chat.completions", lane="qwen", status=200, latency_ms=5)
    RequestLog.objects.create(request_id="req-bad", endpoint="chat.completions", lane="deepseek", status=502,
                              error_code="upstream_error", latency_ms=9)
    RequestLog.objects.create(request_id="req-limited", endpoint="chat.completions", lane="qwen", status=429,
                              error_code="rate_limited", latency_ms=1)
    errors = admin_client.get("/monitor/requests/?status=error").content.decode()
    assert "req-bad" in errors and "req-limited" in errors and "req-ok" not in errors
    ok = admin_client.get("/monitor/requests/?status=ok").content.decode()
    assert "req-ok" in ok and "req-bad" not in ok and "req-limited" not in ok
    qwen_errors = admin_client.get("/monitor/requests/?lane=qwen&status=error").content.decode()
    assert "req-limited" in qwen_errors and "req-ok" not in qwen_errors and "req-bad" not in qwen_errors
    api = admin_client.get("/api/gateway/requests?lane=deepseek").json()
    assert [row["request_id"] for row in api] == ["req-bad"]
    api_errors = admin_client.get("/api/gateway/requests?status=error").json()
    assert [row["request_id"] for row in api_errors] == ["req-limited", "req-bad"]  # newest first
    assert [row["request_id"] for row in admin_client.get("/api/gateway/requests?status=429").json()] == ["req-limited"]


def test_the_request_log_api_filters_by_route_and_time_range(admin_client: Client) -> None:
    """The filters the request log page had and the API lacked: route, since, until."""
    from datetime import UTC, datetime

    for request_id, route, hour in (("req-early", "router", 9), ("req-mid", "explicit", 10), ("req-late", "router", 11)):
        RequestLog.objects.create(request_id=request_id, endpoint="chat.completions", lane="qwen", status=200,
                                  route_reason=route, latency_ms=5, created_at=datetime(2026, 3, 2, hour, tzinfo=UTC))
    routed = admin_client.get("/api/gateway/requests?route=router").json()
    assert [row["request_id"] for row in routed] == ["req-late", "req-early"]
    window = admin_client.get("/api/gateway/requests?since=2026-03-02T10:00:00Z&until=2026-03-02T11:00:00Z").json()
    assert [row["request_id"] for row in window] == ["req-mid"]
    no_offset = admin_client.get("/api/gateway/requests?since=2026-03-02T10:30:00").json()  # UTC
    assert [row["request_id"] for row in no_offset] == ["req-late"]
    empty = admin_client.get("/api/gateway/requests?since=2026-03-02T11:00:00Z&until=2026-03-02T10:00:00Z")
    assert empty.status_code == 422 and [e["loc"][-1] for e in empty.json()["detail"]] == ["until"]


def test_the_old_requests_page_redirects_to_the_request_log_keeping_its_filters(
    role_clients: dict[str, Client], db: None
) -> None:
    response = role_clients["admin"].get("/gateway/requests/?key=3&lane=qwen&status=error")
    assert response.status_code == 301
    assert response["Location"] == "/monitor/requests/?key=3&lane=qwen&status=error"
    assert role_clients["admin"].get("/gateway/requests/")["Location"] == "/monitor/requests/"
    for who in ("lead", "viewer", "outsider"):
        assert role_clients[who].get("/gateway/requests/").status_code == 403, who
    assert role_clients["anonymous"].get("/gateway/requests/").status_code == 302
    followed = role_clients["admin"].get("/gateway/requests/?status=error", follow=True)
    assert followed.redirect_chain == [("/monitor/requests/?status=error", 301)] and followed.status_code == 200


def test_the_usage_page_shows_the_last_24_hours_per_key_and_lane(admin_client: Client) -> None:
    """The totals come from metrics' hourly rollup (the metrics_tags usage_totals tag); the
    gateway's page links to them (the gateway does not reach metrics, not even in a template)."""
    from django.utils import timezone

    from metrics.storage import usage_rollup

    key = ApiKey.objects.create(name="agents", prefix="sk-spark-ab", secret_hash="y" * 64)
    for status in (200, 200, 502):
        RequestLog.objects.create(request_id=f"req-{status}", key=key, endpoint="chat.completions", lane="qwen",
                                  status=status, prompt_tokens=10, completion_tokens=20, latency_ms=100)
    usage_rollup(now=timezone.now())
    assert 'href="/monitor/usage/"' in admin_client.get("/gateway/").content.decode()
    page = admin_client.get("/monitor/usage/").content.decode()
    by_key = page[page.index('id="totals-by-key"'):page.index("</table>", page.index('id="totals-by-key"'))]
    assert "<td>agents</td><td>3</td><td>1</td><td>30 / 60</td>" in by_key.replace(
        '<td class="text-break" style="max-width: 12rem">', "<td>")
    by_lane = page[page.index('id="totals-by-lane"'):]
    assert ">qwen</td><td>3</td><td>1</td>" in by_lane
    totals = {row["name"]: row for row in admin_client.get("/api/gateway/totals/lane").json()}
    assert totals["qwen"]["errors"] == 1 and totals["qwen"]["requests"] == 3 and totals["qwen"]["prompt_tokens"] == 30


def test_the_mirror_page_shows_samples_and_their_divergence(admin_client: Client) -> None:
    from gateway.models import MirrorSample

    MirrorSample.objects.create(request_id="req-mirrored", lane="qwen", external_model="gpt-5.5", local_latency_ms=420,
                                external_latency_ms=900, local_chars=120, external_chars=150, divergence=0.375)
    page = admin_client.get("/gateway/mirror/").content.decode()
    assert "req-mirrored" in page and "gpt-5.5" in page and "0.375" in page


def test_an_admin_sets_a_keys_share_of_a_full_lane(role_clients: dict[str, Client], db: None) -> None:
    key = ApiKey.objects.create(name="k", prefix="sk-spark-abc", secret_hash="1" * 64)
    url = f"/api/gateway/keys/{key.pk}/share"
    for who in ("lead", "viewer", "outsider"):
        assert role_clients[who].post(url, {"fair_weight": 9}, content_type="application/json").status_code == 403
    assert role_clients["anonymous"].post(url, {"fair_weight": 9}, content_type="application/json").status_code == 401
    answer = role_clients["admin"].post(url, {"fair_weight": 3, "priority": "batch"}, content_type="application/json")
    assert answer.status_code == 200, answer.content
    assert (answer.json()["fair_weight"], answer.json()["priority"]) == (3, "batch")
    assert AuditEvent.objects.filter(action="api_key.share").exists()
    for bad, field in (({"priority": "urgent"}, "priority"), ({"fair_weight": 0}, "fair_weight")):
        refused = role_clients["admin"].post(url, bad, content_type="application/json")
        assert refused.status_code == 422 and field in refused.content.decode(), refused.content
    key.refresh_from_db()
    assert (key.fair_weight, key.priority) == (3, "batch")  # a refused change loses nothing saved
    created = role_clients["admin"].post("/api/gateway/keys", {"name": "nightly", "priority": "batch", "fair_weight": 2},
                                         content_type="application/json")
    assert created.status_code == 201 and (created.json()["priority"], created.json()["fair_weight"]) == ("batch", 2)
