"""The dashboard socket: authentication, role check, origin validation, and broadcasts."""

from __future__ import annotations

import json
import time

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client

from core.broadcast import DASHBOARD_GROUP, abroadcast
from core.consumers import CLOSE_FORBIDDEN, CLOSE_UNAUTHENTICATED, PortalConsumer
from jobs.models import Job, JobKind
from lanes.models import Lane, LaneState, Node, NodeState
from portal.asgi import application
from tests.conftest import consumer_ended

pytestmark = pytest.mark.django_db(transaction=True)


async def session_cookie(user) -> str:
    def login() -> str:
        client = Client()
        client.force_login(user)
        return client.cookies["sessionid"].value

    return await database_sync_to_async(login)()


def communicator(cookie: str | None, origin: str = "http://localhost") -> WebsocketCommunicator:
    headers = [(b"origin", origin.encode()), (b"host", b"localhost")]
    if cookie:
        headers.append((b"cookie", f"sessionid={cookie}".encode()))
    return WebsocketCommunicator(application, "/ws/dashboard/", headers=headers)


async def test_viewer_receives_hello_then_broadcasts(viewer_user):
    ws = communicator(await session_cookie(viewer_user))
    connected, _ = await ws.connect(timeout=30)
    assert connected
    hello = await ws.receive_json_from(timeout=30)
    assert hello["event"] == "hello"
    before = time.time()
    await abroadcast(DASHBOARD_GROUP, "lane.state", {"name": "qwen", "observed_state": "serving"})
    message = await ws.receive_json_from(timeout=30)
    assert {k: v for k, v in message.items() if k != "at"} == {"event": "lane.state", "data": {"name": "qwen", "observed_state": "serving"}}
    assert before <= message["at"] <= time.time()  # stamped when sent: pages keep the newest
    await ws.disconnect(timeout=30)


async def test_each_connect_sends_the_current_state_stamped_before_it_was_read(viewer_user):
    """A page that (re)connects is told every lane's state and drift, every node's state and
    network verdict, and the recent jobs as of now, as the live events it handles, stamped when the read began: what
    changed while its socket was down is shown, and a live message older than it is dropped."""
    def create() -> None:
        lane = Lane.objects.create(name="qwen", max_model_len=4096, observed_state=LaneState.CHECKING, desired_state="serving")
        Node.objects.create(name="spark-1", address="127.0.0.11", transport="local", state=NodeState.ONLINE,
                            network_report={"verdict": "degraded", "checked_at": "2026-12-01T10:00:00Z"})
        Node.objects.create(name="spark-2", address="127.0.0.12", transport="local", state=NodeState.ONLINE)
        Job.objects.create(kind=JobKind.STATUS, lane=lane, params={"nodes": []})

    await database_sync_to_async(create)()
    ws = communicator(await session_cookie(viewer_user))
    before = time.time()
    assert (await ws.connect(timeout=30))[0]
    assert (await ws.receive_json_from(timeout=30))["event"] == "hello"
    seen: dict = {}
    networks = []
    while set(seen) != {"lane.state", "lane.drift", "node.state", "node.network", "job.state"}:
        message = await ws.receive_json_from(timeout=30)
        assert message["snapshot"] is True and before <= message["at"] <= time.time()
        seen[message["event"]] = message["data"]
        networks += [message["data"]] if message["event"] == "node.network" else []
    assert seen["lane.state"]["observed_state"] == "checking"
    assert seen["lane.drift"] == {"name": "qwen", "running": None, "latest": 0, "drifted": False, "job": None, "changes": []}
    assert seen["node.state"]["state"] == "online" and seen["job.state"]["lane"] == "qwen"
    # The network verdict a check saved while the socket was down; a node never checked has none.
    assert networks == [{"name": "spark-1", "verdict": "degraded", "checked_at": "2026-12-01T10:00:00Z"}]
    await ws.disconnect(timeout=30)


