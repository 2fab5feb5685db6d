"""Periodic work has its own queue: every beat task (and any task listed in
PERIODIC_TASKS) is routed there, jobs stay on the default queue, and the broker's visibility
timeout stays above the longest job's Celery limit."""

from __future__ import annotations

from celery.schedules import crontab
from django.conf import settings

from jobs.params import validate_params
from portal.celery import app, route_periodic_tasks
from portal.workers import worker_argv


def queue_of(task_name: str) -> str:
    return app.amqp.router.route({}, task_name)["queue"].name


def test_every_beat_task_goes_to_the_periodic_queue():
    for entry in settings.CELERY_BEAT_SCHEDULE.values():
        assert queue_of(entry["task"]) == settings.PERIODIC_QUEUE, entry["task"]
    assert "lanes.tasks.watch_lane_health" in {e["task"] for e in settings.CELERY_BEAT_SCHEDULE.values()}


def test_no_beat_task_piles_up_behind_a_slow_run():
    """Every beat entry expires within its period: with a hung webhook receiver (or any slow
    run) the runs queued meanwhile are dropped by the worker, not run one after another."""
    for name, entry in settings.CELERY_BEAT_SCHEDULE.items():
        schedule = entry["schedule"]
        if isinstance(schedule, crontab):  # the mean gap between two runs
            period = 86_400 / (len(schedule.hour) * len(schedule.minute))
        else:
            period = float(schedule)
        expires = entry.get("options", {}).get("expires")
        assert expires is not None, f"{name} has no expires"
        assert 0 < expires <= period, (name, expires, period)
    assert settings.CELERY_BEAT_SCHEDULE["metrics-webhooks"]["options"]["expires"] <= 5.0


def test_jobs_stay_on_the_default_queue():
    assert queue_of("jobs.tasks.run_job") == settings.CELERY_TASK_DEFAULT_QUEUE
    assert route_periodic_tasks("jobs.tasks.run_job", (), {}, {}) is None


def test_a_task_opts_in_by_being_listed(settings):
    settings.PERIODIC_TASKS = ["metrics.tasks.scrape_now"]
    assert route_periodic_tasks("metrics.tasks.scrape_now", (), {}, {}) == {"queue": settings.PERIODIC_QUEUE}


def test_the_two_workers_serve_their_own_queue():
    jobs, periodic = worker_argv("jobs"), worker_argv("periodic")
    assert jobs[jobs.index("-Q") + 1] == settings.CELERY_TASK_DEFAULT_QUEUE
    assert periodic[periodic.index("-Q") + 1] == settings.PERIODIC_QUEUE
    assert jobs[jobs.index("-n") + 1] != periodic[periodic.index("-n") + 1]


def test_the_visibility_timeout_is_above_the_longest_job():
    longest = validate_params("launch", {"time_limit_s": settings.JOBS_MAX_TIME_LIMIT_S})["time_limit_s"]
    hard_limit = int(longest) + int(settings.JOBS_CANCEL_CLEANUP_S) + 90  # jobs.services.dispatch_job
    assert settings.CELERY_BROKER_TRANSPORT_OPTIONS["visibility_timeout"] > hard_limit
    default_launch = validate_params("launch", {})["time_limit_s"]
    assert default_launch <= longest
