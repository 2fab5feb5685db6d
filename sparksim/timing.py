"""The timing model: pure functions and one pure step machine, no I/O, shared by the
engine (sparksim/engine/scheduler.py runs the same `Stepper`) and its tests.

Times here are simulated seconds. The engine multiplies them by its time scale.

Shape of the model (vLLM's v1 scheduler with chunked prefill, fitted to the seeds' tables in
perf/sparksim_fit.py):
- the engine runs steps. Each step decodes one token for every running sequence and, while a
  prefill is pending, also computes one prefill chunk: at most `batch_tokens` uncached prompt
  tokens (vLLM's --max-num-batched-tokens, 8192 by default on a GPU of GB10's memory), whose
  share of the prompt's prefill work is the chunk's time. So a long prefill slows every
  decoding stream to one token per chunk (a 150K prompt's 8192-token chunk takes ~3.5 s:
  ~0.3 tok/s), and decoding streams slow the prefill a little in turn. Seed 003's cold waves
  show it: an answer decodes mostly after the last prefill ends (C=4: the median stream ends
  ~140 s after its first token, ~136 s of which the fourth prompt was prefilling);
- prefills run one after another, first come first served (seed 004: "the prompts are
  processed one after another, so the waits stack up"); a prefill's work is its fixed cost
  (base_ttft_s), its uncached tokens at prefill_tok_s plus an attention term growing with the
  context (seed 003's cold rate falls from 2,548 to 2,328 tok/s between 50K and 150K), and
  its cached tokens at cached_prefill_tok_s;
- prompts served almost wholly from the prefix cache need only a few uncached tokens each, so
  the ones waiting together share one prefill batch and get their first token together (seed
  003: at C=8 on a cache hit, TTFT p50 5.634 s and p95 5.646 s);
- per-stream decode speed falls with the running streams as
  decode_tok_s / (1 + decode_falloff * (running - 1) ** decode_exponent), and to
  EAGER_DECODE_FACTOR of that outside the captured CUDA graphs;
- a prompt that joins another's prefill batch (a cache hit's short tail) costs
  batched_prefill_s more (seed 003: the cache-hit prompts waiting together cost 0.69-0.87 s
  each against 0.66-0.78 s alone);
- streams that share a decode batch do not decode alike: vLLM is not batch-invariant by
  default, so a stream's numerics, and with them its speculative acceptance, depend on its
  place in the batch. The n streams of a step, in the order they joined, decode at speeds
  spread evenly over 1 -/+ decode_spread * (n - 1) / n of the batch's rate (the median stream
  keeps it; alone there is no spread), a stream's fraction carried to the next step (so a
  fast one sometimes emits two tokens in a step, as an accepted draft does). Seed 003's
  cache-hit waves show it: each ends 1.0-3.9 s after TTFT + 511 tokens at its median decode
  speed, so its slowest stream decodes well below the median.
"""

from collections import deque
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field, replace

GIB = 1024**3
GB = 1000**3


@dataclass(frozen=True)
class TimingProfile:
    name: str
    prefill_tok_s: float  # uncached prompt tokens per second, before the attention term
    cached_prefill_tok_s: float  # prompt tokens per second when served from the prefix cache
    base_ttft_s: float  # fixed prefill work of a request (scheduling, the first step)
    decode_tok_s: float  # one stream alone
    decode_falloff: float  # see per_stream_decode_rate
    startup_s: float  # process start to "Application startup complete."
    kv_tokens_per_gib: float
    weights_gib: float  # the whole model, split evenly over tensor-parallel ranks
    max_model_len: int
    vocab_size: int
    decode_exponent: float = 1.0
    # Seconds per token squared of attention over the context during prefill.
    prefill_quadratic_s: float = 0.0
    # vLLM's token budget per step (--max-num-batched-tokens): a prefill beside running
    # decodes computes at most this many uncached tokens a step (chunked prefill), and waiting
    # prompts whose uncached tokens fit in it together share one batch. 0: no chunking.
    batch_tokens: int = 0
    # Extra prefill work of each prompt that joins another's prefill batch.
    batched_prefill_s: float = 0.0
    # How far the speeds of streams sharing a decode batch spread around its rate (see the
    # module's docstring); 0: every stream decodes alike.
    decode_spread: float = 0.0


