"""Schemas of metrics' API: chart series (/api/metrics/...) and the gateway's usage totals
(/api/gateway/totals/..., read from metrics' rollups)."""

from __future__ import annotations

from typing import Any, Literal

from ninja import Schema

# The keys of metrics.selectors.CHART_RANGES (a test checks they agree).
ChartRangeKey = Literal["15m", "6h", "7d"]


class SeriesPointOut(Schema):
    t: str  # ISO 8601, UTC
    v: dict[str, Any]  # every series of the target at that instant (the chart's labels: SERIES_LABELS)


class SeriesOut(Schema):
    range: ChartRangeKey
    points: list[SeriesPointOut]


class TotalsOut(Schema):
    name: str
    requests: int
    errors: int
    prompt_tokens: int | None
    completion_tokens: int | None
    avg_latency_ms: float | None
    avg_ttft_ms: float | None
