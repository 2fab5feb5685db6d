"""Schemas of metrics' API: chart series (/api/metrics/...) and the gateway's usage totals
(/api/gateway/totals/..., read from metrics' rollups)."""

from __future__ import annotations

from typing import Any, Literal

from ninja import Field, Schema

# The keys of metrics.charts.CHART_RANGES (a test checks they agree).
ChartRangeKey = Literal["15m", "6h", "7d"]


class SeriesPointOut(Schema):
    t: str  # ISO 8601, UTC
    v: dict[str, Any]  # every series of the target at that instant (the chart's labels: SERIES_LABELS)


class ChartEventOut(Schema):
    """An annotation: what happened at `t` (metrics.annotations)."""

    t: str  # ISO 8601, UTC
    type: Literal["launch", "stop", "restart", "guardian_restart", "degraded", "recovered", "alert", "resolved"]
    label: str
    href: str  # the job's or the alerts' page, or ""


class SeriesOut(Schema):
    range: ChartRangeKey | Literal["custom"]
    from_: str = Field(..., alias="from")  # the window, ISO 8601
    to: str
    bucket_s: int  # 0: raw samples (one a scrape); 60 or 3600: per-minute or per-hour means
    points: list[SeriesPointOut]
    events: list[ChartEventOut]


class TrafficPointOut(Schema):
    t: str
    requests: int
    errors: int
    max_latency_ms: float | None


class TrafficOut(Schema):
    range: Literal["1h", "custom"]
    from_: str = Field(..., alias="from")
    to: str
    bucket_s: int  # 60 or 3600
    points: list[TrafficPointOut]
    events: list[ChartEventOut]


class TotalsOut(Schema):
    name: str
    requests: int
    errors: int
    prompt_tokens: int | None
    completion_tokens: int | None
    avg_latency_ms: float | None
    avg_ttft_ms: float | None
