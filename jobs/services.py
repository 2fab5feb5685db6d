"""Job services (HackSoft style): create, cancel, run, reap. Views, the API and tasks
call these; nothing else writes jobs."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from celery import current_app as celery_app  # the project's app (portal.celery), current once settings load
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from core.audit import audit_record
from core.roles import UserLike
from jobs.models import ACTIVE_STATES, FABRIC_KINDS, MUTATING_KINDS, Job, JobKind, JobState, JobStep, StepState
from jobs.params import default_time_limit, validate_params
from jobs.registry import kind_ended, kind_runners, registered_kind
from jobs.runner import job_execute, job_skip_pending_steps
from jobs.states import publish_job_state
from lanes.lane_states import lane_set_desired_state
from lanes.models import DesiredState, Lane, LaneRevision, Node
from lanes.selectors import current_revision, lanes_active_on, replica_configs

logger = logging.getLogger(__name__)


class JobConflict(Exception):
    """A second mutating job on a busy node: the message names the running job."""


# jobs.tasks.run_job calls job_run below; queueing it by its registered name keeps this
# module free of an import of the tasks module, which imports this one.
RUN_JOB_TASK = "jobs.tasks.run_job"


def dispatch_job(job_id: int, time_limit_s: float) -> None:
    """Queue the Celery task (called on commit). The runner's own deadline fires first;
    Celery's soft and hard limits are the safety net (a hard kill ends as `lost`)."""
    try:
        # Above the runner's own limit and a launch's clean-up after it (JOBS_CANCEL_CLEANUP_S).
        margin = int(settings.JOBS_CANCEL_CLEANUP_S)
        celery_app.send_task(RUN_JOB_TASK, args=(job_id,), soft_time_limit=int(time_limit_s) + margin + 30,
                             time_limit=int(time_limit_s) + margin + 90)
    except Exception as exc:  # broker down: say so on the job instead of leaving it queued forever
        logger.exception("job %s could not be queued", job_id)
        if Job.objects.filter(pk=job_id, state=JobState.QUEUED).update(
            state=JobState.FAILED, finished_at=timezone.now(),
            error=f"could not be queued (is Redis up?): {type(exc).__name__}: {exc}"[:5000],
        ):
            publish_job_state(Job.objects.get(pk=job_id))


def _user_or_none(user: UserLike | None) -> Any:
    return user if user is not None and user.is_authenticated else None


def job_create(
    *, kind: str, user: UserLike | None, nodes: list[Node], lane: Lane | None = None,
    revision: LaneRevision | None = None, params: dict[str, Any] | None = None,
) -> Job:
    """Create and queue a job. Mutating kinds lock their nodes' rows first, so two
    launches on one node can never both pass the check, whichever process asks."""
    clean = validate_params(kind, params or {})
    clean["nodes"] = [node.name for node in nodes]
    with transaction.atomic():
        if kind in MUTATING_KINDS:
            locked = list(Node.objects.select_for_update().filter(pk__in=[n.pk for n in nodes]).order_by("pk"))
            busy = (
                Job.objects.filter(kind__in=MUTATING_KINDS, state__in=ACTIVE_STATES, nodes__in=locked)
                .select_related("lane", "created_by").distinct().order_by("created_at").first()
            )
            if busy is not None:
                shared = sorted(set(busy.params.get("nodes") or []) & set(clean["nodes"]))
                who = busy.created_by.get_username() if busy.created_by else "the system"
                raise JobConflict(
                    f"{', '.join(shared) or 'a node'} is busy: job #{busy.pk} ({busy.kind} {busy.target_label}, "
                    f"{busy.state}, started by {who}) must finish or be cancelled first"
                )
        job = Job.objects.create(kind=kind, lane=lane, lane_revision=revision, params=clean,
                                 created_by=_user_or_none(user))
        job.nodes.set(nodes)
        limit = float(clean["time_limit_s"])
        transaction.on_commit(lambda: dispatch_job(job.pk, limit))
        transaction.on_commit(lambda: publish_job_state(job))
    return job


def lane_current_revision(lane: Lane) -> LaneRevision:
    revision = current_revision(lane)
    if revision is None:
        raise ValidationError({"lane": f"lane {lane.name} has no saved revision yet: save its configuration first"})
    return revision


_LANE_KIND_ACTIONS: dict[str, str] = {
    JobKind.LAUNCH: "lane.launch",
    JobKind.STOP: "lane.stop",
    JobKind.RESTART: "lane.restart",
    JobKind.STATUS: "lane.status",
}


