"""What the gateway adds, measured side by side in one run against a fast local upstream.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/gw_bench REDIS_URL=redis://127.0.0.1:6379/3 \\
        .venv/bin/python perf/gateway_overhead.py [--quick] [--large-bodies] \\
        [--litellm-python PATH/bin/python] [--json PATH]

--large-bodies: small requests' p50/p99 through the gateway (and directly to the upstream,
in alternation: the difference is what the gateway adds on a shared machine) alone, then
while clients in another process post 8 MB bodies to it without pause (a long-context
lane; the body is validated and sent on; the fake upstream does not parse bodies over
1 MB, as a real lane does that on its own machine).
--litellm-python: an interpreter with `litellm[proxy]` installed (kept out of this
project's requirements: e.g. its own venv); a LiteLLM proxy (1 worker) in front of the
same upstream is driven like the gateway and the req/s are put side by side.
The validation cost of a typical chat body is always printed (µs, in-process).

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


def prepare_database(upstream_port: int, long_port: int | None = None) -> str:
    """Migrate, then one lane pointing at the upstream (and a long-context lane, on
    `long_port` if given) and one key without limits."""
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, check=True)
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    django.setup()
    from gateway.models import ApiKey
    from gateway.services import api_key_create
    from lanes.models import Lane, LaneNode, Node

    ApiKey.objects.filter(name="bench").delete()
    Lane.objects.filter(name__in=["bench", "bench-long"]).delete()
    Node.objects.filter(name="bench-node").delete()
    node = Node.objects.create(name="bench-node", address="127.0.0.1", transport="local")
    lane = Lane.objects.create(name="bench", model_id="perf/bench", image="bench@sha256:" + "0" * 64,
                               api_port=upstream_port, max_model_len=32768, observed_state="serving")
    LaneNode.objects.create(lane=lane, node=node, rank=0)
    # A long-context lane on the same upstream, for the large bodies.
    long_lane = Lane.objects.create(name="bench-long", model_id="perf/long", image="bench@sha256:" + "0" * 64,
                                    api_port=long_port or upstream_port, max_model_len=4_194_304,
                                    observed_state="serving")
    LaneNode.objects.create(lane=long_lane, node=node, rank=0)
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


LARGE_BODY_BYTES = 8 * 1024 * 1024


def large_body() -> bytes:
    text = ("lorem ipsum dolor sit amet " * (LARGE_BODY_BYTES // 27 + 1))[:LARGE_BODY_BYTES]
    return json.dumps({"model": "bench-long", "max_tokens": 16,
                       "messages": [{"role": "user", "content": text}]}).encode()


async def post_large_until(url: str, headers: dict[str, str], stop: asyncio.Event, counts: dict[str, int]) -> None:
    import aiohttp

    body = large_body()
    async with aiohttp.ClientSession() as session:
        while not stop.is_set():
            async with session.post(url, data=body, headers={**headers, "content-type": "application/json"}) as resp:
                await resp.read()
                counts[str(resp.status)] = counts.get(str(resp.status), 0) + 1


def post_large(url: str, secret: str, clients: int) -> None:
    """The large-body clients, in their own process (so the client measuring the small
    requests is not busy sending 8 MB bodies): post until SIGINT, then print the answers'
    statuses as JSON."""
    async def main() -> dict[str, int]:
        stop, counts = asyncio.Event(), {}  # type: ignore[var-annotated]
        asyncio.get_running_loop().add_signal_handler(signal.SIGINT, stop.set)
        auth = {"authorization": f"Bearer {secret}", "x-stainless-retry-count": "0"}
        await asyncio.gather(*(post_large_until(url, auth, stop, counts) for _ in range(clients)))
        return counts

    print(json.dumps(asyncio.run(main())), flush=True)


async def alternate(direct_url: str, gateway_url: str, auth: dict[str, str], seconds: float) -> tuple[Result, Result]:
    """One client, one small request directly to the upstream then one through the gateway,
    for `seconds`: both see the same moment of a shared machine, so the difference is what
    the gateway adds, whatever else the machine is doing."""
    import aiohttp

    body = json.dumps({**BODY, "stream": False}).encode()
    direct, gateway = Result(), Result()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        begin = time.perf_counter()
        while time.perf_counter() - begin < seconds:
            for url, headers, result in ((direct_url, {}, direct), (gateway_url, auth, gateway)):
                started = time.perf_counter()
                try:
                    async with session.post(url, data=body,
                                            headers={**headers, "content-type": "application/json"}) as resp:
                        await resp.read()
                        ok = resp.status == 200
                except aiohttp.ClientError:
                    ok = False
                if ok:
                    result.latencies.append(time.perf_counter() - started)
                else:
                    result.errors += 1
        direct.elapsed = gateway.elapsed = time.perf_counter() - begin
    return direct, gateway


async def probe(url: str) -> dict[str, Any]:
    """The gateway process's loop lag and CPU since the previous call (perf/loop_probe.py)."""
    import aiohttp

    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        return dict(await resp.json())


