"""Node and lane pages: every role reads, admins change (the buttons are hidden from the
others and their POSTs refused with 403 by the same capability check)."""

from __future__ import annotations

import time
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST
from redis.exceptions import RedisError

from core.models import AuditEvent
from core.roles import Capability, role_required, user_can
from core.validators import whole_number
from lanes.crypto import host_key_fingerprint
from lanes.forms import LaneForm, NodeForm, apply_service_errors
from lanes.lane_services import lane_create, lane_delete, lane_rule_errors, lane_update
from lanes.memory import NodeBudget
from lanes.model_files import lane_files_rows, node_files_view
from lanes.models import Lane, LaneState, NodeState, RestartPolicy
from lanes.node_picker import node_candidates
from lanes.node_services import node_confirm_host_key, node_create, node_delete, node_pin_host_key, node_update
from lanes.plan_shell import human_bytes
from lanes.replica_health import node_memory_seen
from lanes.restart_policy import lane_set_restart_policy
from lanes.rules import LaneCheck
from lanes.selectors import (
    lane_check,
    lane_checks,
    lane_get,
    lane_guardian_view,
    lane_list,
    lane_plans,
    lane_replica_views,
    lane_revisions,
    lanes_on,
    node_get,
    node_list,
    node_memory_use,
    plans_text,
)

PLAN_ACTIONS = ("launch", "stop", "status")


def _results_by_field(check: LaneCheck) -> dict[str, list[Any]]:
    grouped: dict[str, list[Any]] = {}
    for result in check.results:
        if result.level != "error":
            grouped.setdefault(result.field, []).append(result)
    return grouped


# A budget is compared with what its nodes report only while an engine holds the memory, and
# with a reading the guardian took lately.
RUNNING_STATES = (LaneState.SERVING, LaneState.DEGRADED, LaneState.STALLED)
FRESH_READING_S = 120.0


def _budget_row(budget: NodeBudget, seen: dict[str, Any] | None = None) -> dict[str, Any]:
    seen = seen or {}
    fresh = seen.get("available_gib") is not None and time.time() - float(seen.get("at") or 0) < FRESH_READING_S
    available = float(seen["available_gib"]) if fresh else None
    shortfall = (budget.reported_shortfall(available, margin_gib=settings.LANES_BUDGET_MARGIN_GIB)
                 if available is not None else "")
    others = sum(gib for _, gib in budget.other_lanes)
    scale = max(budget.memory_gib, budget.used_gib)  # an overflowing budget still fits the bar
    return {
        "node": budget.node, "memory_gib": budget.memory_gib, "used_gib": budget.used_gib,
        "free_gib": budget.free_gib, "weights_gib": budget.weights_gib, "kv_gib": budget.kv_gib,
        "overhead_gib": budget.overhead_gib, "reserve_gib": budget.reserve_gib, "others_gib": others,
        "reported_in_use_gib": budget.memory_gib - available if available is not None else None,
        "shortfall": shortfall,
        **{f"{key}_pct": round(100 * value / scale, 1) for key, value in (
            ("weights", budget.weights_gib), ("kv", budget.kv_gib), ("overhead", budget.overhead_gib),
            ("reserve", budget.reserve_gib), ("others", others))},
    }


# ---------------------------------------------------------------- nodes


@role_required(Capability.VIEW)
def node_list_page(request: HttpRequest) -> HttpResponse:
    nodes = list(node_list())
    lanes = lanes_on(nodes)
    rows = [(node, node_memory_use(node, lanes=lanes)) for node in nodes]
    return render(request, "lanes/node_list.html", {"rows": rows, "node_states": NodeState.choices})


@role_required(Capability.VIEW)
def node_detail_page(request: HttpRequest, name: str) -> HttpResponse:
    node = node_get(name)
    uses = node_memory_use(node)
    used = sum(use.gib for use in uses) + node.os_reserve_gib
    return render(request, "lanes/node_detail.html", {
        "node": node, "uses": uses, "used_gib": round(used, 1),
        "reserve_percent": round(100 * node.os_reserve_gib / node.memory_gib, 1),
        "free_gib": round(node.memory_gib - used, 1),
        "host_key_fingerprint": host_key_fingerprint(node.ssh_host_key),
        "pending_fingerprint": host_key_fingerprint(node.ssh_host_key_pending),
        "report": node.network_report or {},
        "files": node_files_view(node.inventory or {}),
        "events": AuditEvent.objects.filter(object_type="lanes.node", object_id=str(node.pk))[:20],
    })


