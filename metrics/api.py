"""Metrics' JSON, on the one /api/ NinjaAPI (core.api: session and role checks, the shared
error shape): a chart's points (viewers and up) and the gateway's usage totals (admins),
which keep their /api/gateway/ path. The Prometheus exposition (/metrics: text, a bearer
token) is a plain view, metrics.views.prometheus_metrics."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Path, Query, Router
from ninja.errors import HttpError

from core.api import can_operate
from gateway.api import router as gateway_router
from metrics.models import TargetKind
from metrics.schemas import ChartRangeKey, SeriesOut, TotalsOut
from metrics.selectors import chart_series, usage_totals

router = Router(tags=["metrics"])


@router.get("/metrics/series/{kind}/{name}", response=SeriesOut)
def series(request: HttpRequest, kind: str, name: str = Path(..., max_length=63),
           range: ChartRangeKey = "15m") -> dict[str, Any]:
    """Every series of one lane or node (`kind`: lane or node) over the range, oldest first:
    15 min of raw samples, 6 h of per-minute means or 7 days of per-hour means."""
    if kind not in TargetKind.values:
        raise HttpError(404, f"No such kind: the kinds are {', '.join(TargetKind.values)}.")
    return chart_series(kind, name, range)


# Listed with the gateway's other management operations.
@router.get("/gateway/totals/{by}", response=list[TotalsOut], auth=can_operate, tags=gateway_router.tags)
def totals(request: HttpRequest, by: str, hours: int = Query(24, ge=1, le=24 * 90)) -> list[dict[str, Any]]:
    """Requests, errors, tokens and mean latency and TTFT per API key or per lane over the
    last hours, from the hourly rollup (metrics.selectors.usage_totals: the window's rule)."""
    if by not in ("key", "lane"):
        raise HttpError(404, "Totals are by `key` or by `lane`.")
    return usage_totals(by=by, hours=hours)
