"""vLLM's Prometheus metrics, rendered as text without a client library.

Names, labels and buckets follow vllm/v1/metrics/loggers.py: every series carries
`model_name` and `engine`; counters are exposed with a `_total` suffix. Latencies are in
simulated seconds (the model's clock), so dashboards read the same at any time scale.
"""

from bisect import bisect_left
from collections.abc import Iterable, Sequence

TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)
TOKEN_LATENCY_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0,
)
REQUEST_LATENCY_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
    240.0, 480.0, 960.0, 1920.0, 7680.0,
)
TOKEN_COUNT_BUCKETS = tuple(
    float(base * 10**power) for power in range(0, 7) for base in (1, 2, 5)
)
ITERATION_TOKEN_BUCKETS = (1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0,
                           4096.0, 8192.0, 16384.0)

Labels = tuple[tuple[str, str], ...]


def format_labels(labels: Labels) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{key}="{value}"' for key, value in labels)
    return "{" + inner + "}"


class Histogram:
    def __init__(self, buckets: Sequence[float]) -> None:
        self.buckets = tuple(buckets)
        self.counts = [0] * (len(self.buckets) + 1)
        self.total = 0.0

    def observe(self, value: float, times: int = 1) -> None:
        self.counts[bisect_left(self.buckets, value)] += times
        self.total += value * times

    def lines(self, name: str, labels: Labels) -> Iterable[str]:
        cumulative = 0
        for bound, count in zip(self.buckets, self.counts, strict=False):
            cumulative += count
            bucket_labels = (*labels, ("le", repr(float(bound))))
            yield f"{name}_bucket{format_labels(bucket_labels)} {cumulative}"
        cumulative += self.counts[-1]
        yield f'{name}_bucket{format_labels((*labels, ("le", "+Inf")))} {cumulative}'
        yield f"{name}_count{format_labels(labels)} {cumulative}"
        yield f"{name}_sum{format_labels(labels)} {self.total}"


HISTOGRAMS: dict[str, tuple[str, Sequence[float]]] = {
    "time_to_first_token_seconds": ("Histogram of time to first token in seconds.", TTFT_BUCKETS),
    "inter_token_latency_seconds": ("Histogram of inter-token latency in seconds.",
                                    TOKEN_LATENCY_BUCKETS),
    "time_per_output_token_seconds": ("Histogram of time per output token in seconds.",
                                      TOKEN_LATENCY_BUCKETS),
    "request_time_per_output_token_seconds": ("Histogram of time_per_output_token_seconds per "
                                              "request.", TOKEN_LATENCY_BUCKETS),
    "e2e_request_latency_seconds": ("Histogram of e2e request latency in seconds.",
                                    REQUEST_LATENCY_BUCKETS),
    "request_queue_time_seconds": ("Histogram of time spent in WAITING phase for request.",
                                   REQUEST_LATENCY_BUCKETS),
    "request_prefill_time_seconds": ("Histogram of time spent in PREFILL phase for request.",
                                     REQUEST_LATENCY_BUCKETS),
    "request_decode_time_seconds": ("Histogram of time spent in DECODE phase for request.",
                                    REQUEST_LATENCY_BUCKETS),
    "request_prompt_tokens": ("Number of prefill tokens processed.", TOKEN_COUNT_BUCKETS),
    "request_generation_tokens": ("Number of generation tokens processed.", TOKEN_COUNT_BUCKETS),
    "iteration_tokens_total": ("Histogram of number of tokens per engine_step.",
                               ITERATION_TOKEN_BUCKETS),
}
COUNTERS = {
    "prompt_tokens": "Number of prefill tokens processed.",
    "generation_tokens": "Number of generation tokens processed.",
    "prefix_cache_queries": "Prefix cache queries, in terms of number of queried tokens.",
    "prefix_cache_hits": "Prefix cache hits, in terms of number of cached tokens.",
    "num_preemptions": "Cumulative number of preemption from the engine.",
}
SPEC_COUNTERS = {
    "spec_decode_num_drafts": "Number of spec decoding drafts.",
    "spec_decode_num_draft_tokens": "Number of draft tokens.",
    "spec_decode_num_accepted_tokens": "Number of accepted tokens.",
}
FINISH_REASONS = ("stop", "length", "abort")


class EngineMetrics:
    def __init__(self, model_name: str, spec_tokens: int) -> None:
        self.labels: Labels = (("engine", "0"), ("model_name", model_name))
        self.spec_tokens = spec_tokens
        self.counters = dict.fromkeys([*COUNTERS, *SPEC_COUNTERS], 0)
        self.accepted_per_position = [0] * spec_tokens
        self.finished = dict.fromkeys(FINISH_REASONS, 0)
        self.histograms = {name: Histogram(buckets) for name, (_, buckets) in HISTOGRAMS.items()}
        self.running = 0
        self.waiting = 0
        self.kv_usage = 0.0
        self.cache_info: Labels = ()

    def count(self, name: str, amount: int = 1) -> None:
        self.counters[name] += amount

    def observe(self, name: str, value: float, times: int = 1) -> None:
        self.histograms[name].observe(value, times)

    def render(self) -> str:
        lines: list[str] = []
        labels = self.labels
        for name, help_text, value in (
            ("num_requests_running", "Number of requests in model execution batches.",
             float(self.running)),
            ("num_requests_waiting", "Number of requests waiting to be processed.",
             float(self.waiting)),
            ("kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", self.kv_usage),
        ):
            lines += [f"# HELP vllm:{name} {help_text}", f"# TYPE vllm:{name} gauge",
                      f"vllm:{name}{format_labels(labels)} {value}"]
        lines += ["# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig",
                  "# TYPE vllm:cache_config_info gauge",
                  f"vllm:cache_config_info{format_labels((*self.cache_info, *labels))} 1.0"]
        for name, help_text in COUNTERS.items():
            lines += self._counter(name, help_text, self.counters[name])
        lines += [
            "# HELP vllm:request_success_total Count of successfully processed requests.",
            "# TYPE vllm:request_success_total counter",
        ]
        for reason, value in self.finished.items():
            reason_labels = (*labels, ("finished_reason", reason))
            lines.append(f"vllm:request_success_total{format_labels(reason_labels)} {value}.0")
        if self.spec_tokens:
            for name, help_text in SPEC_COUNTERS.items():
                lines += self._counter(name, help_text, self.counters[name])
            name = "spec_decode_num_accepted_tokens_per_pos"
            lines += [f"# HELP vllm:{name}_total Accepted tokens per draft position.",
                      f"# TYPE vllm:{name}_total counter"]
            for position, value in enumerate(self.accepted_per_position):
                position_labels = (*labels, ("position", str(position)))
                lines.append(f"vllm:{name}_total{format_labels(position_labels)} {value}.0")
        for name, (help_text, _) in HISTOGRAMS.items():
            lines += [f"# HELP vllm:{name} {help_text}", f"# TYPE vllm:{name} histogram"]
            lines += self.histograms[name].lines(f"vllm:{name}", labels)
        return "\n".join(lines) + "\n"

    def _counter(self, name: str, help_text: str, value: int) -> list[str]:
        # Like prometheus_client (and so vLLM), HELP/TYPE carry the _total name.
        return [f"# HELP vllm:{name}_total {help_text}", f"# TYPE vllm:{name}_total counter",
                f"vllm:{name}_total{format_labels(self.labels)} {value}.0"]
