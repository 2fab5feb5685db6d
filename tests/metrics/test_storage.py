"""Downsampling (1 min, 1 h) and retention: on PostgreSQL whole daily partitions are
created ahead and dropped, never DELETEd."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test import override_settings
from django.utils import timezone

from gateway.models import ApiKey, RequestLog
from metrics.models import Sample, SampleHour, SampleMinute, UsageDay, UsageHour, UsageSixHours
from metrics.partitions import partition_days
from metrics.storage import samples_downsample, samples_store, storage_maintain, usage_day_rollup, usage_rollup

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 11, 30, 12, 0, 30, tzinfo=UTC)


def test_raw_samples_roll_up_to_minute_means_and_peaks_then_hours():
    for second, kv in ((0, 10.0), (5, 20.0), (10, 60.0)):
        samples_store(at=datetime(2026, 11, 30, 11, 58, second, tzinfo=UTC), lanes={"qwen": {"kv_pct": kv}}, nodes={})
    samples_store(at=datetime(2026, 11, 30, 11, 59, 0, tzinfo=UTC), lanes={"qwen": {"kv_pct": 90.0}},
                  nodes={"spark1": {"mem_avail_gib": 100.0}})
    minutes, hours = samples_downsample(now=NOW)
    assert minutes == 3
    row = SampleMinute.objects.get(kind="lane", target="qwen", ts=datetime(2026, 11, 30, 11, 58, tzinfo=UTC))
    assert row.values["kv_pct"] == pytest.approx(30.0) and row.peaks["kv_pct"] == 60.0
    hour = SampleHour.objects.get(kind="lane", target="qwen", ts=datetime(2026, 11, 30, 11, 0, tzinfo=UTC))
    assert hour.values["kv_pct"] == pytest.approx(60.0)  # mean of the minute means 30 and 90
    assert hour.peaks["kv_pct"] == 90.0
    samples_downsample(now=NOW)  # idempotent
    assert SampleMinute.objects.filter(kind="lane", target="qwen").count() == 2


def test_the_usage_rollup_counts_requests_tokens_and_errors_per_key_and_lane():
    LATER = datetime(2026, 11, 30, 12, 20, 30, tzinfo=UTC)
    key = ApiKey.objects.create(name="agents", prefix="sk-spark-ab", secret_hash="x" * 64)
    base = dict(request_id="r", endpoint="chat.completions", latency_ms=100.0)
    RequestLog.objects.create(created_at=LATER - timedelta(minutes=1), key=key, lane="qwen", status=200,
                              prompt_tokens=10, completion_tokens=5, **base)
    RequestLog.objects.create(created_at=LATER - timedelta(minutes=2), key=key, lane="qwen", status=429, **base)
    RequestLog.objects.create(created_at=LATER - timedelta(minutes=70), key=key, lane="deepseek", status=200,
                              prompt_tokens=7, completion_tokens=3, **base)
    assert usage_rollup(now=LATER) == 3
    qwen = UsageHour.objects.get(lane="qwen", status=200)
    assert (qwen.requests, qwen.errors, qwen.prompt_tokens, qwen.completion_tokens, qwen.key_name) == (1, 0, 10, 5, "agents")
    assert qwen.latency_buckets[:3] == [0, 1, 1]  # 100 ms: within the 100 ms bound and above
    assert UsageHour.objects.get(lane="qwen", status=429).errors == 1
    assert UsageHour.objects.get(lane="deepseek").hour == datetime(2026, 11, 30, 11, 0, tzinfo=UTC)
    usage_rollup(now=LATER)
    assert UsageHour.objects.count() == 3


@override_settings(METRICS_RAW_RETENTION_DAYS=2, METRICS_MINUTE_RETENTION_DAYS=3, METRICS_HOUR_RETENTION_DAYS=10)
def test_retention_drops_whole_day_partitions_and_creates_days_ahead():
    now = datetime.now(UTC)
    old = now - timedelta(days=5)
    storage_maintain(now=old)  # partitions for the old days exist, as they did back then
    for day in range(6):
        at = now - timedelta(days=day)
        samples_store(at=at, lanes={"qwen": {"kv_pct": float(day)}}, nodes={})
        SampleMinute.objects.create(kind="lane", target="qwen", ts=at, values={"kv_pct": 1.0})
        SampleHour.objects.create(kind="lane", target="qwen", ts=at - timedelta(days=8), values={"kv_pct": 1.0})
    report = storage_maintain(now=now)
    if connection.vendor == "postgresql":
        raw_days = sorted(partition_days("metrics_sample"))
        assert raw_days[0] == (now - timedelta(days=2)).date()
        assert raw_days[-1] >= (now + timedelta(days=3)).date()
        assert "metrics_sample_p" + f"{old:%Y%m%d}" in report["dropped"]
        assert "Sample" not in report["deleted"]  # no row was DELETEd: partitions went whole
        assert partition_days("routing_requestlog")  # the request log gets its days ahead too
    else:
        assert report["deleted"]["Sample"] == 3
    assert Sample.objects.count() == 3  # today, yesterday, the day before
    assert SampleMinute.objects.count() == 4
    assert SampleHour.objects.count() == 3  # 8–10 days old: within the 10 days
    assert report["deleted"]["SampleHour"] == 3


# Committed rows, as in production: a DROP cannot run while deferred foreign-key checks of
# rows inserted in the same transaction are pending.
@pytest.mark.django_db(transaction=True)
def test_the_request_log_is_partitioned_by_day_and_old_days_are_dropped():
    """Migration 0003 made routing's request log a partitioned table on PostgreSQL: the
    gateway's inserts land in day partitions, retention drops whole days."""
    assert connection.vendor == "postgresql"  # the suite's database; SQLite keeps routing's purge
    with connection.cursor() as cursor:
        cursor.execute("SELECT relkind FROM pg_class WHERE relname = 'routing_requestlog'")
        assert cursor.fetchone()[0] == "p"
    now = datetime.now(UTC)
    with override_settings(METRICS_PARTITIONS_AHEAD_DAYS=10):
        storage_maintain(now=now - timedelta(days=40))
    base = dict(request_id="r", endpoint="chat.completions", latency_ms=1.0, status=200)
    old = RequestLog.objects.create(created_at=now - timedelta(days=35), **base)
    stray = RequestLog.objects.create(created_at=now - timedelta(days=60), **base)  # no day partition: the default
    fresh = RequestLog.objects.bulk_create([RequestLog(created_at=now, **base)])[0]
    assert fresh.id > old.id > 0 and stray.id
    with override_settings(GATEWAY_LOG_RETENTION_DAYS=30):
        report = storage_maintain(now=now)
    assert f"routing_requestlog_p{now - timedelta(days=35):%Y%m%d}" in report["dropped"]
    assert list(RequestLog.objects.values_list("id", flat=True)) == [fresh.id]


