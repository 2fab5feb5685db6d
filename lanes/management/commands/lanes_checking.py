"""Run when the portal's processes start (the run command; compose's periodic worker): every
lane not stopped shows `checking` until the health watcher's first tick, queued now, probes it."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from lanes.lane_states import lanes_mark_checking
from lanes.tasks import watch_lane_health


class Command(BaseCommand):
    help = "Mark every lane that is not stopped 'checking' and queue a health watcher tick."

    def handle(self, *args: Any, **options: Any) -> None:
        names = lanes_mark_checking(reason="the portal started: probing before showing a state")
        try:
            watch_lane_health.delay()
        except Exception as exc:  # the broker may not be up yet: beat's next tick probes them anyway
            self.stderr.write(f"lanes: could not queue a watcher tick now ({type(exc).__name__}); beat will")
        self.stdout.write(f"lanes: checking {', '.join(names) or 'no lane'}\n")
