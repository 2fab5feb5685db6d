"""Django admin for nodes, lanes and revisions: read-mostly. Changes made here bypass the
lane rules, so the portal's pages and API are the way to edit; the admin hides the
encrypted key and never lets revisions change."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from lanes.models import Lane, LaneNode, LaneRevision, Node


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin[Node]):
    list_display = ("name", "address", "transport", "state", "memory_gib", "last_seen")
    search_fields = ("name", "address")
    list_filter = ("state", "transport")
    exclude = ("ssh_private_key_encrypted",)  # never shown back
    readonly_fields = ("network_report", "network_checked_at", "last_seen")


class LaneNodeInline(admin.TabularInline[LaneNode, Lane]):
    model = LaneNode
    extra = 0


@admin.register(Lane)
class LaneAdmin(admin.ModelAdmin[Lane]):
    list_display = ("name", "model_id", "tensor_parallel_size", "executor", "observed_state", "desired_state",
                    "revision")
    search_fields = ("name", "model_id", "served_model_name")
    list_filter = ("observed_state", "executor")
    readonly_fields = ("revision", "observed_state", "state_changed_at")
    inlines = [LaneNodeInline]


@admin.register(LaneRevision)
class LaneRevisionAdmin(admin.ModelAdmin[LaneRevision]):
    list_display = ("lane", "number", "created_by", "created_at")
    list_filter = ("lane",)
    readonly_fields = ("lane", "number", "config", "created_by", "created_at")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
