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
import math
import multiprocessing
import os
import random
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime, timedelta
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
from django.test import Client, override_settings  # noqa: E402

from core.broadcast import DASHBOARD_GROUP, broadcast  # noqa: E402
from core.http import async_http_client  # noqa: E402
from core.roles import Role, ensure_role_groups  # noqa: E402
from gateway.models import ApiKey, RequestLog  # noqa: E402
from gateway.selectors import LogFilters, request_log_list  # noqa: E402
from lanes.models import Lane, LaneNode, Node  # noqa: E402
from metrics.exposition import render_metrics  # noqa: E402
from metrics.models import LATENCY_BUCKETS_MS, Sample  # noqa: E402
from metrics.partitions import partition_name  # noqa: E402
from metrics.scraper import scrape_all  # noqa: E402
from metrics.selectors import (  # noqa: E402
    chart_series,
    gateway_live,
    gateway_summary,
    gateway_traffic,
    sparklines,
    usage_table,
)
from metrics.services import scrape_targets, tick_payload, tick_record  # noqa: E402
from metrics.storage import floor_to, storage_maintain, usage_day_rollup, usage_fold  # noqa: E402
from sparksim.cluster import cluster_down, cluster_up  # noqa: E402
from sparksim.engine.metrics import EngineMetrics  # noqa: E402

LANES, NODES = 50, 20
PEAK_REQUESTS_PER_MINUTE = 1800  # seed 000's production peak
SCRAPE_INTERVAL_S = 5
LANE_SERIES = ("gen_tps", "prompt_tps", "running", "waiting", "kv_pct", "prefix_hit_pct", "req_ps", "preempt_ps",
               "ttft_p50_ms", "ttft_p95_ms", "itl_p50_ms", "itl_p95_ms", "e2e_p50_ms", "e2e_p95_ms",
               "spec_accept_pct", "spec_accept_len")
NODE_SERIES = ("mem_avail_gib", "swap_used_gib", "cpu_pct", "gpu_util_pct", "gpu_power_w", "gpu_temp_c",
               "roce_tx_Bps", "roce_rx_Bps")


def quantiles(values: list[float]) -> tuple[float, float, float]:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return statistics.median(ordered), p95, ordered[-1]


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
        wall = quantiles(walls)
        what = f"{LANES} lanes + {NODES} simulated Sparks" if with_nodes else f"{LANES} lanes only"
        print(f"scrape tick, {what} ({len(results)} targets), {ticks} ticks, load average {os.getloadavg()[0]:.1f} "
              f"on {os.cpu_count()} cores:")
        print(f"  wall p50 {wall[0] * 1000:.0f} ms, p95 {wall[1] * 1000:.0f} ms, max {wall[2] * 1000:.0f} ms "
              f"(network {statistics.median(network) * 1000:.0f} ms + store/alerts/broadcast "
              f"{statistics.median(record) * 1000:.0f} ms); targets past the 2 s timeout (marked failed, tick went on): "
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


# --- 2. a month of history with COPY ---------------------------------------------------------

def lane_values(rng: random.Random) -> str:
    return json.dumps({name: round(rng.uniform(0, 500), 2) for name in LANE_SERIES})


def node_values(rng: random.Random) -> str:
    return json.dumps({name: round(rng.uniform(0, 120), 2) for name in NODE_SERIES})


def sample_rows(start: datetime, end: datetime, step_s: int, peaks: bool) -> Iterator[tuple[Any, ...]]:
    rng = random.Random(7)
    lanes = [lane_values(rng) for _ in range(64)]
    nodes = [node_values(rng) for _ in range(64)]
    at = start
    i = 0
    while at < end:
        for lane in range(LANES):
            values = lanes[(i + lane) % 64]
            yield ("lane", f"bench-lane-{lane:02d}", at, values, values) if peaks else ("lane", f"bench-lane-{lane:02d}", at, values)
        for node in range(NODES):
            values = nodes[(i + node) % 64]
            yield ("node", f"bench-node-{node:02d}", at, values, values) if peaks else ("node", f"bench-node-{node:02d}", at, values)
        at += timedelta(seconds=step_s)
        i += 1


def copy_rows(table: str, columns: str, rows: Iterator[tuple[Any, ...]]) -> int:
    count = 0
    with connection.cursor() as cursor, cursor.cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)
            count += 1
    return count


