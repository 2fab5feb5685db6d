"""A benchmark job's run row: made when the sweep is started from the page or the service,
or by the job itself when it was relaunched from the job page."""

from __future__ import annotations

from benchmarks.models import BenchmarkRun
from benchmarks.params import plan_levels
from jobs.models import Job


def run_for_job(job: Job) -> BenchmarkRun:
    run = BenchmarkRun.objects.select_related("lane").filter(job=job).first()
    if run is not None:
        return run
    revision = job.lane_revision
    return BenchmarkRun.objects.create(
        job=job, lane=job.lane, lane_name=job.lane.name if job.lane else "", lane_revision=revision,
        revision_number=revision.number if revision else None, label=job.params.get("label", ""),
        params=job.params, levels_planned=len(plan_levels(job.params)),
    )