async def test_anonymous_socket_is_closed_4401():
    ws = communicator(None)
    connected, code = await ws.connect(timeout=30)
    assert not connected
    assert code == CLOSE_UNAUTHENTICATED
    assert await consumer_ended(ws)


async def test_outsider_socket_is_closed_4403(outsider_user):
    ws = communicator(await session_cookie(outsider_user))
    connected, code = await ws.connect(timeout=30)
    assert not connected
    assert code == CLOSE_FORBIDDEN
    assert await consumer_ended(ws)


async def test_foreign_origin_is_refused(viewer_user):
    ws = communicator(await session_cookie(viewer_user), origin="http://evil.example")
    connected, _ = await ws.connect(timeout=30)
    assert not connected


async def test_same_host_on_another_port_is_refused(viewer_user):
    # A page on http://localhost:9999 (another app on this machine) must not ride the cookie.
    ws = communicator(await session_cookie(viewer_user), origin="http://localhost:9999")
    connected, _ = await ws.connect(timeout=30)
    assert not connected


async def test_same_host_with_another_scheme_is_refused(viewer_user):
    ws = communicator(await session_cookie(viewer_user), origin="https://localhost")
    connected, _ = await ws.connect(timeout=30)
    assert not connected


async def test_socket_without_origin_is_refused(viewer_user):
    headers = [(b"host", b"localhost"), (b"cookie", f"sessionid={await session_cookie(viewer_user)}".encode())]
    connected, _ = await WebsocketCommunicator(application, "/ws/dashboard/", headers=headers).connect(timeout=30)
    assert not connected


async def test_same_port_explicit_is_accepted_and_a_trusted_origin_too(viewer_user, settings):
    cookie = await session_cookie(viewer_user)
    headers = [(b"origin", b"http://localhost:8080"), (b"host", b"localhost:8080"),
               (b"cookie", f"sessionid={cookie}".encode())]
    ws = WebsocketCommunicator(application, "/ws/dashboard/", headers=headers)
    connected, _ = await ws.connect(timeout=30)
    assert connected
    await ws.disconnect(timeout=30)
    settings.CSRF_TRUSTED_ORIGINS = ["https://portal.example:8443"]
    ws = communicator(cookie, origin="https://portal.example:8443")
    connected, _ = await ws.connect(timeout=30)
    assert connected
    await ws.disconnect(timeout=30)


async def test_a_broadcast_is_encoded_once_for_all_the_sockets_of_a_process(viewer_user, monkeypatch):
    """The channel layer delivers a group message once per process; the first consumer's JSON
    text is what every socket of the process sends (a tick is ~27 KiB, a web process holds
    many dashboards)."""
    encoded: list[str] = []
    original = PortalConsumer.encode_json.__func__  # type: ignore[attr-defined]

    async def counting(cls: type[PortalConsumer], content: dict) -> str:
        encoded.append(content["event"])
        return await original(cls, content)

    monkeypatch.setattr(PortalConsumer, "encode_json", classmethod(counting))
    cookie = await session_cookie(viewer_user)
    sockets = [communicator(cookie) for _ in range(3)]
    for ws in sockets:
        assert (await ws.connect(timeout=30))[0]
        assert (await ws.receive_json_from(timeout=30))["event"] == "hello"
    tick = {"lanes": {f"lane-{i}": {"figures": {"gen_tps": i * 1.5}} for i in range(20)}, "at": "2026-12-01T00:00:00"}
    await abroadcast(DASHBOARD_GROUP, "metrics.tick", tick)
    texts = [await ws.receive_from(timeout=30) for ws in sockets]
    assert texts[0] == texts[1] == texts[2]
    assert {k: v for k, v in json.loads(texts[0]).items() if k != "at"} == {"event": "metrics.tick", "data": tick}
    assert encoded.count("metrics.tick") == 1 and encoded.count("hello") == 3
    for ws in sockets:
        await ws.disconnect(timeout=30)
