"""Management API for nodes and lanes (/api/nodes, /api/lanes): every role reads, admins
write. Rule failures leave the services as ValidationError and become 422 naming each
field (core.api)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Literal

from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from ninja import Router, Status

from core.api import can_operate
from lanes import schemas
from lanes.crypto import host_key_fingerprint
from lanes.lane_services import lane_create, lane_delete, lane_update
from lanes.memory import parse_memory_bytes
from lanes.models import Lane, Node
from lanes.node_services import node_create, node_delete, node_pin_host_key, node_update
from lanes.rules import LaneCheck
from lanes.selectors import (
    lane_check,
    lane_checks,
    lane_get,
    lane_list,
    lane_plans,
    lane_replica_views,
    lane_revisions,
    node_get,
    node_lane_names,
    node_list,
    plans_text,
)

router = Router(tags=["lanes"])


def node_out(node: Node) -> dict[str, Any]:
    data = {key: getattr(node, key) for key in (
        "name", "address", "transport", "ssh_port", "ssh_user", "ssh_host_key", "ssh_host_key_pending",
        "runtime_command", "sim_dir", "memory_gib", "os_reserve_gib", "labels", "state", "last_seen",
        "network_report", "network_checked_at")}
    data["has_private_key"] = bool(node.ssh_private_key_encrypted)
    data["ssh_host_key_fingerprint"] = host_key_fingerprint(node.ssh_host_key)
    data["lanes"] = node_lane_names(node)
    return data


def lane_out(lane: Lane, check: LaneCheck | None = None) -> dict[str, Any]:
    check = check or lane_check(lane)
    data = {key: getattr(lane, key) for key in schemas.LaneOut.model_fields if hasattr(lane, key)}
    ranked = lane.ranked_nodes()
    data.update(
        nodes=[node.name for node in ranked],
        fallback=lane.fallback.name if lane.fallback else None,
        base_url=lane.base_url() if ranked else "",
        rules=[asdict(result) for result in check.results],
        budgets=[
            {**{k: getattr(b, k) for k in ("node", "memory_gib", "weights_gib", "kv_gib", "overhead_gib",
                                             "reserve_gib", "free_gib")},
             "other_lanes_gib": sum(gib for _, gib in b.other_lanes)}
            for b in check.budgets
        ],
        kv_pool=asdict(check.kv_pool) if check.kv_pool else None,
        secret_env={name: "set" for name in sorted(lane.secret_env or {})},
        replicas=lane_replica_views(lane),
    )
    return data


def _node_data(payload: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """A node payload → (the node's fields, its private key): the key is never a field."""
    return payload, payload.pop("ssh_private_key", None)


def _lane_data(payload: dict[str, Any]) -> tuple[dict[str, Any], list[str] | None, list[dict[str, Any]] | None]:
    """A lane payload → (the lane's fields, replica 0's ranked node names, every replica);
    sizes such as "11G" in bytes."""
    if "kv_cache_memory_bytes" in payload:
        try:
            payload["kv_cache_memory_bytes"] = parse_memory_bytes(payload["kv_cache_memory_bytes"])
        except ValueError as exc:
            raise ValidationError({"kv_cache_memory_bytes": [str(exc)]}) from None
    return payload, payload.pop("nodes", None), payload.pop("replicas", None)


# ---------------------------------------------------------------- nodes


@router.get("/nodes", response=list[schemas.NodeOut])
def list_nodes(request: HttpRequest) -> list[dict[str, Any]]:
    return [node_out(node) for node in node_list()]


@router.post("/nodes", response={201: schemas.NodeOut}, auth=can_operate)
def create_node(request: HttpRequest, payload: schemas.NodeIn) -> Status[dict[str, Any]]:
    data, private_key = _node_data(payload.dict())
    node = node_create(actor=request.user, data=data, private_key=private_key)
    return Status(201, node_out(node))


@router.get("/nodes/{name}", response=schemas.NodeOut)
def get_node(request: HttpRequest, name: str) -> dict[str, Any]:
    return node_out(node_get(name))


@router.patch("/nodes/{name}", response=schemas.NodeOut, auth=can_operate)
def update_node(request: HttpRequest, name: str, payload: schemas.NodePatch) -> dict[str, Any]:
    data, private_key = _node_data(payload.dict(exclude_unset=True))
    clear = data.pop("clear_private_key", False)
    node = node_update(node=node_get(name), actor=request.user, data=data, private_key=private_key,
                       clear_private_key=clear)
    return node_out(node_get(node.name))


@router.delete("/nodes/{name}", response={204: None}, auth=can_operate)
def delete_node(request: HttpRequest, name: str) -> HttpResponse:
    node_delete(node=node_get(name), actor=request.user)
    return HttpResponse(status=204)


@router.post("/nodes/{name}/host-key", response=schemas.NodeOut, auth=can_operate)
def pin_host_key(request: HttpRequest, name: str, payload: schemas.HostKeyIn) -> dict[str, Any]:
    node = node_pin_host_key(node=node_get(name), host_key_line=payload.host_key_line, actor=request.user)
    return node_out(node_get(node.name))


# ---------------------------------------------------------------- lanes


@router.get("/lanes", response=list[schemas.LaneOut])
def list_lanes(request: HttpRequest) -> list[dict[str, Any]]:
    return [lane_out(lane, check) for lane, check in lane_checks(list(lane_list()))]


@router.post("/lanes", response={201: schemas.LaneOut}, auth=can_operate)
def create_lane(request: HttpRequest, payload: schemas.LaneIn) -> Status[dict[str, Any]]:
    data, nodes, replicas = _lane_data(payload.dict())
    lane = lane_create(actor=request.user, data=data, nodes=nodes or [], replicas=replicas)
    return Status(201, lane_out(lane))


@router.get("/lanes/{name}", response=schemas.LaneOut)
def get_lane(request: HttpRequest, name: str) -> dict[str, Any]:
    return lane_out(lane_get(name))


@router.patch("/lanes/{name}", response=schemas.LaneOut, auth=can_operate)
def update_lane(request: HttpRequest, name: str, payload: schemas.LanePatch) -> dict[str, Any]:
    data, nodes, replicas = _lane_data(payload.dict(exclude_unset=True))
    lane = lane_update(lane=lane_get(name), actor=request.user, data=data, nodes=nodes, replicas=replicas)
    return lane_out(lane)


@router.delete("/lanes/{name}", response={204: None}, auth=can_operate)
def delete_lane(request: HttpRequest, name: str) -> HttpResponse:
    lane_delete(lane=lane_get(name), actor=request.user)
    return HttpResponse(status=204)


@router.get("/lanes/{name}/revisions", response=list[schemas.RevisionOut])
def list_revisions(request: HttpRequest, name: str) -> list[dict[str, Any]]:
    return [
        {"number": view.revision.number, "created_at": view.revision.created_at,
         "created_by": view.revision.created_by.get_username() if view.revision.created_by else None,
         "config": view.revision.config, "changes": {key: [old, new] for key, old, new in view.changes}}
        for view in lane_revisions(lane_get(name))
    ]


@router.get("/lanes/{name}/plan", response=schemas.PlanOut)
def preview_plan(
    request: HttpRequest, name: str, action: Literal["launch", "stop", "status"] = "launch"
) -> dict[str, Any]:
    """The dry run: the exact commands a launch, stop or status job would run now, for every replica."""
    try:
        plans = lane_plans(lane_get(name), action)
    except ValueError as exc:
        raise ValidationError({"nodes": [str(exc)]}) from None
    plan = plans[0]
    return {"lane": plan.lane, "revision": plan.revision, "action": plan.action, "warnings": list(plan.warnings),
            "steps": [asdict(step) for step in plan.steps], "text": plans_text(plans),
            "replicas": [{"replica": index, "warnings": list(each.warnings), "text": each.render(),
                          "steps": [asdict(step) for step in each.steps]} for index, each in enumerate(plans)]}
