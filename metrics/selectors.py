"""Read side: the charts' series labels, dashboard cards and sparklines (chart data itself:
metrics.charts), gateway figures, usage per key and lane over the last hours (per period
and over time: metrics.usage). The request log's filters are the gateway's (gateway.selectors)."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from django.conf import settings
from django.db.models import F, QuerySet, Sum
from django.utils import timezone

from core.stats import percentile_nearest_rank
from gateway.models import RequestLog
from lanes.models import Lane, Node
from metrics.alerts import alert_payload
from metrics.charts import gateway_traffic
from metrics.models import (
    LATENCY_BUCKETS_MS,
    Alert,
    AlertState,
    GatewayDay,
    Sample,
    ScrapeTarget,
    UsageHour,
)
from metrics.parsing import histogram_estimate
from metrics.storage import (
    EXTREMES,
    floor_to,
    latency_histograms,
    log_latency_buckets,
    log_ttft_buckets,
    request_log_aggregates,
)

LANE_CHARTS = (
    ("Tokens/s", ("gen_tps", "prompt_tps")),
    ("Requests", ("running", "waiting")),
    ("KV cache and prefix hits (%)", ("kv_pct", "prefix_hit_pct")),
    ("TTFT (ms)", ("ttft_p50_ms", "ttft_p95_ms")),
    ("Inter-token latency (ms)", ("itl_p50_ms", "itl_p95_ms")),
    ("Speculative decoding", ("spec_accept_pct", "spec_accept_len")),
)
NODE_CHARTS = (
    ("Memory (GiB)", ("mem_avail_gib", "swap_used_gib")),
    ("CPU and GPU (%)", ("cpu_pct", "gpu_util_pct")),
    ("GPU power (W) and temperature (°C)", ("gpu_power_w", "gpu_temp_c")),
    ("RoCE (bytes/s)", ("roce_tx_Bps", "roce_rx_Bps")),
)
SERIES_LABELS = {
    "gen_tps": "generation tok/s", "prompt_tps": "prompt tok/s", "running": "running", "waiting": "waiting",
    "kv_pct": "KV cache %", "prefix_hit_pct": "prefix hit %", "ttft_p50_ms": "TTFT p50", "ttft_p95_ms": "TTFT p95",
    "itl_p50_ms": "ITL p50", "itl_p95_ms": "ITL p95", "spec_accept_pct": "acceptance %",
    "spec_accept_len": "mean acceptance length", "mem_avail_gib": "MemAvailable", "swap_used_gib": "swap used",
    "cpu_pct": "CPU %", "gpu_util_pct": "GPU %", "gpu_power_w": "power W", "gpu_temp_c": "temperature °C",
    "roce_tx_Bps": "RoCE sent", "roce_rx_Bps": "RoCE received",
}
# The one series each dashboard card's sparkline draws.
SPARKLINE_SERIES = {"lane": "gen_tps", "node": "mem_avail_gib"}


def sparklines(kind: str, *, minutes: int = 5, now: datetime | None = None) -> dict[str, list[list[Any]]]:
    """The sparkline series of every target of a kind: one query reading one JSON key."""
    now = now or timezone.now()
    series = SPARKLINE_SERIES[kind]
    rows = (
        Sample.objects.filter(kind=kind, ts__gte=now - timedelta(minutes=minutes))
        .order_by("target", "ts")
        .values_list("target", "ts", f"values__{series}")
    )
    points: dict[str, list[list[Any]]] = defaultdict(list)
    for target, ts, value in rows:
        if value is not None:
            points[target].append([ts.isoformat(), value])
    return dict(points)


def dashboard_cards() -> dict[str, Any]:
    states = {(t.kind, t.target): t for t in ScrapeTarget.objects.all()}

    def card(kind: str, name: str, state: str) -> dict[str, Any]:
        scrape = states.get((kind, name))
        return {"name": name, "state": state, "ok": scrape.ok if scrape else None,
                "error": scrape.error if scrape else "", "figures": scrape.figures if scrape and scrape.ok else {}}

    return {
        "lanes": [card("lane", n, s) for n, s in Lane.objects.order_by("name").values_list("name", "observed_state")],
        "nodes": [card("node", n, s) for n, s in Node.objects.order_by("name").values_list("name", "state")],
        "sparklines": {"lane": sparklines("lane"), "node": sparklines("node")},
        "alerts": [alert_payload(a) for a in open_alerts()],
    }


def open_alerts() -> QuerySet[Alert]:
    return Alert.objects.filter(state=AlertState.OPEN).select_related("acknowledged_by").order_by("-opened_at")




# --- gateway figures, from the request log (recent minutes) and the hourly rollup ---

GATEWAY_RANGES = {"1h": timedelta(hours=1), "24h": timedelta(days=1), "7d": timedelta(days=7), "30d": timedelta(days=30)}
GATEWAY_DAY_RANGES = {"7d": 7, "30d": 30}  # read from the daily rollup, in whole UTC days


def gateway_live(*, minutes: int = 5, now: datetime | None = None) -> dict[str, Any]:
    """The last few minutes from the request log itself (one indexed range on created_at):
    what the dashboard and the gateway page show live."""
    now = now or timezone.now()
    rows = list(
        RequestLog.objects.filter(created_at__gte=now - timedelta(minutes=minutes))
        .order_by()
        .values_list("status", "latency_ms", "ttft_ms", "lane")
    )
    total = len(rows)
    errors = sum(1 for status, *_ in rows if status >= 400)
    latencies = [latency for _, latency, _, _ in rows]
    ttfts = [ttft for _, _, ttft, _ in rows if ttft is not None]
    share: dict[str, int] = defaultdict(int)
    for *_, lane in rows:
        share[lane or "-"] += 1
    return {
        "minutes": minutes, "rpm": total / minutes, "requests": total,
        "error_pct": 100.0 * errors / total if total else 0.0,
        "latency_p50_ms": percentile_nearest_rank(latencies, 0.5),
        "latency_p95_ms": percentile_nearest_rank(latencies, 0.95),
        "ttft_p50_ms": percentile_nearest_rank(ttfts, 0.5), "ttft_p95_ms": percentile_nearest_rank(ttfts, 0.95),
        "share": {lane: 100.0 * n / total for lane, n in sorted(share.items())} if total else {},
        # The last two minutes per minute: the gateway page's traffic chart follows each tick.
        "traffic": gateway_traffic(minutes=2, now=now),
    }


@dataclass(frozen=True)
class GatewayWindow:
    """What a summary range covers: rollup rows from `since` (whole hours or UTC days) and,
    for the hour ranges, the partial first hour [since, edge_until) from the request log."""

    since: datetime
    rows: QuerySet[UsageHour] | QuerySet[GatewayDay]
    edge_until: datetime | None = None


def hour_window(span: timedelta, *, now: datetime) -> tuple[datetime, datetime, datetime | None]:
    """The last `span` as the hourly rollup holds it: (since, first whole hour, edge). The
    rollup's rows from the first whole hour on (the current hour up to its last run, a minute
    at most behind) and the request log's [since, edge) — the part of the hour before them,
    at most an hour of rows over its created_at index; edge is None when since is on the hour."""
    since = now - span
    first_whole = floor_to(since, 3600)
    if first_whole < since:
        first_whole += timedelta(hours=1)
    return since, first_whole, first_whole if first_whole > since else None


def gateway_window(range_key: str, *, now: datetime) -> GatewayWindow:
    """1 h and 24 h are exactly that (hour_window). 7 and 30 days are that many UTC days,
    today included, from the daily rollup, which the minute's rollup keeps current for today."""
    if range_key in GATEWAY_DAY_RANGES:
        first_day = now.date() - timedelta(days=GATEWAY_DAY_RANGES[range_key] - 1)
        since = datetime(first_day.year, first_day.month, first_day.day, tzinfo=UTC)
        return GatewayWindow(since=since, rows=GatewayDay.objects.filter(day__gte=first_day))
    since, first_whole, edge_until = hour_window(GATEWAY_RANGES[range_key], now=now)
    return GatewayWindow(since=since, rows=UsageHour.objects.filter(hour__gte=first_whole), edge_until=edge_until)


