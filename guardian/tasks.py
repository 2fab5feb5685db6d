"""Thin Celery task of the guardian (periodic: routed to the periodic queue, portal.celery)."""

from __future__ import annotations

from celery import shared_task

from guardian.services import guardian_tick as guardian_tick_service


@shared_task(name="guardian.tasks.guardian_tick", ignore_result=True)
def guardian_tick() -> dict[str, int]:
    return guardian_tick_service()
