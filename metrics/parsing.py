"""vLLM `/metrics` text to the figures a person reads (pure: no I/O, no Django).

A reading is what one scrape saw: counters and histograms are cumulative, so figures come
from two readings. Rates (tokens/s, requests/s) come from the last two readings, one scrape
interval apart. Percentiles (TTFT, inter-token latency, end-to-end latency) come from the
bucket deltas over a sliding window (METRICS_PERCENTILE_WINDOW_S, default 60 s), as
Prometheus' histogram_quantile(0.95, rate(..._bucket[1m])) does: a slow lane whose first
tokens arrive every 20 s still has a TTFT p95 at every scrape, not only at the scrape whose
interval happened to hold one. A counter that went down means the engine restarted: its
delta is then the new value, as Prometheus' rate() treats it, and the window starts afresh.
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
    "vllm:prefix_cache_", "vllm:spec_decode_num_", "vllm:iteration_tokens_total", *HISTOGRAMS,
)
# Kept as two counters (its _sum and _count): every engine step moves them, prefill chunks
# included, which is the guardian's measure of forward progress (lanes.liveness).
ITERATION_TOKENS = "vllm:iteration_tokens_total"


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
            elif family.name == ITERATION_TOKENS and sample.name.endswith(("_sum", "_count")):
                reading.counters[sample.name] = reading.counters.get(sample.name, 0.0) + sample.value
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


@dataclass(frozen=True)
class BucketEstimate:
    """A quantile read from a histogram: the estimate and the range the true value lies in
    (the bucket that holds the q-th observation, narrowed to the observed min and max when
    they are known). `upper` is inf past the last finite bucket with no known maximum."""

    value: float
    lower: float
    upper: float

    @property
    def open_ended(self) -> bool:
        """Past the last finite bucket: the value is that bound, and the truth at least it ("≥")."""
        return math.isinf(self.upper)


def histogram_estimate(
    q: float, buckets: Buckets, *, lowest: float | None = None, highest: float | None = None,
) -> BucketEstimate | None:
    """Prometheus' histogram_quantile (linear interpolation inside the bucket that holds the
    q-th observation), clamped to the observed `lowest`/`highest` when known: an estimate never
    lies above the slowest request seen or below the fastest (a p95 of 4,773 ms from a bucket
    2,500-5,000 ms whose slowest request took 3,103 ms). Without them (an engine's histograms
    keep buckets only) it stays inside the bucket that holds the rank, so never outside the
    buckets of the true min and max; past the last finite bound it is that bound, open-ended.
    None when nothing was observed. The one place a quantile is read from buckets (raw
    samples: core.stats)."""
    bounds = sorted(buckets)
    if not bounds or buckets.get(math.inf, buckets[bounds[-1]]) <= 0:
        return None
    total = buckets[bounds[-1]]
    rank = q * total
    lower_bound, lower_count = 0.0, 0.0
    value, upper = lower_bound, lower_bound
    for bound in bounds:
        count = buckets[bound]
        # The bucket holding the rank holds a sample: q = 0 is the lowest non-empty bucket,
        # not the first bound (0.001 s for a fastest TTFT of 1 s).
        if count >= rank and count > lower_count:
            upper = bound
            if math.isinf(bound):
                value = lower_bound  # beyond the last finite bucket: its bound is all we know ("≥")
            else:
                # inside the bucket, whatever rounding does: its bounds are what the counts know
                value = min(bound, max(lower_bound, lower_bound + (bound - lower_bound) * (rank - lower_count)
                                       / (count - lower_count)))
            break
        lower_bound, lower_count = bound, count
    else:
        value = upper = lower_bound
    if highest is not None:
        value, upper, lower_bound = min(value, highest), min(upper, highest), min(lower_bound, highest)
    if lowest is not None:
        value, lower_bound, upper = max(value, lowest), max(lower_bound, lowest), max(upper, lowest)
    return BucketEstimate(value=value, lower=lower_bound, upper=upper)


def histogram_quantile(
    q: float, buckets: Buckets, *, lowest: float | None = None, highest: float | None = None,
) -> float | None:
    """histogram_estimate's value alone."""
    estimate = histogram_estimate(q, buckets, lowest=lowest, highest=highest)
    return estimate.value if estimate is not None else None


