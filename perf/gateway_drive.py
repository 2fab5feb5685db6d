"""The fast fake OpenAI upstream (aiohttp) that perf/gateway_overhead.py, perf/router.py and
perf/replicas_affinity.py put behind the gateway, the asyncio load generator that drives it
directly or through the gateway (plain requests or streams; latency, TTFT and time per
chunk), and free ports. Not a script: `perf/gateway_overhead.py --serve-upstream PORT` runs
the upstream in a process of its own."""

from __future__ import annotations

import asyncio
import json
import math
import time
from dataclasses import dataclass, field
from typing import Any

from core.stats import percentile_linear

CHUNKS = 32  # streamed chunks per answer
# Chunks are paced like a fast decoder (1 ms apart), so each one reaches the gateway on its
# own and the time added per chunk is visible (back-to-back chunks would be coalesced).
CHUNK_INTERVAL_S = 0.001
BODY = {"model": "bench", "messages": [{"role": "user", "content": "Say something short."}], "max_tokens": 32}



# --- the fast upstream -------------------------------------------------------------------

def serve_upstream(port: int) -> None:
    from aiohttp import web

    created = int(time.time())
    whole = json.dumps({
        "id": "cmpl-b", "object": "chat.completion", "created": created, "model": "bench",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok " * 16}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 16, "total_tokens": 28}}).encode()
    chunk = b"data: " + json.dumps({"id": "c", "object": "chat.completion.chunk", "created": created, "model": "bench",
                                    "choices": [{"index": 0, "delta": {"content": "ok "}, "finish_reason": None}],
                                    "usage": None}).encode() + b"\n\n"
    usage = b"data: " + json.dumps({"id": "c", "object": "chat.completion.chunk", "created": created, "model": "bench",
                                    "choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": CHUNKS,
                                                             "total_tokens": 12 + CHUNKS}}).encode() + b"\n\n"

    async def chat(request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        # A lane runs on a Spark, not on this machine: the 8 MB bodies (never streamed) are not
        # parsed here, so their parsing does not take this machine's CPU from the gateway.
        body = json.loads(raw) if len(raw) < 1024 * 1024 else {}
        if not body.get("stream"):
            return web.Response(body=whole, content_type="application/json")
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        for _ in range(CHUNKS):
            await response.write(chunk)
            await asyncio.sleep(CHUNK_INTERVAL_S)
        if (body.get("stream_options") or {}).get("include_usage"):
            await response.write(usage)
        await response.write(b"data: [DONE]\n\n")
        return response

    app = web.Application(client_max_size=64 * 1024 * 1024)  # the gateway sends 8 MB bodies on
    app.router.add_post("/v1/chat/completions", chat)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


# --- the load generator ------------------------------------------------------------------

@dataclass
class Result:
    latencies: list[float] = field(default_factory=list)
    ttfts: list[float] = field(default_factory=list)
    per_chunk: list[float] = field(default_factory=list)
    errors: int = 0
    elapsed: float = 0.0

    @staticmethod
    def ms(values: list[float], q: float) -> float:
        """Percentile q of seconds, in milliseconds (NaN of none), by the benchmarks' rule:
        these are requests timed by their client, as a benchmark times them."""
        value = percentile_linear(values, q)
        return value * 1000 if value is not None else math.nan

    @property
    def rps(self) -> float:
        return len(self.latencies) / self.elapsed if self.elapsed else 0.0


async def drive(url: str, headers: dict[str, str], *, stream: bool, concurrency: int, requests: int,
                template: dict[str, Any] | None = None, session: Any = None) -> Result:
    """`requests` requests of `template` (BODY by default), `concurrency` at a time; on the
    caller's aiohttp `session` (its kept-alive connections) when given, else on its own."""
    import aiohttp

    result = Result()
    body = json.dumps({**(template or BODY), "stream": stream}).encode()
    remaining = requests
    own = session is None
    if own:
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, force_close=False))
    try:

        async def one() -> None:
            started = time.perf_counter()
            first = last = None
            chunks = 0
            async with session.post(url, data=body, headers={**headers, "content-type": "application/json"}) as resp:
                if resp.status != 200:
                    await resp.read()
                    result.errors += 1
                    return
                if stream:
                    async for _ in resp.content.iter_any():
                        now = time.perf_counter()
                        first = first or now
                        last = now
                        chunks += 1
                else:
                    await resp.read()
            done = time.perf_counter()
            result.latencies.append(done - started)
            if stream and first is not None and last is not None:
                result.ttfts.append(first - started)
                result.per_chunk.append((last - first) / (CHUNKS - 1))

        async def worker() -> None:
            nonlocal remaining
            while remaining > 0:
                remaining -= 1
                try:
                    await one()
                except Exception:
                    result.errors += 1

        begin = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        result.elapsed = time.perf_counter() - begin
    finally:
        if own:
            await session.close()
    return result


# --- ports -------------------------------------------------------------------------------

def wait_port(port: int, timeout: float = 30) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise SystemExit(f"nothing listening on {port} after {timeout}s")


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
