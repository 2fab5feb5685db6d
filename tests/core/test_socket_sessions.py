"""Every socket closes (4403) when its session stops authenticating — a logout, a password
change, a deactivation, a lost role — within the change, not at the page's next reload; and
one that keeps the right stays open. One case per socket and change."""

from __future__ import annotations

import asyncio

import pytest
from channels.db import database_sync_to_async
from django.contrib.auth.forms import SetPasswordForm
from django.contrib.auth.models import User
from django.test import Client

from core.broadcast import abroadcast, user_group
from core.consumers import CLOSE_FORBIDDEN
from core.services import password_set_by_invite, user_set_active, user_set_role
from jobs.models import Job, JobKind
from tests.jobs.test_consumer import in_fresh_loop, socket

pytestmark = pytest.mark.django_db(transaction=True)

SOCKETS = ["/ws/header/", "/ws/dashboard/", "/ws/jobs/{job}/"]
CHANGES = ["logout", "password", "deactivate", "no role"]


def signed_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def change_account(change: str, *, client: Client, user: User, admin: User) -> None:
    fresh = User.objects.get(pk=user.pk)
    if change == "logout":
        assert client.post("/accounts/logout/").status_code in (200, 302)
    elif change == "password":
        form = SetPasswordForm(fresh, {"new_password1": "a-new-long-passphrase-42", "new_password2": "a-new-long-passphrase-42"})
        assert form.is_valid(), form.errors
        password_set_by_invite(user=fresh, form=form)
    elif change == "deactivate":
        user_set_active(actor=admin, user=fresh, active=False)
    else:
        user_set_role(actor=admin, user=fresh, role=None)


@pytest.mark.parametrize("change", CHANGES)
@pytest.mark.parametrize("path", SOCKETS)
def test_an_open_socket_closes_when_its_session_stops_authenticating(admin_user, viewer_user, path, change):
    job = Job.objects.create(kind=JobKind.STATUS, params={"nodes": []})
    client = signed_in(viewer_user)

    async def scenario() -> int | None:
        ws = socket(path.format(job=job.pk), client.cookies["sessionid"].value)
        connected, _ = await ws.connect(timeout=30)
        assert connected
        await database_sync_to_async(change_account)(change, client=client, user=viewer_user, admin=admin_user)
        while True:  # past the socket's first snapshot
            message = await ws.receive_output(timeout=30)
            if message["type"] == "websocket.close":
                await asyncio.wait_for(asyncio.shield(ws.future), timeout=5)  # and the consumer stopped (left its groups)
                return message.get("code")

    assert in_fresh_loop(scenario)() == CLOSE_FORBIDDEN


@pytest.mark.parametrize("path", SOCKETS)
def test_another_accounts_logout_leaves_a_socket_open(admin_user, viewer_user, path):
    """A logout closes that session's sockets only: another account's change is checked and
    passed (the next broadcast still arrives)."""
    job = Job.objects.create(kind=JobKind.STATUS, params={"nodes": []})
    viewer, other = signed_in(viewer_user), signed_in(viewer_user)

    async def scenario() -> bool:
        ws = socket(path.format(job=job.pk), viewer.cookies["sessionid"].value)
        connected, _ = await ws.connect(timeout=30)
        assert connected
        # The same account logs out in another browser: this session still authenticates.
        await database_sync_to_async(lambda: other.post("/accounts/logout/"))()
        await abroadcast(user_group(viewer_user.pk), "probe.after", {"n": 1})
        while True:
            message = await ws.receive_output(timeout=30)
            if message["type"] == "websocket.close":
                return False
            if "probe.after" in message.get("text", ""):
                await ws.disconnect()
                return True

    assert in_fresh_loop(scenario)() is True
