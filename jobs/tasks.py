"""Thin Celery tasks: take ids, call a service."""

from __future__ import annotations

from celery import shared_task

from jobs.fabric.watchdog import watchdog_tick
from jobs.services import RUN_JOB_TASK, job_reap_lost, job_run


@shared_task(name=RUN_JOB_TASK, ignore_result=True, acks_late=True)
def run_job(job_id: int) -> None:
    job_run(job_id=job_id)


@shared_task(name="jobs.tasks.reap_lost_jobs", ignore_result=True)
def reap_lost_jobs() -> None:
    job_reap_lost()


@shared_task(name="jobs.tasks.rdma_watchdog", ignore_result=True)
def rdma_watchdog() -> None:
    watchdog_tick()
