"""The memory guard while lanes serve (the launch has its own: jobs.kinds.lane_guard). Every
tick, each node a guarded lane runs on is read with the metrics app's node probe; below the
floor (lanes.liveness) the engine of every lane on that node is stopped gracefully (the stop
plan's SIGINT, wait, SIGKILL; containers stay for inspection) and the lane is marked failed
with the reason naming the node and MemAvailable — before the node wedges. The `lane_down`
alert follows (a lane that should serve is failed)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass

from django.conf import settings
from django.core.cache import cache

from guardian.restarts import node_rebooted
from jobs.kinds.lane_guard import KIB_PER_GIB, graceful_stop_steps
from jobs.transports import TransportError, endpoint_for, transport_for
from lanes.lane_states import lane_set_observed_state
from lanes.liveness import memory_floor_problem
from lanes.models import DesiredState, Lane, LaneState, Node
from lanes.plan_shell import MEMINFO_COMMAND
from lanes.plans import PlanStep
from lanes.replica_health import node_memory_key
from lanes.selectors import lane_plans

log = logging.getLogger(__name__)
GUARDED = (LaneState.SERVING, LaneState.DEGRADED, LaneState.STALLED)
READ_TIMEOUT_S = 5.0
STATE_TTL_S = 3600
# MemAvailable and swap, then the boot id (a new one: the node rebooted).
NODE_COMMAND = MEMINFO_COMMAND + '; b=; read -r b < "${SPARK_PROCFS:-/proc}/sys/kernel/random/boot_id"; echo "$b"'
BOOT_KEY = "guardian:boot:{pk}"  # by pk: a node re-created under the same name is another machine


def _ignore(stream: str, raw: bytes, dropped: int) -> None:
    """Output is not kept."""


@dataclass(frozen=True)
class NodeSeen:
    available_gib: float | None
    boot_id: str


async def _read(node: Node) -> NodeSeen:
    transport = transport_for(endpoint_for(node))
    try:
        result = await asyncio.wait_for(
            transport.run(NODE_COMMAND, on_line=_ignore, timeout_s=READ_TIMEOUT_S, capture=True), READ_TIMEOUT_S
        )
    except (TimeoutError, TransportError, OSError):
        return NodeSeen(None, "")
    finally:
        with contextlib.suppress(TimeoutError, OSError, TransportError):
            await asyncio.wait_for(transport.close(), 1.0)
    lines = [line.strip() for line in result.stdout]
    fields = lines[0].split() if lines else []
    available = float(fields[0]) / KIB_PER_GIB if result.ok and fields else None
    return NodeSeen(available, lines[1] if len(lines) > 1 else "")


async def _read_all(nodes: list[Node]) -> list[NodeSeen]:
    return list(await asyncio.gather(*(_read(node) for node in nodes)))


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
    """The nodes of every lane the guardian watches or that should serve: memory below the floor
    stops the guarded lanes there; a new boot id marks the node's lanes failed. Returns how many
    lanes it changed."""
    floor = float(settings.GUARDIAN_MEMORY_FLOOR_GIB)
    lanes = list(
        (Lane.objects.filter(observed_state__in=GUARDED) | Lane.objects.filter(desired_state=DesiredState.SERVING))
        .distinct()
        .prefetch_related("members__node")
    )
    nodes = {member.node.name: member.node for lane in lanes for member in lane.members.all()}
    if not nodes:
        return 0
    seen = dict(zip(nodes, asyncio.run(_read_all(list(nodes.values()))), strict=True))
    changed = 0
    for name, node_seen in seen.items():
        on_node = [lane for lane in lanes if name in [m.node.name for m in lane.members.all()]]
        if node_seen.available_gib is not None:
            cache.set(
                node_memory_key(nodes[name].pk),
                {"available_gib": node_seen.available_gib, "at": time.time()},
                STATE_TTL_S,
            )
        key = BOOT_KEY.format(pk=nodes[name].pk)
        known = cache.get(key)
        if node_seen.boot_id:
            cache.set(key, node_seen.boot_id, None)
            if known and known != node_seen.boot_id:
                changed += node_rebooted(node=name, lanes=on_node)
                continue
        problem = (
            None
            if node_seen.available_gib is None or floor <= 0
            else memory_floor_problem(node=name, available_gib=node_seen.available_gib, floor_gib=floor)
        )
        for lane in on_node if problem else []:
            lane.refresh_from_db(fields=["observed_state"])
            if lane.observed_state in GUARDED:
                changed += _stop_lane(lane, name, str(problem), nodes)
    return changed


def _stop_lane(lane: Lane, node: str, problem: str, nodes: dict[str, Node]) -> int:
    steps = [step for plan in lane_plans(lane, "stop") for step in graceful_stop_steps(plan, node)]
    asyncio.run(_run_steps(nodes, steps))
    lane_set_observed_state(
        lane=lane,
        state=LaneState.FAILED,
        source="guardian",
        reason=f"memory guard: {problem}; stopped the engine on {node}",
    )
    return 1
