"""Samples in, downsamples and retention (services). Raw rows come from each scrape; a
1-minute and a 1-hour tier keep long history small; retention drops whole daily
partitions on PostgreSQL and deletes rows on SQLite."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from datetime import UTC, date, datetime, timedelta
from typing import Any, cast

from django.conf import settings
from django.db import transaction
from django.db.models import Aggregate, Count, FloatField, Max, Min, Q, QuerySet, Sum, Value
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, ExtractHour, Floor, TruncDate

from gateway.durable import keyed_request_purge
from gateway.models import RequestLog
from gateway.services import request_log_purge, request_outcome_purge
from metrics.models import (
    LATENCY_BUCKETS_MS,
    GatewayDay,
    GatewayTotal,
    GatewayTotalMark,
    Sample,
    SampleHour,
    SampleMinute,
    TargetKind,
    UsageDay,
    UsageHour,
    UsageSixHours,
)
from metrics.partitions import drop_partitions_before, ensure_partitions, partitioned

PARTITIONED_TABLES = ("metrics_sample", "metrics_sampleminute", "routing_requestlog")
Figures = Mapping[str, float]


def _rounded(figures: Figures) -> dict[str, float]:
    return {name: round(value, 4) for name, value in figures.items()}


def samples_store(*, at: datetime, lanes: Mapping[str, Figures], nodes: Mapping[str, Figures]) -> int:
    rows = [Sample(kind=TargetKind.LANE, target=name, ts=at, values=_rounded(f)) for name, f in lanes.items() if f]
    rows += [Sample(kind=TargetKind.NODE, target=name, ts=at, values=_rounded(f)) for name, f in nodes.items() if f]
    Sample.objects.bulk_create(rows, ignore_conflicts=True)
    return len(rows)


def floor_to(moment: datetime, seconds: int) -> datetime:
    epoch = int(moment.timestamp())
    return moment - timedelta(seconds=epoch % seconds, microseconds=moment.microsecond)


def aggregate(rows: Iterable[tuple[str, str, datetime, Mapping[str, float]]], seconds: int) -> list[dict[str, Any]]:
    """Group rows into buckets of `seconds`: each series' mean and maximum (pure)."""
    sums: dict[tuple[str, str, datetime], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for kind, target, ts, values in rows:
        bucket = sums[(kind, target, floor_to(ts, seconds))]
        for name, value in values.items():
            bucket[name].append(float(value))
    return [
        {
            "kind": kind, "target": target, "ts": ts,
            "values": {name: round(sum(v) / len(v), 4) for name, v in series.items()},
            "peaks": {name: round(max(v), 4) for name, v in series.items()},
        }
        for (kind, target, ts), series in sums.items()
    ]


def _write_rollup(model: type[SampleMinute | SampleHour], buckets: list[dict[str, Any]]) -> None:
    model._default_manager.bulk_create(
        [model(**bucket) for bucket in buckets],  # type: ignore[misc]
        update_conflicts=True, unique_fields=["kind", "target", "ts"], update_fields=["values", "peaks"],
    )


def samples_downsample(*, now: datetime, minutes_back: int = 3) -> tuple[int, int]:
    """Recompute the last complete minutes from raw and the current and previous hours from
    minutes. Idempotent: a missed run is covered by the next one."""
    end = floor_to(now, 60)
    start = end - timedelta(minutes=minutes_back)
    raw = Sample.objects.filter(ts__gte=start, ts__lt=end).values_list("kind", "target", "ts", "values")
    minutes = aggregate(raw, 60)
    _write_rollup(SampleMinute, minutes)
    hour_start = floor_to(now, 3600) - timedelta(hours=1)
    by_minute = SampleMinute.objects.filter(ts__gte=hour_start).values_list("kind", "target", "ts", "values")
    hours = aggregate(by_minute, 3600)
    _write_rollup(SampleHour, hours)
    return len(minutes), len(hours)


def request_log_aggregates() -> dict[str, Aggregate]:
    """What a stretch of the request log adds up to: requests, errors, tokens, latency and
    TTFT sums and both histograms (cumulative counts at each bound; the TTFT one's +Inf is
    `ttft_n`, the requests with a first token). Read back with `log_latency_buckets` and
    `log_ttft_buckets`."""
    return {
        "n": Count("id"), "errors": Count("id", filter=Q(status__gte=400)),
        "prompt": Sum("prompt_tokens"), "completion": Sum("completion_tokens"), "latency": Sum("latency_ms"),
        "ttft": Sum("ttft_ms"), "ttft_n": Count("ttft_ms"),
        "latency_min": Min("latency_ms"), "latency_max": Max("latency_ms"),
        "ttft_min": Min("ttft_ms"), "ttft_max": Max("ttft_ms"),
        **{f"le{bound}": Count("id", filter=Q(latency_ms__lte=bound)) for bound in LATENCY_BUCKETS_MS},
        **{f"tle{bound}": Count("id", filter=Q(ttft_ms__lte=bound)) for bound in LATENCY_BUCKETS_MS},
    }


def log_latency_buckets(row: Mapping[str, Any]) -> list[int]:
    return [row[f"le{bound}"] for bound in LATENCY_BUCKETS_MS]


def log_ttft_buckets(row: Mapping[str, Any]) -> list[int]:
    return [*(row[f"tle{bound}"] for bound in LATENCY_BUCKETS_MS), row["ttft_n"]]


def usage_rollup(*, now: datetime, hours_back: int = 1) -> int:
    """Usage per hour, key and lane from the request log: the current and previous hours
    recomputed (idempotent)."""
    start = floor_to(now, 3600) - timedelta(hours=hours_back)
    rows: list[UsageHour] = []
    hour = start
    while hour <= now:
        grouped = (
            RequestLog.objects.filter(created_at__gte=hour, created_at__lt=hour + timedelta(hours=1))
            .values("key_id", "key__name", "lane", "status", "route_reason")
            .annotate(**request_log_aggregates())
        )
        rows += [
            UsageHour(
                hour=hour, key_id=g["key_id"], key_name=g["key__name"] or "", lane=g["lane"], status=g["status"],
                route=g["route_reason"], requests=g["n"], errors=g["errors"], prompt_tokens=g["prompt"] or 0,
                completion_tokens=g["completion"] or 0, latency_ms_sum=g["latency"] or 0.0,
                ttft_ms_sum=g["ttft"] or 0.0, ttft_count=g["ttft_n"],
                latency_buckets=log_latency_buckets(g), ttft_buckets=log_ttft_buckets(g),
                latency_ms_min=g["latency_min"], latency_ms_max=g["latency_max"],
                ttft_ms_min=g["ttft_min"], ttft_ms_max=g["ttft_max"],
            )
            for g in cast(list[dict[str, Any]], list(grouped))
        ]
        hour += timedelta(hours=1)
    lane_latency: dict[tuple[datetime, str], float] = defaultdict(float)
    for row in rows:
        lane_latency[(row.hour, row.lane)] += row.latency_ms_sum
    for row in rows:  # the cost model's split of a lane's hour (metrics.usage)
        total = lane_latency[(row.hour, row.lane)]
        part = min(1.0, max(0.0, (now - row.hour).total_seconds() / 3600))
        row.lane_hours = row.latency_ms_sum / total * part if total > 0 else 0.0
    with transaction.atomic():
        UsageHour.objects.filter(hour__gte=start).delete()
        UsageHour.objects.bulk_create(rows)
        usage_day_rollup(first=start.date(), last=now.date())
    return len(rows)


SIX_HOURS = timedelta(hours=6)


def usage_day_rollup(*, first: date, last: date) -> int:
    """Recompute the days first..last from the hourly rollup (idempotent): usage per key and
    lane per day (UsageDay) and per 6 hours (UsageSixHours), by one rule (`_usage_tier`), and
    the gateway per lane and status with its latency and TTFT histograms."""
    hours = UsageHour.objects.filter(hour__date__gte=first, hour__date__lte=last).annotate(day=TruncDate("hour"))
    days = [UsageDay(day=g["day"], **_usage_tier(g)) for g in _usage_tier_groups(hours, "day")]
    # The quarter of the day (0-3) each hour is in: 6-hour buckets from 00:00 UTC, grouped in the database.
    quarters = hours.annotate(quarter=Floor(ExtractHour("hour") / Value(6)))
    six_hours = [UsageSixHours(start=_day_start(g["day"]) + int(g["quarter"]) * SIX_HOURS, **_usage_tier(g))
                 for g in _usage_tier_groups(quarters, "day", "quarter")]
    gateway = [
        GatewayDay(day=g["day"], lane=g["lane"], status=g["status"], requests=g["requests"],
                   prompt_tokens=g["prompt"] or 0, completion_tokens=g["completion"] or 0,
                   latency_ms_sum=g["latency_ms_sum"], ttft_ms_sum=g["ttft"] or 0.0, ttft_count=g["ttft_n"] or 0,
                   latency_buckets=[round(count) for count in g["buckets"]],
                   ttft_buckets=[round(count) for count in g["ttft_buckets"]], **extremes(g))
        for g in latency_histograms(
            hours, "day", "lane", "status",
            prompt=Sum("prompt_tokens"), completion=Sum("completion_tokens"), ttft=Sum("ttft_ms_sum"),
            ttft_n=Sum("ttft_count"),
        )
    ]
    with transaction.atomic():
        UsageDay.objects.filter(day__gte=first, day__lte=last).delete()
        UsageDay.objects.bulk_create(days)
        UsageSixHours.objects.filter(start__gte=_day_start(first),
                                     start__lt=_day_start(last) + timedelta(days=1)).delete()
        UsageSixHours.objects.bulk_create(six_hours)
        GatewayDay.objects.filter(day__gte=first, day__lte=last).delete()
        GatewayDay.objects.bulk_create(gateway)
    return len(days)


BACKFILL_DAYS = 14  # days rolled again per retention step, so one step stays short


def usage_six_hours_backfill() -> int:
    """Days the daily tier holds and the 6-hour tier does not (their hours were rolled up
    before the 6-hour tier existed, migration metrics 0011) are rolled again from the hourly
    rollup, BACKFILL_DAYS at a time from the newest back (so the tier never has a gap): a
    week's chart in 6-hour buckets then shows what the daily one shows instead of nothing
    before the upgrade. Returns the days done."""
    days = UsageDay.objects.aggregate(first=Min("day"), last=Max("day"))
    first_six = UsageSixHours.objects.aggregate(first=Min("start"))["first"]
    if days["first"] is None or (first_six is not None and first_six.date() <= days["first"]):
        return 0  # nothing rolled up yet, or the tier already reaches as far back as the days
    first_day = days["first"]
    last = first_six.date() - timedelta(days=1) if first_six is not None else days["last"]
    first = max(first_day, last - timedelta(days=BACKFILL_DAYS - 1))
    usage_day_rollup(first=first, last=last)
    return (last - first).days + 1


def _day_start(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def _usage_tier_groups(hours: QuerySet[UsageHour], *when: str) -> list[dict[str, Any]]:
    """The hourly rollup summed per `when` (annotations of `hours`), key and lane: what a
    coarser usage tier (metrics.models.UsageTier) keeps."""
    return latency_histograms(hours, *when, "key_id", "key_name", "lane", with_ttft=False, errors=Sum("errors"),
                              prompt=Sum("prompt_tokens"), completion=Sum("completion_tokens"),
                              low=Min("latency_ms_min"), high=Max("latency_ms_max"), lane_hours=Sum("lane_hours"))


def _usage_tier(group: Mapping[str, Any]) -> dict[str, Any]:
    """A `_usage_tier_groups` group as UsageTier's fields."""
    return {"key_id": group["key_id"], "key_name": group["key_name"], "lane": group["lane"],
            "requests": group["requests"], "errors": group["errors"], "prompt_tokens": group["prompt"],
            "completion_tokens": group["completion"], "latency_ms_sum": group["latency_ms_sum"],
            "latency_buckets": [round(count) for count in group["buckets"]], "latency_ms_min": group["low"],
            "latency_ms_max": group["high"], "lane_hours": group["lane_hours"] or 0.0}


# The fastest and slowest latency and TTFT, kept beside the histograms (UsageHour, GatewayDay).
EXTREMES = ("latency_ms_min", "latency_ms_max", "ttft_ms_min", "ttft_ms_max")


def extremes(group: Mapping[str, Any]) -> dict[str, float | None]:
    """A latency_histograms group's extremes, as the model fields."""
    return {name: group.get(name) for name in EXTREMES}


def latency_histograms(rows: QuerySet[Any], *group: str, with_ttft: bool = True, **sums: Aggregate) -> list[dict[str, Any]]:
    """Per group: requests, latency sum (ms), each latency bucket's count (`buckets`), the
    TTFT histogram (`ttft_buckets`, +Inf last) and the EXTREMES (unless `with_ttft=False`) and any `sums`, added
    up in the database (one pass, whatever the number of rows). `rows` is UsageHour or
    GatewayDay (both keep the histograms in `latency_buckets` and `ttft_buckets`;
    GatewayTotal has no TTFT one)."""
    bounds = range(len(LATENCY_BUCKETS_MS))
    buckets: dict[str, Aggregate] = {f"le{i}": Sum(Cast(KT(f"latency_buckets__{i}"), FloatField())) for i in bounds}
    if with_ttft:  # a row without the TTFT histogram (rolled up before it existed) adds nothing
        buckets |= {f"tle{i}": Sum(Cast(KT(f"ttft_buckets__{i}"), FloatField())) for i in range(len(bounds) + 1)}
        # (named apart from the fields: an annotation may not shadow one)
        buckets |= {f"x_{name}": Min(name) if name.endswith("min") else Max(name) for name in EXTREMES}
    aggregates: dict[str, Aggregate] = {"n": Sum("requests"), "latency": Sum("latency_ms_sum"), **buckets, **sums}
    result: list[dict[str, Any]] = (
        list(rows.order_by().values(*group).annotate(**aggregates)) if group else [rows.aggregate(**aggregates)]
    )
    return [
        {**{name: row[name] for name in (*group, *sums)}, "requests": row["n"] or 0,
         "latency_ms_sum": row["latency"] or 0.0,
         "buckets": [row[f"le{i}"] or 0.0 for i in bounds],
         "ttft_buckets": [row[f"tle{i}"] or 0.0 for i in range(len(bounds) + 1)] if with_ttft else [],
         **({name: row[f"x_{name}"] for name in EXTREMES} if with_ttft else {})}
        for row in result
    ]


def usage_fold(*, before: datetime) -> int:
    """Add every hour of UsageHour not yet folded and before `before` to GatewayTotal (per
    lane, status and route) and move the mark: /metrics reads the totals plus the hours
    from the mark on, so deleting a folded hour changes no counter. Call it only with
    hours the rollup no longer recomputes. Returns the number of groups folded."""
    with transaction.atomic():
        mark, _ = GatewayTotalMark.objects.select_for_update().get_or_create(pk=1)
        if mark.folded_before is not None and before <= mark.folded_before:
            return 0
        hours = UsageHour.objects.filter(hour__lt=before)
        if mark.folded_before is not None:
            hours = hours.filter(hour__gte=mark.folded_before)
        groups = latency_histograms(hours, "lane", "status", "route", with_ttft=False,
                                    prompt=Sum("prompt_tokens"), completion=Sum("completion_tokens"))
        totals = {(t.lane, t.status, t.route): t for t in GatewayTotal.objects.select_for_update()}
        created: list[GatewayTotal] = []
        for g in groups:
            total = totals.get((g["lane"], g["status"], g["route"]))
            if total is None:
                total = GatewayTotal(lane=g["lane"], status=g["status"], route=g["route"],
                                     latency_buckets=[0] * len(LATENCY_BUCKETS_MS))
                created.append(total)
            total.requests += g["requests"]
            total.prompt_tokens += g["prompt"] or 0
            total.completion_tokens += g["completion"] or 0
            total.latency_ms_sum += g["latency_ms_sum"]
            total.latency_buckets = [old + round(new) for old, new in zip(total.latency_buckets, g["buckets"],
                                                                            strict=True)]
        GatewayTotal.objects.bulk_create(created)
        GatewayTotal.objects.bulk_update(
            [t for t in totals.values()],
            ["requests", "prompt_tokens", "completion_tokens", "latency_ms_sum", "latency_buckets"],
        )
        mark.folded_before = before
        mark.save(update_fields=["folded_before"])
    return len(groups)


def storage_maintain(*, now: datetime) -> dict[str, Any]:
    """Create partitions ahead and enforce retention — the one retention step of samples and
    of the gateway's request log (beat, hourly). Returns what was done and how long each
    step took (the bench reads it)."""
    today = now.date()
    report: dict[str, Any] = {"created": [], "dropped": [], "deleted": {}, "seconds": {}}
    started = time.perf_counter()
    for table in PARTITIONED_TABLES:
        report["created"] += ensure_partitions(
            table, first=today, last=today + timedelta(days=settings.METRICS_PARTITIONS_AHEAD_DAYS)
        )
    report["seconds"]["create"] = time.perf_counter() - started
    raw_cutoff = now - timedelta(days=settings.METRICS_RAW_RETENTION_DAYS)
    minute_cutoff = now - timedelta(days=settings.METRICS_MINUTE_RETENTION_DAYS)
    started = time.perf_counter()
    if partitioned():
        # A partition holds one day: it goes once the whole day is past the cutoff.
        for table, column, cutoff in (
            ("metrics_sample", "ts", raw_cutoff),
            ("metrics_sampleminute", "ts", minute_cutoff),
            ("routing_requestlog", "created_at", now - timedelta(days=settings.GATEWAY_LOG_RETENTION_DAYS)),
        ):
            report["dropped"] += drop_partitions_before(table, cutoff.date(), column=column)
    else:
        # SQLite (no partitions): rows are deleted; the request log by routing's batched
        # DELETEs (short transactions, a time budget: the next run continues).
        report["deleted"]["Sample"] = Sample.objects.filter(ts__lt=raw_cutoff).delete()[0]
        report["deleted"]["SampleMinute"] = SampleMinute.objects.filter(ts__lt=minute_cutoff).delete()[0]
        report["deleted"]["RequestLog"] = request_log_purge(now=now).deleted
    report["seconds"]["drop"] = time.perf_counter() - started
    started = time.perf_counter()
    hour_cutoff = now - timedelta(days=settings.METRICS_HOUR_RETENTION_DAYS)
    report["deleted"]["SampleHour"] = SampleHour.objects.filter(ts__lt=hour_cutoff).delete()[0]
    report["deleted"]["KeyedRequest"] = keyed_request_purge(now=now)  # expired durable idempotency traces
    report["deleted"]["RequestOutcome"] = request_outcome_purge(now=now)  # the agents' outcomes, as the log
    with transaction.atomic():
        # Hours before the previous one are final (the rollup recomputes only the current and
        # previous hours): fold them into /metrics' running totals, then delete the old ones —
        # never an hour the totals lack.
        report["folded"] = usage_fold(before=floor_to(now, 3600) - timedelta(hours=1))
        folded_before = GatewayTotalMark.objects.get(pk=1).folded_before or hour_cutoff
        report["deleted"]["UsageHour"] = UsageHour.objects.filter(hour__lt=min(hour_cutoff, folded_before)).delete()[0]
    report["deleted"]["UsageDay"] = UsageDay.objects.filter(day__lt=hour_cutoff.date()).delete()[0]
    report["deleted"]["UsageSixHours"] = UsageSixHours.objects.filter(
        start__lt=_day_start(hour_cutoff.date())).delete()[0]
    report["deleted"]["GatewayDay"] = GatewayDay.objects.filter(day__lt=hour_cutoff.date()).delete()[0]
    report["seconds"]["delete"] = time.perf_counter() - started
    report["six_hours_backfilled"] = usage_six_hours_backfill()
    return report