def copy_day_partitions(table: str, columns: str, days: list[date], lines: Callable[[date], Iterator[str]]) -> int:
    """Each day into a table of its own with COPY (no index, no foreign-key trigger per row),
    then ATTACHed as that day's partition: PostgreSQL builds its indexes and checks its
    foreign keys once per table — how a backfill of tens of millions of rows is done."""
    count = 0
    with connection.cursor() as cursor:
        cursor.execute("SET maintenance_work_mem = '256MB'")
        for day in days:
            name = partition_name(table, day)
            cursor.execute(f'DROP TABLE IF EXISTS "{name}"')
            cursor.execute(f'CREATE TABLE "{name}" (LIKE "{table}" INCLUDING DEFAULTS INCLUDING CONSTRAINTS)')
            with cursor.cursor.copy(f'COPY "{name}" ({columns}) FROM STDIN') as copy:
                chunk: list[str] = []
                for line in lines(day):
                    chunk.append(line)
                    if len(chunk) >= 20_000:
                        copy.write("".join(chunk))
                        count += len(chunk)
                        chunk = []
                copy.write("".join(chunk))
                count += len(chunk)
            end = day + timedelta(days=1)
            cursor.execute(f"ALTER TABLE \"{table}\" ATTACH PARTITION \"{name}\" "
                           f"FOR VALUES FROM ('{day.isoformat()}T00:00:00+00:00') TO ('{end.isoformat()}T00:00:00+00:00')")
    return count


def day_seconds(day: date, start: datetime, end: datetime, step_s: int) -> Iterator[str]:
    """Timestamps (PostgreSQL text) every step_s seconds of the day, within [start, end)."""
    at = max(start, datetime(day.year, day.month, day.day, tzinfo=UTC))
    at += timedelta(seconds=(-int(at.timestamp())) % step_s)
    stop = min(end, datetime(day.year, day.month, day.day, tzinfo=UTC) + timedelta(days=1))
    while at < stop:
        yield at.strftime("%Y-%m-%d %H:%M:%S+00")
        at += timedelta(seconds=step_s)


def sample_lines(start: datetime, end: datetime, step_s: int, peaks: bool) -> Callable[[date], Iterator[str]]:
    rng = random.Random(7)
    targets = [("lane", f"bench-lane-{i:02d}", [lane_values(rng) for _ in range(8)]) for i in range(LANES)]
    targets += [("node", f"bench-node-{i:02d}", [node_values(rng) for _ in range(8)]) for i in range(NODES)]

    def lines(day: date) -> Iterator[str]:
        for i, ts in enumerate(day_seconds(day, start, end, step_s)):
            for kind, target, variants in targets:
                values = variants[i % 8]
                yield f"{kind}\t{target}\t{ts}\t{values}\t{values}\n" if peaks else f"{kind}\t{target}\t{ts}\t{values}\n"

    return lines


REQUEST_COLUMNS = ("id, created_at, request_id, key_id, endpoint, requested_model, lane, route_reason, route_label, "
                   "stream, status, error_code, prompt_tokens, completion_tokens, ttft_ms, latency_ms, upstream_ms, "
                   "prompt_text")


