"""The lane health watcher (observed state is a claim kept true). Every tick,
from the periodic worker, it probes concurrently, with tight timeouts:

- every node not in maintenance (an SSH node: a TCP connect to its SSH port; a simulated
  node: its sparksim directory), N failures in a row → `unreachable`, an answer → `online`;
- every lane (every replica of a lane of several) that claims to serve or must be re-checked (serving, degraded, checking, and
  failed/unreachable while desired serving): `/health` 200 and `/v1/models` listing its
  served name. N failures in a row → `failed` (or `unreachable` when its head node does not
  answer), with the reason; a lane answering again → `serving`. A `checking` lane (the portal
  just started) takes the first probe's verdict.

Starting and stopping lanes belong to the job moving them (the reaper reconciles a lost one).
State changes go through lanes.lane_states and lanes.node_services (saved, audited,
broadcast). Each verdict also reaches every gateway worker at once (lanes.replica_health):
a replica found down is skipped, one answering again is taken back."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from asgiref.sync import async_to_sync
from django.conf import settings
from django.core.cache import cache
from django.db.models import F, Q, QuerySet
from django.utils import timezone
from redis.exceptions import RedisError

from core.http import async_http_client
from lanes.lane_states import lane_set_observed_state
from lanes.models import DesiredState, Lane, LaneReplica, LaneState, Node, NodeState, Transport
from lanes.node_services import node_set_state
from lanes.replica_health import replica_verdict

log = logging.getLogger(__name__)
TICK_LOCK = "lanes:watcher:tick"
WATCHED = Q(observed_state__in=(LaneState.SERVING, LaneState.DEGRADED, LaneState.CHECKING, LaneState.STALLED)) | Q(
    observed_state__in=(LaneState.FAILED, LaneState.UNREACHABLE), desired_state=DesiredState.SERVING
)


@dataclass(frozen=True)
class Probe:
    ok: bool
    reason: str
    refused: bool = False  # nothing listens: provably down, no need to wait for N probes


@dataclass(frozen=True)
class LaneTarget:
    pk: int
    name: str
    state: str
    failures: int
    head: str  # head node's name
    base_url: str
    model: str
    # A lane of several replicas is probed replica by replica (state and failures are the
    # replica's); None: a lane of one engine, whose state is the lane's.
    replica: int | None = None


@dataclass(frozen=True)
class WatchedNode:
    pk: int
    name: str
    state: str
    failures: int
    transport: str
    address: str
    port: int
    sim_dir: str


@dataclass
class TickReport:
    lanes: int = 0
    nodes: int = 0
    probe_s: float = 0.0
    total_s: float = 0.0
    changes: int = 0
    skipped: bool = False


def probe_timeout() -> httpx.Timeout:
    return httpx.Timeout(settings.LANES_WATCH_TIMEOUT_S, connect=settings.LANES_WATCH_CONNECT_TIMEOUT_S)


async def probe_lane(client: httpx.AsyncClient, target: LaneTarget) -> Probe:
    try:
        health = await client.get(f"{target.base_url}/health")
        if health.status_code != 200:
            return Probe(False, f"/health answered {health.status_code}")
        models = await client.get(f"{target.base_url}/v1/models")
        if models.status_code != 200:
            return Probe(False, f"/v1/models answered {models.status_code}")
        ids = [m.get("id") for m in models.json().get("data", []) if isinstance(m, dict)]
        if target.model not in ids:
            return Probe(False, f"/v1/models lists {ids}, not {target.model!r}")
        return Probe(True, "/health 200, /v1/models lists it")
    except httpx.ConnectError as exc:
        refused = _refused(exc)
        return Probe(False, f"{target.base_url} refused the connection" if refused
                     else f"cannot connect to {target.base_url} ({exc or type(exc).__name__})", refused=refused)
    except httpx.TimeoutException as exc:
        return Probe(False, f"{target.base_url} did not answer in time ({type(exc).__name__})")
    except (httpx.HTTPError, ValueError) as exc:
        return Probe(False, f"{target.base_url}: {type(exc).__name__}")


def _refused(exc: BaseException) -> bool:
    """The host answered with a reset: the node is up, nothing listens on the port."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ConnectionRefusedError) or "refused" in str(seen).lower():
            return True
        seen = seen.__cause__ or seen.__context__
    return False


