"""The load generator: async streaming chat requests at a fixed concurrency or at Poisson
arrivals, or a wave of streams sent at once, each recorded chunk by chunk (benchmarks.stats
turns the records into figures), and the client measured too, so a saturated client is
reported instead of showing up as a slow lane.

Open-loop levels (a request rate, or an explicit schedule such as a replay) send request i at
an absolute deadline, the level's start + tᵢ from a seeded schedule, never after a relative
sleep (those drift: each send's own cost pushes every later one); a client that falls behind
sends late, and the lateness shows as dispatch delay and in the latency from the schedule. A
level's client holds as many connections as the level can have streams (never httpx's default
100), reads every stream to its end so its connection is reused, and stamps the moment the
request headers are written, so the time spent in the client before the lane saw the request
is reported, not hidden in TTFT.

It reads time only through its event loop (loop.time()), so on sparksim's simulated clock a
sweep runs in moments and its figures are exact. No Django here: perf/ scripts use it too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
from httpx_aiohttp import AiohttpTransport

from benchmarks.client_load import ClientLoad, measuring
from benchmarks.stats import RequestRecord, Slo, level_stats
from core.http import async_http_client

# A level is flagged when its figures may not be what it says it measured: an open-loop level
# whose sends fell short of its schedule's rate by more than this share; a concurrency level
# whose requests in flight at the lane stayed under this share of the level; a level whose
# client spent more than this share of the median TTFT before writing a request (p95).
RATE_SHORTFALL_SHARE = 0.05
IN_FLIGHT_SHARE = 0.95
PRE_SEND_TTFT_SHARE = 0.05
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
    # An explicit open-loop schedule: request i at the level's start + schedule[i] seconds (a
    # replay's arrivals); otherwise request_rate draws a seeded Poisson one.
    schedule: tuple[float, ...] | None = None

    @property
    def open_loop(self) -> bool:
        return self.schedule is not None or bool(self.request_rate)


@dataclass
class LevelResult:
    records: list[RequestRecord]  # in the order the requests were planned
    started_at: float
    ended_at: float
    ends: list[float]
    client: ClientLoad
    plan: LevelPlan | None = None

    def stats(self, slo: Slo | None = None, slice_s: float | None = None) -> dict[str, Any]:
        stats = level_stats(self.records, started_at=self.started_at, ended_at=self.ended_at, ends=self.ends,
                            slo=slo, slice_s=slice_s)
        stats["client"] = self.client.as_dict()
        if self.plan is not None:
            stats["flags"] = level_flags(self.plan, stats)
            if self.plan.open_loop:
                # Each request's tᵢ and actual send, from the level's start, in the planned order.
                stats["nominal_request_rate"] = self.plan.request_rate
                stats["schedule_s"] = [round(record.scheduled_at - self.started_at, 6) for record in self.records
                                       if record.scheduled_at is not None]
                stats["sent_s"] = [round(record.sent_at - self.started_at, 6) for record in self.records]
        return stats


def level_flags(plan: LevelPlan, stats: dict[str, Any]) -> list[str]:
    """Why a level's figures may not measure what the level says, each with its figure."""
    flags: list[str] = []
    scheduled = stats.get("scheduled_request_rate") or 0.0
    achieved = stats.get("achieved_request_rate") or 0.0
    if plan.open_loop and scheduled > 0 and achieved < scheduled * (1 - RATE_SHORTFALL_SHARE):
        flags.append(f"sent {achieved:.2f} requests/s against a schedule of {scheduled:.2f} "
                     f"({1 - achieved / scheduled:.0%} short); requests left up to "
                     f"{stats['max_dispatch_delay_ms'] / 1000:.2f} s late: read the latency from the schedule")
    in_flight = stats.get("max_in_flight_at_lane")
    expected = min(plan.concurrency, stats["total"]) if plan.concurrency and not plan.open_loop else 0
    if expected and in_flight is not None and in_flight < expected * IN_FLIGHT_SHARE:
        flags.append(f"at most {in_flight} of {expected} requests were in flight at the lane "
                     f"({in_flight / expected:.0%}): the level did not reach its concurrency")
    share = stats.get("pre_send_p95_share_of_ttft") or 0.0
    if share > PRE_SEND_TTFT_SHARE:
        flags.append(f"the client took {stats['p95_pre_send_ms']:.1f} ms (p95) before writing a request, "
                     f"{share:.0%} of the median TTFT (over {PRE_SEND_TTFT_SHARE:.0%}): TTFT includes the client")
    return flags


def level_limits(concurrency: int | None) -> httpx.Limits:
    """A level's connections: as many as its concurrency (httpx's default pool of 100 would
    queue the rest inside the client, and their wait would count as TTFT), all kept between
    requests; at a request rate or a schedule, as many as the arrivals need (no cap)."""
    if concurrency is None:
        return httpx.Limits(max_connections=None, max_keepalive_connections=None)
    return httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)


def level_client(concurrency: int | None, timeout: httpx.Timeout | float) -> httpx.AsyncClient:
    """The client of one level: httpx's own transport (its trace stamps each request's
    connection and header-write moments), its pool sized by level_limits."""
    return async_http_client(timeout=timeout, limits=level_limits(concurrency))


