"""The usage page's queries over 30 days of request log at seed 000's rate (14,500 requests a
day: 435,000 rows, written with COPY a day a partition), rolled up hour by hour by the
portal's own rollup: the charts' series (hour, 6-hour and day buckets, per team, key, lane and
model, with their cost), a member's view, the usage table, the request log's search (request
id, team, prompt words) and the CSV export. Goal (issue 29): the usage queries' p95 ≤ 100 ms.
`--explain` prints, for each query, PostgreSQL's plan (EXPLAIN ANALYZE) of its slowest SQL
statement instead of timing it.

A scratch database — the script empties the request log and the usage rollups:

    export DATABASE_URL=postgres://postgres@127.0.0.1:5432/usage_bench REDIS_URL=redis://127.0.0.1:6379/5
    createdb -h 127.0.0.1 -U postgres usage_bench; .venv/bin/python manage.py migrate -v0
    .venv/bin/python -m perf.usage_queries [--days 30] [--per-day 14500] [--repeats 30] [--keep] [--explain]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

import django  # noqa: E402

django.setup()

from django.contrib.auth.models import User  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import override_settings  # noqa: E402

from gateway.models import ApiKey, RequestLog, Team  # noqa: E402
from gateway.selectors import LogFilters, request_log_list  # noqa: E402
from lanes.models import Lane, Node  # noqa: E402
from metrics.storage import floor_to, storage_maintain, usage_rollup  # noqa: E402
from metrics.usage import UsageQuery, usage_series, usage_table  # noqa: E402
from metrics.views import request_csv_row  # noqa: E402
from perf.live_metrics_history import REQUEST_COLUMNS, copy_day_partitions, days_between, timed  # noqa: E402

LANES = ("coder", "orchestrator", "small")  # seed 000: 3 Sparks, a lane on each
WORDS = ("refactor", "billing", "module", "tests", "migrate", "schema", "explain", "diff", "review", "deploy")


def setup_seed() -> tuple[list[int], list[int]]:
    """3 nodes, 3 lanes, 2 teams, 5 keys (four OpenCode agents and an orchestrator; the
    orchestrator stores its prompts): (key ids, the first team's key ids)."""
    ApiKey.objects.filter(name__startswith="bench-").delete()
    Team.objects.filter(name__startswith="bench-").delete()
    Lane.objects.filter(name__startswith="bench-").delete()
    for i, name in enumerate(LANES):
        node, _ = Node.objects.get_or_create(name=f"bench-spark{i}", defaults={"address": f"127.0.1.{i + 1}",
                                                                              "transport": "local"})
        lane = Lane.objects.create(name=f"bench-{name}", model_id=f"org/{name}", image="x@sha256:" + "0" * 64,
                                   max_model_len=32768, served_model_name=f"model-{name}")
        lane.members.create(node=node, rank=0)
    agents, ops = Team.objects.create(name="bench-agents"), Team.objects.create(name="bench-ops")
    keys = [ApiKey.objects.create(name=f"bench-agent-{i}", prefix=f"sk-bench-a{i}", secret_hash=f"a{i:063d}",
                                  team=agents) for i in range(4)]
    keys.append(ApiKey.objects.create(name="bench-orchestrator", prefix="sk-bench-o", secret_hash="o" * 64,
                                      team=ops, log_prompts=True))
    return [k.pk for k in keys], [k.pk for k in keys[:4]]


def request_lines(start: datetime, end: datetime, per_day: int, keys: list[int],
                  first_id: int) -> Callable[[date], Iterator[str]]:
    """One request every 86,400 / per_day seconds, drawn from 4,096 pre-drawn tails (key,
    lane, 2% errors, long prompts, lognormal latency around 2.5 s; the orchestrator's with a
    prompt of a few words)."""
    rng = random.Random(29)
    tails = []
    for _ in range(4096):
        key = rng.choice(keys)
        status = 200 if rng.random() > 0.02 else rng.choice((429, 502))
        latency = rng.lognormvariate(7.8, 0.6)
        text = " ".join(rng.sample(WORDS, 4)) if key == keys[-1] else ""
        tails.append(f"\t{key}\tchat.completions\tauto\tbench-{rng.choice(LANES)}\trouter\t\tf\t{status}\t"
                     f"{'' if status == 200 else 'upstream_error'}\t{rng.randrange(2000, 30000)}\t"
                     f"{rng.randrange(50, 1500)}\t{latency * 0.2:.1f}\t{latency:.1f}\t{latency * 0.97:.1f}\t{text}\n")
    step = 86400 / per_day
    begin, stop = start.timestamp(), end.timestamp()

    def lines(day: date) -> Iterator[str]:
        day_start = datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp()
        n = max(0, int((day_start - begin) / step))
        while True:
            at = begin + n * step
            if at >= day_start + 86400 or at >= stop:
                return
            if at >= day_start:
                stamp = datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S.%f+00")
                row_id = first_id + n
                yield f"{row_id}\t{stamp}\treq-{row_id:024x}{tails[n % len(tails)]}"
            n += 1

    return lines


def write(now: datetime, days: int, per_day: int, keys: list[int]) -> None:
    with connection.cursor() as cursor:
        for table in ("metrics_usagehour", "metrics_usagesixhours", "metrics_usageday", "metrics_gatewayday",
                  "routing_requestlog"):
            cursor.execute(f"TRUNCATE {table}")
    start = now - timedelta(days=days)
    with override_settings(METRICS_PARTITIONS_AHEAD_DAYS=days + 2):
        storage_maintain(now=start - timedelta(days=1))
    began = time.perf_counter()
    rows = copy_day_partitions("routing_requestlog", REQUEST_COLUMNS, days_between(start, now),
                               request_lines(start, now, per_day, keys, 1))
    print(f"request log: {rows:,} rows ({days} days at {per_day:,} a day) with COPY in "
          f"{time.perf_counter() - began:.1f} s", flush=True)
    with connection.cursor() as cursor:
        cursor.execute("SELECT setval('routing_requestlog_id_seq', (SELECT max(id) FROM routing_requestlog))")
        cursor.execute("ANALYZE routing_requestlog")
    began = time.perf_counter()
    hour = floor_to(start, 3600)
    while hour <= now:
        usage_rollup(now=min(hour + timedelta(minutes=59, seconds=59), now), hours_back=0)
        hour += timedelta(hours=1)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    print(f"hourly, 6-hour and daily rollups of every hour by metrics.storage.usage_rollup: "
          f"{time.perf_counter() - began:.1f} s", flush=True)


def explain(label: str, query: Callable[[], object]) -> None:
    """The plan of the query's slowest SQL statement, run again under EXPLAIN ANALYZE."""
    statements: list[tuple[float, str, Any]] = []

    def record(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        began = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            statements.append((time.perf_counter() - began, sql, params))

    query()
    with connection.execute_wrapper(record):
        query()
    _, sql, params = max(statements, key=lambda s: s[0])
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS) {sql}", params)
        plan = [row[0] for row in cursor.fetchall()]
    print(f"--- {label}: {len(statements)} statements, the slowest:")
    print("\n".join(f"    {line}" for line in plan))


def bench(now: datetime, repeats: int, team_keys: list[int], *, plans: bool = False) -> None:
    member = frozenset(team_keys)
    some_id = RequestLog.objects.order_by("id").values_list("request_id", flat=True)[len(team_keys) * 1000]
    print(f"{repeats} runs each after one warm-up (nearest-rank p50/p95):")
    queries: list[tuple[str, Callable[[], object]]] = [
        ("series per key, hour buckets, 1 day", lambda: usage_series(UsageQuery("hour", "key", 1), now=now)),
        ("series per team, hour buckets, 2 days (the most)",
         lambda: usage_series(UsageQuery("hour", "team", 2), now=now)),
        ("series per team, 6-hour buckets, 7 days", lambda: usage_series(UsageQuery("6h", "team", 7), now=now)),
        ("series per lane, 6-hour buckets, 14 days", lambda: usage_series(UsageQuery("6h", "lane", 14), now=now)),
        ("series per key, day buckets, 30 days", lambda: usage_series(UsageQuery("day", "key", 30), now=now)),
        ("series per model, day buckets, 30 days", lambda: usage_series(UsageQuery("day", "model", 30), now=now)),
        ("a member's series (4 keys), day buckets, 30 days",
         lambda: usage_series(UsageQuery("day", "key", 30, key_ids=member), now=now)),
        ("usage table per key per day, 30 days",
         lambda: usage_table(period="day", group="key", since=now - timedelta(days=30))),
        ("request log: by request id, 30 days",
         lambda: list(request_log_list(filters=LogFilters(request_id=some_id), limit=51))),
        ("request log: by team, 30 days",
         lambda: list(request_log_list(filters=LogFilters(team_id=Team.objects.get(name="bench-ops").pk), limit=51))),
        ("request log: prompt words 'billing refactor', 30 days",
         lambda: list(request_log_list(filters=LogFilters(text="billing refactor"), limit=51))),
        ("request log: a word no prompt has (scans the opted-in key's rows)",
         lambda: list(request_log_list(filters=LogFilters(text="kubernetes"), limit=51))),
    ]
    for label, query in queries:
        if plans:
            explain(label, query)
        else:
            timed(label, query, repeats)
    if plans:
        return
    began = time.perf_counter()
    day = LogFilters(since=now - timedelta(days=1), until=now)
    rows = sum(1 for _ in map(request_csv_row, request_log_list(filters=day, limit=None).iterator(chunk_size=2000)))
    print(f"CSV export rows of the last day: {rows:,} in {time.perf_counter() - began:.2f} s (server-side cursor)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--per-day", type=int, default=14_500, help="seed 000's requests a day")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--keep", action="store_true", help="reuse the last run's rows (its end is now)")
    parser.add_argument("--explain", action="store_true", help="print each query's plan instead of timing it")
    args = parser.parse_args()
    if connection.vendor != "postgresql":
        raise SystemExit("DATABASE_URL must point at a scratch PostgreSQL database (partitions, COPY)")
    User.objects.get_or_create(username="bench-admin")
    if args.keep:
        now = RequestLog.objects.latest("created_at").created_at + timedelta(seconds=1)
        team_keys = list(ApiKey.objects.filter(team__name="bench-agents").values_list("pk", flat=True))
    else:
        now = datetime.now(UTC).replace(microsecond=0)
        keys, team_keys = setup_seed()
        write(now, args.days, args.per_day, keys)
    bench(now, args.repeats, team_keys, plans=args.explain)


if __name__ == "__main__":
    main()
