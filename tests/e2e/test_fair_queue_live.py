"""Browser: the lane page's Fair queue card, and the gateway page's queues, follow each
metrics.tick without a reload — a request queued, then one shed by the fair queue's own
script, change their figures; so do the waits per key and class."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
import redis
from django.conf import settings
from django.db import connection
from django.utils import timezone

from gateway.fair_lua import TAKE_LUA
from gateway.models import RequestLog
from lanes.models import Lane
from lanes.replica_health import fair_keys
from metrics.services import scrape_tick
from tests.conftest import browser_login
from tests.gateway.conftest import create_key, make_lane

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def take(rid: str) -> int:
    """A request asks the lane's replica 0 for a slot, through the fair queue's own script (a
    lane of 1 slot, a queue bound of 1). Returns GRANTED 1, QUEUED 0 or SHED 2."""
    keys = fair_keys("qwen", 0)
    reply = redis.Redis.from_url(settings.REDIS_URL).eval(
        TAKE_LUA, len(keys), *keys, rid, "k1", 1, "i", 1, 60_000, 1, "nobody", 60_000, 30_000, 1, 10_000, 0, "", 0)
    return int(reply[0])


def tick() -> None:
    """A scrape tick from another thread, as beat's worker would (Playwright's loop runs in this one)."""
    def run() -> None:
        try:
            scrape_tick(now=timezone.now() + timedelta(seconds=1))
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()


def test_the_fair_queue_card_follows_a_queued_and_a_shed_request_live(asgi_server: Any, page: Any,
                                                                      viewer_user: Any) -> None:
    lane = make_lane("qwen", 8000)
    Lane.objects.filter(pk=lane.pk).update(max_num_seqs=1)
    redis.Redis.from_url(settings.REDIS_URL).delete(*fair_keys("qwen", 0))
    browser_login(page, asgi_server.url, viewer_user.username)
    page.goto(f"{asgi_server.url}/lanes/qwen/")
    page.wait_for_selector("#live-status[data-state='open']")
    page.evaluate("window.__notReloaded = true")
    row = "#lane-fair-queue tr[data-fair-replica='0']"
    assert page.inner_text(f"{row} .fair-held") == "0 / 1" and page.inner_text(f"{row} .fair-waiting") == "0 / 0"

    assert take("r1") == 1 and take("r2") == 0  # one on the lane, one waiting
    tick()
    page.wait_for_selector("#lane-fair-queue[data-ticks='1']")
    assert page.inner_text(f"{row} .fair-held") == "1 / 1" and page.inner_text(f"{row} .fair-waiting") == "1 / 0"
    assert page.inner_text(f"{row} .fair-shed") == "0"

    assert take("r3") == 2  # the queue is at its bound: shed
    tick()
    page.wait_for_selector("#lane-fair-queue[data-ticks='2']")
    assert page.inner_text(f"{row} .fair-shed strong.text-danger") == "1"
    assert page.evaluate("window.__notReloaded") is True


def test_the_gateway_pages_queues_follow_the_tick_live(asgi_server: Any, page: Any, admin_user: Any) -> None:
    lane = make_lane("qwen", 8000)
    Lane.objects.filter(pk=lane.pk).update(max_num_seqs=1)
    redis.Redis.from_url(settings.REDIS_URL).delete(*fair_keys("qwen", 0))
    browser_login(page, asgi_server.url, admin_user.username)
    page.goto(f"{asgi_server.url}/gateway/?lane=qwen")
    page.wait_for_selector("#live-status[data-state='open']")
    page.evaluate("window.__notReloaded = true")
    row = "#fair-queues tr[data-lane='qwen'][data-replica='0']"
    assert page.inner_text(f"{row} .fair-waiting") == "0 / 0"
    assert take("r1") == 1 and take("r2") == 0 and take("r3") == 2
    tick()
    page.wait_for_selector("#fair-queues[data-ticks='1']")
    assert page.inner_text(f"{row} .fair-held") == "1 / 1" and page.inner_text(f"{row} .fair-waiting") == "1 / 0"
    assert page.inner_text(f"{row} .fair-shed") == "1"
    assert page.evaluate("window.__notReloaded") is True


def test_the_waits_per_key_and_class_follow_the_tick_live(asgi_server: Any, page: Any, admin_user: Any) -> None:
    """The gateway page's waits table (per lane, key and class) changes at a tick without a
    reload, and the lane page shows the same rows as soon as its socket opens."""
    lane = make_lane("qwen", 8000)
    Lane.objects.filter(pk=lane.pk).update(max_num_seqs=1)
    browser_login(page, asgi_server.url, admin_user.username)
    page.goto(f"{asgi_server.url}/gateway/")
    page.wait_for_selector("#live-status[data-state='open']")
    page.evaluate("window.__notReloaded = true")
    assert "No request waited" in page.inner_text("#fair-waits")
    _, key_id = create_key(admin_user, name="agent")
    for n, queue_ms in enumerate((100.0, 300.0)):
        RequestLog.objects.create(request_id=f"req-{n}", key_id=key_id, endpoint="chat.completions", lane="qwen",
                                  status=200, latency_ms=5, queue_ms=queue_ms, priority="interactive")
    tick()
    page.wait_for_selector("#fair-waits[data-updates='1']")
    row = "#fair-waits tr[data-lane='qwen'][data-key='agent'][data-priority='interactive']"
    assert page.inner_text(row).split("\t") == ["qwen", "agent", "interactive", "2", "200 ms", "290 ms", "0"]
    assert page.evaluate("window.__notReloaded") is True
    page.goto(f"{asgi_server.url}/lanes/qwen/")
    page.wait_for_selector("#lane-fair-waits[data-updates='1']")  # the socket's snapshot on connect
    assert page.inner_text("#lane-fair-waits tr[data-key='agent']").split("\t") == [
        "agent", "interactive", "2", "200 ms", "290 ms", "0"]