async def probe_node(target: WatchedNode) -> Probe:
    if target.transport == Transport.LOCAL:
        # A simulated Spark lives in its sparksim directory on this machine.
        present = bool(target.sim_dir) and (Path(target.sim_dir) / "node.json").is_file()
        return Probe(present, "sparksim node directory present" if present else f"{target.sim_dir} is gone")
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(target.address, target.port),
                                           settings.LANES_WATCH_CONNECT_TIMEOUT_S)
    except (OSError, TimeoutError) as exc:
        return Probe(False, f"SSH port {target.address}:{target.port} does not answer ({type(exc).__name__})")
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return Probe(True, "SSH port answers")


async def probe_all(lanes: list[LaneTarget], nodes: list[WatchedNode]) -> tuple[list[Probe], list[Probe]]:
    limits = httpx.Limits(max_connections=max(10, len(lanes) * 2))
    deadline = settings.LANES_WATCH_TIMEOUT_S * 2 + settings.LANES_WATCH_CONNECT_TIMEOUT_S

    async def bounded_lane(client: httpx.AsyncClient, target: LaneTarget) -> Probe:
        try:
            return await asyncio.wait_for(probe_lane(client, target), deadline)
        except TimeoutError:
            return Probe(False, f"{target.base_url} did not answer within {deadline:g} s")

    async with async_http_client(timeout=probe_timeout(), transport=httpx.AsyncHTTPTransport(limits=limits)) as client:
        results = await asyncio.gather(*(bounded_lane(client, t) for t in lanes), *(probe_node(t) for t in nodes))
    return list(results[: len(lanes)]), list(results[len(lanes):])


REPLICA_WATCHED = (LaneState.SERVING, LaneState.DEGRADED, LaneState.CHECKING, LaneState.STALLED)


def watch_targets() -> tuple[list[LaneTarget], list[WatchedNode]]:
    lanes = []
    for lane in Lane.objects.filter(WATCHED).prefetch_related("members__node", "replicas"):
        rows = lane.replica_rows()
        if len(rows) > 1:
            for row in rows:
                ranked = lane.ranked_nodes(row.index)
                watched = row.observed_state in REPLICA_WATCHED or (
                    row.observed_state in (LaneState.FAILED, LaneState.UNREACHABLE)
                    and lane.desired_state == DesiredState.SERVING)
                if ranked and watched:
                    lanes.append(LaneTarget(lane.pk, lane.name, row.observed_state, row.health_failures,
                                            ranked[0].name, lane.base_url(row.index), lane.public_model_name,
                                            replica=row.index))
            continue
        ranked = lane.ranked_nodes()
        if not ranked:
            continue
        lanes.append(LaneTarget(lane.pk, lane.name, lane.observed_state, lane.health_failures, ranked[0].name,
                                lane.base_url(), lane.public_model_name))
    nodes = [WatchedNode(n.pk, n.name, n.state, n.health_failures, n.transport, n.address, n.ssh_port, n.sim_dir)
             for n in Node.objects.exclude(state=NodeState.MAINTENANCE)]
    return lanes, nodes


def apply_node_probes(nodes: list[WatchedNode], probes: list[Probe]) -> tuple[set[str], int]:
    """Returns the names of nodes that do not answer, and the number of state changes."""
    now = timezone.now()
    ok = [t.pk for t, p in zip(nodes, probes, strict=True) if p.ok]
    Node.objects.filter(pk__in=ok).update(last_seen=now, health_failures=0)
    down, changes = set(), 0
    for target, probe in zip(nodes, probes, strict=True):
        if probe.ok:
            if target.state in (NodeState.UNREACHABLE, NodeState.UNKNOWN):
                changes += node_set_state(node=Node(pk=target.pk, name=target.name), state=NodeState.ONLINE,
                                          last_seen=now, unless_maintenance=True)
            continue
        down.add(target.name)
        failures = target.failures + 1
        Node.objects.filter(pk=target.pk).update(health_failures=F("health_failures") + 1)
        if failures >= settings.LANES_WATCH_FAILURES and target.state != NodeState.UNREACHABLE:
            changes += node_set_state(node=Node(pk=target.pk, name=target.name), state=NodeState.UNREACHABLE,
                                      unless_maintenance=True)
    return down, changes


