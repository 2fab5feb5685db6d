"""Beat's periodic metrics work; each task only calls a service."""

from __future__ import annotations

from typing import Any

from celery import shared_task
from django.conf import settings
from django.core.cache import cache
from django.utils import timezone

from metrics.services import scrape_tick as scrape_tick_service
from metrics.storage import samples_downsample, storage_maintain, usage_rollup
from metrics.webhooks import webhooks_deliver_due

TICK_LOCK = "metrics:scrape-tick"


@shared_task(name="metrics.tasks.scrape_tick", ignore_result=True)
def scrape_tick() -> dict[str, Any]:
    """One tick at a time across workers: a slow tick makes the next one skip, not overlap
    (both would compute rates from the same previous reading)."""
    if not cache.add(TICK_LOCK, True, timeout=settings.METRICS_SCRAPE_TIMEOUT_S * 4 + 10):
        return {"skipped": True}
    try:
        return scrape_tick_service()
    finally:
        cache.delete(TICK_LOCK)


@shared_task(name="metrics.tasks.downsample", ignore_result=True)
def downsample() -> None:
    now = timezone.now()
    samples_downsample(now=now)
    usage_rollup(now=now)


@shared_task(name="metrics.tasks.maintain_storage", ignore_result=True)
def maintain_storage() -> dict[str, Any]:
    return storage_maintain(now=timezone.now())


@shared_task(name="metrics.tasks.deliver_webhooks", ignore_result=True)
def deliver_webhooks() -> dict[str, int]:
    return webhooks_deliver_due()
