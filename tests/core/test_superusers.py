"""D1: the role is the whole truth of what an account can do. A superuser holds the admin
role (createsuperuser gives it; migration 0003 gave it to those without one) and may also
open Django admin; demoted on /users/, it is refused everywhere its new role refuses:
pages, the API, sockets and Django admin."""

from __future__ import annotations

import importlib

import pytest
from channels.db import database_sync_to_async
from django.apps import apps
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.test import Client

from core.broadcast import HEADER_GROUP, abroadcast
from core.consumers import CLOSE_FORBIDDEN
from core.models import AuditEvent
from core.roles import Capability, Role, user_can, user_role
from core.services import user_set_active, user_set_role
from gateway.models import ApiKey
from tests.jobs.test_consumer import cookie_for, in_fresh_loop, socket

pytestmark = pytest.mark.django_db(transaction=True)


def create_superuser(username: str = "root") -> User:
    call_command("createsuperuser", "--noinput", username=username, email=f"{username}@example.org",
                 verbosity=0)
    return User.objects.get(username=username)


def test_createsuperuser_gives_a_working_admin_audited_as_system():
    root = create_superuser()
    assert user_role(root) is Role.ADMIN and root.is_superuser and root.is_staff
    assert all(user_can(root, capability) for capability in Capability)
    event = AuditEvent.objects.get(action="user.role", object_id=str(root.pk))
    assert event.actor is None and event.actor_name == "system" and event.diff["role"] == [None, "admin"]


@pytest.mark.parametrize(("choice", "refused_socket"), [("viewer", False), ("", True)])
def test_a_demoted_superuser_is_refused_everywhere_its_role_refuses(admin_client, choice, refused_socket):
    root = create_superuser()
    client = Client()
    client.force_login(root)
    assert client.get("/users/").status_code == 200 and client.get("/admin/").status_code == 200

    assert admin_client.post(f"/users/{root.pk}/role/", {"role": choice}).status_code == 302
    root.refresh_from_db()
    assert not root.is_superuser and not root.is_staff
    event = AuditEvent.objects.filter(action="user.role", object_id=str(root.pk)).first()
    assert event is not None and event.diff["is_superuser"] == [True, False]

    assert client.get("/users/").status_code == 403
    assert client.post("/users/", {"username": "mallory", "role": "admin"}).status_code == 403
    assert client.get("/admin/").status_code == 302  # Django admin's login: not for this account
    assert client.get("/admin/auth/user/").status_code == 302
    assert client.post("/api/gateway/keys", {"name": "x"}, content_type="application/json").status_code == 403
    assert not ApiKey.objects.exists() and not User.objects.filter(username="mallory").exists()
    me = client.get("/api/me")
    if choice:
        assert me.json()["capabilities"] == ["view_portal"] and me.json()["roles"] == ["viewer"]
    else:
        assert me.status_code == 403

    async def open_socket() -> int | None:
        ws = socket("/ws/header/", await cookie_for(root))
        connected, code = await ws.connect(timeout=30)
        await ws.disconnect()
        return None if connected else code

    code = in_fresh_loop(open_socket)()
    assert code == (CLOSE_FORBIDDEN if refused_socket else None)


def test_a_superuser_flag_set_by_hand_grants_nothing_and_the_users_page_shows_it(admin_client, viewer_user):
    User.objects.filter(pk=viewer_user.pk).update(is_superuser=True, is_staff=True)
    flagged = User.objects.get(pk=viewer_user.pk)
    assert not user_can(flagged, Capability.OPERATE) and not user_can(flagged, Capability.EDIT_ROUTING)
    client = Client()
    client.force_login(flagged)
    assert client.get("/admin/").status_code == 302 and client.get("/users/").status_code == 403
    html = admin_client.get("/users/").content.decode()
    assert f'data-superuser="{flagged.username}"' in html


def test_django_admin_is_for_a_superuser_holding_the_admin_role_only(admin_client):
    """README: an admin-role account that is not a superuser uses the portal's pages; Django
    admin is the superuser's break-glass."""
    assert admin_client.get("/admin/").status_code == 302
    assert 'href="/admin/"' not in admin_client.get("/").content.decode()
    root = create_superuser()
    client = Client()
    client.force_login(root)
    assert client.get("/admin/").status_code == 200
    assert 'href="/admin/"' in client.get("/").content.decode()


def test_the_last_admin_guard_counts_what_the_role_says(admin_user, viewer_user):
    """A superuser flag is not an admin: with one admin and a flagged viewer, the admin is
    still the last one."""
    User.objects.filter(pk=viewer_user.pk).update(is_superuser=True)
    root = create_superuser()
    user_set_role(actor=admin_user, user=root, role=Role.VIEWER)
    with pytest.raises(ValidationError, match="last active admin"):
        user_set_role(actor=User.objects.get(pk=viewer_user.pk), user=admin_user, role=Role.VIEWER)


def test_migration_0003_gives_superusers_without_a_role_the_admin_role(viewer_user):
    bare = User.objects.create_superuser("bare", "bare@example.org", "x")  # no role, as before 0003
    User.objects.filter(pk=viewer_user.pk).update(is_superuser=True)  # has a role: kept
    migration = importlib.import_module("core.migrations.0003_superusers_hold_the_admin_role")
    migration.give_admin_role(apps, None)
    assert user_role(User.objects.get(pk=bare.pk)) is Role.ADMIN
    assert user_role(User.objects.get(pk=viewer_user.pk)) is Role.VIEWER
    assert AuditEvent.objects.filter(action="user.role", object_id=str(bare.pk), actor_name="system").exists()



@pytest.mark.parametrize("change", ["no role", "deactivate"])
def test_an_open_socket_closes_when_its_account_loses_the_right(admin_user, viewer_user, change):
    """A socket is checked when it opens; one opened before a demotion or a deactivation is
    closed at the change, not left streaming (the failure that does not announce itself)."""
    async def scenario() -> int | None:
        ws = socket("/ws/header/", await cookie_for(viewer_user))
        connected, _ = await ws.connect(timeout=30)
        assert connected

        def demote() -> None:
            if change == "no role":
                user_set_role(actor=admin_user, user=User.objects.get(pk=viewer_user.pk), role=None)
            else:
                user_set_active(actor=admin_user, user=User.objects.get(pk=viewer_user.pk), active=False)

        await database_sync_to_async(demote)()
        while True:  # past the header's first snapshots
            message = await ws.receive_output(timeout=30)
            if message["type"] == "websocket.close":
                return message.get("code")

    assert in_fresh_loop(scenario)() == CLOSE_FORBIDDEN


def test_a_socket_stays_open_when_its_account_keeps_the_right(admin_user, viewer_user):
    """After a change that keeps the right, the next broadcast still arrives (it is queued
    behind the access check on the same channel)."""
    async def scenario() -> str:
        ws = socket("/ws/header/", await cookie_for(viewer_user))
        connected, _ = await ws.connect(timeout=30)
        assert connected
        await database_sync_to_async(user_set_role)(actor=admin_user, user=viewer_user, role=Role.TEAM_LEAD)
        await abroadcast(HEADER_GROUP, "probe.after", {"n": 1})
        while True:
            message = await ws.receive_output(timeout=30)
            if message["type"] == "websocket.close":
                return "closed"
            if "probe.after" in message.get("text", ""):
                await ws.disconnect()
                return "open"

    assert in_fresh_loop(scenario)() == "open"
