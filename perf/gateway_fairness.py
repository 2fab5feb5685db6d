"""The noisy neighbour, with the gateway's fair queue off and on, side by side in one run.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/wt_fair REDIS_URL=redis://127.0.0.1:6379/5 \\
        PORTAL_REDIS_PREFIX=wt_fair .venv/bin/python perf/gateway_fairness.py [--quick] [--json PATH]

Two sparksim lanes (Qwen, `--scheduling-policy priority`, at --time-scale; the lanes say so:
the gateway sets each request's `priority`), each run through the same arms:
  - "seqs": `--max-num-seqs 4` and a KV cache far larger than 4 streams (the issue's lane: the
    slot count binds, so a slot kept for A is a quarter of what B could use);
  - "kv": `--max-num-seqs --kv-seqs` (16) over a KV cache of --kv-tokens (2,560: about six of
    B's whole streams), so the KV cache binds long streams, as on a real Spark whose
    max_num_seqs is above what its KV holds of them; the engine preempts (recompute) the worst
    (priority, arrival) under KV pressure.
Behind three uvicorn gateways of 2 workers each: PORTAL_GATEWAY_FAIR_QUEUE=0 ("off"), the fair
queue without the headroom (PORTAL_GATEWAY_FAIR_RESERVE_SLOTS=0, "bare"), and as shipped (one
slot kept, "on"). Key A is an interactive agent: one short streamed request every --interval
s, on its schedule (open loop: a request that waits does not delay the next one's send). Key
B floods the lane: --flood concurrent 400-token streams, within its limits. Arms, one after
the other, per lane: A alone (through "on"), then B flooding through off, bare and on, then
the floor: B with exactly the lane's slots less one, through "bare" (nothing ever queues,
each request gets its `priority` as through "on": the best any admission that neither
preempts nor aborts can give A while B uses every other slot, and what that costs B).
A flood's first --warmup s (12) are not counted: A's requests in them are sent, B's streams
that end in them are not counted, so each arm measures its steady state.
Printed per arm: A's TTFT p50/p95 (first streamed bytes, seen by its client) and how many
of A's requests waited more than 2 s; B's throughput (answered streams/s and tokens/s
while A ran); the engine's preemptions during the arm. Then the gateway's added latency at
one client, fair queue off vs on: fresh gateways of one worker each (off, on, and on again:
the A/A control), a lane of --slots slots on perf/gateway_overhead.py's fast upstream, one
client, plain requests, the gateways taken in turn request by request (p50 of each)."""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from perf.gateway_drive import Result, drive, free_port, wait_port  # noqa: E402
from perf.replicas_affinity import print_table, setup_django, start_gateway, stop  # noqa: E402

MODEL = "Qwen/Qwen3.8-27B-FP8"
KV_TOKENS_PER_GIB = 32768  # sparksim's qwen profile (docs/sparksim.md)
SHAPES = ("seqs", "kv")
SEQS_SLOTS = 4  # the seqs lane's --max-num-seqs: the issue's lane
SERVED = {"seqs": "fair-bench", "kv": "fair-kv"}


def prepare(ports: dict[str, int], fast_port: int, slots: int, kv_seqs: int, kv_slots: int | None) -> tuple[str, str]:
    from django.contrib.auth.models import AnonymousUser

    from gateway.models import ApiKey
    from gateway.services import api_key_create
    from lanes.models import Lane, LaneNode, Node

    ApiKey.objects.filter(name__startswith="fair-bench").delete()
    Lane.objects.filter(name__in=["fbench", "fkv", "bench"]).delete()
    Node.objects.filter(name__startswith="fbench").delete()
    for name, port, served, seqs, context in (("fbench", ports["seqs"], SERVED["seqs"], SEQS_SLOTS, 32768),
                                              ("fkv", ports["kv"], SERVED["kv"], kv_seqs, 1024),
                                              ("bench", fast_port, "bench", slots, 32768)):
        lane = Lane.objects.create(name=name, model_id=f"sparksim/{name}", served_model_name=served,
                                   image="bench@sha256:" + "0" * 64, api_port=port, max_model_len=context,
                                   max_num_seqs=seqs, observed_state="serving", desired_state="serving",
                                   scheduling_policy="fcfs" if name == "bench" else "priority",
                                   gateway_slots=kv_slots if name == "fkv" else None)
        node = Node.objects.create(name=f"fbench-{name}", address="127.0.0.1", transport="local")
        LaneNode.objects.create(lane=lane, node=node, rank=0)
    return (api_key_create(actor=AnonymousUser(), name="fair-bench-agent").secret,
            api_key_create(actor=AnonymousUser(), name="fair-bench-flood").secret)


