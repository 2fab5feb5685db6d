from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.db.models import Count, QuerySet

from lanes.models import Lane, Node
from portal.models import AuditEvent


def dashboard_summary() -> dict[str, Any]:
    lanes = list(Lane.objects.order_by("name"))
    node_states = dict(Node.objects.values_list("state").annotate(n=Count("id")).values_list("state", "n"))
    nodes = list(Node.objects.order_by("name").values("name", "state"))
    return {"lanes": lanes, "nodes": nodes, "node_states": node_states, "node_count": sum(node_states.values())}


def user_list() -> QuerySet[User]:
    return User.objects.prefetch_related("groups").order_by("-is_active", "username")


def user_audit_events(limit: int = 30) -> QuerySet[AuditEvent]:
    return AuditEvent.objects.filter(object_type="auth.user")[:limit]