def _health_rows(target: LaneTarget) -> QuerySet[Any]:
    if target.replica is None:
        return Lane.objects.filter(pk=target.pk)
    return LaneReplica.objects.filter(lane_id=target.pk, index=target.replica)


def share_verdicts(lanes: list[LaneTarget], probes: list[Probe]) -> None:
    """Every gateway worker skips a replica the watcher found down (refused, or N failed
    probes in a row) and takes back one that answers (lanes.replica_health)."""
    down_for = settings.LANES_WATCH_INTERVAL_S * 3
    try:
        for target, probe in zip(lanes, probes, strict=True):
            down = not probe.ok and (probe.refused or target.failures + 1 >= settings.LANES_WATCH_FAILURES)
            if probe.ok and target.state == LaneState.STALLED:
                continue  # /health answers, yet no progress: the guardian keeps it out (guardian.services)
            if probe.ok or down:
                replica_verdict(target.name, target.replica or 0, down_for_s=down_for if down else None)
    except RedisError:
        log.warning("health watcher: could not share its verdicts with the gateways", exc_info=True)


def apply_lane_probes(lanes: list[LaneTarget], probes: list[Probe], nodes_down: set[str]) -> int:
    now = timezone.now()
    for target, probe in zip(lanes, probes, strict=True):
        if probe.ok:
            _health_rows(target).update(health_checked_at=now, health_failures=0)
    share_verdicts(lanes, probes)
    changes = 0
    for target, probe in zip(lanes, probes, strict=True):
        lane = Lane(pk=target.pk, name=target.name)
        if probe.ok:
            if target.state in (LaneState.CHECKING, LaneState.FAILED, LaneState.UNREACHABLE):
                reason = "health watcher: " + ("probed after start: " if target.state == LaneState.CHECKING
                                               else "answers again: ") + probe.reason
                changes += _set(lane, target, LaneState.SERVING, reason)
            continue
        failures = target.failures + 1
        _health_rows(target).update(health_checked_at=now, health_failures=F("health_failures") + 1)
        verdict = LaneState.UNREACHABLE if target.head in nodes_down else LaneState.FAILED
        why = f"node {target.head} does not answer; {probe.reason}" if verdict == LaneState.UNREACHABLE else probe.reason
        due = (target.state == LaneState.CHECKING
               or (target.state in (LaneState.SERVING, LaneState.DEGRADED, LaneState.STALLED)
                   and failures >= settings.LANES_WATCH_FAILURES)
               or (target.state in (LaneState.FAILED, LaneState.UNREACHABLE) and target.state != verdict))
        if due:
            changes += _set(lane, target, verdict, f"health watcher: {why} ({failures} failed probe(s) in a row)")
    return changes


def _set(lane: Lane, target: LaneTarget, state: str, reason: str) -> int:
    lane.observed_state = target.state
    changed = lane_set_observed_state(lane=lane, state=state, reason=reason, source="health watcher",
                                      expected=target.state, replica=target.replica)
    return int(changed)


def lanes_watch_tick() -> TickReport:
    """One tick of the watcher. Never two at once (a slow tick makes the next one skip)."""
    report = TickReport()
    if not cache.add(TICK_LOCK, "1", timeout=int(settings.LANES_WATCH_INTERVAL_S * 3) + 10):
        report.skipped = True
        return report
    started = time.perf_counter()
    try:
        lanes, nodes = watch_targets()
        report.lanes, report.nodes = len(lanes), len(nodes)
        probe_started = time.perf_counter()
        lane_probes, node_probes = async_to_sync(probe_all)(lanes, nodes)
        report.probe_s = time.perf_counter() - probe_started
        nodes_down, node_changes = apply_node_probes(nodes, node_probes)
        report.changes = node_changes + apply_lane_probes(lanes, lane_probes, nodes_down)
    finally:
        cache.delete(TICK_LOCK)
        report.total_s = time.perf_counter() - started
    return report
