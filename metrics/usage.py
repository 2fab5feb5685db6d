"""Usage over time and its cost: the usage page's charts and top consumers, per team, API key,
lane or model, in hour, 6-hour or day buckets, from the hourly rollup (UsageHour) and the
coarser tiers summed from it (UsageSixHours, UsageDay), and the cost model that prices a
request.

Cost (docs/guide-admin.md, "Cost model"): a node costs `node_hour` an hour (amortization
plus watts / 1000 × price per kWh). Within each hour, a lane's nodes' cost for that hour is
split over the hour's requests on the lane in proportion to their latency — the lane-seconds
each used, concurrent requests sharing the lane. Summed over an hour, the requests of a lane
pay exactly its nodes' hour; an hour without traffic is paid by no one (it is idle cost, shown
apart). The current hour counts the part of it gone by. The shares are kept in the hourly
rollup (UsageHour.lane_hours, metrics.storage.usage_rollup) and summed into the coarser
tiers; the price is applied when read.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import (
    Case,
    Count,
    ExpressionWrapper,
    F,
    FloatField,
    Max,
    Min,
    QuerySet,
    Sum,
    Value,
    When,
)
from django.db.models.functions import TruncDay, TruncMonth, TruncWeek
from django.utils import timezone

from core.audit import audit_record
from core.roles import UserLike
from gateway.models import ApiKey
from lanes.models import Lane, LaneNode
from metrics.models import LATENCY_BUCKETS_MS, CostModel, UsageDay, UsageHour, UsageSixHours
from metrics.selectors import _histogram_percentiles
from metrics.storage import floor_to, latency_histograms

# Per bucket: the rollup read and its time field, the bucket's seconds, the most days a chart
# covers. Hour buckets over a week were 4,000-8,000 hourly rows and 1,000 points to estimate
# percentiles for (130-250 ms, docs/performance.md): a week or more is the 6-hour tier's.
BUCKETS: dict[str, tuple[type[UsageHour | UsageSixHours | UsageDay], str, int, int]] = {
    "hour": (UsageHour, "hour", 3600, 2), "6h": (UsageSixHours, "start", 21600, 90),
    "day": (UsageDay, "day", 86400, 400)}
USAGE_BY = ("team", "key", "lane", "model")
NO_NAME = "—"  # requests without a key (or a key without a team, a lane that is gone)


@dataclass(frozen=True)
class UsageQuery:
    """What the usage page and /api/usage/series show; checked when made (ValidationError
    naming the field). `key_ids`: only these keys' requests (a team member's view)."""

    bucket: str = "hour"
    by: str = "key"
    days: int = 1
    lane: str = ""
    key_ids: frozenset[int] | None = field(default=None)

    def __post_init__(self) -> None:
        errors: dict[str, str] = {}
        if self.bucket not in BUCKETS:
            errors["bucket"] = f"must be one of {', '.join(BUCKETS)}"
        if self.by not in USAGE_BY:
            errors["by"] = f"must be one of {', '.join(USAGE_BY)}"
        most = BUCKETS[self.bucket][3] if self.bucket in BUCKETS else 400
        if isinstance(self.days, bool) or not isinstance(self.days, int) or not 1 <= self.days <= most:
            errors["days"] = f"must be a whole number of days from 1 to {most} for {self.bucket} buckets"
        if errors:
            raise ValidationError(errors)


def cost_model() -> CostModel:
    return CostModel.objects.get_or_create(pk=1)[0]


COST_FIELDS = ("currency", "node_hour_amortization", "watts_per_node", "price_per_kwh")


def cost_model_set(*, actor: UserLike, **values: Any) -> CostModel:
    """An admin's change (the caller checks the role): validated by the model's rules, audited."""
    with transaction.atomic():
        model = CostModel.objects.select_for_update().get_or_create(pk=1)[0]
        before = {name: getattr(model, name) for name in COST_FIELDS}
        for name, value in values.items():
            if name not in COST_FIELDS:
                raise ValidationError({name: "is not a field of the cost model"})
            setattr(model, name, value)
        model.full_clean()
        model.save()
        after = {name: getattr(model, name) for name in COST_FIELDS}
        if after != before:
            audit_record(actor=actor, action="cost_model.set", obj=model, before=before, after=after)
    return model


def lane_node_counts() -> dict[str, int]:
    """Nodes per lane (every replica's): what the lane costs an hour is that many node-hours."""
    rows = LaneNode.objects.order_by().values("lane__name").annotate(n=Count("node", distinct=True))
    return {row["lane__name"]: row["n"] for row in rows}


def _who(by: str) -> str:
    """The rollup's column a series is grouped by in the database: the key's name, the lane,
    or the key's id (a team is its keys', a model its lane's: named in Python, `_names`, so
    the grouping reads no other table)."""
    return {"key": "key_name", "team": "key_id"}.get(by, "lane")


def _names(by: str) -> Callable[[Any], str]:
    if by == "team":
        teams = dict(ApiKey.objects.values_list("pk", "team__name"))
        return lambda key_id: teams.get(key_id) or NO_NAME
    if by != "model":
        return lambda who: who or NO_NAME
    models = {lane.name: lane.public_model_name for lane in Lane.objects.only("name", "served_model_name")}
    return lambda who: models.get(who or "", who or NO_NAME)


def _node_hours() -> tuple[Any, dict[str, int]]:
    """Per rollup row, the node-hours of its lane it pays (its lane-hours × the lane's nodes),
    as an expression; and the nodes per lane."""
    nodes = lane_node_counts()
    per_lane = Case(*(When(lane=lane, then=Value(float(n))) for lane, n in nodes.items()),
                    default=Value(0.0), output_field=FloatField())
    return ExpressionWrapper(F("lane_hours") * per_lane, output_field=FloatField()), nodes


def _empty_point() -> dict[str, Any]:
    return {"requests": 0.0, "errors": 0.0, "prompt": 0.0, "completion": 0.0, "cost": 0.0,
            "buckets": [0.0] * len(LATENCY_BUCKETS_MS), "lows": [], "highs": []}


def _fold(point: dict[str, Any], group: dict[str, Any]) -> None:
    for name in ("requests", "errors", "prompt", "completion", "cost"):
        point[name] += float(group.get(name) or 0)
    for i, count in enumerate(group["buckets"]):
        point["buckets"][i] += float(count or 0)
    point["lows"] += group["lows"]
    point["highs"] += group["highs"]


def _figures(point: dict[str, Any]) -> dict[str, Any]:
    n = point["requests"]
    percentiles = _histogram_percentiles(point["buckets"], n, point["lows"], point["highs"])
    return {"requests": round(n), "errors": round(point["errors"]), "prompt_tokens": round(point["prompt"]),
            "completion_tokens": round(point["completion"]), "latency_p50_ms": percentiles["p50_ms"],
            "latency_p95_ms": percentiles["p95_ms"], "cost": point["cost"],
            "cost_per_request": point["cost"] / n if n else None}


def usage_series(query: UsageQuery, *, now: datetime | None = None) -> dict[str, Any]:
    """Per bucket and per team, key, lane or model: requests, errors, prompt and completion
    tokens, latency p50/p95 (from the rollup's histograms) and cost; and the range's top
    consumers (the same figures over the whole range, most requests first). One query over
    the bucket's rollup tier, grouped by bucket and series in the database, whatever the
    traffic; the current hour as of the rollup's last run (each minute)."""
    now = now or timezone.now()
    model_of_tier, tier, seconds, _ = BUCKETS[query.bucket]
    since = floor_to(now - timedelta(days=query.days), seconds) + timedelta(seconds=seconds)
    # Each bucket reads its own rollup: hours the hourly one, 6 hours and days the coarser
    # tiers (a fortnight in 6 hours or a month in days: a few hundred rows).
    rows: QuerySet[Any] = model_of_tier._default_manager.filter(
        **{f"{tier}__gte": since.date() if tier == "day" else since})
    if query.key_ids is not None:
        rows = rows.filter(key_id__in=query.key_ids)
    if query.lane:
        rows = rows.filter(lane=query.lane)
    node_hours, nodes = _node_hours()
    model = cost_model()
    groups = latency_histograms(rows.annotate(t=F(tier), who=F(_who(query.by))), "t", "who", with_ttft=False,
                                errors=Sum("errors"), prompt=Sum("prompt_tokens"), completion=Sum("completion_tokens"),
                                low=Min("latency_ms_min"), high=Max("latency_ms_max"), node_hours=Sum(node_hours))
    name_of = _names(query.by)
    points: dict[str, dict[datetime, dict[str, Any]]] = defaultdict(lambda: defaultdict(_empty_point))
    for g in groups:
        t = g["t"] if isinstance(g["t"], datetime) else datetime(g["t"].year, g["t"].month, g["t"].day, tzinfo=UTC)
        _fold(points[name_of(g["who"])][t], {
            **g, "cost": (g["node_hours"] or 0.0) * model.node_hour,
            "lows": [g["low"]] if g["low"] is not None else [], "highs": [g["high"]] if g["high"] is not None else []})
    times = [since + timedelta(seconds=seconds * i) for i in range(int((now - since).total_seconds() // seconds) + 1)]
    series, top = [], []
    for name, by_time in points.items():
        total = _empty_point()
        for point in by_time.values():
            _fold(total, point)
        top.append({"name": name, **_figures(total)})
        figures = [_figures(by_time[t]) if t in by_time else None for t in times]
        series.append({"name": name, **{measure: [f[measure] if f else (0 if measure in _COUNTS else None)
                                                  for f in figures] for measure in SERIES_MEASURES}})
    top.sort(key=lambda row: (-row["requests"], row["name"]))
    order = {row["name"]: i for i, row in enumerate(top)}
    series.sort(key=lambda s: order[s["name"]])
    lanes = [n for lane, n in nodes.items() if not query.lane or lane == query.lane]
    idle = max(0.0, sum(lanes) * model.node_hour * (now - since).total_seconds() / 3600 - sum(r["cost"] for r in top))
    return {"bucket": query.bucket, "by": query.by, "since": since, "until": now, "currency": model.currency,
            "node_hour": model.node_hour, "idle_cost": idle if query.key_ids is None else None,
            "times": times, "series": series, "top": top}


SERIES_MEASURES = ("requests", "errors", "prompt_tokens", "completion_tokens", "latency_p50_ms", "latency_p95_ms",
                   "cost")
_COUNTS = {"requests", "errors", "prompt_tokens", "completion_tokens", "cost"}


USAGE_PERIODS = {"day": TruncDay, "week": TruncWeek, "month": TruncMonth}
USAGE_GROUPS = {"key": "key_name", "lane": "lane"}
USAGE_COLUMNS = ("requests", "errors", "prompt_tokens", "completion_tokens")


def usage_table_rows(*, period: str, group: str, since: datetime,
                     key_ids: frozenset[int] | None = None) -> Iterator[dict[str, Any]]:
    """Requests and tokens per period and per key (or lane), newest period first, from the
    daily rollup, row by row (`.iterator()`: the CSV export streams them). `key_ids`: only
    these keys' usage (a team member's)."""
    trunc = USAGE_PERIODS[period]
    rows = UsageDay.objects.filter(day__gte=since.date())
    if key_ids is not None:
        rows = rows.filter(key_id__in=key_ids)
    grouped = (
        rows.annotate(period=trunc("day"), who=F(USAGE_GROUPS[group])).values("period", "who")
        .annotate(**{name: Sum(name) for name in USAGE_COLUMNS}).order_by("-period", "who")
    )
    for row in cast(Iterator[dict[str, Any]], grouped.iterator(chunk_size=2000)):
        yield {"period": row["period"].isoformat(), group: row["who"] or "-",
               **{name: row[name] for name in USAGE_COLUMNS}}


def usage_table(*, period: str, group: str, since: datetime,
                key_ids: frozenset[int] | None = None) -> list[dict[str, Any]]:
    return list(usage_table_rows(period=period, group=group, since=since, key_ids=key_ids))
