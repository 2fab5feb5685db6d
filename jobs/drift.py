"""Revision drift: the revision a lane's engine really runs (the last launch or restart
that started it) against the lane's latest saved revision. Saving a lane changes nothing
on the Sparks until a restart applies it, and the pages must say so."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Count, Q

from core.audit import audit_diff
from jobs.models import Job, JobKind, JobState, StepState
from lanes.models import Lane, LaneRevision, LaneState

# While the lane is in one of these states something of a revision runs on its nodes.
RUNNING_STATES = (LaneState.STARTING, LaneState.SERVING, LaneState.DEGRADED)


@dataclass(frozen=True)
class LaneDrift:
    running: int | None  # revision number the engine runs; None when nothing runs
    latest: int
    changes: list[tuple[str, Any, Any]] = field(default_factory=list)  # (field, running, latest)
    job_id: int | None = None  # the job that started the running revision

    @property
    def drifted(self) -> bool:
        return self.running is not None and self.running != self.latest

    def as_dict(self) -> dict[str, Any]:
        return {"running": self.running, "latest": self.latest, "drifted": self.drifted, "job": self.job_id,
                "changes": [{"field": f, "running": old, "latest": new} for f, old, new in self.changes]}


def status_revision(result: dict[str, Any]) -> int | None:
    """The revision a status job found running: its own, or the one every replica agrees on."""
    numbers = {part.get("running_revision") for part in result.get("replicas") or [result]}
    number = numbers.pop() if len(numbers) == 1 else None
    return number if isinstance(number, int) else None


def lanes_drift(lanes: Sequence[Lane]) -> dict[str, LaneDrift]:
    """Each lane's drift, in a fixed number of queries whatever the number of lanes (the
    lists show it on every row). The running revision is the one the last succeeded
    launch or restart started; a later succeeded stop means nothing runs, and a launch whose
    serve steps were all skipped (vLLM already serving) started nothing."""
    found = {lane.name: LaneDrift(running=None, latest=lane.revision) for lane in lanes}
    running_lanes = {lane.pk: lane for lane in lanes if lane.observed_state in RUNNING_STATES}
    if not running_lanes:
        return found
    jobs = (
        Job.objects.filter(lane_id__in=running_lanes, state=JobState.SUCCEEDED,
                           kind__in=(JobKind.LAUNCH, JobKind.RESTART, JobKind.STOP, JobKind.STATUS))
        .annotate(serve_steps=Count("steps", filter=Q(steps__phase="serve")),
                  serve_ran=Count("steps", filter=Q(steps__phase="serve") & ~Q(steps__state=StepState.SKIPPED)))
        .order_by("lane_id", "-finished_at", "-id")
        .values("id", "lane_id", "kind", "lane_revision_id", "serve_steps", "serve_ran", "result")
    )
    started: dict[int, dict[str, Any]] = {}
    decided: set[int] = set()
    for job in jobs:
        lane_id = job["lane_id"]
        if lane_id in decided:
            continue
        if job["kind"] == JobKind.STATUS:
            # A status job that read the containers' revision label (after a lost launch, the
            # only record of what runs); one that did not decides nothing.
            number = status_revision(job["result"] or {})
            if number is not None:
                started[lane_id] = {**job, "number": number}
                decided.add(lane_id)
        elif job["kind"] == JobKind.STOP:
            decided.add(lane_id)
        elif job["lane_revision_id"] is not None and (
            job["kind"] == JobKind.RESTART or not job["serve_steps"] or job["serve_ran"]
        ):
            started[lane_id] = dict(job)
            decided.add(lane_id)
    wanted = Q(pk__in=[job["lane_revision_id"] for job in started.values() if "number" not in job])
    for lane_id, start in started.items():
        wanted |= Q(lane_id=lane_id, number__in=[running_lanes[lane_id].revision, start.get("number", 0)])
    revisions = {(r.lane_id, r.number): r for r in LaneRevision.objects.filter(wanted)}
    by_id = {r.pk: r for r in revisions.values()}
    for lane_id, start in started.items():
        lane = running_lanes[lane_id]
        running = revisions.get((lane_id, start["number"])) if "number" in start else by_id[start["lane_revision_id"]]
        if running is None:
            continue
        latest = revisions.get((lane_id, lane.revision))
        changes: list[tuple[str, Any, Any]] = []
        if latest is not None and latest.number != running.number:
            diff = audit_diff(running.config, latest.config)
            diff.pop("revision", None)
            changes = [(key, pair[0], pair[1]) for key, pair in sorted(diff.items())]
        found[lane.name] = LaneDrift(running=running.number, latest=lane.revision, changes=changes, job_id=start["id"])
    return found


def lane_drift(lane: Lane) -> LaneDrift:
    return lanes_drift([lane])[lane.name]
