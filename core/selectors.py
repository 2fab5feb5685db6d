from __future__ import annotations

from django.contrib.auth.models import User
from django.db.models import QuerySet

from core.models import AuditEvent


def user_list() -> QuerySet[User]:
    return User.objects.select_related("external_identity").prefetch_related("groups").order_by("-is_active", "username")


def user_audit_events(limit: int = 30) -> QuerySet[AuditEvent]:
    return AuditEvent.objects.filter(object_type="auth.user")[:limit]
