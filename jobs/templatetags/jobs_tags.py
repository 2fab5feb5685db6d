"""Template tags for the lane and node pages' action buttons: the plan an admin reads
before confirming (dry run), and the lane's recent jobs."""

from __future__ import annotations

from typing import Any

from django import template

from jobs.models import Job
from lanes.models import Lane
from lanes.selectors import current_revision, lane_plan

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
            plans[action] = lane_plan(lane, action, revision).render()
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
