"""Lane changes reach every gateway process at once (instead of after the lane cache's
TTL): after the transaction commits, one Redis message tells the gateways to reload.
A signal, because lanes must not import the gateway (the gateway imports lanes)."""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.db.models.signals import post_delete, post_save

from gateway.services import gateway_invalidate
from lanes.models import Lane, LaneNode, LaneReplica, Node

log = logging.getLogger(__name__)


def _publish_lanes_changed() -> None:
    try:
        gateway_invalidate("lanes")
    except Exception:  # Redis down: the gateways' lane cache TTL still bounds staleness
        log.warning("gateway: could not publish a lane change", exc_info=True)


def on_lane_change(sender: Any, **kwargs: Any) -> None:  # noqa: ARG001 (a Django signal receiver is called with sender=)
    transaction.on_commit(_publish_lanes_changed)


def connect() -> None:
    for model in (Lane, LaneNode, LaneReplica, Node):
        post_save.connect(on_lane_change, sender=model, dispatch_uid=f"gateway-{model.__name__}-save")
        post_delete.connect(on_lane_change, sender=model, dispatch_uid=f"gateway-{model.__name__}-delete")
