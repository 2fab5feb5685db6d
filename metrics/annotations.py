"""Chart annotations (as Grafana draws them): what happened to a lane, a node or the whole
cluster in a chart's window, read from what the portal already records — launch, stop and
restart jobs, the lane's state history (the audit log's `lane.state`: degraded, stalled,
failed, unreachable, and back to serving), the guardian's restarts (`lane.guardian_restart`)
and alerts opening and resolving. One selector for every chart: the series endpoint and the
gateway's traffic endpoint serve its events with their points."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import Q

from core.models import AuditEvent
from jobs.models import Job, JobKind
from lanes.models import Lane, LaneState
from lanes.restart_policy import RESTART_ACTION
from metrics.models import Alert

MARKED_JOBS = (JobKind.LAUNCH, JobKind.STOP, JobKind.RESTART)
TROUBLE = (LaneState.DEGRADED, LaneState.STALLED, LaneState.FAILED, LaneState.UNREACHABLE)
MAX_EVENTS = 200  # the newest in a window: a chart stays readable, the answer small


def _event(t: datetime, kind: str, label: str, href: str = "") -> dict[str, Any]:
    return {"t": t.isoformat(), "type": kind, "label": label, "href": href}


def chart_events(kind: str | None, target: str | None, since: datetime, until: datetime) -> list[dict[str, Any]]:
    """The events of one lane or node (`kind`, `target`) or, with kind None, of every lane and
    alert (the gateway's charts), in [since, until], oldest first."""
    if kind not in (None, "lane", "node"):
        return []
    lane_ids: list[int] | None = None  # None: every lane
    if kind == "lane":
        lane_ids = list(Lane.objects.filter(name=target).values_list("pk", flat=True))
    events = _alert_events(kind, target, since, until)
    if kind != "node" and lane_ids != []:
        events += _lane_events(lane_ids, prefix=kind is None, since=since, until=until)
    events.sort(key=lambda e: e["t"])
    return events[-MAX_EVENTS:]


def _lane_events(lane_ids: list[int] | None, *, prefix: bool, since: datetime, until: datetime) -> list[dict[str, Any]]:
    audits = AuditEvent.objects.filter(object_type="lanes.lane", action__in=("lane.state", RESTART_ACTION),
                                       created_at__gte=since, created_at__lte=until)
    jobs = Job.objects.filter(kind__in=MARKED_JOBS, created_at__gte=since, created_at__lte=until).select_related("lane")
    if lane_ids is not None:
        audits = audits.filter(object_id__in=[str(pk) for pk in lane_ids])
        jobs = jobs.filter(lane_id__in=lane_ids)
    events, restart_jobs = [], set()
    for audit in audits.order_by("-created_at")[:MAX_EVENTS]:
        who = f"{audit.object_repr}: " if prefix else ""
        diff = audit.diff
        if audit.action == RESTART_ACTION:
            job = (diff.get("job") or [None, None])[1]
            restart_jobs.add(job)
            number = (diff.get("restart") or [None, "?"])[1]
            reason = (diff.get("after") or [None, ""])[1] or ""
            events.append(_event(audit.created_at, "guardian_restart", f"{who}guardian restart {number}: {reason}".strip(),
                                 f"/jobs/{job}/" if job else ""))
            continue
        before, after = (diff.get("observed_state") or [None, None])
        reason = (diff.get("reason") or [None, ""])[1] or ""
        if after in TROUBLE:
            events.append(_event(audit.created_at, "degraded", f"{who}{after}: {reason}".rstrip(": ")))
        elif after == LaneState.SERVING and before in TROUBLE:
            events.append(_event(audit.created_at, "recovered", f"{who}recovered (serving after {before})"))
    for job in jobs.order_by("-created_at")[:MAX_EVENTS]:
        if job.pk in restart_jobs:
            continue  # the guardian's restart marks it
        who = f"{job.lane.name}: " if prefix and job.lane else ""
        events.append(_event(job.created_at, job.kind, f"{who}{job.get_kind_display().lower()} job #{job.pk} ({job.state})",
                             f"/jobs/{job.pk}/"))
    return events


def _alert_events(kind: str | None, target: str | None, since: datetime, until: datetime) -> list[dict[str, Any]]:
    alerts = Alert.objects.filter(Q(opened_at__gte=since, opened_at__lte=until)
                                  | Q(resolved_at__gte=since, resolved_at__lte=until))
    if kind is not None:
        alerts = alerts.filter(kind=kind, target=target)
    events = []
    for alert in alerts.order_by("-id")[:MAX_EVENTS]:
        who = f"{alert.kind} {alert.target}: " if kind is None else ""
        if alert.opened_at and since <= alert.opened_at <= until:
            events.append(_event(alert.opened_at, "alert", f"{who}alert: {alert.message}", "/monitor/alerts/"))
        if alert.resolved_at and since <= alert.resolved_at <= until:
            events.append(_event(alert.resolved_at, "resolved", f"{who}resolved: {alert.message}", "/monitor/alerts/"))
    return events