def request_lines(start: datetime, end: datetime, keys: list[int]) -> Callable[[date], Iterator[str]]:
    """The request log at the peak rate (1,800 a minute = 30 a second), each row one of 8,192
    pre-drawn rows (lane, key, status — 2% errors — tokens, lognormal latency)."""
    rng = random.Random(11)
    tails = []
    for _ in range(8192):
        status = 200 if rng.random() > 0.02 else rng.choice((429, 502, 504))
        latency = rng.lognormvariate(7.0, 0.8)
        tails.append(f"\tbench\t{rng.choice(keys)}\tchat.completions\tauto\tbench-lane-{rng.randrange(LANES):02d}"
                     f"\trouter\t\tf\t{status}\t{'' if status == 200 else 'upstream_error'}\t"
                     f"{rng.randrange(50, 4000)}\t{rng.randrange(10, 800)}\t{latency * 0.1:.1f}\t{latency:.1f}\t"
                     f"{latency * 0.95:.1f}\t\n")
    per_second = PEAK_REQUESTS_PER_MINUTE // 60
    fractions = [f".{int(j * 1_000_000 / per_second):06d}" for j in range(per_second)]
    first = int(start.timestamp())

    def lines(day: date) -> Iterator[str]:
        for ts in day_seconds(day, start, end, 1):
            picks = rng.choices(tails, k=per_second)
            second = int(datetime.strptime(ts, "%Y-%m-%d %H:%M:%S+00").replace(tzinfo=UTC).timestamp()) - first
            base = second * per_second + 1
            stamp = ts[:-3]
            for j in range(per_second):
                yield f"{base + j}\t{stamp}{fractions[j]}+00{picks[j]}"

    return lines


def days_between(start: datetime, end: datetime) -> list[date]:
    return [start.date() + timedelta(days=i) for i in range((end.date() - start.date()).days + 1)]


def usage_rows(start: datetime, end: datetime, keys: list[int]) -> Iterator[tuple[Any, ...]]:
    rng = random.Random(13)
    hour = start
    per_hour = PEAK_REQUESTS_PER_MINUTE * 60
    while hour < end:
        for key in keys:
            for lane in rng.sample(range(LANES), 5):
                for status, share in ((200, 0.98), (429, 0.01), (502, 0.01)):
                    n = int(per_hour * share / (len(keys) * 5))
                    buckets = [int(n * min(1.0, bound / 3000)) for bound in LATENCY_BUCKETS_MS]
                    ttft = [*(int(n * min(1.0, bound / 300)) for bound in LATENCY_BUCKETS_MS), n]
                    yield (hour, key, f"key-{key}", f"bench-lane-{lane:02d}", status, "router", n,
                           n if status >= 400 else 0, n * 900, n * 250, n * 1100.0, n * 110.0, n, json.dumps(buckets),
                           json.dumps(ttft))
        hour += timedelta(hours=1)


