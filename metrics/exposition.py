"""The portal's own /metrics (Prometheus text format), built from the database at each
scrape: gateway usage, lane and node states, jobs, scrape health, alerts, and every lane's
and node's latest figures. The gateway's counters and latency histogram are the running
totals (GatewayTotal: every hour folded in before retention may delete it) plus the hourly
rollup's hours since, read in one statement: they never go down when old hours leave
retention, so Prometheus sees no false counter reset."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime

from django.db.models import Count, DateTimeField, F, Subquery, Value
from django.db.models.functions import Coalesce
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector, CollectorRegistry

from gateway.fair_view import fair_queues_now, fair_waits
from jobs.models import Job
from lanes.models import Lane, LaneState, Node, NodeState
from metrics.models import (
    LATENCY_BUCKETS_MS,
    Alert,
    AlertState,
    GatewayTotal,
    GatewayTotalMark,
    ScrapeTarget,
    UsageHour,
)

# Lane and node figures exported as their own gauges: (series, metric name, help).
FIGURE_GAUGES = {
    "lane": (
        ("gen_tps", "spark_lane_generation_tokens_per_second", "Generation tokens per second (vLLM)."),
        ("prompt_tps", "spark_lane_prompt_tokens_per_second", "Prompt tokens per second (vLLM)."),
        ("running", "spark_lane_requests_running", "Requests running."),
        ("waiting", "spark_lane_requests_waiting", "Requests waiting."),
        ("kv_pct", "spark_lane_kv_cache_usage_percent", "KV-cache use, percent."),
        ("prefix_hit_pct", "spark_lane_prefix_cache_hit_percent", "Prefix-cache hit rate, percent."),
        ("ttft_p95_ms", "spark_lane_ttft_p95_milliseconds", "Time to first token p95 over the percentile window (PORTAL_METRICS_PERCENTILE_WINDOW_S)."),
        ("itl_p95_ms", "spark_lane_itl_p95_milliseconds", "Inter-token latency p95 over the percentile window (PORTAL_METRICS_PERCENTILE_WINDOW_S)."),
    ),
    "node": (
        ("mem_avail_gib", "spark_node_memory_available_gib", "MemAvailable, GiB (GPU memory is OS memory)."),
        ("swap_used_gib", "spark_node_swap_used_gib", "Swap in use, GiB."),
        ("cpu_pct", "spark_node_cpu_percent", "CPU busy, percent."),
        ("gpu_util_pct", "spark_node_gpu_utilization_percent", "GPU utilization, percent."),
        ("gpu_power_w", "spark_node_gpu_power_watts", "GPU power draw, watts."),
        ("gpu_temp_c", "spark_node_gpu_temperature_celsius", "GPU temperature, Celsius."),
        ("roce_tx_Bps", "spark_node_roce_transmit_bytes_per_second", "RoCE bytes sent per second, all devices."),
        ("roce_rx_Bps", "spark_node_roce_receive_bytes_per_second", "RoCE bytes received per second, all devices."),
    ),
}


class PortalCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        yield from self._gateway()
        yield from self._fair()
        yield from self._states()
        yield from self._scrapes()
        yield from self._alerts()

    def _gateway(self) -> Iterator[Metric]:
        requests = CounterMetricFamily("spark_gateway_requests", "Gateway requests.", labels=["lane", "status", "route"])
        tokens = CounterMetricFamily("spark_gateway_tokens", "Gateway tokens.", labels=["lane", "direction"])
        latency = HistogramMetricFamily(
            "spark_gateway_request_duration_seconds", "Gateway request latency.", labels=["lane"]
        )
        per_route: dict[tuple[str, int, str], float] = defaultdict(float)
        per_lane_tokens: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
        per_lane_latency: dict[str, list[float]] = defaultdict(lambda: [0.0] * (len(LATENCY_BUCKETS_MS) + 1))
        for lane, status, route, n, prompt, completion, latency_sum, row_buckets in gateway_counter_rows():
            per_route[(lane, status, route)] += n
            per_lane_tokens[lane][0] += prompt
            per_lane_tokens[lane][1] += completion
            histogram = per_lane_latency[lane]
            for i, count in enumerate(row_buckets or []):
                histogram[i] += count
            histogram[-1] += latency_sum
        counts: dict[str, float] = defaultdict(float)
        for (lane, status, route), total in sorted(per_route.items()):
            requests.add_metric([lane, str(status), route], total)
            counts[lane] += total
        yield requests
        for lane, (prompt_total, completion_total) in sorted(per_lane_tokens.items()):
            tokens.add_metric([lane, "prompt"], prompt_total)
            tokens.add_metric([lane, "completion"], completion_total)
        yield tokens
        for lane, histogram in sorted(per_lane_latency.items()):
            buckets = [(str(bound / 1000), float(histogram[i])) for i, bound in enumerate(LATENCY_BUCKETS_MS)]
            latency.add_metric([lane], [*buckets, ("+Inf", float(counts[lane]))], sum_value=histogram[-1] / 1000)
        yield latency

    def _fair(self) -> Iterator[Metric]:
        """The fair queues (gateway.fair): now from Redis, waits over the percentile window."""
        waiting = GaugeMetricFamily("spark_gateway_queue_waiting", "Requests waiting for a replica's slot.",
                                    labels=["lane", "replica", "class"])
        held = GaugeMetricFamily("spark_gateway_queue_slots_held", "A replica's slots held by requests.",
                                 labels=["lane", "replica"])
        shed = CounterMetricFamily("spark_gateway_queue_shed", "Requests shed with 503 server_busy (since Redis started).",
                                   labels=["lane", "replica"])
        for queue in fair_queues_now():
            if queue.state is None:
                continue
            labels = [queue.lane, str(queue.replica)]
            waiting.add_metric([*labels, "interactive"], queue.state["interactive"])
            waiting.add_metric([*labels, "batch"], queue.state["batch"])
            held.add_metric(labels, queue.state["held"])
            shed.add_metric(labels, queue.state["shed"])
        yield from (waiting, held, shed)
        quantiles = {q: GaugeMetricFamily(f"spark_gateway_queue_wait_{q}_milliseconds",
                                          f"Queue wait {q} of the requests that waited, over the percentile window "
                                          "(PORTAL_METRICS_PERCENTILE_WINDOW_S).", labels=["lane", "class"])
                     for q in ("p50", "p95")}
        for row in fair_waits(by_key=False):
            for q, value in (("p50", row.wait_p50_ms), ("p95", row.wait_p95_ms)):
                if value is not None:
                    quantiles[q].add_metric([row.lane, row.priority], value)
        yield from quantiles.values()

    def _states(self) -> Iterator[Metric]:
        lanes = GaugeMetricFamily("spark_lane_state", "1 for the lane's observed state.", labels=["lane", "state"])
        for name, state in Lane.objects.values_list("name", "observed_state"):
            for choice in LaneState.values:
                lanes.add_metric([name, choice], 1.0 if state == choice else 0.0)
        yield lanes
        nodes = GaugeMetricFamily("spark_node_state", "1 for the node's state.", labels=["node", "state"])
        for name, state in Node.objects.values_list("name", "state"):
            for choice in NodeState.values:
                nodes.add_metric([name, choice], 1.0 if state == choice else 0.0)
        yield nodes
        jobs = GaugeMetricFamily("spark_jobs", "Jobs by kind and state.", labels=["kind", "state"])
        for row in Job.objects.values("kind", "state").annotate(n=Count("id")).order_by("kind", "state"):
            jobs.add_metric([row["kind"], row["state"]], float(row["n"]))
        yield jobs

    def _scrapes(self) -> Iterator[Metric]:
        ok = GaugeMetricFamily("spark_scrape_up", "1 when the last scrape of the target worked.", labels=["kind", "target"])
        failures = GaugeMetricFamily("spark_scrape_consecutive_failures", "Failed scrapes in a row.",
                                     labels=["kind", "target"])
        duration = GaugeMetricFamily("spark_scrape_duration_seconds", "Duration of the last scrape.",
                                     labels=["kind", "target"])
        figures = {
            kind: [GaugeMetricFamily(name, text, labels=[kind]) for _, name, text in series]
            for kind, series in FIGURE_GAUGES.items()
        }
        for target in ScrapeTarget.objects.order_by("kind", "target"):
            labels = [target.kind, target.target]
            ok.add_metric(labels, 1.0 if target.ok else 0.0)
            failures.add_metric(labels, float(target.consecutive_failures))
            duration.add_metric(labels, target.duration_ms / 1000)
            if not target.ok:
                continue
            for family, (series, _, _) in zip(figures.get(target.kind, []), FIGURE_GAUGES.get(target.kind, ()),
                                              strict=True):
                if series in target.figures:
                    family.add_metric([target.target], float(target.figures[series]))
        yield ok
        yield failures
        yield duration
        for families in figures.values():
            yield from families

    def _alerts(self) -> Iterator[Metric]:
        alerts = GaugeMetricFamily("spark_alert_open", "1 for each open alert.", labels=["rule", "kind", "target"])
        for rule, kind, target in Alert.objects.filter(state=AlertState.OPEN).values_list("rule", "kind", "target"):
            alerts.add_metric([rule, kind, target], 1.0)
        yield alerts


def gateway_counter_rows() -> list[tuple[str, int, str, int, int, int, float, list[int]]]:
    """(lane, status, route, requests, prompt and completion tokens, latency sum in ms,
    latency buckets) of the running totals and of every hour not folded into them — one
    statement, so a fold committing meanwhile is seen whole or not at all (never counted
    twice, never missed)."""
    columns = ("lane", "status", "route", "requests", "prompt_tokens", "completion_tokens", "latency_ms_sum",
               "latency_buckets")
    folded_before = Coalesce(Subquery(GatewayTotalMark.objects.filter(pk=1).values("folded_before")[:1]),
                             Value(datetime(1970, 1, 1, tzinfo=UTC)), output_field=DateTimeField())
    live = UsageHour.objects.alias(folded_before=folded_before).filter(hour__gte=F("folded_before"))
    totals = GatewayTotal.objects.order_by().values_list(*columns)
    return list(totals.union(live.order_by().values_list(*columns), all=True))


def render_metrics() -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(PortalCollector())
    return generate_latest(registry)
