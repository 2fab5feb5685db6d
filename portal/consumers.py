"""The dashboard's socket: the periodic work's ticks and the heartbeat, the lanes', nodes'
and jobs' changes — and on every (re)connect their current state (portal.selectors)."""

from __future__ import annotations

from core.broadcast import DASHBOARD_GROUP
from core.consumers import PortalConsumer
from core.roles import Capability
from portal.selectors import dashboard_current


class DashboardConsumer(PortalConsumer):
    capability = Capability.VIEW

    async def groups_for_connection(self) -> list[str]:
        return [DASHBOARD_GROUP]

    async def on_accepted(self) -> None:
        await self.send_json({"event": "hello", "data": {"groups": self.joined}})
        await self.send_current(dashboard_current)
