"""The inventory read: one script per node over `bash -s` (python3 of the host, stdlib only)
that lists the models of its Hugging Face cache against the hub's file lists, the images the
node's lanes use, and the free disk; parsed here and saved on the node (`Node.inventory`).

Run by the inventory job, and at the start and end of every download and sync
(refresh_inventory). A launch does not read it again: its plan's weights step checks each
rank live, and the launch runs exactly its dry run."""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable
from typing import Any

from django.utils import timezone

from jobs.runner import JobContext
from jobs.transports import TransportError
from lanes.model_files import HF_HOME_SHELL
from lanes.models import Lane, Node

SCANNER = r'''
import json, os, sys
hub = os.path.join(sys.argv[1], "hub")
models = []
for folder in sorted(os.listdir(hub)) if os.path.isdir(hub) else []:
    if not folder.startswith("models--"):
        continue
    repo = os.path.join(hub, folder)
    model_id = folder[len("models--"):].replace("--", "/", 1)
    refs = {}
    for base, _, names in os.walk(os.path.join(repo, "refs")):
        for name in names:
            path = os.path.join(base, name)
            refs[os.path.relpath(path, os.path.join(repo, "refs"))] = open(path).read().strip()
    blobs = os.path.join(repo, "blobs")
    cut = sum(1 for n in os.listdir(blobs) if n.endswith(".incomplete")) if os.path.isdir(blobs) else 0
    snaps = os.path.join(repo, "snapshots")
    for commit in sorted(os.listdir(snaps)) if os.path.isdir(snaps) else []:
        snap = os.path.join(snaps, commit)
        have = {}
        for base, _, names in os.walk(snap):
            for name in names:
                path = os.path.join(base, name)
                if os.path.exists(path):
                    have[os.path.relpath(path, snap)] = os.path.getsize(path)
        tree_path = os.path.join(repo, "trees", commit + ".json")
        tree = None
        if os.path.isfile(tree_path):
            try:
                tree = {p: e["size"] for p, e in json.load(open(tree_path))["files"].items()}
            except (ValueError, KeyError, TypeError):
                tree = None
        models.append({"model_id": model_id, "commit": commit, "refs": sorted(r for r, c in refs.items() if c == commit),
                       "have": have, "tree": tree, "incomplete_blobs": cut})
print("MODELS\t" + json.dumps(models))
'''


def scan_script(images: Iterable[str]) -> str:
    """The bash script the node runs (no argument reaches it unquoted)."""
    lines = [f"h={HF_HOME_SHELL}", f"python3 -c {shlex.quote(SCANNER)} \"$h\" || echo 'SCANFAIL'",
             "printf 'DF\\t%s\\n' \"$(df -PB1 \"$h\" 2>/dev/null | tail -n 1)\""]
    for image in sorted(set(images)):
        word = shlex.quote(image)
        lines.append(f"printf 'IMAGE\\t%s\\t%s\\n' {word} \"$(docker image inspect --format '{{{{.Id}}}}' {word} "
                     "2>/dev/null)\"")
    return "\n".join(lines) + "\n"


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
            reference, _, ident = rest.partition("\t")
            if ident.strip().startswith("sha256:"):
                inventory["images"].append({"reference": reference, "id": ident.strip()})
        elif kind == "SCANFAIL":
            inventory["errors"].append("python3 could not read the HF cache on the node")
    return inventory


def lane_images(node: Node) -> list[str]:
    return sorted(set(Lane.objects.filter(members__node=node).values_list("image", flat=True)))


def refresh_inventory(ctx: JobContext, nodes: Iterable[Node], *, quiet: bool = True) -> dict[str, dict[str, Any]]:
    """Read and save each node's inventory; a node that cannot be read keeps its last one
    (and the log says why). Returns what was read, by node name."""
    found: dict[str, dict[str, Any]] = {}
    for node in nodes:
        try:
            result = ctx.run(ctx.endpoint(node), "bash -s", stdin=scan_script(lane_images(node)), capture=True,
                             quiet=quiet, timeout_s=120)
        except TransportError as exc:
            ctx.log(f"inventory of {node.name} not refreshed: {exc}")
            continue
        inventory = parse_scan(result.stdout)
        inventory["checked_at"] = timezone.now().isoformat()
        Node.objects.filter(pk=node.pk).update(inventory=inventory, inventory_at=timezone.now())
        node.inventory = inventory
        found[node.name] = inventory
    return found


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
