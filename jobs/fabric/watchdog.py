"""The RDMA watchdog (seed 000): on every beat, a short `ib_send_lat` between each
multi-node lane's head and its workers; a moving average of the round trip above the
lane's threshold (12 us by default) puts the lane in `degraded` — the gateway then holds
its prompts to the degraded context limit (512K by default) — and it recovers only once
the average falls below a lower mark (hysteresis), so a noisy link does not flap."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.utils import timezone

from core.audit import audit_record
from core.roles import UserLike
from jobs.fabric.commands import device_ipv4, perftest_client, perftest_server
from jobs.fabric.output import ToolOutputError, parse_latency
from jobs.fabric.pair import run_pair
from jobs.models import LaneWatchdog
from jobs.transports import TransportError, endpoint_for, transport_for
from lanes.lane_states import lane_set_observed_state
from lanes.models import DEFAULT_DEGRADED_CONTEXT_LIMIT, Lane, LaneState, Node

logger = logging.getLogger(__name__)

WATCHED_STATES = (LaneState.SERVING, LaneState.DEGRADED)
PROBE_SIZE, PROBE_ITERATIONS = 2, 1000  # seed 003's 2-byte messages; 1,000 round trips take ~6 ms


@dataclass(frozen=True)
class WatchdogStep:
    samples: list[float]
    average: float
    degraded: bool
    transition: str  # "degrade" | "recover" | ""


def watchdog_step(*, samples: Sequence[float], sample: float, window: int, threshold: float,
                  recover_below: float | None, degraded: bool) -> WatchdogStep:
    """Pure: the moving average over the last `window` samples, and whether the lane
    crosses into degraded (average > threshold) or back (average < recover_below)."""
    kept = [*samples, sample][-max(window, 1):]
    average = sum(kept) / len(kept)
    low = recover_below if recover_below is not None else threshold * 0.8
    if not degraded and average > threshold:
        return WatchdogStep(kept, average, True, "degrade")
    if degraded and average < low:
        return WatchdogStep(kept, average, False, "recover")
    return WatchdogStep(kept, average, degraded, "")


def watchdog_port(lane: Lane) -> int:
    # Its own range, per lane: never a fabric job's ports (those are refused on serving nodes anyway).
    return int(settings.FABRIC_WATCHDOG_BASE_PORT) + lane.pk % 100


async def _round_trip(head: Node, worker: Node, port: int) -> float:
    """RTT in us: perftest's ib_send_lat reports half the ping-pong round trip."""
    report = head.network_report or {}
    device = str((report.get("ib_hca") or [""])[0])
    worker_ip = device_ipv4(worker.network_report or {}, device) or str((worker.network_report or {}).get("fabric_ip"))
    if not device or not worker_ip or worker_ip == "None":
        raise ToolOutputError(f"no network report for {head.name}/{worker.name}: run a network check")
    extra = ["-s", str(PROBE_SIZE), "-n", str(PROBE_ITERATIONS)]
    server = transport_for(endpoint_for(worker))
    client = transport_for(endpoint_for(head))
    try:
        result = await run_pair(
            server=server, client=client, timeout_s=30,
            server_command=perftest_server("ib_send_lat", device=device, gid_index=(worker.network_report or {}).get(
                "gid_index"), port=port, extra=extra),
            client_command=perftest_client("ib_send_lat", device=device, gid_index=report.get("gid_index"),
                                           port=port, server_ip=worker_ip, extra=extra),
            on_server_line=lambda *_: None, on_client_line=lambda *_: None)
    finally:
        await server.close()
        await client.close()
    if not result.ok or result.client is None:
        raise ToolOutputError(f"ib_send_lat {head.name} → {worker.name}: {result.failure()}")
    return 2 * parse_latency("\n".join(result.client.stdout)).t_avg


def lane_head_worker_pairs(lane: Lane) -> list[tuple[Node, Node]]:
    """Each replica's head with each of its workers (the links its NCCL traffic crosses)."""
    pairs = []
    for index in lane.replica_indexes() or [0]:
        nodes = lane.ranked_nodes(index)
        pairs += [(nodes[0], worker) for worker in nodes[1:]]
    return pairs


def lane_round_trip_us(lane: Lane) -> float:
    """The worst head↔worker round trip of the lane right now (over all its replicas: the
    context limit is the lane's)."""
    port = watchdog_port(lane)
    return max(asyncio.run(_round_trip(head, worker, port)) for head, worker in lane_head_worker_pairs(lane))


def rdma_alert_changed(*, lane: Lane, watchdog: LaneWatchdog, opened: bool) -> None:
    """Logs the transition. The alert itself is the metrics app's `rdma_rtt_high` rule, which
    reads this watchdog's state on every scrape tick (jobs never imports metrics)."""
    logger.warning("RDMA watchdog alert %s for lane %s: average %.2f us (threshold %.2f us)",
                   "opened" if opened else "resolved", lane.name, watchdog.average_us or 0, watchdog.threshold_us)


