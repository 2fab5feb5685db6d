"""The load generator: async streaming chat requests at a fixed concurrency or at Poisson
arrivals, or a wave of streams sent at once, each recorded chunk by chunk (benchmarks.stats
turns the records into figures), and the client measured too, so a saturated client is
reported instead of showing up as a slow lane.

It reads time only through its event loop (loop.time()), so on sparksim's simulated clock a
sweep runs in moments and its figures are exact. No Django here: perf/ scripts use it too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
from httpx_aiohttp import AiohttpTransport

from benchmarks.stats import RequestRecord, level_stats
from core.http import async_http_client
from core.stats import percentile_linear

# The client is saturated when its process keeps one core this busy, or when its event loop
# wakes this late: either way the figures measure the client, not the lane.
SATURATED_CPU_SHARE = 0.9
SATURATED_LAG_S = 0.05
LAG_TICK_S = 0.02
CHARS_PER_TOKEN_GUESS = 4.0
WORDS = ("spark", "lane", "fabric", "token", "prefill", "decode", "cache", "tensor", "node",
         "stream", "batch", "kernel", "graph", "router", "metric", "gateway")


@dataclass(frozen=True)
class Target:
    name: str  # "direct" or "gateway"
    base_url: str  # up to and without /v1
    model: str
    headers: dict[str, str] = field(default_factory=dict)

    def __repr__(self) -> str:  # never the headers: they may carry the API key
        return f"Target({self.name!r}, {self.base_url!r}, {self.model!r})"


@dataclass(frozen=True)
class LevelPlan:
    concurrency: int | None  # fixed concurrency (a semaphore, like --max-concurrency) ...
    request_rate: float | None  # ... or Poisson arrivals at this many requests per second
    requests: int | None  # requests in the level, or
    duration_s: float | None  # keep sending for this long
    output_tokens: int
    timeout_s: float  # a whole request
    idle_timeout_s: float | None = None  # no chunk for this long (the first one included)
    warmup: int = 0
    seed: int = 0


@dataclass
class ClientLoad:
    cpu_s: float = 0.0
    wall_s: float = 0.0
    parse_s: float = 0.0
    chunks: int = 0
    lag_p99_s: float = 0.0
    lag_max_s: float = 0.0

    @property
    def cpu_share(self) -> float:
        return self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def saturated_because(self) -> str:
        if self.cpu_share >= SATURATED_CPU_SHARE:
            return f"the client used {self.cpu_share:.0%} of a core"
        if self.lag_p99_s >= SATURATED_LAG_S:
            return f"the client's event loop woke {self.lag_p99_s * 1000:.0f} ms late (p99)"
        return ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "cpu_s": self.cpu_s, "wall_s": self.wall_s, "cpu_share": self.cpu_share,
            "parse_us_per_chunk": self.parse_s / self.chunks * 1e6 if self.chunks else 0.0,
            "loop_lag_p99_ms": self.lag_p99_s * 1000, "loop_lag_max_ms": self.lag_max_s * 1000,
            "saturated": bool(self.saturated_because), "saturated_because": self.saturated_because,
        }


@dataclass
class LevelResult:
    records: list[RequestRecord]
    started_at: float
    ended_at: float
    ends: list[float]
    client: ClientLoad

    def stats(self) -> dict[str, Any]:
        stats = level_stats(self.records, started_at=self.started_at, ended_at=self.ended_at, ends=self.ends)
        stats["client"] = self.client.as_dict()
        return stats


ChunkHook = Callable[[], None]


def filler_text(tokens: int, tag: str, chars_per_token: float = CHARS_PER_TOKEN_GUESS) -> str:
    """About `tokens` tokens of words, starting with `tag` so different tags never share a
    cached prefix."""
    rng = random.Random(tag)
    target = int(tokens * chars_per_token)
    parts = [f"[{tag}]"]
    size = len(parts[0])
    while size < target:
        word = rng.choice(WORDS)
        parts.append(word)
        size += len(word) + 1
    return " ".join(parts)[:target]


async def count_prompt_tokens(client: httpx.AsyncClient, target: Target, text: str) -> int | None:
    """The lane's own count (vLLM's /tokenize) for a chat message; None if it has none."""
    body = {"model": target.model, "messages": [{"role": "user", "content": text}]}
    try:
        response = await client.post(f"{target.base_url}/tokenize", json=body, headers=target.headers)
        if response.status_code != 200:
            return None
        count = response.json().get("count")
        return int(count) if isinstance(count, int) else None
    except (httpx.HTTPError, ValueError):
        return None


async def sized_prompt(client: httpx.AsyncClient, counter: Target, tokens: int, tag: str) -> str:
    """A chat prompt of `tokens` prompt tokens as the lane counts them (template included),
    calibrated with /tokenize when the lane answers it: first the characters per token, then
    a trim or a few more words until the count is right (a cache hit's uncached tail, and so
    its TTFT, depends on the exact length)."""
    ratio = CHARS_PER_TOKEN_GUESS
    text = filler_text(tokens, tag, ratio)
    for _ in range(12):
        counted = await count_prompt_tokens(client, counter, text)
        if counted is None or counted == tokens:
            return text
        if abs(counted - tokens) > tokens // 100:
            ratio = ratio * tokens / max(counted, 1)
            text = filler_text(tokens, tag, ratio)
        elif counted > tokens:
            text = text[: len(text) - max(1, int((counted - tokens) * ratio * 0.8))]
        else:
            text = text + " " + filler_text(tokens - counted, tag + "+", ratio)
    return text


def request_body(target: Target, prompt: str, output_tokens: int) -> dict[str, Any]:
    # max_tokens with ignore_eos and min_tokens: every request produces exactly output_tokens.
    return {
        "model": target.model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": output_tokens,
        "min_tokens": output_tokens,
        "ignore_eos": True,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


async def stream_one(client: httpx.AsyncClient, target: Target, prompt: str, output_tokens: int,
                     timeout_s: float, load: ClientLoad, hook: ChunkHook | None = None,
                     idle_timeout_s: float | None = None) -> tuple[RequestRecord, float]:
    loop = asyncio.get_running_loop()
    record = RequestRecord(sent_at=loop.time())
    usage_tokens: int | None = None
    done = False
    try:
        async with asyncio.timeout(timeout_s):
            async with client.stream("POST", f"{target.base_url}/v1/chat/completions",
                                     json=request_body(target, prompt, output_tokens),
                                     headers=target.headers,
                                     timeout=httpx.Timeout(timeout_s, connect=10.0, read=idle_timeout_s or timeout_s),
                                     ) as response:
                if response.status_code != 200:
                    text = (await response.aread()).decode(errors="replace")
                    record.error = f"HTTP {response.status_code}: {text[:200]}"
                else:
                    async for line in response.aiter_lines():
                        now = loop.time()
                        began = time.perf_counter()
                        if not line.startswith("data: "):
                            continue
                        if line == "data: [DONE]":
                            done = True
                            break
                        payload = json.loads(line[6:])
                        usage = payload.get("usage")
                        if usage:
                            usage_tokens = int(usage.get("completion_tokens") or 0)
                            record.prompt_tokens = int(usage.get("prompt_tokens") or 0)
                        pieces = sum(1 for choice in payload.get("choices") or []
                                     if (choice.get("delta") or {}).get("content")
                                     or (choice.get("delta") or {}).get("reasoning_content"))
                        if pieces:
                            record.chunk_times.append(now)
                            record.chunk_tokens.append(pieces)
                        if hook is not None:
                            hook()
                        load.parse_s += time.perf_counter() - began
                        load.chunks += 1
                    if not done and not record.error:
                        record.error = "the stream ended without [DONE]"
    except TimeoutError:
        record.error = f"timed out after {timeout_s:g} s"
    except httpx.ReadTimeout:
        record.error = f"no chunk for {idle_timeout_s or timeout_s:g} s"
    except httpx.HTTPError as exc:
        record.error = f"{type(exc).__name__}: {exc}"[:200] or type(exc).__name__
    except ValueError as exc:
        record.error = f"bad chunk: {exc}"[:200]
    if not record.chunk_times and not record.error:
        record.error = "no content streamed"
    record.output_tokens = usage_tokens if usage_tokens else sum(record.chunk_tokens)
    return record, loop.time()


async def _watch_lag(lags: list[float]) -> None:
    loop = asyncio.get_running_loop()
    while True:
        before = loop.time()
        await asyncio.sleep(LAG_TICK_S)
        lags.append(max(0.0, loop.time() - before - LAG_TICK_S))


@contextlib.asynccontextmanager
async def _measuring(load: ClientLoad) -> AsyncIterator[None]:
    """The client's CPU, wall time and event-loop lag over the block, into `load`."""
    lags: list[float] = []
    watcher = asyncio.get_running_loop().create_task(_watch_lag(lags))
    cpu_before, wall_before = time.process_time(), time.perf_counter()
    try:
        yield
    finally:
        watcher.cancel()
    load.cpu_s = time.process_time() - cpu_before
    load.wall_s = time.perf_counter() - wall_before
    load.lag_p99_s = percentile_linear(lags, 0.99) or 0.0
    load.lag_max_s = max(lags, default=0.0)


