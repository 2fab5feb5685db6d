"""Every page's header follows the open-alert count over /ws/header/: the count on connect,
then each change; a user without a role, or signed out, is refused."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client, override_settings

from core.consumers import CLOSE_FORBIDDEN, CLOSE_UNAUTHENTICATED
from metrics.alerts import alert_acknowledge, alerts_evaluate
from metrics.models import Alert
from metrics.rules import TargetView
from portal.asgi import application
from tests.conftest import consumer_ended

pytestmark = pytest.mark.django_db(transaction=True)
T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


async def header_socket(user: Any | None) -> WebsocketCommunicator:
    headers = [(b"origin", b"http://localhost"), (b"host", b"localhost")]
    if user is not None:
        def login() -> str:
            client = Client()
            client.force_login(user)
            return client.cookies["sessionid"].value

        headers.append((b"cookie", f"sessionid={await database_sync_to_async(login)()}".encode()))
    return WebsocketCommunicator(application, "/ws/header/", headers=headers)


async def receive(ws) -> dict:
    """The next message's event and data (its stamp and snapshot flag aside: tested in
    tests/portal/test_dashboard_socket.py)."""
    message = await ws.receive_json_from(timeout=10)
    assert isinstance(message.get("at"), float)
    return {"event": message["event"], "data": message["data"]}


def lane(kv_pct: float) -> TargetView:
    return TargetView(kind="lane", name="qwen", figures={"kv_pct": kv_pct}, consecutive_failures=0,
                      lane_state="serving", lane_desired="serving")


@override_settings(METRICS_ALERT_KV_PCT=90, METRICS_ALERT_KV_FOR_S=0)
async def test_a_viewer_gets_the_open_alert_count_then_each_change(viewer_user, admin_user):
    evaluate = database_sync_to_async(alerts_evaluate)
    await evaluate(targets=[lane(95)], now=T0)  # open before the page connects
    ws = await header_socket(viewer_user)
    connected, _ = await ws.connect(timeout=30)
    assert connected
    assert await receive(ws) == {"event": "alerts.count", "data": {"open": 1}}

    await evaluate(targets=[lane(40)], now=T0 + timedelta(seconds=10))  # resolves
    assert await receive(ws) == {"event": "alerts.count", "data": {"open": 0}}
    await evaluate(targets=[lane(99)], now=T0 + timedelta(seconds=20))  # opens again
    assert await receive(ws) == {"event": "alerts.count", "data": {"open": 1}}
    alert = await Alert.objects.aget(state="open")
    await database_sync_to_async(alert_acknowledge)(alert=alert, actor=admin_user)  # still open: same count
    assert await receive(ws) == {"event": "alerts.count", "data": {"open": 1}}
    await ws.disconnect()


@override_settings(METRICS_ALERT_KV_PCT=90, METRICS_ALERT_KV_FOR_S=0)
async def test_a_tick_that_changes_many_alerts_sends_the_header_one_count(viewer_user):
    ws = await header_socket(viewer_user)
    assert (await ws.connect(timeout=30))[0]
    assert await receive(ws) == {"event": "alerts.count", "data": {"open": 0}}
    evaluate = database_sync_to_async(alerts_evaluate)
    lanes = [TargetView(kind="lane", name=f"lane{i}", figures={"kv_pct": 95}, consecutive_failures=0,
                        lane_state="serving", lane_desired="serving") for i in range(3)]
    await evaluate(targets=lanes, now=T0)  # three open in one tick: one message, not three
    assert await receive(ws) == {"event": "alerts.count", "data": {"open": 3}}
    await evaluate(targets=lanes[:2], now=T0 + timedelta(seconds=5))  # the next message is the next change
    assert await receive(ws) == {"event": "alerts.count", "data": {"open": 2}}
    await ws.disconnect()


async def test_a_user_without_a_role_is_refused(outsider_user):
    ws = await header_socket(outsider_user)
    connected, code = await ws.connect(timeout=30)
    assert (connected, code) == (False, CLOSE_FORBIDDEN)
    assert await consumer_ended(ws)


async def test_a_signed_out_page_is_refused():
    ws = await header_socket(None)
    connected, code = await ws.connect(timeout=30)
    assert (connected, code) == (False, CLOSE_UNAUTHENTICATED)
    assert await consumer_ended(ws)

