"""An idle live page must not lose its socket: the channel layer's blocking receive has to
outlive channels_redis' blocking pop (redis-py's default 5 s read timeout did not)."""

import asyncio

import pytest
from channels.layers import get_channel_layer


@pytest.mark.django_db
async def test_an_idle_channel_layer_receive_outlives_the_blocking_pop() -> None:
    layer = get_channel_layer()
    channel = await layer.new_channel()
    # Still waiting when we give up — not redis' own TimeoutError from inside the layer.
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(layer.receive(channel), timeout=layer.brpop_timeout + 2)
