"""Demo data for the embedded default (`make run` runs `manage.py demo_setup`): the demo
admin, then every app's own demo data. An app plugs its <app>/demo.py in from its
AppConfig.ready() with `register_demo` (lanes: the simulated cluster and seed 000's lanes;
routing: the starter router); the kernel knows no app."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from io import TextIOBase
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import Group, User

from core.roles import Role

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


DemoSeed = Callable[[TextIOBase], None]


@dataclass(frozen=True)
class DemoData:
    name: str
    order: int  # lower first: routing's starter router needs the lanes it routes to
    seed: DemoSeed


DEMO_DATA: dict[str, DemoData] = {}


def register_demo(name: str, seed: DemoSeed, *, order: int) -> None:
    """Idempotent seeds only: demo_setup runs them on every `make run`."""
    DEMO_DATA[name] = DemoData(name=name, order=order, seed=seed)


def demo_seed_all(out: TextIOBase) -> list[str]:
    """Every registered app's demo data, in order; the names, in the order they ran."""
    ran = []
    for data in sorted(DEMO_DATA.values(), key=lambda data: (data.order, data.name)):
        data.seed(out)
        ran.append(data.name)
    return ran
