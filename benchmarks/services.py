"""Starting a benchmark: the job and its run row in one transaction, on the lane's current
revision, so every run records what it measured."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AnonymousUser
from django.core.exceptions import ValidationError
from django.db import transaction

from benchmarks.params import validate_benchmark_params
from benchmarks.records import run_for_job
from benchmarks.selectors import MAX_REPLAY_REQUESTS, replay_trace
from core.audit import audit_record
from core.roles import UserLike
from gateway.models import ApiKey
from gateway.services import api_key_revoke
from jobs.models import Job, JobKind
from jobs.services import job_create, lane_current_revision
from lanes.models import Lane
from lanes.selectors import lane_named


@transaction.atomic
def benchmark_start(*, lane: Lane, user: UserLike | None, params: dict[str, Any]) -> Job:
    revision = lane_current_revision(lane)
    nodes = lane.ranked_nodes()
    if not nodes:
        raise ValidationError({"lane": f"lane {lane.name} has no nodes"})
    _check_replay_window(params)
    job = job_create(kind=JobKind.BENCHMARK, user=user, nodes=nodes, lane=lane, revision=revision, params=params)
    run_for_job(job)
    audit_record(actor=user, action="benchmark.start", obj=lane, after={"job": job.pk, "revision": revision.number})
    return job


def _check_replay_window(params: dict[str, Any]) -> None:
    """A replay's window must hold something to send, and not more than a level can."""
    clean, errors = validate_benchmark_params(params)
    if errors or not clean.get("replay"):
        return  # job_create refuses bad parameters, each naming its field
    count = len(replay_trace(clean["replay"]))
    if count == 0:
        raise ValidationError({"replay": "the window holds no answered request with its arrival time and token "
                                         "counts (rows logged before arrival times were kept have none)"})
    if count > MAX_REPLAY_REQUESTS:
        raise ValidationError({"replay": f"the window holds more than {MAX_REPLAY_REQUESTS:,} requests: "
                                         "pick a shorter one"})


def benchmark_start_named(*, lane_name: Any, user: UserLike | None, params: dict[str, Any]) -> Job:
    """The page's and the API's entry: the lane by its name (refused naming the field), then
    benchmark_start, which validates every parameter (jobs.params → benchmarks.params)."""
    lane = lane_named(lane_name)
    if lane is None:
        raise ValidationError({"lane": "pick a lane" if not lane_name else "no lane of that name"})
    return benchmark_start(lane=lane, user=user, params=params)


def benchmark_relaunch(job: Job, user: UserLike | None) -> Job:
    """Relaunch (jobs/registry.py): the same sweep on the lane's current revision, started
    like the first (its run row, its benchmark.start event)."""
    if job.lane is None:
        raise ValidationError({"job": f"job #{job.pk}'s lane no longer exists"})
    params = {key: value for key, value in (job.params or {}).items() if key != "nodes"}
    return benchmark_start(lane=job.lane, user=user, params=params)


def run_key_name(job_id: int) -> str:
    return f"benchmark job #{job_id}"


def benchmark_job_ended(job_id: int) -> None:
    """Any final state, `lost` included (a killed worker never reaches the run's own
    `finally`): the run's gateway key is revoked now, not at its expiry."""
    for key in ApiKey.objects.filter(name=run_key_name(job_id), revoked_at__isnull=True):
        api_key_revoke(actor=AnonymousUser(), key=key)
