"""Changes to nodes and lanes. Every change is validated with the lane rules (errors block
saving, as a ValidationError naming each field), saved, given an immutable LaneRevision
(lanes) and an AuditEvent with the before/after diff; lane and node state changes are
broadcast after they are saved."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from core.audit import audit_record
from core.broadcast import DASHBOARD_GROUP, broadcast
from core.roles import UserLike
from core.validators import has_control_characters
from lanes.crypto import CredentialError, encrypt_private_key, encrypt_secret, host_key_fingerprint, normalize_host_key
from lanes.models import Lane, LaneNode, LaneReplica, LaneRevision, LaneState, Node, NodeState, Transport
from lanes.rules import ENV_NAME, LaneCheck, rule_max_model_len_pinned
from lanes.secrets import SECRET_MARK, is_secret_name
from lanes.selectors import CONFIG_FIELDS, ReplicaSpec, lane_check, lane_config, lane_replica_specs

NODE_FIELDS = ("name", "address", "transport", "ssh_port", "ssh_user", "runtime_command", "sim_dir", "memory_gib",
               "os_reserve_gib", "labels", "state")
MAX_MODEL_LEN_MESSAGE = rule_max_model_len_pinned({"max_model_len": None}, [])[0].message
RESERVED_NAMES = ("new",)  # /nodes/new/ and /lanes/new/
ADDRESS = re.compile(r"^[A-Za-z0-9._:-]+$")
SAFE_WORD = re.compile(r"^[A-Za-z0-9._/=:+-]+$")


def _merge(errors: dict[str, list[str]], field: str, message: str) -> None:
    errors.setdefault(field, [])
    if message not in errors[field]:
        errors[field].append(message)


# ---------------------------------------------------------------- nodes


def node_snapshot(node: Node) -> dict[str, Any]:
    """What the audit log records: never the private key, only whether one is set."""
    data = {key: getattr(node, key) for key in NODE_FIELDS}
    data["ssh_private_key"] = "set" if node.ssh_private_key_encrypted else "not set"
    data["ssh_host_key"] = host_key_fingerprint(node.ssh_host_key) or "not pinned"
    return data


def _apply_node_data(node: Node, data: Mapping[str, Any], private_key: str | None, errors: dict[str, list[str]]) -> None:
    for key, value in data.items():
        if key not in NODE_FIELDS and key != "ssh_host_key":
            raise ValueError(f"unknown node field {key!r}")
        if key == "ssh_host_key":
            try:
                node.ssh_host_key = normalize_host_key(value) if value else ""
            except CredentialError as exc:
                _merge(errors, "ssh_host_key", str(exc))
            continue
        setattr(node, key, value)
    if private_key:
        try:
            node.ssh_private_key_encrypted = encrypt_private_key(private_key)
        except CredentialError as exc:
            _merge(errors, "ssh_private_key", str(exc))
    if node.name in RESERVED_NAMES:
        _merge(errors, "name", f"{node.name!r} is reserved by the pages; choose another name.")
    if node.address and not ADDRESS.match(node.address):
        _merge(errors, "address", "Enter a host name or an IP address (letters, digits, '.', ':' and '-').")
    try:
        words = shlex.split(node.runtime_command)
    except ValueError:
        words = []
    # Plain words only: no quotes, control characters (a newline would start a second command) or shell syntax.
    if not words or " ".join(words) != node.runtime_command.strip() or not all(SAFE_WORD.match(w) for w in words):
        _merge(errors, "runtime_command", "Enter one or more plain words, such as 'docker' or 'sudo -n docker' "
                                          "(letters, digits and . _ / = : + - only).")
    sim_dir_problem = sim_dir_error(node.sim_dir, required=node.transport == Transport.LOCAL)
    if sim_dir_problem:
        _merge(errors, "sim_dir", sim_dir_problem)


def sim_dir_error(sim_dir: str, *, required: bool) -> str:
    """A sparksim node directory must exist under settings.SIM_ROOT: a local node with a bad
    one would run the host's real tools (docker, ping) as if they were the node's."""
    root = Path(settings.SIM_ROOT).resolve()
    if not sim_dir:
        return f"A local node needs its sparksim directory (under {root})." if required else ""
    if any(ord(ch) < 32 for ch in sim_dir):
        return "Control characters are not allowed in a path."
    path = Path(sim_dir)
    resolved = (path if path.is_absolute() else root / path).resolve()
    if resolved != root and root not in resolved.parents:
        return f"Must be a directory under the simulated-cluster root {root}."
    if not resolved.is_dir():
        return f"No such directory under {root}."
    return ""


def _full_clean(instance: Node | Lane, errors: dict[str, list[str]], exclude: Sequence[str] = ()) -> None:
    try:
        # Fields that already failed a rule keep that message only.
        instance.full_clean(exclude=[*exclude, *errors], validate_unique=True)
    except ValidationError as exc:
        for field, messages in exc.message_dict.items():
            for message in messages:
                _merge(errors, field, message)


def _check_lanes_still_fit(node: Node, errors: dict[str, list[str]]) -> None:
    for lane in Lane.objects.filter(members__node=node).distinct():
        specs = [ReplicaSpec([node if n.pk == node.pk else n for n in spec.nodes], spec.api_port)
                 for spec in lane_replica_specs(lane)]
        for result in lane_check(lane, replicas=specs).errors:
            if result.code in ("memory_budget", "shared_node_overflow", "memory_budget_no_kv"):
                _merge(errors, "memory_gib", f"Lane {lane.name}: {result.message}")


@transaction.atomic
def node_create(*, actor: UserLike | None, data: Mapping[str, Any], private_key: str | None = None) -> Node:
    node = Node()
    errors: dict[str, list[str]] = {}
    _apply_node_data(node, data, private_key, errors)
    _full_clean(node, errors)
    if errors:
        raise ValidationError(errors)
    node.save()
    audit_record(actor=actor, action="node.create", obj=node, after=node_snapshot(node))
    return node


@transaction.atomic
def node_update(
    *, node: Node, actor: UserLike | None, data: Mapping[str, Any], private_key: str | None = None,
    clear_private_key: bool = False,
) -> Node:
    node = Node.objects.select_for_update().get(pk=node.pk)
    before = node_snapshot(node)
    errors: dict[str, list[str]] = {}
    _apply_node_data(node, data, private_key, errors)
    if clear_private_key and not private_key:
        node.ssh_private_key_encrypted = ""
    _full_clean(node, errors)
    if not errors and ("memory_gib" in data or "os_reserve_gib" in data):
        _check_lanes_still_fit(node, errors)
    if errors:
        raise ValidationError(errors)
    node.save()
    after = node_snapshot(node)
    if after != before:
        audit_record(actor=actor, action="node.update", obj=node, before=before, after=after)
    if after["state"] != before["state"]:  # e.g. an admin puts it in maintenance
        payload = node_state_payload(node)
        transaction.on_commit(lambda: broadcast(DASHBOARD_GROUP, "node.state", payload))
    return node


@transaction.atomic
def node_delete(*, node: Node, actor: UserLike | None) -> None:
    lanes = sorted(set(Lane.objects.filter(members__node=node).values_list("name", flat=True)))
    if lanes:
        raise ValidationError({"name": [f"{node.name} is used by lane(s) {', '.join(lanes)}: remove it from them first."]})
    before = node_snapshot(node)
    audit_record(actor=actor, action="node.delete", obj=node, before=before)
    node.delete()


@transaction.atomic
def node_pin_host_key(*, node: Node, host_key_line: str, actor: UserLike | None) -> Node:
    """Pin the node's SSH host key (entered by an admin, or a captured one they confirmed)."""
    try:
        key = normalize_host_key(host_key_line)
    except CredentialError as exc:
        raise ValidationError({"ssh_host_key": [str(exc)]}) from None
    before = node_snapshot(node)
    node.ssh_host_key = key
    node.ssh_host_key_pending = ""
    node.save(update_fields=["ssh_host_key", "ssh_host_key_pending", "updated_at"])
    audit_record(actor=actor, action="node.pin_host_key", obj=node, before=before, after=node_snapshot(node))
    return node


