"""Which lane answers a request. model="auto" asks the semantic router (gateway.route);
with no published version, it goes to the configured default lane (route reason `default`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from gateway.directory import KeyInfo, LaneInfo, resolve_model
from gateway.models import RouteReason
from gateway.route import AutoRoute, RouterRuntime, route_auto
from gateway.wire import GatewayError

AUTO = "auto"


@dataclass(frozen=True)
class RouteDecision:
    lane: str
    reason: str
    score: float | None = None
    label: str = ""
    auto: AutoRoute | None = None  # the router's full decision, for the log and headers


async def route_request(*, lanes: Mapping[str, LaneInfo]) -> RouteDecision:
    """model="auto" with no router decision: PORTAL_GATEWAY_DEFAULT_LANE, or the first
    serving lane when that is not set."""
    default = settings.GATEWAY_DEFAULT_LANE
    if default and default in lanes:
        return RouteDecision(lane=default, reason=RouteReason.DEFAULT)
    for lane in lanes.values():
        if lane.serving:
            return RouteDecision(lane=lane.name, reason=RouteReason.DEFAULT)
    raise GatewayError(503, "No lane is serving.", code="no_lane_available", type_="server_error",
                       retry_after_s=5, retryable=True)


async def choose_lane(
    *, model: str, path_lane: str | None, key: KeyInfo, body: Mapping[str, Any], lanes: Mapping[str, LaneInfo],
    router: RouterRuntime, raw_bytes: int,
) -> RouteDecision:
    """The lane named by the URL, else by `model`, else (auto) the key's pinned lane or the router."""
    if path_lane is not None:
        lane = lanes.get(path_lane)
        if lane is None:
            raise GatewayError(404, f"The lane `{path_lane}` does not exist.", code="model_not_found", param="model")
        decision = RouteDecision(lane=lane.name, reason=RouteReason.EXPLICIT)
    elif model == AUTO:
        if key.default_lane is not None and key.default_lane in lanes and key.may_use(key.default_lane):
            decision = RouteDecision(lane=key.default_lane, reason=RouteReason.KEY_DEFAULT)
        else:
            # The router only ever sees the lanes this key may use.
            allowed = lanes if key.allowed_lanes is None else {
                name: lane for name, lane in lanes.items() if key.may_use(name)}
            auto = await route_auto(router, body=body, key=key, lanes=allowed, raw_bytes=raw_bytes)
            decision = (RouteDecision(lane=auto.lane, reason=auto.reason, score=auto.score, label=auto.label, auto=auto)
                        if auto is not None else await route_request(lanes=allowed))
    else:
        found = resolve_model(model, lanes)
        if found is None:
            raise GatewayError(404, f"The model `{model}` does not exist.", code="model_not_found", param="model")
        decision = RouteDecision(lane=found.name, reason=RouteReason.EXPLICIT)
    if not key.may_use(decision.lane):
        raise GatewayError(403, f"This API key may not use the lane `{decision.lane}`.", code="lane_not_allowed",
                           type_="permission_error", param="model")
    return decision
