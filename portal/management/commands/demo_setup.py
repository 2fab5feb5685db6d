from __future__ import annotations

import importlib
from typing import Any

from django.apps import apps
from django.core.management.base import BaseCommand

from portal.demo import ensure_demo_admin


class Command(BaseCommand):
    help = "Create the demo admin and each app's demo data (idempotent). Prints the login."

    def handle(self, *args: Any, **options: Any) -> None:
        username, password = ensure_demo_admin()
        for config in apps.get_app_configs():
            try:
                module = importlib.import_module(f"{config.name}.demo")
            except ModuleNotFoundError as exc:
                if exc.name != f"{config.name}.demo":
                    raise
                continue
            seed = getattr(module, "seed_demo", None)
            if seed is not None:
                seed(self.stdout)
        self.stdout.write(f"LOGIN {username} {password}")