def _add(into: list[float], values: list[Any]) -> None:
    for i, value in enumerate(values):
        into[i] += float(value or 0)


def gateway_summary(
    range_key: str, *, now: datetime | None = None, exact_up_to: int | None = None,
) -> dict[str, Any]:
    """Figures over an hour to a month: requests, error rate by code, tokens, share per lane,
    latency and TTFT percentiles — two queries whatever the range (the rollup per lane and
    status, the request log's partial first hour), over at most a few thousand rollup rows and
    an hour of the request log; a third, the range's latencies, when it holds at most
    `exact_up_to` requests (EXACT_PERCENTILE_MAX_REQUESTS): then the percentiles are exact."""
    now = now or timezone.now()
    window = gateway_window(range_key, now=now)
    by_status: dict[int, int] = defaultdict(int)
    by_lane: dict[str, int] = defaultdict(int)
    tokens = [0.0, 0.0]
    latency = [0.0] * len(LATENCY_BUCKETS_MS)
    ttft = [0.0] * (len(LATENCY_BUCKETS_MS) + 1)  # +Inf last: the requests with a first token
    groups = latency_histograms(window.rows, "lane", "status", prompt=Sum("prompt_tokens"),
                                completion=Sum("completion_tokens"))
    if window.edge_until is not None:
        edge = (
            RequestLog.objects.filter(created_at__gte=window.since, created_at__lt=window.edge_until)
            .order_by().values("lane", "status").annotate(**request_log_aggregates())
        )
        groups += [{"lane": g["lane"], "status": g["status"], "requests": g["n"], "prompt": g["prompt"],
                    "completion": g["completion"], "buckets": log_latency_buckets(g),
                    "ttft_buckets": log_ttft_buckets(g), "latency_ms_min": g["latency_min"],
                    "latency_ms_max": g["latency_max"], "ttft_ms_min": g["ttft_min"], "ttft_ms_max": g["ttft_max"]}
                   for g in cast(list[dict[str, Any]], list(edge))]
    bounds: dict[str, list[float]] = defaultdict(list)
    for g in groups:
        by_status[g["status"]] += g["requests"]
        by_lane[g["lane"] or "-"] += g["requests"]
        _add(tokens, [g["prompt"], g["completion"]])
        _add(latency, g["buckets"])
        _add(ttft, g["ttft_buckets"])
        for name in EXTREMES:
            if g.get(name) is not None:
                bounds[name].append(g[name])
    total = sum(by_status.values())
    errors = sum(n for status, n in by_status.items() if status >= 400)
    limit = EXACT_PERCENTILE_MAX_REQUESTS if exact_up_to is None else exact_up_to
    exact = _exact_percentiles(window.since, now) if total <= limit else None
    if exact is None:
        latency_figures = _histogram_percentiles(latency, float(total), bounds["latency_ms_min"], bounds["latency_ms_max"])
        ttft_figures = _histogram_percentiles(ttft[:-1], ttft[-1], bounds["ttft_ms_min"], bounds["ttft_ms_max"])
    else:
        latency_figures, ttft_figures = exact
    return {
        "range": range_key, "since": window.since, "until": now, "whole_days": range_key in GATEWAY_DAY_RANGES,
        "requests": total, "prompt_tokens": round(tokens[0]), "completion_tokens": round(tokens[1]),
        "errors_by_status": {str(status): n for status, n in sorted(by_status.items()) if status >= 400},
        "error_pct": 100.0 * errors / total if total else 0.0,
        "share": {lane: 100.0 * n / total for lane, n in sorted(by_lane.items())} if total else {},
        **{f"latency_{key}": value for key, value in latency_figures.items()},
        **{f"ttft_{key}": value for key, value in ttft_figures.items()},
    }


