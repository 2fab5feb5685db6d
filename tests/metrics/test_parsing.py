"""vLLM /metrics text to figures: counters with _total, histograms with buckets, labels
summed over engines, _created samples ignored, a restarted engine's counter reset."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.stats import percentile_nearest_rank
from metrics.parsing import (
    TTFT,
    EngineReading,
    counter_delta,
    histogram_estimate,
    histogram_quantile,
    lane_figures,
    parse_vllm_metrics,
    window_advance,
    window_delta,
)
from sparksim.engine.metrics import REQUEST_LATENCY_BUCKETS, TOKEN_LATENCY_BUCKETS, TTFT_BUCKETS

DATA = Path(__file__).parent / "data"


def read(name: str, at: float) -> EngineReading:
    return parse_vllm_metrics((DATA / name).read_text(), at=at)


def test_it_reads_counters_by_their_total_names_and_sums_engines():
    reading = read("vllm_two_engines.txt", at=0)
    assert reading.counters["vllm:prompt_tokens_total"] == 1500.0
    assert reading.counters["vllm:generation_tokens_total"] == 200.0
    assert reading.counters["vllm:request_success_total"] == 10.0  # every finished_reason
    assert not any("created" in name for name in [*reading.counters, *reading.gauges])
    assert "python_gc_objects_collected_total" not in reading.counters


def test_it_reads_gauges_summed_over_engines():
    reading = read("vllm_two_engines.txt", at=0)
    assert reading.gauges["vllm:num_requests_running"] == 5.0
    assert reading.gauges["vllm:num_requests_waiting"] == 1.0


def test_it_reads_histogram_buckets_as_cumulative_counts_with_inf():
    reading = read("vllm_two_engines.txt", at=0)
    assert reading.histograms[TTFT] == {0.1: 2.0, 0.5: 6.0, 1.0: 8.0, math.inf: 10.0}


def test_it_parses_the_full_engine_text_including_spec_decode(tmp_path):
    reading = read("vllm_metrics.txt", at=0)  # captured from a sparksim engine (vLLM's names and format)
    assert reading.counters["vllm:prompt_tokens_total"] == 486.0
    assert reading.counters["vllm:spec_decode_num_accepted_tokens_total"] == 102.0
    assert "vllm:cache_config_info" not in reading.gauges
    assert sum(1 for _ in reading.histograms[TTFT]) == 23  # 22 bounds and +Inf


def test_histogram_quantile_interpolates_inside_the_bucket():
    buckets = {0.1: 2.0, 0.5: 6.0, 1.0: 8.0, math.inf: 10.0}
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.1 + 0.4 * (5 - 2) / 4)
    assert histogram_quantile(0.8, buckets) == pytest.approx(1.0)
    assert histogram_quantile(0.95, buckets) == pytest.approx(1.0)  # beyond the last finite bound
    assert histogram_quantile(0.5, {0.1: 0.0, math.inf: 0.0}) is None


BOUNDS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


def cumulative(samples: list[float]) -> dict[float, float]:
    counts: dict[float, float] = {bound: float(sum(1 for s in samples if s <= bound)) for bound in BOUNDS_S}
    return counts | {math.inf: float(len(samples))}


@settings(max_examples=300, deadline=None)
@given(samples=st.lists(st.floats(min_value=0.001, max_value=120.0), min_size=1, max_size=60),
       q=st.sampled_from((0.01, 0.25, 0.5, 0.9, 0.95, 0.99, 1.0)))
def test_a_bucket_estimate_never_leaves_the_observed_range_and_its_range_holds_the_true_rank(
    samples: list[float], q: float,
) -> None:
    """Clamped to the observed min and max, an estimate is never above the slowest sample nor
    below the fastest, and the range it states holds the true (nearest-rank) percentile."""
    estimate = histogram_estimate(q, cumulative(samples), lowest=min(samples), highest=max(samples))
    assert estimate is not None
    assert min(samples) <= estimate.value <= max(samples)
    assert estimate.lower <= estimate.value <= estimate.upper
    true = percentile_nearest_rank(samples, q)
    assert true is not None and estimate.lower <= true <= estimate.upper


def test_one_sample_is_its_own_percentile_once_clamped():
    """The defect: a single TTFT of 278 ms read as p50/p95 375/488 ms from its bucket (250-500)."""
    one = cumulative([0.278])
    assert histogram_quantile(0.95, one) == pytest.approx(0.4875)  # unclamped: inside the bucket
    estimate = histogram_estimate(0.95, one, lowest=0.278, highest=0.278)
    assert estimate == histogram_estimate(0.5, one, lowest=0.278, highest=0.278)
    assert estimate is not None and estimate.value == estimate.lower == estimate.upper == pytest.approx(0.278)


def test_counter_reset_after_a_restart_counts_the_new_value():
    assert counter_delta(100.0, 130.0) == 30.0
    assert counter_delta(100.0, 12.0) == 12.0
    assert counter_delta(None, 12.0) == 0.0
    before = EngineReading(at=0.0, histograms={TTFT: {0.1: 5.0, 1.0: 9.0, math.inf: 10.0}})
    after = EngineReading(at=5.0, histograms={TTFT: {0.1: 1.0, 1.0: 2.0, math.inf: 2.0}})
    start, _ = window_advance([], before, after, window_s=60.0, step_s=5.0)
    assert start is not None  # the window starts afresh, from nothing
    assert window_delta(start.histograms.get(TTFT), after.histograms[TTFT]) == {0.1: 1.0, 1.0: 2.0, math.inf: 2.0}


def test_lane_figures_rates_and_percentiles_from_two_readings():
    first = read("vllm_two_engines.txt", at=100.0)
    second = EngineReading.from_json(first.to_json())  # survives the JSON round trip (+Inf included)
    second.at = 110.0
    second.counters["vllm:prompt_tokens_total"] += 2000.0
    second.counters["vllm:generation_tokens_total"] += 500.0
    second.histograms[TTFT] = {0.1: 2.0, 0.5: 6.0, 1.0: 18.0, math.inf: 20.0}  # ten new, all in (0.5, 1]
    figures = lane_figures(first, second)
    assert figures["prompt_tps"] == pytest.approx(200.0)
    assert figures["gen_tps"] == pytest.approx(50.0)
    assert figures["running"] == 5.0 and figures["kv_pct"] == pytest.approx(50.0)
    assert 500.0 < figures["ttft_p50_ms"] <= 1000.0
    assert figures["ttft_p95_ms"] == pytest.approx(975.0)


def test_lane_figures_after_an_engine_restart_are_not_negative():
    first = read("vllm_metrics.txt", at=0.0)
    restarted = EngineReading.from_json(first.to_json())
    restarted.at = 5.0
    restarted.counters = {name: 10.0 for name in first.counters}
    restarted.histograms = {name: {bound: 1.0 for bound in b} for name, b in first.histograms.items()}
    figures = lane_figures(first, restarted)
    assert figures["gen_tps"] == pytest.approx(2.0)
    assert figures["ttft_p95_ms"] > 0


def test_spec_decode_acceptance_rate_and_length():
    first = read("vllm_metrics.txt", at=0.0)
    second = EngineReading.from_json(first.to_json())
    second.at = 1.0
    for name, grow in (("drafts", 10), ("draft_tokens", 30), ("accepted_tokens", 21)):
        second.counters[f"vllm:spec_decode_num_{name}_total"] += grow
    figures = lane_figures(first, second)
    assert figures["spec_accept_pct"] == pytest.approx(70.0)
    assert figures["spec_accept_len"] == pytest.approx(3.1)


def test_a_malformed_text_raises_value_error():
    with pytest.raises(ValueError):
        parse_vllm_metrics("vllm:num_requests_running{engine=0 1\n", at=0)


def test_labels_with_quotes_commas_and_braces_in_their_values_are_summed_like_any_other():
    """Labels other than `le` are dropped before the parser: a model name holding `"`, `,`,
    `}` or `le="…"` must neither break a line nor move a bucket."""
    text = "\n".join([
        "# HELP vllm:num_requests_running Running.",
        "# TYPE vllm:num_requests_running gauge",
        'vllm:num_requests_running{engine="0",model_name="org/a,b} \\"le=\\"9\\"\\""} 2.0',
        'vllm:num_requests_running{ engine = "1" , model_name="x\\\\y" , } 3.0',
        "# TYPE vllm:time_to_first_token_seconds histogram",
        'vllm:time_to_first_token_seconds_bucket{model_name="le=\\"0.5\\",",le="0.1",engine="0"} 1.0',
        'vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="m"} 4.0',
        'vllm:time_to_first_token_seconds_bucket{model_name="m2",le="0.1"} 2.0',
        'vllm:time_to_first_token_seconds_bucket{model_name="m2",le="+Inf"} 5.0',
        'vllm:time_to_first_token_seconds_count{model_name="m"} 4.0',
    ]) + "\n"
    reading = parse_vllm_metrics(text, at=0)
    assert reading.gauges == {"vllm:num_requests_running": 5.0}
    assert reading.histograms[TTFT] == {0.1: 3.0, math.inf: 9.0}


# vLLM's own bucket bounds (sparksim copies vllm/v1/metrics/loggers.py), so the property is
# checked on the buckets an engine actually exposes.
@settings(max_examples=400, deadline=None)
@given(before=st.lists(st.floats(min_value=0.0001, max_value=4000.0), max_size=30),
       samples=st.lists(st.floats(min_value=0.0001, max_value=4000.0), min_size=1, max_size=80),
       q=st.sampled_from((0.0, 0.01, 0.5, 0.9, 0.95, 0.99, 1.0)),
       bounds=st.sampled_from((TTFT_BUCKETS, TOKEN_LATENCY_BUCKETS, REQUEST_LATENCY_BUCKETS)))
def test_an_engine_estimate_never_lies_outside_the_buckets_of_the_true_min_and_max(
    before: list[float], samples: list[float], q: float, bounds: tuple[float, ...],
) -> None:
    """The engine's figures have no observed min/max (a vLLM histogram keeps buckets only): the
    estimate of a window's samples (the delta of two cumulative readings) lies inside the bucket
    holding its rank, so never below the true minimum's bucket nor above the true maximum's; past
    the last finite bound it is that bound, marked open (upper = inf, shown '≥')."""
    def histogram(values: list[float]) -> dict[float, float]:
        counts = {bound: float(sum(1 for v in values if v <= bound)) for bound in bounds}
        return counts | {math.inf: float(len(values))}

    delta = window_delta(histogram(before), histogram(before + samples))
    estimate = histogram_estimate(q, delta)
    assert estimate is not None
    edges = (0.0, *bounds, math.inf)

    def bucket(value: float) -> tuple[float, float]:
        upper = next(i for i, edge in enumerate(edges) if value <= edge)
        return edges[upper - 1], edges[upper]

    assert bucket(min(samples))[0] <= estimate.value <= bucket(max(samples))[1]
    assert estimate.lower <= estimate.value <= estimate.upper
    true = percentile_nearest_rank(samples, q)
    assert true is not None and bucket(true)[0] <= estimate.value <= bucket(true)[1]
    assert (estimate.lower, estimate.upper) == bucket(true)
    if math.isinf(estimate.upper):
        assert estimate.value == estimate.lower == bounds[-1]
