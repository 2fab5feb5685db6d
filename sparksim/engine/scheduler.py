"""The engine core: admission (max_num_seqs, KV pool), preemption and the step loop.

KV as vLLM's v1 scheduler holds it: a request takes the blocks of its prompt when it is
admitted (full prompt blocks shared with another running request are held once, as vLLM's
prefix-cached blocks are) and one more token of KV per token it generates; nothing is
reserved for the output. When generation outgrows the pool, the newest running request is
preempted (vLLM's default, recompute; the priority policy: sparksim.engine.priority): its
KV is freed, it goes back to the front of the waiting queue (vllm:num_preemptions counts it), and when it is admitted again it recomputes
its prompt and the tokens it had generated, from the prefix cache where the blocks survived,
then resumes its stream where it stopped.

Timing comes from sparksim.timing's Stepper; this module only turns its steps into real
time. Every deadline is absolute (previous step end + step length), so event-loop lag never
accumulates into the observed rates.
"""

import asyncio
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from sparksim.engine.config import EngineConfig
from sparksim.engine.metrics import EngineMetrics
from sparksim.engine.prefix_cache import PrefixCache
from sparksim.engine.priority import enqueue, victim
from sparksim.timing import Step, Stepper, prefill_seconds

ENGINE_DIED = -1  # event position telling a handler the engine died under it


@dataclass(eq=False)
class Sequence:
    request: "ScheduledRequest"
    index: int
    target: int  # output tokens this choice will produce
    emitted: int = 0


@dataclass(eq=False)
class ScheduledRequest:
    prompt_ids: list[int]
    targets: list[int]
    arrived_at: float
    events: asyncio.Queue[tuple[int, int]] = field(default_factory=asyncio.Queue)
    sequences: list[Sequence] = field(default_factory=list)
    cached_tokens: int = 0
    admitted_at: float | None = None
    first_token_at: float | None = None
    finished_at: float | None = None
    finished_sequences: int = 0
    aborted: bool = False
    hashes: list[int] = field(default_factory=list)
    admission: int = 0  # admission order: the newest running request is preempted first (fcfs)
    preemptions: int = 0
    priority: int = 0  # the request's `priority` (the priority policy: lower first)

    @property
    def generated_in_kv(self) -> int:
        return sum(sequence.emitted for sequence in self.sequences)

    @property
    def recompute_tokens(self) -> int:
        """What a preempted request recomputes: its prompt and what it had generated."""
        return len(self.prompt_ids) + max((sequence.emitted for sequence in self.sequences), default=0)

    @property
    def done(self) -> bool:
        return self.aborted or self.finished_sequences == len(self.sequences)


