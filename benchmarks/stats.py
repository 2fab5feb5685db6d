"""Per-level statistics from recorded streams: pure functions, no I/O.

Definitions follow `vllm bench serve` (vllm/benchmarks/serve.py, calculate_metrics):
- TTFT: send to the first streamed chunk carrying content;
- TPOT per request: (latency - TTFT) / (output tokens - 1), the first token excluded;
- ITL: every gap between consecutive content chunks, pooled over all requests;
- E2EL (latency): send to the last content chunk;
- request / output / total token throughput: completed requests, output tokens, input +
  output tokens of completed requests over the level's duration;
- peak output tok/s: the most output tokens in one 1-second bucket of the level;
- peak concurrent requests: the most requests in flight at once.
Beside them, the seeds' columns: per-request decode tok/s as loadtest.py and llama-benchy
measure it, (tokens - 1) / (last - first chunk), and prefill tok/s, prompt tokens / TTFT.
Percentiles interpolate linearly between ranks, numpy's default rule, as vLLM's do
(core.stats.percentile_linear); a figure of no values is 0. Failed requests count in
`failed` and `total` and are never dropped; their times do not enter the latency statistics
(vLLM does the same).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from core.stats import percentile_linear

PERCENTILES = (50, 90, 95, 99)


@dataclass
class RequestRecord:
    sent_at: float
    chunk_times: list[float] = field(default_factory=list)  # content chunks, in arrival order
    chunk_tokens: list[int] = field(default_factory=list)  # tokens each chunk carried
    prompt_tokens: int = 0
    output_tokens: int = 0  # the server's usage figure when it sent one, else the chunk count
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error and bool(self.chunk_times)

    @property
    def ttft(self) -> float:
        return self.chunk_times[0] - self.sent_at

    @property
    def latency(self) -> float:
        return self.chunk_times[-1] - self.sent_at

    @property
    def itls(self) -> list[float]:
        return [later - earlier for earlier, later in zip(self.chunk_times, self.chunk_times[1:], strict=False)]

    @property
    def tpot(self) -> float | None:
        if self.output_tokens < 2:
            return None
        return (self.latency - self.ttft) / (self.output_tokens - 1)

    @property
    def decode_tok_s(self) -> float | None:
        span = self.chunk_times[-1] - self.chunk_times[0]
        if self.output_tokens < 2 or span <= 0:
            return None
        return (self.output_tokens - 1) / span


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _std(values: Sequence[float]) -> float:
    if not values:
        return 0.0
    mean = _mean(values)
    return math.sqrt(sum((value - mean) ** 2 for value in values) / len(values))


def _describe(prefix: str, seconds: Sequence[float], out: dict[str, Any]) -> None:
    """mean/median/std/pNN of a list of seconds, in milliseconds, with vLLM's key names."""
    millis = [value * 1000.0 for value in seconds]
    out[f"mean_{prefix}_ms"] = _mean(millis)
    out[f"median_{prefix}_ms"] = percentile_linear(millis, 0.5) or 0.0
    out[f"std_{prefix}_ms"] = _std(millis)
    for q in PERCENTILES:
        out[f"p{q}_{prefix}_ms"] = percentile_linear(millis, q / 100) or 0.0


def peak_output_tok_s(records: Sequence[RequestRecord], start: float) -> float:
    buckets: dict[int, int] = {}
    for record in records:
        tokens = record.chunk_tokens or [1] * len(record.chunk_times)
        for at, count in zip(record.chunk_times, tokens, strict=False):
            bucket = int(math.floor(at - start))
            buckets[bucket] = buckets.get(bucket, 0) + count
    return float(max(buckets.values())) if buckets else 0.0


def peak_concurrency(records: Sequence[RequestRecord], ends: Sequence[float]) -> int:
    # At equal times a start counts before an end: a request in flight for no time still was.
    events = sorted([(record.sent_at, 1) for record in records] + [(end, -1) for end in ends],
                    key=lambda event: (event[0], -event[1]))
    peak = running = 0
    for _, change in events:
        running += change
        peak = max(peak, running)
    return peak