@dataclass
class HistogramSnapshot:
    """The histograms of one past reading, kept between scrapes as the percentile window's
    possible starts. Stored as counts only, in the order of the bucket bounds, which are
    stored once, in the reading kept with the snapshots (a lane keeps ~7 of them)."""

    at: float
    histograms: dict[str, Buckets]

    @classmethod
    def of(cls, reading: EngineReading) -> HistogramSnapshot:
        """The histograms the figures use (one of the inter-token latency's two names)."""
        itl = next((name for name in ITL_NAMES if name in reading.histograms), None)
        return cls(at=reading.at, histograms={name: dict(b) for name, b in reading.histograms.items()
                                              if name in (TTFT, E2E, itl)})

    def to_json(self) -> dict[str, Any]:
        # Counts are whole numbers: 57, not 57.0 (a lane stores ~7 snapshots of ~66 counts).
        return {"at": self.at, "h": {name: [int(c) if float(c).is_integer() else c for c in (b[k] for k in sorted(b))]
                                     for name, b in self.histograms.items()}}

    @classmethod
    def from_json(cls, data: dict[str, Any], bounds: dict[str, list[float]]) -> HistogramSnapshot:
        """`bounds`: each histogram's sorted bucket bounds, from the reading stored with it."""
        histograms: dict[str, Buckets] = {}
        for name, counts in data["h"].items():
            les = bounds.get(name)
            if les is None or len(les) != len(counts):
                continue  # the histogram left the page or changed its buckets: no start for it
            histograms[name] = {bound: float(count) for bound, count in zip(les, counts, strict=True)}
        return cls(at=float(data["at"]), histograms=histograms)


def histogram_went_down(before: dict[str, Buckets], now: dict[str, Buckets]) -> bool:
    """Any bucket count smaller than before: the engine restarted (its counts began at 0)."""
    for name, buckets in now.items():
        old = before.get(name)
        if not old:
            continue
        if any(count < old.get(bound, 0.0) for bound, count in buckets.items()):
            return True
    return False


def window_advance(
    window: list[HistogramSnapshot], previous: EngineReading | None, current: EngineReading,
    *, window_s: float, step_s: float,
) -> tuple[HistogramSnapshot | None, list[HistogramSnapshot]]:
    """The percentile window's start for `current`, and the snapshots to keep for the next
    scrapes (oldest first).

    The start is the oldest kept snapshot at most `window_s` old; when none is (a scrape gap
    longer than the window) the previous reading, so the window stretches over the gap.
    In a lane's first minute the start is its first reading. A reading with no window before
    it (the first one) has no start: its cumulative counts go back to an unknown engine start.
    A restart (any bucket count smaller than in the previous reading or the window's start)
    starts the window afresh from an empty histogram at the previous reading's time: every
    observation the restarted engine reports is new. A snapshot is kept at most every
    `step_s` seconds, which bounds what is stored per lane (window_s / step_s snapshots)."""
    now = HistogramSnapshot.of(current)
    if previous is None:
        return None, [now]
    window = window or [HistogramSnapshot.of(previous)]  # state kept before windows existed
    if current.at <= previous.at:
        return None, window  # the same or an older reading: nothing to add
    if histogram_went_down(previous.histograms, current.histograms) or histogram_went_down(
        window[0].histograms, current.histograms
    ):
        fresh = HistogramSnapshot(at=previous.at, histograms={})
        return fresh, [fresh, now]
    kept = [snapshot for snapshot in window if current.at - snapshot.at <= window_s + 1e-6]
    # None within the window (a scrape gap longer than it): from the last reading before now.
    start = kept[0] if kept else HistogramSnapshot.of(previous)
    kept = kept or [start]
    if current.at - kept[-1].at >= 0.75 * step_s:  # a tick a little early is still kept
        kept.append(now)
    return start, kept


