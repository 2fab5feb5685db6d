"""The one broadcast helper. Save first, broadcast second: callers write the rows, then
call this to tell connected browsers."""

from __future__ import annotations

import time
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

DASHBOARD_GROUP = "dashboard"
# The dashboard socket's sockets of operators (core.roles.Capability.OPERATE) also join this one:
# what only they may read (the fair queues' waits per API key) is broadcast to it.
OPERATORS_GROUP = "dashboard.operators"
# What every page's header shows live (the open-alert count): every page of a viewer+ joins it.
HEADER_GROUP = "header"


def group_message(event: str, data: Any, *, at: float | None = None) -> dict[str, Any]:
    """A message as the sockets forward it, stamped with when it was sent (epoch seconds):
    a page keeps the newest it has seen of each thing (static/portal/live.js), so a message
    that arrives after a newer one, or after the snapshot a socket sends on (re)connect
    (stamped when it began reading), never overwrites it. Saved first, so a message stamped
    before a snapshot began is already in it."""
    return {"type": "portal.event", "event": event, "data": data, "at": time.time() if at is None else at}


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


def user_group(user_id: int) -> str:
    """Every socket of one account: told when its role or account changes."""
    return f"user.{user_id}"


ACCESS_CHANGED = {"type": "portal.access"}


def announce_access_change(user_id: int) -> None:
    """The account's role, superuser flag or active flag changed (or it was deleted): each of
    its open sockets checks again and closes if its page is no longer allowed. A socket is
    checked when it opens; without this one opened before a demotion would go on streaming."""
    layer = get_channel_layer()
    if layer is None:
        return
    async_to_sync(layer.group_send)(user_group(user_id), dict(ACCESS_CHANGED))