async def run_level(client: httpx.AsyncClient, target: Target, plan: LevelPlan,
                    prompt_for: Callable[[int], Awaitable[str]],
                    hook: ChunkHook | None = None,
                    on_request: Callable[[int], None] | None = None) -> LevelResult:
    """One level: warm-up requests (discarded), then the measured ones. prompt_for(i) gives
    request i's prompt (i < 0 for warm-up)."""
    loop = asyncio.get_running_loop()
    scratch = ClientLoad()
    for index in range(plan.warmup):
        await stream_one(client, target, await prompt_for(-1 - index), plan.output_tokens, plan.timeout_s, scratch)
    load = ClientLoad()
    records: list[RequestRecord] = []
    ends: list[float] = []
    started = loop.time()
    rng = random.Random(plan.seed)
    limit = asyncio.Semaphore(plan.concurrency or 1_000_000)

    async def one(index: int) -> None:
        async with limit:
            prompt = await prompt_for(index)
            record, ended = await stream_one(client, target, prompt, plan.output_tokens, plan.timeout_s, load, hook,
                                             plan.idle_timeout_s)
        records.append(record)
        ends.append(ended)
        if on_request is not None:
            on_request(len(records))

    async with _measuring(load), asyncio.TaskGroup() as group:
        index = 0
        while True:
            if plan.requests is not None and index >= plan.requests:
                break
            if plan.duration_s is not None and loop.time() - started >= plan.duration_s:
                break
            if plan.concurrency is not None and plan.request_rate is None:
                await limit.acquire()  # the next request starts when a slot frees
                limit.release()
            group.create_task(one(index))
            index += 1
            if plan.request_rate:
                await asyncio.sleep(rng.expovariate(plan.request_rate))
            else:
                await asyncio.sleep(0)
    ended_at = max(ends) if ends else loop.time()
    return LevelResult(records, started, ended_at, ends, load)


