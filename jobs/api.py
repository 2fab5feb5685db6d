"""Jobs API (/api/jobs...): read for viewers and leads, act for admins."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from ninja import Field, Query, Router, Schema, Status

from core.api import ErrorOut, can_operate
from core.validators import INT64_MAX
from jobs.drift import lane_drift
from jobs.fabric.watchdog import lane_watchdog_get, lane_watchdog_update
from jobs.models import FABRIC_KINDS, JobKind, LaneWatchdog
from jobs.results import fabric_history
from jobs.schemas import (
    FabricJobIn,
    FabricResultOut,
    JobDetailOut,
    JobOut,
    JobParamsIn,
    LaneDriftOut,
    LogPageOut,
    LogSearchOut,
    WatchdogIn,
    WatchdogOut,
)
from jobs.selectors import job_list, job_log_search, job_log_window, job_or_404
from jobs.services import (
    JobConflict,
    fabric_job_create,
    job_cancel,
    job_relaunch,
    lane_job_create,
    node_network_check_create,
)
from lanes.models import Lane, Node
from lanes.selectors import nodes_by_name

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


@router.get("/jobs/{int:job_id}", response=JobDetailOut)
def get_job(request: HttpRequest, job_id: int) -> Any:
    return job_or_404(job_id)


@router.get("/jobs/{int:job_id}/log", response=LogPageOut)
def get_job_log(
    request: HttpRequest, job_id: int, after_seq: int | None = Query(None, ge=0, le=INT64_MAX),
    before_seq: int | None = Query(None, ge=0, le=INT64_MAX), limit: int = Query(1000, ge=1, le=5000),
) -> Any:
    """The tail (no parameter), what follows `after_seq` (resume), or what precedes
    `before_seq` (earlier lines)."""
    if after_seq is not None and before_seq is not None:
        raise ValidationError({"after_seq": "give after_seq or before_seq, not both"})
    window = job_log_window(job=job_or_404(job_id), after_seq=after_seq, before_seq=before_seq, limit=limit)
    return {"lines": window.lines, "first_seq": window.first_seq, "last_seq": window.last_seq,
            "has_earlier": window.has_earlier}


@router.get("/jobs/{int:job_id}/log/search", response=LogSearchOut)
def search_job_log(request: HttpRequest, job_id: int, q: str, limit: int = 200) -> Any:
    """Lines of the whole log containing `q` (case-insensitive), in order, up to `limit`."""
    text = q.strip()
    if not 1 <= len(text) <= 200:
        raise ValidationError({"q": "give 1 to 200 characters to search for"})
    if not 1 <= limit <= 5000:
        raise ValidationError({"limit": "must be between 1 and 5000"})
    found = job_log_search(job=job_or_404(job_id), text=text, limit=limit)
    return {"lines": found.lines, "total": found.total}


@router.post("/jobs/{int:job_id}/cancel", response=JobOut, auth=can_operate)
def cancel_job(request: HttpRequest, job_id: int, keep_running: bool = False) -> Any:
    """keep_running=true: a cancelled launch leaves its containers and engine for inspection."""
    return job_cancel(job=job_or_404(job_id), user=request.user, keep_running=keep_running)


@router.post("/jobs/{int:job_id}/relaunch", response={201: JobOut, 409: ErrorOut}, auth=can_operate)
def relaunch_job(request: HttpRequest, job_id: int) -> Any:
    """A new job like this one (same kind, target and parameters; a lane's current revision)."""
    try:
        return Status(201, job_relaunch(job=job_or_404(job_id), user=request.user))
    except JobConflict as exc:
        return Status(409, {"detail": str(exc)})


@router.get("/jobs/lanes/{name}/drift", response=LaneDriftOut)
def get_lane_drift(request: HttpRequest, name: str) -> Any:
    """The revision the lane's engine runs (None when stopped) against its latest saved one,
    with what differs: saved changes apply at the next restart."""
    return lane_drift(get_object_or_404(Lane, name=name)).as_dict()


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


FABRIC_ACTIONS = {"nccl-test": JobKind.NCCL_TEST, "latency-matrix": JobKind.LATENCY_MATRIX,
                  "link-bandwidth": JobKind.LINK_BANDWIDTH}


def fabric_nodes(names: list[str]) -> list[Node]:
    """The named nodes, in the given order (the first one runs mpirun)."""
    found = nodes_by_name(names)
    unknown = [name for name in names if name not in found]
    if unknown:
        raise ValidationError({"nodes": f"no node named {', '.join(unknown)}"})
    return [found[name] for name in names]


@router.post("/jobs/fabric/{action}", response={201: JobOut, 409: ErrorOut}, auth=can_operate)
def fabric_action(request: HttpRequest, action: str, payload: FabricJobIn) -> Any:
    if action not in FABRIC_ACTIONS:
        raise ValidationError({"action": f"must be one of {', '.join(FABRIC_ACTIONS)}"})
    try:
        job = fabric_job_create(kind=FABRIC_ACTIONS[action], nodes=fabric_nodes(payload.nodes), user=request.user,
                                params=payload.params)
    except JobConflict as exc:
        return Status(409, {"detail": str(exc)})
    return Status(201, job)


@router.get("/fabric/results", response=list[FabricResultOut])
def fabric_results(request: HttpRequest, node: str = "", node_set: str = "", kind: str = "", limit: int = 20) -> Any:
    if not 1 <= limit <= 200:
        raise ValidationError({"limit": "must be between 1 and 200"})
    if kind and kind not in FABRIC_KINDS:
        raise ValidationError({"kind": f"must be one of {', '.join(FABRIC_KINDS)}"})
    target = get_object_or_404(Node, name=node) if node else None
    return list(fabric_history(node=target, node_set=node_set, kind=kind, limit=limit))


@router.get("/fabric/watchdogs", response=list[WatchdogOut])
def watchdogs(request: HttpRequest) -> Any:
    return list(LaneWatchdog.objects.select_related("lane").order_by("lane__name"))


@router.get("/fabric/watchdogs/{name}", response=WatchdogOut)
def watchdog(request: HttpRequest, name: str) -> Any:
    return lane_watchdog_get(get_object_or_404(Lane, name=name))


@router.patch("/fabric/watchdogs/{name}", response=WatchdogOut, auth=can_operate)
def watchdog_update(request: HttpRequest, name: str, payload: WatchdogIn) -> Any:
    lane = get_object_or_404(Lane, name=name)
    return lane_watchdog_update(lane=lane, actor=request.user, data=payload.dict(exclude_unset=True))
