"""The gateway page's usage totals, served by metrics (they read its hourly rollup, which
the gateway's code may not import): `{% load metrics_usage %}{% usage_totals "key" %}`."""

from __future__ import annotations

from typing import Any

from django import template

from metrics.selectors import usage_totals as usage_totals_selector

register = template.Library()


@register.inclusion_tag("metrics/_usage_totals.html")
def usage_totals(by: str, hours: int = 24) -> dict[str, Any]:
    return {"rows": usage_totals_selector(by=by, hours=hours), "by": by, "hours": hours}
