"""A request's in-flight slot is given back even when Redis could not be reached for a
moment; a release that may have reached Redis is never repeated (it also counts the
request's tokens)."""

from __future__ import annotations

from typing import Any

from gateway import runtime
from gateway.runtime import RELEASE_ATTEMPTS, GatewayRuntime
from gateway.scripts import NotSent


class FlakyScript:
    def __init__(self, failures: list[Exception]) -> None:
        self.failures = failures
        self.calls: list[dict[str, Any]] = []

    async def __call__(self, *, keys: list[str], args: list[Any], linger: float = 0.0) -> int:
        self.calls.append({"keys": keys, "args": args, "linger": linger})
        if self.failures:
            raise self.failures.pop(0)
        return 1


class Stub:
    def __init__(self, script: FlakyScript) -> None:
        self.release_script = script


async def test_a_release_that_reached_no_redis_is_retried_until_it_lands(monkeypatch):
    async def no_wait(seconds: float) -> None:
        return None

    monkeypatch.setattr(runtime.asyncio, "sleep", no_wait)
    script = FlakyScript([NotSent("could not connect to Redis"), NotSent("could not connect to Redis")])
    await GatewayRuntime.release(Stub(script), keys=["k"], args=["r1", 12])  # type: ignore[arg-type]
    assert len(script.calls) == 3 and not script.failures  # landed on the third attempt


async def test_retries_are_bounded(monkeypatch):
    async def no_wait(seconds: float) -> None:
        return None

    monkeypatch.setattr(runtime.asyncio, "sleep", no_wait)
    script = FlakyScript([NotSent("could not connect to Redis")] * (RELEASE_ATTEMPTS + 3))
    await GatewayRuntime.release(Stub(script), keys=["k"], args=["r1", 12])  # type: ignore[arg-type]
    assert len(script.calls) == RELEASE_ATTEMPTS


async def test_a_release_that_may_have_reached_redis_is_not_repeated():
    script = FlakyScript([ConnectionError("Redis closed the connection")])
    await GatewayRuntime.release(Stub(script), keys=["k"], args=["r1", 12])  # type: ignore[arg-type]
    assert len(script.calls) == 1  # its tokens are never counted twice
