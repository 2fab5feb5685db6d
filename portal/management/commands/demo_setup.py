from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from lanes.demo import seed_demo as seed_lanes_demo
from portal.demo import ensure_demo_admin


class Command(BaseCommand):
    help = "Create the demo admin and the demo's nodes and lanes (idempotent). Prints the login."

    def handle(self, *args: Any, **options: Any) -> None:
        username, password = ensure_demo_admin()
        seed_lanes_demo(self.stdout)
        self.stdout.write(f"LOGIN {username} {password}")
