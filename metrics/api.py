"""Metrics' JSON, on the one /api/ NinjaAPI (core.api: session and role checks, the shared
error shape): a chart's points (viewers and up) and the gateway's usage totals (admins),
which keep their /api/gateway/ path. The Prometheus exposition (/metrics: text, a bearer
token) is a plain view, metrics.views.prometheus_metrics."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Path, Query, Router, Status
from ninja.errors import HttpError

from core.api import ErrorOut, can_operate
from gateway.api import router as gateway_router
from metrics.charts import GATEWAY_MAX_SPAN, MAX_SPAN, WindowError, chart_series, gateway_chart, parse_window
from metrics.models import TargetKind
from metrics.schemas import ChartRangeKey, SeriesOut, TotalsOut, TrafficOut
from metrics.selectors import usage_totals

router = Router(tags=["metrics"])


def _window_refused(exc: WindowError) -> Status[dict[str, Any]]:
    """A custom window's broken rule: 400, naming the query parameter (the one error shape)."""
    return Status(400, {"detail": [{"loc": ["query", exc.field], "msg": exc.message, "type": "value_error"}]})


WINDOW_QUERY = "A custom window instead of `range`: ISO 8601 instants (UTC without an offset)"


@router.get("/metrics/series/{kind}/{name}", response={200: SeriesOut, 400: ErrorOut}, by_alias=True)
def series(request: HttpRequest, kind: str, name: str = Path(..., max_length=63),
           range: ChartRangeKey = "15m",
           from_: str | None = Query(None, alias="from", max_length=40, description=WINDOW_QUERY),
           to: str | None = Query(None, max_length=40, description=WINDOW_QUERY)) -> Any:
    """Every series of one lane or node (`kind`: lane or node) over the range, oldest first:
    15 min of raw samples, 6 h of per-minute means or 7 days of per-hour means; or over a
    custom window `from`–`to` (at most 31 days, not in the future; raw samples up to 1 h,
    per-minute means up to 36 h, per-hour beyond: `bucket_s` says which). With the window's
    events (launches, stops, restarts, degraded and recovered, alerts) for the chart's markers."""
    if kind not in TargetKind.values:
        raise HttpError(404, f"No such kind: the kinds are {', '.join(TargetKind.values)}.")
    if from_ is None and to is None:
        return chart_series(kind, name, range)
    try:
        window = parse_window(from_, to, max_span=MAX_SPAN)
    except WindowError as exc:
        return _window_refused(exc)
    return chart_series(kind, name, window=window)


# Listed with the gateway's other management operations.
@router.get("/gateway/traffic", response={200: TrafficOut, 400: ErrorOut}, auth=can_operate,
            tags=gateway_router.tags, by_alias=True)
def traffic(request: HttpRequest,
            from_: str | None = Query(None, alias="from", max_length=40, description=WINDOW_QUERY),
            to: str | None = Query(None, max_length=40, description=WINDOW_QUERY)) -> Any:
    """Requests, errors and the slowest request per minute over the last hour, or over a custom
    window `from`–`to` (at most 7 days, not in the future; per minute up to 6 h, per hour
    beyond), with every lane's and alert's events in it: the gateway page's traffic chart."""
    if from_ is None and to is None:
        return gateway_chart()
    try:
        window = parse_window(from_, to, max_span=GATEWAY_MAX_SPAN)
    except WindowError as exc:
        return _window_refused(exc)
    return gateway_chart(window=window)


# Listed with the gateway's other management operations.
@router.get("/gateway/totals/{by}", response=list[TotalsOut], auth=can_operate, tags=gateway_router.tags)
def totals(request: HttpRequest, by: str, hours: int = Query(24, ge=1, le=24 * 90)) -> list[dict[str, Any]]:
    """Requests, errors, tokens and mean latency and TTFT per API key or per lane over the
    last hours, from the hourly rollup (metrics.selectors.usage_totals: the window's rule)."""
    if by not in ("key", "lane"):
        raise HttpError(404, "Totals are by `key` or by `lane`.")
    return usage_totals(by=by, hours=hours)
