"""The fake /sys tree of a simulated Spark, regenerated from node.json and its faults."""

import fcntl
import ipaddress
from pathlib import Path

from sparksim.host.node import MANAGEMENT_NETDEV, ROCE_DEVICES, NodeInfo

FIRMWARE_VERSION = "28.45.1200"
PORT_RATE = "200 Gb/sec (4X HDR)"
FABRIC_MTU = 9000
ROCE_V2_GID_INDEX = 3  # seed/dashaun: "GID index 3 is RoCE v2 over IPv4"
GID_TABLE_SIZE = 16
EMPTY_GID = "0000:0000:0000:0000:0000:0000:0000:0000"
COUNTERS = ("port_xmit_data", "port_rcv_data", "port_xmit_packets", "port_rcv_packets",
            "link_downed", "symbol_error", "port_rcv_errors")


def sys_dir(node: NodeInfo) -> Path:
    return Path(node.sim_dir) / "sys"


def ib_port_dir(node: NodeInfo, device: str) -> Path:
    return sys_dir(node) / "class" / "infiniband" / device / "ports" / "1"


def net_dir(node: NodeInfo, netdev: str) -> Path:
    return sys_dir(node) / "class" / "net" / netdev


def mac_address(node: NodeInfo, netdev_index: int) -> str:
    return f"4c:bb:47:{node.host_number:02x}:{netdev_index:02x}:{0x2a + netdev_index:02x}"


def gid_text(address: ipaddress.IPv6Address) -> str:
    hex_digits = address.exploded.replace(":", "")
    return ":".join(hex_digits[offset : offset + 4] for offset in range(0, 32, 4))


def gid_table(node: NodeInfo, device: str, netdev: str, ipv4_index: int) -> list[tuple[str, str]]:
    """(gid, type) per index; the RoCE v2 IPv4-mapped entry sits at `ipv4_index`.

    A real table holds link-local entries first, then one v1/v2 pair per address; extra
    IPv6 addresses push the IPv4 pair further down (seed 003 found it at index 11).
    """
    netdev_index = list(ROCE_DEVICES).index(device)
    host = node.host_number
    link_local = ipaddress.IPv6Address(f"fe80::4ebb:47ff:fe{host:02x}:{netdev_index:04x}")
    ipv4 = ipaddress.IPv6Address(f"::ffff:{node.fabric_ip(netdev)}")
    table = [(gid_text(link_local), "IB/RoCE v1"), (gid_text(link_local), "RoCE v2")]
    extra = 0
    while len(table) < ipv4_index - 1:
        extra += 1
        global_v6 = ipaddress.IPv6Address(f"2001:db8:{netdev_index}::{host:x}:{extra:x}")
        table.append((gid_text(global_v6), "IB/RoCE v1" if len(table) % 2 == 0 else "RoCE v2"))
    table.append((gid_text(ipv4), "IB/RoCE v1"))
    table.append((gid_text(ipv4), "RoCE v2"))
    return table


def write_node_tree(node: NodeInfo) -> None:
    """(Re)write every file whose content follows from node.json; counters are kept."""
    faults = node.faults
    link_down = set(faults.get("link_down", []))
    mtus: dict[str, int] = faults.get("mtu", {})
    gid_indexes: dict[str, int] = faults.get("gid_index", {})
    for netdev_index, (device, netdev) in enumerate(ROCE_DEVICES.items()):
        up = device not in link_down
        device_dir = sys_dir(node) / "class" / "infiniband" / device
        port = ib_port_dir(node, device)
        _write(device_dir / "fw_ver", FIRMWARE_VERSION)
        _write(device_dir / "hca_type", "MT4129")
        _write(device_dir / "node_type", "1: CA")
        _write(port / "state", "4: ACTIVE" if up else "1: DOWN")
        _write(port / "phys_state", "5: LinkUp" if up else "3: Disabled")
        _write(port / "rate", PORT_RATE)
        _write(port / "link_layer", "Ethernet")
        for stale in (port / "gids").glob("*") if (port / "gids").is_dir() else []:
            stale.unlink()
        for stale in (port / "gid_attrs").glob("*/*") if (port / "gid_attrs").is_dir() else []:
            stale.unlink()
        table = gid_table(node, device, netdev, gid_indexes.get(device, ROCE_V2_GID_INDEX))
        for index in range(max(GID_TABLE_SIZE, len(table))):
            gid, kind = table[index] if index < len(table) else (EMPTY_GID, "")
            _write(port / "gids" / str(index), gid)
            if kind:
                _write(port / "gid_attrs" / "types" / str(index), kind)
                _write(port / "gid_attrs" / "ndevs" / str(index), netdev)
        for counter in COUNTERS:
            path = port / "counters" / counter
            if not path.exists():
                _write(path, "0")
        link = device_dir / "device" / "net" / netdev
        if not link.is_symlink():
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(Path("../../../../net") / netdev)
        net = net_dir(node, netdev)
        _write(net / "mtu", str(mtus.get(netdev, FABRIC_MTU)))
        _write(net / "operstate", "up" if up else "down")
        _write(net / "carrier", "1" if up else "0")
        _write(net / "speed", "200000" if up else "-1")
        _write(net / "address", mac_address(node, netdev_index))
        _write(net / "phys_port_name", f"p{netdev_index % 2}")
    management = net_dir(node, MANAGEMENT_NETDEV)
    _write(management / "mtu", str(mtus.get(MANAGEMENT_NETDEV, 1500)))
    _write(management / "operstate", "up")
    _write(management / "speed", "10000")
    _write(management / "address", mac_address(node, 9))


def port_active(node: NodeInfo, device: str) -> bool:
    return (ib_port_dir(node, device) / "state").read_text().strip().endswith("ACTIVE")


def netdev_up(node: NodeInfo, netdev: str) -> bool:
    return (net_dir(node, netdev) / "operstate").read_text().strip() == "up"


def netdev_mtu(node: NodeInfo, netdev: str) -> int:
    return int((net_dir(node, netdev) / "mtu").read_text())


def roce_v2_ipv4_gid_index(node: NodeInfo, device: str) -> int | None:
    """The lowest index whose type is RoCE v2 and whose GID is IPv4-mapped (network.sh's rule)."""
    port = ib_port_dir(node, device)
    for index in range(len(list((port / "gids").iterdir()))):
        kind_path = port / "gid_attrs" / "types" / str(index)
        gid = (port / "gids" / str(index)).read_text().strip()
        is_v2 = kind_path.exists() and kind_path.read_text().strip() == "RoCE v2"
        if is_v2 and gid.startswith("0000:0000:0000:0000:0000:ffff:"):
            return index
    return None


def add_traffic(node: NodeInfo, octets: int) -> None:
    """RDMA traffic shows only in port counters (units of 4 octets), spread over live devices."""
    devices = [device for device in ROCE_DEVICES if port_active(node, device)]
    if not devices or octets <= 0:
        return
    words = octets // 4 // len(devices)
    lock_path = sys_dir(node) / ".counters.lock"
    with lock_path.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for device in devices:
            for counter in ("port_xmit_data", "port_rcv_data"):
                path = ib_port_dir(node, device) / "counters" / counter
                path.write_text(f"{int(path.read_text() or 0) + words}\n")
            for counter in ("port_xmit_packets", "port_rcv_packets"):
                path = ib_port_dir(node, device) / "counters" / counter
                path.write_text(f"{int(path.read_text() or 0) + max(1, words // 1024)}\n")


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")
