"""Personal access tokens on /api/: hashed, shown once, expiring, revocable, acting with their
owner's role at each request; sessions keep their CSRF check."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from django.utils import timezone

from core.models import AuditEvent, PersonalAccessToken
from core.roles import Role
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db


def bearer(secret: str) -> Client:
    """A client with no session that enforces CSRF, as a script is."""
    return Client(enforce_csrf_checks=True, headers={"authorization": f"Bearer {secret}"})


def make_token(client: Client, name: str = "ci", **fields: object) -> dict[str, object]:
    answer = client.post("/api/tokens", {"name": name, **fields}, content_type="application/json")
    assert answer.status_code == 201, answer.content
    return answer.json()  # type: ignore[no-any-return]


def test_a_token_is_shown_once_stored_hashed_and_works_on_the_api_without_csrf(admin_client: Client) -> None:
    created = make_token(admin_client, expires_in_days=7)
    secret = str(created["secret"])
    token = PersonalAccessToken.objects.get(pk=created["id"])
    assert token.secret_hash == hashlib.sha256(secret.encode()).hexdigest() and secret.startswith(token.prefix)
    assert timedelta(days=6) < token.expires_at - timezone.now() <= timedelta(days=7)
    listed = admin_client.get("/api/tokens").json()
    assert [t["name"] for t in listed] == ["ci"] and secret not in str(listed)
    event = AuditEvent.objects.get(action="access_token.create")
    assert secret not in str(event.diff) and token.secret_hash not in str(event.diff)
    script = bearer(secret)
    assert script.get("/api/me").json()["username"] == "ada-admin"
    assert script.get("/api/gateway/keys").status_code == 200  # the admin's role
    made = script.post("/api/gateway/teams", {"name": "from-ci"}, content_type="application/json")
    assert made.status_code == 201, made.content  # no CSRF token: none needed without a cookie
    assert AuditEvent.objects.get(action="team.create").actor_name == "ada-admin"
    assert PersonalAccessToken.objects.get(pk=token.pk).last_used_at is not None


def test_a_revoked_or_expired_or_unknown_token_is_401(admin_client: Client, admin_user: User) -> None:
    revoked = make_token(admin_client, "revoked")
    expired = make_token(admin_client, "expired")
    assert bearer(str(revoked["secret"])).get("/api/me").status_code == 200
    assert admin_client.post(f"/api/tokens/{revoked['id']}/revoke").json()["revoked_at"]
    assert AuditEvent.objects.filter(action="access_token.revoke").count() == 1
    PersonalAccessToken.objects.filter(pk=expired["id"]).update(expires_at=timezone.now() - timedelta(seconds=1))
    for secret in (revoked["secret"], expired["secret"], "pat-spark-not-a-token", "sk-spark-a-gateway-key", ""):
        answer = bearer(str(secret)).get("/api/me")
        assert answer.status_code == 401, secret
        assert "Bearer" in answer.json()["detail"]


def test_a_token_carries_its_owners_role_as_it_is_now(admin_client: Client, admin_user: User) -> None:
    secret = str(make_token(admin_client)["secret"])
    admin_user.groups.set([Group.objects.get(name=Role.VIEWER.value)])
    script = bearer(secret)
    assert script.get("/api/me").status_code == 200
    assert script.get("/api/gateway/keys").status_code == 403  # demoted: a viewer now
    User.objects.filter(pk=admin_user.pk).update(is_active=False)
    assert script.get("/api/me").status_code == 401


def test_tokens_are_denied_to_outsiders_and_others_tokens_to_non_admins(
        role_clients: dict[str, Client], viewer_user: User) -> None:
    assert role_clients["anonymous"].get("/api/tokens").status_code == 401
    assert role_clients["anonymous"].post("/api/tokens", {"name": "x"}, content_type="application/json").status_code == 401
    outsider = role_clients["outsider"]
    assert outsider.get("/api/tokens").status_code == 403
    assert outsider.post("/api/tokens", {"name": "x"}, content_type="application/json").status_code == 403
    theirs = make_token(role_clients["admin"], "admins")
    lead = role_clients["lead"]
    assert lead.post(f"/api/tokens/{theirs['id']}/revoke").status_code == 403
    assert PersonalAccessToken.objects.get(pk=theirs["id"]).revoked_at is None
    viewers = make_token(role_clients["viewer"], "viewers")
    assert [t["name"] for t in role_clients["viewer"].get("/api/tokens").json()] == ["viewers"]
    assert bearer(str(viewers["secret"])).post("/api/gateway/teams", {"name": "x"},
                                               content_type="application/json").status_code == 403
    assert role_clients["admin"].post(f"/api/tokens/{viewers['id']}/revoke").status_code == 200  # admins may
    assert role_clients["admin"].post("/api/tokens/424242/revoke").status_code == 404


def test_a_session_still_needs_its_csrf_token(viewer_user: User) -> None:
    browser = Client(enforce_csrf_checks=True)
    assert browser.login(username=viewer_user.username, password=PASSWORD)
    answer = browser.post("/api/tokens", {"name": "x"}, content_type="application/json")
    assert answer.status_code == 403
    assert not PersonalAccessToken.objects.exists()


def test_bad_token_input_is_422_naming_the_field(viewer_client: Client) -> None:
    for payload, field in [({"name": ""}, "name"), ({"name": "a\x00b"}, "name"), ({"name": "x" * 101}, "name"),
                           ({"name": "x", "expires_in_days": 0}, "expires_in_days"),
                           ({"name": "x", "expires_in_days": 367}, "expires_in_days"),
                           ({"name": "x", "scope": "all"}, "scope")]:
        answer = viewer_client.post("/api/tokens", payload, content_type="application/json")
        assert answer.status_code == 422, (payload, answer.content)
        assert field in str(answer.json()["detail"])
    assert not PersonalAccessToken.objects.exists()
