"""Roles and the one permission check used by pages, the management API and sockets.

Roles are Django groups (created by migration 0002, holding the capability permissions so
Django admin shows them). What an account may do is decided from its role alone, by
ROLE_CAPABILITIES: `is_superuser` grants nothing here (it is Django admin's break-glass, for
a superuser who also holds the admin role), and neither do permissions given to a user or a
group by hand.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

from django.contrib.auth.models import AbstractUser, AnonymousUser
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest
from django.http.response import HttpResponseBase
from django.shortcuts import redirect, render


class Role(enum.StrEnum):
    ADMIN = "admin"
    TEAM_LEAD = "team lead"
    VIEWER = "viewer"


class Capability(enum.StrEnum):
    VIEW = "view_portal"  # dashboards, lanes, jobs, benchmarks (read)
    EDIT_ROUTING = "edit_routing"  # prototypes, router drafts, publish, rollback
    OPERATE = "operate_cluster"  # nodes, lanes, launches, API keys, users

    @property
    def perm(self) -> str:
        return f"portal.{self.value}"


ROLE_CAPABILITIES: dict[Role, tuple[Capability, ...]] = {
    Role.ADMIN: (Capability.VIEW, Capability.EDIT_ROUTING, Capability.OPERATE),
    Role.TEAM_LEAD: (Capability.VIEW, Capability.EDIT_ROUTING),
    Role.VIEWER: (Capability.VIEW,),
}

CAPABILITY_LABELS: dict[Capability, str] = {
    Capability.VIEW: "read dashboards, lanes, jobs and benchmarks",
    Capability.EDIT_ROUTING: "edit and publish the semantic router",
    Capability.OPERATE: "operate nodes, lanes, jobs and API keys",
}

UserLike = AbstractUser | AnonymousUser


def user_can(user: UserLike | None, capability: Capability) -> bool:
    """The one permission check: the account's role, and nothing else, says what it may do."""
    if user is None or not user.is_authenticated or not user.is_active:
        return False
    role = user_role(user)
    return role is not None and capability in ROLE_CAPABILITIES[role]


ROLE_CACHE = "_portal_role"  # the role read once per user object (a request, a socket's scope)


def user_role(user: UserLike | None) -> Role | None:
    """The user's role (its group); None for a user in no role group. An account in
    several role groups counts as the one with most capabilities."""
    if user is None or not user.is_authenticated:
        return None
    if ROLE_CACHE not in user.__dict__:
        names = {group.name for group in user.groups.all()}
        user.__dict__[ROLE_CACHE] = next((role for role in ROLE_CAPABILITIES if role.value in names), None)
    role: Role | None = user.__dict__[ROLE_CACHE]
    return role


def forget_role(user: UserLike) -> None:
    """After a change of the user's groups: the next check reads them again."""
    user.__dict__.pop(ROLE_CACHE, None)


def may_use_django_admin(user: UserLike | None) -> bool:
    """Django admin (/admin/) is break-glass: a superuser who holds the admin role. A demoted
    superuser is refused there like everywhere else."""
    return bool(user is not None and user.is_superuser and user_can(user, Capability.OPERATE))


def has_any_role(user: UserLike | None) -> bool:
    return any(user_can(user, capability) for capability in Capability)


def require(user: UserLike | None, capability: Capability) -> None:
    if not user_can(user, capability):
        raise PermissionDenied(f"Your role may not {CAPABILITY_LABELS[capability]}.")


ViewFunc = TypeVar("ViewFunc", bound=Callable[..., HttpResponseBase])


def role_required(capability: Capability) -> Callable[[ViewFunc], ViewFunc]:
    """Page decorator: anonymous users go to the login page, others without the
    capability get 403."""

    def decorator(view: ViewFunc) -> ViewFunc:
        @wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            if not request.user.is_authenticated:
                return redirect(f"/accounts/login/?next={request.path}")
            if not has_any_role(request.user):
                # A signed-in account without a role: one page that says so, not a 403 per link.
                return render(request, "portal/no_role.html", status=403)
            require(request.user, capability)
            return view(request, *args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorator


def ensure_role_groups() -> None:
    """Create the role groups with their permissions (migration 0002 does the same on a
    fresh database; tests that flush tables call this)."""
    from django.contrib.auth.models import Group, Permission

    for role, capabilities in ROLE_CAPABILITIES.items():
        group, _ = Group.objects.get_or_create(name=role.value)
        codenames = [cap.value for cap in capabilities]
        group.permissions.set(Permission.objects.filter(content_type__app_label="portal", codename__in=codenames))


def roles_context(request: HttpRequest) -> dict[str, Any]:
    user = getattr(request, "user", None)
    return {
        "user_role": user_role(user),
        "can_view": user_can(user, Capability.VIEW),
        "can_edit_routing": user_can(user, Capability.EDIT_ROUTING),
        "can_operate": user_can(user, Capability.OPERATE),
        "can_use_django_admin": may_use_django_admin(user),
    }
