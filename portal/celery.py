"""The Celery app: worker and beat processes load it with `celery -A portal ...`
(the run command and compose start them through portal.workers)."""

import os
from typing import Any

from celery import Celery
from django.conf import settings

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("portal")
app.config_from_object("django.conf:settings", namespace="CELERY")


def periodic_task_names() -> set[str]:
    """Beat's tasks, and the periodic tasks that are also queued on demand."""
    return {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()} | set(settings.PERIODIC_TASKS)


def route_periodic_tasks(name: str, *args: Any, **kwargs: Any) -> Any:
    """Celery router: periodic work on its own queue (settings.PERIODIC_QUEUE), served by its
    own worker process; everything else (jobs) on the default queue."""
    if name in periodic_task_names():
        return {"queue": settings.PERIODIC_QUEUE}
    return None


app.conf.task_routes = (route_periodic_tasks,)
app.autodiscover_tasks()
