"""Celery tasks of the routing app (thin: each calls a service)."""

from __future__ import annotations

from celery import shared_task

from routing.services import request_log_purge


@shared_task(name="routing.tasks.purge_request_logs", ignore_result=True)
def purge_request_logs() -> dict[str, int | bool]:
    result = request_log_purge()
    return {"deleted": result.deleted, "batches": result.batches, "finished": result.finished}
