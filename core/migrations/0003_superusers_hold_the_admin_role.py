"""Superusers without a role get the admin role. Until now a superuser held every capability
whatever its role; from now on the role alone decides (core.roles.user_can), so an existing
deployment's bootstrap account keeps working — and the change is audited, actor "system"."""

from typing import Any

from django.db import migrations

ROLE_NAMES = ["admin", "team lead", "viewer"]


def give_admin_role(apps: Any, schema_editor: Any) -> None:
    User = apps.get_model("auth", "User")
    Group = apps.get_model("auth", "Group")
    AuditEvent = apps.get_model("portal", "AuditEvent")
    admin_group = Group.objects.filter(name="admin").first()
    if admin_group is None:
        return
    for user in User.objects.filter(is_superuser=True).exclude(groups__name__in=ROLE_NAMES):
        user.groups.add(admin_group)
        AuditEvent.objects.create(actor=None, actor_name="system", action="user.role", object_type="auth.user",
                                  object_id=str(user.pk), object_repr=user.username[:200],
                                  diff={"role": [None, "admin"]})


class Migration(migrations.Migration):
    dependencies = [("portal", "0002_roles")]
    operations = [migrations.RunPython(give_admin_role, migrations.RunPython.noop)]
