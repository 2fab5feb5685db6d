"""Replica balancing: conversation affinity vs round-robin, side by side in one run, and
the gateway's req/s with 1 and 2 uvicorn workers.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/wt_replicas REDIS_URL=redis://127.0.0.1:6379/11 \\
        PORTAL_REDIS_PREFIX=wt_replicas .venv/bin/python perf/replicas_affinity.py [--quick] [--json PATH]

Part 1, multi-turn workload on sparksim replicas (DeepSeek-V4-Flash by default, the
simulator's timing model fitted to seed 003, at --time-scale): C conversations side by side, each a long document of its own plus
T turns taken round by round; every turn sends the whole conversation so far (a growing
shared prefix) and streams the answer. Each engine's KV pool (--kv-cache, 800M ≈ 83k
tokens) holds about half of all the conversations' prefixes (~120k tokens): what one
replica of a pair must hold when its conversations stay on it. Two arms, each on its own fresh pair of engines (cold prefix caches), one after
the other, through the same gateway process:
  - affinity: one lane of two replicas, balanced by the gateway (gateway.replicas);
  - round-robin: the same two engines' worth as two one-replica lanes, the client taking
    them in turn (what a shuffle or least-busy balancer does to a conversation).
Printed per arm: prefix-cache hit rate (the engines' own counters), TTFT p50/p95 (first
streamed token, seen by the client), output tok/s (all answers' tokens / wall time).

Part 2, the gateway alone: a lane of two replicas on two fast fake upstreams
(perf/gateway_overhead.py's), 64 concurrent clients, plain requests, through uvicorn
with 1 worker and then 2 workers (one port; breakers and in-flight counts shared through
Redis)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from perf.gateway_drive import Result, drive, free_port, wait_port  # noqa: E402

SERVED = "replica-bench"
WORDS = ["kernel", "scheduler", "memory", "tensor", "cache", "block", "prefix", "decode", "prefill", "token", "request", "lane", "replica", "gateway", "engine", "spark", "fabric", "latency", "throughput", "module", "refactor", "billing", "invoice", "ledger"]


def document(seed: int, words: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(words))


# --- setup -------------------------------------------------------------------------------

def setup_django() -> None:
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, check=True)
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    django.setup()


def make_lane(name: str, ports: list[int]) -> None:
    from lanes.models import Lane, LaneNode, LaneReplica, Node

    lane = Lane.objects.create(name=name, model_id="sparksim/bench", served_model_name=SERVED,
                               image="bench@sha256:" + "0" * 64, api_port=ports[0], max_model_len=32768,
                               observed_state="serving", desired_state="serving")
    for index, port in enumerate(ports):
        node = Node.objects.create(name=f"{name}-r{index}", address="127.0.0.1", transport="local")
        LaneReplica.objects.create(lane=lane, index=index, api_port=port, observed_state="serving")
        LaneNode.objects.create(lane=lane, node=node, replica=index, rank=0)


def reset_database() -> str:
    from django.contrib.auth.models import AnonymousUser

    from gateway.models import ApiKey
    from gateway.services import api_key_create
    from lanes.models import Lane, Node

    ApiKey.objects.filter(name="replicas-bench").delete()
    Lane.objects.filter(name__startswith="rbench").delete()
    Node.objects.filter(name__startswith="rbench").delete()
    return api_key_create(actor=AnonymousUser(), name="replicas-bench").secret


def start_gateway(port: int, workers: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "portal.asgi:application", "--host", "127.0.0.1", "--port", str(port),
         "--workers", str(workers), "--loop", "uvloop", "--http", "httptools", "--no-access-log",
         "--log-level", "warning"], cwd=ROOT, env=env)
    wait_port(port, timeout=120)
    return process


def stop(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        process.send_signal(signal.SIGINT)
    for process in processes:
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()


# --- part 1: the multi-turn workload --------------------------------------------------------

class Dialogue:
    """One conversation: a long document of its own, then turns that each add the answer
    and a new question, so every request shares the conversation's growing prefix."""

    def __init__(self, number: int, doc_words: int) -> None:
        self.number = number
        self.messages = [
            {"role": "system", "content": "You review code. Reference document:\n" + document(number, doc_words)},
            {"role": "user", "content": f"Conversation {number}: summarise the document's risks."}]
        self.turns = 0

    async def turn(self, session: Any, url: str, auth: dict[str, str], model: str, out: dict[str, list[float]]) -> None:
        body = {"model": model, "messages": self.messages, "max_tokens": 48, "stream": True,
                "stream_options": {"include_usage": True}}
        started = time.perf_counter()
        first = None
        text, tokens = [], 0
        async with session.post(url, json=body, headers=auth) as response:
            if response.status != 200:
                out["errors"].append(1.0)
                return
            async for line in response.content:
                if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
                    continue
                event = json.loads(line[6:])
                if event.get("usage"):
                    tokens = event["usage"]["completion_tokens"]
                for choice in event.get("choices") or []:
                    piece = (choice.get("delta") or {}).get("content")
                    if piece:
                        first = first or time.perf_counter()
                        text.append(piece)
        out["ttft"].append((first or time.perf_counter()) - started)
        out["tokens"].append(float(tokens))
        self.turns += 1
        self.messages += [{"role": "assistant", "content": "".join(text)},
                          {"role": "user", "content": f"Turn {self.turns}: now go deeper on point {self.turns}. "
                                                      + document(self.number * 1000 + self.turns, 60)}]


