"""What browsers are told about jobs (saved first, then broadcast): job.state on the
dashboard group and the job's own group, job.step on the job's group, and lane.drift on the
dashboard group when a job that decides what a lane runs has ended."""

from __future__ import annotations

from typing import Any

from core.broadcast import DASHBOARD_GROUP, broadcast
from jobs.drift import lane_drift
from jobs.logsink import job_group
from jobs.models import Job, JobKind, JobStep

# The jobs whose end may change what a lane runs (jobs.drift.lanes_drift reads them).
DRIFT_KINDS = (JobKind.LAUNCH, JobKind.RESTART, JobKind.STOP, JobKind.STATUS)


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def job_payload(job: Job) -> dict[str, Any]:
    return {
        "id": job.pk,
        "kind": job.kind,
        "kind_label": job.get_kind_display(),
        "state": job.state,
        "lane": job.lane.name if job.lane_id and job.lane else None,
        "nodes": list(job.params.get("nodes") or []),
        "created_by": job.created_by.get_username() if job.created_by_id and job.created_by else None,
        "created_at": _iso(job.created_at),
        "started_at": _iso(job.started_at),
        "finished_at": _iso(job.finished_at),
        "error": job.error,
        "warnings": list((job.result or {}).get("warnings") or []),
        "cancel_requested": job.cancel_requested_at is not None,
        "last_seq": job.last_seq,
    }


def step_payload(step: JobStep) -> dict[str, Any]:
    return {
        "job": step.job_id,
        "position": step.position,
        "key": step.key,
        "phase": step.phase,
        "node": step.node,
        "title": step.title,
        "state": step.state,
        "started_at": _iso(step.started_at),
        "finished_at": _iso(step.finished_at),
        "duration_s": step.duration_s,
        "exit_code": step.exit_code,
        "detail": step.detail,
    }


def publish_job_state(job: Job) -> None:
    data = job_payload(job)
    broadcast(DASHBOARD_GROUP, "job.state", data)
    broadcast(job_group(job.pk), "job.state", data)
    if job.is_final and job.kind in DRIFT_KINDS and job.lane_id and job.lane:
        # The lists' and the dashboard's "running r1, latest r2" follow a restart without a reload.
        broadcast(DASHBOARD_GROUP, "lane.drift", {"name": job.lane.name, **lane_drift(job.lane).as_dict()})


def publish_step(step: JobStep) -> None:
    broadcast(job_group(step.job_id), "job.step", step_payload(step))
