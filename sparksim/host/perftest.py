"""perftest stand-ins (ib_write_lat, ib_read_lat, ib_send_lat, ib_write_bw).

Numbers come from seed 003's full-mesh matrix (2-byte messages, 10,000 iterations):
write ~3.2 us avg / 4.5 p99, read ~6.2 / 9.5, send ~3.0 / 4.0, ib_write_bw 107.66 Gbit/s.
"""

import argparse
import os
import time
import zlib
from pathlib import Path

from sparksim.files import write_atomically
from sparksim.host.node import ROCE_DEVICES, NodeInfo, save_node
from sparksim.host.ping import NETDEV_DEVICE, find_peer, same_subnet
from sparksim.host.sysfs import add_traffic, port_active, roce_v2_ipv4_gid_index
from sparksim.rendezvous import cluster_dir, pid_alive

LATENCY_US = {  # test -> (typical, average, p99, p99.9, min, max)
    "ib_write_lat": (3.17, 3.20, 4.44, 6.02, 2.85, 8.11),
    "ib_read_lat": (6.21, 6.28, 9.55, 12.40, 5.61, 14.90),
    "ib_send_lat": (2.98, 3.02, 3.98, 5.10, 2.51, 7.40),
}
BANDWIDTH_GBIT = 107.66
TITLES = {"ib_write_lat": "RDMA_Write Latency Test", "ib_read_lat": "RDMA_Read Latency Test",
          "ib_send_lat": "Send Latency Test", "ib_write_bw": "RDMA_Write BW Test"}
RULE = "-" * 87
SERVER_WAIT_S = 60.0  # a real server waits for its client until killed; this one gives up


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(add_help=False)
    add = parser.add_argument
    add("-d", "--ib-dev", dest="device", default="rocep1s0f0")
    add("-i", "--ib-port", dest="port", type=int, default=1)
    add("-x", "--gid-index", dest="gid_index", type=int, default=None)
    add("-s", "--size", dest="size", type=int, default=None)
    add("-n", "--iters", dest="iterations", type=int, default=None)
    add("-p", "--port", dest="tcp_port", type=int, default=18515)
    add("-F", "--CPU-freq", dest="cpu_freq", action="store_true")
    add("-a", "--all", dest="all_sizes", action="store_true")
    add("-D", "--duration", dest="duration", type=int, default=None)
    add("-q", "--qp", dest="qps", type=int, default=1)
    add("--report_gbits", action="store_true")
    add("-R", "--rdma_cm", dest="rdma_cm", action="store_true")
    add("server", nargs="?", default=None)
    return parser