def falloff_for(single_tok_s: float, loaded_tok_s: float, running: int) -> float:
    """The falloff that makes `running` streams each get `loaded_tok_s` (exponent 1)."""
    return (single_tok_s / loaded_tok_s - 1.0) / (running - 1)


# Seed 000: 68 tok/s for one user, 45 tok/s each at 10 users (TP=2 over two Sparks, the
# seed's only concurrency figure). Cold prefill and cache hits as the TP=4 profile below: seed
# 003 measured them and seed 000 gives no method. Seed 004: "about 156 GB of weights" (GB, not
# GiB); healthy ~244 s after serve (scaled down to a few seconds by default, see startup_s).
# KV: 11 GiB held 1,146,448 tokens (~104K tokens/GiB).
DEEPSEEK = TimingProfile(
    name="deepseek",
    prefill_tok_s=2719.0,
    cached_prefill_tok_s=424_000.0,
    base_ttft_s=0.25,
    decode_tok_s=68.0,
    decode_falloff=falloff_for(68.0, 45.0, 10),
    startup_s=5.0,
    kv_tokens_per_gib=1_146_448 / 11,
    weights_gib=156 * GB / GIB,
    max_model_len=1_048_576,
    vocab_size=129_280,
    prefill_quadratic_s=4.0e-10,
    batch_tokens=8192,
)

# Seed 003: DeepSeek V4 Flash on four Sparks (TP=4, DSpark k=3, nvfp4 KV). Fitted by
# perf/sparksim_fit.py to every C=1 row (cold and cache hit, 50K-150K) and the 150K
# concurrency waves (C=1..12, cold and cache hit).
DEEPSEEK_TP4 = replace(
    DEEPSEEK,
    name="deepseek-tp4",
    decode_tok_s=89.0,
    decode_falloff=0.385,
    decode_exponent=0.82,
    decode_spread=0.35,
    # Between C=4's need (>= 0.023 s: its TTFT within 10%) and C=12's wave 2 (<= 0.038 s).
    batched_prefill_s=0.03,
)

# Seed 004: DeepSeek V4 Flash on two Sparks as that poster runs it (Ray, a community image
# with a vLLM development build, the full 1M context, a fixed 11 GiB KV cache): a deployment
# of its own, slower than seed 000's TP=2 figures. Fitted by perf/sparksim_fit.py: a single
# request 41-52 tok/s and 42 tok/s after a 904,911-token prompt (decode 45); eight concurrent
# 88 tok/s in total (the falloff, set from it); a 129K prompt's TTFT ~63 s, four at once the
# slowest 228 s, the 904,911-token prompt's 12.2 min (prefill 2,460 tok/s and the attention
# term, least worst over the three: within 5.4%).
DEEPSEEK_TP2_1M = replace(
    DEEPSEEK,
    name="deepseek-tp2-1m",
    prefill_tok_s=2460.0,
    prefill_quadratic_s=4.2e-10,
    decode_tok_s=45.0,
    decode_falloff=falloff_for(45.0, 88.0 / 8, 8),
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
    batch_tokens=8192,
)

# Seed 002: Qwen3.8-Flash-Next FP8 (125B MoE) on two Sparks, production averages: TPOT p50
# 75 ms; 46,296-token prompts at a 90.1% prefix-cache hit rate prefill in 4.91 s; a 173 GB
# checkpoint (GB, not GiB).
QWEN_NEXT = replace(
    QWEN,
    name="qwen-next",
    prefill_tok_s=1005.0,
    cached_prefill_tok_s=424_000.0,
    base_ttft_s=0.25,
    decode_tok_s=1000.0 / 75.0,
    weights_gib=173 * GB / GIB,
    max_model_len=131_072,
)

PROFILES = {"deepseek": DEEPSEEK, "deepseek-tp4": DEEPSEEK_TP4, "deepseek-tp2-1m": DEEPSEEK_TP2_1M,
            "qwen": QWEN, "qwen-next": QWEN_NEXT}


