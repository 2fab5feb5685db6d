"""A consumer that ends stops its channel-layer read even when the read swallows a cancel
(channels_redis does now and then with a socket timeout set): channels' own loop awaits the
cancelled read once and waits for ever. And a socket that closes ends its read with a message
to itself, never a cancel mid-pop: it loses none of the other sockets' messages."""

from __future__ import annotations

import asyncio
import contextlib
import random

import pytest
from channels.exceptions import StopConsumer
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from channels.utils import await_many_dispatch

from core.socket_loop import SocketLoop, cancel_until_done, dispatch_until_stopped


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


class Forwards(SocketLoop, AsyncJsonWebsocketConsumer):
    """Says its channel, then forwards what it is sent there."""

    async def connect(self) -> None:
        await self.accept()
        await self.send_json({"channel": self.channel_name})

    async def test_n(self, message: dict) -> None:
        await self.send_json({"n": message["n"]})


@pytest.mark.django_db
async def test_sockets_that_close_lose_none_of_another_sockets_messages() -> None:
    """The sockets of a process share one channel-layer read (channels' specific channels):
    while sockets open and close, one socket is sent 1,500 messages and gets every one.
    When a closing socket's read was cancelled, 4 to 18 of 1,500 to 3,000 were lost."""
    layer = get_channel_layer()
    steady = WebsocketCommunicator(Forwards.as_asgi(), "/ws/test/")
    assert (await steady.connect())[0]
    channel = (await steady.receive_json_from())["channel"]
    sent = asyncio.Event()

    async def come_and_go() -> None:
        while not sent.is_set():
            other = WebsocketCommunicator(Forwards.as_asgi(), "/ws/test/")
            assert (await other.connect(timeout=10))[0]
            await asyncio.sleep(random.uniform(0, 0.02))
            await other.disconnect(timeout=10)

    others = [asyncio.ensure_future(come_and_go()) for _ in range(3)]
    for n in range(1500):
        await layer.send(channel, {"type": "test.n", "n": n})
        await asyncio.sleep(random.uniform(0, 0.002))
    sent.set()
    await asyncio.gather(*others)
    got: list[int] = []
    with contextlib.suppress(asyncio.TimeoutError):  # a lost message: the test says which
        while len(got) < 1500:
            got.append((await steady.receive_json_from(timeout=10))["n"])
    assert got == list(range(1500))
    await steady.disconnect(timeout=10)