class EngineCore:
    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.metrics = EngineMetrics(config.served_model_names[0], config.spec_tokens)
        self.metrics.cache_info = (
            ("block_size", str(config.block_size)),
            ("cache_dtype", config.kv_cache_dtype),
            ("enable_prefix_caching", str(config.enable_prefix_caching)),
            ("gpu_memory_utilization", str(config.gpu_memory_utilization)),
            ("num_gpu_blocks", str(config.kv_pool_tokens // config.block_size)),
        )
        self.prefix_cache = PrefixCache(
            config.block_size,
            config.kv_pool_tokens // config.block_size,
            config.enable_prefix_caching,
        )
        self.waiting: deque[ScheduledRequest] = deque()
        self.active: set[ScheduledRequest] = set()
        self.active_sequences = 0
        self.block_refs: Counter[int] = Counter()  # full prompt blocks held by running requests
        self.kv_private = 0  # tokens held outside shared blocks: prompt tails and generated tokens
        self._admissions = 0
        self.stepper = Stepper(config.profile, config.graph_seqs)
        self.wake = asyncio.Event()
        self.step_task: asyncio.Task[None] | None = None
        self.dead = False
        self.hang_countdown: int | None = config.faults.hang_after_tokens
        self.generated_tokens = 0  # read by the fabric traffic accounting
        self._accept_credit = [0.0] * config.spec_tokens
        self._undrafted_tokens = 0  # decode tokens not yet accounted to a draft
        self._next_draft_accepts: int | None = None
        # Called (synchronously) when a request leaves the engine, before its client sees
        # the end of the answer: the fabric accounting brings the RoCE counters up to date.
        self.on_release: list[Callable[[], None]] = []

    def start(self) -> None:
        self.step_task = asyncio.get_running_loop().create_task(self._step_loop())

    async def stop(self) -> None:
        if self.step_task is not None:
            self.step_task.cancel()
            await asyncio.gather(self.step_task, return_exceptions=True)

    # --- requests -------------------------------------------------------------------------

    def submit(self, prompt_ids: list[int], targets: list[int], priority: int = 0) -> ScheduledRequest:
        loop = asyncio.get_running_loop()
        request = ScheduledRequest(prompt_ids=prompt_ids, targets=targets, arrived_at=loop.time(),
                                   priority=priority)
        request.sequences = [Sequence(request, index, target) for index, target in
                             enumerate(targets)]
        enqueue(self.waiting, request, self.config.scheduling_policy)
        self._admit()
        self._update_gauges()
        return request

    def abort(self, request: ScheduledRequest) -> None:
        if request.done:
            return
        request.aborted = True
        if request in self.active:
            self._release(request, "abort")
        else:
            self.waiting.remove(request)
            self.metrics.finished["abort"] += 1
        self._admit()
        self._update_gauges()

    def kill(self) -> None:
        """The engine died: every request in flight ends now."""
        self.dead = True
        for request in [*self.waiting, *self.active]:
            request.aborted = True
            request.events.put_nowait((0, ENGINE_DIED))
        self.waiting.clear()
        self.active.clear()
        self.block_refs.clear()
        self.kv_private = 0
        self.active_sequences = 0  # a revived engine (clear) reports no phantom running requests
        self.stepper = Stepper(self.config.profile, self.config.graph_seqs)
        self._update_gauges()

    # --- admission and prefill ------------------------------------------------------------

    def _admit(self) -> None:
        config = self.config
        loop = asyncio.get_running_loop()
        while self.waiting:
            request = self.waiting[0]
            width = len(request.sequences)
            if not request.hashes:
                request.hashes = self.prefix_cache.block_hashes(request.prompt_ids)
            fits_seqs = self.active_sequences + width <= config.max_num_seqs
            fits_kv = self.kv_used + self._kv_needed(request) <= config.kv_pool_tokens
            if self.active and not (fits_seqs and fits_kv):
                return
            self.waiting.popleft()
            now = loop.time()
            resumed = request.preemptions > 0
            request.admitted_at = now
            self._admissions += 1
            request.admission = self._admissions
            self.active.add(request)
            self.active_sequences += width
            self._hold(request)
            request.cached_tokens = self.prefix_cache.cached_tokens(request.prompt_ids,
                                                                    request.hashes)
            self.metrics.count("prefix_cache_queries", len(request.prompt_ids))
            self.metrics.count("prefix_cache_hits", request.cached_tokens)
            if resumed:
                # Recompute: the prompt (cached blocks that survived are hits) and every token
                # generated before the preemption.
                uncached = request.recompute_tokens - request.cached_tokens
            else:
                uncached = len(request.prompt_ids) - request.cached_tokens
                queued = self._simulated(now - request.arrived_at)
                self.metrics.observe("request_queue_time_seconds", queued)
            self.stepper.add_prefill(request, uncached, request.cached_tokens,
                                     slowdown=float(config.faults.slow_prefill_factor))
            self.wake.set()

    def _prefill_done(self, request: ScheduledRequest) -> None:
        now = asyncio.get_running_loop().time()
        if request.first_token_at is not None:  # a preempted request recomputed: resume
            self.prefix_cache.insert(request.hashes)
            for sequence in request.sequences:
                if sequence.emitted < sequence.target:
                    self.stepper.add_decoding(sequence)
            return
        request.first_token_at = now
        self.prefix_cache.insert(request.hashes)
        self.metrics.count("prompt_tokens", len(request.prompt_ids))
        self.metrics.observe("request_prompt_tokens", len(request.prompt_ids))
        ttft = self._simulated(now - request.arrived_at)
        self.metrics.observe("time_to_first_token_seconds", ttft)
        uncached = len(request.prompt_ids) - request.cached_tokens
        self.metrics.observe("request_prefill_time_seconds",
                             prefill_seconds(self.config.profile, uncached, request.cached_tokens))
        for sequence in request.sequences:
            self._emit(sequence)
            if sequence.emitted < sequence.target:
                self.stepper.add_decoding(sequence)
        if request.done:
            self._release(request, "length")

    # --- the step loop --------------------------------------------------------------------

    async def _step_loop(self) -> None:
        loop = asyncio.get_running_loop()
        step_end: float | None = None
        while True:
            if not self.stepper.busy or self.config.faults.hang:
                # Idle, or hung (the hang fault): nothing steps until woken (a request, or
                # the fault lifted).
                step_end = None
                self.wake.clear()
                await self.wake.wait()
                continue
            step = self.stepper.plan()
            step_start = loop.time() if step_end is None else step_end
            step_end = step_start + self.config.scaled(step.seconds)
            delay = step_end - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            self._finish_step(step)

    def _finish_step(self, step: Step) -> None:
        # vLLM's iteration_tokens_total: the tokens of each engine step, prefill chunks
        # included, so a long cold prefill advances it long before its first token.
        prefill_tokens = 0
        if step.prefill is not None and step.prefill.work_s > 0 and step.prefill_s > 0:
            prefill_tokens = round(step.prefill.tokens * step.prefill_s / step.prefill.work_s)
        emitted = 0
        for key in step.decoding:
            sequence = key
            assert isinstance(sequence, Sequence)
            if sequence.request.aborted or sequence not in self.stepper.decoding:
                continue
            self._emit(sequence)
            emitted += 1
            if sequence.emitted >= sequence.target:
                self.stepper.remove(sequence)
                if sequence.request.done:
                    self._release(sequence.request, "length")
        for key in self.stepper.apply(step):
            assert isinstance(key, ScheduledRequest)
            if not key.aborted and not self.dead:
                self._prefill_done(key)
        if emitted or prefill_tokens:
            self.metrics.observe("iteration_tokens_total", emitted + prefill_tokens)
        if emitted:
            decode_s = step.seconds - step.prefill_s
            self.metrics.observe("inter_token_latency_seconds", step.seconds, emitted)
            self.metrics.observe("time_per_output_token_seconds", decode_s, emitted)
            self._count_speculation(emitted)
            if self._preempt_while_full():
                self._update_gauges()
                return
        # vLLM's next schedule(): a step that preempted admits nothing; any other admits what
        # waits (max_num_seqs and the KV pool allowing), e.g. a request of better priority
        # into the blocks a preemption freed — not only when a request ends or arrives.
        self._admit()
        self._update_gauges()

    def _emit(self, sequence: Sequence) -> None:
        if self.hang_countdown is not None:  # stuck mid-stream after that many tokens
            self.hang_countdown -= 1
            if self.hang_countdown <= 0:
                self.hang_countdown = None
                self.config.faults.hang = True
        sequence.emitted += 1
        self.kv_private += 1  # the token's KV
        self.generated_tokens += 1
        self.metrics.count("generation_tokens")
        sequence.request.events.put_nowait((sequence.index, sequence.emitted))
        if sequence.emitted == sequence.target:
            sequence.request.finished_sequences += 1

    def _acceptance_by_position(self) -> list[float]:
        """The share of drafts whose token at each position is accepted (with every earlier
        one). Later positions are accepted less often; the mean stays at the setting."""
        k = self.config.spec_tokens
        return [min(1.0, self.config.spec_acceptance * (1.2 - (0.0 if k == 1 else 0.4 * p / (k - 1))))
                for p in range(k)]

    def _count_speculation(self, tokens: int) -> None:
        """vLLM's spec-decode counters for the decode tokens of a step. As in vLLM, a draft is
        one sequence's proposal of k tokens in one step; it yields its accepted tokens plus one
        (the bonus or corrected token), so over a run drafts + accepted = decode tokens, and
        vLLM's mean acceptance length 1 + accepted/drafts is the tokens a draft yields. The
        timing model already runs at the measured (speculative) decode speed; this only counts."""
        k = self.config.spec_tokens
        if not k or not tokens:
            return
        self._undrafted_tokens += tokens
        while True:
            if self._next_draft_accepts is None:
                accepted = 0
                for position, rate in enumerate(self._acceptance_by_position()):
                    self._accept_credit[position] += rate
                    if self._accept_credit[position] >= 1.0 and accepted == position:
                        self._accept_credit[position] -= 1.0
                        accepted += 1
                self._next_draft_accepts = accepted
            if self._undrafted_tokens < self._next_draft_accepts + 1:
                return  # the draft's tokens come out over the next steps
            accepted, self._next_draft_accepts = self._next_draft_accepts, None
            self._undrafted_tokens -= accepted + 1
            self.metrics.count("spec_decode_num_drafts")
            self.metrics.count("spec_decode_num_draft_tokens", k)
            self.metrics.count("spec_decode_num_accepted_tokens", accepted)
            for position in range(accepted):
                self.metrics.accepted_per_position[position] += 1

    # --- bookkeeping ----------------------------------------------------------------------

    def _release(self, request: ScheduledRequest, reason: str) -> None:
        if request not in self.active:
            return
        self.active.discard(request)
        self.stepper.remove(request)
        for sequence in request.sequences:
            self.stepper.remove(sequence)
        self.active_sequences -= len(request.sequences)
        self._drop(request)
        now = asyncio.get_running_loop().time()
        request.finished_at = now
        for hook in self.on_release:
            hook()
        self._admit()
        if reason == "abort":
            self.metrics.finished["abort"] += 1
            return
        generated = sum(request.targets)
        e2e = self._simulated(now - request.arrived_at)
        first = request.first_token_at or now
        decode = self._simulated(now - first)
        self.metrics.observe("e2e_request_latency_seconds", e2e)
        self.metrics.observe("request_decode_time_seconds", decode)
        self.metrics.observe("request_generation_tokens", generated)
        if generated > 1:
            self.metrics.observe("request_time_per_output_token_seconds", decode / (generated - 1))

    # --- KV blocks and preemption ---------------------------------------------------------

    @property
    def kv_used(self) -> int:
        return len(self.block_refs) * self.config.block_size + self.kv_private

    def _prompt_tail(self, request: ScheduledRequest) -> int:
        return len(request.prompt_ids) - len(request.hashes) * self.config.block_size

    def _kv_needed(self, request: ScheduledRequest) -> int:
        shared = sum(1 for block in request.hashes if block in self.block_refs)
        blocks = len(request.hashes) - shared
        return blocks * self.config.block_size + self._prompt_tail(request) + request.generated_in_kv

    def _hold(self, request: ScheduledRequest) -> None:
        self.block_refs.update(request.hashes)
        self.kv_private += self._prompt_tail(request) + request.generated_in_kv

    def _drop(self, request: ScheduledRequest) -> None:
        self.block_refs.subtract(request.hashes)
        for block in request.hashes:
            if self.block_refs[block] <= 0:
                del self.block_refs[block]
        self.kv_private -= self._prompt_tail(request) + request.generated_in_kv

    def _preempt_while_full(self) -> bool:
        """vLLM's recompute preemption: while the running requests' KV outgrows the pool, the
        newest of them (priority: the worst priority) gives its KV back and waits again.
        True when one was."""
        policy = self.config.scheduling_policy
        preempted_any = False
        while self.kv_used > self.config.kv_pool_tokens and len(self.active) > 1:
            preempted = victim(self.active, policy)
            self.active.discard(preempted)
            self.stepper.remove(preempted)
            for sequence in preempted.sequences:
                self.stepper.remove(sequence)
            self.active_sequences -= len(preempted.sequences)
            self._drop(preempted)
            preempted.preemptions += 1
            self.metrics.count("num_preemptions")
            enqueue(self.waiting, preempted, policy, preempted=True)
            preempted_any = True
        return preempted_any

    def record_finish_reason(self, reason: str) -> None:
        """Handlers know why a choice ended (stop/length); the core only knows it ended."""
        self.metrics.finished[reason] += 1

    def _update_gauges(self) -> None:
        self.metrics.running = self.active_sequences
        self.metrics.waiting = sum(len(request.sequences) for request in self.waiting)
        self.metrics.kv_usage = min(1.0, self.kv_used / max(1, self.config.kv_pool_tokens))

    def _simulated(self, real_seconds: float) -> float:
        return real_seconds / self.config.time_scale if self.config.time_scale else real_seconds
