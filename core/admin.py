"""Audit events are evidence: nobody edits or deletes them through the portal, admins included."""

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from core.models import AuditEvent


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin[AuditEvent]):
    list_display = ("created_at", "actor_name", "action", "object_type", "object_repr")
    list_filter = ("action", "object_type")
    search_fields = ("object_repr", "actor_name")
    readonly_fields = [f.name for f in AuditEvent._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
