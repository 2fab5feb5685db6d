"""The memory guard while lanes serve (the launch has its own: jobs.kinds.lane_guard). Every
tick, each node a guarded lane runs on is read with the metrics app's node probe; below the
floor (lanes.liveness) the engine of every lane on that node is stopped gracefully (the stop
plan's SIGINT, wait, SIGKILL; containers stay for inspection) and the lane is marked failed
with the reason naming the node and MemAvailable — before the node wedges. The `lane_down`
alert follows (a lane that should serve is failed)."""

from __future__ import annotations

import asyncio
import logging

from django.conf import settings

from jobs.kinds.lane_guard import KIB_PER_GIB, graceful_stop_steps
from jobs.transports import TransportError, endpoint_for, transport_for
from lanes.lane_states import lane_set_observed_state
from lanes.liveness import memory_floor_problem
from lanes.models import Lane, LaneState, Node
from lanes.plans import PlanStep
from lanes.selectors import lane_plans
from metrics.nodeprobe import NodeReading
from metrics.scraper import scrape_node

log = logging.getLogger(__name__)
GUARDED = (LaneState.SERVING, LaneState.DEGRADED, LaneState.STALLED)
READ_TIMEOUT_S = 5.0


def _ignore(stream: str, raw: bytes, dropped: int) -> None:
    """Output is not kept."""


async def _read_all(nodes: list[Node]) -> list[float | None]:
    results = await asyncio.gather(*(scrape_node(endpoint_for(node), READ_TIMEOUT_S) for node in nodes))
    return [r.reading.mem_available_kib / KIB_PER_GIB
            if isinstance(r.reading, NodeReading) and r.reading.mem_available_kib is not None else None
            for r in results]


async def _run_steps(nodes: dict[str, Node], steps: list[PlanStep]) -> None:
    for step in steps:
        transport = transport_for(endpoint_for(nodes[step.node]))
        try:
            await transport.run(step.command, on_line=_ignore, timeout_s=step.timeout_s)
        except TransportError as exc:
            log.warning("guardian: %s on %s failed: %s", step.title, step.node, exc)
        finally:
            await transport.close()


def memory_guard_tick() -> int:
    """Returns how many lanes it stopped."""
    floor = float(settings.GUARDIAN_MEMORY_FLOOR_GIB)
    if floor <= 0:
        return 0
    lanes = list(Lane.objects.filter(observed_state__in=GUARDED).prefetch_related("members__node"))
    nodes = {member.node.name: member.node for lane in lanes for member in lane.members.all()}
    if not nodes:
        return 0
    readings = dict(zip(nodes, asyncio.run(_read_all(list(nodes.values()))), strict=True))
    stopped = 0
    for lane in lanes:
        for name in [m.node.name for m in lane.members.all()]:
            available = readings.get(name)
            problem = None if available is None else memory_floor_problem(
                node=name, available_gib=available, floor_gib=floor)
            if problem:
                stopped += _stop_lane(lane, name, problem, nodes)
                break
    return stopped


def _stop_lane(lane: Lane, node: str, problem: str, nodes: dict[str, Node]) -> int:
    steps = [step for plan in lane_plans(lane, "stop") for step in graceful_stop_steps(plan, node)]
    asyncio.run(_run_steps(nodes, steps))
    lane_set_observed_state(lane=lane, state=LaneState.FAILED, source="guardian",
                            reason=f"memory guard: {problem}; stopped the engine on {node}")
    return 1