def profile_for_model(model: str, tensor_parallel_size: int = 1) -> TimingProfile:
    """DeepSeek-like for DeepSeek models (seed 003's figures on four Sparks), Qwen-like for
    everything else."""
    if "deepseek" in model.lower():
        return DEEPSEEK_TP4 if tensor_parallel_size >= 4 else DEEPSEEK
    if "next" in model.lower():
        return QWEN_NEXT
    return QWEN


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
    others = max(running, 1) - 1
    rate = profile.decode_tok_s / (1.0 + profile.decode_falloff * others ** profile.decode_exponent)
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
    """Prefill work of one prompt, without the fixed cost: the GPU's time on it alone."""
    total = uncached_tokens + cached_tokens
    attention = profile.prefill_quadratic_s * (total * total - cached_tokens * cached_tokens)
    return (uncached_tokens / profile.prefill_tok_s + attention
            + cached_tokens / profile.cached_prefill_tok_s)


def prefill_seconds(profile: TimingProfile, uncached_tokens: int, cached_tokens: int) -> float:
    """TTFT of a request alone on an idle engine."""
    return profile.base_ttft_s + prefill_compute_seconds(profile, uncached_tokens, cached_tokens)


# --- the step machine --------------------------------------------------------------------


@dataclass(eq=False)
class PrefillBatch:
    keys: list[Hashable]
    work_s: float
    tokens: int  # uncached prompt tokens of the batch
    done_s: float = 0.0

    def chunk_seconds(self, budget: int) -> float:
        """The work of one step's chunk: `budget` uncached tokens' share of the batch's work
        (the whole batch when it fits, or when there is no budget)."""
        if budget <= 0 or self.tokens <= budget:
            return self.work_s
        return self.work_s * budget / self.tokens


def stream_speeds(spread: float, running: int) -> list[float]:
    """Each stream's share of the batch's decode rate, in the order the streams joined: spread
    evenly over 1 -/+ spread * (running - 1) / running, the median at 1."""
    if running <= 1 or spread <= 0:
        return [1.0] * running
    width = spread * (running - 1) / running
    return [1.0 + width * (2.0 * rank / (running - 1) - 1.0) for rank in range(running)]


@dataclass(frozen=True)
class Step:
    seconds: float
    decoding: tuple[Hashable, ...]  # each emits one token at the step's end (a key twice: two)
    prefill: PrefillBatch | None
    prefill_s: float  # prefill work this step does


