"""The gateway's key cache: a change announced while a key's row is being read is never
outlived by the row read before it (a raised budget takes effect at once, not after the TTL)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from gateway import directory
from gateway.directory import KeyCache, KeyInfo


def info(rpm: int) -> KeyInfo:
    return KeyInfo(id=7, name="agent", secret_hash="h", allowed_lanes=None, default_lane=None, rpm=rpm, tpm=0,
                   max_parallel=0, log_prompts=False, expires_at=None, revoked=False)


@pytest.fixture
def rows(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The key's row as the database holds it, and a gate the first read waits on (a read
    in flight when the change lands)."""
    state: dict[str, Any] = {"rpm": 10, "reads": 0, "gate": threading.Event(), "reading": threading.Event()}
    state["gate"].set()

    def load(secret_hash: str) -> KeyInfo:
        state["reads"] += 1
        seen = state["rpm"]  # read before the gate: the row as it was when the read began
        state["reading"].set()
        state["gate"].wait(10)
        return info(seen)

    monkeypatch.setattr(directory, "_load_key", load)
    return state


def test_a_read_in_flight_when_the_key_changes_is_not_kept(rows: dict[str, Any]) -> None:
    async def scenario() -> tuple[int, int, int]:
        cache = KeyCache()
        rows["gate"].clear()
        first = asyncio.ensure_future(cache.get("h"))
        await asyncio.to_thread(rows["reading"].wait, 10)
        rows["rpm"] = 20  # the admin raises the limit; the portal announces it
        cache.drop(7)
        rows["gate"].set()
        stale = await first
        fresh = await cache.get("h")  # not the row read before the change
        again = await cache.get("h")  # and now that one is kept
        return stale.rpm if stale else 0, fresh.rpm if fresh else 0, again.rpm if again else 0

    stale, fresh, again = asyncio.run(scenario())
    assert (stale, fresh, again) == (10, 20, 20)
    assert rows["reads"] == 2  # the third lookup came from the cache


def test_a_read_with_no_change_meanwhile_is_kept(rows: dict[str, Any]) -> None:
    async def scenario() -> None:
        cache = KeyCache()
        assert (await cache.get("h")) == info(10)
        rows["rpm"] = 30  # changed without an announcement: the TTL bounds it
        assert (await cache.get("h")) == info(10)

    asyncio.run(scenario())
    assert rows["reads"] == 1
