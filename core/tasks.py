from __future__ import annotations

from celery import shared_task
from django.core.cache import cache
from django.utils import timezone

from core.broadcast import DASHBOARD_GROUP, broadcast

HEARTBEAT_CACHE_KEY = "portal:heartbeat-at"


@shared_task(name="core.tasks.publish_heartbeat", ignore_result=True)
def publish_heartbeat() -> None:
    """Beat's pulse: proves worker and beat are alive on every open dashboard."""
    at = timezone.now()
    # Kept so that a freshly loaded dashboard shows the last beat instead of "waiting…".
    cache.set(HEARTBEAT_CACHE_KEY, at, timeout=3600)
    broadcast(DASHBOARD_GROUP, "heartbeat", {"at": at.isoformat()})
