"""Django admin for the kernel. Audit events are evidence: nobody edits or deletes them
through the portal, admins included. Every change to a user made here (superuser flag,
groups, staff, active, password, deletion) leaves an audit event with before/after, like
the users page's changes. The role groups (core.roles.Role) are the roles: they cannot be
renamed or deleted here (that would take the role from every member, silently); any other
group's creation, change and deletion is audited."""

from functools import partial
from typing import Any

from django.contrib import admin
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.forms import UserChangeForm
from django.contrib.auth.models import Group, User
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest

from core.audit import audit_record
from core.broadcast import announce_access_change
from core.models import AuditEvent
from core.roles import Role, user_role
from core.services import active_admin_count, user_snapshot

BEFORE = "_portal_audit_before"  # request attribute: {pk: (snapshot, password hash)} of objects opened


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


def _fresh(user: User) -> User:
    return User.objects.prefetch_related("groups").get(pk=user.pk)


def _last_active_admin(user: User) -> bool:
    return bool(user.pk and user.is_active and user_role(_fresh(user)) is Role.ADMIN and active_admin_count() <= 1)


class GuardedUserChangeForm(UserChangeForm):
    """The users page's rule, here too: the last active admin keeps the role and the account."""

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.instance.pk and _last_active_admin(self.instance):
            keeps_role = any(group.name == Role.ADMIN.value for group in data.get("groups") or [])
            if not keeps_role or not data.get("is_active"):
                raise ValidationError(f"{self.instance.get_username()} is the last active admin: "
                                      "make another admin first.")
        return data


admin.site.unregister(User)


@admin.register(User)
class AuditedUserAdmin(UserAdmin):
    """Django's user admin, audited: the snapshot is taken when the object is opened and the
    event written after its groups are saved (log_change runs after save_related)."""

    form = GuardedUserChangeForm

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return super().has_delete_permission(request, obj) and not (obj is not None and _last_active_admin(obj))

    def get_deleted_objects(self, objs: Any, request: HttpRequest) -> Any:
        """Deleting every active admin at once (the bulk action) is refused like deleting the last one."""
        deleted, counts, perms_needed, protected = super().get_deleted_objects(objs, request)
        admins = [user for user in objs if user.is_active and user_role(_fresh(user)) is Role.ADMIN]
        if admins and len(admins) >= active_admin_count():
            protected = [*protected, f"{admins[0].get_username()}: the last active admin (make another admin first)"]
        return deleted, counts, perms_needed, protected

    def get_object(self, request: HttpRequest, object_id: str, from_field: str | None = None) -> Any:
        user = super().get_object(request, object_id, from_field)
        if user is not None:
            fresh = _fresh(user)
            request.__dict__.setdefault(BEFORE, {})[user.pk] = (user_snapshot(fresh), fresh.password)
        return user

    def log_addition(self, request: HttpRequest, obj: Any, message: Any) -> Any:
        audit_record(actor=request.user, action="user.create", obj=obj, after=user_snapshot(_fresh(obj)))
        return super().log_addition(request, obj, message)

    def log_change(self, request: HttpRequest, obj: Any, message: Any) -> Any:
        before, password = request.__dict__.get(BEFORE, {}).get(obj.pk, ({}, None))
        fresh = _fresh(obj)
        after = user_snapshot(fresh)
        if password is not None and password != fresh.password:  # never the hash itself
            before, after = {**before, "password": "(previous)"}, {**after, "password": "(changed)"}
        audit_record(actor=request.user, action="user.admin_change", obj=obj, before=before, after=after)
        transaction.on_commit(lambda: announce_access_change(obj.pk))
        return super().log_change(request, obj, message)

    def log_deletions(self, request: HttpRequest, queryset: QuerySet[User]) -> Any:
        """Called before the rows go: their audit events keep the actor's name (actor_name)."""
        for user in queryset:
            audit_record(actor=request.user, action="user.delete", obj=user, before=user_snapshot(_fresh(user)))
            transaction.on_commit(partial(announce_access_change, user.pk))
        return super().log_deletions(request, queryset)


def _is_role_group(group: Any) -> bool:
    return group is not None and group.name in {role.value for role in Role}


def _group_snapshot(group: Group) -> dict[str, Any]:
    return {"name": group.name,
            "permissions": sorted(f"{p.content_type.app_label}.{p.codename}" for p in group.permissions.all())}


admin.site.unregister(Group)


@admin.register(Group)
class AuditedGroupAdmin(GroupAdmin):
    """Role groups read-only (a renamed or deleted "viewer" group would leave every viewer with
    no role and nothing in the audit log); other groups, which grant no role, audited."""

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return super().has_change_permission(request, obj) and not _is_role_group(obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return super().has_delete_permission(request, obj) and not _is_role_group(obj)

    def get_deleted_objects(self, objs: Any, request: HttpRequest) -> Any:
        """The bulk delete action refuses role groups too."""
        deleted, counts, perms_needed, protected = super().get_deleted_objects(objs, request)
        roles = [group.name for group in objs if _is_role_group(group)]
        if roles:
            protected = [*protected, *(f"{name}: a role group (roles are fixed)" for name in roles)]
        return deleted, counts, perms_needed, protected

    def get_object(self, request: HttpRequest, object_id: str, from_field: str | None = None) -> Any:
        group = super().get_object(request, object_id, from_field)
        if group is not None:
            request.__dict__.setdefault(BEFORE, {})[("group", group.pk)] = _group_snapshot(group)
        return group

    def log_addition(self, request: HttpRequest, obj: Any, message: Any) -> Any:
        audit_record(actor=request.user, action="group.create", obj=obj, after=_group_snapshot(obj))
        return super().log_addition(request, obj, message)

    def log_change(self, request: HttpRequest, obj: Any, message: Any) -> Any:
        before = request.__dict__.get(BEFORE, {}).get(("group", obj.pk), {})
        audit_record(actor=request.user, action="group.change", obj=obj, before=before, after=_group_snapshot(obj))
        return super().log_change(request, obj, message)

    def log_deletions(self, request: HttpRequest, queryset: QuerySet[Group]) -> Any:
        for group in queryset:
            audit_record(actor=request.user, action="group.delete", obj=group, before=_group_snapshot(group))
        return super().log_deletions(request, queryset)
