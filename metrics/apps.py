from django.apps import AppConfig


class MetricsConfig(AppConfig):
    name = "metrics"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Every page's header shows the open-alert count live (portal's header socket).
        from core.consumers import register_header_snapshot
        from metrics.alerts import alerts_header_snapshot

        register_header_snapshot("alerts", alerts_header_snapshot)
