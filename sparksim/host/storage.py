"""A node's disk: the Hugging Face cache (`<sim_dir>/hf`, a Spark's `~/.cache/huggingface`),
the images it holds, `df` over a capacity of `disk_gib`, and `ssh` to another node's fabric
IP (which reaches that node's SSH server on its 127.0.0.x address, as the QSFP link would)."""

import os
import shutil
import sys
from pathlib import Path

from sparksim.host.node import ROCE_DEVICES, NodeInfo, cluster_nodes
from sparksim.hub.repos import Repo

GIB = 1024**3
# The root file system before any model or image: the OS, CUDA, the user's files.
BASE_USED_BYTES = 40 * GIB
SSH_VALUE_OPTIONS = set("BbcDEeFIiJLlmOopQRSWw")


def tree_bytes(path: Path) -> int:
    """Apparent size of every file below `path` (a sparse file counts whole, as it will)."""
    total = 0
    for directory, _, files in os.walk(path):
        for name in files:
            try:
                total += (Path(directory) / name).lstat().st_size
            except OSError:
                continue
    return total


def used_bytes(node: NodeInfo) -> int:
    from sparksim.shim.images import image_store

    images = image_store(node)
    return BASE_USED_BYTES + tree_bytes(node.hf_home) + sum(int(item.get("size", 0)) for item in images.values())


def free_bytes(node: NodeInfo) -> int:
    return max(0, int(node.disk_gib * GIB) - used_bytes(node))


def df(node: NodeInfo, argv: list[str]) -> int:
    """`df [-P] [-B1|-k] [PATH...]`: one line for the node's root file system."""
    unit = 1 if any(flag in argv for flag in ("-B1", "-PB1", "--block-size=1")) else 1024
    size = int(node.disk_gib * GIB)
    used = min(size, used_bytes(node))
    avail = size - used
    header = "1B-blocks" if unit == 1 else "1024-blocks"
    print(f"Filesystem     {header:>14} {'Used':>14} {'Available':>14} Capacity Mounted on")
    percent = -(-used * 100 // size) if size else 100
    print(f"/dev/nvme0n1p2 {size // unit:>14} {used // unit:>14} {avail // unit:>14} {percent:>7}% /")
    return 0


def fabric_owner(node: NodeInfo, address: str) -> tuple[NodeInfo, str] | None:
    """The cluster node that owns a fabric IP, and its netdev."""
    for other in cluster_nodes(node.root):
        for netdev in ROCE_DEVICES.values():
            if other.fabric_ip(netdev) == address:
                return other, netdev
    return None


def link_down(node: NodeInfo, netdev: str) -> bool:
    devices = [device for device, name in ROCE_DEVICES.items() if name == netdev]
    return any(device in node.faults.get("link_down", []) for device in devices)


def ssh(node: NodeInfo, argv: list[str]) -> int:
    """The real OpenSSH client, with a fabric IP destination mapped to its node's address."""
    args = list(argv)
    index = destination_index(args)
    if index is not None:
        user, at, host = args[index].rpartition("@")
        owner = fabric_owner(node, host)
        if owner is not None:
            target, netdev = owner
            if link_down(target, netdev) or link_down(node, netdev):
                print(f"ssh: connect to host {host} port 22: Network is unreachable", file=sys.stderr)
                return 255
            args[index] = f"{user}{at}{target.address}"
            # The pinned key is filed under the fabric IP, the address the portal asked for.
            args[index:index] = ["-o", f"HostKeyAlias={host}"]
    real = real_ssh(node)
    if real is None:
        print("ssh: command not found", file=sys.stderr)
        return 127
    os.execv(real, [real, *args])
    return 255  # not reached


def destination_index(args: list[str]) -> int | None:
    skip = False
    for index, arg in enumerate(args):
        if skip:
            skip = False
            continue
        if arg.startswith("-") and len(arg) >= 2:
            skip = len(arg) == 2 and arg[1] in SSH_VALUE_OPTIONS
            continue
        return index
    return None


def real_ssh(node: NodeInfo) -> str | None:
    own = str(Path(node.sim_dir) / "bin")
    path = os.pathsep.join(part for part in os.environ.get("PATH", "").split(os.pathsep) if part != own)
    return shutil.which("ssh", path=path)


def seed_model(node: NodeInfo, repo: Repo, revision: str = "main", only: list[str] | None = None) -> Path:
    """Put a hub repo into the node's cache in huggingface_hub's layout (blobs, snapshot
    links, refs, the tree listing), as a finished `snapshot_download` leaves it; `only`
    leaves out the other files (a partial copy)."""
    import json

    storage = node.hf_home / "hub" / ("models--" + repo.repo_id.replace("/", "--"))
    snapshot = storage / "snapshots" / repo.commit
    (storage / "blobs").mkdir(parents=True, exist_ok=True)
    snapshot.mkdir(parents=True, exist_ok=True)
    (storage / "refs").mkdir(exist_ok=True)
    if revision != repo.commit:
        (storage / "refs" / revision).write_text(repo.commit)
    tree: dict[str, dict[str, object]] = {}
    for item in repo.files:
        entry: dict[str, object] = {"size": item.size, "blob_id": item.blob_id}
        if item.lfs:
            entry.update(lfs_sha256=item.sha256, lfs_size=item.size)
        tree[item.path] = entry
        if only is not None and item.path not in only:
            continue
        blob = storage / "blobs" / item.etag
        if not blob.exists():
            shutil.copyfile(repo.directory / "files" / item.path, blob)
        link = snapshot / item.path
        link.parent.mkdir(parents=True, exist_ok=True)
        link.unlink(missing_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (storage / "trees").mkdir(exist_ok=True)
    (storage / "trees" / f"{repo.commit}.json").write_text(json.dumps({"format_version": 1, "files": tree}))
    return snapshot


def seed_placeholder_model(node: NodeInfo, model_id: str, revision: str = "main") -> Path:
    """A small stand-in of `model_id` (a config and one LFS shard, from the cluster's own hub
    directory `<root>/_hub`) put whole into the node's cache: what the demo and the launch
    tests start from, so every rank holds its lane's weights the way a download leaves them."""
    from sparksim.hub.repos import create_repo, load_repo

    hub_root = node.root / "_hub"
    repo = load_repo(hub_root, model_id) or create_repo(
        hub_root, model_id, {"config.json": b'{"architectures": ["SparksimForCausalLM"]}', "model.safetensors": 96 * 1024}
    )
    return seed_model(node, repo, revision)
