"""The job log socket: role check, resume from a seq with neither gaps nor duplicates
while live batches keep arriving."""

from __future__ import annotations

import asyncio
import functools

import pytest
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client
from django.utils import timezone

from core.consumers import CLOSE_FORBIDDEN, CLOSE_UNAUTHENTICATED
from jobs.logsink import LogSink
from jobs.models import Job, JobKind, JobLogLine
from portal.asgi import application
from tests.conftest import consumer_ended
from tests.jobs.conftest import call_in_thread

pytestmark = pytest.mark.django_db(transaction=True)


def in_fresh_loop(test):
    """Runs an async test on its own loop in its own thread: the test thread may already
    run Playwright's loop when browser tests ran first in this process."""

    @functools.wraps(test)
    def wrapper(*args, **kwargs):
        return call_in_thread(lambda: asyncio.run(test(*args, **kwargs)), timeout=60)

    return wrapper


async def cookie_for(user) -> str:
    def login() -> str:
        client = Client()
        client.force_login(user)
        return client.cookies["sessionid"].value

    return await sync_to_async(login)()


def socket(path: str, cookie: str | None) -> WebsocketCommunicator:
    headers = [(b"origin", b"http://localhost"), (b"host", b"localhost")]
    if cookie:
        headers.append((b"cookie", f"sessionid={cookie}".encode()))
    return WebsocketCommunicator(application, path, headers=headers)


@database_sync_to_async
def make_job(lines: int) -> Job:
    job = Job.objects.create(kind=JobKind.STATUS, params={"nodes": []})
    now = timezone.now()
    JobLogLine.objects.bulk_create([JobLogLine(job=job, seq=i, created_at=now, text=f"line {i}")
                                    for i in range(1, lines + 1)])
    Job.objects.filter(pk=job.pk).update(last_seq=lines)
    return job


async def receive_lines(ws: WebsocketCommunicator, until_seq: int) -> list[int]:
    seqs: list[int] = []
    while not seqs or seqs[-1] < until_seq:
        message = await ws.receive_json_from(timeout=30)
        if message["event"] == "job.log":
            seqs.extend(line[0] for line in message["data"]["lines"])
    return seqs


@in_fresh_loop
async def test_resume_replays_the_missing_lines_then_follows_without_repeats(viewer_user):
    job = await make_job(3000)
    ws = socket(f"/ws/jobs/{job.pk}/", await cookie_for(viewer_user))
    connected, _ = await ws.connect(timeout=30)
    assert connected
    await ws.send_json_to({"after_seq": 10})
    sink = LogSink(job.pk, start_seq=3000)
    for i in range(50):
        sink.append("spark1", "stdout", f"live {i}")
    await database_sync_to_async(sink.flush)()
    seqs = await receive_lines(ws, 3050)
    assert seqs == list(range(11, 3051))  # every line once, in order
    await ws.disconnect(timeout=30)


@in_fresh_loop
async def test_live_lines_before_resume_are_not_lost(viewer_user):
    job = await make_job(5)
    ws = socket(f"/ws/jobs/{job.pk}/", await cookie_for(viewer_user))
    await ws.connect(timeout=30)
    sink = LogSink(job.pk, start_seq=5)
    sink.append("", "system", "early")
    await database_sync_to_async(sink.flush)()
    await ws.send_json_to({"after_seq": 2})
    assert await receive_lines(ws, 6) == [3, 4, 5, 6]
    await ws.disconnect(timeout=30)


@in_fresh_loop
async def test_bad_resume_is_answered_with_an_error_naming_the_field(viewer_user):
    job = await make_job(1)
    ws = socket(f"/ws/jobs/{job.pk}/", await cookie_for(viewer_user))
    await ws.connect(timeout=30)
    await ws.send_json_to({"after_seq": "x"})
    message = await ws.receive_json_from(timeout=30)
    assert message == {"event": "error", "data": {"after_seq": "must be a whole number >= 0"}}
    await ws.disconnect(timeout=30)


@in_fresh_loop
async def test_anonymous_socket_is_closed_4401():
    job = await make_job(1)
    ws = socket(f"/ws/jobs/{job.pk}/", None)
    connected, code = await ws.connect(timeout=30)
    assert not connected and code == CLOSE_UNAUTHENTICATED
    assert await consumer_ended(ws)


@in_fresh_loop
async def test_outsider_socket_is_closed_4403(outsider_user):
    job = await make_job(1)
    ws = socket(f"/ws/jobs/{job.pk}/", await cookie_for(outsider_user))
    connected, code = await ws.connect(timeout=30)
    assert not connected and code == CLOSE_FORBIDDEN
    assert await consumer_ended(ws)
