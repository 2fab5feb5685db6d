"""Chart data: a lane's or node's series over a preset range or a custom window (the tier
chosen from the span), the gateway's traffic per minute or hour, each with the window's
annotations (metrics.annotations). The window's rules (from < to, a bounded span, never in
the future) are here, once, for the API and the pages."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Count, Max, Q
from django.db.models.functions import TruncHour, TruncMinute
from django.utils import timezone

from gateway.models import RequestLog
from metrics.annotations import chart_events
from metrics.models import Sample, SampleHour, SampleMinute


@dataclass(frozen=True)
class ChartRange:
    key: str
    label: str
    span: timedelta
    model: type[Sample | SampleMinute | SampleHour]
    bucket_s: int  # 0: raw samples, one a scrape


CHART_RANGES = {
    r.key: r
    for r in (
        ChartRange("15m", "15 min", timedelta(minutes=15), Sample, 0),
        ChartRange("6h", "6 h", timedelta(hours=6), SampleMinute, 60),
        ChartRange("7d", "7 days", timedelta(days=7), SampleHour, 3600),
    )
}
# A custom window: at most this long; raw samples up to RAW_SPAN, 1-minute means up to
# MINUTE_SPAN (each while its tier still holds the window's start), 1-hour means beyond.
MAX_SPAN = timedelta(days=31)
RAW_SPAN = timedelta(hours=1)
MINUTE_SPAN = timedelta(hours=36)
GATEWAY_MAX_SPAN = timedelta(days=7)
GATEWAY_MINUTE_SPAN = timedelta(hours=6)
FUTURE_SLACK = timedelta(minutes=1)  # a browser's clock a little ahead is not "the future"


class WindowError(ValueError):
    """A custom window broke a rule: `field` names the query parameter."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field, self.message = field, message


def _instant(field: str, raw: str) -> datetime:
    try:
        value = datetime.fromisoformat(raw.strip())
    except ValueError:
        raise WindowError(field, f"`{field}` is not a date and time: ISO 8601, e.g. 2026-12-02T14:00:00Z.") from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)  # no offset: UTC, as the pages show


def _span_text(span: timedelta) -> str:
    hours = span.total_seconds() / 3600
    return f"{hours / 24:g} days" if hours >= 48 else f"{hours:g} h"


def parse_window(from_raw: str | None, to_raw: str | None, *, max_span: timedelta,
                 now: datetime | None = None) -> tuple[datetime, datetime]:
    """[from, to] of a custom window, or WindowError naming the parameter and the rule."""
    now = now or timezone.now()
    if not from_raw or not to_raw:
        missing = "from" if not from_raw else "to"
        raise WindowError(missing, f"`{missing}` is missing: a custom window needs both `from` and `to`.")
    since, until = _instant("from", from_raw), _instant("to", to_raw)
    if until > now + FUTURE_SLACK:
        raise WindowError("to", f"`to` is in the future: at most now ({now:%Y-%m-%d %H:%M} UTC).")
    if since >= until:
        raise WindowError("from", "`from` must be before `to`.")
    if until - since > max_span:
        raise WindowError("to", f"The window is at most {_span_text(max_span)} long (`to` − `from`); "
                                f"this one is {_span_text(until - since)}.")
    return since, until


def _custom_tier(since: datetime, until: datetime, now: datetime) -> tuple[type[Sample | SampleMinute | SampleHour], int]:
    span = until - since
    if span <= RAW_SPAN and since >= now - timedelta(days=settings.METRICS_RAW_RETENTION_DAYS):
        return Sample, 0
    if span <= MINUTE_SPAN and since >= now - timedelta(days=settings.METRICS_MINUTE_RETENTION_DAYS):
        return SampleMinute, 60
    return SampleHour, 3600


def chart_series(kind: str, target: str, range_key: str = "15m", *, window: tuple[datetime, datetime] | None = None,
                 now: datetime | None = None) -> dict[str, Any]:
    """Every series of one target over a preset range or a custom `window`, with the
    window's events: one range scan on the primary key."""
    now = now or timezone.now()
    if window is None:
        chart_range = CHART_RANGES[range_key]
        since, until, model, bucket_s = now - chart_range.span, now, chart_range.model, chart_range.bucket_s
    else:
        (since, until), range_key = window, "custom"
        model, bucket_s = _custom_tier(since, until, now)
    rows = (
        model._default_manager.filter(kind=kind, target=target, ts__gte=since, ts__lte=until)
        .order_by("ts")
        .values_list("ts", "values")
    )
    return {"range": range_key, "from": since.isoformat(), "to": until.isoformat(), "bucket_s": bucket_s,
            "points": [{"t": ts.isoformat(), "v": values} for ts, values in rows],
            "events": chart_events(kind, target, since, until)}


def gateway_traffic(*, minutes: int = 60, now: datetime | None = None, since: datetime | None = None,
                    bucket_s: int = 60) -> list[dict[str, Any]]:
    """Requests, errors and the slowest request per minute (or per hour, `bucket_s` 3600)
    from `since` (default: the last `minutes`) to now: one aggregate in the database."""
    now = now or timezone.now()
    trunc = TruncHour if bucket_s == 3600 else TruncMinute
    rows = (
        RequestLog.objects.filter(created_at__gte=since or now - timedelta(minutes=minutes), created_at__lte=now)
        .annotate(bucket=trunc("created_at"))
        .order_by()
        .values("bucket")
        .annotate(requests=Count("id"), errors=Count("id", filter=Q(status__gte=400)), slowest=Max("latency_ms"))
        .order_by("bucket")
    )
    return [{"t": row["bucket"].isoformat(), "requests": row["requests"], "errors": row["errors"],
             "max_latency_ms": row["slowest"]} for row in rows]


def gateway_chart(*, window: tuple[datetime, datetime] | None = None, now: datetime | None = None) -> dict[str, Any]:
    """The gateway page's traffic chart: the last hour per minute (it follows each tick), or a
    custom window (per minute up to 6 h, per hour beyond), with every lane's and alert's events."""
    now = now or timezone.now()
    since, until = window or (now - timedelta(hours=1), now)
    bucket_s = 60 if until - since <= GATEWAY_MINUTE_SPAN else 3600
    return {"range": "custom" if window else "1h", "from": since.isoformat(), "to": until.isoformat(),
            "bucket_s": bucket_s, "points": gateway_traffic(since=since, now=until, bucket_s=bucket_s),
            "events": chart_events(None, None, since, until)}