@transaction.atomic  # the desired state commits with the job, so the worker never sees the old one
def lane_job_create(*, lane: Lane, kind: str, user: UserLike | None, params: dict[str, Any] | None = None) -> Job:
    """Launch, stop, restart or status of a lane, on the revision current now."""
    if kind not in _LANE_KIND_ACTIONS:
        raise ValidationError({"kind": f"must be one of {', '.join(_LANE_KIND_ACTIONS)}"})
    revision = lane_current_revision(lane)
    params = dict(params or {})
    validate_params(kind, params)  # first: the time limit below reads wait_timeout_s as a number
    replicas = replica_configs(revision.config)
    replica = params.get("replica")
    if not isinstance(replica, int) or isinstance(replica, bool):
        replica = None  # absent, or refused by validate_params with its rule
    elif not 0 <= replica < len(replicas):
        raise ValidationError({"replica": f"lane {lane.name} has replicas 0 to {len(replicas) - 1} "
                                          f"in revision {revision.number}"})
    chosen = [replicas[replica]] if replica is not None else replicas
    nodes = [node for config in chosen for node in lane_nodes_named(config["nodes"])]
    if not nodes:
        raise ValidationError({"lane": f"lane {lane.name} has no nodes"})
    if len(chosen) > 1 and params.get("time_limit_s") is None:  # one replica after another
        params["time_limit_s"] = min(default_time_limit(kind, params) * len(chosen), settings.JOBS_MAX_TIME_LIMIT_S)
    job = job_create(kind=kind, user=user, nodes=nodes, lane=lane, revision=revision, params=params)
    if kind in (JobKind.LAUNCH, JobKind.RESTART, JobKind.STOP):
        # Stopping one replica of several leaves the lane wanted serving.
        desired = DesiredState.STOPPED if kind == JobKind.STOP and (
            replica is None or len(replicas) == 1) else DesiredState.SERVING
        lane_set_desired_state(lane=lane, state=desired, actor=user)
    # A status job changes what the lane is shown as: audited like the others (the reaper's, "system").
    after = {"job": job.pk, "revision": revision.number, "nodes": job.params["nodes"]}
    if replica is not None:
        after["replica"] = replica
    if job.params.get("reason"):
        after["reason"] = job.params["reason"]
    audit_record(actor=user, action=_LANE_KIND_ACTIONS[kind], obj=lane, after=after)
    return job


def lane_nodes_named(names: list[str]) -> list[Node]:
    by_name = {node.name: node for node in Node.objects.filter(name__in=names)}
    return [by_name[name] for name in names if name in by_name]


def node_network_check_create(*, node: Node, user: UserLike | None, params: dict[str, Any] | None = None) -> Job:
    """Checks the node with every node it shares a lane with (its cabled peers)."""
    peers = list(
        Node.objects.filter(memberships__lane__members__node=node).exclude(pk=node.pk).distinct().order_by("name")
    )
    job = job_create(kind=JobKind.NETWORK_CHECK, user=user, nodes=[node, *peers], params=params)
    audit_record(actor=user, action="node.network_check", obj=node, after={"job": job.pk, "nodes": job.params["nodes"]})
    return job


def fabric_job_create(*, kind: str, nodes: list[Node], user: UserLike | None,
                      params: dict[str, Any] | None = None) -> Job:
    """An NCCL test, latency matrix or link bandwidth job on these nodes (in this order:
    the first runs mpirun). Refused while a lane runs on any of them: the test would
    compete with the lane for the GPU and the links, and measure that competition."""
    if kind not in FABRIC_KINDS:
        raise ValidationError({"kind": f"must be one of {', '.join(FABRIC_KINDS)}"})
    validate_params(kind, params or {})  # a bad parameter is named whatever the nodes' state
    if len(nodes) < 2 or len({node.pk for node in nodes}) != len(nodes):
        raise ValidationError({"nodes": "give at least two different nodes"})
    without = [node.name for node in nodes if not (node.network_report or {}).get("devices")]
    if without:
        raise ValidationError({"nodes": f"{', '.join(without)}: no network report yet; run a network check first "
                                        "(the fabric addresses, devices and GID index come from it)"})
    busy = lanes_active_on(nodes)
    if busy:
        names = {node.name for node in nodes}
        # Every replica's nodes: a lane of replicas has its other replicas' nodes outside
        # ranked_nodes() (replica 0), which once read "serving on : stop it".
        raise JobConflict("; ".join(
            f"lane {lane.name} is {lane.observed_state} on "
            f"{', '.join(sorted({m.node.name for m in lane.members.all() if m.node.name in names}))}"
            for lane in busy
        ) + ": stop it before a fabric test (the test needs the GPU and the links to itself)")
    job = job_create(kind=kind, user=user, nodes=nodes, params=params)
    audit_record(actor=user, action=f"fabric.{kind}", obj=job, after={"nodes": job.params["nodes"]})
    return job


