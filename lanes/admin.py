"""Django admin for nodes, lanes and revisions: read-only. A change must pass the lane
rules and leave a revision and an audit event, which only the services do; the portal's
pages and API call them, so they are the way to edit. The encrypted key and secret env
values are never shown."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from lanes.models import Lane, LaneNode, LaneRevision, Node


class ReadOnlyAdmin(admin.ModelAdmin[Any]):
    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Node)
class NodeAdmin(ReadOnlyAdmin):
    list_display = ("name", "address", "transport", "state", "memory_gib", "last_seen")
    search_fields = ("name", "address")
    list_filter = ("state", "transport")
    exclude = ("ssh_private_key_encrypted",)  # never shown back


class LaneNodeInline(admin.TabularInline[LaneNode, Lane]):
    model = LaneNode
    extra = 0

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Lane)
class LaneAdmin(ReadOnlyAdmin):
    list_display = ("name", "model_id", "tensor_parallel_size", "executor", "observed_state", "desired_state",
                    "revision")
    search_fields = ("name", "model_id", "served_model_name")
    list_filter = ("observed_state", "executor")
    exclude = ("secret_env",)  # encrypted values: never shown back
    inlines = [LaneNodeInline]


@admin.register(LaneRevision)
class LaneRevisionAdmin(ReadOnlyAdmin):
    list_display = ("lane", "number", "created_by", "created_at")
    list_filter = ("lane",)
