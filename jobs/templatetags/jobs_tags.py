"""Template tags for the lane and node pages' action buttons: the plan an admin reads
before confirming (dry run), and the lane's recent jobs."""

from __future__ import annotations

from typing import Any

from django import template

from jobs.drift import LaneDrift
from jobs.drift import lane_drift as compute_lane_drift
from jobs.kinds.lane import node_target
from jobs.models import Job
from lanes.models import Lane, LaneRevision
from lanes.plans import render_launch_plan, render_status_plan, render_stop_plan

register = template.Library()


@register.simple_tag
def lane_action_plans(lane: Lane) -> dict[str, str]:
    """action → the dry-run text (or why there is none)."""
    revision = LaneRevision.objects.filter(lane=lane).order_by("-number").first()
    if revision is None:
        return dict.fromkeys(("launch", "stop", "restart", "status"), "This lane has no saved revision yet.")
    names = list(revision.config.get("nodes") or [n.name for n in lane.ranked_nodes()])
    nodes = {n.name: n for n in lane.nodes.all()}
    targets = [node_target(nodes[name]) for name in names if name in nodes]
    plans: dict[str, str] = {}
    for action, renderer in (("launch", render_launch_plan), ("stop", render_stop_plan),
                             ("status", render_status_plan)):
        try:
            plans[action] = renderer(revision.config, targets).render()
        except (ValueError, KeyError) as exc:
            plans[action] = f"The plan cannot be rendered: {exc}"
    plans["restart"] = plans["stop"] + "\n(then)\n\n" + plans["launch"]
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
def lane_drift(lane: Lane) -> LaneDrift:
    """What the lane's engine runs against its latest saved revision."""
    return compute_lane_drift(lane)
