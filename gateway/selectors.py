"""Gateway selectors: request log with filters, per-key and per-lane totals, mirrored samples."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import Avg, Count, F, Q, QuerySet, Sum
from django.utils import timezone

from core.validators import whole_number
from gateway.models import ApiKey, MirrorSample, RequestLog

STATUS_FILTER_RULE = "must be ok, error or an HTTP status from 100 to 599"


@dataclass(frozen=True)
class LogFilters:
    key_id: int | None = None
    lane: str = ""
    status: str = ""  # "ok" | "error" | "" | a number
    since: datetime | None = None


def request_log_list(*, filters: LogFilters, limit: int = 100, before_id: int | None = None) -> QuerySet[RequestLog]:
    rows = RequestLog.objects.select_related("key").order_by("-id")
    if filters.key_id is not None:
        rows = rows.filter(key_id=filters.key_id)
    if filters.lane:
        rows = rows.filter(lane=filters.lane)
    if filters.status == "ok":
        rows = rows.filter(status__lt=400)
    elif filters.status == "error":
        rows = rows.filter(status__gte=400)
    elif filters.status:
        code = whole_number(filters.status, 599)
        if code is None or code < 100:  # "²".isdigit() is true, and int() refuses it
            raise ValidationError({"status": STATUS_FILTER_RULE})
        rows = rows.filter(status=code)
    if filters.since is not None:
        rows = rows.filter(created_at__gte=filters.since)
    if before_id is not None:
        rows = rows.filter(id__lt=before_id)
    return rows[:limit]


def request_totals(*, by: str, hours: int = 24) -> list[dict[str, Any]]:
    """Requests, errors, tokens and latency per key (`by="key"`) or lane over the last hours."""
    field = {"key": "key__name", "lane": "lane"}[by]
    since = timezone.now() - timedelta(hours=hours)
    rows = (
        RequestLog.objects.filter(created_at__gte=since)
        .values(field)
        .annotate(
            requests=Count("id"), errors=Count("id", filter=Q(status__gte=400)),
            prompt_tokens=Sum("prompt_tokens"), completion_tokens=Sum("completion_tokens"),
            avg_latency_ms=Avg("latency_ms"), avg_ttft_ms=Avg("ttft_ms"),
        )
        .order_by("-requests")
    )
    return [{"name": row.pop(field) or "—", **row} for row in rows]


def api_key_list() -> QuerySet[ApiKey]:
    return ApiKey.objects.select_related("owner", "default_lane").prefetch_related("allowed_lanes")


def mirror_sample_list(*, limit: int = 100) -> QuerySet[MirrorSample]:
    return MirrorSample.objects.order_by("-id")[:limit]


def mirror_summary() -> dict[str, Any]:
    return dict(MirrorSample.objects.aggregate(
        samples=Count("id"), avg_divergence=Avg("divergence"),
        avg_local_ms=Avg("local_latency_ms"), avg_external_ms=Avg("external_latency_ms"),
        errors=Count("id", filter=~Q(error="")),
    ))


@dataclass(frozen=True)
class ShadowRow:
    published_lane: str
    shadow_lane: str
    count: int


def shadow_comparison(version_number: int, *, examples: int = 20) -> tuple[int, list[ShadowRow], list[RequestLog]]:
    """Requests on which the shadow draft decided: how often each (published, draft) pair
    occurred, and recent disagreements (with the prompt when the key allows logging it)."""
    rows = RequestLog.objects.filter(shadow_version=version_number)
    counts: dict[tuple[str, str], int] = {}
    for lane, shadow in rows.values_list("lane", "shadow_lane"):
        counts[(lane, shadow)] = counts.get((lane, shadow), 0) + 1
    table = [ShadowRow(a, b, n) for (a, b), n in sorted(counts.items())]
    disagreements = list(rows.exclude(shadow_lane="").exclude(lane=F("shadow_lane")).order_by("-id")[:examples])
    return sum(counts.values()), table, disagreements