# Up to this many requests in a range, the gateway summary's percentiles are exact order
# statistics (nearest rank, as the live figures) read from the request log: a few thousand
# floats over its created_at index. Above, estimates from the rollup's buckets, clamped to the
# fastest and slowest request and given with the bucket that bounds them.
EXACT_PERCENTILE_MAX_REQUESTS = 5000


def _percentile_figures(
    p50: float | None, p95: float | None, *, n: int, exact: bool, p95_range: tuple[float, float] | None = None,
) -> dict[str, Any]:
    """The keys of one measure in gateway_summary (prefixed latency_/ttft_): p50_ms, p95_ms, the
    sample count n, whether the figures are exact, and for estimates the range the p95 lies in."""
    return {"p50_ms": p50, "p95_ms": p95, "n": n, "exact": exact,
            "p95_range_ms": list(p95_range) if p95_range is not None else None}


def _exact_percentiles(since: datetime, until: datetime) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """Latency and TTFT p50/p95 from every request in [since, until], or None when the request
    log no longer holds the whole range (its retention)."""
    if since < until - timedelta(days=settings.GATEWAY_LOG_RETENTION_DAYS):
        return None
    rows = list(RequestLog.objects.filter(created_at__gte=since, created_at__lte=until)
                .order_by().values_list("latency_ms", "ttft_ms"))
    latencies = [latency for latency, _ in rows]
    ttfts = [ttft for _, ttft in rows if ttft is not None]
    return (
        _percentile_figures(percentile_nearest_rank(latencies, 0.5), percentile_nearest_rank(latencies, 0.95),
                            n=len(latencies), exact=True),
        _percentile_figures(percentile_nearest_rank(ttfts, 0.5), percentile_nearest_rank(ttfts, 0.95),
                            n=len(ttfts), exact=True),
    )


