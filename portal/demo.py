"""The demo admin of the embedded default. Apps add their own demo data in <app>/demo.py
(a `seed_demo(out)` function), which `manage.py demo_setup` calls in order."""

from __future__ import annotations

import secrets
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import Group, User

from portal.roles import Role

DEMO_ADMIN = "admin"


def demo_password_file() -> Path:
    return Path(settings.VAR_DIR) / "demo-admin-password"


def ensure_demo_admin() -> tuple[str, str]:
    """Create the demo admin once with a random password kept in var/ (mode 600), so the
    run command can print the same login every time."""
    path = demo_password_file()
    if path.exists():
        password = path.read_text().strip()
    else:
        password = secrets.token_urlsafe(12)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600)
        path.write_text(password + "\n")
    user, created = User.objects.get_or_create(username=DEMO_ADMIN, defaults={"is_staff": True})
    if created or not user.check_password(password):
        user.set_password(password)
        user.is_staff = True
        user.is_superuser = True
        user.save()
    user.groups.add(Group.objects.get(name=Role.ADMIN.value))
    return DEMO_ADMIN, password
