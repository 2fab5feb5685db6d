from django.apps import AppConfig


class GatewayConfig(AppConfig):
    name = "gateway"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from gateway import signals

        signals.connect()
