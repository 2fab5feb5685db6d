"""The users page: admins create, invite, give roles and deactivate, audited; every other
role is refused; an account without a role gets one page that says so."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError

from core.models import AuditEvent
from core.roles import Role, user_role
from core.services import user_create, user_set_active, user_set_role
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("role", ["lead", "viewer", "outsider"])
def test_only_admins_may_open_or_post_the_users_page(role_clients, role, viewer_user):
    client = role_clients[role]
    assert client.get("/users/").status_code == 403
    assert client.post("/users/", {"username": "mallory", "role": "admin"}).status_code == 403
    assert client.post(f"/users/{viewer_user.pk}/role/", {"role": "admin"}).status_code == 403
    assert client.post(f"/users/{viewer_user.pk}/deactivate/").status_code == 403
    assert not User.objects.filter(username="mallory").exists()
    assert user_role(User.objects.get(pk=viewer_user.pk)) is Role.VIEWER


def test_anonymous_is_sent_to_login_from_the_users_page(client):
    response = client.get("/users/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


def test_admin_creates_a_user_with_a_password_and_a_role(admin_client, admin_user):
    response = admin_client.post("/users/", {"username": "lee2", "email": "lee2@example.org", "role": "team lead",
                                             "password": PASSWORD})
    assert response.status_code == 302
    user = User.objects.get(username="lee2")
    assert user_role(user) is Role.TEAM_LEAD and user.check_password(PASSWORD) and not user.is_staff
    event = AuditEvent.objects.get(action="user.create")
    assert event.actor == admin_user
    assert event.diff["role"] == [None, "team lead"]
    assert PASSWORD not in str(event.diff)


def test_without_a_password_the_admin_gets_a_one_time_invite_link(admin_client, client):
    response = admin_client.post("/users/", {"username": "newbie", "role": "viewer"})
    assert response.status_code == 200
    link = response.context["invite"]["url"]
    assert "/accounts/set-password/" in link
    user = User.objects.get(username="newbie")
    assert not user.has_usable_password()
    path = link.split("testserver", 1)[1]
    form_page = client.get(path)
    assert form_page.status_code == 200 and b"Set your password" in form_page.content
    assert form_page["Referrer-Policy"] == "no-referrer"
    done = client.post(path, {"new_password1": "a-long-new-passphrase", "new_password2": "a-long-new-passphrase"})
    assert done.status_code == 302
    user.refresh_from_db()
    assert user.check_password("a-long-new-passphrase")
    assert AuditEvent.objects.filter(action="user.password_set", actor=user).exists()
    # used once: the same link is dead now, for a GET and a POST
    assert b"no longer works" in client.get(path, follow=True).content
    again = client.post(path, {"new_password1": "another-passphrase-1", "new_password2": "another-passphrase-1"})
    assert b"no longer works" in again.content
    user.refresh_from_db()
    assert user.check_password("a-long-new-passphrase")


def test_opening_the_invite_link_stores_nothing_in_the_session_table(admin_client, client):
    """D8: Django's own confirm view puts the token in the session; a session row must
    never let its reader set the password."""
    from django.contrib.sessions.models import Session

    link = admin_client.post("/users/", {"username": "newbie", "role": "viewer"}).context["invite"]["url"]
    path = link.split("testserver", 1)[1]
    token = path.rstrip("/").rsplit("/", 1)[1]
    assert client.get(path).status_code == 200
    bad = client.post(path, {"new_password1": "short", "new_password2": "other"})  # a refused POST too
    assert bad.status_code == 200 and b"Set your password" in bad.content
    rows = [(row.session_data, str(row.get_decoded())) for row in Session.objects.all()]
    assert rows and not any(token in data or token in decoded for data, decoded in rows)
    assert not User.objects.get(username="newbie").has_usable_password()


def test_a_bad_user_name_or_duplicate_is_refused_naming_the_field(admin_client, viewer_user):
    response = admin_client.post("/users/", {"username": "has space!", "role": "viewer"})
    assert response.status_code == 200
    assert "username" in response.context["form"].errors
    response = admin_client.post("/users/", {"username": viewer_user.username.upper(), "role": "viewer"})
    assert "already exists" in str(response.context["form"].errors["username"])
    response = admin_client.post("/users/", {"username": "ok-name", "role": "viewer", "password": "123"})
    assert "password" in response.context["form"].errors


def test_admin_changes_a_role_and_deactivates_audited(admin_client, viewer_user):
    assert admin_client.post(f"/users/{viewer_user.pk}/role/", {"role": "admin"}).status_code == 302
    viewer_user.refresh_from_db()
    assert user_role(viewer_user) is Role.ADMIN and not viewer_user.is_staff  # Django admin: superusers only
    assert admin_client.post(f"/users/{viewer_user.pk}/deactivate/").status_code == 302
    viewer_user.refresh_from_db()
    assert not viewer_user.is_active
    actions = list(AuditEvent.objects.filter(object_type="auth.user").values_list("action", flat=True))
    assert actions == ["user.deactivate", "user.role"]


def test_a_deactivated_user_is_signed_out_at_the_next_request(admin_user, viewer_client, viewer_user):
    assert viewer_client.get("/").status_code == 200
    user_set_active(actor=admin_user, user=viewer_user, active=False)
    assert viewer_client.get("/").status_code == 302


def test_an_admin_cannot_remove_their_own_admin_role_or_the_last_admin(admin_user, viewer_user):
    with pytest.raises(ValidationError, match="your own"):
        user_set_role(actor=admin_user, user=admin_user, role=Role.VIEWER)
    with pytest.raises(ValidationError, match="last active admin"):
        user_set_active(actor=viewer_user, user=admin_user, active=False)
    assert user_role(admin_user) is Role.ADMIN


def test_a_user_without_a_role_sees_one_page_that_says_so(outsider_client):
    for path in ("/", "/lanes/", "/jobs/"):
        response = outsider_client.get(path)
        assert response.status_code == 403
        assert b"Your account has no role yet" in response.content
        assert b'href="/lanes/"' not in response.content  # no navigation of 403s


@pytest.mark.parametrize(("role", "visible", "hidden"), [
    ("viewer", ["/lanes/", "/jobs/", "/api/docs"], ["/gateway/", "/users/"]),
    ("lead", ["/lanes/", "/routing/"], ["/gateway/", "/users/"]),
    ("admin", ["/lanes/", "/gateway/", "/users/"], []),
])
def test_the_navigation_shows_each_role_what_it_may_open(role_clients, role, visible, hidden):
    html = role_clients[role].get("/").content.decode()
    for path in visible:
        assert f'href="{path}"' in html
    for path in hidden:
        assert f'href="{path}"' not in html


def test_user_create_service_sets_no_role_when_asked(admin_user):
    created = user_create(actor=admin_user, username="norole", role=None, password=PASSWORD)
    assert user_role(created.user) is None and created.invite_path == ""


def test_a_new_invite_link_only_for_users_who_have_not_set_a_password(admin_client, viewer_user):
    admin_client.post("/users/", {"username": "later", "role": "viewer"})
    later = User.objects.get(username="later")
    response = admin_client.post(f"/users/{later.pk}/invite/", follow=True)
    assert "/accounts/set-password/" in response.content.decode()
    assert AuditEvent.objects.filter(action="user.invite", object_id=str(later.pk)).count() == 1
    refused = admin_client.post(f"/users/{viewer_user.pk}/invite/", follow=True).content.decode()
    assert "has already set a password" in refused and "/accounts/set-password/" not in refused


def test_an_unknown_user_action_or_role_is_refused(admin_client, viewer_user):
    assert admin_client.post(f"/users/{viewer_user.pk}/promote/").status_code == 404
    response = admin_client.post(f"/users/{viewer_user.pk}/role/", {"role": "emperor"}, follow=True)
    assert "Choose admin, team lead, viewer or no role." in response.content.decode()
    assert user_role(User.objects.get(pk=viewer_user.pk)) is Role.VIEWER
    assert admin_client.post("/users/999999/role/", {"role": "viewer"}).status_code == 404
