"""Schemas of metrics' API: chart series (/api/metrics/...) and the gateway's usage totals
(/api/gateway/totals/..., read from metrics' rollups)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from ninja import Field, Schema

from core.api import InSchema

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


class UsageSeriesOut(Schema):
    """metrics.usage.usage_series: one list per measure, aligned with `times`."""

    name: str
    requests: list[int]
    errors: list[int]
    prompt_tokens: list[int]
    completion_tokens: list[int]
    latency_p50_ms: list[float | None]
    latency_p95_ms: list[float | None]
    cost: list[float]


class UsageTopOut(Schema):
    name: str
    requests: int
    errors: int
    prompt_tokens: int
    completion_tokens: int
    latency_p50_ms: float | None
    latency_p95_ms: float | None
    cost: float
    cost_per_request: float | None


class UsageOut(Schema):
    bucket: str
    by: str
    since: datetime
    until: datetime
    currency: str
    node_hour: float = Field(description="What one node costs an hour: amortization + watts / 1000 × price per kWh.")
    idle_cost: float | None = Field(description="The nodes' cost in hours without a request (admins' view only).")
    times: list[datetime]
    series: list[UsageSeriesOut]
    top: list[UsageTopOut]


class CostModelOut(Schema):
    currency: str
    node_hour_amortization: float
    watts_per_node: float
    price_per_kwh: float
    node_hour: float
    updated_at: datetime


class CostModelIn(InSchema):
    currency: str | None = Field(None, max_length=3, description="ISO 4217, three capital letters.")
    node_hour_amortization: float | None = Field(None, description="Per node and hour, 0 to 1,000.")
    watts_per_node: float | None = Field(None, description="Mean draw of one node in W, 0 to 10,000.")
    price_per_kwh: float | None = Field(None, description="0 to 100.")
