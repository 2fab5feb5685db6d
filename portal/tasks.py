from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from portal.broadcast import DASHBOARD_GROUP, broadcast


@shared_task(name="portal.tasks.publish_heartbeat", ignore_result=True)
def publish_heartbeat() -> None:
    """Beat's pulse: proves worker and beat are alive on every open dashboard."""
    broadcast(DASHBOARD_GROUP, "heartbeat", {"at": timezone.now().isoformat()})