def node_record_captured_host_key(*, node: Node, host_key_line: str) -> Node:
    """A capture job saw this host key: keep it until an admin confirms it (never trusted as is)."""
    try:
        node.ssh_host_key_pending = normalize_host_key(host_key_line)
    except CredentialError as exc:
        raise ValidationError({"ssh_host_key": [str(exc)]}) from None
    node.save(update_fields=["ssh_host_key_pending", "updated_at"])
    return node


def node_confirm_host_key(*, node: Node, actor: UserLike | None) -> Node:
    if not node.ssh_host_key_pending:
        raise ValidationError({"ssh_host_key": ["No captured host key is waiting for confirmation."]})
    return node_pin_host_key(node=node, host_key_line=node.ssh_host_key_pending, actor=actor)


def node_record_network_report(*, node: Node, report: Mapping[str, Any]) -> Node:
    """The network check's result (docs/runtime-contract.md): plans read it at the next render."""
    node.network_report = dict(report)
    node.network_checked_at = timezone.now()
    node.save(update_fields=["network_report", "network_checked_at", "updated_at"])
    return node


def node_state_payload(node: Node) -> dict[str, Any]:
    return {"name": node.name, "state": node.state,
            "last_seen": node.last_seen.isoformat() if node.last_seen else None}


def node_set_state(
    *, node: Node, state: str, last_seen: datetime | None = None, unless_maintenance: bool = False
) -> bool:
    """Called by the jobs app (a node ran a command, or could not be reached): save, then
    broadcast `node.state` to the dashboard group. Returns False when nothing was saved
    (`unless_maintenance` and an admin put the node in maintenance)."""
    if state not in NodeState.values:
        raise ValueError(f"unknown node state {state!r}")
    fields: dict[str, Any] = {"state": state, "updated_at": timezone.now()}
    if last_seen is not None:
        fields["last_seen"] = last_seen
    rows = Node.objects.filter(pk=node.pk)
    if unless_maintenance:  # one conditional UPDATE: an admin's maintenance wins over a job's "online"
        rows = rows.exclude(state=NodeState.MAINTENANCE)
    if not rows.update(**fields):
        return False
    node.state = state
    node.refresh_from_db(fields=["last_seen"])
    broadcast(DASHBOARD_GROUP, "node.state", node_state_payload(node))
    return True


