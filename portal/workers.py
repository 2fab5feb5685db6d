"""The portal's two Celery worker processes, one place for their queues and names:

- `jobs`: every job (launches that may wait 40 minutes for health, stops, checks,
  benchmarks), PORTAL_WORKER_CONCURRENCY slots;
- `periodic`: beat's tasks (heartbeat, reaper, purge, the lane health watcher, scrapes),
  portal.tuning.PERIODIC_WORKER_CONCURRENCY slots, so periodic work never waits behind a job.

    python -m portal.workers jobs|periodic      (the run command and compose use this)
    python -m portal.workers ping jobs|periodic (healthcheck: exit 0 when it answers)
"""

from __future__ import annotations

import socket
import sys

from django.conf import settings

from portal.celery import app

ROLES = ("jobs", "periodic")


def worker_queue(role: str) -> str:
    return settings.PERIODIC_QUEUE if role == "periodic" else settings.CELERY_TASK_DEFAULT_QUEUE


def worker_name(role: str, host: str | None = None) -> str:
    return f"{role}@{host or socket.gethostname()}"


def worker_argv(role: str) -> list[str]:
    if role not in ROLES:
        raise SystemExit(f"unknown worker role {role!r}: choose one of {', '.join(ROLES)}")
    concurrency = settings.PERIODIC_WORKER_CONCURRENCY if role == "periodic" else settings.WORKER_CONCURRENCY
    return ["worker", "-Q", worker_queue(role), "-n", worker_name(role), "--concurrency", str(concurrency),
            "-l", "info"]


def worker_ping(role: str, timeout: float = 5.0) -> bool:
    """True when this host's worker of that role answers a broadcast ping."""
    replies = app.control.ping(destination=[worker_name(role)], timeout=timeout)
    return any(worker_name(role) in reply for reply in replies or [])


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "ping":
        return 0 if worker_ping(argv[1]) else 1
    if len(argv) != 1:
        raise SystemExit(__doc__)
    app.worker_main(worker_argv(argv[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
