"""What the gateway adds, measured side by side in one run against a fast local upstream.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/gw_bench REDIS_URL=redis://127.0.0.1:6379/3 \\
        .venv/bin/python bench/gateway_overhead.py [--quick]

Starts: a fast fake OpenAI upstream (aiohttp, its own process), the portal's ASGI app as
production runs it (uvicorn, 1 worker, uvloop, httptools, no access log) with a lane that
points at the upstream and an API key, then drives both — directly and through the
gateway — with an asyncio load generator at 1, 16 and 128 concurrent clients, plain and
streaming, and finally 200 concurrent streaming clients. Prints a table (and JSON with
--json PATH). Figures are per one uvicorn worker."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
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
        body = await request.json()
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

    app = web.Application()
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

    def pct(self, values: list[float], q: float) -> float:
        if not values:
            return float("nan")
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000

    @property
    def rps(self) -> float:
        return len(self.latencies) / self.elapsed if self.elapsed else 0.0


async def drive(url: str, headers: dict[str, str], *, stream: bool, concurrency: int, requests: int) -> Result:
    import aiohttp

    result = Result()
    body = json.dumps({**BODY, "stream": stream}).encode()
    remaining = requests
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    async with aiohttp.ClientSession(connector=connector) as session:

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
    return result


# --- setup -------------------------------------------------------------------------------

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


def prepare_database(upstream_port: int) -> str:
    """Migrate, then one lane pointing at the upstream and one key without limits."""
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, check=True)
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    django.setup()
    from lanes.models import Lane, LaneNode, Node
    from routing.models import ApiKey
    from routing.services import api_key_create

    ApiKey.objects.filter(name="bench").delete()
    Lane.objects.filter(name="bench").delete()
    Node.objects.filter(name="bench-node").delete()
    node = Node.objects.create(name="bench-node", address="127.0.0.1", transport="local")
    lane = Lane.objects.create(name="bench", model_id="bench/bench", image="bench@sha256:" + "0" * 64,
                               api_port=upstream_port, max_model_len=32768, observed_state="serving")
    LaneNode.objects.create(lane=lane, node=node, rank=0)
    from django.contrib.auth.models import AnonymousUser

    return api_key_create(actor=AnonymousUser(), name="bench").secret


def row(label: str, direct: Result, gateway: Result) -> dict[str, Any]:
    return {
        "case": label,
        "direct_rps": round(direct.rps, 1), "gateway_rps": round(gateway.rps, 1),
        "direct_p50_ms": round(direct.pct(direct.latencies, 0.5), 2),
        "gateway_p50_ms": round(gateway.pct(gateway.latencies, 0.5), 2),
        "added_p50_ms": round(gateway.pct(gateway.latencies, 0.5) - direct.pct(direct.latencies, 0.5), 2),
        "added_p99_ms": round(gateway.pct(gateway.latencies, 0.99) - direct.pct(direct.latencies, 0.99), 2),
        "added_ttft_p50_ms": round(gateway.pct(gateway.ttfts, 0.5) - direct.pct(direct.ttfts, 0.5), 2)
        if gateway.ttfts else None,
        "added_per_chunk_ms": round(
            statistics.median(gateway.per_chunk) * 1000 - statistics.median(direct.per_chunk) * 1000, 4)
        if gateway.per_chunk and direct.per_chunk else None,
        "errors": direct.errors + gateway.errors,
    }


async def run(args: argparse.Namespace, upstream_port: int, gateway_port: int, secret: str) -> list[dict[str, Any]]:
    direct_url = f"http://127.0.0.1:{upstream_port}/v1/chat/completions"
    gateway_url = f"http://127.0.0.1:{gateway_port}/v1/chat/completions"
    # Headers as the official SDK sends them: its retry counter makes the gateway register
    # each request for retry recognition (the costlier, realistic path).
    auth = {"authorization": f"Bearer {secret}", "x-stainless-retry-count": "0"}
    scale = 0.2 if args.quick else 1.0
    plan = [(1, int(1500 * scale)), (16, int(4000 * scale)), (128, int(6000 * scale))]
    rows = []
    await drive(gateway_url, auth, stream=False, concurrency=8, requests=300)  # warm-up (caches, pools)
    await drive(direct_url, {}, stream=False, concurrency=8, requests=300)
    for stream in (False, True):
        for concurrency, requests in plan:
            n = requests // 2 if stream else requests
            direct = await drive(direct_url, {}, stream=stream, concurrency=concurrency, requests=n)
            gateway = await drive(gateway_url, auth, stream=stream, concurrency=concurrency, requests=n)
            rows.append(row(f"{'stream' if stream else 'plain'} c={concurrency}", direct, gateway))
            print(json.dumps(rows[-1]), flush=True)
    direct = await drive(direct_url, {}, stream=True, concurrency=200, requests=int(2000 * scale))
    gateway = await drive(gateway_url, auth, stream=True, concurrency=200, requests=int(2000 * scale))
    rows.append(row("stream c=200", direct, gateway))
    print(json.dumps(rows[-1]), flush=True)
    return rows


def filter_cost_us() -> float:
    """CPU time of the gateway's per-chunk work (the SSE filter) in microseconds, alone."""
    from routing.gateway.wire import StreamFilter

    chunk = (b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"bench","choices":'
             b'[{"index":0,"delta":{"content":"ok "},"finish_reason":null}],"usage":null}\n\n')
    stream_filter = StreamFilter(client_wants_usage=False)
    rounds = 200_000
    started = time.perf_counter()
    for _ in range(rounds):
        stream_filter.feed(chunk)
    return (time.perf_counter() - started) / rounds * 1e6


def print_table(rows: list[dict[str, Any]]) -> None:
    cols = ["case", "direct_rps", "gateway_rps", "direct_p50_ms", "added_p50_ms", "added_p99_ms",
            "added_ttft_p50_ms", "added_per_chunk_ms", "errors"]
    print("\n| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join("—" if r[c] is None else str(r[c]) for c in cols) + " |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--serve-upstream", type=int)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json")
    args = parser.parse_args()
    if args.serve_upstream:
        serve_upstream(args.serve_upstream)
        return
    upstream_port, gateway_port = free_port(), free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PORTAL_LOG_LEVEL": "WARNING", "PORTAL_GATEWAY_DEFAULT_LANE": "bench"}
    children = [subprocess.Popen([sys.executable, __file__, "--serve-upstream", str(upstream_port)], env=env)]
    try:
        wait_port(upstream_port)
        secret = prepare_database(upstream_port)
        children.append(subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "portal.asgi:application", "--host", "127.0.0.1", "--port",
             str(gateway_port), "--workers", "1", "--loop", "uvloop", "--http", "httptools", "--no-access-log",
             "--log-level", "warning"], cwd=ROOT, env=env))
        wait_port(gateway_port)
        rows = asyncio.run(run(args, upstream_port, gateway_port, secret))
        print_table(rows)
        print(f"\nSSE filter CPU per chunk: {filter_cost_us():.2f} µs")
        if args.json:
            Path(args.json).write_text(json.dumps(rows, indent=2))
    finally:
        for child in children:
            child.send_signal(signal.SIGINT)
        for child in children:
            try:
                child.wait(10)
            except subprocess.TimeoutExpired:
                child.kill()


if __name__ == "__main__":
    main()
