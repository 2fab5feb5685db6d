"""Job pages: the list with filters, one job with its live log, the log download, and
the action forms posted from lane and node pages (confirmed after reading the plan)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import cast

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from jobs.models import Job, JobKind, JobState
from jobs.selectors import job_get, job_list, job_log_iter
from jobs.services import JobConflict, job_cancel, job_relaunch, lane_job_create, node_network_check_create
from lanes.models import Lane, Node
from portal.roles import Capability, role_required

LANE_ACTIONS = {"launch": JobKind.LAUNCH, "stop": JobKind.STOP, "restart": JobKind.RESTART, "status": JobKind.STATUS}


def _job_or_404(job_id: int) -> Job:
    try:
        return job_get(job_id=job_id)
    except Job.DoesNotExist:
        raise Http404(f"No job #{job_id}.") from None


@role_required(Capability.VIEW)
def job_list_page(request: HttpRequest) -> HttpResponse:
    filters = {key: request.GET.get(key, "").strip() for key in ("kind", "state", "node", "lane")}
    page = Paginator(job_list(**filters), 50).get_page(request.GET.get("page"))
    return render(request, "jobs/job_list.html", {
        "page": page, "filters": filters, "kinds": JobKind.choices, "states": JobState.choices,
        "nodes": Node.objects.values_list("name", flat=True), "lanes": Lane.objects.values_list("name", flat=True),
    })


@role_required(Capability.VIEW)
def job_detail_page(request: HttpRequest, job_id: int) -> HttpResponse:
    job = _job_or_404(job_id)
    return render(request, "jobs/job_detail.html", {"job": job, "steps": job.steps.order_by("position")})


@role_required(Capability.VIEW)
def job_log_download(request: HttpRequest, job_id: int) -> HttpResponse:
    job = _job_or_404(job_id)

    def lines() -> Iterator[str]:
        for line in job_log_iter(job=job):
            prefix = f"[{line.node}] " if line.node else ""
            marker = "! " if line.stream == "stderr" else "# " if line.stream == "system" else ""
            yield f"{line.created_at.isoformat()} {prefix}{marker}{line.text}\n"

    response = StreamingHttpResponse(lines(), content_type="text/plain; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="job-{job.pk}.log"'
    return cast(HttpResponse, response)  # role_required wraps HttpResponse views; streaming is one too


@require_POST
@role_required(Capability.OPERATE)
def job_cancel_action(request: HttpRequest, job_id: int) -> HttpResponse:
    job = _job_or_404(job_id)
    try:
        job_cancel(job=job, user=request.user)
        messages.info(request, f"Cancel requested for job #{job.pk}.")
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    return redirect("jobs:detail", job_id=job.pk)


@require_POST
@role_required(Capability.OPERATE)
def job_relaunch_action(request: HttpRequest, job_id: int) -> HttpResponse:
    job = _job_or_404(job_id)
    try:
        new = job_relaunch(job=job, user=request.user)
    except JobConflict as exc:
        messages.error(request, str(exc))
        return redirect("jobs:detail", job_id=job.pk)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
        return redirect("jobs:detail", job_id=job.pk)
    messages.success(request, f"Job #{job.pk} relaunched as job #{new.pk}.")
    return redirect("jobs:detail", job_id=new.pk)


@require_POST
@role_required(Capability.OPERATE)
def lane_action(request: HttpRequest, name: str, action: str) -> HttpResponse:
    lane = get_object_or_404(Lane, name=name)
    if action not in LANE_ACTIONS:
        raise Http404(f"No lane action {action!r}.")
    try:
        job = lane_job_create(lane=lane, kind=LANE_ACTIONS[action], user=request.user)
    except (JobConflict, ValidationError) as exc:
        messages.error(request, str(exc) if isinstance(exc, JobConflict) else " ".join(exc.messages))
        return redirect(request.headers.get("Referer") or "jobs:list")
    messages.success(request, f"{action.capitalize()} of lane {lane.name} queued as job #{job.pk}.")
    return redirect("jobs:detail", job_id=job.pk)


@require_POST
@role_required(Capability.OPERATE)
def node_network_check_action(request: HttpRequest, name: str) -> HttpResponse:
    node = get_object_or_404(Node, name=name)
    try:
        job = node_network_check_create(node=node, user=request.user)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
        return redirect(request.headers.get("Referer") or "jobs:list")
    messages.success(request, f"Network check of {node.name} queued as job #{job.pk}.")
    return redirect("jobs:detail", job_id=job.pk)
