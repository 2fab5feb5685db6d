"""The portal's own /metrics (Prometheus text format), built from the database at each
scrape: gateway usage, lane and node states, jobs, scrape health, alerts, and every lane's
and node's latest figures. Counters come from the hourly usage rollup (the latency histogram
from the daily one: fewer rows), so they drop when old hours and days leave retention — Prometheus reads that as a counter reset, as it should."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from django.db.models import Count, Sum
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector, CollectorRegistry

from jobs.models import Job
from lanes.models import Lane, LaneState, Node, NodeState
from metrics.models import LATENCY_BUCKETS_MS, Alert, AlertState, GatewayDay, ScrapeTarget, UsageHour
from metrics.storage import latency_histograms

# Lane and node figures exported as their own gauges: (series, metric name, help).
FIGURE_GAUGES = {
    "lane": (
        ("gen_tps", "spark_lane_generation_tokens_per_second", "Generation tokens per second (vLLM)."),
        ("prompt_tps", "spark_lane_prompt_tokens_per_second", "Prompt tokens per second (vLLM)."),
        ("running", "spark_lane_requests_running", "Requests running."),
        ("waiting", "spark_lane_requests_waiting", "Requests waiting."),
        ("kv_pct", "spark_lane_kv_cache_usage_percent", "KV-cache use, percent."),
        ("prefix_hit_pct", "spark_lane_prefix_cache_hit_percent", "Prefix-cache hit rate, percent."),
        ("ttft_p95_ms", "spark_lane_ttft_p95_milliseconds", "Time to first token p95 over the last scrape interval."),
        ("itl_p95_ms", "spark_lane_itl_p95_milliseconds", "Inter-token latency p95 over the last scrape interval."),
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
        yield from self._states()
        yield from self._scrapes()
        yield from self._alerts()

    def _gateway(self) -> Iterator[Metric]:
        requests = CounterMetricFamily("spark_gateway_requests", "Gateway requests.", labels=["lane", "status", "route"])
        tokens = CounterMetricFamily("spark_gateway_tokens", "Gateway tokens.", labels=["lane", "direction"])
        rows = UsageHour.objects.values("lane", "status", "route").annotate(
            n=Sum("requests"), prompt=Sum("prompt_tokens"), completion=Sum("completion_tokens")
        )
        per_lane: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
        for row in rows:
            requests.add_metric([row["lane"], str(row["status"]), row["route"]], float(row["n"] or 0))
            per_lane[row["lane"]][0] += float(row["prompt"] or 0)
            per_lane[row["lane"]][1] += float(row["completion"] or 0)
        for lane, (prompt, completion) in sorted(per_lane.items()):
            tokens.add_metric([lane, "prompt"], prompt)
            tokens.add_metric([lane, "completion"], completion)
        yield requests
        yield tokens
        latency = HistogramMetricFamily(
            "spark_gateway_request_duration_seconds", "Gateway request latency.", labels=["lane"]
        )
        for per_lane_latency in latency_histograms(GatewayDay.objects.all(), "lane"):
            buckets = [(str(bound / 1000), per_lane_latency["buckets"][i]) for i, bound in enumerate(LATENCY_BUCKETS_MS)]
            latency.add_metric([per_lane_latency["lane"]], [*buckets, ("+Inf", float(per_lane_latency["requests"]))],
                               sum_value=per_lane_latency["latency_ms_sum"] / 1000)
        yield latency

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


def render_metrics() -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(PortalCollector())
    return generate_latest(registry)
