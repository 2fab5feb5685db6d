"""The dashboard shows the workers' last heartbeat as soon as it loads (beat keeps it in the
cache), in the pages' time format, not "waiting…" until the next beat."""

from datetime import UTC, datetime

import pytest
from django.core.cache import cache

from core.tasks import HEARTBEAT_CACHE_KEY, publish_heartbeat

pytestmark = pytest.mark.django_db


def test_the_dashboard_shows_the_last_heartbeat_formatted(viewer_client):
    cache.set(HEARTBEAT_CACHE_KEY, datetime(2026, 11, 30, 20, 1, 2, 345678, tzinfo=UTC))
    html = viewer_client.get("/").content.decode()
    assert '<span id="heartbeat">2026-11-30 20:01:02</span>' in html


def test_without_a_heartbeat_the_dashboard_says_so(viewer_client):
    cache.delete(HEARTBEAT_CACHE_KEY)
    assert "none yet (is beat running?)" in viewer_client.get("/").content.decode()


def test_the_heartbeat_task_keeps_its_time():
    cache.delete(HEARTBEAT_CACHE_KEY)
    publish_heartbeat()
    assert cache.get(HEARTBEAT_CACHE_KEY) is not None