def preemptions(engine_url: str) -> float:
    import httpx

    for line in httpx.get(f"{engine_url}/metrics", timeout=10).text.splitlines():
        if line.startswith("vllm:num_preemptions_total"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def stream_once(session: Any, url: str, model: str, secret: str, max_tokens: int,
                      text: str) -> tuple[float | None, int]:
    """(TTFT in s or None on an error, content chunks)."""
    body = {"model": model, "stream": True, "max_tokens": max_tokens, "ignore_eos": True,
            "messages": [{"role": "user", "content": text}]}
    started = time.perf_counter()
    first, chunks = None, 0
    async with session.post(url, json=body, headers={"authorization": f"Bearer {secret}"}) as response:
        if response.status != 200:
            await response.read()
            return None, 0
        async for line in response.content:
            if line.startswith(b"data: {"):
                first = first or time.perf_counter()
                chunks += 1
    return (first - started if first else None), chunks


async def arm(gateway: str, model: str, agent: str, flooder: str | None, streams: int,
              args: argparse.Namespace) -> dict[str, Any]:
    import aiohttp

    url = f"{gateway}/v1/chat/completions"
    ttfts: list[float] = []
    flood_done, flood_tokens, errors = 0, 0, 0
    stop_flood = asyncio.Event()
    timeout = aiohttp.ClientTimeout(total=900)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=timeout) as session:

        measuring = False  # after the warmup: what A and B get in the steady state

        async def flood(n: int) -> None:
            nonlocal flood_done, flood_tokens, errors
            while not stop_flood.is_set():
                assert flooder is not None
                ttft, chunks = await stream_once(session, url, model, flooder, args.flood_tokens, f"flood {n}: write a lot")
                if ttft is None:
                    errors += 1
                    continue
                if measuring and not stop_flood.is_set():
                    flood_done, flood_tokens = flood_done + 1, flood_tokens + chunks

        async def agent_request(n: int, counted: bool) -> None:
            nonlocal errors
            ttft, _ = await stream_once(session, url, model, agent, 16, f"agent {n}: a short answer")
            if ttft is None:
                errors += 1
            elif counted:
                ttfts.append(ttft)

        # A sends on its own schedule from the start, whether or not its last answer came
        # (open loop: a request that waits long does not delay the next one's send, nor hide
        # its wait); with a flood, its requests of the warmup (the lane filling, B's queue
        # building, A becoming an active flow) are sent but not counted, nor are B's streams
        # that end in it.
        flooders = [asyncio.create_task(flood(n)) for n in range(streams if flooder else 0)]
        warmup = math.ceil(args.warmup / args.interval) if flooders else 0
        start = time.perf_counter()
        sent: list[asyncio.Task[None]] = []
        began = start
        for n in range(warmup + args.requests):
            if n == warmup:
                measuring, began = True, time.perf_counter()
            sent.append(asyncio.create_task(agent_request(n, counted=n >= warmup)))
            await asyncio.sleep(max(0.0, start + (n + 1) * args.interval - time.perf_counter()))
        await asyncio.gather(*sent)
        wall = time.perf_counter() - began
        stop_flood.set()
        for task in flooders:
            task.cancel()
        await asyncio.gather(*flooders, return_exceptions=True)
    return {"A_ttft_p50_ms": round(Result.ms(ttfts, 0.5), 1), "A_ttft_p95_ms": round(Result.ms(ttfts, 0.95), 1),
            "A_over_2s": f"{sum(t > 2 for t in ttfts)}/{len(ttfts)}", "B_streams_s": round(flood_done / wall, 2),
            "B_tok_s": round(flood_tokens / wall, 1), "errors": errors}