def poisson_schedule(rate: float, seed: int, *, count: int | None = None,
                     duration_s: float | None = None) -> list[float]:
    """Send offsets from the level's start, seeded: the first at 0, then exponential gaps
    of mean 1/rate; `count` of them, or every one before `duration_s`."""
    rng = random.Random(seed)
    offsets: list[float] = []
    at = 0.0
    while (count is None or len(offsets) < count) and (duration_s is None or at < duration_s):
        offsets.append(at)
        at += rng.expovariate(rate)
    return offsets


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


def _tracer(record: RequestRecord, loop: asyncio.AbstractEventLoop) -> Callable[[str, dict[str, Any]],
                                                                               Awaitable[None]]:
    """httpcore's trace hook for one request: when a connection was in hand (pooled, or a
    connect began), how long a new connection's TCP connect took, and when the request
    headers began to be written."""

    async def trace(event: str, info: dict[str, Any]) -> None:  # noqa: ARG001 (the event name tells all)
        now = loop.time()
        if event == "connection.connect_tcp.started":
            record.connection_at = now
        elif event == "connection.connect_tcp.complete":
            record.connect_s = now - (record.connection_at or now)
        elif event.endswith(".send_request_headers.started") and record.headers_at is None:
            record.headers_at = now
            if record.connection_at is None:
                record.connection_at = now

    return trace


async def stream_one(client: httpx.AsyncClient, target: Target, prompt: str, output_tokens: int,
                     timeout_s: float, load: ClientLoad, hook: ChunkHook | None = None,
                     idle_timeout_s: float | None = None,
                     scheduled_at: float | None = None) -> tuple[RequestRecord, float]:
    """One streamed request, read to the end of its body (after `data: [DONE]` the chunked
    body still has to end, or the connection is not reused and the next request reconnects)."""
    loop = asyncio.get_running_loop()
    record = RequestRecord(sent_at=loop.time(), scheduled_at=scheduled_at)
    usage_tokens: int | None = None
    done = False
    try:
        async with asyncio.timeout(timeout_s):
            async with client.stream("POST", f"{target.base_url}/v1/chat/completions",
                                     json=request_body(target, prompt, output_tokens),
                                     headers=target.headers,
                                     timeout=httpx.Timeout(timeout_s, connect=10.0, read=idle_timeout_s or timeout_s),
                                     extensions={"trace": _tracer(record, loop)},
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
                            continue  # on to the body's end
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


async def run_level(client: httpx.AsyncClient, target: Target, plan: LevelPlan,
                    prompt_for: Callable[[int], Awaitable[str]],
                    hook: ChunkHook | None = None,
                    on_request: Callable[[int], None] | None = None,
                    output_for: Callable[[int], int] | None = None) -> LevelResult:
    """One level: warm-up requests (discarded), then the measured ones, their records in the
    order planned. prompt_for(i) gives request i's prompt (i < 0 for warm-up), output_for(i)
    its output tokens (default: the plan's). At a fixed concurrency the next request starts
    when a slot frees (closed loop); at a rate or on a schedule request i is sent at the
    level's start + tᵢ whatever the earlier ones do (open loop)."""
    loop = asyncio.get_running_loop()
    scratch = ClientLoad()
    for index in range(plan.warmup):
        await stream_one(client, target, await prompt_for(-1 - index), plan.output_tokens, plan.timeout_s, scratch)
    load = ClientLoad()
    slots: dict[int, tuple[RequestRecord, float]] = {}
    limit = asyncio.Semaphore(plan.concurrency or 1_000_000)
    schedule: Sequence[float] | None = plan.schedule
    if schedule is None and plan.request_rate:
        schedule = poisson_schedule(plan.request_rate, plan.seed, count=plan.requests, duration_s=plan.duration_s)

    async def one(index: int, scheduled_at: float | None) -> None:
        async with limit:
            prompt = await prompt_for(index)
            output = output_for(index) if output_for is not None else plan.output_tokens
            slots[index] = await stream_one(client, target, prompt, output, plan.timeout_s, load, hook,
                                            plan.idle_timeout_s, scheduled_at)
        if on_request is not None:
            on_request(len(slots))

    async with measuring(load):
        started = loop.time()
        async with asyncio.TaskGroup() as group:
            if schedule is not None:
                for index, offset in enumerate(schedule):
                    deadline = started + offset
                    if deadline > loop.time():
                        await asyncio.sleep(deadline - loop.time())
                    group.create_task(one(index, deadline))
            else:
                index = 0
                while (plan.requests is None or index < plan.requests) and \
                        (plan.duration_s is None or loop.time() - started < plan.duration_s):
                    await limit.acquire()  # the next request starts when a slot frees
                    limit.release()
                    group.create_task(one(index, None))
                    index += 1
                    await asyncio.sleep(0)
    records = [slots[index][0] for index in sorted(slots)]
    ends = [slots[index][1] for index in sorted(slots)]
    ended_at = max(ends) if ends else loop.time()
    return LevelResult(records, started, ended_at, ends, load, plan)


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
    async with measuring(load):
        started = loop.time()
        results = await asyncio.gather(*(stream_one(client, target, prompt, output_tokens, timeout_s, load,
                                                    idle_timeout_s=idle_timeout_s) for prompt in prompts))
    ends = [ended for _, ended in results]
    return LevelResult([record for record, _ in results], started, max(ends, default=started), ends, load)
