"""A lane's restart policy: `never`, or `on-failure` with a limit of restarts in a window
and a backoff (doubled after each restart). The guardian (guardian.restarts) applies it;
this module holds the rule (pure) and the one service that changes it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ValidationError

from core.audit import audit_record
from core.models import AuditEvent
from core.roles import UserLike
from lanes.models import Lane, RestartPolicy

RESTART_ACTION = "lane.guardian_restart"  # the audit event of each relaunch by the guardian
LIMITS = {"restart_limit": (1, 20), "restart_window_s": (60, 86_400), "restart_backoff_s": (0, 3600)}


@dataclass(frozen=True)
class RestartDecision:
    restart: bool
    gave_up: bool = False
    wait_s: float = 0.0


def restart_decision(
    *, policy: str, limit: int, backoff_s: float, recent: int, since_last_s: float | None, since_failed_s: float
) -> RestartDecision:
    """`recent`: the guardian's restarts of this lane within the window; `since_last_s`: since
    the last of them (None: none). Backoff: backoff_s x 2^recent after the failure and the
    last restart."""
    if policy != RestartPolicy.ON_FAILURE:
        return RestartDecision(False)
    if recent >= limit:
        return RestartDecision(False, gave_up=True)
    wait = backoff_s * (2**recent)
    waited = min(since_failed_s, since_last_s if since_last_s is not None else since_failed_s)
    if waited < wait:
        return RestartDecision(False, wait_s=wait - waited)
    return RestartDecision(True)


def clean_restart_policy(data: dict[str, Any]) -> dict[str, Any]:
    """Each field checked against its rule; the errors name the field."""
    errors: dict[str, str] = {}
    clean: dict[str, Any] = {}
    policy = data.get("restart_policy", RestartPolicy.NEVER)
    if policy not in RestartPolicy.values:
        errors["restart_policy"] = f"must be one of {', '.join(RestartPolicy.values)}"
    clean["restart_policy"] = policy
    for name, (low, high) in LIMITS.items():
        if name not in data:
            continue
        value = data[name]
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            errors[name] = f"must be a whole number from {low:,} to {high:,}"
        clean[name] = value
    if errors:
        raise ValidationError(errors)
    return clean


def lane_set_restart_policy(*, lane: Lane, actor: UserLike | None, data: dict[str, Any]) -> Lane:
    clean = clean_restart_policy(data)
    before = {name: getattr(lane, name) for name in clean}
    for name, value in clean.items():
        setattr(lane, name, value)
    lane.save(update_fields=[*clean, "updated_at"])
    audit_record(actor=actor, action="lane.restart_policy", obj=lane, before=before, after=clean)
    return lane


def lane_restarts(lane: Lane, limit: int = 5) -> list[Any]:
    """The guardian's recent relaunches of this lane, newest first (audit events)."""
    return list(
        AuditEvent.objects.filter(action=RESTART_ACTION, object_type="lanes.lane", object_id=str(lane.pk)).order_by(
            "-created_at"
        )[:limit]
    )