async def one_client(urls: dict[str, str], secret: str, rounds: int, per_round: int) -> dict[str, list[float]]:
    """Seconds per plain request, one client, the gateways taken in turn request by request
    (each its own kept-alive connection), so every gateway sees the same moments of the
    machine; the order within a turn rotates."""
    import aiohttp

    headers = {"authorization": f"Bearer {secret}"}
    out: dict[str, list[float]] = {name: [] for name in urls}
    sessions = {name: aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) for name in urls}
    try:
        async def once(name: str) -> float:
            result = await drive(urls[name], headers, stream=False, concurrency=1, requests=1, session=sessions[name])
            assert not result.errors, f"{name}: a request failed"
            return result.latencies[0]

        names = list(urls)
        for _ in range(200):  # warm up every gateway
            for name in names:
                await once(name)
        for turn in range(rounds * per_round):
            shift = turn % len(names)
            for name in names[shift:] + names[:shift]:
                out[name].append(await once(name))
    finally:
        for session in sessions.values():
            await session.close()
    return out


def options() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--time-scale", type=float, default=1.0)
    parser.add_argument("--requests", type=int, default=30, help="A's requests per arm")
    parser.add_argument("--interval", type=float, default=2.0, help="s between A's requests")
    parser.add_argument("--flood", type=int, default=40, help="B's concurrent streams")
    parser.add_argument("--flood-tokens", type=int, default=400)
    parser.add_argument("--warmup", type=float, default=12.0, help="s of flood before A and B are counted")
    parser.add_argument("--kv-seqs", type=int, default=16, help="the kv lane's max_num_seqs")
    parser.add_argument("--kv-tokens", type=int, default=2560, help="the kv lane's KV cache, in tokens")
    parser.add_argument("--kv-gateway-slots", type=int, help="the kv lane's gateway slots (default: its max_num_seqs)")
    parser.add_argument("--shapes", nargs="+", choices=SHAPES, default=list(SHAPES))
    parser.add_argument("--slots", type=int, default=64, help="the fast lane's slots (overhead part)")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--json")
    args = parser.parse_args()
    if args.quick:
        args.requests, args.interval, args.warmup, args.rounds = 12, 1.0, 8.0, 4  # the warmup: two of B's streams at time scale 1
    return args


