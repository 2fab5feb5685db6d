"""What the pages and /metrics show of the fair queues (gateway.fair): each replica's queue
now (Redis), and over the last percentile window (PORTAL_METRICS_PERCENTILE_WINDOW_S) the
queue wait p50/p95 per lane, key and class and the requests shed (the request log)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Count, Q
from django.utils import timezone
from redis.exceptions import RedisError

from core.stats import percentile_linear
from gateway.models import RequestLog
from lanes.models import Lane
from lanes.replica_health import fair_queue_state

SHED_CODE = "server_busy"
WAITS_EVENT = "fair.waits"  # the waits table's live event (per key to operators: portal.consumers)


@dataclass(frozen=True)
class QueueNow:
    lane: str
    replica: int
    slots: int
    state: dict[str, int] | None  # held, interactive, batch, shed (None: Redis does not answer)


@dataclass(frozen=True)
class WaitRow:
    lane: str
    key: str
    priority: str
    queued: int  # requests that waited for a slot
    wait_p50_ms: float | None
    wait_p95_ms: float | None
    shed: int  # answered 503 server_busy (the queue full, or the wait too long)


def fair_queues_now(lane: str = "") -> list[QueueNow]:
    lanes = Lane.objects.filter(Q(gateway_slots__isnull=False) | Q(max_num_seqs__isnull=False)).order_by("name")
    out = []
    for row in lanes.filter(name=lane) if lane else lanes:
        for index in row.replica_indexes():
            try:
                state: dict[str, int] | None = fair_queue_state(row.name, index)
            except RedisError:
                state = None
            out.append(QueueNow(row.name, index, row.gateway_slots or row.max_num_seqs or 0, state))
    return out


def fair_queues_live() -> dict[str, list[dict[str, Any]]]:
    """Each lane's replicas' queues now, as the lane page's Fair queue card shows them: what
    every metrics.tick carries (its cells follow it live; `state` None: Redis does not answer)."""
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for queue in fair_queues_now():
        out[queue.lane].append({"replica": queue.replica, "slots": queue.slots, "state": queue.state})
    return dict(out)


def fair_waits(*, lane: str = "", by_key: bool = True, now: datetime | None = None) -> list[WaitRow]:
    """Per lane, key (unless not `by_key`) and class over the percentile window: waits of the
    requests that queued, and sheds."""
    since = (now or timezone.now()) - timedelta(seconds=settings.METRICS_PERCENTILE_WINDOW_S)
    rows = RequestLog.objects.filter(created_at__gte=since).filter(
        Q(queue_ms__isnull=False) | Q(status=503, error_code=SHED_CODE)).exclude(lane="")
    if lane:
        rows = rows.filter(lane=lane)
    waits: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    shed: dict[tuple[str, str, str], int] = defaultdict(int)
    for lane_name, key, priority, queue_ms, error_code in rows.values_list(
            "lane", "key__name", "priority", "queue_ms", "error_code").iterator():
        group = (lane_name, (key or "") if by_key else "", priority or "interactive")
        if error_code == SHED_CODE:
            shed[group] += 1
        elif queue_ms is not None:
            waits[group].append(queue_ms)
    return [WaitRow(group[0], group[1], group[2], len(waits[group]), percentile_linear(waits[group], 0.5),
                    percentile_linear(waits[group], 0.95), shed[group])
            for group in sorted(set(waits) | set(shed))]


def fair_waits_live(*, by_key: bool) -> dict[str, Any]:
    """The waits table as the pages' socket carries it (WAITS_EVENT, and each metrics.tick's
    `fair_waits` per class): every lane's rows, per key and class only for operators."""
    rows = [{**asdict(row), "wait_p50_ms": _ms(row.wait_p50_ms), "wait_p95_ms": _ms(row.wait_p95_ms)}
            for row in fair_waits(by_key=by_key)]
    return {"by_key": by_key, "window_s": settings.METRICS_PERCENTILE_WINDOW_S, "rows": rows}


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def lanes_shedding(now: datetime | None = None) -> dict[str, int]:
    """Lane → requests shed over the percentile window (the lane_shedding alert)."""
    since = (now or timezone.now()) - timedelta(seconds=settings.METRICS_PERCENTILE_WINDOW_S)
    rows = (RequestLog.objects.filter(created_at__gte=since, status=503, error_code=SHED_CODE).exclude(lane="")
            .values("lane").annotate(n=Count("id")).order_by())
    return {row["lane"]: row["n"] for row in rows}
