"""Reads of nodes and lanes: the config snapshot every revision stores, rule checks with
the other lanes on the same nodes, the targets a plan renders for, revision diffs."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db.models import QuerySet
from django.shortcuts import get_object_or_404
from redis.exceptions import RedisError

from core.audit import audit_diff
from core.validators import has_control_characters
from lanes.memory import NodeFacts, lane_footprint_gib
from lanes.models import Lane, LaneReplica, LaneRevision, LaneState, Node
from lanes.plan_shell import Fabric, fabric_env, fabric_of
from lanes.plans import NodeTarget, Plan, render_launch_plan, render_status_plan, render_stop_plan
from lanes.replica_health import (
    fair_queue_state,
    node_memory_seen,
    replica_in_flight,
    replica_liveness,
    replica_skipped_until,
)
from lanes.restart_policy import lane_restarts
from lanes.rules import LaneCheck, OtherLane, check_lane
from lanes.secrets import env_with_marks

# The lane's configuration as a revision stores it (and as rules and plans read it).
CONFIG_FIELDS = (
    "name", "model_id", "model_revision", "served_model_name", "image", "tensor_parallel_size", "executor",
    "api_port", "master_port", "container_name", "max_model_len", "kv_cache_memory_bytes",
    "gpu_memory_utilization", "max_num_seqs", "max_num_batched_tokens", "kv_cache_dtype",
    "enable_prefix_caching", "enable_chunked_prefill", "speculative_config", "max_cudagraph_capture_size",
    "extra_args", "container_env", "weights_gib", "kv_bytes_per_token", "runtime_overhead_gib",
    "degraded_context_limit", "gateway_slots", "scheduling_policy",
)


def node_list() -> QuerySet[Node]:
    return Node.objects.prefetch_related("memberships__lane").order_by("name")


def node_get(name: str) -> Node:
    return get_object_or_404(Node.objects.prefetch_related("memberships__lane"), name=name)


def node_lane_names(node: Node) -> list[str]:
    return sorted({member.lane.name for member in node.memberships.all()})


def nodes_by_name(names: Sequence[Any]) -> dict[str, Node]:
    """The registered nodes among `names` (text sent by a client), by name. A name that is
    not text or holds a NUL or control character names no node: it is never sent to the
    database (PostgreSQL refuses a NUL)."""
    wanted = [name for name in names if isinstance(name, str) and not has_control_characters(name)]
    return {node.name: node for node in Node.objects.filter(name__in=wanted)} if wanted else {}


def lane_named(name: Any) -> Lane | None:
    """The lane of that name (text sent by a client), or None; like nodes_by_name."""
    if not isinstance(name, str) or not name or has_control_characters(name):
        return None
    return Lane.objects.filter(name=name).first()


def lane_list() -> QuerySet[Lane]:
    return Lane.objects.select_related("fallback").prefetch_related("members__node", "replicas").order_by("name")


def lanes_on(nodes: Sequence[Node]) -> list[Lane]:
    """Every lane with a member on one of these nodes, with its members, nodes and fallback:
    a fixed number of queries however many lanes and nodes."""
    return list(lane_list().filter(members__node__in=[node.pk for node in nodes]).distinct())


def lane_get(name: str) -> Lane:
    return get_object_or_404(Lane.objects.select_related("fallback"), name=name)


@dataclass(frozen=True)
class ReplicaSpec:
    """One replica as configured: its ranked nodes, and its own API port (None: the lane's)."""

    nodes: list[Node]
    api_port: int | None = None


def lane_replica_specs(lane: Lane) -> list[ReplicaSpec]:
    """The saved replicas of a lane, by index (one for a lane of one engine)."""
    if not lane.pk:
        return []
    ports = {row.index: row.api_port for row in lane.replica_rows()}
    return [ReplicaSpec(lane.ranked_nodes(index), ports.get(index)) for index in lane.replica_indexes() or [0]]


def _specs(lane: Lane, nodes: Sequence[Node] | None, replicas: Sequence[ReplicaSpec] | None) -> list[ReplicaSpec]:
    if replicas is not None:
        return list(replicas)
    if nodes is not None:
        return [ReplicaSpec(list(nodes))]
    return lane_replica_specs(lane)


def lane_config(
    lane: Lane, nodes: Sequence[Node] | None = None, *, replicas: Sequence[ReplicaSpec] | None = None
) -> dict[str, Any]:
    """The snapshot of a (possibly unsaved) lane: its settings, fallback and ranked nodes.
    `nodes` are replica 0's; a lane of several replicas (or one with its own port) also
    keeps `replicas`: each one's ranked nodes and API port."""
    config = {key: getattr(lane, key) for key in CONFIG_FIELDS}
    config["container_env"] = env_with_marks(lane.container_env or {}, lane.secret_env or {})
    config["fallback"] = lane.fallback.name if lane.fallback_id and lane.fallback else None
    specs = _specs(lane, nodes, replicas)
    config["nodes"] = [node.name for node in specs[0].nodes] if specs else []
    if len(specs) > 1 or any(spec.api_port for spec in specs):
        config["replicas"] = [{"nodes": [node.name for node in spec.nodes], "api_port": spec.api_port}
                              for spec in specs]
    config["revision"] = lane.revision
    return config


def replica_configs(config: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each replica's own configuration (its nodes and API port) from a lane's snapshot:
    what its plan renders and its rules check. One for a lane of one engine."""
    replicas = config.get("replicas")
    if not replicas:
        return [dict(config)]
    base = {key: value for key, value in config.items() if key != "replicas"}
    return [{**base, "nodes": list(spec["nodes"]), "api_port": spec.get("api_port") or config["api_port"]}
            for spec in replicas]


def node_facts(node: Node) -> NodeFacts:
    return NodeFacts(name=node.name, memory_gib=node.memory_gib, os_reserve_gib=node.os_reserve_gib)


def _lanes_on_node(node: Node, lanes: Sequence[Lane]) -> list[Lane]:
    return sorted((lane for lane in lanes if any(m.node_id == node.pk for m in lane.members.all())),
                  key=lambda lane: lane.name)


def other_lanes_on(
    nodes: Sequence[Node], *, exclude: Lane | None = None, lanes: Sequence[Lane] | None = None
) -> dict[str, list[OtherLane]]:
    """The lanes sharing each node. `lanes`: already loaded with lanes_on (or lane_list)
    and covering these nodes, so a list of checks costs no query per row."""
    candidates = lanes if lanes is not None else lanes_on(nodes)
    found: dict[str, list[OtherLane]] = {}
    for node in nodes:
        found[node.name] = [
            OtherLane(other.name, lane_footprint_gib(lane_config(other), node_memory_gib=node.memory_gib),
                      other.api_port, other.master_port, other.container_name)
            for other in _lanes_on_node(node, candidates)
            if exclude is None or not exclude.pk or other.pk != exclude.pk
        ]
    return found


def lane_check(
    lane: Lane, nodes: Sequence[Node] | None = None, *, lanes: Sequence[Lane] | None = None,
    replicas: Sequence[ReplicaSpec] | None = None, unknown: frozenset[str] = frozenset(),
) -> LaneCheck:
    """The lane rules, per replica: each replica's budget on its own nodes and its conflicts
    with the other lanes sharing them. A replica's finding says which replica it is about
    (one that every replica shares is said once). `unknown`: fields that failed their own
    checks, whose rules are skipped (rules.KnownConfig); a failed `nodes` or `replicas`
    skips the rules on the nodes."""
    specs = _specs(lane, nodes, replicas) or [ReplicaSpec([])]
    configs = replica_configs(lane_config(lane, replicas=specs))
    combined = LaneCheck()
    seen: set[tuple[str, str]] = set()
    nodes_known = not unknown & {"nodes", "replicas"}
    for index, (spec, config) in enumerate(zip(specs, configs, strict=True)):
        check = check_lane(config, [node_facts(n) for n in spec.nodes] if nodes_known else None,
                           other_lanes_on(spec.nodes, exclude=lane, lanes=lanes), unknown=unknown)
        for result in check.results:
            if (result.code, result.message) in seen:
                continue
            seen.add((result.code, result.message))
            combined.results.append(result if index == 0 else replace(
                result, message=f"Replica {index}: {result.message}"))
        combined.budgets.extend(check.budgets)
        combined.kv_pool = combined.kv_pool or check.kv_pool
    return combined


def lane_checks(lanes: Sequence[Lane]) -> list[tuple[Lane, LaneCheck]]:
    """Each lane of a list (from lane_list: every lane) with its rule check."""
    return [(lane, lane_check(lane, lanes=lanes)) for lane in lanes]


@dataclass(frozen=True)
class NodeMemoryUse:
    lane: str
    gib: float
    percent: float


def node_memory_use(node: Node, *, lanes: Sequence[Lane] | None = None) -> list[NodeMemoryUse]:
    uses = []
    for lane in _lanes_on_node(node, lanes if lanes is not None else lanes_on([node])):
        gib = lane_footprint_gib(lane_config(lane), node_memory_gib=node.memory_gib)
        uses.append(NodeMemoryUse(lane.name, round(gib, 1), round(100 * gib / node.memory_gib, 1)))
    return uses


def current_revision(lane: Lane) -> LaneRevision | None:
    """The revision a launch runs now: the newest one (each save adds one)."""
    return LaneRevision.objects.filter(lane=lane).order_by("-number").first()


def plan_targets(names: Sequence[str]) -> list[NodeTarget]:
    """Plan targets for the nodes named in a revision, in that (rank) order: the one place
    both the dry run and the launch job get them, so the two cannot differ."""
    by_name = {node.name: node for node in Node.objects.filter(name__in=names)}
    missing = [name for name in names if name not in by_name]
    if missing:
        raise ValueError(f"node(s) no longer registered: {', '.join(missing)}")
    return [
        NodeTarget(name=node.name, address=node.address, runtime=node.runtime_command or "docker",
                   report=node.network_report or {}, memory_gib=node.memory_gib)
        for node in (by_name[name] for name in names)
    ]


PLAN_RENDERERS: dict[str, Callable[[Mapping[str, Any], Sequence[NodeTarget]], Plan]] = {
    "launch": render_launch_plan, "stop": render_stop_plan, "status": render_status_plan,
}


def lane_plan(lane: Lane, action: str = "launch", revision: LaneRevision | None = None, replica: int = 0) -> Plan:
    """The plan of one replica of a lane's current revision (what a launch would run now)."""
    return lane_plans(lane, action, revision)[replica]


def lane_plans(lane: Lane, action: str = "launch", revision: LaneRevision | None = None) -> list[Plan]:
    """Every replica's plan, by index: the dry run shows them all."""
    revision = revision or current_revision(lane)
    config = dict(revision.config) if revision else lane_config(lane)
    return [PLAN_RENDERERS[action](each, plan_targets(each["nodes"])) for each in replica_configs(config)]


def plans_text(plans: Sequence[Plan]) -> str:
    """The dry run's text: a lane of one replica, its plan; of several, each under its number."""
    if len(plans) == 1:
        return plans[0].render()
    return "\n\n".join(f"# replica {index}\n{plan.render()}" for index, plan in enumerate(plans))


@dataclass(frozen=True)
class ReplicaView:
    """One replica as the lane page and the API (LaneOut.replicas) show it: its state, and
    what the gateways share about it through Redis (None when Redis does not answer)."""

    index: int
    nodes: list[str]
    api_port: int
    base_url: str
    observed_state: str
    state_reason: str
    state_changed_at: datetime | None
    health_checked_at: datetime | None
    skipped_until: datetime | None  # the gateways skip it (a breaker or the watcher said so)
    in_flight: int | None  # requests the gateways have in flight to it
    queue: dict[str, int] | None = None  # its fair queue (gateway.fair): held, interactive, batch, shed


def lane_replica_views(lane: Lane) -> list[ReplicaView]:
    """Each replica with its state and what the gateways share about it (None when Redis
    does not answer: a page still shows the rest)."""
    views = []
    for row in lane.replica_rows() or [LaneReplica(lane=lane, index=0, observed_state=lane.observed_state)]:
        nodes = lane.ranked_nodes(row.index)
        try:
            until = replica_skipped_until(lane.name, row.index)
            skipped = datetime.fromtimestamp(until, tz=UTC) if until is not None else None
            in_flight: int | None = replica_in_flight(lane.name, row.index)
            queue = fair_queue_state(lane.name, row.index) if lane.gateway_slots or lane.max_num_seqs else None
        except RedisError:
            skipped, in_flight, queue = None, None, None
        views.append(ReplicaView(
            index=row.index, nodes=[node.name for node in nodes], api_port=row.api_port or lane.api_port,
            base_url=lane.base_url(row.index) if nodes else "", observed_state=row.observed_state,
            state_reason=row.state_reason, state_changed_at=row.state_changed_at,
            health_checked_at=row.health_checked_at, skipped_until=skipped, in_flight=in_flight,
            queue=queue))
    return views


@dataclass(frozen=True)
class RevisionView:
    revision: LaneRevision
    changes: list[tuple[str, Any, Any]]


def lane_revisions(lane: Lane) -> list[RevisionView]:
    """Newest first, each with what changed from the one before it."""
    revisions = list(lane.revisions.select_related("created_by").order_by("number"))
    views, previous = [], None
    for revision in revisions:
        diff: dict[str, list[Any]] = audit_diff(previous, revision.config) if previous is not None else {}
        diff.pop("revision", None)
        views.append(RevisionView(revision, [(key, pair[0], pair[1]) for key, pair in sorted(diff.items())]))
        previous = revision.config
    return list(reversed(views))


# Lanes in these states hold their nodes' GPUs and NICs.
ACTIVE_LANE_STATES = (LaneState.STARTING, LaneState.SERVING, LaneState.DEGRADED, LaneState.STOPPING)


def lanes_active_on(nodes: Sequence[Node]) -> list[Lane]:
    return [lane for lane in lanes_on(nodes) if lane.observed_state in ACTIVE_LANE_STATES]


def node_fabric(node: Node) -> Fabric:
    """The node's fabric as its last network report describes it (the launch plan's source)."""
    return fabric_of(NodeTarget(name=node.name, address=node.address, report=node.network_report or {}))


def node_fabric_env(node: Node) -> dict[str, str]:
    """NCCL_SOCKET_IFNAME, NCCL_IB_HCA, NCCL_IB_GID_INDEX, ... exactly as a launch sets them."""
    return fabric_env(node_fabric(node))


def lane_context_limit(lane: Lane) -> int:
    """The prompt + completion tokens the lane takes now: max_model_len, or its degraded
    context limit while the RDMA watchdog keeps it degraded. The gateway reads this."""
    return lane.current_context_limit


def _ago(epoch: Any) -> str:
    if not isinstance(epoch, int | float):
        return "—"
    seconds = max(0.0, datetime.now(tz=UTC).timestamp() - float(epoch))
    return f"{seconds:.0f} s ago" if seconds < 120 else f"{seconds / 60:.0f} min ago"


def lane_guardian_view(lane: Lane) -> dict[str, Any]:
    """What the lane page shows of the guardian: each replica's liveness (last progress, the
    canary's last result), its nodes' MemAvailable against the floor, the restart policy and
    the guardian's recent relaunches."""
    replicas = []
    try:
        for index in range(len(lane.replica_rows()) or 1):
            seen = replica_liveness(lane.pk, index)
            canary = seen.get("canary") or {}
            replicas.append({
                "index": index, "progress": _ago(seen.get("progress_at")), "running": seen.get("running"),
                "canary": canary.get("detail", "—"), "canary_ok": canary.get("ok"), "canary_at": _ago(canary.get("at")),
                "error": seen.get("error", ""),
            })
        nodes = [{"name": node.name, "available_gib": node_memory_seen(node.pk).get("available_gib"),
                  "at": _ago(node_memory_seen(node.pk).get("at"))} for node in lane.ranked_nodes()]
    except RedisError:
        replicas, nodes = [], []
    return {"replicas": replicas, "nodes": nodes, "floor_gib": settings.GUARDIAN_MEMORY_FLOOR_GIB,
            "restarts": lane_restarts(lane)}
