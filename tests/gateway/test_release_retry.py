"""A request's in-flight slot is given back even when a burst of clients has taken every
Redis connection of the gateway's pool; a release that may have reached Redis is never
repeated (it also counts the request's tokens)."""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

from routing.gateway import runtime
from routing.gateway.runtime import POOL_EXHAUSTED, RELEASE_ATTEMPTS, GatewayRuntime


class FlakyScript:
    def __init__(self, failures: list[Exception]) -> None:
        self.failures = failures
        self.calls: list[dict[str, Any]] = []

    async def __call__(self, *, keys: list[str], args: list[Any]) -> int:
        self.calls.append({"keys": keys, "args": args})
        if self.failures:
            raise self.failures.pop(0)
        return 1


class Stub:
    def __init__(self, script: FlakyScript) -> None:
        self.release_script = script


async def test_a_release_the_pool_could_not_send_is_retried_until_it_lands(monkeypatch):
    async def no_wait(seconds: float) -> None:
        return None

    monkeypatch.setattr(runtime.asyncio, "sleep", no_wait)
    script = FlakyScript([aioredis.ConnectionError(POOL_EXHAUSTED), aioredis.ConnectionError(POOL_EXHAUSTED)])
    await GatewayRuntime.release(Stub(script), keys=["k"], args=["r1", 12])  # type: ignore[arg-type]
    assert len(script.calls) == 3 and not script.failures  # landed on the third attempt


async def test_retries_are_bounded(monkeypatch):
    async def no_wait(seconds: float) -> None:
        return None

    monkeypatch.setattr(runtime.asyncio, "sleep", no_wait)
    script = FlakyScript([aioredis.ConnectionError(POOL_EXHAUSTED)] * (RELEASE_ATTEMPTS + 3))
    await GatewayRuntime.release(Stub(script), keys=["k"], args=["r1", 12])  # type: ignore[arg-type]
    assert len(script.calls) == RELEASE_ATTEMPTS


async def test_a_release_that_may_have_reached_redis_is_not_repeated():
    script = FlakyScript([aioredis.ConnectionError("Connection closed by server.")])
    await GatewayRuntime.release(Stub(script), keys=["k"], args=["r1", 12])  # type: ignore[arg-type]
    assert len(script.calls) == 1  # its tokens are never counted twice
