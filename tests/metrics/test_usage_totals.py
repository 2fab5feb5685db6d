"""The last hours' totals per API key and per lane (the gateway page, /api/gateway/totals)
read the hourly rollup: the same figures a scan of the request log gave, with the window's
edge rule of metrics.selectors.usage_totals."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db.models import Avg, Count, Q, Sum

from gateway.models import ApiKey, RequestLog
from metrics.models import UsageHour
from metrics.selectors import usage_totals
from metrics.storage import usage_rollup

pytestmark = pytest.mark.django_db
NOW = datetime(2026, 3, 10, 12, 20, tzinfo=UTC)  # hours=2: from 10:20; 11:00 is the first whole hour


def log(at: datetime, *, lane: str = "qwen", status: int = 200, key: ApiKey | None = None, prompt: int | None = 10,
        completion: int | None = 20, ttft: float | None = 40.0, latency: float = 100.0) -> None:
    RequestLog.objects.create(created_at=at, request_id=f"req-{at:%H%M%S}-{lane}", key=key,
                              endpoint="chat.completions", lane=lane, status=status, prompt_tokens=prompt,
                              completion_tokens=completion, ttft_ms=ttft, latency_ms=latency)


@pytest.fixture
def around_the_hour() -> ApiKey:
    """Rows on both sides of 11:00 and of the window's start (10:20), all rolled up."""
    key = ApiKey.objects.create(name="agents", prefix="sk-spark-ab", secret_hash="y" * 64)
    log(NOW.replace(hour=10, minute=15), key=key)  # before the window, in the rollup's 10:00 hour
    log(NOW.replace(hour=10, minute=25), key=key, status=502, completion=None, ttft=None, latency=900.0)
    log(NOW.replace(hour=10, minute=59, second=59), lane="deepseek", prompt=None, completion=None, latency=300.0)
    log(NOW.replace(hour=11, minute=0), key=key, ttft=60.0, latency=200.0)
    log(NOW.replace(hour=12, minute=10), key=key, status=429, prompt=3, completion=0, ttft=None, latency=2.0)
    usage_rollup(now=NOW, hours_back=2)
    return key


def scanned(by: str, since: datetime, until: datetime) -> dict[str, dict[str, Any]]:
    """What the request log scan (the former gateway.selectors.request_totals) counted."""
    field = {"key": "key__name", "lane": "lane"}[by]
    rows = (RequestLog.objects.filter(created_at__gte=since, created_at__lte=until).values(field)
            .annotate(requests=Count("id"), errors=Count("id", filter=Q(status__gte=400)),
                      prompt_tokens=Sum("prompt_tokens"), completion_tokens=Sum("completion_tokens"),
                      avg_latency_ms=Avg("latency_ms"), avg_ttft_ms=Avg("ttft_ms")))
    return {row.pop(field) or "—": {**row, "prompt_tokens": row["prompt_tokens"] or 0,
                                      "completion_tokens": row["completion_tokens"] or 0} for row in rows}


@pytest.mark.parametrize("by", ["key", "lane"])
def test_the_totals_from_the_rollup_are_what_the_request_log_scan_counted(around_the_hour: ApiKey, by: str) -> None:
    totals = {row.pop("name"): row for row in usage_totals(by=by, hours=2, now=NOW)}
    expected = scanned(by, NOW - timedelta(hours=2), NOW)
    assert totals.keys() == expected.keys()
    for name, row in totals.items():
        assert {k: v for k, v in row.items() if not k.startswith("avg")} == \
            {k: v for k, v in expected[name].items() if not k.startswith("avg")}, name
        assert row["avg_latency_ms"] == pytest.approx(expected[name]["avg_latency_ms"]), name
        assert row["avg_ttft_ms"] == pytest.approx(expected[name]["avg_ttft_ms"]), name


def test_whole_hours_come_from_the_rollup_and_the_partial_first_hour_from_the_log(around_the_hour: ApiKey) -> None:
    before = usage_totals(by="key", hours=2, now=NOW)
    agents = next(row for row in before if row["name"] == "agents")
    # 10:25, 11:00 and 12:10: not 10:15, though the rollup's 10:00 hour holds it.
    assert (agents["requests"], agents["errors"], agents["prompt_tokens"]) == (3, 2, 23)
    assert [row["name"] for row in before] == ["agents", "—"]  # most requests first; no key is "—"
    RequestLog.objects.filter(created_at__gte=NOW.replace(hour=11, minute=0)).delete()
    UsageHour.objects.filter(hour=NOW.replace(hour=10, minute=0)).delete()
    assert usage_totals(by="key", hours=2, now=NOW) == before


def test_a_window_starting_on_the_hour_reads_only_the_rollup(around_the_hour: ApiKey) -> None:
    on_the_hour = NOW.replace(hour=13, minute=0)  # hours=2: from 11:00, whole hours only
    log(NOW.replace(hour=11, minute=30), lane="mistral")  # logged after the rollup's run: counted from its next
    totals = {row["name"]: row for row in usage_totals(by="lane", hours=2, now=on_the_hour)}
    assert set(totals) == {"qwen"} and totals["qwen"]["requests"] == 2  # 11:00 and 12:10, not deepseek's 10:59:59
    assert totals["qwen"]["avg_ttft_ms"] == pytest.approx(60.0)  # the 429 had no first token
    assert totals["qwen"]["avg_latency_ms"] == pytest.approx(101.0)
    usage_rollup(now=on_the_hour, hours_back=2)
    assert {row["name"] for row in usage_totals(by="lane", hours=2, now=on_the_hour)} == {"qwen", "mistral"}


def test_no_request_in_the_window_is_an_empty_list(db: None) -> None:
    assert usage_totals(by="lane", hours=24, now=NOW) == []
