"""perf/live_metrics.py's history parts: a month of history written with COPY (samples of
every tier, hourly usage, the request log at the peak rate), the chart, usage, gateway and
request-log queries and pages over it, and the retention step on it; with what the scrape
and fan-out parts share. Not a script: `python -m perf.live_metrics --part history` runs it, after Django's set-up
(so this module imports models at its top).
"""

from __future__ import annotations

import json
import math
import random
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime, timedelta
from typing import Any

from django.contrib.auth.models import Group, User
from django.db import connection
from django.test import Client, override_settings

from core.roles import Role, ensure_role_groups
from core.stats import percentile_nearest_rank
from gateway.models import ApiKey, RequestLog
from gateway.selectors import LogFilters, request_log_list
from metrics.charts import chart_series, gateway_traffic
from metrics.exposition import render_metrics
from metrics.models import LATENCY_BUCKETS_MS, Sample
from metrics.partitions import partition_name
from metrics.selectors import (
    gateway_live,
    gateway_summary,
    sparklines,
)
from metrics.storage import floor_to, storage_maintain, usage_fold
from metrics.usage import usage_table

LANES, NODES = 50, 20
PEAK_REQUESTS_PER_MINUTE = 1800  # seed 000's production peak
LANE_SERIES = ("gen_tps", "prompt_tps", "running", "waiting", "kv_pct", "prefix_hit_pct", "req_ps", "preempt_ps",
               "ttft_p50_ms", "ttft_p95_ms", "itl_p50_ms", "itl_p95_ms", "e2e_p50_ms", "e2e_p95_ms",
               "spec_accept_pct", "spec_accept_len")
NODE_SERIES = ("mem_avail_gib", "swap_used_gib", "cpu_pct", "gpu_util_pct", "gpu_power_w", "gpu_temp_c",
               "roce_tx_Bps", "roce_rx_Bps")


def p50_p95_max(values: list[float]) -> tuple[float, float, float]:
    """Nearest rank, as every timing of the portal's own in perf/: observed times."""
    return (percentile_nearest_rank(values, 0.5) or 0.0, percentile_nearest_rank(values, 0.95) or 0.0,
            max(values, default=0.0))


# --- a month of history with COPY ---------------------------------------------------------

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


def admin_client() -> Client:
    ensure_role_groups()
    user, _ = User.objects.get_or_create(username="bench-admin")
    user.groups.add(Group.objects.get(name=Role.ADMIN.value))
    client = Client(HTTP_HOST="localhost")  # an allowed host (the test runner's "testserver" is not)
    client.force_login(user)
    return client


def timed(label: str, query: Callable[[], Any], repeats: int = 30) -> None:
    query()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        query()
        times.append(time.perf_counter() - started)
    p50, p95, worst = p50_p95_max(times)
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
    timed("request log page, key filter, 30 days", lambda: list(
        request_log_list(filters=LogFilters(key_id=RequestLog.objects.values_list("key_id", flat=True)[0]), limit=51)))
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


# --- retention on that history --------------------------------------------------------------

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
          f"(before: p50 {p50_p95_max(baseline)[0] * 1000:.1f} ms)")
