"""The sockets' message loop: channels' AsyncConsumer.__call__ and await_many_dispatch with
one change — a consumer that ends cancels its channel-layer read until the read has ended.

channels_redis's receive, with a socket timeout on its Redis connections (portal.settings
sets one: without it an idle read dies at 5 s), swallows a cancel now and then (about one in
16 under load); channels awaits the cancelled read once and so waits for ever: the consumer
outlives its socket, keeps reading Redis, and holds up a server's shutdown and a test loop's
teardown. Here the cancel is repeated until the read is over."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from channels.exceptions import StopConsumer
from channels.layers import get_channel_layer

CANCEL_AGAIN_S = 0.5


async def cancel_until_done(tasks: Sequence[asyncio.Future[Any]]) -> None:
    """Cancels the reads until they have ended, even when this is cancelled meanwhile (a server
    or a test loop cancelling the consumer while it ends): the cancel is kept for after, since
    a read left pending here may swallow the one cancel its loop's shutdown sends it."""
    for task in tasks:
        task.cancel()
    pending = set(tasks)
    cancelled = False
    while pending:
        try:
            _, pending = await asyncio.wait(pending, timeout=CANCEL_AGAIN_S)
        except asyncio.CancelledError:
            cancelled = True
        for task in pending:
            task.cancel()  # the last cancel was swallowed: ask again
    for task in tasks:
        if not task.cancelled():
            task.exception()  # retrieved: a read that failed as it ended is not logged as unretrieved
    if cancelled:
        raise asyncio.CancelledError


async def dispatch_until_stopped(readers: list[Callable[[], Awaitable[Any]]],
                                 dispatch: Callable[[Any], Awaitable[None]]) -> None:
    """Each reader's messages to dispatch as they come, until dispatch raises (StopConsumer)."""
    tasks = [asyncio.ensure_future(reader()) for reader in readers]
    try:
        while True:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for index, task in enumerate(tasks):
                if task.done():
                    await dispatch(task.result())
                    tasks[index] = asyncio.ensure_future(readers[index]())
    finally:
        await cancel_until_done(tasks)


class SocketLoop:
    """First base of an async consumer (before channels' consumer class): its __call__."""

    channel_layer_alias: str
    channel_layer: Any
    channel_name: str
    channel_receive: Callable[[], Awaitable[Any]]
    base_send: Any
    scope: dict[str, Any]
    dispatch: Callable[[Any], Awaitable[None]]

    async def __call__(self, scope: dict[str, Any], receive: Callable[[], Awaitable[Any]], send: Any) -> None:
        self.scope = scope
        self.channel_layer = get_channel_layer(self.channel_layer_alias)
        readers = [receive]
        if self.channel_layer is not None:
            self.channel_name = await self.channel_layer.new_channel()
            self.channel_receive = functools.partial(self.channel_layer.receive, self.channel_name)
            readers.append(self.channel_receive)
        self.base_send = send
        with contextlib.suppress(StopConsumer):  # the consumer ended itself
            await dispatch_until_stopped(readers, self.dispatch)
