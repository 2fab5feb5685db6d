"""The one broadcast helper. Save first, broadcast second: callers write the rows, then
call this to tell connected browsers."""

from __future__ import annotations

from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

DASHBOARD_GROUP = "dashboard"
# What every page's header shows live (the open-alert count): every page of a viewer+ joins it.
HEADER_GROUP = "header"


def group_message(event: str, data: Any) -> dict[str, Any]:
    return {"type": "portal.event", "event": event, "data": data}


def broadcast(group: str, event: str, data: Any) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    async_to_sync(layer.group_send)(group, group_message(event, data))


async def abroadcast(group: str, event: str, data: Any) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    await layer.group_send(group, group_message(event, data))
