from __future__ import annotations

from typing import Any

from django import template

from core.roles import Capability, user_can
from metrics.selectors import dashboard_cards, gateway_live, open_alerts
from metrics.selectors import usage_totals as usage_totals_selector

register = template.Library()


@register.inclusion_tag("metrics/_dashboard_cards.html", takes_context=True)
def metrics_dashboard(context: template.Context) -> dict[str, Any]:
    request = context["request"]
    return {"cards": dashboard_cards(), "gateway": gateway_live(), "request": request,
            "can_operate": user_can(request.user, Capability.OPERATE), "csrf_token": context.get("csrf_token")}


@register.inclusion_tag("metrics/_alert_badge.html", takes_context=True)
def open_alerts_badge(context: template.Context) -> dict[str, Any]:
    request = context.get("request")
    if request is None or not user_can(request.user, Capability.VIEW):
        return {"show": False}
    return {"show": True, "count": open_alerts().count()}


@register.inclusion_tag("metrics/_usage_totals.html")
def usage_totals(by: str, hours: int = 24, key_ids: list[int] | None = None) -> dict[str, Any]:
    """The gateway page's totals per key or lane (`by`), served by metrics: they read its
    hourly rollup, which the gateway's code may not import. `key_ids`: a team's keys only."""
    return {"rows": usage_totals_selector(by=by, hours=hours, key_ids=key_ids), "by": by, "hours": hours}
