"""Model files API (/api/model-files/...): every role reads the inventories; only admins
(the operate capability) start an inventory, a download, a sync or an image copy."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from ninja import Field, Router, Schema, Status
from pydantic import field_validator

from core.api import ErrorOut, InSchema, can_operate
from core.validators import NoControlCharacters, has_control_characters
from jobs.schemas import JobOut
from jobs.services import JobConflict
from jobs.weights.services import (
    image_sync_create,
    inventory_refresh_create,
    lane_weights_sync_create,
    model_download_create,
    model_sync_create,
    named_nodes,
)
from lanes.models import Lane, Node

router = Router(tags=["model files"])


class InventoryOut(Schema):
    node: str
    inventory: dict[str, Any]
    inventory_at: str | None


class TextIn(InSchema):
    """Every text here names a node, a file or an image: a NUL or control character is refused
    (422 naming the field) before it reaches a query or a shell."""

    @field_validator("*", mode="before")
    @classmethod
    def no_control_characters(cls, value: Any) -> Any:
        if any(isinstance(item, str) and has_control_characters(item) for item in
               (value if isinstance(value, list) else [value])):
            raise ValueError(NoControlCharacters.message)
        return value


class InventoryIn(TextIn):
    nodes: list[str] = Field(..., min_length=1, max_length=64)


class DownloadIn(TextIn):
    node: str = Field(..., max_length=63)
    model_id: str = Field(..., max_length=200)
    revision: str = Field("main", max_length=100)
    include: list[str] = Field([], max_length=20)
    lane: str = Field("", max_length=63, description="the lane whose image runs the client and whose HF_TOKEN it uses")
    image: str = Field("", max_length=300)


class SyncIn(TextIn):
    model_id: str = Field(..., max_length=200)
    revision: str = Field("main", max_length=100)
    source: str = Field(..., max_length=63)
    targets: list[str] = Field(..., min_length=1, max_length=64)
    network: str = Field("fabric", description="fabric (the network report's IPs) or management")
    bwlimit_mbps: float | None = None


class LaneSyncIn(TextIn):
    network: str = "fabric"
    bwlimit_mbps: float | None = None


class ImageSyncIn(TextIn):
    image: str = Field(..., max_length=300)
    targets: list[str] = Field(..., min_length=1, max_length=64)
    source: str = Field("", max_length=63, description="copy from this node (docker save | docker load); empty: pull")
    network: str = "fabric"


@router.get("/model-files/nodes", response=list[InventoryOut])
def inventories(request: HttpRequest) -> Any:  # noqa: ARG001 (a ninja view)
    return [{"node": node.name, "inventory": node.inventory or {},
             "inventory_at": node.inventory_at.isoformat() if node.inventory_at else None}
            for node in Node.objects.order_by("name")]


def _created(make: Any) -> Any:
    try:
        return Status(201, make())
    except JobConflict as exc:
        return Status(409, {"detail": str(exc)})


@router.post("/model-files/inventory", response={201: JobOut, 409: ErrorOut}, auth=can_operate)
def inventory(request: HttpRequest, payload: InventoryIn) -> Any:
    return _created(lambda: inventory_refresh_create(nodes=named_nodes(payload.nodes, "nodes"), user=request.user))


@router.post("/model-files/download", response={201: JobOut, 409: ErrorOut}, auth=can_operate)
def download(request: HttpRequest, payload: DownloadIn) -> Any:
    node = named_nodes([payload.node], "node")[0]  # a body field: 422 naming it, not a 404
    lane = Lane.objects.filter(name=payload.lane).first() if payload.lane else None
    if payload.lane and lane is None:
        raise ValidationError({"lane": f"no lane named {payload.lane}"})
    return _created(lambda: model_download_create(node=node, model_id=payload.model_id, revision=payload.revision,
                                                  include=payload.include, lane=lane, image=payload.image,
                                                  user=request.user))


@router.post("/model-files/sync", response={201: JobOut, 409: ErrorOut}, auth=can_operate)
def sync(request: HttpRequest, payload: SyncIn) -> Any:
    return _created(lambda: model_sync_create(model_id=payload.model_id, revision=payload.revision,
                                              source=payload.source, targets=payload.targets, network=payload.network,
                                              bwlimit_mbps=payload.bwlimit_mbps, user=request.user))


@router.post("/model-files/lanes/{name}/sync", response={201: JobOut, 409: ErrorOut}, auth=can_operate)
def lane_sync(request: HttpRequest, name: str, payload: LaneSyncIn | None = None) -> Any:
    lane = get_object_or_404(Lane, name=name)
    return _created(lambda: lane_weights_sync_create(lane=lane, user=request.user,
                                                     network=payload.network if payload else "fabric",
                                                     bwlimit_mbps=payload.bwlimit_mbps if payload else None))


@router.post("/model-files/images/sync", response={201: JobOut, 409: ErrorOut}, auth=can_operate)
def image_sync(request: HttpRequest, payload: ImageSyncIn) -> Any:
    return _created(lambda: image_sync_create(image=payload.image, targets=payload.targets, source=payload.source,
                                              network=payload.network, user=request.user))