def pin(pid: int, cpus: set[int], *, with_children: bool = False) -> None:
    """Every thread of `pid` (and of its child processes) onto `cpus` (--pin)."""
    pending = [pid]
    while pending:
        current = pending.pop()
        for task in os.listdir(f"/proc/{current}/task"):
            os.sched_setaffinity(int(task), cpus)
            if with_children:
                with open(f"/proc/{current}/task/{task}/children") as children:
                    pending.extend(int(child) for child in children.read().split())


def upstream_cpu_s(pids: list[int]) -> float:
    return sum(cpu_s(pid) for pid in pids)


def cpu_s(pid: int) -> float:
    from perf.loop_probe import proc_cpu_s

    return proc_cpu_s(pid)


async def small_under_large(direct_url: str, gateway_url: str, auth: dict[str, str], secret: str, *,
                            large_clients: int, seconds: float, probe_url: str, upstream_pids: list[int],
                            large_nice: int, posters_cpus: set[int] | None = None) -> list[dict[str, Any]]:
    """Small requests' latency at one client (through the gateway, and directly to the
    upstream in alternation), alone, then while `large_clients` (another process, at
    niceness `large_nice`) post 8 MB bodies to the gateway back to back. With each phase:
    the gateway's event-loop lag and where the machine's CPU went (gateway loop thread,
    its other threads, its worker processes, the fake upstream, the 8 MB posters, this
    client)."""
    await alternate(direct_url, gateway_url, auth, 1.0)  # warm-up
    await probe(probe_url)
    marks = (upstream_cpu_s(upstream_pids), time.process_time(), 0.0)
    alone = await alternate(direct_url, gateway_url, auth, seconds)
    phases = [(await probe(probe_url), upstream_cpu_s(upstream_pids) - marks[0], 0.0, time.process_time() - marks[1])]
    posters = subprocess.Popen([sys.executable, __file__, "--post-large", gateway_url, "--secret", secret,
                                "--large-clients", str(large_clients)], stdout=subprocess.PIPE, text=True,
                               preexec_fn=(lambda: os.nice(large_nice)) if large_nice else None)
    if posters_cpus is not None:
        pin(posters.pid, posters_cpus)
    await asyncio.sleep(2.0)  # the large posts are under way
    began = time.perf_counter()
    await probe(probe_url)
    marks = (upstream_cpu_s(upstream_pids), time.process_time(), cpu_s(posters.pid))
    loaded = await alternate(direct_url, gateway_url, auth, seconds)
    phases.append((await probe(probe_url), upstream_cpu_s(upstream_pids) - marks[0], cpu_s(posters.pid) - marks[2],
                   time.process_time() - marks[1]))
    posters.send_signal(signal.SIGINT)
    await probe(probe_url + "?stop")  # the probe's tick costs CPU: off for what follows
    counts = json.loads(posters.communicate(timeout=120)[0] or "{}")
    counts["per_s"] = round(sum(counts.values()) / (time.perf_counter() - began + 2.0), 1)
    rows = []
    loaded_label = f"small requests, {large_clients} clients posting 8 MB bodies" + (
        f" (nice {large_nice})" if large_nice else "")
    for (label, (direct, gateway)), (lag, upstream_cpu, posters_cpu, client_cpu) in zip(
            (("small requests alone", alone), (loaded_label, loaded)), phases, strict=True):
        wall = lag["wall_s"] or 1.0
        rows.append({"case": label, "p50_ms": round(gateway.pct(gateway.latencies, 0.5), 2),
                     "p99_ms": round(gateway.pct(gateway.latencies, 0.99), 2),
                     "direct_p50_ms": round(direct.pct(direct.latencies, 0.5), 2),
                     "direct_p99_ms": round(direct.pct(direct.latencies, 0.99), 2),
                     "added_p50_ms": round(gateway.pct(gateway.latencies, 0.5) - direct.pct(direct.latencies, 0.5), 2),
                     "added_p99_ms": round(gateway.pct(gateway.latencies, 0.99) - direct.pct(direct.latencies, 0.99),
                                           2),
                     "requests": len(gateway.latencies), "errors": gateway.errors + direct.errors,
                     "large_bodies_answered": counts if gateway is loaded[1] else None,
                     "loop_lag_p50_ms": lag["lag_p50_ms"], "loop_lag_p99_ms": lag["lag_p99_ms"],
                     "loop_lag_max_ms": lag["lag_max_ms"], "loop_stalled_ms_per_s": round(lag["stalled_ms"] / wall, 1),
                     # the loop's own CPU between two 1 ms ticks: what the portal held it for
                     "loop_busy_p999_ms": lag["busy_p999_ms"], "loop_busy_max_ms": lag["busy_max_ms"],
                     "loop_busy_over_2ms_per_s": round(lag["busy_over_2ms"] / wall, 1),
                     # CPU share of one core, per process, over the phase (2 cores = 200 %)
                     "cpu_pct": {"gateway_loop": round(100 * lag["loop_thread_cpu_s"] / wall),
                                 "gateway_threads": round(100 * lag["other_threads_cpu_s"] / wall),
                                 "gateway_workers": round(100 * lag["workers_cpu_s"] / wall),
                                 "upstream": round(100 * upstream_cpu / wall),
                                 "posters": round(100 * posters_cpu / wall),
                                 "client": round(100 * client_cpu / wall)},
                     "load_avg_1m": os.getloadavg()[0]})
        print(json.dumps(rows[-1]), flush=True)
        for count, stack in lag["stall_stacks"]:
            print(f"    stalled {count}× in {stack}", flush=True)
    return rows