def start_engines(tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    from sparksim.standalone import start_engine

    kv_bytes = args.kv_tokens * 1024 ** 3 // KV_TOKENS_PER_GIB
    return {"seqs": start_engine(MODEL, tmp / "seqs.log", "--served-model-name", SERVED["seqs"], "--max-num-seqs", str(SEQS_SLOTS),
                                 "--scheduling-policy", "priority", time_scale=args.time_scale),
            "kv": start_engine(MODEL, tmp / "kv.log", "--served-model-name", SERVED["kv"],
                               "--max-num-seqs", str(args.kv_seqs), "--kv-cache-memory-bytes", str(kv_bytes),
                               "--max-model-len", "1024", "--scheduling-policy", "priority",
                               time_scale=args.time_scale)}


def run(args: argparse.Namespace) -> tuple[list[dict[str, Any]], dict[str, list[float]]]:
    """Every arm of every lane shape, then the one-client part; the engines and gateways stopped after."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PORTAL_LOG_LEVEL": "WARNING"}
    fast_port = free_port()
    processes: list[subprocess.Popen[bytes]] = [subprocess.Popen(
        [sys.executable, str(ROOT / "perf" / "gateway_overhead.py"), "--serve-upstream", str(fast_port)], env=env)]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        engines = start_engines(Path(tmp), args)
        try:
            wait_port(fast_port)
            agent, flooder = prepare({shape: engine.port for shape, engine in engines.items()}, fast_port,
                                     args.slots, args.kv_seqs, args.kv_gateway_slots)
            ports = {"off": free_port(), "on": free_port(), "bare": free_port()}
            for name, port in ports.items():
                processes.append(start_gateway(port, 2, {
                    **env, "PORTAL_GATEWAY_FAIR_QUEUE": "0" if name == "off" else "1",
                    "PORTAL_GATEWAY_FAIR_RESERVE_SLOTS": "0" if name == "bare" else "1"}))
            urls = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}
            for shape in args.shapes:
                capacity = SEQS_SLOTS if shape == "seqs" else (args.kv_gateway_slots or args.kv_seqs)
                for label, gateway, flood, streams in (
                        ("A alone", "on", None, 0), ("flood, fairness off", "off", flooder, args.flood),
                        ("flood, fair queue, no headroom", "bare", flooder, args.flood),
                        ("flood, fair queue", "on", flooder, args.flood),
                        (f"floor: B at {capacity - 1} streams, no queue", "bare", flooder, capacity - 1)):
                    before = preemptions(engines[shape].url)
                    figures = asyncio.run(arm(urls[gateway], SERVED[shape], agent, flood, streams, args))
                    rows.append({"lane": shape, "arm": label, **figures, "load": round(os.getloadavg()[0], 1),
                                 "preempted": int(preemptions(engines[shape].url) - before)})
                    print(json.dumps(rows[-1]), flush=True)
            # Fresh gateways of one worker each for the one-client part (not the ones that just
            # relayed a flood): fair queue off, on, and on again (the A/A control: what the
            # method reads between two identical gateways).
            stop(processes[1:])
            del processes[1:]
            single = {"off": free_port(), "on": free_port(), "on again": free_port()}
            for name, port in single.items():
                processes.append(start_gateway(port, 1, {**env, "PORTAL_GATEWAY_FAIR_QUEUE": "0" if name == "off" else "1"}))
            latencies = asyncio.run(one_client({name: f"http://127.0.0.1:{port}/v1/chat/completions"
                                                for name, port in single.items()}, flooder, args.rounds, 300))
        finally:
            stop(processes)
            for engine in engines.values():
                engine.stop()
    return rows, latencies


def report(args: argparse.Namespace, rows: list[dict[str, Any]], latencies: dict[str, list[float]]) -> None:
    print(f"Noisy neighbour: sparksim {MODEL}, priority scheduling (time scale {args.time_scale}); lane seqs: "
          f"--max-num-seqs 4; lane kv: --max-num-seqs {args.kv_seqs}, KV {args.kv_tokens} tokens, gateway slots "
          f"{args.kv_gateway_slots or args.kv_seqs}; A: "
          f"{args.requests} short streams every {args.interval} s; B: {args.flood} concurrent "
          f"{args.flood_tokens}-token streams")
    print_table(rows)
    for shape in args.shapes:
        alone, off, bare, on, floor = (row for row in rows if row["lane"] == shape)
        print(f"{shape}: A's TTFT p95 under flood / alone: off {off['A_ttft_p95_ms'] / alone['A_ttft_p95_ms']:.2f}x, "
              f"no headroom {bare['A_ttft_p95_ms'] / alone['A_ttft_p95_ms']:.2f}x, "
              f"on {on['A_ttft_p95_ms'] / alone['A_ttft_p95_ms']:.2f}x, floor "
              f"{floor['A_ttft_p95_ms'] / alone['A_ttft_p95_ms']:.2f}x; B's tok/s / off: no headroom "
              f"{bare['B_tok_s'] / off['B_tok_s']:.3f}, on {on['B_tok_s'] / off['B_tok_s']:.3f}, floor "
              f"{floor['B_tok_s'] / off['B_tok_s']:.3f}")
    p50 = {name: Result.ms(values, 0.5) for name, values in latencies.items()}
    print(f"One client, plain requests ({len(latencies['on'])} each, the gateways in turn): p50 off "
          f"{p50['off']:.3f} ms, on {p50['on']:.3f} ms, difference {p50['on'] - p50['off']:+.3f} ms; "
          f"A/A control (on again - on) {p50['on again'] - p50['on']:+.3f} ms")
    if args.json:
        Path(args.json).write_text(json.dumps({"arms": rows, "one_client_p50_ms": p50}, indent=2))


def main() -> None:
    args = options()
    setup_django()
    rows, latencies = run(args)
    report(args, rows, latencies)


if __name__ == "__main__":
    main()
