"""Starting the model files jobs (pages and API call these, behind the operate capability:
only admins move weights). Each names a bad input by its field; a transfer is audited."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError

from core.audit import audit_record
from core.roles import UserLike
from jobs.models import Job, JobKind
from jobs.services import job_create
from lanes.model_files import model_presence
from lanes.models import Lane, Node


def named_nodes(names: list[str], field: str) -> list[Node]:
    by_name = {node.name: node for node in Node.objects.filter(name__in=names)}
    unknown = [name for name in names if name not in by_name]
    if unknown:
        raise ValidationError({field: f"no node named {', '.join(unknown)}"})
    return [by_name[name] for name in names]


def inventory_refresh_create(*, nodes: list[Node], user: UserLike | None) -> Job:
    if not nodes:
        raise ValidationError({"nodes": "give at least one node"})
    return job_create(kind=JobKind.INVENTORY, user=user, nodes=nodes)


def model_download_create(*, node: Node, model_id: str, user: UserLike | None, revision: str = "main",
                          include: list[str] | None = None, lane: Lane | None = None, image: str = "") -> Job:
    params: dict[str, Any] = {"model_id": model_id, "revision": revision, "include": include or []}
    if image or lane is None:
        params["image"] = image or None
    if lane is None and not image:
        raise ValidationError({"image": "give the image to run the download in (one with huggingface_hub), "
                                        "or start the download from a lane"})
    job = job_create(kind=JobKind.MODEL_DOWNLOAD, user=user, nodes=[node], lane=lane, params=params)
    audit_record(actor=user, action="model.download", obj=node, after={"job": job.pk, **params})
    return job


def model_sync_create(*, model_id: str, source: str, targets: list[str], user: UserLike | None,
                      revision: str = "main", network: str = "fabric", lane: Lane | None = None,
                      bwlimit_mbps: float | None = None) -> Job:
    if not targets:
        raise ValidationError({"targets": "give at least one node to copy to"})
    if source in targets:
        raise ValidationError({"targets": f"{source} is the source: it cannot also be a target"})
    nodes = named_nodes([source], "source") + named_nodes(targets, "targets")
    params: dict[str, Any] = {"model_id": model_id, "revision": revision, "source": source, "targets": targets,
                              "network": network, "bwlimit_mbps": bwlimit_mbps}
    job = job_create(kind=JobKind.MODEL_SYNC, user=user, nodes=nodes, lane=lane, params=params)
    audit_record(actor=user, action="model.sync", obj=nodes[0], after={"job": job.pk, **params})
    return job


def image_sync_create(*, image: str, targets: list[str], user: UserLike | None, source: str = "",
                      network: str = "fabric", lane: Lane | None = None) -> Job:
    if not targets:
        raise ValidationError({"targets": "give at least one node"})
    nodes = (named_nodes([source], "source") if source else []) + named_nodes([t for t in targets if t != source], "targets")
    params: dict[str, Any] = {"image": image, "targets": targets, "network": network}
    if source:
        params["source"] = source
    job = job_create(kind=JobKind.IMAGE_SYNC, user=user, nodes=nodes, lane=lane, params=params)
    audit_record(actor=user, action="image.sync", obj=nodes[0], after={"job": job.pk, **params})
    return job


def lane_weights_gaps(lane: Lane) -> tuple[str | None, list[str]]:
    """From the inventories: a node holding the lane's model whole (a rank first), and the
    ranks that lack it. What the one-click sync on a lane's page starts."""
    ranks = [member.node for member in lane.members.select_related("node").order_by("replica", "rank")]
    lacking = [node.name for node in ranks
               if model_presence(node.inventory or {}, lane.model_id, lane.model_revision)[0] != "complete"]
    holders = [node for node in ranks if node.name not in lacking] + list(
        Node.objects.exclude(pk__in=[n.pk for n in ranks]).order_by("name"))
    source = next((node.name for node in holders
                   if model_presence(node.inventory or {}, lane.model_id, lane.model_revision)[0] == "complete"), None)
    return source, lacking


def lane_weights_sync_create(*, lane: Lane, user: UserLike | None, network: str = "fabric",
                             bwlimit_mbps: float | None = None) -> Job:
    source, lacking = lane_weights_gaps(lane)
    if not lacking:
        raise ValidationError({"lane": f"every rank of {lane.name} already holds {lane.model_id} (by the last "
                                       "inventory): refresh the inventory if a launch still refuses"})
    if source is None:
        raise ValidationError({"lane": f"no node holds {lane.model_id} whole (by the last inventory): download it "
                                       "onto one first"})
    return model_sync_create(model_id=lane.model_id, revision=lane.model_revision or "main", source=source,
                             targets=lacking, user=user, network=network, lane=lane, bwlimit_mbps=bwlimit_mbps)
