"""The dashboard socket: the periodic work's ticks and the heartbeat, the lanes', nodes'
and jobs' changes — and on every (re)connect their current state (portal.selectors). An
operator's socket also joins OPERATORS_GROUP: the fair queues' waits per API key (the gateway
and lane pages' tables, live); anyone else's gets them per class only, in each tick."""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async

from core.broadcast import DASHBOARD_GROUP, OPERATORS_GROUP
from core.consumers import PortalConsumer
from core.roles import Capability, user_can
from gateway.fair_view import WAITS_EVENT, fair_waits_live
from portal.selectors import dashboard_current


class DashboardConsumer(PortalConsumer):
    capability = Capability.VIEW

    async def groups_for_connection(self) -> list[str]:
        operator = await database_sync_to_async(user_can)(self.scope["user"], Capability.OPERATE)
        return [DASHBOARD_GROUP, OPERATORS_GROUP] if operator else [DASHBOARD_GROUP]

    async def on_accepted(self) -> None:
        await self.send_json({"event": "hello", "data": {"groups": self.joined}})
        by_key = OPERATORS_GROUP in self.joined
        await self.send_current(lambda: [*dashboard_current(), *waits_now(by_key)])

    async def access_kept(self, user: Any) -> None:
        """An operator demoted to a viewer stops getting the waits per key at once."""
        if OPERATORS_GROUP in self.joined and not await database_sync_to_async(user_can)(user, Capability.OPERATE):
            await self.channel_layer.group_discard(OPERATORS_GROUP, self.channel_name)
            self.joined.remove(OPERATORS_GROUP)


def waits_now(by_key: bool) -> list[tuple[str, Any]]:
    """The waits table as of now, when any request waited in the window (else the page's
    table already says none did, and the next tick tells it otherwise)."""
    waits = fair_waits_live(by_key=by_key)
    return [(WAITS_EVENT, waits)] if waits["rows"] else []