# ---------------------------------------------------------------- lanes


def _resolve_nodes(names: Sequence[str], errors: dict[str, list[str]]) -> list[Node]:
    if len(set(names)) != len(names):
        _merge(errors, "nodes", "A node can appear only once in a lane.")
    if not names:
        _merge(errors, "nodes", "Choose at least one node (rank 0 is the head).")
    found = {node.name: node for node in Node.objects.filter(
        name__in=[name for name in names if not has_control_characters(name)])}
    unknown = [name for name in names if name not in found]
    if unknown:
        _merge(errors, "nodes", f"Unknown node(s): {', '.join(unknown)}.")
    return [found[name] for name in names if name in found]


def _apply_secret_env(lane: Lane, updates: Mapping[str, Any], errors: dict[str, list[str]]) -> dict[str, str]:
    """NAME → value sets or replaces a secret, NAME → None/"" clears it, NAME → "[secret]"
    keeps it (a form or client sending back what it was shown). Returns what changed, by name
    ("set", "replaced", "cleared"): never a value."""
    secrets = dict(lane.secret_env or {})
    changes: dict[str, str] = {}
    for name, value in updates.items():
        if not isinstance(name, str) or not ENV_NAME.match(name):
            _merge(errors, "secret_env", f"{str(name)[:40]!r} is not an environment variable name "
                                         "(letters, digits and _, not starting with a digit).")
            continue
        if value == SECRET_MARK:
            continue
        if value is None or value == "":
            if name in secrets:
                del secrets[name]
                changes[name] = "cleared"
            continue
        if not isinstance(value, str) or any(ord(ch) < 32 for ch in value):
            _merge(errors, "secret_env", f"{name}: the value must be one line of text.")
            continue
        changes[name] = "replaced" if name in secrets else "set"
        secrets[name] = encrypt_secret(value)
        lane.container_env = {k: v for k, v in (lane.container_env or {}).items() if k != name}
    lane.secret_env = secrets
    return changes


