"""The scrape tick (service): read every serving lane and every node at once, turn the
cumulative readings into figures, store them, evaluate the alerts, then tell the
dashboards — save first, broadcast second."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core.broadcast import DASHBOARD_GROUP, OPERATORS_GROUP, broadcast
from core.http import async_http_client
from gateway.fair_view import WAITS_EVENT, fair_queues_live, fair_waits_live, lanes_shedding
from gateway.models import Budget
from gateway.team_services import budget_use
from jobs.models import LaneWatchdog
from jobs.transports import NodeEndpoint, endpoint_for
from lanes.models import Lane, LaneState, Node, NodeState
from metrics.alerts import alerts_evaluate
from metrics.models import ScrapeTarget, TargetKind
from metrics.nodeprobe import NodeReading, node_figures
from metrics.parsing import EngineReading, HistogramSnapshot, lane_figures, window_advance
from metrics.rules import BudgetView, TargetView
from metrics.scraper import LaneTarget, ScrapeResult, scrape_all
from metrics.selectors import gateway_live
from metrics.storage import samples_store

SCRAPED_LANE_STATES = (LaneState.SERVING, LaneState.DEGRADED)
TICK_EVENT = "metrics.tick"


def lane_metrics_url(lane: Lane) -> str | None:
    """vLLM serves /metrics on the head node (rank 0 of the first replica)."""
    head = next(iter(lane.members.all()), None)
    if head is None:
        return None
    return f"http://{head.node.address}:{lane.api_port}/metrics"


def scrape_targets() -> tuple[list[Lane], list[LaneTarget], list[Node], list[NodeEndpoint]]:
    lanes = list(Lane.objects.order_by("name").prefetch_related("members__node"))
    lane_targets = []
    for lane in lanes:
        url = lane_metrics_url(lane)
        if lane.observed_state in SCRAPED_LANE_STATES and url:
            lane_targets.append(LaneTarget(lane.name, url))
    nodes = list(Node.objects.order_by("name"))
    endpoints = [endpoint_for(node) for node in nodes if node.state != NodeState.MAINTENANCE]
    return lanes, lane_targets, nodes, endpoints


# Snapshots kept per lane for the percentile window: one every window/6 seconds at most, so
# the window starts at a reading between 5/6 of it and all of it ago (50-60 s by default).
# Each is written with the lane's state every tick: 12 (every 5 s) made a lane's state 6x
# the reading alone, 6 of the used histograms ~2x (perf/percentile_window.py).
WINDOW_SNAPSHOTS = 6


def _figures(result: ScrapeResult, previous: dict[str, Any] | None) -> tuple[dict[str, float], dict[str, Any] | None]:
    """The figures of a reading, and the state to keep for the next scrape (the reading; for
    a lane also the percentile window's snapshots)."""
    if isinstance(result.reading, EngineReading):
        before = EngineReading.from_json(previous) if previous and "counters" in previous else None
        bounds = {name: sorted(b) for name, b in before.histograms.items()} if before else {}
        window = [HistogramSnapshot.from_json(s, bounds) for s in (previous or {}).get("window", [])] if before else []
        window_s = settings.METRICS_PERCENTILE_WINDOW_S
        start, kept = window_advance(window, before, result.reading, window_s=window_s,
                                     step_s=window_s / WINDOW_SNAPSHOTS)
        state = result.reading.to_json()
        state["window"] = [snapshot.to_json() for snapshot in kept]
        return lane_figures(before, result.reading, window_start=start), state
    if isinstance(result.reading, NodeReading):
        node_before = NodeReading.from_json(previous) if previous and "cpu_total" in previous else None
        return node_figures(node_before, result.reading), result.reading.to_json()
    return {}, None


def scrape_tick(*, now: datetime | None = None) -> dict[str, Any]:
    now = now or timezone.now()
    lanes, lane_targets, nodes, endpoints = scrape_targets()
    timeout = settings.METRICS_SCRAPE_TIMEOUT_S

    async def run() -> list[ScrapeResult]:
        async with async_http_client(timeout=timeout) as client:
            return await scrape_all(lane_targets, endpoints, timeout_s=timeout, client=client,
                                    concurrency=settings.METRICS_SCRAPE_CONCURRENCY)

    results = asyncio.run(run())
    return tick_record(now=now, results=results, lanes=lanes, nodes=nodes)


def tick_record(*, now: datetime, results: list[ScrapeResult], lanes: list[Lane], nodes: list[Node]) -> dict[str, Any]:
    """Everything after the network: figures, scrape state, samples, alerts, broadcast."""
    known = {(t.kind, t.target): t for t in ScrapeTarget.objects.all()}
    figures: dict[str, dict[str, dict[str, float]]] = {"lane": {}, "node": {}}
    changed: list[ScrapeTarget] = []
    for result in results:
        state = known.get((result.kind, result.name)) or ScrapeTarget(kind=result.kind, target=result.name)
        state.last_attempt_at, state.duration_ms = now, result.duration_ms
        if result.reading is not None:
            state.figures, state.reading = _figures(result, state.reading)
            state.ok, state.error, state.consecutive_failures, state.last_ok_at = True, "", 0, now
            figures[result.kind][result.name] = state.figures
        else:
            state.ok, state.error = False, result.error
            state.consecutive_failures += 1
            state.figures = {}
        changed.append(state)
        known[(result.kind, result.name)] = state
    with transaction.atomic():
        ScrapeTarget.objects.bulk_create(
            changed, update_conflicts=True, unique_fields=["kind", "target"],
            update_fields=["ok", "error", "consecutive_failures", "last_attempt_at", "last_ok_at", "duration_ms",
                           "reading", "figures"],
        )
        stored = samples_store(at=now, lanes=figures["lane"], nodes=figures["node"])
    scraped = {(r.kind, r.name) for r in results}

    def view(kind: str, name: str, **extra: Any) -> TargetView:
        state = known.get((kind, name))
        live = state is not None and (kind, name) in scraped
        return TargetView(kind=kind, name=name, figures=state.figures if live and state else {},
                          consecutive_failures=state.consecutive_failures if live and state else 0,
                          error=state.error if live and state else "", **extra)

    watchdogs = {w.lane_id: w for w in LaneWatchdog.objects.filter(lane__in=lanes, enabled=True)}
    shedding = lanes_shedding(now)
    views = [view(TargetKind.LANE, lane.name, lane_state=lane.observed_state, lane_desired=lane.desired_state,
                  shed=shedding.get(lane.name, 0), **_rdma_view(watchdogs.get(lane.pk)))
             for lane in lanes]
    views += [view(TargetKind.NODE, node.name) for node in nodes]
    alert_counts = alerts_evaluate(targets=views, budgets=budget_views(), now=now)
    payload = tick_payload(now=now, lanes=lanes, nodes=nodes, known=known, scraped=scraped)
    broadcast(DASHBOARD_GROUP, TICK_EVENT, payload)
    broadcast(OPERATORS_GROUP, WAITS_EVENT, fair_waits_live(by_key=True))  # per key: operators only
    return {"targets": len(results), "failed": sum(1 for r in results if r.reading is None), "samples": stored,
            **alert_counts}


def budget_views() -> list[BudgetView]:
    """Every token budget's use this period, as the alert rules read it."""
    views = []
    for budget in Budget.objects.select_related("team", "key"):
        use = budget_use(budget)
        used, limit, what = use.tightest
        views.append(BudgetView(kind="team" if budget.team else "key",
                                owner=budget.team.name if budget.team else budget.key.name if budget.key else "",
                                period=budget.period, share=use.used_share, used=f"{used} of {limit} {what}"))
    return views


def _card(state: ScrapeTarget | None, live: bool) -> dict[str, Any]:
    if state is None or not live:
        return {"scraped": False, "ok": None, "error": "", "figures": {}}
    return {"scraped": True, "ok": state.ok, "error": state.error, "figures": state.figures}


def tick_payload(*, now: datetime, lanes: list[Lane], nodes: list[Node],
                 known: dict[tuple[str, str], ScrapeTarget], scraped: set[tuple[str, str]]) -> dict[str, Any]:
    queues = fair_queues_live()
    return {
        "at": now.isoformat(),
        "gateway": gateway_live(now=now),
        "fair_waits": fair_waits_live(by_key=False),  # per lane and class; per key to operators (WAITS_EVENT)
        "lanes": {lane.name: {"state": lane.observed_state, "fair": queues.get(lane.name, []),
                              **_card(known.get(("lane", lane.name)), ("lane", lane.name) in scraped)}
                  for lane in lanes},
        "nodes": {node.name: {"state": node.state,
                              **_card(known.get(("node", node.name)), ("node", node.name) in scraped)}
                  for node in nodes},
    }


def _rdma_view(watchdog: LaneWatchdog | None) -> dict[str, Any]:
    """The RDMA watchdog's verdict as alert input: its transitions open and resolve the alert."""
    if watchdog is None:
        return {}
    return {"rdma_degraded": watchdog.degraded, "rdma_avg_us": watchdog.average_us,
            "rdma_threshold_us": watchdog.threshold_us}