def validation_cost_us() -> dict[str, float]:
    """CPU time to parse and validate a typical agent's chat body (system prompt, a few
    turns, two tools), in microseconds, in-process."""
    from gateway.request import parse_request
    from gateway.validation import validate_body

    tool: dict[str, Any] = {"type": "function", "function": {"name": "read_file", "description": "Read a file",
                                             "parameters": {"type": "object", "properties": {
                                                 "path": {"type": "string"}}, "required": ["path"]}}}
    body: dict[str, Any] = {"model": "auto", "stream": True, "stream_options": {"include_usage": True}, "temperature": 0.2,
            "max_completion_tokens": 1024, "tools": [tool, {**tool, "function": {**tool["function"],
                                                                               "name": "write_file"}}],
            "messages": [{"role": "system", "content": "You are a careful coding agent. " * 20},
                         {"role": "user", "content": "Fix the failing test in lanes/rules.py."},
                         {"role": "assistant", "content": None, "tool_calls": [
                             {"id": "call_1", "type": "function",
                              "function": {"name": "read_file", "arguments": '{"path": "lanes/rules.py"}'}}]},
                         {"role": "tool", "tool_call_id": "call_1", "content": "def rule(): ..." * 50},
                         {"role": "user", "content": "Go on."}]}
    raw = json.dumps(body).encode()
    rounds = 50_000
    # CPU time of this process, not wall time: on a shared machine the wall clock also
    # counts the time other processes held the CPU.
    started = time.process_time()
    for _ in range(rounds):
        validate_body(body, endpoint="chat.completions", max_n=8)
    validate_us = (time.process_time() - started) / rounds * 1e6
    started = time.process_time()
    for _ in range(rounds):
        parse_request(raw, endpoint="chat.completions", max_n=8)
    parse_us = (time.process_time() - started) / rounds * 1e6
    return {"body_bytes": len(raw), "validate_us": round(validate_us, 2), "parse_and_validate_us": round(parse_us, 2)}


