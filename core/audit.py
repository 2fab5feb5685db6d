"""Audit helpers: one function records an event with a before/after diff."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.contrib.auth.models import User

from core.models import AuditEvent
from core.roles import UserLike


def audit_diff(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> dict[str, list[Any]]:
    before = before or {}
    after = after or {}
    diff: dict[str, list[Any]] = {}
    for key in sorted(set(before) | set(after)):
        old, new = before.get(key), after.get(key)
        if old != new:
            diff[key] = [old, new]
    return diff


def audit_record(
    *,
    actor: UserLike | None,
    action: str,
    obj: Any,
    before: Mapping[str, Any] | None = None,
    after: Mapping[str, Any] | None = None,
    system_name: str = "system",
) -> AuditEvent:
    """`system_name`: who acted when no user did (e.g. "the guardian")."""
    real_actor = actor if isinstance(actor, User) else None
    return AuditEvent.objects.create(
        actor=real_actor,
        actor_name=real_actor.get_username() if real_actor is not None else system_name,
        action=action,
        object_type=type(obj)._meta.label_lower if hasattr(type(obj), "_meta") else type(obj).__name__,
        object_id=str(getattr(obj, "pk", "")),
        object_repr=str(obj)[:200],
        diff=audit_diff(before, after),
    )
