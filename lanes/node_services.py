"""Changes to nodes. Every change is validated (errors block saving, as a ValidationError
naming each field), saved and given an AuditEvent with the before/after diff; node state
changes are broadcast after they are saved."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
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
from lanes.crypto import CredentialError, encrypt_private_key, host_key_fingerprint, normalize_host_key
from lanes.edit_errors import RESERVED_NAMES, full_clean_into, merge_error
from lanes.models import Lane, Node, NodeState, Transport
from lanes.selectors import ReplicaSpec, lane_check, lane_replica_specs

NODE_FIELDS = ("name", "address", "transport", "ssh_port", "ssh_user", "runtime_command", "sim_dir", "memory_gib",
               "os_reserve_gib", "labels", "state")
ADDRESS = re.compile(r"^[A-Za-z0-9._:-]+$")
SAFE_WORD = re.compile(r"^[A-Za-z0-9._/=:+-]+$")


def node_snapshot(node: Node) -> dict[str, Any]:
    """What the audit log records: never the private key, only whether one is set."""
    data = {key: getattr(node, key) for key in NODE_FIELDS}
    data["ssh_private_key"] = "set" if node.ssh_private_key_encrypted else "not set"
    data["transfer_key"] = "set" if node.transfer_key_encrypted else "not set"
    data["ssh_host_key"] = host_key_fingerprint(node.ssh_host_key) or "not pinned"
    return data


def _apply_node_data(node: Node, data: Mapping[str, Any], private_key: str | None, errors: dict[str, list[str]]) -> None:
    for key, value in data.items():
        if key in ("transfer_key", "clear_transfer_key"):
            _apply_transfer_key(node, data, errors)
            continue
        if key not in NODE_FIELDS and key != "ssh_host_key":
            raise ValueError(f"unknown node field {key!r}")
        if key == "ssh_host_key":
            try:
                node.ssh_host_key = normalize_host_key(value) if value else ""
            except CredentialError as exc:
                merge_error(errors, "ssh_host_key", str(exc))
            continue
        setattr(node, key, value)
    if private_key:
        try:
            node.ssh_private_key_encrypted = encrypt_private_key(private_key)
        except CredentialError as exc:
            merge_error(errors, "ssh_private_key", str(exc))
    if node.name in RESERVED_NAMES:
        merge_error(errors, "name", f"{node.name!r} is reserved by the pages; choose another name.")
    if node.address and not ADDRESS.match(node.address):
        merge_error(errors, "address", "Enter a host name or an IP address (letters, digits, '.', ':' and '-').")
    try:
        words = shlex.split(node.runtime_command)
    except ValueError:
        words = []
    # Plain words only: no quotes, control characters (a newline would start a second command) or shell syntax.
    if not words or " ".join(words) != node.runtime_command.strip() or not all(SAFE_WORD.match(w) for w in words):
        merge_error(errors, "runtime_command", "Enter one or more plain words, such as 'docker' or 'sudo -n docker' "
                                          "(letters, digits and . _ / = : + - only).")
    sim_dir_problem = sim_dir_error(node.sim_dir, required=node.transport == Transport.LOCAL)
    if sim_dir_problem:
        merge_error(errors, "sim_dir", sim_dir_problem)


def _apply_transfer_key(node: Node, data: Mapping[str, Any], errors: dict[str, list[str]]) -> None:
    """The node-to-node copy key: encrypted like the SSH key, a new one replaces, clear removes."""
    if data.get("transfer_key"):
        try:
            node.transfer_key_encrypted = encrypt_private_key(data["transfer_key"])
        except CredentialError as exc:
            merge_error(errors, "transfer_key", str(exc))
    elif data.get("clear_transfer_key"):
        node.transfer_key_encrypted = ""


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


def _check_lanes_still_fit(node: Node, errors: dict[str, list[str]]) -> None:
    for lane in Lane.objects.filter(members__node=node).distinct():
        specs = [ReplicaSpec([node if n.pk == node.pk else n for n in spec.nodes], spec.api_port)
                 for spec in lane_replica_specs(lane)]
        for result in lane_check(lane, replicas=specs).errors:
            if result.code in ("memory_budget", "shared_node_overflow", "memory_budget_no_kv"):
                merge_error(errors, "memory_gib", f"Lane {lane.name}: {result.message}")


@transaction.atomic
def node_create(*, actor: UserLike | None, data: Mapping[str, Any], private_key: str | None = None) -> Node:
    node = Node()
    errors: dict[str, list[str]] = {}
    _apply_node_data(node, data, private_key, errors)
    full_clean_into(node, errors)
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
    full_clean_into(node, errors)
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


def node_network_payload(node: Node) -> dict[str, Any] | None:
    """The `node.network` event of its saved report (a network check's, broadcast as it is
    saved and sent again in every socket's snapshot), None for a node never checked."""
    report = node.network_report or {}
    if not report:
        return None
    return {"name": node.name, "verdict": report.get("verdict"), "checked_at": report.get("checked_at")}


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
