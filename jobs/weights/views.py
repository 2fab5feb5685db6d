"""Model files actions from the node and lane pages: POST only, admins only (the operate
capability; a team lead's or viewer's POST is refused 403 by the same check)."""

from __future__ import annotations

from collections.abc import Callable

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.views.decorators.http import require_POST

from core.roles import Capability, role_required
from jobs.models import Job
from jobs.services import JobConflict
from jobs.weights.services import inventory_refresh_create, lane_weights_sync_create, model_download_create
from lanes.models import Lane, Node


def _start(request: HttpRequest, make: Callable[[], Job], what: str) -> HttpResponse:
    try:
        job = make()
    except (ValidationError, JobConflict) as exc:
        messages.error(request, " ".join(exc.messages) if isinstance(exc, ValidationError) else str(exc))
        return redirect(request.headers.get("Referer") or "jobs:list")
    messages.success(request, f"{what} queued as job #{job.pk}.")
    return redirect("jobs:detail", job_id=job.pk)


@require_POST
@role_required(Capability.OPERATE)
def inventory_action(request: HttpRequest, name: str) -> HttpResponse:
    node = get_object_or_404(Node, name=name)
    return _start(request, lambda: inventory_refresh_create(nodes=[node], user=request.user),
                  f"Inventory of {node.name}")


@require_POST
@role_required(Capability.OPERATE)
def download_action(request: HttpRequest, name: str) -> HttpResponse:
    node = get_object_or_404(Node, name=name)
    lane = Lane.objects.filter(name=request.POST.get("lane", "")).first()
    if lane is None:
        messages.error(request, "lane: name the lane whose image runs the download and whose HF_TOKEN it uses")
        return redirect("lanes:node_detail", name=node.name)
    return _start(request, lambda: model_download_create(
        node=node, model_id=request.POST.get("model_id", "").strip(),
        revision=request.POST.get("revision", "").strip() or "main", lane=lane, user=request.user),
        f"Download onto {node.name}")


@require_POST
@role_required(Capability.OPERATE)
def lane_sync_action(request: HttpRequest, name: str) -> HttpResponse:
    lane = get_object_or_404(Lane, name=name)
    network = request.POST.get("network", "fabric")
    limit_text = request.POST.get("bwlimit_mbps", "").strip()
    try:
        limit = float(limit_text) if limit_text else None
    except ValueError:
        messages.error(request, "bwlimit_mbps: must be a number of MB/s")
        return redirect("lanes:lane_detail", name=lane.name)
    return _start(request, lambda: lane_weights_sync_create(lane=lane, user=request.user, network=network,
                                                            bwlimit_mbps=limit),
                  f"Sync of {lane.model_id} for lane {lane.name}")
