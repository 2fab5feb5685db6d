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
Open-loop levels (request rates, replays) also keep each request's intended send time tᵢ
(level start + its offset in a seeded schedule, absolute, never a sleep after the last send):
- dispatch delay: when the request left (its headers written; its send without a trace) minus tᵢ;
- TTFT / E2EL from the schedule: first / last content chunk minus tᵢ (GuideLLM's "scheduled"
  latency; what `vllm bench serve` reports since it stopped measuring from the drifted send);
- achieved rate: requests per second between the first and the last to leave, beside the
  schedule's own rate over the same requests (a client that fell behind shows here, not as a fast lane).
Every level also times the client itself per request (httpx's trace, when the transport gives
one): connection wait (send to a pooled connection or a new connect), TCP connect, and pre-send
(send to the moment the request headers are written); requests in flight at the lane count
from that moment.
Goodput (when the admin sets SLOs): a request is good when it succeeded, its TTFT (from the
schedule on an open-loop level: what the user arriving at tᵢ waited) is within the TTFT bound
and its TPOT within the TPOT bound; `request_goodput` is good requests per second of the level
(vLLM's name), `goodput_share` good requests over all, failures included. Time slices cut a
level by each request's intended (else actual) send time, for a replay's "which minute did
the lane not keep up".
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
    scheduled_at: float | None = None  # tᵢ, the intended send time (open-loop levels only)
    headers_at: float | None = None  # when the request headers began to be written
    connection_at: float | None = None  # when a pooled connection was in hand or a connect began
    connect_s: float | None = None  # the TCP connect, when this request opened a connection

    @property
    def dispatch_delay(self) -> float | None:
        """tᵢ to the moment the request left the client (its headers written, else its send)."""
        if self.scheduled_at is None:
            return None
        return (self.headers_at if self.headers_at is not None else self.sent_at) - self.scheduled_at

    @property
    def ttft_from_schedule(self) -> float | None:
        return None if self.scheduled_at is None else self.chunk_times[0] - self.scheduled_at

    @property
    def latency_from_schedule(self) -> float | None:
        return None if self.scheduled_at is None else self.chunk_times[-1] - self.scheduled_at

    @property
    def pre_send(self) -> float | None:
        return None if self.headers_at is None else self.headers_at - self.sent_at

    @property
    def connection_wait(self) -> float | None:
        return None if self.connection_at is None else self.connection_at - self.sent_at

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


@dataclass(frozen=True)
class Slo:
    ttft_s: float | None = None
    tpot_s: float | None = None

    def as_dict(self) -> dict[str, float | None]:
        return {"ttft_ms": None if self.ttft_s is None else self.ttft_s * 1000,
                "tpot_ms": None if self.tpot_s is None else self.tpot_s * 1000}


def user_ttft(record: RequestRecord) -> float:
    """The TTFT the user saw: from the schedule when the request had one, else from the send."""
    scheduled = record.ttft_from_schedule
    return record.ttft if scheduled is None else scheduled


def is_good(record: RequestRecord, slo: Slo) -> bool:
    if not record.ok:
        return False
    if slo.ttft_s is not None and user_ttft(record) > slo.ttft_s:
        return False
    tpot = record.tpot
    return slo.tpot_s is None or tpot is None or tpot <= slo.tpot_s


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


def peak_concurrency(records: Sequence[RequestRecord], ends: Sequence[float], *, at_lane: bool = False) -> int:
    """The most requests in flight at once: from their send, or (at_lane) from the moment
    their headers were written (a request still waiting in the client's pool is not at the
    lane). At equal times a start counts before an end: a request in flight for no time was."""
    starts = [(record.headers_at if at_lane else record.sent_at, end) for record, end in zip(records, ends, strict=True)]
    events = sorted([(start, 1) for start, _ in starts if start is not None]
                    + [(end, -1) for start, end in starts if start is not None],
                    key=lambda event: (event[0], -event[1]))
    peak = running = 0
    for _, change in events:
        running += change
        peak = max(peak, running)
    return peak


def level_stats(records: Sequence[RequestRecord], *, started_at: float, ended_at: float,
                ends: Sequence[float] | None = None, slo: Slo | None = None,
                slice_s: float | None = None) -> dict[str, Any]:
    """Every figure of one level. `ends`: when each request ended (failed ones included),
    for the peak concurrency; defaults to each record's last chunk or send time. `slo`: the
    goodput's bounds; `slice_s`: the width of the time slices (none without it)."""
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
    _client_side(records, done, ends, stats)
    _from_schedule(records, done, stats)
    if slo is not None and (slo.ttft_s is not None or slo.tpot_s is not None):
        good = sum(1 for record in records if is_good(record, slo))
        stats["slo"] = slo.as_dict()
        stats["good_requests"] = good
        stats["request_goodput"] = good / duration
        stats["goodput_share"] = good / len(records) if records else 0.0
    if slice_s:
        stats["slice_s"] = slice_s
        stats["slices"] = time_slices(records, started_at, slice_s, slo)
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


def _client_side(records: Sequence[RequestRecord], done: Sequence[RequestRecord], ends: Sequence[float],
                 stats: dict[str, Any]) -> None:
    """What the client spent before each request reached the wire, when the transport traced it."""
    traced = [record for record in records if record.headers_at is not None]
    if not traced:
        return
    stats["max_in_flight_at_lane"] = peak_concurrency(records, ends, at_lane=True)
    stats["connections_opened"] = sum(1 for record in traced if record.connect_s is not None)
    _describe("pre_send", [value for record in traced if (value := record.pre_send) is not None], stats)
    _describe("connection_wait", [value for record in traced if (value := record.connection_wait) is not None],
              stats)
    connects = [record.connect_s for record in traced if record.connect_s is not None]
    stats["mean_connect_ms"] = _mean(connects) * 1000.0
    # The client's share of the TTFT it reports (send to first chunk): pre-send over TTFT.
    ttft_p50 = percentile_linear([record.ttft for record in done if record.headers_at is not None], 0.5) or 0.0
    stats["pre_send_p95_share_of_ttft"] = stats["p95_pre_send_ms"] / 1000.0 / ttft_p50 if ttft_p50 > 0 else 0.0


def _rate(times: Sequence[float]) -> float:
    span = max(times) - min(times) if len(times) > 1 else 0.0
    return (len(times) - 1) / span if span > 0 else 0.0


def _from_schedule(records: Sequence[RequestRecord], done: Sequence[RequestRecord], stats: dict[str, Any]) -> None:
    """An open-loop level's figures from each request's intended send time."""
    planned = [record for record in records if record.scheduled_at is not None]
    if not planned:
        return
    # A request left when its headers were written (its send, without a trace): a client that
    # falls behind may call the send on time and write the request seconds later.
    left = [record.headers_at if record.headers_at is not None else record.sent_at for record in planned]
    delays = [delay for record in planned if (delay := record.dispatch_delay) is not None]
    _describe("dispatch_delay", delays, stats)
    stats["max_dispatch_delay_ms"] = max(delays) * 1000.0
    stats["last_dispatch_delay_ms"] = delays[-1] * 1000.0 if delays else 0.0
    stats["scheduled_request_rate"] = _rate([record.scheduled_at for record in planned
                                             if record.scheduled_at is not None])
    stats["achieved_request_rate"] = _rate(left)
    on_schedule = [record for record in done if record.scheduled_at is not None]
    _describe("ttft_from_schedule", [value for record in on_schedule
                                     if (value := record.ttft_from_schedule) is not None], stats)
    _describe("e2el_from_schedule", [value for record in on_schedule
                                     if (value := record.latency_from_schedule) is not None], stats)


def time_slices(records: Sequence[RequestRecord], started_at: float, slice_s: float,
                slo: Slo | None = None) -> list[dict[str, Any]]:
    """The level cut by each request's intended send time (its actual one without a
    schedule) into slices of `slice_s` seconds from the level's start, every slice listed
    (an empty one too): its requests, failures, TTFT as the user saw it, TPOT, output tokens
    and, with SLOs, its goodput share."""
    slices: dict[int, list[RequestRecord]] = {}
    for record in records:
        at = record.scheduled_at if record.scheduled_at is not None else record.sent_at
        slices.setdefault(max(0, int((at - started_at) // slice_s)), []).append(record)
    rows = []
    for index in range(max(slices, default=-1) + 1):
        mine = slices.get(index, [])
        done = [record for record in mine if record.ok]
        ttfts = [user_ttft(record) * 1000 for record in done]
        row: dict[str, Any] = {
            "start_s": index * slice_s, "requests": len(mine), "completed": len(done), "failed": len(mine) - len(done),
            "median_ttft_ms": percentile_linear(ttfts, 0.5) or 0.0, "p95_ttft_ms": percentile_linear(ttfts, 0.95) or 0.0,
            "mean_tpot_ms": _mean([tpot * 1000 for record in done if (tpot := record.tpot) is not None]),
            "output_tokens": sum(record.output_tokens for record in done),
        }
        if slo is not None and (slo.ttft_s is not None or slo.tpot_s is not None):
            good = sum(1 for record in mine if is_good(record, slo))
            row["good_requests"] = good
            row["goodput_share"] = good / len(mine) if mine else 0.0
        rows.append(row)
    return rows


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
