"""What the gateway adds, measured side by side in one run against a fast local upstream.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/gw_bench REDIS_URL=redis://127.0.0.1:6379/3 \\
        .venv/bin/python perf/gateway_overhead.py [--quick] [--large-bodies] \\
        [--litellm-python PATH/bin/python] [--budgets [--baseline-tree PATH]] [--json PATH]

--budgets: the same requests with a key under no budget and a key under its own and its
team's token budgets (perf/gateway_budgets.py), rounds alternating: what budgets add.

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
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from perf.gateway_budgets import budgeted_key, budgets_on_off  # noqa: E402
from perf.gateway_drive import Result, drive, free_port, serve_upstream, wait_port  # noqa: E402
from perf.gateway_large_bodies import pin, post_large, small_under_large  # noqa: E402


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
        "direct_p50_ms": round(Result.ms(direct.latencies, 0.5), 2),
        "gateway_p50_ms": round(Result.ms(gateway.latencies, 0.5), 2),
        "added_p50_ms": round(Result.ms(gateway.latencies, 0.5) - Result.ms(direct.latencies, 0.5), 2),
        "added_p99_ms": round(Result.ms(gateway.latencies, 0.99) - Result.ms(direct.latencies, 0.99), 2),
        "added_ttft_p50_ms": round(Result.ms(gateway.ttfts, 0.5) - Result.ms(direct.ttfts, 0.5), 2)
        if gateway.ttfts else None,
        "added_per_chunk_ms": round(Result.ms(gateway.per_chunk, 0.5) - Result.ms(direct.per_chunk, 0.5), 4)
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
                     "gateway_p50_ms": round(Result.ms(gateway.latencies, 0.5), 2),
                     "litellm_p50_ms": round(Result.ms(litellm.latencies, 0.5), 2),
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


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--serve-upstream", type=int)
    parser.add_argument("--serve-gateway", type=int, help=argparse.SUPPRESS)  # the probed gateway's process
    parser.add_argument("--loop-stacks", action="store_true",
                        help="sample the gateway loop's stack whenever it stalls (perturbs the figures)")
    parser.add_argument("--large-nice", type=int, default=0, help="niceness of the 8 MB posters' process")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json")
    parser.add_argument("--large-bodies", action="store_true")
    parser.add_argument("--budgets", action="store_true", help="also: a key under token budgets vs one under none")
    parser.add_argument("--baseline-tree", help="--budgets: also a gateway from this tree's code, side by side")
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
    return args


@dataclass
class Servers:
    upstream_port: int = field(default_factory=free_port)
    gateway_port: int = field(default_factory=free_port)
    long_port: int = field(default_factory=free_port)
    litellm_port: int = field(default_factory=free_port)
    secret: str = ""
    budgeted_secret: str = ""
    gateway_pid: int = 0
    upstream_pids: list[int] = field(default_factory=list)
    litellm_pid: int = 0


def start_servers(args: argparse.Namespace, children: list[subprocess.Popen[bytes]]) -> Servers:
    """The upstream (two with --pin), the lane and key, the gateway and, with
    --litellm-python, a LiteLLM proxy; each started process is added to `children`."""
    servers = Servers()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PORTAL_LOG_LEVEL": "WARNING", "PORTAL_GATEWAY_DEFAULT_LANE": "bench"}
    ports = [servers.upstream_port, servers.long_port] if args.pin else [servers.upstream_port]
    children += [subprocess.Popen([sys.executable, __file__, "--serve-upstream", str(port)], env=env) for port in ports]
    servers.upstream_pids = [child.pid for child in children]
    for port in ports:
        wait_port(port)
    if args.pin:
        pin(children[0].pid, {0})
        pin(children[1].pid, {1})
        pin(os.getpid(), {0})
    servers.secret = prepare_database(servers.upstream_port, servers.long_port if args.pin else None)
    servers.budgeted_secret = budgeted_key() if args.budgets else ""
    # uvicorn as production runs it (1 worker, uvloop, httptools, no access log), with a
    # probe of its event loop's lag and CPU (perf/loop_probe.py).
    gateway = subprocess.Popen([sys.executable, __file__, "--serve-gateway", str(servers.gateway_port),
                                *(["--loop-stacks"] if args.loop_stacks else [])], cwd=ROOT, env=env)
    children.append(gateway)
    if args.litellm_python:
        config = Path(os.environ.get("TMPDIR", "/tmp")) / f"litellm-bench-{servers.litellm_port}.yaml"
        config.write_text(LITELLM_CONFIG.format(port=servers.upstream_port))
        children.append(subprocess.Popen(
            [args.litellm_python, "-m", "litellm.proxy.proxy_cli", "--config", str(config), "--host", "127.0.0.1",
             "--port", str(servers.litellm_port), "--num_workers", "1"],
            # Its own model cost map, not the one it would fetch from the internet at start.
            env={**{key: value for key, value in env.items() if not key.startswith(("DATABASE_URL", "REDIS"))},
                 "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_MASTER_KEY": LITELLM_KEY},
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        servers.litellm_pid = children[-1].pid
    wait_port(servers.gateway_port)
    servers.gateway_pid = gateway.pid
    if args.pin:
        pin(gateway.pid, {1}, with_children=True)  # its large-body workers...
        pin(gateway.pid, {0})  # ...but not its own threads
    return servers


LARGE_BODY_COLUMNS = ["case", "p50_ms", "p99_ms", "direct_p50_ms", "direct_p99_ms", "added_p50_ms", "added_p99_ms",
                      "loop_lag_p99_ms", "loop_lag_max_ms", "loop_stalled_ms_per_s", "loop_busy_p999_ms",
                      "loop_busy_max_ms", "loop_busy_over_2ms_per_s", "cpu_pct", "requests", "errors",
                      "large_bodies_answered"]
LITELLM_COLUMNS = ["case", "gateway_rps", "litellm_rps", "ratio", "gateway_cpu_ms_per_req", "litellm_cpu_ms_per_req",
                   "cpu_ratio", "gateway_p50_ms", "litellm_p50_ms", "errors", "load_avg_1m"]


def measure(args: argparse.Namespace, servers: Servers) -> dict[str, Any]:
    report: dict[str, Any] = {"validation": validation_cost_us()}
    print(json.dumps(report["validation"]), flush=True)
    gateway_url = f"http://127.0.0.1:{servers.gateway_port}/v1/chat/completions"
    auth = {"authorization": f"Bearer {servers.secret}", "x-stainless-retry-count": "0"}
    if not args.skip_overhead:
        report["overhead"] = asyncio.run(run(args, servers.upstream_port, servers.gateway_port, servers.secret))
        print_table(report["overhead"])
        print(f"\nSSE filter CPU per chunk: {filter_cost_us():.2f} µs")
    if args.budgets:
        report["budgets"] = asyncio.run(budgets_on_off(gateway_url, servers.secret, servers.budgeted_secret, quick=args.quick,
                                                       gateway_pid=servers.gateway_pid, baseline_tree=args.baseline_tree))
        print_table(report["budgets"], list(report["budgets"][0]))
    if args.large_bodies:
        report["large_bodies"] = asyncio.run(small_under_large(
            f"http://127.0.0.1:{servers.upstream_port}/v1/chat/completions", gateway_url, auth, servers.secret,
            large_clients=args.large_clients, seconds=10 if args.quick else 30,
            probe_url=f"http://127.0.0.1:{servers.gateway_port}/__bench/probe", upstream_pids=servers.upstream_pids,
            large_nice=args.large_nice, posters_cpus={1} if args.pin else None))
        print_table(report["large_bodies"], LARGE_BODY_COLUMNS)
    if args.litellm_python:
        wait_port(servers.litellm_port, timeout=120)
        report["litellm"] = asyncio.run(versus_litellm(
            gateway_url, auth, f"http://127.0.0.1:{servers.litellm_port}/chat/completions", 0.2 if args.quick else 1.0,
            gateway_pid=servers.gateway_pid, litellm_pid=servers.litellm_pid))
        print_table(report["litellm"], LITELLM_COLUMNS)
    print(f"\nValidation of a typical chat body ({report['validation']['body_bytes']} bytes): "
          f"{report['validation']['validate_us']} µs; with JSON parsing "
          f"{report['validation']['parse_and_validate_us']} µs")
    return report


def main() -> None:
    args = parse_args()
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
    children: list[subprocess.Popen[bytes]] = []
    try:
        report = measure(args, start_servers(args, children))
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
