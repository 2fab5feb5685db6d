from django.apps import AppConfig


class CoreConfig(AppConfig):
    """The shared kernel. Its label stays "portal", the label of the app it came out of, so
    its tables, its migrations and the capability permissions (portal.view_portal, ...) keep
    their names in an existing database."""

    name = "core"
    label = "portal"
    verbose_name = "Portal"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.core import checks

        from core.checks import unknown_environment_variables

        checks.register(unknown_environment_variables)
