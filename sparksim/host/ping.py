"""`ping` over the simulated fabric: nothing is sent; the answer follows both nodes' state."""

import argparse
import ipaddress
import sys
import zlib

from sparksim.host.node import MANAGEMENT_NETDEV, ROCE_DEVICES, NodeInfo, cluster_nodes
from sparksim.host.sysfs import netdev_mtu, netdev_up, port_active
from sparksim.host.wedge import is_wedged

NETDEV_DEVICE = {netdev: device for device, netdev in ROCE_DEVICES.items()}
IP_ICMP_HEADER_BYTES = 28
BASE_RTT_MS = 0.21  # direct QSFP; seed 003 saw 0.49-1.26 ms through a switch


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ping", add_help=False)
    parser.add_argument("-M", dest="pmtu", default="want")
    parser.add_argument("-s", dest="size", type=int, default=56)
    parser.add_argument("-c", dest="count", type=int, default=3)
    parser.add_argument("-W", dest="wait", type=float, default=1.0)
    parser.add_argument("-w", dest="deadline", type=float, default=None)
    parser.add_argument("-i", dest="interval", type=float, default=1.0)
    parser.add_argument("-I", dest="interface", default=None)
    parser.add_argument("-q", dest="quiet", action="store_true")
    parser.add_argument("-n", dest="numeric", action="store_true")
    parser.add_argument("destination")
    return parser


def local_netdev(node: NodeInfo, interface: str | None, destination: str) -> str | None:
    netdevs = [*ROCE_DEVICES.values(), MANAGEMENT_NETDEV]
    if interface in netdevs:
        return interface
    for netdev in netdevs:
        if interface is not None and interface == address_of(node, netdev):
            return netdev
    if interface is None:
        for netdev in netdevs:
            if same_subnet(node, netdev, destination):
                return netdev
        return MANAGEMENT_NETDEV
    return None


def address_of(node: NodeInfo, netdev: str) -> str:
    return node.address if netdev == MANAGEMENT_NETDEV else node.fabric_ip(netdev)


def same_subnet(node: NodeInfo, netdev: str, destination: str) -> bool:
    prefix = 8 if netdev == MANAGEMENT_NETDEV else 24
    network = ipaddress.ip_network(f"{address_of(node, netdev)}/{prefix}", strict=False)
    try:
        return ipaddress.ip_address(destination) in network
    except ValueError:
        return False


def link_ok(node: NodeInfo, netdev: str) -> bool:
    if netdev == MANAGEMENT_NETDEV:
        return True
    return netdev_up(node, netdev) and port_active(node, NETDEV_DEVICE[netdev])


def find_peer(node: NodeInfo, destination: str) -> tuple[NodeInfo, str] | None:
    for peer in cluster_nodes(node.root):
        for netdev in [*ROCE_DEVICES.values(), MANAGEMENT_NETDEV]:
            if address_of(peer, netdev) == destination:
                return peer, netdev
    return None


def ping(node: NodeInfo, argv: list[str]) -> int:
    try:
        args = parser().parse_args(argv)
    except SystemExit:
        print("ping: usage error: Destination address required", file=sys.stderr)
        return 2
    destination = args.destination
    netdev = local_netdev(node, args.interface, destination)
    if netdev is None:
        print(f"ping: SO_BINDTODEVICE {args.interface}: No such device", file=sys.stderr)
        return 2
    if not link_ok(node, netdev):
        print("ping: connect: Network is unreachable", file=sys.stderr)
        return 2
    source = address_of(node, netdev)
    packet = args.size + IP_ICMP_HEADER_BYTES
    print(f"PING {destination} ({destination}) from {source} {netdev}: "
          f"{args.size}({packet}) bytes of data.")
    local_mtu = mtu_of(node, netdev)
    if args.pmtu == "do" and packet > local_mtu:
        for _ in range(args.count):
            print(f"ping: local error: message too long, mtu={local_mtu}")
        return statistics(destination, args.count, 0, [], errors=args.count)
    peer = find_peer(node, destination)
    reachable = (
        peer is not None
        and same_subnet(node, netdev, destination)
        and link_ok(*peer)
        # A frame larger than the far end's MTU is dropped there without a word.
        and packet <= mtu_of(*peer)
        and not is_wedged(peer[0])  # a wedged Spark answers nothing (seed 004)
    )
    if not reachable:
        return statistics(destination, args.count, 0, [])
    assert peer is not None
    extra_ms = float(node.faults.get("slow_rtt_usec", 0)) / 1000.0
    extra_ms += float(peer[0].faults.get("slow_rtt_usec", 0)) / 1000.0
    times = []
    for sequence in range(1, args.count + 1):
        jitter = (zlib.crc32(f"{destination}{sequence}".encode()) % 60) / 1000.0
        rtt = BASE_RTT_MS + extra_ms + jitter + packet / 9000 * 0.05
        times.append(rtt)
        if not args.quiet:
            print(f"{args.size + 8} bytes from {destination}: icmp_seq={sequence} ttl=64 "
                  f"time={rtt:.3f} ms")
    return statistics(destination, args.count, args.count, times)


def mtu_of(node: NodeInfo, netdev: str) -> int:
    return netdev_mtu(node, netdev)


def statistics(destination: str, sent: int, received: int, times: list[float],
               errors: int = 0) -> int:
    loss = 100 * (sent - received) // max(sent, 1)
    error_text = f", +{errors} errors" if errors else ""
    print(f"\n--- {destination} ping statistics ---")
    print(f"{sent} packets transmitted, {received} received{error_text}, {loss}% packet loss, "
          f"time {max(sent - 1, 0) * 1000 + 3}ms")
    if times:
        average = sum(times) / len(times)
        deviation = (sum((value - average) ** 2 for value in times) / len(times)) ** 0.5
        print(f"rtt min/avg/max/mdev = {min(times):.3f}/{average:.3f}/{max(times):.3f}/"
              f"{deviation:.3f} ms")
    return 0 if received else 1
