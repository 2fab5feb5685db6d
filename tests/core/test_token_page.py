"""The personal access tokens page (/account/tokens/): create (the secret shown once, a
reload creates nothing), list, revoke; audited; the token works on /api until revoked."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.test import Client

from core.models import AuditEvent, PersonalAccessToken

pytestmark = pytest.mark.django_db


def form_token(page: str) -> str:
    return re.search(r'name="form_token" value="([^"]+)"', page).group(1)


def test_a_user_creates_lists_and_revokes_a_token_on_the_page(viewer_client: Client, viewer_user: User) -> None:
    page = viewer_client.get("/account/tokens/").content.decode()
    assert "No token yet." in page
    token = form_token(page)
    created = viewer_client.post("/account/tokens/", {"name": "nightly CI", "expires_in_days": 30, "form_token": token})
    assert created.status_code == 200
    secret = re.search(r"<code>(pat-spark-[^<]+)</code>", created.content.decode()).group(1)
    row = PersonalAccessToken.objects.get(user=viewer_user)
    assert row.name == "nightly CI" and secret not in row.secret_hash and row.prefix == secret[:len(row.prefix)]
    assert AuditEvent.objects.filter(action="access_token.create").count() == 1
    # The reload re-posts the spent form token: no second token, and no secret shown.
    again = viewer_client.post("/account/tokens/", {"name": "nightly CI", "expires_in_days": 30, "form_token": token})
    assert again.status_code == 302 and PersonalAccessToken.objects.count() == 1
    listing = viewer_client.get("/account/tokens/").content.decode()
    assert "nightly CI" in listing and row.prefix in listing and secret not in listing

    api = Client()
    assert api.get("/api/tokens", HTTP_AUTHORIZATION=f"Bearer {secret}").status_code == 200
    assert viewer_client.post(f"/account/tokens/{row.pk}/revoke").status_code == 302
    assert api.get("/api/tokens", HTTP_AUTHORIZATION=f"Bearer {secret}").status_code == 401
    assert AuditEvent.objects.filter(action="access_token.revoke").count() == 1
    assert "revoked" in viewer_client.get("/account/tokens/").content.decode()


def test_bad_token_input_names_the_field_and_creates_nothing(viewer_client: Client) -> None:
    for data, field in (({"name": "", "expires_in_days": 30}, "name"), ({"name": "ci", "expires_in_days": 0}, "expires_in_days"),
                        ({"name": "ci", "expires_in_days": 367}, "expires_in_days")):
        token = form_token(viewer_client.get("/account/tokens/").content.decode())
        answer = viewer_client.post("/account/tokens/", {**data, "form_token": token})
        assert answer.status_code == 400 and answer.context["form"].errors[field], data
    assert PersonalAccessToken.objects.count() == 0


def test_the_page_is_refused_without_a_role_and_others_tokens_are_not_revoked_here(
        role_clients: dict[str, Client], admin_user: User) -> None:
    assert role_clients["anonymous"].get("/account/tokens/").status_code == 302
    assert role_clients["outsider"].get("/account/tokens/").status_code == 403
    page = role_clients["admin"].get("/account/tokens/").content.decode()
    role_clients["admin"].post("/account/tokens/", {"name": "ops", "expires_in_days": 5, "form_token": form_token(page)})
    theirs = PersonalAccessToken.objects.get(user=admin_user)
    assert role_clients["viewer"].post(f"/account/tokens/{theirs.pk}/revoke").status_code == 404
    assert role_clients["outsider"].post(f"/account/tokens/{theirs.pk}/revoke").status_code == 403
    theirs.refresh_from_db()
    assert theirs.revoked_at is None
    assert ">ops<" not in role_clients["viewer"].get("/account/tokens/").content.decode()  # only your own are listed
