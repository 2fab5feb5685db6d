"""Read-only admin for jobs: they are written by the runner only, and they are evidence —
nobody deletes one here (a deletion would take its steps, log lines and benchmark run
with it)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from jobs.models import Job, JobStep


class JobStepInline(admin.TabularInline[JobStep, Job]):
    model = JobStep
    extra = 0
    fields = ("position", "key", "node", "title", "state", "started_at", "finished_at", "exit_code", "detail")
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Job)
class JobAdmin(admin.ModelAdmin[Job]):
    list_display = ("id", "kind", "state", "lane", "created_by", "created_at", "finished_at")
    list_filter = ("kind", "state")
    search_fields = ("lane__name", "error")
    inlines = [JobStepInline]
    readonly_fields = [f.name for f in Job._meta.fields] + ["nodes"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
