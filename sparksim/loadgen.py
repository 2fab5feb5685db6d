"""A streaming load generator (loadtest.py's method) and its comparison with the timing model.

Per request it records TTFT (first content delta) and decode speed (tokens-1)/(last-first),
then sets them beside what `timing.simulate` says a perfect engine would have produced.
"""

import asyncio
import json
import time
from dataclasses import dataclass
from statistics import fmean

import aiohttp

from sparksim.timing import PlannedRequest, TimingProfile, simulate


@dataclass
class StreamResult:
    sent_at: float
    first_token_at: float
    last_token_at: float
    tokens: int
    prompt_tokens: int
    completion_tokens: int

    @property
    def ttft(self) -> float:
        return self.first_token_at - self.sent_at

    @property
    def decode_tok_s(self) -> float:
        span = self.last_token_at - self.first_token_at
        return (self.tokens - 1) / span if self.tokens > 1 and span > 0 else 0.0


async def stream_chat(
    session: aiohttp.ClientSession, url: str, model: str, prompt: str, max_tokens: int
) -> StreamResult:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
    }
    sent_at = time.monotonic()
    first = last = 0.0
    tokens = prompt_tokens = completion_tokens = 0
    async with session.post(f"{url}/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        async for raw in response.content:
            line = raw.strip()
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            now = time.monotonic()
            payload = json.loads(line[6:])
            if payload.get("usage"):
                prompt_tokens = payload["usage"]["prompt_tokens"]
                completion_tokens = payload["usage"]["completion_tokens"]
            for choice in payload["choices"]:
                if choice["delta"].get("content"):
                    tokens += 1
                    first = first or now
                    last = now
    return StreamResult(sent_at, first, last, tokens, prompt_tokens, completion_tokens)


async def warm_connections(session: aiohttp.ClientSession, url: str, count: int) -> None:
    """Open the wave's connections first, so TTFT measures the engine, not TCP set-up."""

    async def probe() -> None:
        async with session.get(f"{url}/health") as response:
            await response.read()

    await asyncio.gather(*(probe() for _ in range(count)))


async def run_wave(
    url: str, model: str, concurrency: int, prompts: list[str], max_tokens: int
) -> tuple[float, list[StreamResult]]:
    """Fire `concurrency` streams at once; returns the wave start time and the results."""
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=600)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        await warm_connections(session, url, concurrency)
        started = time.monotonic()
        results = await asyncio.gather(*(
            stream_chat(session, url, model, prompts[index % len(prompts)], max_tokens)
            for index in range(concurrency)
        ))
    return started, list(results)


@dataclass
class WaveComparison:
    concurrency: int
    observed_ttft_s: float  # simulated seconds (observed real seconds / time scale)
    expected_ttft_s: float
    observed_decode_tok_s: float
    expected_decode_tok_s: float

    @property
    def ttft_deviation(self) -> float:
        return abs(self.observed_ttft_s - self.expected_ttft_s) / self.expected_ttft_s

    @property
    def decode_deviation(self) -> float:
        return (abs(self.observed_decode_tok_s - self.expected_decode_tok_s)
                / self.expected_decode_tok_s)


def compare_wave(
    profile: TimingProfile,
    time_scale: float,
    started: float,
    results: list[StreamResult],
    cached_tokens: int = 0,
    graph_seqs: int | None = None,
) -> WaveComparison:
    """Mean TTFT and decode speed, observed versus the model, in simulated units."""
    planned = [
        PlannedRequest((result.sent_at - started) / time_scale, result.prompt_tokens,
                       result.completion_tokens, cached_tokens)
        for result in results
    ]
    expected = simulate(profile, planned, graph_seqs)
    return WaveComparison(
        concurrency=len(results),
        observed_ttft_s=fmean(result.ttft for result in results) / time_scale,
        expected_ttft_s=fmean(line.ttft_s(plan.arrival_s) for line, plan in zip(expected, planned,
                                                                               strict=True)),
        observed_decode_tok_s=fmean(result.decode_tok_s for result in results) * time_scale,
        expected_decode_tok_s=fmean(line.decode_tok_s for line in expected),
    )
