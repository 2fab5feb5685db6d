"""Changes to lanes. Every change is validated with the lane rules (errors block saving, as
a ValidationError naming each field), saved, given an immutable LaneRevision and an
AuditEvent with the before/after diff."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from core.audit import audit_record
from core.broadcast import DASHBOARD_GROUP, broadcast
from core.roles import UserLike
from core.validators import has_control_characters
from lanes.crypto import encrypt_secret
from lanes.edit_errors import RESERVED_NAMES, full_clean_into, merge_error
from lanes.models import Lane, LaneNode, LaneReplica, LaneRevision, LaneState, Node
from lanes.rules import ENV_NAME, LaneCheck, rule_max_model_len_pinned
from lanes.secrets import SECRET_MARK, is_secret_name
from lanes.selectors import CONFIG_FIELDS, ReplicaSpec, lane_check, lane_config, lane_replica_specs

MAX_MODEL_LEN_MESSAGE = rule_max_model_len_pinned({"max_model_len": None})[0].message


def _resolve_nodes(names: Sequence[str], errors: dict[str, list[str]]) -> list[Node]:
    if len(set(names)) != len(names):
        merge_error(errors, "nodes", "A node can appear only once in a lane.")
    if not names:
        merge_error(errors, "nodes", "Choose at least one node (rank 0 is the head).")
    found = {node.name: node for node in Node.objects.filter(
        name__in=[name for name in names if not has_control_characters(name)])}
    unknown = [name for name in names if name not in found]
    if unknown:
        merge_error(errors, "nodes", f"Unknown node(s): {', '.join(unknown)}.")
    return [found[name] for name in names if name in found]


def _apply_secret_env(lane: Lane, updates: Mapping[str, Any], errors: dict[str, list[str]]) -> dict[str, str]:
    """NAME → value sets or replaces a secret, NAME → None/"" clears it, NAME → "[secret]"
    keeps it (a form or client sending back what it was shown). Returns what changed, by name
    ("set", "replaced", "cleared"): never a value."""
    secrets = dict(lane.secret_env or {})
    changes: dict[str, str] = {}
    for name, value in updates.items():
        if not isinstance(name, str) or not ENV_NAME.match(name):
            merge_error(errors, "secret_env", f"{str(name)[:40]!r} is not an environment variable name "
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
            merge_error(errors, "secret_env", f"{name}: the value must be one line of text.")
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
            merge_error(errors, key, MAX_MODEL_LEN_MESSAGE if isinstance(value, str) or value is None
                   else "max_model_len must be a whole number of tokens of at least 1.")
            continue
        setattr(lane, key, value)
    if lane.name in RESERVED_NAMES:
        merge_error(errors, "name", f"{lane.name!r} is reserved by the pages; choose another name.")
    if "fallback" in data:
        name = data["fallback"]
        if not name:
            lane.fallback = None
        elif name == lane.name:
            merge_error(errors, "fallback", "A lane cannot be its own fallback.")
        else:
            fallback = None if has_control_characters(name) else Lane.objects.filter(name=name).first()
            if fallback is None:
                merge_error(errors, "fallback", f"No lane named {name!r}.")
            else:
                lane.fallback = fallback
    return _apply_secret_env(lane, secret_updates, errors)


def _secret_audit(changes: Mapping[str, str]) -> dict[str, Any]:
    """What the audit log says about secrets: which names changed and how, never a value."""
    return {"secret_env_changes": dict(sorted(changes.items()))} if changes else {}


def lane_validate(lane: Lane, replicas: Sequence[ReplicaSpec], *, unknown: Sequence[str] = ()) -> LaneCheck:
    """Rules on an unsaved lane, every replica; raises ValidationError naming each field when
    one fails. `unknown`: fields that failed their own checks: the rules reading them are
    skipped (the others still speak, so one submit shows every error)."""
    check = lane_check(lane, replicas=replicas, unknown=frozenset(unknown))
    if check.errors:
        raise ValidationError(check.errors_by_field())
    return check


def _rule_errors_into(lane: Lane, replicas: Sequence[ReplicaSpec], errors: dict[str, list[str]],
                      unknown: Sequence[str] = ()) -> None:
    """Field checks, then the lane rules that the well-formed fields decide, into `errors`."""
    full_clean_into(lane, errors, exclude=["fallback", *unknown])
    try:
        lane_validate(lane, replicas, unknown=[*unknown, *errors])
    except ValidationError as exc:
        for field, messages in exc.message_dict.items():
            for message in messages:
                merge_error(errors, field, message)


def _raise_unless_valid(lane: Lane, replicas: Sequence[ReplicaSpec], errors: dict[str, list[str]]) -> None:
    """Field checks and the lane rules; raises one ValidationError naming each failing field."""
    _rule_errors_into(lane, replicas, errors)
    if errors:
        raise ValidationError(errors)


def lane_rule_errors(
    *, lane: Lane | None, data: Mapping[str, Any], replicas: Sequence[Mapping[str, Any]] | None,
    unknown: Sequence[str],
) -> dict[str, list[str]]:
    """What saving would refuse, for a form whose `unknown` fields failed their own checks
    (`data`: its valid fields): the services' field checks and every rule the valid fields
    decide, so the form shows them with its field errors on the first submit. Saves nothing
    (an unsaved copy of the lane is checked)."""
    target = Lane() if lane is None else Lane.objects.select_related("fallback").get(pk=lane.pk)
    errors: dict[str, list[str]] = {}
    _apply_lane_data(target, data, errors)
    specs = lane_replica_specs(target) if lane is not None else []
    if replicas is not None:
        specs = _resolve_replicas(replicas, errors)
    _rule_errors_into(target, specs, errors, unknown)
    return {field: messages for field, messages in errors.items() if field not in unknown}


MAX_REPLICAS = 16


def _resolve_replicas(replicas: Sequence[Mapping[str, Any]], errors: dict[str, list[str]]) -> list[ReplicaSpec]:
    """[{"nodes": [names in rank order], "api_port": int or None}, ...] → specs; a node may
    serve one replica of a lane only."""
    if not replicas:
        merge_error(errors, "replicas", "A lane needs at least one replica.")
        return []
    if len(replicas) > MAX_REPLICAS:
        merge_error(errors, "replicas", f"A lane has at most {MAX_REPLICAS} replicas.")
        return []
    specs: list[ReplicaSpec] = []
    seen: dict[str, int] = {}
    for index, replica in enumerate(replicas):
        names = list(replica.get("nodes") or [])
        if not all(isinstance(name, str) for name in names):
            merge_error(errors, "replicas", f"Replica {index}: nodes must be node names.")
            continue
        for name in names:
            if name in seen and seen[name] != index:
                merge_error(errors, "replicas", f"Node {name} is in replica {seen[name]} and replica {index}: "
                                           "a node serves one replica of a lane.")
            seen.setdefault(name, index)
        port = replica.get("api_port")
        if port is not None and (isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535):
            merge_error(errors, "replicas", f"Replica {index}: api_port must be a port from 1 to 65,535 (or empty).")
            port = None
        node_errors: dict[str, list[str]] = {}
        ranked = _resolve_nodes(names, node_errors)
        for message in node_errors.get("nodes", []):  # replica 0's are the `nodes` field's
            if index:
                merge_error(errors, "replicas", f"Replica {index}: {message}")
            else:
                merge_error(errors, "nodes", message)
        specs.append(ReplicaSpec(ranked, port))
    return specs


def _check_removed_replicas(lane: Lane, count: int, errors: dict[str, list[str]]) -> None:
    for row in lane.replica_rows():
        if row.index >= count and row.observed_state not in (LaneState.STOPPED, LaneState.FAILED):
            merge_error(errors, "replicas", f"Replica {row.index} is {row.observed_state}: stop it before removing it.")


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
        merge_error(errors, "name", f"Lane {lane.name} is {lane.observed_state}: stop it before renaming it "
                               "(clients and its engine know it by this name).")
    dependents = sorted(lane.fallback_for.values_list("name", flat=True))
    if dependents:
        merge_error(errors, "name", f"Lane {lane.name} is the fallback of {', '.join(dependents)}: "
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
