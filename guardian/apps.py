from django.apps import AppConfig


class GuardianConfig(AppConfig):
    name = "guardian"
    default_auto_field = "django.db.models.BigAutoField"
