"""The guardian's tick (periodic worker): a lane is *serving* only while its engine makes
progress. Every serving (or stalled) replica's /metrics is read; while requests run, a
progress counter must move (lanes.liveness.judge_progress); an idle replica gets a 1-token
canary every interval. N misses in a row and no progress for the window → *stalled*: saved,
audited and broadcast (lanes.lane_states), and skipped by every gateway worker at once
(lanes.replica_health, the shared verdicts); the alert is the metrics app's `lane_stalled`
rule. Progress again → serving, taken back.

Read → judge (pure) → save → share, like the scrape tick; what each replica was last seen
doing is kept in the cache (Redis) for the next tick and the lane page (guardian.selectors)."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.cache import cache
from redis.exceptions import RedisError

from core.audit import audit_record
from core.broadcast import DASHBOARD_GROUP, broadcast
from core.http import async_http_client
from guardian.memory import memory_guard_tick
from guardian.probe import CanaryResult, Reading, read_progress, send_canary
from guardian.restarts import GUARDIAN, restarts_tick
from lanes.lane_states import lane_set_observed_state
from lanes.liveness import RUNNING_GAUGE, WAITING_GAUGE, judge_progress
from lanes.models import Lane, LaneState
from lanes.replica_health import liveness_key, replica_verdict
from lanes.selectors import lane_guardian_view

log = logging.getLogger(__name__)
TICK_LOCK = "guardian:tick"
GUARDED = (LaneState.SERVING, LaneState.DEGRADED, LaneState.STALLED)
READ_TIMEOUT_S = 2.0
STATE_TTL_S = 3600


@dataclass(frozen=True)
class Target:
    lane: str
    pk: int
    index: int
    replica: int | None  # None: a lane of one engine (its state is the lane's)
    state: str
    base_url: str
    model: str

    @property
    def key(self) -> str:
        return liveness_key(self.pk, self.index)


def guarded_targets() -> list[Target]:
    targets = []
    for lane in Lane.objects.filter(observed_state__in=GUARDED).prefetch_related("members__node", "replicas"):
        rows = lane.replica_rows()
        if len(rows) > 1:
            targets += [
                Target(
                    lane.name,
                    lane.pk,
                    row.index,
                    row.index,
                    row.observed_state,
                    lane.base_url(row.index),
                    lane.public_model_name,
                )
                for row in rows
                if row.observed_state in GUARDED
            ]
        elif lane.ranked_nodes():
            targets.append(
                Target(lane.name, lane.pk, 0, None, lane.observed_state, lane.base_url(), lane.public_model_name)
            )
    return targets


def canary_due(values: dict[str, float], state: dict[str, Any], now: float) -> bool:
    interval = float(settings.GUARDIAN_CANARY_INTERVAL_S)
    idle = values.get(RUNNING_GAUGE, 0.0) == 0 and values.get(WAITING_GAUGE, 0.0) == 0
    return interval > 0 and idle and now - float(state.get("canary_at", 0.0)) >= interval


async def probe(
    targets: list[Target], states: dict[str, dict[str, Any]]
) -> tuple[list[Reading], dict[str, CanaryResult]]:
    async with async_http_client(timeout=READ_TIMEOUT_S) as client:
        readings = list(await asyncio.gather(*(read_progress(client, t.base_url, READ_TIMEOUT_S) for t in targets)))
        now = time.time()
        due = [
            t
            for t, r in zip(targets, readings, strict=True)
            if r.values is not None and canary_due(r.values, states[t.key], now)
        ]
        timeout = float(settings.GUARDIAN_CANARY_TIMEOUT_S)
        results = await asyncio.gather(*(send_canary(client, t.base_url, t.model, timeout) for t in due))
    return readings, {t.key: result for t, result in zip(due, results, strict=True)}


def judge(reading: Reading, canary: CanaryResult | None, state: dict[str, Any], now: float) -> str:
    """Updates the replica's state in place; returns "stalled", "progress" or ""."""
    values = reading.values or {}
    state.setdefault("progress_at", now)
    verdict = judge_progress(
        before=state.get("values"),
        after=values,
        misses=int(state.get("misses", 0)),
        since_progress_s=now - float(state["progress_at"]),
        window_s=float(settings.GUARDIAN_PROGRESS_WINDOW_S),
        misses_to_stall=int(settings.GUARDIAN_MISSES),
    )
    state["values"], state["misses"], state["running"] = values, verdict.misses, values.get(RUNNING_GAUGE, 0.0)
    if verdict.progressed:
        state["progress_at"] = now
    if canary is not None:
        state["canary_at"] = now
        state["canary"] = {"ok": canary.ok, "detail": canary.detail, "at": now}
        state["canary_misses"] = 0 if canary.ok else int(state.get("canary_misses", 0)) + 1
        if canary.ok:
            state["progress_at"] = now
    since = now - float(state["progress_at"])
    if verdict.stalled:
        state["reason"] = (
            f"guardian: no progress for {since:.0f} s while {state['running']:g} request(s) ran "
            f"(iteration, prompt and generation token counters unchanged over {verdict.misses} readings)"
        )
        return "stalled"
    if canary is not None and not canary.ok and state["canary_misses"] >= int(settings.GUARDIAN_MISSES):
        state["reason"] = f"guardian: {state['canary_misses']} canaries in a row failed (last: {canary.detail})"
        return "stalled"
    if verdict.progressed or (canary is not None and canary.ok):
        return "progress"
    return ""