@role_required(Capability.OPERATE)
def node_create_page(request: HttpRequest) -> HttpResponse:
    form = NodeForm(request.POST or None)
    form.fields.pop("clear_private_key")  # a new node has no stored key to remove
    form.fields.pop("clear_transfer_key")
    if request.method == "POST" and form.is_valid():
        data, private_key, _ = form.service_data()
        try:
            node = node_create(actor=request.user, data=data, private_key=private_key)
        except ValidationError as exc:
            apply_service_errors(form, exc)
        else:
            messages.success(request, f"Node {node.name} registered.")
            return redirect("lanes:node_detail", name=node.name)
    return render(request, "lanes/node_form.html", {"form": form, "node": None})


@role_required(Capability.OPERATE)
def node_edit_page(request: HttpRequest, name: str) -> HttpResponse:
    node = node_get(name)
    initial = {key: getattr(node, key) for key in NodeForm.base_fields if hasattr(node, key)}
    initial.update(labels=", ".join(node.labels or []), ssh_private_key="", transfer_key="")
    form = NodeForm(request.POST or None, initial=initial)
    if request.method == "POST" and form.is_valid():
        data, private_key, clear = form.service_data()
        try:
            node = node_update(node=node, actor=request.user, data=data, private_key=private_key,
                               clear_private_key=clear)
        except ValidationError as exc:
            apply_service_errors(form, exc)
        else:
            messages.success(request, f"Node {node.name} saved.")
            return redirect("lanes:node_detail", name=node.name)
    return render(request, "lanes/node_form.html", {"form": form, "node": node})


@require_POST
@role_required(Capability.OPERATE)
def node_delete_page(request: HttpRequest, name: str) -> HttpResponse:
    node = node_get(name)
    try:
        node_delete(node=node, actor=request.user)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
        return redirect("lanes:node_detail", name=name)
    messages.success(request, f"Node {name} removed.")
    return redirect("lanes:node_list")


@require_POST
@role_required(Capability.OPERATE)
def node_host_key_page(request: HttpRequest, name: str) -> HttpResponse:
    """Pin an entered host key line, or confirm the one a capture job saw."""
    node = node_get(name)
    try:
        if request.POST.get("confirm_captured"):
            node_confirm_host_key(node=node, actor=request.user)
        else:
            node_pin_host_key(node=node, host_key_line=request.POST.get("host_key_line", ""), actor=request.user)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    else:
        messages.success(request, f"Host key of {name} pinned.")
    return redirect("lanes:node_detail", name=name)


# ---------------------------------------------------------------- lanes


@role_required(Capability.VIEW)
def lane_list_page(request: HttpRequest) -> HttpResponse:
    rows = lane_checks(list(lane_list()))
    return render(request, "lanes/lane_list.html", {
        "rows": rows, "lane_states": LaneState.choices, "node_names": node_list().values_list("name", flat=True),
    })


def _lane_budget_rows(lane: Lane, check: LaneCheck) -> list[dict[str, Any]]:
    if lane.observed_state not in RUNNING_STATES:
        return [_budget_row(budget) for budget in check.budgets]
    pks = {node.name: node.pk for node in lane.ranked_nodes()}
    try:
        seen = {name: node_memory_seen(pk) for name, pk in pks.items()}
    except RedisError:
        seen = {}
    return [_budget_row(budget, seen.get(budget.node)) for budget in check.budgets]