def job_cancel(*, job: Job, user: UserLike | None, keep_running: bool = False) -> Job:
    """Queued: cancelled at once. Running: the runner notices within a second, kills the
    command on the node and ends the job `cancelled`; a cancelled launch then stops what it
    started, or, with `keep_running`, leaves it for inspection and says so on the lane."""
    name = user.get_username() if user is not None and user.is_authenticated else "system"
    now = timezone.now()
    before = {"state": job.state, "cancel_requested_by": job.cancel_requested_by or None}
    if Job.objects.filter(pk=job.pk, state=JobState.QUEUED).update(
        state=JobState.CANCELLED, finished_at=now, cancel_requested_at=now, cancel_requested_by=name,
        error=f"cancelled by {name} before it started",
    ):
        pass
    elif not Job.objects.filter(pk=job.pk, state=JobState.RUNNING, cancel_requested_at__isnull=True).update(
        cancel_requested_at=now, cancel_requested_by=name, cancel_keep_running=keep_running
    ):
        job.refresh_from_db()
        if job.is_final:
            raise ValidationError({"job": f"job #{job.pk} is already {job.state}: nothing to cancel"})
        return job  # a cancel already asked for: once is the event
    job.refresh_from_db()
    audit_record(actor=user, action="job.cancel", obj=job, before=before, after={
        "state": job.state, "cancel_requested_by": job.cancel_requested_by, "keep_running": keep_running})
    publish_job_state(job)
    return job


def job_run(*, job_id: int) -> str | None:
    """The task's body: the one runner with every kind, then the kind's clean-up (the
    reaper runs it for a job that never comes back here: `lost`)."""
    state = job_execute(job_id=job_id, kinds=kind_runners())
    if state is not None:
        kind_ended(Job.objects.get(pk=job_id))
    return state


def job_reap_lost(*, now: datetime | None = None, lost_after_s: float | None = None) -> list[int]:
    """Jobs whose heartbeat stopped (worker killed, machine gone) become `lost`; each lost
    lane job gets a status job that reconciles the lane with what really runs."""
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=lost_after_s if lost_after_s is not None else settings.JOBS_LOST_AFTER_S)
    candidates = list(
        Job.objects.filter(state=JobState.RUNNING).filter(Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True))
    )
    lost: list[int] = []
    for job in candidates:
        beat = job.heartbeat_at.isoformat() if job.heartbeat_at else "never"
        if not Job.objects.filter(pk=job.pk, state=JobState.RUNNING, heartbeat_at=job.heartbeat_at).update(
            state=JobState.LOST, finished_at=now,
            error=f"lost: the worker stopped heartbeating (last heartbeat {beat}, worker {job.worker or '?'})",
        ):
            continue  # it finished or beat meanwhile
        JobStep.objects.filter(job=job, state=StepState.RUNNING).update(
            state=StepState.FAILED, finished_at=now, detail="the job was lost"
        )
        job.refresh_from_db()
        job_skip_pending_steps(job=job)
        publish_job_state(job)
        kind_ended(job)
        lost.append(job.pk)
        logger.warning("job %s lost (%s)", job.pk, job.error)
        if job.lane_id is not None and job.lane is not None and job.kind != JobKind.STATUS:
            lane_job_create(lane=job.lane, kind=JobKind.STATUS, user=None,
                            params={"reason": f"reconcile after job #{job.pk} was lost"})
    return lost


@transaction.atomic
def job_relaunch(*, job: Job, user: UserLike | None) -> Job:
    """A new job of the same kind on the same target with the same parameters (AWX's
    Relaunch), through the same service a first start uses — so it leaves the same audit
    event (`lane.launch`, `benchmark.start`, ...) and a `job.relaunch` naming the one it repeats.
    A lane job runs the lane's current revision, as a Launch button would."""
    new_job = _relaunched(job, user)
    audit_record(actor=user, action="job.relaunch", obj=new_job, after={"relaunch_of": job.pk})
    return new_job


def _relaunched(job: Job, user: UserLike | None) -> Job:
    if not job.is_final:
        raise ValidationError({"job": f"job #{job.pk} is still {job.state}: wait for it or cancel it first"})
    params = {key: value for key, value in (job.params or {}).items() if key != "nodes"}
    if job.kind == JobKind.NETWORK_CHECK:
        names = list((job.params or {}).get("nodes") or [])
        node = Node.objects.filter(name=names[0]).first() if names else None
        if node is None:
            raise ValidationError({"job": f"job #{job.pk} checked a node that is no longer registered"})
        return node_network_check_create(node=node, user=user, params=params)
    if job.lane is None:
        raise ValidationError({"job": f"job #{job.pk}'s lane no longer exists"})
    entry = registered_kind(job.kind)
    if entry is not None and entry.relaunch is not None:  # the benchmark: its run row and benchmark.start
        return entry.relaunch(job, user)
    return lane_job_create(lane=job.lane, kind=job.kind, user=user, params=params)
