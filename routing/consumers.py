"""The evaluation page's socket: its version's evaluation progress, current on every
(re)connect, then each step the worker reports (routing.evaluation_runs)."""

from __future__ import annotations

from core.consumers import PortalConsumer
from core.roles import Capability
from routing.evaluation_runs import evaluation_current, evaluation_group


class RouterEvaluationConsumer(PortalConsumer):
    capability = Capability.VIEW  # as the page: everyone who reads the portal reads its figures

    def number(self) -> int:
        return int(self.scope["url_route"]["kwargs"]["number"])

    async def groups_for_connection(self) -> list[str]:
        return [evaluation_group(self.number())]

    async def on_accepted(self) -> None:
        number = self.number()
        await self.send_current(lambda: evaluation_current(number))
