"""Lane states: what the jobs and the health watcher saw (observed, per replica and as the
lane's summary) and what an admin asked for (desired). Each change is saved, audited and
then broadcast."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from core.audit import audit_record
from core.broadcast import DASHBOARD_GROUP, broadcast
from core.roles import UserLike
from lanes.models import Lane, LaneReplica, LaneState


def lane_state_payload(lane: Lane) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": lane.name, "observed_state": lane.observed_state, "desired_state": lane.desired_state,
        "state_changed_at": lane.state_changed_at.isoformat() if lane.state_changed_at else None}
    if lane.state_reason:
        data["reason"] = lane.state_reason
    replicas = list(lane.replicas.order_by("index"))
    if len(replicas) > 1:
        data["replicas"] = [{"index": r.index, "observed_state": r.observed_state, "reason": r.state_reason}
                            for r in replicas]
    return data


# The lane's state from its replicas': the best one any replica is in (a lane with one
# serving replica serves), its reason naming each replica's.
STATE_RANK = (LaneState.SERVING, LaneState.DEGRADED, LaneState.STARTING, LaneState.STOPPING, LaneState.CHECKING,
              LaneState.STALLED, LaneState.FAILED, LaneState.UNREACHABLE, LaneState.STOPPED)


def summary_state(states: Sequence[str]) -> str:
    return min(states, key=lambda state: STATE_RANK.index(LaneState(state))) if states else LaneState.STOPPED


def lane_set_observed_state(
    *, lane: Lane, state: str, reason: str = "", source: str = "job", expected: str | None = None,
    replica: int | None = None,
) -> bool:
    """Called by the jobs app (launch, stop, status, watchdog) and the health watcher: save,
    then broadcast `lane.state`. A change of state is also an audit event (the lane's state
    history, with its reason and who saw it: a job or the watcher). With `expected`, nothing
    changes unless the lane (or the replica) is still in that state (a job moved it
    meanwhile): returns False. `replica`: one replica's state; the lane's becomes the summary
    of its replicas'. Without it, every replica takes the lane's state."""
    if state not in LaneState.values:
        raise ValueError(f"unknown lane state {state!r}")
    with transaction.atomic():
        current = Lane.objects.select_for_update().get(pk=lane.pk)
        rows = {row.index: row for row in LaneReplica.objects.select_for_update().filter(lane=current)}
        now = timezone.now()
        if replica is not None:
            row = rows.get(replica)
            if row is None:
                raise ValueError(f"lane {current.name} has no replica {replica}")
            if expected is not None and row.observed_state != expected:
                return False
            _set_replica_row(current, row, state, reason, source, now)
            if len(rows) > 1:
                lane_state = summary_state([r.observed_state for r in rows.values()])
                reason = "; ".join(f"replica {r.index} {r.observed_state}" for r in sorted(
                    rows.values(), key=lambda r: r.index)) + f" (replica {replica}: {reason})"
                state = lane_state
            elif expected is not None:
                expected = current.observed_state
        elif expected is not None and current.observed_state != expected:
            return False
        else:
            for row in rows.values():
                # Degraded ↔ serving (the RDMA watchdog) concerns the replicas that serve:
                # a stopped replica of several stays stopped.
                if len(rows) > 1 and state in (LaneState.SERVING, LaneState.DEGRADED) and \
                        row.observed_state not in (LaneState.SERVING, LaneState.DEGRADED):
                    continue
                _set_replica_row(current, row, state, reason, source, now, audit=False)
        previous = current.observed_state
        current.observed_state = state
        current.state_reason = reason[:500]
        fields = ["observed_state", "state_reason", "updated_at"]
        if previous != state:
            current.state_changed_at = now
            current.health_failures = 0
            fields += ["state_changed_at", "health_failures"]
            audit_record(actor=None, action="lane.state", obj=current,
                         before={"observed_state": previous},
                         after={"observed_state": state, "reason": reason[:500], "seen_by": source})
        current.save(update_fields=fields)
    for field in ("observed_state", "state_reason", "state_changed_at", "health_failures", "desired_state"):
        setattr(lane, field, getattr(current, field))
    broadcast(DASHBOARD_GROUP, "lane.state", lane_state_payload(current))
    return True


def _set_replica_row(lane: Lane, row: LaneReplica, state: str, reason: str, source: str, now: datetime,
                     *, audit: bool = True) -> None:
    previous = row.observed_state
    row.observed_state, row.state_reason = state, reason[:500]
    fields = ["observed_state", "state_reason"]
    if previous != state:
        row.state_changed_at, row.health_failures = now, 0
        fields += ["state_changed_at", "health_failures"]
        if audit:
            audit_record(actor=None, action="lane.replica_state", obj=lane,
                         before={"replica": row.index, "observed_state": previous},
                         after={"replica": row.index, "observed_state": state, "reason": reason[:500],
                                "seen_by": source})
    row.save(update_fields=fields)


def lanes_mark_checking(*, reason: str) -> list[str]:
    """The portal's processes (re)started: every lane not stopped is shown `checking` until
    the health watcher has probed it (what ran before may be gone, or may still run)."""
    names = []
    for lane in Lane.objects.exclude(observed_state__in=(LaneState.STOPPED, LaneState.CHECKING)):
        rows = lane.replica_rows()
        if len(rows) > 1:  # a stopped replica stays stopped
            for row in rows:
                if row.observed_state not in (LaneState.STOPPED, LaneState.CHECKING):
                    lane_set_observed_state(lane=lane, state=LaneState.CHECKING, reason=reason, source="start",
                                            replica=row.index)
        else:
            lane_set_observed_state(lane=lane, state=LaneState.CHECKING, reason=reason, source="start")
        names.append(lane.name)
    return names


def lane_set_desired_state(*, lane: Lane, state: str, actor: UserLike | None) -> Lane:
    """What the admin asked for (launch → serving, stop → stopped); the jobs app calls it."""
    if state not in ("stopped", "serving"):
        raise ValueError(f"unknown desired state {state!r}")
    if lane.desired_state != state:
        audit_record(actor=actor, action="lane.desired_state", obj=lane, before={"desired_state": lane.desired_state},
                     after={"desired_state": state})
        lane.desired_state = state
        lane.save(update_fields=["desired_state", "updated_at"])
    return lane
