"""The metric definitions (vllm bench serve's) on a recorded stream of chunk timestamps,
against values computed by hand; the /metrics deltas on two scrapes."""

from __future__ import annotations

import pytest

from benchmarks.client_load import ClientLoad
from benchmarks.loadgen import LevelPlan, level_flags
from benchmarks.promdelta import metrics_delta, parse_roce, roce_delta
from benchmarks.stats import RequestRecord, level_stats

# Request A: sent at 0.0, four one-token chunks. Request B: sent at 0.2, three. Request C:
# sent at 0.3, refused with HTTP 500 (ended at 0.3).
A = RequestRecord(sent_at=0.0, chunk_times=[0.5, 0.6, 0.8, 1.1], chunk_tokens=[1, 1, 1, 1], prompt_tokens=100,
                  output_tokens=4)
B = RequestRecord(sent_at=0.2, chunk_times=[1.2, 1.3, 1.4], chunk_tokens=[1, 1, 1], prompt_tokens=100,
                  output_tokens=3)
C = RequestRecord(sent_at=0.3, error="HTTP 500: boom")


@pytest.fixture
def stats() -> dict:
    return level_stats([A, B, C], started_at=0.0, ended_at=1.4, ends=[1.1, 1.4, 0.3])


def test_counts_keep_the_failed_request(stats: dict) -> None:
    assert (stats["completed"], stats["failed"], stats["total"]) == (2, 1, 3)
    assert stats["errors"] == ["HTTP 500: boom"]


def test_ttft_is_send_to_first_chunk(stats: dict) -> None:
    # A: 0.5 s, B: 1.2 - 0.2 = 1.0 s. p99 interpolates: 0.5 + 0.99 * (1.0 - 0.5).
    assert stats["mean_ttft_ms"] == pytest.approx(750.0)
    assert stats["median_ttft_ms"] == pytest.approx(750.0)
    assert stats["p99_ttft_ms"] == pytest.approx(995.0)


def test_tpot_excludes_the_first_token(stats: dict) -> None:
    # A: (1.1 - 0.5) / (4 - 1) = 0.2 s; B: (1.2 - 1.0) / (3 - 1) = 0.1 s.
    assert stats["mean_tpot_ms"] == pytest.approx(150.0)
    assert stats["median_tpot_ms"] == pytest.approx(150.0)


def test_itl_pools_every_gap_between_chunks(stats: dict) -> None:
    # A: 0.1, 0.2, 0.3; B: 0.1, 0.1 -> [0.1, 0.1, 0.1, 0.2, 0.3].
    assert stats["mean_itl_ms"] == pytest.approx(160.0)
    assert stats["median_itl_ms"] == pytest.approx(100.0)
    assert stats["p99_itl_ms"] == pytest.approx(296.0)  # rank 3.96: 0.2 + 0.96 * 0.1


def test_e2el_and_throughputs(stats: dict) -> None:
    assert stats["mean_e2el_ms"] == pytest.approx(1150.0)  # 1.1 s and 1.2 s
    assert stats["duration"] == pytest.approx(1.4)
    assert stats["output_throughput"] == pytest.approx(7 / 1.4)
    assert stats["request_throughput"] == pytest.approx(2 / 1.4)
    assert stats["total_token_throughput"] == pytest.approx(207 / 1.4)


def test_peaks_decode_and_prefill(stats: dict) -> None:
    # 1-second buckets from the level's start: [0, 1) holds A's first three chunks; [1, 2)
    # A's last and all of B's.
    assert stats["max_output_tokens_per_s"] == 4
    assert stats["max_concurrent_requests"] == 3  # at 0.3 s A, B and C are all in flight
    # (tokens - 1) / (last - first): A 3 / 0.6 = 5, B 2 / 0.2 = 10.
    assert stats["median_decode_tok_s"] == pytest.approx(7.5)
    # prompt / TTFT: A 200, B 100.
    assert stats["mean_prefill_tok_s"] == pytest.approx(150.0)


def test_a_level_where_every_request_failed_has_zero_figures_not_an_error() -> None:
    stats = level_stats([C], started_at=0.0, ended_at=0.3)
    assert (stats["completed"], stats["failed"]) == (0, 1)
    assert stats["median_ttft_ms"] == 0.0 and stats["output_throughput"] == 0.0