LITELLM_KEY = "sk-" + "b3" * 32  # the proxy refuses to start without a strong master key
LITELLM_CONFIG = """model_list:
  - model_name: bench
    litellm_params:
      model: openai/bench
      api_base: http://127.0.0.1:{port}/v1
      api_key: none
litellm_settings:
  drop_params: true
"""


def tree_cpu_s(pid: int) -> float:
    """CPU seconds of a process and all its descendants (a LiteLLM proxy may run its server
    in a child; the gateway's large-body workers are its children)."""
    from perf.loop_probe import proc_cpu_s

    total, pending = 0.0, [pid]
    while pending:
        current = pending.pop()
        total += proc_cpu_s(current)
        try:
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children") as children:
                    pending.extend(int(child) for child in children.read().split())
        except OSError:
            pass
    return total


async def versus_litellm(gateway_url: str, auth: dict[str, str], litellm_url: str, scale: float, *,
                         gateway_pid: int, litellm_pid: int, rounds: int = 3) -> list[dict[str, Any]]:
    """The same plain requests through the gateway and through a LiteLLM proxy, each one
    worker in front of the same upstream, in alternating rounds (both see the same moments
    of a shared machine). Besides req/s, each server's CPU time per request: on a machine
    whose other load comes and goes, the steadier measure of what one worker can serve
    (1 / CPU per request, when CPU-bound)."""
    rows = []
    litellm_auth = {"authorization": f"Bearer {LITELLM_KEY}"}
    # Both sides warmed up alike: the gateway's first requests load its caches and the
    # router's encoder (a quarter second of CPU), which at 1 client (~100 requests) showed
    # as 1-2 ms per request when nothing ran before this table (--skip-overhead).
    for url, headers in ((litellm_url, litellm_auth), (gateway_url, auth)):
        await drive(url, headers, stream=False, concurrency=8, requests=200)
    for concurrency, requests in ((1, int(500 * scale)), (16, int(2000 * scale)), (64, int(3000 * scale))):
        sides = {"gateway": (gateway_url, auth, gateway_pid, max(concurrency, requests // rounds)),
                 "litellm": (litellm_url, litellm_auth, litellm_pid, max(concurrency, requests // 4 // rounds))}
        totals = {name: Result() for name in sides}
        cpu = dict.fromkeys(sides, 0.0)
        for _ in range(rounds):
            for name, (url, headers, pid, n) in sides.items():
                before = tree_cpu_s(pid)
                result = await drive(url, headers, stream=False, concurrency=concurrency, requests=n)
                cpu[name] += tree_cpu_s(pid) - before
                totals[name].latencies += result.latencies
                totals[name].errors += result.errors
                totals[name].elapsed += result.elapsed
        gateway, litellm = totals["gateway"], totals["litellm"]
        gateway_cpu_ms = 1000 * cpu["gateway"] / max(1, len(gateway.latencies))
        litellm_cpu_ms = 1000 * cpu["litellm"] / max(1, len(litellm.latencies))
        rows.append({"case": f"plain c={concurrency}", "gateway_rps": round(gateway.rps, 1),
                     "litellm_rps": round(litellm.rps, 1),
                     "ratio": round(gateway.rps / litellm.rps, 1) if litellm.rps else None,
                     "gateway_cpu_ms_per_req": round(gateway_cpu_ms, 2),
                     "litellm_cpu_ms_per_req": round(litellm_cpu_ms, 2),
                     "cpu_ratio": round(litellm_cpu_ms / gateway_cpu_ms, 1) if gateway_cpu_ms else None,
                     "gateway_p50_ms": round(gateway.pct(gateway.latencies, 0.5), 2),
                     "litellm_p50_ms": round(litellm.pct(litellm.latencies, 0.5), 2),
                     "errors": gateway.errors + litellm.errors, "load_avg_1m": os.getloadavg()[0]})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def filter_cost_us() -> float:
    """CPU time of the gateway's per-chunk work (the SSE filter) in microseconds, alone."""
    from gateway.wire import StreamFilter

    chunk = (b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"bench","choices":'
             b'[{"index":0,"delta":{"content":"ok "},"finish_reason":null}],"usage":null}\n\n')
    stream_filter = StreamFilter(client_wants_usage=False)
    rounds = 200_000
    started = time.perf_counter()
    for _ in range(rounds):
        stream_filter.feed(chunk)
    return (time.perf_counter() - started) / rounds * 1e6


def print_table(rows: list[dict[str, Any]], cols: list[str] | None = None) -> None:
    cols = cols or ["case", "direct_rps", "gateway_rps", "direct_p50_ms", "added_p50_ms", "added_p99_ms",
                    "added_ttft_p50_ms", "added_per_chunk_ms", "errors"]
    print("\n| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join("—" if r[c] is None else str(r[c]) for c in cols) + " |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--serve-upstream", type=int)
    parser.add_argument("--serve-gateway", type=int, help=argparse.SUPPRESS)  # the probed gateway's process
    parser.add_argument("--loop-stacks", action="store_true",
                        help="sample the gateway loop's stack whenever it stalls (perturbs the figures)")
    parser.add_argument("--large-nice", type=int, default=0, help="niceness of the 8 MB posters' process")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json")
    parser.add_argument("--large-bodies", action="store_true")
    parser.add_argument("--large-clients", type=int, default=3)
    parser.add_argument("--pin", action="store_true",
                        help="--large-bodies with the lanes and the clients as if on other machines: the gateway's "
                             "event loop, the small-request client and a small lane on CPU 0; the gateway's "
                             "large-body workers, a long-context lane and the 8 MB posters on CPU 1")
    parser.add_argument("--litellm-python")
    parser.add_argument("--skip-overhead", action="store_true", help="only the --large-bodies / LiteLLM parts")
    parser.add_argument("--post-large", help=argparse.SUPPRESS)  # the large-body clients' process
    parser.add_argument("--secret", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.pin and (not args.large_bodies or not args.skip_overhead or args.litellm_python):
        parser.error("--pin measures the large bodies only: use it with --large-bodies --skip-overhead")
    if args.serve_upstream:
        serve_upstream(args.serve_upstream)
        return
    if args.serve_gateway:
        from perf.loop_probe import serve

        serve(args.serve_gateway, stacks=args.loop_stacks)
        return
    if args.post_large:
        post_large(args.post_large, args.secret, args.large_clients)
        return
    upstream_port, gateway_port, long_port = free_port(), free_port(), free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PORTAL_LOG_LEVEL": "WARNING", "PORTAL_GATEWAY_DEFAULT_LANE": "bench"}
    children = [subprocess.Popen([sys.executable, __file__, "--serve-upstream", str(upstream_port)], env=env)]
    if args.pin:
        children.append(subprocess.Popen([sys.executable, __file__, "--serve-upstream", str(long_port)], env=env))
    try:
        wait_port(upstream_port)
        if args.pin:
            wait_port(long_port)
            pin(children[0].pid, {0})
            pin(children[1].pid, {1})
            pin(os.getpid(), {0})
        secret = prepare_database(upstream_port, long_port if args.pin else None)
        # uvicorn as production runs it (1 worker, uvloop, httptools, no access log), with a
        # probe of its event loop's lag and CPU (perf/loop_probe.py).
        children.append(subprocess.Popen(
            [sys.executable, __file__, "--serve-gateway", str(gateway_port),
             *(["--loop-stacks"] if args.loop_stacks else [])], cwd=ROOT, env=env))
        litellm_port = free_port()
        if args.litellm_python:
            config = Path(os.environ.get("TMPDIR", "/tmp")) / f"litellm-bench-{litellm_port}.yaml"
            config.write_text(LITELLM_CONFIG.format(port=upstream_port))
            children.append(subprocess.Popen(
                [args.litellm_python, "-m", "litellm.proxy.proxy_cli", "--config", str(config), "--host", "127.0.0.1",
                 "--port", str(litellm_port), "--num_workers", "1"],
                # Its own model cost map, not the one it would fetch from the internet at start.
                env={**{key: value for key, value in env.items() if not key.startswith(("DATABASE_URL", "REDIS"))},
                     "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_MASTER_KEY": LITELLM_KEY},
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_port(gateway_port)
        gateway_pid = children[2 if args.pin else 1].pid
        if args.pin:
            pin(gateway_pid, {1}, with_children=True)  # its large-body workers...
            pin(gateway_pid, {0})  # ...but not its own threads
        report: dict[str, Any] = {"validation": validation_cost_us()}
        print(json.dumps(report["validation"]), flush=True)
        gateway_url = f"http://127.0.0.1:{gateway_port}/v1/chat/completions"
        auth = {"authorization": f"Bearer {secret}", "x-stainless-retry-count": "0"}
        if not args.skip_overhead:
            report["overhead"] = asyncio.run(run(args, upstream_port, gateway_port, secret))
            print_table(report["overhead"])
            print(f"\nSSE filter CPU per chunk: {filter_cost_us():.2f} µs")
        if args.large_bodies:
            report["large_bodies"] = asyncio.run(small_under_large(
                f"http://127.0.0.1:{upstream_port}/v1/chat/completions", gateway_url, auth, secret,
                large_clients=args.large_clients, seconds=10 if args.quick else 30,
                probe_url=f"http://127.0.0.1:{gateway_port}/__bench/probe", upstream_pids=[child.pid for child in children[:2 if args.pin else 1]],
                large_nice=args.large_nice, posters_cpus={1} if args.pin else None))
            print_table(report["large_bodies"], ["case", "p50_ms", "p99_ms", "direct_p50_ms", "direct_p99_ms",
                                                 "added_p50_ms", "added_p99_ms", "loop_lag_p99_ms",
                                                 "loop_lag_max_ms", "loop_stalled_ms_per_s", "loop_busy_p999_ms",
                                                 "loop_busy_max_ms", "loop_busy_over_2ms_per_s", "cpu_pct", "requests",
                                                 "errors", "large_bodies_answered"])
        if args.litellm_python:
            wait_port(litellm_port, timeout=120)
            report["litellm"] = asyncio.run(versus_litellm(
                gateway_url, auth, f"http://127.0.0.1:{litellm_port}/chat/completions", 0.2 if args.quick else 1.0,
                gateway_pid=gateway_pid, litellm_pid=children[-1].pid))
            print_table(report["litellm"], ["case", "gateway_rps", "litellm_rps", "ratio", "gateway_cpu_ms_per_req",
                                            "litellm_cpu_ms_per_req", "cpu_ratio", "gateway_p50_ms",
                                            "litellm_p50_ms", "errors", "load_avg_1m"])
        print(f"\nValidation of a typical chat body ({report['validation']['body_bytes']} bytes): "
              f"{report['validation']['validate_us']} µs; with JSON parsing "
              f"{report['validation']['parse_and_validate_us']} µs")
        if args.json:
            Path(args.json).write_text(json.dumps(report, indent=2))
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