def apply(target: Target, outcome: str, state: dict[str, Any]) -> int:
    lane = Lane(pk=target.pk, name=target.lane)
    changed = False
    if outcome == "stalled" and target.state != LaneState.STALLED:
        changed = lane_set_observed_state(
            lane=lane,
            state=LaneState.STALLED,
            reason=state["reason"],
            source="guardian",
            expected=target.state,
            replica=target.replica,
        )
    elif outcome == "progress" and target.state == LaneState.STALLED:
        changed = lane_set_observed_state(
            lane=lane,
            state=LaneState.SERVING,
            reason="guardian: progress again",
            source="guardian",
            expected=LaneState.STALLED,
            replica=target.replica,
        )
        state["canary_misses"] = 0
    stalled = (target.state == LaneState.STALLED and outcome != "progress") or (outcome == "stalled" and changed)
    try:
        if stalled:  # refreshed every tick while it lasts: no gateway sends it a request
            replica_verdict(target.lane, target.index, down_for_s=max(10.0, settings.GUARDIAN_INTERVAL_S * 5))
        elif outcome == "progress" and target.state == LaneState.STALLED:
            replica_verdict(target.lane, target.index, down_for_s=None)
    except RedisError:
        log.warning("guardian: could not share a verdict with the gateways", exc_info=True)
    return int(changed)


def record_canary_change(target: Target, canary: CanaryResult | None, before: dict[str, Any]) -> None:
    """The lane's events show a canary when its answer changes (first answer, ok → failed,
    failed → ok), not every interval: the card shows the latest."""
    if canary is None or before.get("ok") is canary.ok:
        return
    audit_record(
        actor=None,
        system_name=GUARDIAN,
        action="lane.canary",
        obj=Lane(pk=target.pk, name=target.lane),
        before={"canary": before.get("detail")} if before else None,
        after={"canary": f"replica {target.index}: {'ok' if canary.ok else 'failed'}: {canary.detail}"},
    )


def publish_guardian_views(lane_pks: set[int]) -> None:
    """Open lane pages' Guardian cards follow every tick (lane.guardian): the same view the page
    renders at load, so the card and a reload never disagree."""
    for lane in Lane.objects.filter(pk__in=lane_pks).prefetch_related("members__node"):
        view = lane_guardian_view(lane)
        broadcast(DASHBOARD_GROUP, "lane.guardian", {"name": lane.name, "replicas": view["replicas"],
                                                      "nodes": view["nodes"]})


def guardian_tick() -> dict[str, int]:
    """One tick. Never two at once (a slow tick makes the next one skip)."""
    if not cache.add(TICK_LOCK, "1", timeout=int(READ_TIMEOUT_S + settings.GUARDIAN_CANARY_TIMEOUT_S) + 10):
        return {"skipped": 1}
    try:
        targets = guarded_targets()
        states = {t.key: cache.get(t.key) or {} for t in targets}
        readings, canaries = asyncio.run(probe(targets, states))
        now, changes = time.time(), 0
        for target, reading in zip(targets, readings, strict=True):
            state = states[target.key]
            if reading.values is None:  # not answering: the health watcher's business
                state["error"] = reading.error
                cache.set(target.key, state, STATE_TTL_S)
                continue
            state.pop("error", None)
            canary_before = dict(state.get("canary") or {})
            outcome = judge(reading, canaries.get(target.key), state, now)
            record_canary_change(target, canaries.get(target.key), canary_before)
            changes += apply(target, outcome, state)
            cache.set(target.key, state, STATE_TTL_S)
        nodes = memory_guard_tick()
        relaunched = restarts_tick()
        try:
            publish_guardian_views({target.pk for target in targets})
        except RedisError:
            log.warning("guardian: could not publish the lanes' guardian views", exc_info=True)
        return {
            "replicas": len(targets),
            "canaries": len(canaries),
            "changes": changes,
            "node_changes": nodes,
            "relaunched": relaunched,
        }
    finally:
        cache.delete(TICK_LOCK)