def _apply_lane_data(lane: Lane, data: Mapping[str, Any], errors: dict[str, list[str]]) -> dict[str, str]:
    """Sets the lane's fields from data; returns the secret env changes (by name)."""
    secret_updates: dict[str, Any] = dict(data.get("secret_env") or {})
    for key, value in data.items():
        if key in ("fallback", "secret_env"):
            continue
        if key == "container_env":
            # Secret-looking names (and names already secret) go to the encrypted secrets.
            plain = {}
            for name, item in (value or {}).items():
                if is_secret_name(str(name)) or name in (lane.secret_env or {}):
                    secret_updates.setdefault(name, item)
                else:
                    plain[name] = item
            lane.container_env = plain
            continue
        if key not in CONFIG_FIELDS:
            raise ValueError(f"unknown lane field {key!r}")
        if key == "max_model_len" and not (isinstance(value, int) and not isinstance(value, bool) and value > 0):
            # 'auto' (or any text) gets the rule's reason; a number gets the range it broke.
            _merge(errors, key, MAX_MODEL_LEN_MESSAGE if isinstance(value, str) or value is None
                   else "max_model_len must be a whole number of tokens of at least 1.")
            continue
        setattr(lane, key, value)
    if lane.name in RESERVED_NAMES:
        _merge(errors, "name", f"{lane.name!r} is reserved by the pages; choose another name.")
    if "fallback" in data:
        name = data["fallback"]
        if not name:
            lane.fallback = None
        elif name == lane.name:
            _merge(errors, "fallback", "A lane cannot be its own fallback.")
        else:
            fallback = None if has_control_characters(name) else Lane.objects.filter(name=name).first()
            if fallback is None:
                _merge(errors, "fallback", f"No lane named {name!r}.")
            else:
                lane.fallback = fallback
    return _apply_secret_env(lane, secret_updates, errors)


def _secret_audit(changes: Mapping[str, str]) -> dict[str, Any]:
    """What the audit log says about secrets: which names changed and how, never a value."""
    return {"secret_env_changes": dict(sorted(changes.items()))} if changes else {}


def lane_validate(lane: Lane, replicas: Sequence[ReplicaSpec]) -> LaneCheck:
    """Rules on an unsaved lane, every replica; raises ValidationError naming each field when one fails."""
    check = lane_check(lane, replicas=replicas)
    if check.errors:
        raise ValidationError(check.errors_by_field())
    return check


def _raise_unless_valid(lane: Lane, replicas: Sequence[ReplicaSpec], errors: dict[str, list[str]]) -> None:
    """Field checks, then (only when every field is well-formed) the lane rules; raises
    one ValidationError naming each failing field."""
    _full_clean(lane, errors, exclude=["fallback"])
    if not errors:
        try:
            lane_validate(lane, replicas)
        except ValidationError as exc:
            errors.update(exc.message_dict)
    if errors:
        raise ValidationError(errors)


MAX_REPLICAS = 16


def _resolve_replicas(replicas: Sequence[Mapping[str, Any]], errors: dict[str, list[str]]) -> list[ReplicaSpec]:
    """[{"nodes": [names in rank order], "api_port": int or None}, ...] → specs; a node may
    serve one replica of a lane only."""
    if not replicas:
        _merge(errors, "replicas", "A lane needs at least one replica.")
        return []
    if len(replicas) > MAX_REPLICAS:
        _merge(errors, "replicas", f"A lane has at most {MAX_REPLICAS} replicas.")
        return []
    specs: list[ReplicaSpec] = []
    seen: dict[str, int] = {}
    for index, replica in enumerate(replicas):
        names = list(replica.get("nodes") or [])
        if not all(isinstance(name, str) for name in names):
            _merge(errors, "replicas", f"Replica {index}: nodes must be node names.")
            continue
        for name in names:
            if name in seen and seen[name] != index:
                _merge(errors, "replicas", f"Node {name} is in replica {seen[name]} and replica {index}: "
                                           "a node serves one replica of a lane.")
            seen.setdefault(name, index)
        port = replica.get("api_port")
        if port is not None and (isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535):
            _merge(errors, "replicas", f"Replica {index}: api_port must be a port from 1 to 65,535 (or empty).")
            port = None
        node_errors: dict[str, list[str]] = {}
        ranked = _resolve_nodes(names, node_errors)
        for message in node_errors.get("nodes", []):  # replica 0's are the `nodes` field's
            if index:
                _merge(errors, "replicas", f"Replica {index}: {message}")
            else:
                _merge(errors, "nodes", message)
        specs.append(ReplicaSpec(ranked, port))
    return specs


