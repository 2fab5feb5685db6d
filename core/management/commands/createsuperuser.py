"""Django's createsuperuser, and the account it creates holds the admin role: the portal
decides from the role alone (core.roles.user_can), so the production bootstrap
(`manage.py createsuperuser`) gives a working admin — audited, actor "system"."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.management.commands import createsuperuser
from django.contrib.auth.models import User

from core.roles import Role
from core.services import user_set_role


class Command(createsuperuser.Command):
    help = "Create a superuser holding the portal's admin role (Django admin's break-glass account)."

    def handle(self, *args: Any, **options: Any) -> None:
        before = set(User.objects.filter(is_superuser=True).values_list("pk", flat=True))
        super().handle(*args, **options)
        for user in User.objects.filter(is_superuser=True).exclude(pk__in=before):
            user_set_role(actor=None, user=user, role=Role.ADMIN)
