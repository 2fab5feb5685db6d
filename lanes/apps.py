from django.apps import AppConfig


class LanesConfig(AppConfig):
    name = "lanes"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from core.demo import register_demo
        from lanes.demo import seed_demo

        register_demo("lanes", seed_demo, order=10)
