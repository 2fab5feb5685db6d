"""The fair queues' waits, live on the gateway and lane pages through the dashboard socket
(portal.consumers): an operator's socket gets them per key and class (on connect and with
every tick, OPERATORS_GROUP), anyone else's per class only, never a key's name; an operator
demoted to a viewer stops getting them per key at once, and the socket stays open."""

from __future__ import annotations

from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from core.broadcast import DASHBOARD_GROUP, OPERATORS_GROUP, abroadcast, announce_access_change
from core.roles import Role
from core.services import user_set_role
from gateway.fair_view import WAITS_EVENT, fair_waits_live
from gateway.models import RequestLog
from lanes.models import Lane
from metrics.services import tick_payload
from tests.gateway.conftest import create_key, make_lane
from tests.jobs.test_consumer import in_fresh_loop, socket

pytestmark = pytest.mark.django_db(transaction=True)


def log_waits(owner: User) -> None:
    _, key_id = create_key(owner, name="secret-agent")
    now = timezone.now()
    for n, (queue_ms, status, code) in enumerate(((100.0, 200, ""), (300.0, 200, ""), (None, 503, "server_busy"))):
        RequestLog.objects.create(created_at=now, request_id=f"req-{n}", key_id=key_id, endpoint="chat.completions",
                                  lane="qwen", status=status, error_code=code, latency_ms=5, queue_ms=queue_ms,
                                  priority="interactive")


def cookie(user: User) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


async def snapshot_waits(ws: Any) -> dict[str, Any]:
    while True:
        message = await ws.receive_json_from(timeout=30)
        if message["event"] == WAITS_EVENT:
            return message["data"]


def test_an_operators_socket_gets_the_waits_per_key_a_viewers_per_class_only(admin_user: User,
                                                                              viewer_user: User) -> None:
    log_waits(admin_user)
    admin, viewer = cookie(admin_user), cookie(viewer_user)

    async def scenario() -> None:
        operator_ws, viewer_ws = socket("/ws/dashboard/", admin), socket("/ws/dashboard/", viewer)
        assert (await operator_ws.connect(timeout=30))[0] and (await viewer_ws.connect(timeout=30))[0]
        assert (await operator_ws.receive_json_from(timeout=30))["data"]["groups"][1:] == [DASHBOARD_GROUP,
                                                                                         OPERATORS_GROUP]
        assert (await viewer_ws.receive_json_from(timeout=30))["data"]["groups"][1:] == [DASHBOARD_GROUP]
        mine = await snapshot_waits(operator_ws)
        assert mine["by_key"] is True and [(r["key"], r["queued"], r["wait_p50_ms"], r["shed"])
                                           for r in mine["rows"]] == [("secret-agent", 2, 200.0, 1)]
        theirs = await snapshot_waits(viewer_ws)
        assert theirs["by_key"] is False and [(r["key"], r["priority"], r["wait_p95_ms"], r["shed"])
                                              for r in theirs["rows"]] == [("", "interactive", 290.0, 1)]
        # The per-key broadcast reaches operators only: the viewer's socket gets the next one instead.
        await abroadcast(OPERATORS_GROUP, WAITS_EVENT, {"by_key": True, "rows": [{"key": "secret-agent"}]})
        await abroadcast(DASHBOARD_GROUP, "probe.after", {})
        assert (await operator_ws.receive_json_from(timeout=30))["event"] == WAITS_EVENT
        assert (await viewer_ws.receive_json_from(timeout=30))["event"] == "probe.after"
        await operator_ws.disconnect(timeout=30)
        await viewer_ws.disconnect(timeout=30)

    in_fresh_loop(scenario)()


def test_a_demoted_operator_stops_getting_the_waits_per_key_and_stays_connected(admin_user: User) -> None:
    operator = User.objects.create_user(username="opal-operator", password="a-long-passphrase-42")
    user_set_role(actor=admin_user, user=operator, role=Role.ADMIN)
    session = cookie(operator)

    async def scenario() -> None:
        ws = socket("/ws/dashboard/", session)
        assert (await ws.connect(timeout=30))[0]
        assert (await ws.receive_json_from(timeout=30))["data"]["groups"][-1] == OPERATORS_GROUP  # hello
        await database_sync_to_async(user_set_role)(actor=admin_user, user=operator, role=Role.VIEWER)
        await database_sync_to_async(announce_access_change)(operator.pk)  # (user_set_role announces it too)
        await abroadcast(DASHBOARD_GROUP, "probe.checked", {})  # after the access checks, on one channel
        while (await ws.receive_json_from(timeout=30))["event"] != "probe.checked":
            pass
        await abroadcast(OPERATORS_GROUP, WAITS_EVENT, {"by_key": True, "rows": []})
        await abroadcast(DASHBOARD_GROUP, "probe.after", {})
        assert (await ws.receive_json_from(timeout=30))["event"] == "probe.after"  # open, and no waits per key
        await ws.disconnect(timeout=30)

    in_fresh_loop(scenario)()


def test_every_tick_carries_the_waits_per_class_without_key_names(admin_user: User) -> None:
    log_waits(admin_user)
    payload = tick_payload(now=timezone.now(), lanes=[], nodes=[], known={}, scraped=set())
    assert payload["fair_waits"] == fair_waits_live(by_key=False)
    assert [(r["lane"], r["key"], r["queued"]) for r in payload["fair_waits"]["rows"]] == [("qwen", "", 2)]
    assert "secret-agent" not in str(payload)


def test_the_pages_hold_the_live_waits_table(admin_user: User, viewer_user: User) -> None:
    make_lane("qwen", 1, served="qwen-test", max_model_len=32768)
    Lane.objects.filter(name="qwen").update(max_num_seqs=4)
    log_waits(admin_user)
    admin, viewer = Client(), Client()
    admin.force_login(admin_user)
    viewer.force_login(viewer_user)
    page = admin.get("/gateway/").content.decode()
    assert 'id="fair-waits" data-lane=""' in page and "portal/fair_waits.js" in page and "fair.waits" in page
    lane = admin.get("/lanes/qwen/").content.decode()
    assert 'id="lane-fair-waits" data-lane="qwen"' in lane and '<th class="fair-key">' in lane
    seen = viewer.get("/lanes/qwen/").content.decode()
    assert 'id="lane-fair-waits"' in seen and 'class="fair-key"' not in seen and "secret-agent" not in seen
    assert viewer.get("/gateway/").status_code == 403  # the per-key table's page: operators only