def watchdog_check_lane(*, lane: Lane, sample_us: float | None = None) -> WatchdogStep | None:
    """One measurement (or the given sample), the moving average, and the transition."""
    watchdog, _ = LaneWatchdog.objects.get_or_create(lane=lane)
    if not watchdog.enabled:
        return None
    if watchdog.degraded and lane.observed_state == LaneState.SERVING:
        # Relaunched (or set serving by hand) since it was degraded: judge the link afresh,
        # or a still-slow link would never degrade the lane again.
        watchdog.degraded, watchdog.samples = False, []
    now = timezone.now()
    if sample_us is None:
        try:
            sample_us = lane_round_trip_us(lane)
        except (TransportError, ToolOutputError, TimeoutError, OSError) as exc:
            # No sample is not a fast link: keep the state, say why on the watchdog.
            watchdog.last_error, watchdog.last_measured_at = str(exc)[:2000], now
            watchdog.save(update_fields=["last_error", "last_measured_at"])
            logger.warning("RDMA watchdog could not measure lane %s: %s", lane.name, exc)
            return None
    step = watchdog_step(samples=watchdog.samples, sample=sample_us, window=watchdog.window,
                         threshold=watchdog.threshold_us, recover_below=watchdog.recover_below_us,
                         degraded=watchdog.degraded)
    watchdog.samples, watchdog.average_us, watchdog.degraded = [round(s, 3) for s in step.samples], step.average, \
        step.degraded
    watchdog.last_measured_at, watchdog.last_error = now, ""
    watchdog.save()
    if step.transition:
        lane_watchdog_transition(lane=lane, watchdog=watchdog, degrade=step.transition == "degrade")
    return step


def lane_watchdog_transition(*, lane: Lane, watchdog: LaneWatchdog, degrade: bool) -> None:
    limit = lane.degraded_context_limit or DEFAULT_DEGRADED_CONTEXT_LIMIT
    if degrade:
        reason = (f"RDMA watchdog: average round trip {watchdog.average_us:.2f} us above {watchdog.threshold_us:g} us; "
                  f"context limited to {min(limit, lane.max_model_len):,} tokens")
        state = LaneState.DEGRADED
    else:
        low = watchdog.recover_below_us if watchdog.recover_below_us is not None else watchdog.threshold_us * 0.8
        reason = f"RDMA watchdog: average round trip {watchdog.average_us:.2f} us back below {low:g} us"
        state = LaneState.SERVING
    before = lane.observed_state
    if lane.observed_state in WATCHED_STATES:
        lane_set_observed_state(lane=lane, state=state, reason=reason)
    audit_record(actor=None, action="lane.degraded" if degrade else "lane.recovered", obj=lane,
                 before={"observed_state": before}, after={"observed_state": lane.observed_state, "reason": reason,
                                                           "average_us": round(watchdog.average_us or 0, 2)})
    rdma_alert_changed(lane=lane, watchdog=watchdog, opened=degrade)


def watched_lanes() -> list[Lane]:
    lanes = Lane.objects.filter(observed_state__in=WATCHED_STATES).prefetch_related("members__node")
    return [lane for lane in lanes if lane_head_worker_pairs(lane)]


def watchdog_tick() -> dict[str, str]:
    """The beat task's body: every multi-node lane that serves, one at a time."""
    outcome: dict[str, str] = {}
    for lane in watched_lanes():
        step = watchdog_check_lane(lane=lane)
        outcome[lane.name] = "skipped" if step is None else step.transition or f"{step.average:.2f} us"
    return outcome


WATCHDOG_FIELDS = ("enabled", "threshold_us", "recover_below_us", "window")


def lane_watchdog_get(lane: Lane) -> LaneWatchdog:
    watchdog, _ = LaneWatchdog.objects.select_related("lane").get_or_create(lane=lane)
    return watchdog


def lane_watchdog_update(*, lane: Lane, actor: UserLike | None, data: Mapping[str, Any]) -> LaneWatchdog:
    """Opt a lane out (or back in), or change its threshold, recovery mark or window."""
    watchdog = lane_watchdog_get(lane)
    before = {name: getattr(watchdog, name) for name in WATCHDOG_FIELDS}
    errors: dict[str, str] = {}
    for name, value in data.items():
        if name not in WATCHDOG_FIELDS:
            errors[name] = "unknown field"
        elif name == "enabled":
            if not isinstance(value, bool):
                errors[name] = "must be true or false"
            else:
                watchdog.enabled = value
        elif name == "window":
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 100:
                errors[name] = "must be a whole number of samples between 1 and 100"
            else:
                watchdog.window = value
        elif value is None and name == "recover_below_us":
            watchdog.recover_below_us = None
        elif isinstance(value, bool) or not isinstance(value, int | float) or not 0.5 <= value <= 10_000:
            errors[name] = "must be a number of microseconds between 0.5 and 10000"
        else:
            setattr(watchdog, name, float(value))
    if watchdog.recover_below_us is not None and watchdog.recover_below_us >= watchdog.threshold_us:
        errors.setdefault("recover_below_us", "must be below threshold_us (the hysteresis keeps a noisy link "
                                              "from flapping)")
    if errors:
        raise ValidationError(errors)
    watchdog.save()
    after = {name: getattr(watchdog, name) for name in WATCHDOG_FIELDS}
    audit_record(actor=actor, action="lane.watchdog", obj=lane, before=before, after=after)
    return watchdog