def perftest(node: NodeInfo, tool: str, argv: list[str]) -> int:
    args, _ = parser().parse_known_args(argv)
    if args.device not in ROCE_DEVICES:
        print(f" IB device {args.device} not found\n Unable to find the Infiniband/RoCE device")
        return 1
    netdev = ROCE_DEVICES[args.device]
    gid_index = args.gid_index
    if gid_index is None:
        gid_index = roce_v2_ipv4_gid_index(node, args.device) or 0
    if not port_active(node, args.device):
        print(" Port number 1 state is Down\n Couldn't set the link layer")
        return 1
    if args.server is None:
        return serve(node, tool, args, gid_index)
    peer = find_peer(node, args.server)
    peer_device = NETDEV_DEVICE.get(peer[1]) if peer else None
    if (
        peer is None
        or peer_device is None
        or not same_subnet(node, netdev, args.server)
        or not port_active(peer[0], peer_device)
    ):
        print(f"Couldn't connect to {args.server}:{args.tcp_port}\n"
              " Unable to open file descriptor for socket connection Unable to init the socket "
              "connection")
        return 1
    listening = listen_path(peer[0], args.tcp_port)
    if not listening.is_file() or not pid_alive(int(listening.read_text().split()[0] or 0)):
        print(f"Couldn't connect to {args.server}:{args.tcp_port}\n"
              " Unable to open file descriptor for socket connection Unable to init the socket "
              "connection")
        return 1
    rise = float(node.faults.get("rtt_rise_usec", 0))
    if rise:  # a link getting worse: every measurement sees a longer round trip than the last
        node.faults["slow_rtt_usec"] = float(node.faults.get("slow_rtt_usec", 0)) + rise
        save_node(node)
    extra_us = float(node.faults.get("slow_rtt_usec", 0)) / 2 + float(
        peer[0].faults.get("slow_rtt_usec", 0)) / 2
    if tool == "ib_write_bw":
        table = bandwidth_table(args, node.name + args.server)
        add_traffic(node, 5000 * 65536)
        add_traffic(peer[0], 5000 * 65536)
    else:
        table = latency_table(tool, args, extra_us, node.name + args.server)
    lines = [header(tool, args.device, gid_index),
             f" local address: LID 0000 QPN 0x{node.host_number:04x} PSN 0x5f3b1a",
             f" GID: {mapped_gid(node.fabric_ip(netdev))}",
             f" remote address: LID 0000 QPN 0x{peer[0].host_number:04x} PSN 0x2b4c9d",
             f" GID: {mapped_gid(args.server)}", RULE, table, RULE]
    write_atomically(listening.with_suffix(".done"), "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


def listen_path(node: NodeInfo, tcp_port: int) -> Path:
    directory = cluster_dir(node.root) / "perftest"
    directory.mkdir(parents=True, exist_ok=True)
    return directory / f"{node.name}-{tcp_port}.listen"


def serve(node: NodeInfo, tool: str, args: argparse.Namespace, gid_index: int) -> int:
    """The server side listens on its TCP port until one client has run, then prints the
    same result table (perftest prints it on both sides)."""
    listening = listen_path(node, args.tcp_port)
    if listening.is_file() and pid_alive(int(listening.read_text().split()[0] or 0)):
        print(f" Couldn't listen to port {args.tcp_port}")
        return 1
    done = listening.with_suffix(".done")
    done.unlink(missing_ok=True)
    write_atomically(listening, f"{os.getpid()} {tool}\n")
    print(header(tool, args.device, gid_index))
    print("\n************************************\n* Waiting for client to connect... *\n"
          "************************************", flush=True)
    try:
        deadline = time.monotonic() + SERVER_WAIT_S
        while not done.is_file():
            if time.monotonic() > deadline:
                print(" Couldn't accept a client connection: timed out")
                return 1
            time.sleep(0.02)
        text = done.read_text()
        print(text[text.index(" local address"):], end="")
        return 0
    finally:
        listening.unlink(missing_ok=True)
        done.unlink(missing_ok=True)


def header(tool: str, device: str, gid_index: int) -> str:
    return "\n".join([
        RULE, f"                    {TITLES[tool]}",
        f" Dual-port       : OFF\t\tDevice         : {device}",
        " Number of qps   : 1\t\tTransport type : IB",
        " Connection type : RC\t\tUsing SRQ      : OFF",
        " PCIe relax order: ON", " ibv_wr* API     : ON", " TX depth        : 1",
        " Mtu             : 4096[B]", " Link type       : Ethernet",
        f" GID index       : {gid_index}", " Max inline data : 220[B]",
        " rdma_cm QPs\t : OFF", " Data ex. method : Ethernet", RULE,
    ])


def mapped_gid(ipv4: str) -> str:
    return "00:00:00:00:00:00:00:00:00:00:255:255:" + ":".join(ipv4.split("."))


def latency_table(tool: str, args: argparse.Namespace, extra_us: float, pair: str) -> str:
    typical, average, p99, p999, low, high = (value + extra_us for value in LATENCY_US[tool])
    # A per-pair offset, like the seed's matrix where pairs differ by a few tenths of a us.
    offset = (zlib.crc32(pair.encode()) % 30) / 100.0 - 0.15
    size = args.size or 2
    iterations = args.iterations or 1000
    return (" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]"
            "    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n"
            f" {size:<7}{iterations:<14}{low + offset:<15.2f}{high + offset:<13.2f}"
            f"{typical + offset:<19.2f}{average + offset:<17.2f}{0.12:<16.2f}"
            f"{p99 + offset:<23.2f}{p999 + offset:.2f}")


def bandwidth_table(args: argparse.Namespace, pair: str) -> str:
    offset = (zlib.crc32(pair.encode()) % 100) / 100.0
    size = args.size or 65536
    iterations = args.iterations or 5000
    average = BANDWIDTH_GBIT - offset
    peak = BANDWIDTH_GBIT + 0.15
    rate = average * 1e9 / 8 / size / 1e6
    if args.report_gbits:
        unit, peak_value, average_value = "Gb/sec", peak, average
    else:
        unit, peak_value, average_value = "MB/sec", peak * 1e3 / 8, average * 1e3 / 8
    return (f" #bytes     #iterations    BW peak[{unit}]    BW average[{unit}]   MsgRate[Mpps]\n"
            f" {size:<11}{iterations:<15}{peak_value:<19.2f}{average_value:<21.2f}{rate:.6f}")