def write_history(now: datetime, request_days: float) -> None:
    with connection.cursor() as cursor:
        for table in ("metrics_sample", "metrics_sampleminute", "metrics_samplehour", "metrics_usagehour",
                      "metrics_usageday", "metrics_gatewayday", "metrics_gatewaytotal", "metrics_gatewaytotalmark",
                      "routing_requestlog"):
            cursor.execute(f"TRUNCATE {table}")
    ApiKey.objects.filter(name__startswith="bench-key-").delete()
    keys = [ApiKey.objects.create(name=f"bench-key-{i}", prefix=f"sk-bench-{i}", secret_hash=f"{i:064d}").pk
            for i in range(20)]
    with override_settings(METRICS_PARTITIONS_AHEAD_DAYS=32):
        storage_maintain(now=now - timedelta(days=31))
    raw_start, month_start = now - timedelta(days=3), now - timedelta(days=30)
    request_start = now - timedelta(days=request_days)
    plan: list[tuple[str, Callable[[], int]]] = [
        ("raw samples (3 days at 5 s)", lambda: copy_day_partitions(
            "metrics_sample", "kind, target, ts, values", days_between(raw_start, now),
            sample_lines(raw_start, now, 5, False))),
        ("1-minute samples (30 days)", lambda: copy_day_partitions(
            "metrics_sampleminute", "kind, target, ts, values, peaks", days_between(month_start, now),
            sample_lines(month_start, now, 60, True))),
        ("1-hour samples (30 days)", lambda: copy_rows(
            "metrics_samplehour", "kind, target, ts, values, peaks",
            sample_rows(month_start, now, 3600, True))),
        ("hourly usage (30 days)", lambda: copy_rows(
            "metrics_usagehour", "hour, key_id, key_name, lane, status, route, requests, errors, prompt_tokens, "
            "completion_tokens, latency_ms_sum, ttft_ms_sum, ttft_count, latency_buckets, ttft_buckets",
            usage_rows(month_start, now, keys))),
        (f"request log ({request_days:g} days at {PEAK_REQUESTS_PER_MINUTE}/min)", lambda: copy_day_partitions(
            "routing_requestlog", REQUEST_COLUMNS, days_between(request_start, now),
            request_lines(request_start, now, keys))),
    ]
    print("history written with COPY (each day into its own table, then attached as that day's partition):")
    for label, write in plan:
        started = time.perf_counter()
        rows = write()
        print(f"  {label}: {rows:,} rows in {time.perf_counter() - started:.1f} s", flush=True)
    with connection.cursor() as cursor:
        cursor.execute("SELECT setval('routing_requestlog_id_seq', (SELECT max(id) FROM routing_requestlog))")
        started = time.perf_counter()
        cursor.execute("ANALYZE")
        print(f"  ANALYZE {time.perf_counter() - started:.1f} s")
        cursor.execute("SELECT pg_size_pretty(sum(pg_total_relation_size(i.inhrelid))) FROM pg_inherits i "
                       "JOIN pg_class p ON p.oid = i.inhparent WHERE p.relname = 'routing_requestlog'")
        print(f"  request log on disk (tables and indexes): {cursor.fetchone()[0]}")


def timed(label: str, query: Callable[[], Any], repeats: int = 30) -> None:
    query()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        query()
        times.append(time.perf_counter() - started)
    p50, p95, worst = quantiles(times)
    print(f"  {label:<52} p50 {p50 * 1000:6.1f} ms  p95 {p95 * 1000:6.1f} ms  max {worst * 1000:6.1f} ms")


