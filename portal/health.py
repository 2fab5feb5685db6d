"""Checks behind /healthz: the database and Redis, each with a short timeout."""

from __future__ import annotations

import redis
from django.conf import settings
from django.db import connection


def check_database() -> str | None:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception as exc:  # any driver error means "down"
        return f"database unreachable: {type(exc).__name__}: {exc}".strip()
    return None


def check_redis() -> str | None:
    timeout = settings.HEALTHZ_TIMEOUT_S
    client = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=timeout, socket_timeout=timeout)
    try:
        client.ping()
    except Exception as exc:
        return f"redis unreachable: {type(exc).__name__}: {exc}".strip()
    finally:
        client.close()
    return None
