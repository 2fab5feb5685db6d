"""Metrics benchmarks: one scrape tick over 50 simulated lanes and 20 simulated Sparks; chart,
usage and gateway queries over a month of history written with COPY; the retention step on
that history (and how long writers wait while it drops partitions); the cost of pushing one
tick to 100 open dashboards.

    export DATABASE_URL=postgres://postgres@127.0.0.1:5432/metrics_bench REDIS_URL=redis://127.0.0.1:6379/5
    createdb -h 127.0.0.1 -U postgres metrics_bench; .venv/bin/python manage.py migrate -v0
    .venv/bin/python -m perf.live_metrics [--part scrape|history|retention|fanout|all] [--request-days 1]

Goals (issue 13): a tick ≤ 1 s and a small share of one core; chart and usage queries p95 ≤ 100 ms
over 30 days; retention a partition drop, well under a second.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

import django  # noqa: E402

django.setup()

import websockets  # noqa: E402
from aiohttp import web  # noqa: E402
from django.contrib.auth.models import Group, User  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402

from core.broadcast import DASHBOARD_GROUP, broadcast  # noqa: E402
from core.http import async_http_client  # noqa: E402
from core.roles import Role, ensure_role_groups  # noqa: E402
from core.stats import percentile_nearest_rank  # noqa: E402
from lanes.models import Lane, LaneNode, Node  # noqa: E402
from metrics.models import Sample  # noqa: E402
from metrics.scraper import scrape_all  # noqa: E402
from metrics.services import scrape_targets, tick_payload, tick_record  # noqa: E402
from metrics.storage import usage_day_rollup  # noqa: E402
from perf.live_metrics_history import (  # noqa: E402
    LANES,
    NODES,
    bench_queries,
    bench_retention,
    lane_values,
    node_values,
    p50_p95_max,
    write_history,
)
from sparksim.cluster import cluster_down, cluster_up  # noqa: E402
from sparksim.engine.metrics import EngineMetrics  # noqa: E402

SCRAPE_INTERVAL_S = 5
# Parts 2 and 3 (history and retention) are in perf/live_metrics_history.py.


def cpu_seconds(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


# --- 1. one scrape tick --------------------------------------------------------------------

def serve_engines(ports: list[int], ready: Any) -> None:
    """50 vLLM /metrics endpoints (sparksim's renderer), busy: each read adds traffic."""
    engines = {port: EngineMetrics(f"org/model-{port}", spec_tokens=3) for port in ports}

    async def metrics(request: web.Request) -> web.Response:
        engine = engines[request.transport.get_extra_info("sockname")[1]]  # type: ignore[union-attr]
        engine.count("prompt_tokens", 4000)
        engine.count("generation_tokens", 600)
        engine.count("prefix_cache_queries", 4000)
        engine.count("prefix_cache_hits", 2500)
        engine.observe("time_to_first_token_seconds", random.uniform(0.05, 0.8), 10)
        engine.observe("inter_token_latency_seconds", random.uniform(0.01, 0.03), 600)
        engine.running, engine.waiting, engine.kv_usage = 8, 1, 0.42
        return web.Response(text=engine.render(), content_type="text/plain")

    async def main() -> None:
        app = web.Application()
        app.router.add_get("/metrics", metrics)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        for port in ports:
            await web.TCPSite(runner, "127.0.0.1", port).start()
        ready.set()
        await asyncio.Event().wait()

    asyncio.run(main())


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for sock in sockets:
        sock.bind(("127.0.0.1", 0))
    ports = [int(sock.getsockname()[1]) for sock in sockets]
    for sock in sockets:
        sock.close()
    return ports


def setup_targets(ports: list[int], sim_root: Path) -> None:
    Lane.objects.filter(name__startswith="bench-").delete()
    Node.objects.filter(name__startswith="bench-").delete()
    infos = cluster_up(sim_root, [f"bench-node-{i:02d}" for i in range(NODES)], base_address="127.0.0.171")
    nodes = [Node.objects.create(name=info.name, address=info.address, transport="local", sim_dir=info.sim_dir,
                                 state="online") for info in infos]
    host = Node.objects.create(name="bench-engines", address="127.0.0.1", transport="local", state="maintenance")
    for i, port in enumerate(ports):
        lane = Lane.objects.create(name=f"bench-lane-{i:02d}", model_id=f"org/model-{port}", api_port=port,
                                   image="x@sha256:" + "0" * 64, max_model_len=32768, observed_state="serving",
                                   desired_state="serving")
        LaneNode.objects.create(lane=lane, node=host, rank=0)
    assert len(nodes) == NODES


async def scrape_once(lane_targets: list[Any], endpoints: list[Any]) -> list[Any]:
    async with async_http_client(timeout=2.0) as client:
        return await scrape_all(lane_targets, endpoints, timeout_s=2.0, client=client)


def bench_scrape(ticks: int) -> None:
    for with_nodes in (False, True):
        scrape_ticks(ticks, with_nodes=with_nodes)


def scrape_ticks(ticks: int, *, with_nodes: bool) -> None:
    ports = free_ports(LANES)
    ready = multiprocessing.Event()
    server = multiprocessing.Process(target=serve_engines, args=(ports, ready), daemon=True)
    server.start()
    ready.wait(30)
    sim_root = Path(tempfile.mkdtemp(prefix="metrics-bench-"))
    try:
        setup_targets(ports, sim_root)
        if not with_nodes:
            Node.objects.filter(name__startswith="bench-node-").update(state="maintenance")
        walls, network, record, cpu_self, cpu_children, failures = [], [], [], [], [], []
        for index in range(ticks + 1):
            started, self0, children0 = time.perf_counter(), cpu_seconds(resource.RUSAGE_SELF), cpu_seconds(resource.RUSAGE_CHILDREN)
            lanes, lane_targets, nodes, endpoints = scrape_targets()

            results = asyncio.run(scrape_once(lane_targets, endpoints))
            middle = time.perf_counter()
            report = tick_record(now=datetime.now(UTC), results=results, lanes=lanes, nodes=nodes)
            ended = time.perf_counter()
            if index == 0:
                continue  # the first tick has no previous reading (no rates)
            failures.append(report["failed"])
            walls.append(ended - started)
            network.append(middle - started)
            record.append(ended - middle)
            cpu_self.append(cpu_seconds(resource.RUSAGE_SELF) - self0)
            cpu_children.append(cpu_seconds(resource.RUSAGE_CHILDREN) - children0)
            time.sleep(0.5)
        wall = p50_p95_max(walls)
        what = f"{LANES} lanes + {NODES} simulated Sparks" if with_nodes else f"{LANES} lanes only"
        print(f"scrape tick, {what} ({len(results)} targets), {ticks} ticks, load average {os.getloadavg()[0]:.1f} "
              f"on {os.cpu_count()} cores:")
        print(f"  wall p50 {wall[0] * 1000:.0f} ms, p95 {wall[1] * 1000:.0f} ms, max {wall[2] * 1000:.0f} ms "
              f"(network {(percentile_nearest_rank(network, 0.5) or 0.0) * 1000:.0f} ms + store/alerts/broadcast "
              f"{(percentile_nearest_rank(record, 0.5) or 0.0) * 1000:.0f} ms); targets past the 2 s timeout (marked failed, tick went on): "
              f"{failures}")
        mean_cpu = statistics.mean(cpu_self)
        print(f"  portal process CPU {mean_cpu * 1000:.0f} ms a tick = {100 * mean_cpu / SCRAPE_INTERVAL_S:.1f}% of one "
              f"core at a {SCRAPE_INTERVAL_S} s interval; the local-transport probes' children (bash, timeout and the simulated "
              f"nvidia-smi, a sh script) {statistics.mean(cpu_children) * 1000:.0f} ms (on real Sparks they run there)")
    finally:
        server.terminate()
        cluster_down(sim_root)
        Lane.objects.filter(name__startswith="bench-").delete()
        Node.objects.filter(name__startswith="bench-").delete()


# --- 4. socket fan-out -----------------------------------------------------------------------------

def session_cookie() -> str:
    ensure_role_groups()
    user, _ = User.objects.get_or_create(username="bench-viewer")
    user.groups.add(Group.objects.get(name=Role.VIEWER.value))
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


def proc_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tick_message() -> tuple[dict[str, Any], int]:
    """One tick's payload (every bench lane and node, with figures) and its size on a socket."""
    lanes = [Lane(name=f"bench-lane-{i:02d}", observed_state="serving") for i in range(LANES)]
    nodes = [Node(name=f"bench-node-{i:02d}", state="online") for i in range(NODES)]
    rng = random.Random(5)

    class Known:
        def __init__(self, kind: str, _name: str) -> None:
            self.ok, self.error = True, ""
            self.figures = json.loads(lane_values(rng) if kind == "lane" else node_values(rng))

    known: dict[tuple[str, str], Any] = {("lane", lane.name): Known("lane", lane.name) for lane in lanes}
    known.update({("node", node.name): Known("node", node.name) for node in nodes})
    payload = tick_payload(now=datetime.now(UTC), lanes=lanes, nodes=nodes, known=known, scraped=set(known))
    return payload, len(json.dumps({"event": "metrics.tick", "data": payload}))


async def fan_out(port: int, server_pid: int, cookie: str, payload: dict[str, Any], dashboards: int,
                  rounds: int) -> tuple[list[float], list[float], float]:
    """`rounds` broadcasts of the tick to `dashboards` open sockets: per round when the last
    one had it and how long the broadcast call took; the web process's CPU over the rounds."""
    for _ in range(100):
        try:
            await asyncio.open_connection("127.0.0.1", port)
            break
        except OSError:
            await asyncio.sleep(0.1)
    headers = {"Cookie": f"sessionid={cookie}", "Origin": f"http://127.0.0.1:{port}"}
    sockets = [await websockets.connect(f"ws://127.0.0.1:{port}/ws/dashboard/", additional_headers=headers,
                                        max_size=None) for _ in range(dashboards)]
    for ws in sockets:
        assert json.loads(await ws.recv())["event"] == "hello"

    async def receive(ws: Any) -> float:
        while True:
            message = json.loads(await ws.recv())
            if message["event"] == "metrics.tick":
                return time.perf_counter()

    latencies, sends = [], []
    relay_cpu = proc_cpu(server_pid)  # from here on: only the ticks
    loop = asyncio.get_running_loop()
    for _ in range(rounds):
        started = time.perf_counter()
        await loop.run_in_executor(None, broadcast, DASHBOARD_GROUP, "metrics.tick", payload)
        sends.append(time.perf_counter() - started)
        arrivals = await asyncio.gather(*(receive(ws) for ws in sockets))
        latencies.append(max(arrivals) - started)
        await asyncio.sleep(0.2)
    relay_cpu = proc_cpu(server_pid) - relay_cpu
    for ws in sockets:
        await ws.close()
    return latencies, sends, relay_cpu


def bench_fanout(dashboards: int, rounds: int) -> None:
    port = free_ports(1)[0]
    cookie = session_cookie()
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "portal.asgi:application", "--host", "127.0.0.1", "--port", str(port),
         "--log-level", "warning", "--lifespan", "off"], cwd=Path(__file__).resolve().parent.parent, env=dict(os.environ))
    payload, size = tick_message()
    try:
        time.sleep(1.0)
        cpu_before = None
        for _ in range(50):
            try:
                cpu_before = proc_cpu(server.pid)
                break
            except FileNotFoundError:
                time.sleep(0.1)
        latencies, sends, relay_cpu = asyncio.run(fan_out(port, server.pid, cookie, payload, dashboards, rounds))
        server_cpu = proc_cpu(server.pid) - (cpu_before or 0.0)
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:  # uvicorn waits for the sockets' graceful close
            server.kill()
            server.wait(timeout=10)
    p50, p95, worst = p50_p95_max(latencies)
    print(f"fan-out of one tick ({size / 1024:.1f} KiB: {LANES} lanes + {NODES} nodes) to {dashboards} dashboards, "
          f"{rounds} rounds:")
    print(f"  last dashboard has it after p50 {p50 * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms, max {worst * 1000:.0f} ms; "
          f"the broadcast call itself p50 {p50_p95_max(sends)[0] * 1000:.1f} ms (one Redis group_send)")
    print(f"  web process CPU relaying the {rounds} ticks: {relay_cpu:.2f} s (~{relay_cpu * 1000 / rounds:.0f} ms a tick); "
          f"in all, with starting up and {dashboards} connects: {server_cpu:.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--part", choices=("scrape", "history", "retention", "fanout", "all"), default="all")
    parser.add_argument("--ticks", type=int, default=10)
    parser.add_argument("--request-days", type=float, default=30.0,
                        help="days of request log at the peak rate (30 = the issue's 78M rows)")
    parser.add_argument("--dashboards", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--keep-history", action="store_true", help="skip writing the history (reuse the last run's)")
    args = parser.parse_args()
    if connection.vendor != "postgresql":
        raise SystemExit("DATABASE_URL must point at PostgreSQL (partitions, COPY)")
    now = datetime.now(UTC).replace(microsecond=0)
    if args.part in ("scrape", "all"):
        bench_scrape(args.ticks)
    if args.part in ("history", "retention", "all"):
        if not args.keep_history:
            write_history(now, args.request_days)
        else:  # the history ends when it was written
            now = Sample.objects.filter(target__startswith="bench-lane-").latest("ts").ts + timedelta(seconds=5)
        started = time.perf_counter()
        days = usage_day_rollup(first=(now - timedelta(days=31)).date(), last=now.date())
        print(f"daily usage rollup of 31 days from the hourly one: {days:,} rows in {time.perf_counter() - started:.1f} s")
        bench_queries(now)
    if args.part in ("retention", "all"):
        bench_retention(now)
    if args.part in ("fanout", "all"):
        bench_fanout(args.dashboards, args.rounds)


if __name__ == "__main__":
    main()
