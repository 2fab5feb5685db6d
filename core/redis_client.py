"""The one synchronous Redis client of a process, per REDIS_URL (tests change the URL; a
client per URL keeps each its own pool). Async callers use their own (the gateway's runtime)."""

from __future__ import annotations

import redis
from django.conf import settings

_clients: dict[str, redis.Redis] = {}


def sync_redis() -> redis.Redis:
    client = _clients.get(settings.REDIS_URL)
    if client is None:
        client = _clients[settings.REDIS_URL] = redis.Redis.from_url(settings.REDIS_URL)
    return client
