from django.apps import AppConfig


class RoutingConfig(AppConfig):
    name = "routing"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from core.demo import register_demo
        from routing.demo import seed_demo

        register_demo("routing", seed_demo, order=20)
