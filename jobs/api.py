"""Jobs API (/api/jobs...): read for viewers and leads, act for admins."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest
from django.shortcuts import get_object_or_404
from ninja import Field, Query, Router, Schema, Status

from jobs.models import Job, JobKind
from jobs.schemas import JobDetailOut, JobOut, JobParamsIn, LogPageOut
from jobs.selectors import job_get, job_list, job_log_window
from jobs.services import JobConflict, job_cancel, lane_job_create, node_network_check_create
from lanes.models import Lane, Node
from portal.api import ErrorOut, can_operate
from portal.validators import INT64_MAX

router = Router(tags=["jobs"])

LANE_ACTIONS = {"launch": JobKind.LAUNCH, "stop": JobKind.STOP, "restart": JobKind.RESTART, "status": JobKind.STATUS}


# An offset past this many jobs finds nothing on any real installation; bounded so the
# database never gets a number it cannot hold.
MAX_OFFSET = 10**9


class JobFilters(Schema):
    kind: str = Field("", max_length=32)
    state: str = Field("", max_length=32)
    node: str = Field("", max_length=63)
    lane: str = Field("", max_length=63)
    limit: int = Field(50, ge=1, le=500)
    offset: int = Field(0, ge=0, le=MAX_OFFSET)


@router.get("/jobs", response=list[JobOut])
def list_jobs(request: HttpRequest, filters: Query[JobFilters]) -> Any:
    limit, offset = filters.limit, filters.offset
    jobs = job_list(kind=filters.kind, state=filters.state, node=filters.node, lane=filters.lane)
    return jobs[offset : offset + limit]


def _job(job_id: int) -> Job:
    if job_id > INT64_MAX:  # the path converter takes any digits; the column does not
        raise Http404(f"No job #{job_id}.")
    try:
        return job_get(job_id=job_id)
    except Job.DoesNotExist:
        raise Http404(f"No job #{job_id}.") from None


@router.get("/jobs/{int:job_id}", response=JobDetailOut)
def get_job(request: HttpRequest, job_id: int) -> Any:
    return _job(job_id)


@router.get("/jobs/{int:job_id}/log", response=LogPageOut)
def get_job_log(
    request: HttpRequest, job_id: int, after_seq: int | None = Query(None, ge=0, le=INT64_MAX),
    before_seq: int | None = Query(None, ge=0, le=INT64_MAX), limit: int = Query(1000, ge=1, le=5000),
) -> Any:
    """The tail (no parameter), what follows `after_seq` (resume), or what precedes
    `before_seq` (earlier lines)."""
    if after_seq is not None and before_seq is not None:
        raise ValidationError({"after_seq": "give after_seq or before_seq, not both"})
    window = job_log_window(job=_job(job_id), after_seq=after_seq, before_seq=before_seq, limit=limit)
    return {"lines": window.lines, "first_seq": window.first_seq, "last_seq": window.last_seq,
            "has_earlier": window.has_earlier}


@router.post("/jobs/{int:job_id}/cancel", response=JobOut, auth=can_operate)
def cancel_job(request: HttpRequest, job_id: int) -> Any:
    return job_cancel(job=_job(job_id), user=request.user)


@router.post("/jobs/lanes/{name}/{action}", response={201: JobOut, 409: ErrorOut}, auth=can_operate)
def lane_action(request: HttpRequest, name: str, action: str, payload: JobParamsIn | None = None) -> Any:
    if action not in LANE_ACTIONS:
        raise ValidationError({"action": f"must be one of {', '.join(LANE_ACTIONS)}"})
    lane = get_object_or_404(Lane, name=name)
    try:
        job = lane_job_create(lane=lane, kind=LANE_ACTIONS[action], user=request.user,
                              params=payload.params if payload else {})
    except JobConflict as exc:
        return Status(409, {"detail": str(exc)})
    return Status(201, job)


@router.post("/jobs/nodes/{name}/network-check", response={201: JobOut}, auth=can_operate)
def node_network_check(request: HttpRequest, name: str, payload: JobParamsIn | None = None) -> Any:
    node = get_object_or_404(Node, name=name)
    return Status(201, node_network_check_create(node=node, user=request.user, params=payload.params if payload else {}))
