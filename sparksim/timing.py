"""The timing model: pure functions, no I/O, shared by the engine and its tests.

Times here are simulated seconds. The engine multiplies them by its time scale.

Shape of the model (mirrors vLLM's scheduler closely enough for benchmarks):
- prefill compute runs one request after another (seed 004: "the prompts are processed one
  after another, so the waits stack up"); the first token appears a fixed latency (base_ttft_s:
  scheduling, the first forward step) after the request's prefill compute ends, and that fixed
  part overlaps between requests;
- decode runs in steps: every running sequence gets one token per step, and a step takes
  1 / per_stream_decode_rate(running) seconds, so streams slow down as more share the GPU;
- a sequence whose prefill ends during a step joins at the next step boundary.
"""

from collections.abc import Sequence
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class TimingProfile:
    name: str
    prefill_tok_s: float  # uncached prompt tokens per second
    cached_prefill_tok_s: float  # prompt tokens per second when served from the prefix cache
    base_ttft_s: float  # fixed cost of a request before its first token (scheduling, 1st step)
    decode_tok_s: float  # one stream alone
    decode_falloff: float  # per-stream rate = decode_tok_s / (1 + falloff * (running - 1))
    startup_s: float  # process start to "Application startup complete."
    kv_tokens_per_gib: float
    weights_gib: float  # the whole model, split evenly over tensor-parallel ranks
    max_model_len: int
    vocab_size: int


def falloff_for(single_tok_s: float, loaded_tok_s: float, running: int) -> float:
    """The falloff that makes `running` streams each get `loaded_tok_s`."""
    return (single_tok_s / loaded_tok_s - 1.0) / (running - 1)


# Seed 000: 68 tok/s for one user, 45 tok/s each at 10 users. Seed 003: cold prefill
# ~2,500 tok/s; cache hits 50K in 0.413 s and 150K in 0.776 s, which solve to ~275K tok/s
# plus ~0.23 s fixed cost. Seed 004: healthy ~244 s after serve (here scaled down to a few
# seconds by default, see startup_s). KV: 11 GiB held 1,146,448 tokens (~104K tokens/GiB).
DEEPSEEK = TimingProfile(
    name="deepseek",
    prefill_tok_s=2500.0,
    cached_prefill_tok_s=275_000.0,
    base_ttft_s=0.2,
    decode_tok_s=68.0,
    decode_falloff=falloff_for(68.0, 45.0, 10),
    startup_s=5.0,
    kv_tokens_per_gib=1_146_448 / 11,
    weights_gib=156.0,
    max_model_len=1_048_576,
    vocab_size=129_280,
)

# Seed 000: Qwen 3.8 27B FP8 on one Spark, 120 tok/s for one user, 262K prefill in 3 s.
# The seeds give no concurrency curve for it: reuse DeepSeek's relative falloff.
QWEN = TimingProfile(
    name="qwen",
    prefill_tok_s=262_144 / 3.0,
    cached_prefill_tok_s=1_000_000.0,
    base_ttft_s=0.05,
    decode_tok_s=120.0,
    decode_falloff=falloff_for(68.0, 45.0, 10),
    startup_s=3.0,
    kv_tokens_per_gib=32_768.0,
    weights_gib=29.0,
    max_model_len=262_144,
    vocab_size=151_936,
)

PROFILES = {"deepseek": DEEPSEEK, "qwen": QWEN}


def profile_for_model(model: str) -> TimingProfile:
    """DeepSeek-like for DeepSeek models, Qwen-like for everything else."""
    return DEEPSEEK if "deepseek" in model.lower() else QWEN


def with_overrides(profile: TimingProfile, **overrides: float | int | None) -> TimingProfile:
    present = {key: value for key, value in overrides.items() if value is not None}
    return replace(profile, **present)  # type: ignore[arg-type]  # keys are profile fields


# Seed 003: falling out of CUDA graphs into eager "loses roughly two thirds of decode speed".
EAGER_DECODE_FACTOR = 0.35


def per_stream_decode_rate(
    profile: TimingProfile, running: int, graph_seqs: int | None = None
) -> float:
    """Tokens per second each stream gets while `running` streams decode together.

    graph_seqs: how many sequences the captured CUDA graphs hold (None: no limit).
    """
    rate = profile.decode_tok_s / (1.0 + profile.decode_falloff * (max(running, 1) - 1))
    if graph_seqs is not None and running > graph_seqs:
        rate *= EAGER_DECODE_FACTOR
    return rate


def decode_step_seconds(
    profile: TimingProfile, running: int, graph_seqs: int | None = None
) -> float:
    return 1.0 / per_stream_decode_rate(profile, running, graph_seqs)


def prefill_compute_seconds(
    profile: TimingProfile, uncached_tokens: int, cached_tokens: int
) -> float:
    """The serial part of a prefill: the time the GPU spends on this prompt alone."""
    return uncached_tokens / profile.prefill_tok_s + cached_tokens / profile.cached_prefill_tok_s


def prefill_seconds(profile: TimingProfile, uncached_tokens: int, cached_tokens: int) -> float:
    """TTFT of a request that does not queue behind another prefill."""
    return profile.base_ttft_s + prefill_compute_seconds(profile, uncached_tokens, cached_tokens)


@dataclass(frozen=True)
class PlannedRequest:
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    cached_tokens: int = 0


@dataclass(frozen=True)
class RequestTimeline:
    first_token_s: float
    finish_s: float
    output_tokens: int

    def ttft_s(self, arrival_s: float) -> float:
        return self.first_token_s - arrival_s

    @property
    def decode_tok_s(self) -> float:
        """Decode speed the way loadtest.py measures it: (tokens - 1) / (last - first)."""
        if self.output_tokens < 2 or self.finish_s <= self.first_token_s:
            return 0.0
        return (self.output_tokens - 1) / (self.finish_s - self.first_token_s)


def simulate(
    profile: TimingProfile,
    requests: Sequence[PlannedRequest],
    graph_seqs: int | None = None,
) -> list[RequestTimeline]:
    """Replays the engine's scheduler exactly (unlimited KV and max_num_seqs)."""
    order = sorted(range(len(requests)), key=lambda index: requests[index].arrival_s)
    first_token = [0.0] * len(requests)
    prefill_free_at = 0.0
    for index in order:
        request = requests[index]
        start = max(request.arrival_s, prefill_free_at)
        uncached = request.prompt_tokens - request.cached_tokens
        prefill_free_at = start + prefill_compute_seconds(profile, uncached, request.cached_tokens)
        first_token[index] = prefill_free_at + profile.base_ttft_s

    finish = list(first_token)
    remaining = {index: requests[index].output_tokens - 1 for index in range(len(requests))}
    joins = sorted(
        (first_token[index], index) for index in range(len(requests)) if remaining[index] > 0
    )
    running: list[int] = []
    clock = 0.0
    next_join = 0
    while next_join < len(joins) or running:
        if not running:
            clock = joins[next_join][0]
            while next_join < len(joins) and joins[next_join][0] <= clock:
                running.append(joins[next_join][1])
                next_join += 1
        step_end = clock + decode_step_seconds(profile, len(running), graph_seqs)
        still_running = []
        for index in running:
            remaining[index] -= 1
            if remaining[index] == 0:
                finish[index] = step_end
            else:
                still_running.append(index)
        running = still_running
        while next_join < len(joins) and joins[next_join][0] <= step_end:
            running.append(joins[next_join][1])
            next_join += 1
        clock = step_end
    return [
        RequestTimeline(first_token[index], finish[index], requests[index].output_tokens)
        for index in range(len(requests))
    ]
