from typing import Any

from django.apps import AppConfig
from django.contrib.auth.signals import user_logged_out

from core.broadcast import announce_access_change


def announce_logout(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:  # noqa: ARG001 (the signal's arguments)
    """A logout ends the session: its open sockets (the other tabs) close, as its next request
    would be refused (core.consumers re-reads the session). The signal comes before logout()
    flushes the session: flushed here first, so the sockets find it gone."""
    if user is None or user.pk is None:
        return
    if request is not None and hasattr(request, "session"):
        request.session.flush()
    announce_access_change(user.pk)


class CoreConfig(AppConfig):
    """The shared kernel. Its label stays "portal", the label of the app it came out of, so
    its tables, its migrations and the capability permissions (portal.view_portal, ...) keep
    their names in an existing database."""

    name = "core"
    label = "portal"
    verbose_name = "Portal"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.conf import settings
        from django.core import checks

        from core.checks import unknown_environment_variables
        from core.oidc_map import parse_group_map

        # A bad group map stops every process at start-up, naming the entry and the rule.
        parse_group_map(settings.OIDC_GROUP_MAP)

        checks.register(unknown_environment_variables)
        user_logged_out.connect(announce_logout, dispatch_uid="core.announce_logout")
