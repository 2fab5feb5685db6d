"""Create the three roles as groups holding the capability permissions."""

from typing import Any

from django.contrib.auth.management import create_permissions
from django.db import migrations

ROLES = {
    "admin": ["view_portal", "edit_routing", "operate_cluster"],
    "team lead": ["view_portal", "edit_routing"],
    "viewer": ["view_portal"],
}


def create_roles(apps: Any, schema_editor: Any) -> None:
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, verbosity=0)
        app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for role, codenames in ROLES.items():
        group, _ = Group.objects.get_or_create(name=role)
        perms = Permission.objects.filter(content_type__app_label="portal", codename__in=codenames)
        group.permissions.set(perms)


def remove_roles(apps: Any, schema_editor: Any) -> None:
    apps.get_model("auth", "Group").objects.filter(name__in=ROLES).delete()


class Migration(migrations.Migration):
    dependencies = [("portal", "0001_initial"), ("auth", "0012_alter_user_first_name_max_length"),
                    ("contenttypes", "0002_remove_content_type_name")]
    operations = [migrations.RunPython(create_roles, remove_roles)]
