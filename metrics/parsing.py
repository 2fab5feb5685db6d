"""vLLM `/metrics` text to the figures a person reads (pure: no I/O, no Django).

A reading is what one scrape saw: counters and histograms are cumulative, so figures come
from two readings (rates and histogram-delta percentiles). A counter that went down means
the engine restarted: its delta is then the new value, as Prometheus' rate() treats it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

TTFT = "vllm:time_to_first_token_seconds"
# vLLM renamed time_per_output_token to inter_token_latency; older engines have only the former.
ITL_NAMES = ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")
E2E = "vllm:e2e_request_latency_seconds"
HISTOGRAMS = (TTFT, *ITL_NAMES, E2E)

Buckets = dict[float, float]  # upper bound -> cumulative count
# The families the figures use. Lines of other families are dropped before parsing:
# prometheus_client's parser is pure Python and a vLLM page is mostly histogram buckets.
USED_FAMILIES = (
    "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc",
    "vllm:prompt_tokens", "vllm:generation_tokens", "vllm:request_success", "vllm:num_preemptions",
    "vllm:prefix_cache_", "vllm:spec_decode_num_", *HISTOGRAMS,
)


@dataclass
class EngineReading:
    """One scrape, summed over label sets (engines, models, finish reasons)."""

    at: float
    counters: dict[str, float] = field(default_factory=dict)
    gauges: dict[str, float] = field(default_factory=dict)
    histograms: dict[str, Buckets] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "at": self.at,
            "counters": self.counters,
            "gauges": self.gauges,
            # JSON keys are strings: +Inf survives as "inf".
            "histograms": {name: {repr(bound): count for bound, count in b.items()} for name, b in self.histograms.items()},
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EngineReading:
        return cls(
            at=float(data["at"]),
            counters={k: float(v) for k, v in data["counters"].items()},
            gauges={k: float(v) for k, v in data["gauges"].items()},
            histograms={
                name: {float(bound): float(count) for bound, count in buckets.items()}
                for name, buckets in data["histograms"].items()
            },
        )


def parse_vllm_metrics(text: str, *, at: float) -> EngineReading:
    """Parse Prometheus text with prometheus_client's parser; keep vLLM's families only."""
    reading = EngineReading(at=at)
    for family in text_string_to_metric_families(_used_lines(text)):
        if not family.name.startswith("vllm:"):
            continue
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            if family.type == "counter":
                # The parser strips _total from the family; the sample keeps vLLM's own name.
                reading.counters[sample.name] = reading.counters.get(sample.name, 0.0) + sample.value
            elif family.type == "gauge":
                if family.name == "vllm:cache_config_info":
                    continue  # config carried in labels, value always 1
                reading.gauges[sample.name] = reading.gauges.get(sample.name, 0.0) + sample.value
            elif family.type == "histogram" and sample.name.endswith("_bucket") and family.name in HISTOGRAMS:
                bound = float(sample.labels["le"])
                buckets = reading.histograms.setdefault(family.name, {})
                buckets[bound] = buckets.get(bound, 0.0) + sample.value
    return reading


# A sample line whose labels are well-formed (the text format's grammar); anything else is
# left as it is for the parser to judge.
_PAIR = r'[a-zA-Z_][a-zA-Z0-9_]*\s*=\s*"(?:[^"\\\n]|\\.)*"'
_SAMPLE_LINE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{(\s*(?:" + _PAIR + r"(?:\s*,\s*" + _PAIR + r")*\s*,?)?\s*)\}(.*)")
_LABEL_TOKEN = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\\n]|\\.)*)"')


def _used_lines(text: str) -> str:
    """The lines of the used families, each sample with only the `le` label: the figures sum
    over every other label (engines, models, finish reasons), and the parser spends most of
    its time reading labels character by character (a vLLM page: ~5 ms → ~1 ms).
    HELP lines are dropped too; TYPE lines stay."""
    kept = []
    for line in text.splitlines():
        if line.startswith("#"):
            parts = line.split(" ", 3)
            if len(parts) >= 3 and parts[1] == "TYPE" and parts[2].startswith(USED_FAMILIES):
                kept.append(line)
            continue
        if not line.startswith(USED_FAMILIES):
            continue
        match = _SAMPLE_LINE.fullmatch(line)
        if match is not None:
            name, labels, rest = match.groups()
            le = next((value for label, value in _LABEL_TOKEN.findall(labels) if label == "le"), None)
            line = f'{name}{{le="{le}"}}{rest}' if le is not None else f"{name}{rest}"
        kept.append(line)
    return "\n".join(kept) + "\n"


def counter_delta(previous: float | None, current: float) -> float:
    """Growth since the last reading; a drop means a restart (the counter began again at 0)."""
    if previous is None:
        return 0.0
    return current if current < previous else current - previous


def histogram_delta(previous: Buckets | None, current: Buckets) -> Buckets:
    if not previous:
        return {}
    if current.get(math.inf, 0.0) < previous.get(math.inf, 0.0):
        return dict(current)  # restarted engine: everything it has is new
    return {bound: count - previous.get(bound, 0.0) for bound, count in current.items()}


def histogram_quantile(q: float, buckets: Buckets) -> float | None:
    """Prometheus' histogram_quantile: linear interpolation inside the bucket that holds
    the q-th observation. None when nothing was observed."""
    bounds = sorted(buckets)
    if not bounds or buckets.get(math.inf, buckets[bounds[-1]]) <= 0:
        return None
    total = buckets[bounds[-1]]
    rank = q * total
    lower_bound, lower_count = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):
                return lower_bound  # beyond the last finite bucket: its bound is all we know
            if count == lower_count:
                return bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (count - lower_count)
        lower_bound, lower_count = bound, count
    return lower_bound


def _rate(previous: EngineReading, current: EngineReading, name: str, seconds: float) -> float | None:
    if name not in current.counters:
        return None
    return counter_delta(previous.counters.get(name), current.counters[name]) / seconds


def lane_figures(previous: EngineReading | None, current: EngineReading) -> dict[str, float]:
    """The lane series stored and charted. Gauges need one reading; rates and percentiles two."""
    figures: dict[str, float] = {}
    gauges = current.gauges
    if "vllm:num_requests_running" in gauges:
        figures["running"] = gauges["vllm:num_requests_running"]
    if "vllm:num_requests_waiting" in gauges:
        figures["waiting"] = gauges["vllm:num_requests_waiting"]
    kv = gauges.get("vllm:kv_cache_usage_perc", gauges.get("vllm:gpu_cache_usage_perc"))
    if kv is not None:
        figures["kv_pct"] = kv * 100.0
    if previous is None:
        return figures
    seconds = current.at - previous.at
    if seconds <= 0:
        return figures
    for key, name in (
        ("prompt_tps", "vllm:prompt_tokens_total"),
        ("gen_tps", "vllm:generation_tokens_total"),
        ("req_ps", "vllm:request_success_total"),
        ("preempt_ps", "vllm:num_preemptions_total"),
    ):
        rate = _rate(previous, current, name, seconds)
        if rate is not None:
            figures[key] = rate
    queries = _rate(previous, current, "vllm:prefix_cache_queries_total", seconds)
    hits = _rate(previous, current, "vllm:prefix_cache_hits_total", seconds)
    if queries and hits is not None:
        figures["prefix_hit_pct"] = 100.0 * hits / queries
    drafts = _rate(previous, current, "vllm:spec_decode_num_drafts_total", seconds)
    draft_tokens = _rate(previous, current, "vllm:spec_decode_num_draft_tokens_total", seconds)
    accepted = _rate(previous, current, "vllm:spec_decode_num_accepted_tokens_total", seconds)
    if draft_tokens and accepted is not None:
        figures["spec_accept_pct"] = 100.0 * accepted / draft_tokens
    if drafts and accepted is not None:
        figures["spec_accept_len"] = 1.0 + accepted / drafts  # +1: the bonus token
    itl_name = next((name for name in ITL_NAMES if name in current.histograms), None)
    histogram_names: tuple[tuple[str, str | None], ...] = (("ttft", TTFT), ("itl", itl_name), ("e2e", E2E))
    for prefix, histogram in histogram_names:
        if histogram is None or histogram not in current.histograms:
            continue
        delta = histogram_delta(previous.histograms.get(histogram), current.histograms[histogram])
        for q, suffix in ((0.5, "p50"), (0.95, "p95")):
            value = histogram_quantile(q, delta)
            if value is not None:
                figures[f"{prefix}_{suffix}_ms"] = value * 1000.0
    return figures
