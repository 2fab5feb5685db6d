"""The model sync kind: copy a model from a node that holds it whole to other nodes, over the
fabric IPs of the network report (the management network only when the admin chose it, and
the log says so), with rsync --partial and live progress per target; refused before any
byte moves when a target's disk cannot hold it (naming the node, free and needed bytes);
verified after against the hub's sizes and hashes; inventories refreshed at the end."""

from __future__ import annotations

from typing import Any

from jobs.runner import JobContext, JobFailed
from jobs.weights.copy_scripts import parse_verify, rsync_script, target_prepare_command, verify_command
from jobs.weights.progress import StepProgress, parse_rsync_progress
from jobs.weights.scan import refresh_inventory
from jobs.weights.stream import run_with_progress
from lanes.crypto import CredentialError, decrypt_private_key
from lanes.model_files import find_model, human
from lanes.models import Node
from lanes.plan_shell import NodeTarget, fabric_of


def ordered_nodes(ctx: JobContext) -> tuple[Node, list[Node]]:
    by_name = {node.name: node for node in ctx.job.nodes.all()}
    names = list(ctx.job.params.get("nodes") or [])
    return by_name[names[0]], [by_name[name] for name in names[1:]]


def copy_address(node: Node, network: str) -> str:
    if network == "management":
        return node.address
    fabric = fabric_of(NodeTarget(node.name, node.address, report=node.network_report or {}))
    if not fabric.has_report:
        raise JobFailed(f"{node.name} has no network report, so no fabric IP: run a network check first, "
                        "or choose the management network for this copy")
    return fabric.ip


def transfer_key(source: Node) -> str:
    if not source.transfer_key_encrypted:
        raise JobFailed(f"{source.name} has no transfer key: an admin stores the private key {source.name} uses "
                        "to reach the other nodes (docs/guide-admin.md, node-to-node SSH)")
    try:
        return decrypt_private_key(source.transfer_key_encrypted)
    except CredentialError:
        raise JobFailed(f"the transfer key of {source.name} cannot be decrypted") from None


def plan_copy(ctx: JobContext, source: Node, targets: list[Node]) -> dict[str, Any]:
    """Fresh inventories, then the refusals that must come before the first byte."""
    params = ctx.job.params
    model_id, revision = params["model_id"], params.get("revision") or "main"
    inventories = refresh_inventory(ctx, [source, *targets])
    if source.name not in inventories:
        raise JobFailed(f"cannot read the cache of {source.name}")
    held = find_model(inventories[source.name], model_id, revision)
    if held is None or not held["complete"]:
        why = held["problem"] if held else "it does not hold it"
        raise JobFailed(f"{source.name} cannot be the source of {model_id} at {revision}: {why}")
    refusals = []
    for target in targets:
        inventory = inventories.get(target.name)
        if inventory is None:
            raise JobFailed(f"cannot read the cache of {target.name}")
        there = find_model(inventory, model_id, held["commit"])
        needed = max(0, int(held["bytes"]) - int(there["bytes"] if there else 0))
        free = inventory.get("free_bytes")
        if free is None or needed > int(free):
            refusals.append(f"{target.name} has {human(free)} free ({free} bytes), {model_id} needs {human(needed)} "
                            f"({needed} bytes) more")
    if refusals:
        raise JobFailed("refused before copying: " + "; ".join(refusals))
    return held


def run_model_sync(ctx: JobContext) -> dict[str, Any]:
    source, targets = ordered_nodes(ctx)
    params = ctx.job.params
    model_id, network = params["model_id"], params.get("network") or "fabric"
    steps = ctx.declare_steps(
        [("plan", "preflight", source.name, f"{source.name} holds {model_id} whole; targets have the room")]
        + [(f"copy.{t.name}", "copy", source.name, f"rsync {source.name} → {t.name}") for t in targets]
        + [(f"verify.{t.name}", "verify", t.name, f"verify {model_id} on {t.name} against the hub's hashes")
           for t in targets])
    with ctx.step(steps[0]):
        held = plan_copy(ctx, source, targets)
        key = transfer_key(source)
        addresses = {target.name: copy_address(target, network) for target in targets}
        if network == "management":
            ctx.log("copying over the management network, as the admin chose (slower than the fabric)")
    copied: dict[str, Any] = {}
    for target, step in zip(targets, steps[1:1 + len(targets)], strict=True):
        with ctx.step(step):
            copied[target.name] = copy_to(ctx, source, target, step, held, key, (addresses[target.name], network))
    for target, step in zip(targets, steps[1 + len(targets):], strict=True):
        with ctx.step(step):
            result = ctx.run(ctx.endpoint(target), verify_command(model_id, held["commit"]), capture=True,
                             timeout_s=float(params["time_limit_s"]))
            checked, bad = parse_verify(result.stdout)
            if bad:
                step.detail = "; ".join(bad)[:2000]
                raise JobFailed(f"verification failed on {target.name}: {'; '.join(bad[:5])}")
            step.detail = f"{checked} files match the hub's sizes and hashes"
    refresh_inventory(ctx, [source, *targets])
    return {"model_id": model_id, "commit": held["commit"], "source": source.name, "network": network,
            "copied": copied}


def copy_to(ctx: JobContext, source: Node, target: Node, step: Any, held: dict[str, Any], key: str,
            route: tuple[str, str]) -> dict[str, Any]:
    address, network = route
    if not target.ssh_host_key.strip():
        raise JobFailed(f"{target.name} has no pinned SSH host key: pin it on its node page before copying to it")
    ctx.run(ctx.endpoint(target), target_prepare_command(held["model_id"]), timeout_s=30)
    progress = StepProgress(step, int(held["bytes"]))

    def on_line(text: str) -> bool:
        parsed = parse_rsync_progress(text, int(held["bytes"]))
        if parsed is None:
            return False
        progress.update(parsed)
        return True

    script = rsync_script(model_id=held["model_id"], commit=held["commit"], key=key, host_key=target.ssh_host_key.strip(),
                          user=target.ssh_user, address=address, port=target.ssh_port, target_sim_dir=target.sim_dir,
                          bwlimit_mbps=ctx.job.params.get("bwlimit_mbps"))
    ctx.log(f"rsync {source.name} → {target.name} at {address} ({network})", node=source.name)
    try:
        result = run_with_progress(ctx, ctx.endpoint(source), "bash -s", on_line, stdin=script,
                                   timeout_s=float(ctx.job.params["time_limit_s"]))
    finally:
        progress.close()
    if result.exit_code != 0:
        raise JobFailed(f"rsync from {source.name} to {target.name} ({address}) exited {result.exit_code}")
    progress.publish(f"{human(held['bytes'])} copied to {target.name} over {network} ({address})")
    return {"address": address, "bytes": held["bytes"], "history": progress.history[-1:]}