def wave_client(streams: int, timeout_s: float) -> httpx.AsyncClient:
    """A client that holds `streams` connections open at once and keeps them between
    requests (httpx's own pool stops at 100 and keeps 20 idle by default), on aiohttp's
    transport: httpx's own pool spends milliseconds of CPU on each request, so a wave's
    requests would leave over a large part of a second, not at once."""
    limits = httpx.Limits(max_connections=streams, max_keepalive_connections=streams)
    return async_http_client(timeout=httpx.Timeout(timeout_s, connect=10.0),
                             transport=AiohttpTransport(limits=limits, trust_env=False))


async def warm_connections(client: httpx.AsyncClient, target: Target, count: int) -> None:
    """Opens `count` connections first (as many GET /health at once), so a wave's TTFT
    measures the engine, not TCP set-up. What they answer does not matter."""

    async def probe() -> None:
        # A connection that fails now is set up again by its stream, and timed there.
        with contextlib.suppress(httpx.HTTPError):
            await client.get(f"{target.base_url}/health", headers=target.headers)

    await asyncio.gather(*(probe() for _ in range(count)))


async def run_wave(client: httpx.AsyncClient, target: Target, prompts: Sequence[str], output_tokens: int,
                   *, timeout_s: float = 600.0, idle_timeout_s: float | None = None) -> LevelResult:
    """A wave: one stream per prompt, all sent at once on connections opened beforehand;
    the records in the prompts' order. Each keeps the stream's send time, TTFT, decode speed
    and the server's token counts, for comparing stream by stream with what a timing model
    expects (perf/sparksim_load.py, perf/sparksim_timing.py, perf/sparksim_fit.py). Not a
    level of that concurrency: a level starts its requests one loop turn apart, which
    spreads a wave of hundreds over a large part of a second, across the engine's batches."""
    await warm_connections(client, target, len(prompts))
    loop = asyncio.get_running_loop()
    load = ClientLoad()
    async with _measuring(load):
        started = loop.time()
        results = await asyncio.gather(*(stream_one(client, target, prompt, output_tokens, timeout_s, load,
                                                    idle_timeout_s=idle_timeout_s) for prompt in prompts))
    ends = [ended for _, ended in results]
    return LevelResult([record for record, _ in results], started, max(ends, default=started), ends, load)
