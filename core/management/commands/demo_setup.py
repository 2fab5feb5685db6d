from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from core.demo import demo_seed_all, ensure_demo_admin


class Command(BaseCommand):
    help = "Create the demo admin and every app's demo data (idempotent). Prints the login."

    def handle(self, *args: Any, **options: Any) -> None:
        username, password = ensure_demo_admin()
        demo_seed_all(self.stdout)
        self.stdout.write(f"LOGIN {username} {password}")