def bench_queries(now: datetime) -> None:
    rng = random.Random(3)

    def lane() -> str:
        return f"bench-lane-{rng.randrange(LANES):02d}"

    print("queries (each 30 times after one warm-up):")
    timed("lane chart 15 min (raw)", lambda: chart_series("lane", lane(), "15m", now=now))
    timed("lane chart 6 h (1-minute tier)", lambda: chart_series("lane", lane(), "6h", now=now))
    timed("lane chart 7 days (1-hour tier)", lambda: chart_series("lane", lane(), "7d", now=now))
    timed("node chart 6 h", lambda: chart_series("node", "bench-node-03", "6h", now=now))
    timed("dashboard sparklines, 50 lanes x 5 min (raw)", lambda: sparklines("lane", now=now))
    timed("usage per key per day, 30 days", lambda: usage_table(period="day", group="key", since=now - timedelta(days=30)))
    timed("usage per lane per month, 30 days", lambda: usage_table(period="month", group="lane",
                                                                  since=now - timedelta(days=30)))
    timed("gateway summary 30 days (rollup, percentiles)", lambda: gateway_summary("30d", now=now))
    timed("gateway live, last 5 min of the request log", lambda: gateway_live(now=now))
    timed("gateway traffic per minute, last hour", lambda: gateway_traffic(now=now))
    timed("gateway summary 7 days (daily rollup)", lambda: gateway_summary("7d", now=now))
    timed("gateway summary 24 h (hourly rollup)", lambda: gateway_summary("24h", now=now))
    # One second past the hour: the partial first hour read from the request log is ~59 min long.
    worst = floor_to(now, 3600) + timedelta(seconds=1)
    timed("gateway summary 1 h, 59 min of it from the request log", lambda: gateway_summary("1h", now=worst))
    timed("gateway summary 24 h, 59 min of it from the request log", lambda: gateway_summary("24h", now=worst))
    usage_fold(before=floor_to(now, 3600) - timedelta(hours=1))
    timed("/metrics exposition (running totals + unfolded hours)", render_metrics)
    timed("request log page, lane + status filter, last day", lambda: list(request_log_list(
        filters=LogFilters(lane=lane(), status="502", since=now - timedelta(days=1)), limit=51)))
    timed("request log page, lane + status filter, 30 days", lambda: list(
        request_log_list(filters=LogFilters(lane=lane(), status="502"), limit=51)))
    timed("request log page, status filter, 30 days", lambda: list(
        request_log_list(filters=LogFilters(status="504"), limit=51)))
    timed("request log page, key filter, 30 days", lambda: list(request_log_list(
        filters=LogFilters(key_id=RequestLog.objects.values_list("key_id", flat=True)[0]), limit=51)))
    timed("request log page, no filter", lambda: list(request_log_list(filters=LogFilters(), limit=51)))
    admin = admin_client()

    def page(path: str) -> None:
        response = admin.get(path)
        assert response.status_code == 200, (path, response.status_code)

    print("pages (an admin's GET through Django, rendered; each 30 times after one warm-up):")
    timed("/monitor/requests/?lane=..&status=502", lambda: page(f"/monitor/requests/?lane={lane()}&status=502"))
    timed("/monitor/requests/ (no filter)", lambda: page("/monitor/requests/"))
    timed("/monitor/gateway/?range=30d", lambda: page("/monitor/gateway/?range=30d"))
    timed("/monitor/usage/?period=day&by=key&days=30", lambda: page("/monitor/usage/?period=day&by=key&days=30"))
    timed("/api/metrics/series/lane/<lane>?range=6h", lambda: page(f"/api/metrics/series/lane/{lane()}?range=6h"))
    print("queries (continued):")
    oldest_id = RequestLog.objects.order_by("id").values_list("id", flat=True)[0]
    timed("request log, a page 29 days back (keyset: id < x)", lambda: list(
        request_log_list(filters=LogFilters(lane=lane()), limit=51, before_id=oldest_id + 60_000)))


# --- 3. retention on that history --------------------------------------------------------------

def bench_retention(now: datetime) -> None:
    """Drop the oldest raw, 1-minute and request-log days while a writer inserts every 5 ms:
    the writer's slowest insert is the lock time the drop cost it."""
    stop = threading.Event()
    waits: list[float] = []

    def writer() -> None:
        try:
            while not stop.is_set():
                started = time.perf_counter()
                Sample.objects.bulk_create([Sample(kind="lane", target="bench-writer", ts=datetime.now(UTC), values={})],
                                           ignore_conflicts=True)
                RequestLog.objects.create(request_id="w", endpoint="chat.completions", status=200, latency_ms=1.0)
                waits.append(time.perf_counter() - started)
                time.sleep(0.005)
        finally:
            connection.close()

    thread = threading.Thread(target=writer)
    thread.start()
    time.sleep(0.5)
    baseline = list(waits)
    oldest = RequestLog.objects.order_by("created_at").values_list("created_at", flat=True)[0]
    request_days = max(1, math.ceil((now - oldest).total_seconds() / 86400) - 1)
    # One day past each retention: the oldest day of each tier (with its rows) is dropped.
    with override_settings(METRICS_RAW_RETENTION_DAYS=2, METRICS_MINUTE_RETENTION_DAYS=29,
                           GATEWAY_LOG_RETENTION_DAYS=request_days):
        started = time.perf_counter()
        report = storage_maintain(now=now)
        elapsed = time.perf_counter() - started
    time.sleep(0.3)
    stop.set()
    thread.join()
    during = waits[len(baseline):]
    print(f"retention step on that history: {elapsed * 1000:.0f} ms in all; dropped {len(report['dropped'])} partitions "
          f"({', '.join(report['dropped'])}) in {report['seconds']['drop'] * 1000:.0f} ms; hour-tier DELETE "
          f"{report['seconds']['delete'] * 1000:.0f} ms")
    print(f"  a writer inserting every 5 ms meanwhile: slowest insert {max(during) * 1000:.1f} ms "
          f"(before: p50 {statistics.median(baseline) * 1000:.1f} ms)")