@pytest.mark.django_db(transaction=True)
def test_the_request_log_has_one_retention_step_the_storage_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Beat runs no other purge of the request log; on PostgreSQL the step drops days and
    DELETEs nothing from them (a day still partly inside the retention stays whole); without
    partitions (SQLite) the same step deletes the old rows in batches."""
    from django.conf import settings

    tasks = [entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()]
    assert not [task for task in tasks if task.startswith("routing.")]
    now = datetime.now(UTC).replace(hour=12)
    with override_settings(METRICS_PARTITIONS_AHEAD_DAYS=10):
        storage_maintain(now=now - timedelta(days=35))
    base = dict(request_id="r", endpoint="chat.completions", latency_ms=1.0, status=200)
    gone = RequestLog.objects.create(created_at=now - timedelta(days=32), **base)
    edge = RequestLog.objects.create(created_at=now - timedelta(days=30, hours=1), **base)  # its day is partly kept
    kept = RequestLog.objects.create(created_at=now - timedelta(days=3), **base)
    with override_settings(GATEWAY_LOG_RETENTION_DAYS=30):
        report = storage_maintain(now=now)
    assert "RequestLog" not in report["deleted"]
    assert f"routing_requestlog_p{now - timedelta(days=32):%Y%m%d}" in report["dropped"]
    assert set(RequestLog.objects.values_list("id", flat=True)) == {edge.id, kept.id}
    assert gone.id

    monkeypatch.setattr("metrics.storage.partitioned", lambda conn=None: False)
    with override_settings(GATEWAY_LOG_RETENTION_DAYS=30):
        report = storage_maintain(now=now)
    assert report["deleted"]["RequestLog"] == 1 and report["dropped"] == []
    assert list(RequestLog.objects.values_list("id", flat=True)) == [kept.id]


def gateway_series() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of /metrics' gateway families (counters, histogram buckets, _count, _sum)."""
    from prometheus_client.parser import text_string_to_metric_families

    from metrics.exposition import render_metrics

    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(render_metrics().decode())
        if family.name.startswith("spark_gateway_")
        for sample in family.samples
    }


