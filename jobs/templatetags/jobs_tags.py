"""Template tags for the lane and node pages' action buttons: the plan an admin reads
before confirming (dry run), and the lane's recent jobs."""

from __future__ import annotations

from typing import Any

from django import template

from jobs.drift import LaneDrift, lanes_drift
from jobs.drift import lane_drift as compute_lane_drift
from jobs.fabric.watchdog import lane_head_worker_pairs, lane_watchdog_get
from jobs.models import FabricResult, Job, LaneWatchdog
from jobs.results import fabric_history
from lanes.models import Lane, Node
from lanes.selectors import current_revision, lane_plans, plans_text

register = template.Library()


@register.simple_tag
def lane_action_plans(lane: Lane) -> dict[str, str]:
    """action → the dry-run text (or why there is none)."""
    revision = current_revision(lane)
    if revision is None:
        return dict.fromkeys(("launch", "stop", "restart", "status"), "This lane has no saved revision yet.")
    plans: dict[str, str] = {}
    for action in ("launch", "stop", "status"):
        try:
            plans[action] = plans_text(lane_plans(lane, action, revision))
        except (ValueError, KeyError) as exc:
            plans[action] = f"The plan cannot be rendered: {exc}"
    plans["restart"] = plans["stop"] + "\n(then)\n\n" + plans["launch"]
    if "replicas" in revision.config:
        plans["restart"] = ("Rolling: one replica at a time (drained, stopped, launched, healthy), "
                            "so the lane keeps serving.\n\n" + plans["restart"])
    return plans


@register.simple_tag
def recent_jobs(lane: Lane | None = None, node: Any = None, limit: int = 5) -> list[Job]:
    jobs = Job.objects.select_related("created_by").order_by("-created_at")
    if lane is not None:
        jobs = jobs.filter(lane=lane)
    if node is not None:
        jobs = jobs.filter(nodes=node)
    return list(jobs[:limit])


@register.simple_tag
def fabric_results(node: Node, limit: int = 10) -> list[FabricResult]:
    """The node's fabric results, newest first: a regression shows as a drop down the list."""
    return list(fabric_history(node=node, limit=limit))


@register.simple_tag
def fabric_peers(node: Node) -> list[str]:
    return list(Node.objects.exclude(pk=node.pk).order_by("name").values_list("name", flat=True))


@register.simple_tag
def lane_watchdog(lane: Lane) -> LaneWatchdog:
    return lane_watchdog_get(lane)


@register.simple_tag
def lane_has_links(lane: Lane) -> bool:
    """Whether some replica spans nodes: only then has the RDMA watchdog a link to measure
    (the rule the watchdog itself follows: watched_lanes)."""
    return bool(lane_head_worker_pairs(lane))


@register.simple_tag
def lane_drift(lane: Lane) -> LaneDrift:
    """What the lane's engine runs against its latest saved revision."""
    return compute_lane_drift(lane)


@register.simple_tag
def lane_drifts(items: Any) -> dict[str, LaneDrift]:
    """Every listed lane's drift at once (lanes, or rows whose first item is a lane)."""
    return lanes_drift([item[0] if isinstance(item, tuple) else item for item in items])


@register.filter
def drift_for(drifts: dict[str, LaneDrift], lane: Lane) -> LaneDrift | None:
    return drifts.get(lane.name)