def level_stats(records: Sequence[RequestRecord], *, started_at: float, ended_at: float,
                ends: Sequence[float] | None = None) -> dict[str, Any]:
    """Every figure of one level. `ends`: when each request ended (failed ones included),
    for the peak concurrency; defaults to each record's last chunk or send time."""
    done = [record for record in records if record.ok]
    duration = max(ended_at - started_at, 1e-9)
    output = sum(record.output_tokens for record in done)
    prompt = sum(record.prompt_tokens for record in done)
    if ends is None:
        ends = [record.chunk_times[-1] if record.chunk_times else record.sent_at for record in records]
    stats: dict[str, Any] = {
        "completed": len(done),
        "failed": len(records) - len(done),
        "total": len(records),
        "duration": duration,
        "total_input_tokens": prompt,
        "total_output_tokens": output,
        "request_throughput": len(done) / duration,
        "output_throughput": output / duration,
        "total_token_throughput": (prompt + output) / duration,
        "max_output_tokens_per_s": peak_output_tok_s(done, started_at),
        "max_concurrent_requests": peak_concurrency(records, ends),
        "errors": sorted({record.error for record in records if record.error}),
    }
    _describe("ttft", [record.ttft for record in done], stats)
    _describe("tpot", [tpot for record in done if (tpot := record.tpot) is not None], stats)
    _describe("itl", [gap for record in done for gap in record.itls], stats)
    _describe("e2el", [record.latency for record in done], stats)
    decode = [rate for record in done if (rate := record.decode_tok_s) is not None]
    stats["median_decode_tok_s"] = percentile_linear(decode, 0.5) or 0.0
    stats["mean_decode_tok_s"] = _mean(decode)
    prefill = [record.prompt_tokens / record.ttft for record in done if record.ttft > 0]
    stats["mean_prefill_tok_s"] = _mean(prefill)
    return stats


# The figures a level's table and the run's charts show, in order, with their units.
SUMMARY_COLUMNS: tuple[tuple[str, str], ...] = (
    ("completed", ""), ("failed", ""), ("median_ttft_ms", "ms"), ("p95_ttft_ms", "ms"),
    ("p99_ttft_ms", "ms"), ("mean_tpot_ms", "ms"), ("median_itl_ms", "ms"), ("p95_itl_ms", "ms"),
    ("median_e2el_ms", "ms"), ("median_decode_tok_s", "tok/s"), ("output_throughput", "tok/s"),
    ("mean_prefill_tok_s", "tok/s"), ("max_output_tokens_per_s", "tok/s"),
)
# A tail percentile from fewer requests than this is no tail: a p95 of fewer than 20 requests
# is interpolated between the slowest two (one wave of C=8 gives 8), a p99 needs 100.
TAIL_MIN_REQUESTS = {"p95": 20, "p99": 100}


def thin_percentiles(completed: int) -> list[str]:
    """The summary figures (SUMMARY_COLUMNS' keys) that rest on too few completed requests to
    mean what their name says: the run page marks them and says how many requests they are of."""
    return [name for name, _ in SUMMARY_COLUMNS
            if completed < TAIL_MIN_REQUESTS.get(name.split("_", 1)[0], 0)]


# What a person reads for each of them (the key stays in exports and the API, as vllm names it).
SUMMARY_LABELS = {
    "completed": "completed", "failed": "failed", "median_ttft_ms": "TTFT p50", "p95_ttft_ms": "TTFT p95",
    "p99_ttft_ms": "TTFT p99", "mean_tpot_ms": "TPOT mean", "median_itl_ms": "ITL p50", "p95_itl_ms": "ITL p95",
    "median_e2el_ms": "E2E latency p50", "median_decode_tok_s": "decode p50", "output_throughput": "output throughput",
    "mean_prefill_tok_s": "prefill mean", "max_output_tokens_per_s": "peak output",
}
