"""A consumer that ends stops its channel-layer read even when the read swallows a cancel
(channels_redis does now and then with a socket timeout set): channels' own loop awaits the
cancelled read once and waits for ever."""

from __future__ import annotations

import asyncio
import contextlib

from channels.exceptions import StopConsumer
from channels.utils import await_many_dispatch

from core.socket_loop import cancel_until_done, dispatch_until_stopped


def stubborn_reader(ended: list[str]):
    async def read() -> dict:
        with contextlib.suppress(asyncio.CancelledError):  # swallowed, as channels_redis's receive sometimes does
            await asyncio.sleep(60)
        try:
            await asyncio.sleep(60)
        finally:
            ended.append("read")
        return {}
    return read


def stopping_reader():
    async def read() -> dict:
        return {"type": "stop"}
    return read


async def stop(message: dict) -> None:  # noqa: ARG001 (a dispatch)
    raise StopConsumer


async def ends_within(loop_under_test, seconds: float) -> tuple[bool, list[str]]:
    ended: list[str] = []
    task = asyncio.ensure_future(loop_under_test([stopping_reader(), stubborn_reader(ended)], stop))
    done, _ = await asyncio.wait([task], timeout=seconds)
    if not done:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    else:
        assert isinstance(task.exception(), StopConsumer)
    return bool(done), ended


async def test_a_read_that_swallows_a_cancel_is_cancelled_again_and_ends() -> None:
    stopped, ended = await ends_within(dispatch_until_stopped, 5)
    assert stopped and ended == ["read"]


async def test_channels_own_loop_waits_on_such_a_read() -> None:
    """The defect this loop replaces (if channels fixes it, this test says so)."""
    stopped, _ = await ends_within(await_many_dispatch, 2)
    assert not stopped


async def test_a_consumer_cancelled_while_it_ends_still_ends_its_read() -> None:
    """A test loop's teardown (or a server's) cancels the consumer once, while it is still
    cancelling its stubborn read: the read still ends, and the cancel comes after (a read left
    pending swallowed the teardown's one cancel, and the teardown waited for ever: 600 s once)."""
    ended: list[str] = []
    read = asyncio.ensure_future(stubborn_reader(ended)())
    await asyncio.sleep(0)  # the read has started
    ending = asyncio.ensure_future(cancel_until_done([read]))
    await asyncio.sleep(0.05)  # its first cancel swallowed, it waits to ask again
    ending.cancel()
    done, _ = await asyncio.wait([ending], timeout=5)
    assert done and ending.cancelled()
    assert read.done() and ended == ["read"]