def cache_counters(ports: list[int]) -> tuple[float, float]:
    import httpx

    hits = queries = 0.0
    for port in ports:
        for line in httpx.get(f"http://127.0.0.1:{port}/metrics").text.splitlines():
            if line.startswith("vllm:prefix_cache_hits_total"):
                hits += float(line.split()[-1])
            elif line.startswith("vllm:prefix_cache_queries_total"):
                queries += float(line.split()[-1])
    return hits, queries


async def workload(gateway: str, secret: str, models: list[str], *, conversations: int, turns: int,
                   concurrency: int, doc_words: int) -> dict[str, list[float]]:
    """Every conversation takes its turn, round after round (agents working side by side),
    `concurrency` requests at a time: the engines see all the conversations interleaved."""
    import aiohttp

    out: dict[str, list[float]] = {"ttft": [], "tokens": [], "errors": []}
    counter = [0]
    auth = {"authorization": f"Bearer {secret}"}
    states = [Dialogue(number, doc_words) for number in range(conversations)]
    gate = asyncio.Semaphore(concurrency)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
        async def one(dialogue: Dialogue) -> None:
            async with gate:
                model = models[counter[0] % len(models)]
                counter[0] += 1
                await dialogue.turn(session, f"{gateway}/v1/chat/completions", auth, model, out)

        begin = time.perf_counter()
        for _ in range(turns):
            await asyncio.gather(*(one(dialogue) for dialogue in states))
        out["wall"] = [time.perf_counter() - begin]
    return out


def arm(name: str, gateway: str, secret: str, models: list[str], ports: list[int], args: argparse.Namespace) -> dict[str, Any]:
    hits0, queries0 = cache_counters(ports)
    out = asyncio.run(workload(gateway, secret, models, conversations=args.conversations, turns=args.turns,
                               concurrency=args.concurrency, doc_words=args.doc_words))
    hits, queries = cache_counters(ports)
    return {
        "arm": name, "requests": len(out["ttft"]), "errors": len(out["errors"]),
        "prefix_hit_rate": round((hits - hits0) / max(queries - queries0, 1), 3),
        # TTFT timed by the client, as a benchmark times it: the benchmarks' rule.
        "ttft_p50_ms": round(Result.ms(out["ttft"], 0.5), 1),
        "ttft_p95_ms": round(Result.ms(out["ttft"], 0.95), 1),
        "output_tok_s": round(sum(out["tokens"]) / out["wall"][0], 1),
        "wall_s": round(out["wall"][0], 1),
    }


