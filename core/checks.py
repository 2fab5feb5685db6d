"""System checks of the shared kernel (run by manage.py commands and runserver)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.core.checks import CheckMessage, Warning


def unknown_environment_variables(  # Django's check signature: it reads no app or database
    *, app_configs: Sequence[AppConfig] | None = None, databases: Sequence[str] | None = None,  # noqa: ARG001
    **kwargs: Any,
) -> list[CheckMessage]:
    """portal.W001: a PORTAL_* environment variable that no setting reads (a typo, or a variable
    that is now a constant), as the settings module found them at load (settings.ENV_WARNINGS)."""
    return [Warning(message, hint="docs/configuration.md lists every setting.", id="portal.W001")
            for message in settings.ENV_WARNINGS]
