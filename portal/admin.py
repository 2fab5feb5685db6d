from django.contrib import admin

from portal.models import AuditEvent


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin[AuditEvent]):
    list_display = ("created_at", "actor_name", "action", "object_type", "object_repr")
    list_filter = ("action", "object_type")
    search_fields = ("object_repr", "actor_name")
    readonly_fields = [f.name for f in AuditEvent._meta.fields]
