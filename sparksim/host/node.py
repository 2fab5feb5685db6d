"""A simulated node's identity, stored in `<sim_dir>/node.json`."""

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sparksim.files import write_atomically

# Each Spark: port 0 shows up as rocep1s0f0 + roceP2p1s0f0, port 1 as rocep1s0f1 +
# roceP2p1s0f1 (one device per GB10 PCIe link). Fabric subnets: 192.168.100.0/24 on port 0
# netdevs, 192.168.101.0/24 on port 1 netdevs.
ROCE_DEVICES: dict[str, str] = {
    "rocep1s0f0": "enp1s0f0np0",
    "rocep1s0f1": "enp1s0f1np1",
    "roceP2p1s0f0": "enP2p1s0f0np0",
    "roceP2p1s0f1": "enP2p1s0f1np1",
}
FABRIC_SUBNETS: dict[str, str] = {
    "enp1s0f0np0": "192.168.100",
    "enP2p1s0f0np0": "192.168.100",
    "enp1s0f1np1": "192.168.101",
    "enP2p1s0f1np1": "192.168.101",
}
MANAGEMENT_NETDEV = "enP7s7"
DEFAULT_MEMORY_GIB = 128.0
# A DGX Spark's NVMe: 4 TB, which df shows as ~3,726 GiB.
DEFAULT_DISK_GIB = 3726.0


@dataclass
class NodeInfo:
    name: str
    address: str  # 127.0.0.x: where SSH and the engines listen
    sim_dir: str
    host_number: int  # last octet of the fabric IPs
    memory_gib: float = DEFAULT_MEMORY_GIB
    time_scale: float = 1.0
    disk_gib: float = DEFAULT_DISK_GIB
    faults: dict[str, Any] = field(default_factory=dict)

    @property
    def root(self) -> Path:
        return Path(self.sim_dir).parent

    @property
    def hf_home(self) -> Path:
        """The node's Hugging Face home (`~/.cache/huggingface` on a Spark); models in `hub/`."""
        return Path(self.sim_dir) / "hf"

    def fabric_ip(self, netdev: str) -> str:
        # Both PCIe halves of one port share the subnet, so the second half's host part is
        # 100 away (up when that stays a valid host, else down).
        host = self.host_number
        if netdev.startswith("enP2"):
            host = host + 100 if host <= 154 else host - 100
        return f"{FABRIC_SUBNETS[netdev]}.{host}"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def node_json_path(sim_dir: str | Path) -> Path:
    return Path(sim_dir) / "node.json"


def load_node(sim_dir: str | Path) -> NodeInfo:
    data = json.loads(node_json_path(sim_dir).read_text())
    return NodeInfo(**data)


def save_node(node: NodeInfo) -> None:
    path = node_json_path(node.sim_dir)
    write_atomically(path, json.dumps(node.to_json(), indent=2, sort_keys=True) + "\n")


def cluster_nodes(root: Path) -> list[NodeInfo]:
    """Every node that shares this cluster root."""
    nodes = []
    for candidate in sorted(root.iterdir()) if root.is_dir() else []:
        if node_json_path(candidate).is_file():
            nodes.append(load_node(candidate))
    return nodes
