"""Local passwords (Django's model backend), which stay for the demo and for break-glass admins
when single sign-on is on; PORTAL_OIDC_LOCAL_LOGIN_SUPERUSERS_ONLY keeps them for superusers only."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import User
from django.http import HttpRequest


def local_login_allowed(user: Any) -> bool:
    return not (settings.OIDC_ENABLED and settings.OIDC_LOCAL_LOGIN_SUPERUSERS_ONLY) or bool(user.is_superuser)


class LocalBackend(ModelBackend):
    def authenticate(self, request: HttpRequest | None, username: str | None = None, password: str | None = None,
                     **kwargs: Any) -> User | None:
        user = super().authenticate(request, username=username, password=password, **kwargs)
        return user if user is not None and local_login_allowed(user) else None
