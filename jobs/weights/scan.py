"""The inventory read: one script per node (lanes.model_files.inventory_script: python3 of
the host, stdlib only) that lists the models of its Hugging Face cache against the hub's
file lists, the images the node's lanes use, and the free disk; parsed here and saved on
the node (`Node.inventory`).

Run by the inventory job, at the start and end of every download and sync
(refresh_inventory), and by every launch: its plan reads each rank's inventory in the
preflight (the step `preflight.inventory.<node>`, in the dry run like every other), and
the launch saves what it read (save_launch_inventories)."""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable
from typing import Any

from django.utils import timezone

from jobs.runner import JobContext
from jobs.transports import TransportError
from lanes.model_files import inventory_script
from lanes.models import Lane, Node


def summarise_model(entry: dict[str, Any]) -> dict[str, Any]:
    """A snapshot as the pages show it: complete only if the hub's list is there and every
    file of it is present at its size, and no download of the model is half done."""
    have: dict[str, int] = {str(k): int(v) for k, v in (entry.get("have") or {}).items()}
    tree = entry.get("tree")
    problem = ""
    if tree is None:
        problem = "no file list from the hub in the cache (trees/<commit>.json): completeness unknown"
        missing: list[str] = []
    else:
        missing = sorted(path for path, size in tree.items() if have.get(path) != size)
        if missing:
            problem = f"{len(missing)} of {len(tree)} files missing or of the wrong size: {', '.join(missing[:5])}"
    if not problem and int(entry.get("incomplete_blobs") or 0):
        problem = f"{entry['incomplete_blobs']} download(s) in progress or cut off"
    return {
        "model_id": str(entry.get("model_id", "")), "commit": str(entry.get("commit", "")),
        "refs": list(entry.get("refs") or []), "files": len(have), "bytes": sum(have.values()),
        "expected_files": len(tree) if tree is not None else None,
        "expected_bytes": sum(tree.values()) if tree is not None else None,
        "complete": not problem, "problem": problem, "missing": missing[:50],
    }


def parse_scan(lines: list[str]) -> dict[str, Any]:
    inventory: dict[str, Any] = {"models": [], "images": [], "free_bytes": None, "disk_bytes": None, "errors": []}
    for line in lines:
        kind, _, rest = line.partition("\t")
        if kind == "MODELS":
            try:
                inventory["models"] = [summarise_model(item) for item in json.loads(rest)]
            except (ValueError, TypeError, AttributeError):
                inventory["errors"].append("the cache listing could not be read")
        elif kind == "DF":
            fields = rest.split()
            if len(fields) >= 4 and fields[1].isdigit() and fields[3].isdigit():
                inventory["disk_bytes"], inventory["free_bytes"] = int(fields[1]), int(fields[3])
        elif kind == "IMAGE":
            reference, _, found = rest.partition("\t")
            ident, _, digests = found.strip().partition(" ")
            if ident.startswith("sha256:"):
                inventory["images"].append({"reference": reference, "id": ident, "digests": parse_digests(digests)})
        elif kind == "SCANFAIL":
            inventory["errors"].append("python3 could not read the HF cache on the node")
    return inventory


def parse_digests(text: str) -> list[str]:
    """`{{json .RepoDigests}}`: the registry digests docker knows for the image (none for one
    that was only loaded from a file)."""
    try:
        value = json.loads(text or "[]")
    except ValueError:
        return []
    return [str(item) for item in value if isinstance(item, str)] if isinstance(value, list) else []


def docker_words(node: Node) -> str:
    return " ".join(shlex.quote(part) for part in shlex.split(node.runtime_command))


def lane_images(node: Node) -> list[str]:
    return sorted(set(Lane.objects.filter(members__node=node).values_list("image", flat=True)))


def refresh_inventory(ctx: JobContext, nodes: Iterable[Node], *, quiet: bool = True) -> dict[str, dict[str, Any]]:
    """Read and save each node's inventory; a node that cannot be read keeps its last one
    (and the log says why). Returns what was read, by node name."""
    found: dict[str, dict[str, Any]] = {}
    for node in nodes:
        try:
            result = ctx.run(ctx.endpoint(node), "bash -s", stdin=inventory_script(lane_images(node), docker_words(node)), capture=True,
                             quiet=quiet, timeout_s=120)
        except TransportError as exc:
            ctx.log(f"inventory of {node.name} not refreshed: {exc}")
            continue
        found[node.name] = save_inventory(node, parse_scan(result.stdout))
    return found


def save_inventory(node: Node, inventory: dict[str, Any], *, images_read: Iterable[str] | None = None) -> dict[str, Any]:
    """Save what was read on `node`. A read of only some images (`images_read`: a launch reads
    its own) keeps what the last inventory said of the others."""
    if images_read is not None:
        read = set(images_read)
        kept = [image for image in (node.inventory or {}).get("images") or [] if image.get("reference") not in read]
        inventory["images"] = sorted([*kept, *inventory["images"]], key=lambda image: str(image.get("reference")))
    inventory["checked_at"] = timezone.now().isoformat()
    Node.objects.filter(pk=node.pk).update(inventory=inventory, inventory_at=timezone.now())
    node.inventory = inventory
    return inventory


def save_launch_inventories(collected: dict[str, str], nodes: Iterable[Node], image: str) -> None:
    """What a launch's preflight read on each rank (the `inventory` collected by its plan)."""
    for node in nodes:
        if node.name in collected:
            save_inventory(node, parse_scan(collected[node.name].splitlines()), images_read=[image])


def run_inventory(ctx: JobContext) -> dict[str, Any]:
    names = list(ctx.job.params.get("nodes") or [])
    nodes = sorted(ctx.job.nodes.all(), key=lambda n: names.index(n.name) if n.name in names else 0)
    found = refresh_inventory(ctx, nodes)
    for name, inventory in found.items():
        complete = sum(1 for model in inventory["models"] if model["complete"])
        ctx.log(f"{name}: {len(inventory['models'])} model snapshot(s), {complete} complete; "
                f"{len(inventory['images'])} image(s); free {inventory['free_bytes']} bytes", node=name)
    missing = [node.name for node in nodes if node.name not in found]
    if missing:
        from jobs.runner import JobFailed

        raise JobFailed(f"could not read {', '.join(missing)}")
    return {"nodes": sorted(found)}