def part_one(args: argparse.Namespace, env: dict[str, str], secret: str, log_dir: Path) -> list[dict[str, Any]]:
    from sparksim.standalone import start_engine

    engines = [start_engine(args.model, log_dir / f"engine-{i}.log", "--served-model-name", SERVED,
                            "--max-model-len", "32768", "--kv-cache-memory-bytes", args.kv_cache,
                            time_scale=args.time_scale) for i in range(4)]
    processes: list[subprocess.Popen[bytes]] = []
    try:
        affinity, robin = [e.port for e in engines[:2]], [e.port for e in engines[2:]]
        make_lane("rbench-affinity", affinity)
        make_lane("rbench-rr0", robin[:1])
        make_lane("rbench-rr1", robin[1:])
        port = free_port()
        processes.append(start_gateway(port, 1, env))
        gateway = f"http://127.0.0.1:{port}"
        rows = [arm("round-robin", gateway, secret, ["rbench-rr0", "rbench-rr1"], robin, args),
                arm("affinity", gateway, secret, ["rbench-affinity"], affinity, args)]
        return rows
    finally:
        stop(processes)
        for engine in engines:
            engine.stop()


# --- part 2: the gateway alone, 1 and 2 workers -----------------------------------------------

def part_two(args: argparse.Namespace, env: dict[str, str], secret: str) -> list[dict[str, Any]]:
    upstream_ports = [free_port(), free_port()]
    upstreams = [subprocess.Popen([sys.executable, str(ROOT / "perf" / "gateway_overhead.py"), "--serve-upstream",
                                   str(port)], env=env) for port in upstream_ports]
    rows = []
    try:
        for port in upstream_ports:
            wait_port(port)
        from lanes.models import Lane, Node

        Lane.objects.filter(name="bench").delete()
        Node.objects.filter(name__startswith="bench-r").delete()
        make_lane("bench", upstream_ports)  # drive() asks for model "bench"
        auth = {"authorization": f"Bearer {secret}"}
        for workers in (1, 2):
            port = free_port()
            gateway = start_gateway(port, workers, env)
            try:
                url = f"http://127.0.0.1:{port}/v1/chat/completions"
                asyncio.run(drive(url, auth, stream=False, concurrency=8, requests=200))  # warm up
                result = asyncio.run(drive(url, auth, stream=False, concurrency=64, requests=args.requests))
                rows.append({"workers": workers, "req_s": round(result.rps, 1), "errors": result.errors,
                             "p50_ms": round(Result.ms(result.latencies, 0.5), 2)})
            finally:
                stop([gateway])
        Lane.objects.filter(name="bench").delete()
        Node.objects.filter(name__startswith="bench-r").delete()
    finally:
        stop(upstreams)
    return rows


def print_table(rows: list[dict[str, Any]]) -> None:
    cols = list(rows[0])
    widths = [max(len(c), *(len(str(r[c])) for r in rows)) for c in cols]
    print("  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)))
    for r in rows:
        print("  ".join(str(r[c]).ljust(w) for c, w in zip(cols, widths, strict=True)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--conversations", type=int, default=15)  # odd: round-robin does not pin a conversation
    parser.add_argument("--model", default="deepseek-ai/DeepSeek-V4-Flash-0731",
                        help="a sparksim model (DeepSeek: seed 003's fleet; its prefill is seed 003's)")
    parser.add_argument("--kv-cache", default="800M", help="each engine's KV pool (800M: ~83k tokens of DeepSeek)")
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--doc-words", type=int, default=3000)
    parser.add_argument("--time-scale", type=float, default=1.0)
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--json")
    args = parser.parse_args()
    if args.quick:
        args.conversations, args.turns, args.requests = 9, 4, 1500
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PORTAL_LOG_LEVEL": "WARNING"}
    setup_django()
    secret = reset_database()
    with tempfile.TemporaryDirectory() as tmp:
        affinity_rows = part_one(args, env, secret, Path(tmp))
    print(f"Multi-turn workload: {args.conversations} conversations × {args.turns} turns (round by round), "
          f"{args.concurrency} requests at a time, ~{args.doc_words}-word document each; 2 sparksim replicas per arm, "
          f"KV pool {args.kv_cache} each (time scale {args.time_scale})")
    print_table(affinity_rows)
    robin, affinity = affinity_rows
    print(f"TTFT p50 round-robin / affinity: {robin['ttft_p50_ms'] / affinity['ttft_p50_ms']:.2f}×")
    worker_rows = part_two(args, env, secret)
    print("\nGateway alone: lane of 2 replicas on fast fake upstreams, 64 clients, plain requests")
    print_table(worker_rows)
    reset_database()
    if args.json:
        Path(args.json).write_text(json.dumps({"affinity": affinity_rows, "workers": worker_rows}, indent=2))


if __name__ == "__main__":
    main()
