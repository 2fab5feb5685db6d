"""The evaluation page's socket: a viewer gets the version's evaluation as it is now on
connect, then each step; an account without a role, or no session, is refused."""

from __future__ import annotations

from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client

from core.consumers import CLOSE_FORBIDDEN, CLOSE_UNAUTHENTICATED
from portal.asgi import application
from routing.evaluation_runs import router_evaluation_request
from routing.models import RouterVersion
from tests.conftest import consumer_ended

pytestmark = pytest.mark.django_db(transaction=True)


async def evaluation_socket(user: Any | None, number: int) -> WebsocketCommunicator:
    headers = [(b"origin", b"http://localhost"), (b"host", b"localhost")]
    if user is not None:
        def login() -> str:
            client = Client()
            client.force_login(user)
            return client.cookies["sessionid"].value

        headers.append((b"cookie", f"sessionid={await database_sync_to_async(login)()}".encode()))
    return WebsocketCommunicator(application, f"/ws/routing/versions/{number}/evaluation/", headers=headers)


async def test_a_viewer_gets_the_current_evaluation_then_each_change(viewer_user, lead_user, monkeypatch):
    monkeypatch.setattr("routing.evaluation_runs.dispatch_evaluation", lambda pk: None)  # no worker: it stays queued
    version = await RouterVersion.objects.acreate(number=3)
    ws = await evaluation_socket(viewer_user, 3)
    assert (await ws.connect())[0]
    first = await ws.receive_json_from(timeout=10)
    assert first["snapshot"] is True and first["event"] == "evaluation.progress"
    assert first["data"]["state"] == "none"
    evaluation, _ = await database_sync_to_async(router_evaluation_request)(actor=lead_user, version=version)
    message = await ws.receive_json_from(timeout=10)
    assert message["data"] | {"finished_at": None} == {
        "id": evaluation.pk, "version": 3, "state": "queued", "stage": "queued: waiting for a worker",
        "done": 0, "total": 0, "error": "", "finished_at": None}
    await ws.disconnect()
    again = await evaluation_socket(viewer_user, 3)  # a reconnect reads it as it is now
    assert (await again.connect())[0]
    assert (await again.receive_json_from(timeout=10))["data"]["id"] == evaluation.pk
    await again.disconnect()


async def test_a_user_without_a_role_or_a_session_is_refused(outsider_user):
    ws = await evaluation_socket(outsider_user, 1)
    assert await ws.connect(timeout=30) == (False, CLOSE_FORBIDDEN)
    assert await consumer_ended(ws)
    ws = await evaluation_socket(None, 1)
    assert await ws.connect(timeout=30) == (False, CLOSE_UNAUTHENTICATED)
    assert await consumer_ended(ws)