class Stepper:
    """vLLM's scheduler loop reduced to its timing: the engine asks for a step, waits its
    length, then applies it. Keys are the caller's (requests for prefill, sequences for
    decode)."""

    def __init__(self, profile: TimingProfile, graph_seqs: int | None = None) -> None:
        self.profile = profile
        self.graph_seqs = graph_seqs
        self.waiting: deque[tuple[Hashable, int, float]] = deque()  # key, uncached, work
        self.current: PrefillBatch | None = None
        # Each decoding key's fraction of a token carried to the next step (decode_spread).
        self.decoding: dict[Hashable, float] = {}

    @property
    def busy(self) -> bool:
        return bool(self.current or self.decoding)

    def add_prefill(self, key: Hashable, uncached_tokens: int, cached_tokens: int, slowdown: float = 1.0) -> None:
        """Queues a prompt. On an engine with no prefill under way it starts at once, alone,
        so the next arrivals form the following batch. `slowdown` (≥ 1) stretches its prefill:
        the fault switch for a struggling lane."""
        work = prefill_seconds(self.profile, uncached_tokens, cached_tokens) * max(1.0, slowdown)
        self.waiting.append((key, uncached_tokens, work))
        if self.current is None:
            self._next_batch()

    def add_decoding(self, key: Hashable) -> None:
        self.decoding[key] = 0.0

    def remove(self, key: Hashable) -> None:
        self.decoding.pop(key, None)
        self.waiting = deque(item for item in self.waiting if item[0] != key)
        if self.current is not None and key in self.current.keys:
            self.current.keys.remove(key)
            if not self.current.keys:
                self.current = None
                self._next_batch()

    def _next_batch(self) -> None:
        if not self.waiting:
            self.current = None
            return
        key, uncached, work = self.waiting.popleft()
        batch = PrefillBatch([key], work, uncached)
        budget = self.profile.batch_tokens - uncached
        if uncached <= self.profile.batch_tokens:
            while self.waiting and self.waiting[0][1] <= budget:
                key, uncached, work = self.waiting.popleft()
                batch.keys.append(key)
                batch.work_s += work + self.profile.batched_prefill_s
                batch.tokens += uncached
                budget -= uncached
        self.current = batch

    def _emitting(self) -> tuple[Hashable, ...]:
        """The tokens of the next step's decode: each key once, or per decode_spread, once its
        carried fraction reaches a token (a fast stream twice now and then, a slow one skips)."""
        if self.profile.decode_spread <= 0:
            return tuple(self.decoding)
        emitting: list[Hashable] = []
        for key, speed in zip(list(self.decoding), stream_speeds(self.profile.decode_spread, len(self.decoding)), strict=True):
            credit = self.decoding[key] + speed
            tokens = int(credit + 1e-9)
            self.decoding[key] = credit - tokens
            emitting.extend([key] * tokens)
        return tuple(emitting)

    def plan(self) -> Step:
        """The next step (the engine always applies the step it planned: a spread stream's
        carried fraction moves here)."""
        running = len(self.decoding)
        decoding = self._emitting()
        decode_s = decode_step_seconds(self.profile, running, self.graph_seqs) if running else 0.0
        prefill_s = 0.0
        if self.current is not None:
            remaining = self.current.work_s - self.current.done_s
            # One chunk a step (beside decodes, the decodes' tokens come out of the budget
            # first, as in vLLM).
            budget = self.profile.batch_tokens
            # Alone, chunks still run one a step (back to back: the same total), so the
            # engine's per-step counters move through a long prefill as vLLM's do.
            chunk = self.current.chunk_seconds(max(1, budget - running) if budget else 0)
            prefill_s = min(chunk, remaining)
        return Step(decode_s + prefill_s, decoding, self.current, prefill_s)

    def apply(self, step: Step) -> list[Hashable]:
        """Ends a step; returns the prefilled keys, whose first token is this step's end.
        They decode from the next step on (the caller adds those with tokens to go)."""
        batch = step.prefill
        if batch is None or batch is not self.current:
            return []
        batch.done_s += step.prefill_s
        if batch.done_s < batch.work_s - 1e-12:
            return []
        self._next_batch()
        return list(batch.keys)


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


@dataclass
class _Replay:
    first: dict[int, float] = field(default_factory=dict)
    finish: dict[int, float] = field(default_factory=dict)
    left: dict[int, int] = field(default_factory=dict)


def simulate(
    profile: TimingProfile,
    requests: Sequence[PlannedRequest],
    graph_seqs: int | None = None,
) -> list[RequestTimeline]:
    """Replays the engine's step loop exactly (unlimited KV and max_num_seqs)."""
    order = sorted(range(len(requests)), key=lambda index: requests[index].arrival_s)
    stepper = Stepper(profile, graph_seqs)
    replay = _Replay()
    clock = 0.0
    next_arrival = 0

    def arrive(until: float) -> None:
        nonlocal next_arrival
        while next_arrival < len(order) and requests[order[next_arrival]].arrival_s <= until:
            index = order[next_arrival]
            request = requests[index]
            stepper.add_prefill(index, request.prompt_tokens - request.cached_tokens,
                                request.cached_tokens)
            next_arrival += 1

    while next_arrival < len(order) or stepper.busy:
        if not stepper.busy:
            clock = max(clock, requests[order[next_arrival]].arrival_s)
            arrive(clock)
        step = stepper.plan()
        end = clock + step.seconds
        arrive(end - 1e-12)
        for index in step.decoding:
            key = int(index)  # type: ignore[call-overload]  # simulate's keys are indices
            if key not in stepper.decoding:
                continue  # a second token of a stream that just ended
            replay.left[key] -= 1
            if replay.left[key] == 0:
                replay.finish[key] = end
                stepper.decoding.pop(key)
        for index in stepper.apply(step):
            key = int(index)  # type: ignore[call-overload]
            replay.first[key] = replay.finish[key] = end
            replay.left[key] = requests[key].output_tokens - 1
            if replay.left[key] > 0:
                stepper.add_decoding(key)
        clock = end
    return [
        RequestTimeline(replay.first[index], replay.finish[index], requests[index].output_tokens)
        for index in range(len(requests))
    ]
