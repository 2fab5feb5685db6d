"""The restart policy, applied (lanes.restart_policy holds the rule): a lane that should serve
and is failed, with `on-failure`, is relaunched through an ordinary launch job (audited as
`lane.guardian_restart`, by "the guardian"; never two at once: jobs refuse a second mutating
job on the same nodes). After the limit within the window it stays failed with
"gave up after N restarts" (the `lane_down` alert is open meanwhile).

A node's new boot id (the probe reads /proc/sys/kernel/random/boot_id) means it rebooted:
every lane on it that should serve is marked failed with that reason, then the policy decides
(seed 004: "a reboot taught me that nothing restarts on its own")."""

from __future__ import annotations

import logging
from datetime import timedelta

from django.core.exceptions import ValidationError
from django.utils import timezone

from core.audit import audit_record
from core.models import AuditEvent
from jobs.models import JobKind
from jobs.services import JobConflict, lane_job_create
from lanes.lane_states import lane_set_observed_state
from lanes.models import DesiredState, Lane, LaneState, RestartPolicy
from lanes.restart_policy import RESTART_ACTION, restart_decision

log = logging.getLogger(__name__)
GUARDIAN = "the guardian"


def restarts_tick() -> int:
    """Returns how many launches it started."""
    started = 0
    now = timezone.now()
    for lane in Lane.objects.filter(
        desired_state=DesiredState.SERVING, observed_state=LaneState.FAILED, restart_policy=RestartPolicy.ON_FAILURE
    ):
        window_start = now - timedelta(seconds=lane.restart_window_s)
        recent = list(
            AuditEvent.objects.filter(
                action=RESTART_ACTION, object_type="lanes.lane", object_id=str(lane.pk), created_at__gte=window_start
            ).order_by("-created_at")
        )
        since_failed = (now - lane.state_changed_at).total_seconds() if lane.state_changed_at else 1e9
        decision = restart_decision(
            policy=lane.restart_policy,
            limit=lane.restart_limit,
            backoff_s=lane.restart_backoff_s,
            recent=len(recent),
            since_last_s=(now - recent[0].created_at).total_seconds() if recent else None,
            since_failed_s=since_failed,
        )
        if decision.gave_up:
            gave_up = f"gave up after {lane.restart_limit} restarts"
            if not lane.state_reason.startswith(gave_up):
                lane_set_observed_state(
                    lane=lane,
                    state=LaneState.FAILED,
                    source="guardian",
                    reason=f"{gave_up} in {lane.restart_window_s // 60} min; last: {lane.state_reason}",
                )
            continue
        if decision.restart:
            started += _relaunch(lane, len(recent) + 1)
    return started


def _relaunch(lane: Lane, number: int) -> int:
    reason = lane.state_reason
    try:
        job = lane_job_create(lane=lane, kind=JobKind.LAUNCH, user=None)
    except (JobConflict, ValidationError) as exc:  # another job holds its nodes: the next tick tries again
        log.info("guardian: cannot relaunch lane %s now: %s", lane.name, exc)
        return 0
    audit_record(
        actor=None,
        system_name=GUARDIAN,
        action=RESTART_ACTION,
        obj=lane,
        after={"job": job.pk, "restart": number, "after": reason[:300]},
    )
    return 1


def node_rebooted(*, node: str, lanes: list[Lane]) -> int:
    """The node came back with a new boot id: what ran on it is gone."""
    changed = 0
    for lane in lanes:
        if lane.desired_state == DesiredState.SERVING and lane.observed_state != LaneState.FAILED:
            changed += int(
                lane_set_observed_state(
                    lane=lane,
                    state=LaneState.FAILED,
                    source="guardian",
                    reason=f"guardian: node {node} rebooted (new boot id); its containers are gone",
                )
            )
    return changed