def window_delta(start: Buckets | None, current: Buckets) -> Buckets:
    """Observations since the window's start (an absent start histogram counts as empty: the
    histogram appeared, or the window began at a restart)."""
    start = start or {}
    return {bound: count - start.get(bound, 0.0) for bound, count in current.items()}


def _rate(previous: EngineReading, current: EngineReading, name: str, seconds: float) -> float | None:
    if name not in current.counters:
        return None
    return counter_delta(previous.counters.get(name), current.counters[name]) / seconds


def lane_figures(
    previous: EngineReading | None, current: EngineReading, *, window_start: HistogramSnapshot | None = None,
) -> dict[str, float]:
    """The lane series stored and charted. Gauges need one reading; rates two (the previous
    one); percentiles the window's start (window_advance), by default the previous reading.
    A histogram with no observation in the window gives no percentile (not 0)."""
    figures = _gauge_figures(current)
    if previous is None:
        return figures
    seconds = current.at - previous.at
    if seconds <= 0:
        return figures
    figures |= _rate_figures(previous, current, seconds)
    if window_start is None:
        window_start, _ = window_advance([], previous, current, window_s=math.inf, step_s=math.inf)
    if window_start is None:
        return figures
    return figures | _percentile_figures(window_start, current)


def _gauge_figures(current: EngineReading) -> dict[str, float]:
    figures: dict[str, float] = {}
    gauges = current.gauges
    if "vllm:num_requests_running" in gauges:
        figures["running"] = gauges["vllm:num_requests_running"]
    if "vllm:num_requests_waiting" in gauges:
        figures["waiting"] = gauges["vllm:num_requests_waiting"]
    kv = gauges.get("vllm:kv_cache_usage_perc", gauges.get("vllm:gpu_cache_usage_perc"))
    if kv is not None:
        figures["kv_pct"] = kv * 100.0
    return figures


def _rate_figures(previous: EngineReading, current: EngineReading, seconds: float) -> dict[str, float]:
    figures: dict[str, float] = {}
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
    return figures


def _percentile_figures(window_start: HistogramSnapshot, current: EngineReading) -> dict[str, float]:
    # An empty start is a window begun at a restart: every count is new. A start that lacks
    # one histogram (its buckets changed) gives no figure for it rather than a lifetime's.
    figures: dict[str, float] = {}
    starts = window_start.histograms
    itl_name = next((name for name in ITL_NAMES if name in current.histograms), None)
    histogram_names: tuple[tuple[str, str | None], ...] = (("ttft", TTFT), ("itl", itl_name), ("e2e", E2E))
    for prefix, histogram in histogram_names:
        if histogram is None or histogram not in current.histograms:
            continue
        if starts and histogram not in starts:
            continue
        delta = window_delta(starts.get(histogram), current.histograms[histogram])
        figures |= _estimate_figures(prefix, delta)
    return figures


def _estimate_figures(prefix: str, delta: Buckets) -> dict[str, float]:
    """p50 and p95 (ms) of one histogram's window, with what they rest on, as the gateway's
    estimates state it: `{prefix}_n` the samples, `{prefix}_p95_lo_ms`/`_hi_ms` the bucket that
    holds the p95 (its width is the figure's resolution; no `_hi` past the last finite bound:
    the p95 is then "≥" its value), `{prefix}_p50_ge` = 1 when the p50 is open-ended too."""
    figures: dict[str, float] = {}
    p50, p95 = histogram_estimate(0.5, delta), histogram_estimate(0.95, delta)
    if p50 is None or p95 is None:
        return figures
    figures[f"{prefix}_n"] = float(delta[max(delta)])
    figures[f"{prefix}_p50_ms"] = p50.value * 1000.0
    if p50.open_ended:
        figures[f"{prefix}_p50_ge"] = 1.0
    figures[f"{prefix}_p95_ms"] = p95.value * 1000.0
    figures[f"{prefix}_p95_lo_ms"] = p95.lower * 1000.0
    if not p95.open_ended:
        figures[f"{prefix}_p95_hi_ms"] = p95.upper * 1000.0
    return figures