def _check_removed_replicas(lane: Lane, count: int, errors: dict[str, list[str]]) -> None:
    for row in lane.replica_rows():
        if row.index >= count and row.observed_state not in (LaneState.STOPPED, LaneState.FAILED):
            _merge(errors, "replicas", f"Replica {row.index} is {row.observed_state}: stop it before removing it.")


def _save_revision(lane: Lane, actor: UserLike | None, replicas: Sequence[ReplicaSpec]) -> LaneRevision:
    lane.revision += 1
    lane.save(update_fields=["revision", "updated_at"])
    config = lane_config(lane, replicas=replicas)
    actor_id = actor.pk if actor is not None and actor.is_authenticated else None
    revision = LaneRevision.objects.create(lane=lane, number=lane.revision, config=config, created_by_id=actor_id)
    # Open lane pages and lists follow another admin's save (their header, the drift box).
    payload = {"name": lane.name, "revision": revision.number,
               "by": actor.get_username() if actor_id is not None and actor is not None else None}
    transaction.on_commit(lambda: broadcast(DASHBOARD_GROUP, "lane.saved", payload))
    return revision


def _set_members(lane: Lane, replicas: Sequence[ReplicaSpec]) -> None:
    """Each replica's ranked nodes, and its row (a kept replica keeps its state and health)."""
    lane.members.all().delete()
    LaneNode.objects.bulk_create([LaneNode(lane=lane, node=node, replica=index, rank=rank)
                                  for index, spec in enumerate(replicas) for rank, node in enumerate(spec.nodes)])
    lane.replicas.filter(index__gte=len(replicas)).delete()
    for index, spec in enumerate(replicas):
        row, created = LaneReplica.objects.get_or_create(
            lane=lane, index=index, defaults={"api_port": spec.api_port, "observed_state": LaneState.STOPPED})
        if not created and row.api_port != spec.api_port:
            row.api_port = spec.api_port
            row.save(update_fields=["api_port"])
    if hasattr(lane, "_prefetched_objects_cache"):
        lane._prefetched_objects_cache.clear()


def _check_rename(lane: Lane, errors: dict[str, list[str]]) -> None:
    """A lane's name is the model name clients send and the engine serves (when no served
    name is set), and other lanes name it as their fallback: renaming a running lane would
    send requests for a name its engine does not know, and a silent follow of a fallback
    would change another lane without its own revision. So: only stopped lanes, and only
    when no lane falls back to it."""
    if lane.observed_state != LaneState.STOPPED or lane.desired_state != "stopped":
        _merge(errors, "name", f"Lane {lane.name} is {lane.observed_state}: stop it before renaming it "
                               "(clients and its engine know it by this name).")
    dependents = sorted(lane.fallback_for.values_list("name", flat=True))
    if dependents:
        _merge(errors, "name", f"Lane {lane.name} is the fallback of {', '.join(dependents)}: "
                               "choose another fallback there before renaming it.")


@transaction.atomic
def lane_create(
    *, actor: UserLike | None, data: Mapping[str, Any], nodes: Sequence[str] = (),
    replicas: Sequence[Mapping[str, Any]] | None = None,
) -> Lane:
    """`nodes`: a lane of one replica; `replicas`: each replica's nodes (and API port)."""
    lane = Lane()
    errors: dict[str, list[str]] = {}
    secret_changes = _apply_lane_data(lane, data, errors)
    specs = (_resolve_replicas(replicas, errors) if replicas is not None
             else [ReplicaSpec(_resolve_nodes(nodes, errors))])
    _raise_unless_valid(lane, specs, errors)
    lane.save()
    _set_members(lane, specs)
    revision = _save_revision(lane, actor, specs)
    audit_record(actor=actor, action="lane.create", obj=lane,
                 after={**revision.config, **_secret_audit(secret_changes)})
    return lane


