"""The sockets' message loop: channels' AsyncConsumer.__call__ and await_many_dispatch with
one change — a consumer that ends cancels its channel-layer read until the read has ended.

channels_redis's receive, with a socket timeout on its Redis connections (portal.settings
sets one: without it an idle read dies at 5 s), swallows a cancel now and then (about one in
16 under load); channels awaits the cancelled read once and so waits for ever: the consumer
outlives its socket, keeps reading Redis, and holds up a server's shutdown and a test loop's
teardown. Here the cancel is repeated until the read is over.

And a consumer's read is ended by a message before it is cancelled. channels' specific channels
share one Redis key per process: whichever consumer holds the read lock pops the messages of
every socket of the process. Cancelled just as that pop returned, it lost a message meant for
another socket (4 to 18 in 1,500 to 3,000 while sockets came and went: tests/core/
test_socket_loop.py), and that page showed a stale state until it was reloaded. So an ending
consumer sends its own channel a message and waits for its read to return it (whoever popped
it hands it over): nothing is cancelled mid-pop. Only a read that does not return (Redis gone)
is cancelled."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from channels.exceptions import StopConsumer
from channels.layers import get_channel_layer

CANCEL_AGAIN_S = 0.5
# How long an ending consumer waits for its channel read to return the message it sent itself.
WAKE_WAIT_S = 5.0
ENDED = {"type": "socket.ended"}


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


async def end_reads(tasks: Sequence[asyncio.Future[Any]], wake: Callable[[], Awaitable[Any]] | None) -> None:
    """Ends the reads: the last one (the channel layer's) by `wake`, a message that makes it
    return, then whatever is left by cancelling it (cancel_until_done)."""
    cancelled = False
    if wake is not None and not tasks[-1].done():
        try:
            await wake()
            await asyncio.wait([tasks[-1]], timeout=WAKE_WAIT_S)
        except asyncio.CancelledError:
            cancelled = True
        except Exception:  # noqa: BLE001, S110 - the layer is gone: the read is cancelled below
            pass
    await cancel_until_done(tasks)
    if cancelled:
        raise asyncio.CancelledError


async def dispatch_until_stopped(readers: list[Callable[[], Awaitable[Any]]],
                                 dispatch: Callable[[Any], Awaitable[None]],
                                 wake: Callable[[], Awaitable[Any]] | None = None) -> None:
    """Each reader's messages to dispatch as they come, until dispatch raises (StopConsumer);
    then the reads are ended (end_reads: `wake` ends the last)."""
    tasks = [asyncio.ensure_future(reader()) for reader in readers]
    try:
        while True:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for index, task in enumerate(tasks):
                if task.done():
                    await dispatch(task.result())
                    tasks[index] = asyncio.ensure_future(readers[index]())
    finally:
        await end_reads(tasks, wake)


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
        wake = None
        if self.channel_layer is not None:
            self.channel_name = await self.channel_layer.new_channel()
            self.channel_receive = functools.partial(self.channel_layer.receive, self.channel_name)
            readers.append(self.channel_receive)
            wake = functools.partial(self.channel_layer.send, self.channel_name, dict(ENDED))  # end_reads
        self.base_send = send
        with contextlib.suppress(StopConsumer):  # the consumer ended itself
            await dispatch_until_stopped(readers, self.dispatch, wake)