# --- 4. socket fan-out -----------------------------------------------------------------------------

def admin_client() -> Client:
    ensure_role_groups()
    user, _ = User.objects.get_or_create(username="bench-admin")
    user.groups.add(Group.objects.get(name=Role.ADMIN.value))
    client = Client(HTTP_HOST="localhost")  # an allowed host (the test runner's "testserver" is not)
    client.force_login(user)
    return client


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


def bench_fanout(dashboards: int, rounds: int) -> None:
    port = free_ports(1)[0]
    cookie = session_cookie()
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "portal.asgi:application", "--host", "127.0.0.1", "--port", str(port),
         "--log-level", "warning", "--lifespan", "off"], cwd=Path(__file__).resolve().parent.parent, env=dict(os.environ))
    lanes = [Lane(name=f"bench-lane-{i:02d}", observed_state="serving") for i in range(LANES)]
    nodes = [Node(name=f"bench-node-{i:02d}", state="online") for i in range(NODES)]
    rng = random.Random(5)

    class Known:
        def __init__(self, kind: str, name: str) -> None:
            self.ok, self.error = True, ""
            self.figures = json.loads(lane_values(rng) if kind == "lane" else node_values(rng))

    known: dict[tuple[str, str], Any] = {("lane", lane.name): Known("lane", lane.name) for lane in lanes}
    known.update({("node", node.name): Known("node", node.name) for node in nodes})
    payload = tick_payload(now=datetime.now(UTC), lanes=lanes, nodes=nodes, known=known, scraped=set(known))
    size = len(json.dumps({"event": "metrics.tick", "data": payload}))

    async def run() -> tuple[list[float], list[float], float]:
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
        latencies, sends = [], []
        relay_cpu = proc_cpu(server.pid)  # from here on: only the ticks
        loop = asyncio.get_running_loop()
        for _ in range(rounds):
            started = time.perf_counter()
            await loop.run_in_executor(None, broadcast, DASHBOARD_GROUP, "metrics.tick", payload)
            sends.append(time.perf_counter() - started)

            async def receive(ws: Any) -> float:
                while True:
                    message = json.loads(await ws.recv())
                    if message["event"] == "metrics.tick":
                        return time.perf_counter()

            arrivals = await asyncio.gather(*(receive(ws) for ws in sockets))
            latencies.append(max(arrivals) - started)
            await asyncio.sleep(0.2)
        relay_cpu = proc_cpu(server.pid) - relay_cpu
        for ws in sockets:
            await ws.close()
        return latencies, sends, relay_cpu

    try:
        time.sleep(1.0)
        cpu_before = None
        for _ in range(50):
            try:
                cpu_before = proc_cpu(server.pid)
                break
            except FileNotFoundError:
                time.sleep(0.1)
        latencies, sends, relay_cpu = asyncio.run(run())
        server_cpu = proc_cpu(server.pid) - (cpu_before or 0.0)
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:  # uvicorn waits for the sockets' graceful close
            server.kill()
            server.wait(timeout=10)
    p50, p95, worst = quantiles(latencies)
    print(f"fan-out of one tick ({size / 1024:.1f} KiB: {LANES} lanes + {NODES} nodes) to {dashboards} dashboards, "
          f"{rounds} rounds:")
    print(f"  last dashboard has it after p50 {p50 * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms, max {worst * 1000:.0f} ms; "
          f"the broadcast call itself p50 {statistics.median(sends) * 1000:.1f} ms (one Redis group_send)")
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