def test_a_busy_or_late_client_reports_itself_saturated() -> None:
    assert ClientLoad(cpu_s=0.95, wall_s=1.0).as_dict()["saturated"]
    late = ClientLoad(cpu_s=0.1, wall_s=1.0, lag_p99_s=0.2).as_dict()
    assert late["saturated"] and "late" in late["saturated_because"]
    assert not ClientLoad(cpu_s=0.1, wall_s=1.0, lag_p99_s=0.001).as_dict()["saturated"]


SCRAPE = """# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{{engine="0",model_name="m"}} {q}
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{{engine="0",model_name="m"}} {h}
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{{engine="0",model_name="m"}} {p}
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}} {d}
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="m"}} {dt}
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="m"}} {a}
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="0"}} {a0}
"""


def test_metrics_deltas_over_a_level() -> None:
    before = SCRAPE.format(q=1000, h=0, p=1, d=10, dt=30, a=15, a0=9)
    after = SCRAPE.format(q=3000, h=1500, p=3, d=110, dt=330, a=215, a0=109)
    delta = metrics_delta(before, after)
    assert delta["prefix_cache_hit_rate"] == pytest.approx(0.75)  # 1500 / 2000
    assert delta["preemptions"] == 2
    assert delta["spec_acceptance_rate"] == pytest.approx(200 / 300)
    assert delta["spec_mean_acceptance_length"] == pytest.approx(1 + 200 / 100)
    assert delta["counters"]["vllm:spec_decode_num_accepted_tokens_per_pos[0]"] == 100
    assert delta["spec_acceptance_per_position"] == pytest.approx([100 / 100])  # position 0: every draft


def test_a_counter_that_went_down_is_a_reset_not_a_negative_delta() -> None:
    delta = metrics_delta(SCRAPE.format(q=5000, h=10, p=0, d=0, dt=0, a=0, a0=0),
                          SCRAPE.format(q=200, h=10, p=0, d=0, dt=0, a=0, a0=0))
    assert delta["counters"]["vllm:prefix_cache_queries"] == 200
    assert "vllm:prefix_cache_queries" in delta["reset"]


def test_roce_counters_count_four_octet_words() -> None:
    before = parse_roce("spark1", ["ROCE\trocep1s0f0\t100\t200\n", "junk"])
    after = parse_roce("spark1", ["ROCE\trocep1s0f0\t1100\t700\n"])
    assert roce_delta(before, after) == {"spark1/rocep1s0f0": {"tx_bytes": 4000, "rx_bytes": 2000}}


def test_a_client_slow_to_send_is_flagged_with_its_share_of_ttft() -> None:
    plan = LevelPlan(concurrency=2, request_rate=None, requests=2, duration_s=None, output_tokens=3, timeout_s=60.0)

    def level(pre_send: float) -> dict[str, object]:
        records = [RequestRecord(sent_at=0.0, headers_at=pre_send, connection_at=pre_send,
                                 chunk_times=[0.2, 0.3, 0.4], output_tokens=3) for _ in range(2)]
        return level_stats(records, started_at=0.0, ended_at=0.4, ends=[0.4, 0.4])

    slow = level(0.02)  # 20 ms of a 200 ms TTFT: 10%
    assert slow["p95_pre_send_ms"] == pytest.approx(20.0) and slow["max_in_flight_at_lane"] == 2
    (flag,) = level_flags(plan, slow)
    assert "20.0 ms (p95)" in flag and "10% of the median TTFT" in flag
    assert level_flags(plan, level(0.002)) == []  # 1%


def test_tail_percentiles_of_a_handful_of_requests_are_marked_thin():
    """A level of one wave at C=8 gave p95/p99 from 8 requests with no warning: a p95 needs 20
    completed requests, a p99 100, else the page marks them (the level's `thin` keys)."""
    from benchmarks.stats import thin_percentiles

    assert thin_percentiles(8) == ["p95_ttft_ms", "p99_ttft_ms", "p95_itl_ms"]
    assert thin_percentiles(20) == ["p99_ttft_ms"]
    assert thin_percentiles(100) == []
