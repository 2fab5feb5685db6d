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

from core.roles import Capability, role_required
from core.validators import whole_number
from jobs.fabric.output import MATRIX_TITLES
from jobs.fabric.watchdog import lane_watchdog_update
from jobs.models import FabricResult, JobKind, JobState
from jobs.selectors import job_list, job_log_iter, job_or_404
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

LANE_ACTIONS = {"launch": JobKind.LAUNCH, "stop": JobKind.STOP, "restart": JobKind.RESTART, "status": JobKind.STATUS}


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
    job = job_or_404(job_id)
    return render(request, "jobs/job_detail.html", {"job": job, "steps": job.steps.order_by("position")})


@role_required(Capability.VIEW)
def job_log_download(request: HttpRequest, job_id: int) -> HttpResponse:  # noqa: ARG001 (a Django view)
    job = job_or_404(job_id)

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
    job = job_or_404(job_id)
    try:
        job_cancel(job=job, user=request.user, keep_running=request.POST.get("keep_running") == "on")
        messages.info(request, f"Cancel requested for job #{job.pk}.")
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    return redirect("jobs:detail", job_id=job.pk)


@require_POST
@role_required(Capability.OPERATE)
def job_relaunch_action(request: HttpRequest, job_id: int) -> HttpResponse:
    job = job_or_404(job_id)
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
    replica = request.POST.get("replica", "")
    try:
        number = whole_number(replica)
        if replica and number is None:  # "²".isdigit() is true, and int() refuses it
            raise ValidationError({"replica": "must be a replica number"})
        params = {"replica": number} if replica else {}
        job = lane_job_create(lane=lane, kind=LANE_ACTIONS[action], user=request.user, params=params)
    except (JobConflict, ValidationError) as exc:
        messages.error(request, str(exc) if isinstance(exc, JobConflict) else " ".join(exc.messages))
        return redirect(request.headers.get("Referer") or "jobs:list")
    what = f"replica {replica} of lane {lane.name}" if replica else f"lane {lane.name}"
    messages.success(request, f"{action.capitalize()} of {what} queued as job #{job.pk}.")
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


FABRIC_ACTIONS = {"nccl-test": JobKind.NCCL_TEST, "latency-matrix": JobKind.LATENCY_MATRIX,
                  "link-bandwidth": JobKind.LINK_BANDWIDTH}


@require_POST
@role_required(Capability.OPERATE)
def fabric_action(request: HttpRequest) -> HttpResponse:
    action = request.POST.get("action", "")
    names = list(dict.fromkeys(request.POST.getlist("nodes")))
    nodes = nodes_by_name(names)
    back = request.headers.get("Referer") or "jobs:list"
    if action not in FABRIC_ACTIONS or len(nodes) != len(names):
        messages.error(request, f"action must be one of {', '.join(FABRIC_ACTIONS)}, on registered nodes")
        return redirect(back)
    try:
        job = fabric_job_create(kind=FABRIC_ACTIONS[action], nodes=[nodes[name] for name in names], user=request.user)
    except (JobConflict, ValidationError) as exc:
        messages.error(request, str(exc) if isinstance(exc, JobConflict) else " ".join(exc.messages))
        return redirect(back)
    messages.success(request, f"{job.get_kind_display()} of {', '.join(names)} queued as job #{job.pk}.")
    return redirect("jobs:detail", job_id=job.pk)


@role_required(Capability.VIEW)
def fabric_result_page(request: HttpRequest, result_id: int) -> HttpResponse:
    result = get_object_or_404(FabricResult.objects.select_related("job"), pk=result_id)
    summary = result.summary
    matrices = []
    for tool, cells in (summary.get("cells") or {}).items():
        nodes = summary.get("nodes") or []
        rows = [(source, [None if source == target else cells.get(f"{source}>{target}") for target in nodes])
                for source in nodes]
        matrices.append({"title": MATRIX_TITLES.get(tool, tool), "nodes": nodes, "rows": rows})
    return render(request, "jobs/fabric_result.html", {"result": result, "summary": summary, "matrices": matrices})


@require_POST
@role_required(Capability.OPERATE)
def lane_watchdog_action(request: HttpRequest, name: str) -> HttpResponse:
    lane = get_object_or_404(Lane, name=name)
    enabled = request.POST.get("enabled", "")
    if enabled not in ("true", "false"):
        messages.error(request, "enabled must be true or false")
    else:
        lane_watchdog_update(lane=lane, actor=request.user, data={"enabled": enabled == "true"})
        messages.success(request, f"RDMA watchdog {'on' if enabled == 'true' else 'off'} for lane {lane.name}.")
    return redirect("lanes:lane_detail", name=lane.name)