@transaction.atomic
def lane_update(
    *, lane: Lane, actor: UserLike | None, data: Mapping[str, Any], nodes: Sequence[str] | None = None,
    replicas: Sequence[Mapping[str, Any]] | None = None,
) -> Lane:
    """`nodes` replaces replica 0's nodes; `replicas` replaces every replica (a removed
    replica must be stopped first)."""
    lane = Lane.objects.select_for_update(of=("self",)).select_related("fallback").get(pk=lane.pk)
    before = lane_config(lane)
    errors: dict[str, list[str]] = {}
    if "name" in data and data["name"] != lane.name:
        _check_rename(lane, errors)
    secret_changes = _apply_lane_data(lane, data, errors)
    specs = lane_replica_specs(lane)
    if replicas is not None:
        specs = _resolve_replicas(replicas, errors)
        _check_removed_replicas(lane, len(specs), errors)
    elif nodes is not None:
        specs = [ReplicaSpec(_resolve_nodes(nodes, errors), specs[0].api_port if specs else None), *specs[1:]]
    _raise_unless_valid(lane, specs, errors)
    after = lane_config(lane, replicas=specs)
    unchanged = {k: v for k, v in after.items() if k != "revision"} == {k: v for k, v in before.items() if k != "revision"}
    if unchanged and not secret_changes:
        return lane  # nothing in the configuration changed: no new revision
    lane.save()
    if nodes is not None or replicas is not None:
        _set_members(lane, specs)
    revision = _save_revision(lane, actor, specs)
    audit_record(actor=actor, action="lane.update", obj=lane, before=before,
                 after={**revision.config, **_secret_audit(secret_changes)})
    return lane


@transaction.atomic
def lane_delete(*, lane: Lane, actor: UserLike | None) -> None:
    if lane.observed_state not in (LaneState.STOPPED, LaneState.FAILED):
        raise ValidationError({"name": [f"Lane {lane.name} is {lane.observed_state}: stop it before deleting it."]})
    # SET_NULL would silently drop the fallback of the lanes that name this one, with no revision
    dependents = sorted(lane.fallback_for.values_list("name", flat=True))
    if dependents:
        raise ValidationError({"name": [f"Lane {lane.name} is the fallback of {', '.join(dependents)}: "
                                        "choose another fallback there before deleting it."]})
    before = lane_config(lane)
    audit_record(actor=actor, action="lane.delete", obj=lane, before=before)
    lane.delete()


def lane_state_payload(lane: Lane) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": lane.name, "observed_state": lane.observed_state, "desired_state": lane.desired_state,
        "state_changed_at": lane.state_changed_at.isoformat() if lane.state_changed_at else None}
    if lane.state_reason:
        data["reason"] = lane.state_reason
    replicas = list(lane.replicas.order_by("index"))
    if len(replicas) > 1:
        data["replicas"] = [{"index": r.index, "observed_state": r.observed_state, "reason": r.state_reason}
                            for r in replicas]
    return data


# The lane's state from its replicas': the best one any replica is in (a lane with one
# serving replica serves), its reason naming each replica's.
STATE_RANK = (LaneState.SERVING, LaneState.DEGRADED, LaneState.STARTING, LaneState.STOPPING, LaneState.CHECKING,
              LaneState.FAILED, LaneState.UNREACHABLE, LaneState.STOPPED)


def summary_state(states: Sequence[str]) -> str:
    return min(states, key=lambda state: STATE_RANK.index(LaneState(state))) if states else LaneState.STOPPED


