"""Metrics' JSON, on the one /api/ NinjaAPI (core.api: session and role checks, the shared
error shape): a chart's points (viewers and up), the gateway's usage totals (admins),
which keep their /api/gateway/ path, usage over time with its cost (/api/usage/: members their
teams', admins all) and the cost model (admins change it). The Prometheus exposition (/metrics: text, a bearer
token) is a plain view, metrics.views.prometheus_metrics."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Path, Query, Router, Status
from ninja.errors import HttpError

from core.api import ErrorOut, can_operate, can_view
from core.validators import INT64_MAX
from gateway.api import router as gateway_router
from gateway.selectors import usage_key_ids
from metrics.charts import GATEWAY_MAX_SPAN, MAX_SPAN, WindowError, chart_series, gateway_chart, parse_window
from metrics.models import CostModel, TargetKind
from metrics.schemas import ChartRangeKey, CostModelIn, CostModelOut, SeriesOut, TotalsOut, TrafficOut, UsageOut
from metrics.selectors import usage_totals
from metrics.usage import COST_FIELDS, UsageQuery, cost_model, cost_model_set, usage_series

router = Router(tags=["metrics"])


def _window_refused(exc: WindowError) -> Status[dict[str, Any]]:
    """A custom window's broken rule: 422, naming the query parameter (as a bad `range` is)."""
    return Status(422, {"detail": [{"loc": ["query", exc.field], "msg": exc.message, "type": "value_error"}]})


WINDOW_QUERY = "A custom window instead of `range`: ISO 8601 instants (UTC without an offset)"


@router.get("/metrics/series/{kind}/{name}", response={200: SeriesOut, 422: ErrorOut}, by_alias=True)
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
@router.get("/gateway/traffic", response={200: TrafficOut, 422: ErrorOut}, auth=can_operate,
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


@router.get("/usage/series", response=UsageOut, auth=can_view, tags=["usage"])
def usage(request: HttpRequest, bucket: str = "hour", by: str = "key",
          days: int = Query(1, ge=1, le=400), lane: str = Query("", max_length=63),
          team: int | None = Query(None, ge=1, le=INT64_MAX)) -> dict[str, Any]:
    """Requests, tokens (prompt and completion apart), errors, latency p50/p95 and cost per
    hour, 6 hours or day (`bucket`: hour, 6h or day) and per `by` (team, key, lane or model)
    over the last `days` (hour buckets: at most 2; 6 hours: at most 90), with the range's top
    consumers. Admins read every key's usage; others
    their teams' keys only (`team`: one team's; another team's is 403). 422 names a bad field."""
    key_ids = usage_key_ids(request.auth, team_id=team)  # type: ignore[attr-defined]
    return usage_series(UsageQuery(bucket=bucket, by=by, days=days, lane=lane, key_ids=key_ids))


def cost_model_out(model: CostModel) -> dict[str, Any]:
    return {**{name: getattr(model, name) for name in COST_FIELDS}, "node_hour": model.node_hour,
            "updated_at": model.updated_at}


@router.get("/usage/cost-model", response=CostModelOut, auth=can_view, tags=["usage"])
def cost_model_get(request: HttpRequest) -> dict[str, Any]:
    """What a node-hour costs (metrics.usage: how a request's cost is computed from it)."""
    return cost_model_out(cost_model())


@router.patch("/usage/cost-model", response=CostModelOut, auth=can_operate, tags=["usage"])
def cost_model_patch(request: HttpRequest, payload: CostModelIn) -> dict[str, Any]:
    """Admins: change the fields sent (audited); a value out of its range is 422 naming it."""
    values = {name: value for name, value in payload.dict().items() if value is not None}
    return cost_model_out(cost_model_set(actor=request.auth, **values))  # type: ignore[attr-defined]