def usage_hour(hour: datetime, *, lane: str = "qwen", status: int = 200, n: int = 10, key: str = "agents") -> UsageHour:
    return UsageHour.objects.create(
        hour=hour, key_name=key, lane=lane, status=status, route="explicit", requests=n, errors=n if status >= 400 else 0,
        prompt_tokens=n * 100, completion_tokens=n * 20, latency_ms_sum=n * 300.0, ttft_ms_sum=n * 40.0, ttft_count=n,
        latency_buckets=[0, 0, n // 2, n, n, n, n, n, n, n, n, n], ttft_buckets=[n] * 13,
    )


@override_settings(METRICS_HOUR_RETENTION_DAYS=1)
def test_gateway_counters_never_go_down_when_old_hours_leave_retention():
    """/metrics' gateway counters, tokens and latency histogram (buckets, _count, _sum) are
    the running totals plus the live hours: deleting old hours changes none of them (a drop
    would be a counter reset to Prometheus), a second retention step counts nothing twice,
    and new traffic makes them grow."""
    now = datetime.now(UTC).replace(minute=30)
    this_hour = now.replace(minute=0, second=0, microsecond=0)
    for days in (3, 2):
        usage_hour(this_hour - timedelta(days=days))
        usage_hour(this_hour - timedelta(days=days), status=502, n=2, key="other")
        usage_hour(this_hour - timedelta(days=days, hours=1), lane="deepseek", n=4)
    usage_hour(this_hour - timedelta(hours=1))  # still recomputed by the rollup: not folded yet
    usage_hour(this_hour)
    usage_day_rollup(first=(now - timedelta(days=4)).date(), last=now.date())  # as beat's rollup keeps it
    before = gateway_series()
    assert before[("spark_gateway_requests_total", (("lane", "qwen"), ("route", "explicit"), ("status", "200")))] == 40
    assert before[("spark_gateway_request_duration_seconds_count", (("lane", "deepseek"),))] == 8

    report = storage_maintain(now=now)
    assert report["deleted"]["UsageHour"] == 6  # the two and three days old hours went
    assert gateway_series() == before
    storage_maintain(now=now + timedelta(minutes=5))  # folded hours are not added again
    assert gateway_series() == before

    # An hour later the previous hour is final and folded; new traffic adds to the totals.
    usage_hour(this_hour + timedelta(hours=1), lane="deepseek", n=3)
    storage_maintain(now=now + timedelta(hours=2))
    after = gateway_series()
    assert set(after) == set(before)
    assert all(after[name] >= value for name, value in before.items())
    assert after[("spark_gateway_request_duration_seconds_count", (("lane", "deepseek"),))] == 11
    assert after[("spark_gateway_tokens_total", (("direction", "prompt"), ("lane", "deepseek")))] == 1100


def log_request(at: datetime, *, latency: float = 100.0, ttft: float | None = 50.0, status: int = 200,
                lane: str = "qwen") -> RequestLog:
    return RequestLog.objects.create(created_at=at, request_id="r", endpoint="chat.completions", lane=lane,
                                     status=status, latency_ms=latency, ttft_ms=ttft)


def test_the_gateway_summary_has_ttft_percentiles_from_the_rollups_over_every_range():
    """The hourly and daily rollups carry a TTFT histogram (same bounds as latency): 24 h and
    7 days show TTFT p50/p95, not a mean a single slow request drags."""
    from metrics.selectors import gateway_summary

    now = datetime(2026, 11, 30, 12, 20, tzinfo=UTC)
    for i in range(20):
        log_request(now - timedelta(hours=2, minutes=i), ttft=80.0 if i < 10 else 3000.0)
    log_request(now - timedelta(hours=2), ttft=None, status=502)  # no first token: not in the TTFT histogram
    usage_rollup(now=now, hours_back=3)
    hour = UsageHour.objects.get(hour=datetime(2026, 11, 30, 10, 0, tzinfo=UTC), status=200)
    assert hour.ttft_buckets[1] == 10 and hour.ttft_buckets[-1] == 20  # ≤ 100 ms, and the +Inf count
    for range_key in ("24h", "7d", "30d"):
        summary = gateway_summary(range_key, now=now, exact_up_to=0)  # from the buckets
        assert summary["requests"] == 21 and not summary["ttft_exact"], range_key
        assert 50 < summary["ttft_p50_ms"] <= 100, range_key
        assert 2500 < summary["ttft_p95_ms"] <= 5000, range_key
    # Hours rolled up before the TTFT histogram existed add nothing to it (not a +Inf mass).
    UsageHour.objects.create(hour=datetime(2026, 11, 30, 11, 0, tzinfo=UTC), lane="qwen", requests=100,
                             ttft_count=100, ttft_ms_sum=1e7, latency_buckets=[100] * 12)
    assert 2500 < gateway_summary("24h", now=now, exact_up_to=0)["ttft_p95_ms"] <= 5000


def test_the_gateway_summary_never_shows_a_percentile_above_the_slowest_request():
    """The defect: 24 h showed latency p95 4,773 ms while the slowest request took 3,103 ms
    (interpolated inside the 2,500-5,000 bucket). The rollups keep the fastest and slowest
    request; estimates are clamped to them and give the range they rest on."""
    from metrics.selectors import gateway_summary

    now = datetime(2026, 11, 30, 12, 20, tzinfo=UTC)
    for i in range(40):
        log_request(now - timedelta(hours=3, minutes=i), latency=2600.0 + i * 12.9, ttft=2600.0 if i else 3103.0)
    usage_rollup(now=now, hours_back=5)
    slowest = 2600.0 + 39 * 12.9
    hours = UsageHour.objects.filter(requests__gt=0)
    assert min(h.latency_ms_min for h in hours) == 2600.0 and max(h.ttft_ms_max for h in hours) == 3103.0
    for range_key in ("24h", "7d"):
        summary = gateway_summary(range_key, now=now, exact_up_to=0)
        assert not summary["latency_exact"] and summary["latency_n"] == 40
        assert 2600.0 <= summary["latency_p50_ms"] <= summary["latency_p95_ms"] <= slowest, range_key
        assert summary["latency_p95_range_ms"] == [2600.0, pytest.approx(slowest)]
        assert summary["ttft_p95_ms"] <= 3103.0


def test_a_small_range_has_exact_percentiles_and_says_n():
    """Few requests: the percentiles are the requests' own figures (nearest rank, as the live
    line), so one request of 278 ms TTFT shows 278 / 278 and n = 1, on the API and the page."""
    from metrics.selectors import gateway_summary

    now = timezone.now()
    log_request(now - timedelta(hours=2), latency=1234.0, ttft=278.0)
    log_request(now - timedelta(hours=2), latency=900.0, ttft=None)  # not streamed: no first token
    usage_rollup(now=now, hours_back=3)
    summary = gateway_summary("24h", now=now)
    assert summary["ttft_exact"] and summary["ttft_n"] == 1
    assert summary["ttft_p50_ms"] == summary["ttft_p95_ms"] == 278.0
    assert summary["latency_n"] == 2 and summary["latency_p95_ms"] == 1234.0


def test_the_hour_windows_cover_exactly_the_last_hour_and_day():
    """At 03:24 "1 h" is 02:24–03:24: the whole hour 03:00 from the rollup and 02:24–03:00
    from the request log (not 03:00–03:24 alone); "24 h" likewise starts at 03:24 yesterday."""
    from metrics.selectors import gateway_summary, gateway_window

    now = datetime(2026, 11, 30, 3, 24, tzinfo=UTC)
    log_request(now - timedelta(minutes=74))  # 02:10: before the hour
    log_request(now - timedelta(minutes=54), latency=20_000.0)  # 02:30: the partial first hour
    log_request(now - timedelta(minutes=14), latency=20_000.0)  # 03:10
    log_request(now - timedelta(hours=24, minutes=6))  # 03:18 yesterday: outside 24 h
    log_request(now - timedelta(hours=23, minutes=54), lane="deepseek", status=502)  # 03:30 yesterday: inside
    usage_rollup(now=now, hours_back=25)
    hour = gateway_summary("1h", now=now)
    assert hour["since"] == datetime(2026, 11, 30, 2, 24, tzinfo=UTC)
    assert hour["requests"] == 2
    assert hour["latency_p50_ms"] > 10_000  # both are the slow ones
    day = gateway_summary("24h", now=now)
    assert day["requests"] == 4
    assert day["errors_by_status"] == {"502": 1} and day["share"]["deepseek"] == 25.0
    # On the hour the window is whole hours only: nothing to read from the request log.
    on_the_hour = gateway_window("1h", now=datetime(2026, 11, 30, 3, 0, tzinfo=UTC))
    assert on_the_hour.edge_until is None and on_the_hour.since == datetime(2026, 11, 30, 2, 0, tzinfo=UTC)


@override_settings(METRICS_HOUR_RETENTION_DAYS=2)
def test_the_coarser_usage_tiers_leave_with_the_hours_retention():
    """UsageDay and UsageSixHours keep as many days as the hourly rollup: older days go in
    the retention step, whole days at a time."""
    now = datetime(2026, 11, 30, 12, 20, tzinfo=UTC)
    for days in (3, 1):
        at = now - timedelta(days=days)
        RequestLog.objects.create(created_at=at, request_id="r", endpoint="chat.completions", lane="qwen",
                                  status=200, latency_ms=10.0)
        usage_rollup(now=at, hours_back=1)
    assert UsageSixHours.objects.count() == UsageDay.objects.count() == 2
    report = storage_maintain(now=now)
    assert report["deleted"]["UsageSixHours"] == report["deleted"]["UsageDay"] == 1
    kept = UsageSixHours.objects.get()
    assert kept.start == datetime(2026, 11, 29, 12, tzinfo=UTC) and kept.requests == 1
    assert UsageDay.objects.get().day == kept.start.date()


def test_days_rolled_up_before_the_six_hour_tier_existed_are_filled_in_by_retention():
    """An upgrade adds the 6-hour tier beside days already rolled up: the retention step rolls
    those days again from the hourly rollup (a few at a time), so 6-hour charts show them."""
    now = datetime(2026, 11, 30, 12, 20, tzinfo=UTC)
    for days in range(20, 0, -1):
        at = now - timedelta(days=days)
        RequestLog.objects.create(created_at=at, request_id="r", endpoint="chat.completions", lane="qwen",
                                  status=200, latency_ms=10.0)
        usage_rollup(now=at, hours_back=1)
    UsageSixHours.objects.filter(start__lt=now - timedelta(days=5, hours=1)).delete()  # as before the tier existed
    assert UsageSixHours.objects.count() == 5 and UsageDay.objects.count() == 20
    first = storage_maintain(now=now)
    assert first["six_hours_backfilled"] == 14  # the fortnight before the tier first
    assert storage_maintain(now=now)["six_hours_backfilled"] == 1
    assert storage_maintain(now=now)["six_hours_backfilled"] == 0  # nothing left to fill
    assert sorted(row.start.date() for row in UsageSixHours.objects.all()) == sorted(
        row.day for row in UsageDay.objects.all())
    assert all(row.requests == 1 for row in UsageSixHours.objects.all())