def _histogram_percentiles(
    buckets: list[float], count: float, lows: list[float], highs: list[float],
) -> dict[str, Any]:
    """p50 and p95 (ms) from cumulative counts at LATENCY_BUCKETS_MS and the +Inf count,
    clamped to the fastest of `lows` and the slowest of `highs` (when the rows kept them)."""
    histogram = {bound / 1000: buckets[i] for i, bound in enumerate(LATENCY_BUCKETS_MS)}
    histogram[math.inf] = count
    lowest = min(lows) / 1000 if lows else None
    highest = max(highs) / 1000 if highs else None
    p50 = histogram_estimate(0.5, histogram, lowest=lowest, highest=highest)
    p95 = histogram_estimate(0.95, histogram, lowest=lowest, highest=highest)
    return _percentile_figures(
        p50.value * 1000 if p50 is not None else None, p95.value * 1000 if p95 is not None else None,
        n=round(count), exact=False, p95_range=(p95.lower * 1000, p95.upper * 1000) if p95 is not None else None,
    )


# Per API key or per lane: the hourly rollup's column and the request log's.
TOTALS_GROUPS = {"key": ("key_name", "key__name"), "lane": ("lane", "lane")}


def usage_totals(*, by: str, hours: int = 24, now: datetime | None = None,
                 key_ids: list[int] | None = None) -> list[dict[str, Any]]:
    """Requests, errors, tokens and mean latency and TTFT per API key (`by="key"`, by its
    name; "—" for requests without one) or per lane over the last `hours`, most requests first.

    The window edge, as on the gateway page's 1 h and 24 h figures (hour_window): the whole
    hours come from the hourly rollup, the part of the hour before them from the request log.
    With now = 12:20 and hours = 2 a request at 10:25 counts (read from the log), one at
    11:00 counts (the rollup's 11:00 hour), one at 10:15 does not. The current hour is as of
    the rollup's last run (every minute: a minute at most behind). Both count what the request
    log holds: every status (errors are 400 and above), the tokens as logged (the lane's, the
    gateway's count or its estimate), TTFT over the requests that had a first token.
    `key_ids`: only these keys' requests (a team's page)."""
    now = now or timezone.now()
    rollup_column, log_column = TOTALS_GROUPS[by]
    since, first_whole, edge_until = hour_window(timedelta(hours=hours), now=now)
    keys = {"key_id__in": key_ids} if key_ids is not None else {}
    groups = cast(list[dict[str, Any]], list(
        UsageHour.objects.filter(hour__gte=first_whole, **keys).order_by().values(who=F(rollup_column))
        .annotate(n=Sum("requests"), errors=Sum("errors"), prompt=Sum("prompt_tokens"),
                  completion=Sum("completion_tokens"), latency=Sum("latency_ms_sum"), ttft=Sum("ttft_ms_sum"),
                  ttft_n=Sum("ttft_count"))
    ))
    if edge_until is not None:
        groups += cast(list[dict[str, Any]], list(
            RequestLog.objects.filter(created_at__gte=since, created_at__lt=edge_until, **keys).order_by()
            .values(who=F(log_column)).annotate(**request_log_aggregates())
        ))
    sums: dict[str, list[float]] = defaultdict(lambda: [0.0] * 7)
    for g in groups:
        _add(sums[g["who"] or "—"], [g[name] for name in ("n", "errors", "prompt", "completion", "latency", "ttft",
                                                          "ttft_n")])
    rows = [
        {"name": name, "requests": round(n), "errors": round(errors), "prompt_tokens": round(prompt),
         "completion_tokens": round(completion), "avg_latency_ms": latency / n if n else None,
         "avg_ttft_ms": ttft / ttft_n if ttft_n else None}
        for name, (n, errors, prompt, completion, latency, ttft, ttft_n) in sums.items()
    ]
    return sorted(rows, key=lambda row: (-row["requests"], row["name"]))
