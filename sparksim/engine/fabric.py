"""What NCCL would find on the simulated fabric when a multi-node engine starts.

The container env decides it, as on real Sparks: NCCL_IB_HCA names the RoCE devices,
NCCL_IB_GID_INDEX must point at each device's RoCE v2 IPv4-mapped GID ("a hardcoded index
broke our cluster twice after IP reassignment", seed 003), and without usable devices NCCL
falls back to sockets, which costs throughput.
"""

import os
from collections.abc import Mapping
from dataclasses import dataclass

from sparksim.engine.log import log
from sparksim.host.node import ROCE_DEVICES, load_node
from sparksim.host.sysfs import port_active, roce_v2_ipv4_gid_index
from sparksim.rendezvous import Member

# Seed reference: ~3 GB/s over one device or sockets vs ~23 GB/s over RDMA; decode is
# all-reduce bound across nodes, so a socket fallback roughly halves it.
SOCKET_FALLBACK_FACTOR = 0.5


class FabricError(Exception):
    """NCCL would fail: the engine exits at start-up with this text."""


@dataclass
class FabricVerdict:
    transport: str  # "IB" or "Socket"
    speed_factor: float
    devices: list[str]


def check_fabric(members: list[Member], env: Mapping[str, str] | None = None) -> FabricVerdict:
    env = os.environ if env is None else env
    # Without NCCL_IB_HCA, NCCL takes every RoCE device it finds; without NCCL_IB_GID_INDEX,
    # recent NCCL picks the RoCE v2 IPv4 GID by itself.
    requested = [name.split(":")[0] for name in env.get("NCCL_IB_HCA", "").split(",") if name]
    requested = requested or list(ROCE_DEVICES)
    interface = env.get("NCCL_SOCKET_IFNAME", "enp1s0f0np0")
    if env.get("NCCL_IB_DISABLE") == "1":
        return _socket(interface, "NCCL_IB_DISABLE=1")
    gid_text = env.get("NCCL_IB_GID_INDEX")
    usable = [device for device in requested if device in ROCE_DEVICES]
    for member in members:
        node = load_node(member.sim_dir)
        usable = [device for device in usable if port_active(node, device)]
        for device in usable:
            wanted = roce_v2_ipv4_gid_index(node, device)
            if gid_text is not None and wanted is not None and int(gid_text) != wanted:
                raise FabricError(
                    f"NCCL error: remote process exited or there was a network error, NCCL "
                    f"version 2.27.3. ncclRemoteError: NET/IB : Got completion from peer "
                    f"{node.fabric_ip(ROCE_DEVICES[device])} with status=IBV_WC_RETRY_EXC_ERR(12) "
                    f"(GID index {gid_text} on {node.name}:{device} is not RoCE v2 over IPv4; "
                    f"it is {wanted})"
                )
    if not usable:
        return _socket(interface, f"no active device among NCCL_IB_HCA={','.join(requested)}")
    listed = " ".join(f"[{index}]{device}:1/RoCE" for index, device in enumerate(usable))
    log("INFO", "pynccl.py", f"NCCL INFO NET/IB : Using {listed} ; OOB {interface}")
    return FabricVerdict("IB", 1.0, usable)


def _socket(interface: str, reason: str) -> FabricVerdict:
    log("WARNING", "pynccl.py", f"NCCL INFO NET/IB : No device found ({reason}).")
    log("WARNING", "pynccl.py", f"NCCL INFO NET/Socket : Using [0]{interface}")
    return FabricVerdict("Socket", SOCKET_FALLBACK_FACTOR, [])
