from django.apps import AppConfig


class LanesConfig(AppConfig):
    name = "lanes"
    default_auto_field = "django.db.models.BigAutoField"
