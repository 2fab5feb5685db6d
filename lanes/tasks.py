"""Thin Celery tasks of the lanes app (periodic: routed to the periodic queue, portal.celery)."""

from __future__ import annotations

from celery import shared_task

from lanes.watcher import lanes_watch_tick


@shared_task(name="lanes.tasks.watch_lane_health", ignore_result=True)
def watch_lane_health() -> None:
    lanes_watch_tick()