@role_required(Capability.VIEW)
def lane_detail_page(request: HttpRequest, name: str) -> HttpResponse:
    lane = lane_get(name)
    action = request.GET.get("plan", "launch")
    action = action if action in PLAN_ACTIONS else "launch"
    try:
        plan_text, plan_error = plans_text(lane_plans(lane, action)), ""
    except ValueError as exc:
        plan_text, plan_error = "", str(exc)
    check = lane_check(lane)
    return render(request, "lanes/lane_detail.html", {
        "lane": lane, "check": check, "budgets": _lane_budget_rows(lane, check),
        "kv_fixed": human_bytes(lane.kv_cache_memory_bytes) if lane.kv_cache_memory_bytes else "",
        "kv_tokens": f"{check.kv_pool.tokens:,}" if check.kv_pool and check.kv_pool.tokens else "", "nodes": lane.ranked_nodes(), "plan_action": action,
        "plan_actions": PLAN_ACTIONS, "plan_text": plan_text, "plan_error": plan_error,
        "replicas": lane_replica_views(lane), "replica_actions": ("launch", "stop", "restart", "status"),
        "revisions": lane_revisions(lane),
        "weights": lane_files_rows(lane.model_id, lane.model_revision, lane.image,
                                   [(node.name, node.inventory or {}) for node in lane.ranked_nodes()]),
        "events": AuditEvent.objects.filter(object_type="lanes.lane", object_id=str(lane.pk))[:20],
        "guardian": lane_guardian_view(lane), "restart_policies": RestartPolicy.choices,
        # The fair queue's waits (filled and kept live by the dashboard socket): per key for operators.
        "fair_by_key": user_can(request.user, Capability.OPERATE), "fair_window_s": settings.METRICS_PERCENTILE_WINDOW_S,
    })


@require_POST
@role_required(Capability.OPERATE)
def lane_restart_policy_page(request: HttpRequest, name: str) -> HttpResponse:
    lane = lane_get(name)
    data: dict[str, Any] = {"restart_policy": request.POST.get("restart_policy", "")}
    for field in ("restart_limit", "restart_window_s", "restart_backoff_s"):
        text = request.POST.get(field, "").strip()
        number = whole_number(text)
        data[field] = text if number is None else number
    try:
        lane_set_restart_policy(lane=lane, actor=request.user, data=data)
    except ValidationError as exc:
        for field, errors in exc.message_dict.items():
            messages.error(request, f"{field}: {' '.join(errors)}")
    else:
        messages.success(request, f"Restart policy of {name}: {lane.restart_policy}.")
    return redirect("lanes:lane_detail", name=name)


def _lane_form_page(request: HttpRequest, lane: Lane | None) -> HttpResponse:
    initial = LaneForm.initial_for(lane) if lane else {}
    form = LaneForm(request.POST or None, initial=initial, secrets_set=list(lane.secret_env) if lane else [])
    if request.method == "POST" and form.is_valid():
        data, replicas = form.service_data(lane)
        try:
            if lane is None:
                saved = lane_create(actor=request.user, data=data, replicas=replicas)
            else:
                saved = lane_update(lane=lane, actor=request.user, data=data, replicas=replicas)
        except ValidationError as exc:
            apply_service_errors(form, exc)
        else:
            for warning in lane_check(saved).warnings:
                messages.warning(request, warning.message)
            messages.success(request, f"Lane {saved.name} saved as revision {saved.revision}.")
            return redirect("lanes:lane_detail", name=saved.name)
    elif request.method == "POST":
        # Field errors, and on the same submit every rule the valid fields decide (memory,
        # TP and nodes, ports...): one submit shows all that saving would refuse.
        valid, known_replicas = form.valid_service_data(lane)
        rule_errors = lane_rule_errors(lane=lane, data=valid, replicas=known_replicas, unknown=list(form.errors))
        if rule_errors:
            apply_service_errors(form, ValidationError(rule_errors))
    notes = _results_by_field(lane_check(lane)) if lane else {}
    groups = [
        {"key": key, "title": title, "has_errors": any(form[name].errors for name in names),
         "fields": [(form[name], notes.get(name, [])) for name in names]}
        for key, title, names in LaneForm.GROUPS
    ]
    return render(request, "lanes/lane_form.html", {
        "form": form, "lane": lane, "groups": groups, "candidates": node_candidates(lane),
    })


@role_required(Capability.OPERATE)
def lane_create_page(request: HttpRequest) -> HttpResponse:
    return _lane_form_page(request, None)


@role_required(Capability.OPERATE)
def lane_edit_page(request: HttpRequest, name: str) -> HttpResponse:
    return _lane_form_page(request, lane_get(name))


@require_POST
@role_required(Capability.OPERATE)
def lane_delete_page(request: HttpRequest, name: str) -> HttpResponse:
    try:
        lane_delete(lane=lane_get(name), actor=request.user)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
        return redirect("lanes:lane_detail", name=name)
    messages.success(request, f"Lane {name} deleted.")
    return redirect("lanes:lane_list")
