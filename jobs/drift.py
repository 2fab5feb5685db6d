"""Revision drift: the revision a lane's engine really runs (the last launch or restart
that started it) against the lane's latest saved revision. Saving a lane changes nothing
on the Sparks until a restart applies it, and the pages must say so."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from jobs.models import Job, JobKind, JobState, StepState
from lanes.models import Lane, LaneRevision, LaneState
from lanes.selectors import current_revision
from portal.audit import audit_diff

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


def _started_an_engine(job: Job) -> bool:
    """A launch whose serve steps were all skipped (vLLM already serving) left the older
    revision running; a restart always starts one."""
    if job.kind == JobKind.RESTART:
        return True
    serve = [state for phase, state in job.steps.values_list("phase", "state") if phase == "serve"]
    return not serve or any(state != StepState.SKIPPED for state in serve)


def lane_running_job(lane: Lane) -> Job | None:
    """The succeeded launch or restart whose revision runs now (None after a stop)."""
    jobs = (Job.objects.filter(lane=lane, state=JobState.SUCCEEDED,
                               kind__in=(JobKind.LAUNCH, JobKind.RESTART, JobKind.STOP))
            .select_related("lane_revision").order_by("-finished_at", "-id"))
    for job in jobs[:50]:
        if job.kind == JobKind.STOP:
            return None
        if job.lane_revision is not None and _started_an_engine(job):
            return job
    return None


def lane_drift(lane: Lane) -> LaneDrift:
    latest = current_revision(lane)
    job = lane_running_job(lane) if lane.observed_state in RUNNING_STATES else None
    running: LaneRevision | None = job.lane_revision if job is not None else None
    if running is None:
        return LaneDrift(running=None, latest=lane.revision)
    changes: list[tuple[str, Any, Any]] = []
    if latest is not None and running.number != latest.number:
        diff = audit_diff(running.config, latest.config)
        diff.pop("revision", None)
        changes = [(key, pair[0], pair[1]) for key, pair in sorted(diff.items())]
    return LaneDrift(running=running.number, latest=lane.revision, changes=changes, job_id=job.pk if job else None)