def lane_set_observed_state(
    *, lane: Lane, state: str, reason: str = "", source: str = "job", expected: str | None = None,
    replica: int | None = None,
) -> bool:
    """Called by the jobs app (launch, stop, status, watchdog) and the health watcher: save,
    then broadcast `lane.state`. A change of state is also an audit event (the lane's state
    history, with its reason and who saw it: a job or the watcher). With `expected`, nothing
    changes unless the lane (or the replica) is still in that state (a job moved it
    meanwhile): returns False. `replica`: one replica's state; the lane's becomes the summary
    of its replicas'. Without it, every replica takes the lane's state."""
    if state not in LaneState.values:
        raise ValueError(f"unknown lane state {state!r}")
    with transaction.atomic():
        current = Lane.objects.select_for_update().get(pk=lane.pk)
        rows = {row.index: row for row in LaneReplica.objects.select_for_update().filter(lane=current)}
        now = timezone.now()
        if replica is not None:
            row = rows.get(replica)
            if row is None:
                raise ValueError(f"lane {current.name} has no replica {replica}")
            if expected is not None and row.observed_state != expected:
                return False
            _set_replica_row(current, row, state, reason, source, now)
            if len(rows) > 1:
                lane_state = summary_state([r.observed_state for r in rows.values()])
                reason = "; ".join(f"replica {r.index} {r.observed_state}" for r in sorted(
                    rows.values(), key=lambda r: r.index)) + f" (replica {replica}: {reason})"
                state = lane_state
            elif expected is not None:
                expected = current.observed_state
        elif expected is not None and current.observed_state != expected:
            return False
        else:
            for row in rows.values():
                # Degraded ↔ serving (the RDMA watchdog) concerns the replicas that serve:
                # a stopped replica of several stays stopped.
                if len(rows) > 1 and state in (LaneState.SERVING, LaneState.DEGRADED) and \
                        row.observed_state not in (LaneState.SERVING, LaneState.DEGRADED):
                    continue
                _set_replica_row(current, row, state, reason, source, now, audit=False)
        previous = current.observed_state
        current.observed_state = state
        current.state_reason = reason[:500]
        fields = ["observed_state", "state_reason", "updated_at"]
        if previous != state:
            current.state_changed_at = now
            current.health_failures = 0
            fields += ["state_changed_at", "health_failures"]
            audit_record(actor=None, action="lane.state", obj=current,
                         before={"observed_state": previous},
                         after={"observed_state": state, "reason": reason[:500], "seen_by": source})
        current.save(update_fields=fields)
    for field in ("observed_state", "state_reason", "state_changed_at", "health_failures", "desired_state"):
        setattr(lane, field, getattr(current, field))
    broadcast(DASHBOARD_GROUP, "lane.state", lane_state_payload(current))
    return True


def _set_replica_row(lane: Lane, row: LaneReplica, state: str, reason: str, source: str, now: datetime,
                     *, audit: bool = True) -> None:
    previous = row.observed_state
    row.observed_state, row.state_reason = state, reason[:500]
    fields = ["observed_state", "state_reason"]
    if previous != state:
        row.state_changed_at, row.health_failures = now, 0
        fields += ["state_changed_at", "health_failures"]
        if audit:
            audit_record(actor=None, action="lane.replica_state", obj=lane,
                         before={"replica": row.index, "observed_state": previous},
                         after={"replica": row.index, "observed_state": state, "reason": reason[:500],
                                "seen_by": source})
    row.save(update_fields=fields)


def lanes_mark_checking(*, reason: str) -> list[str]:
    """The portal's processes (re)started: every lane not stopped is shown `checking` until
    the health watcher has probed it (what ran before may be gone, or may still run)."""
    names = []
    for lane in Lane.objects.exclude(observed_state__in=(LaneState.STOPPED, LaneState.CHECKING)):
        rows = lane.replica_rows()
        if len(rows) > 1:  # a stopped replica stays stopped
            for row in rows:
                if row.observed_state not in (LaneState.STOPPED, LaneState.CHECKING):
                    lane_set_observed_state(lane=lane, state=LaneState.CHECKING, reason=reason, source="start",
                                            replica=row.index)
        else:
            lane_set_observed_state(lane=lane, state=LaneState.CHECKING, reason=reason, source="start")
        names.append(lane.name)
    return names


def lane_set_desired_state(*, lane: Lane, state: str, actor: UserLike | None) -> Lane:
    """What the admin asked for (launch → serving, stop → stopped); the jobs app calls it."""
    if state not in ("stopped", "serving"):
        raise ValueError(f"unknown desired state {state!r}")
    if lane.desired_state != state:
        audit_record(actor=actor, action="lane.desired_state", obj=lane, before={"desired_state": lane.desired_state},
                     after={"desired_state": state})
        lane.desired_state = state
        lane.save(update_fields=["desired_state", "updated_at"])
    return lane
