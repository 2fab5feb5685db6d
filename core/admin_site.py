"""Django admin's site: break-glass for a superuser who holds the admin role, nobody else
(core.roles.may_use_django_admin) — a superuser demoted on /users/ is refused here too."""

from __future__ import annotations

from django.contrib.admin import AdminSite
from django.http import HttpRequest

from core.roles import may_use_django_admin


class PortalAdminSite(AdminSite):
    def has_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_active and may_use_django_admin(request.user))
