"""nccl-tests stand-ins: `mpirun ... all_reduce_perf|all_gather_perf -b B -e E -f F`.

The output is nccl-tests' own table with NCCL_DEBUG=INFO lines. Figures follow the
references: a healthy 200G cable (both PCIe halves, `NET/IB : Using [0]rocep1s0f0:1/RoCE
[1]roceP2p1s0f0:1/RoCE`) reaches ~23 GB/s bus bandwidth on large buffers (seed 000: 185
Gb/s all-reduce, 92% of nominal); one half only gives half of it; no usable RoCE device
(or NCCL_IB_DISABLE=1) falls back to sockets at ~3 GB/s (`via NET/Socket`).
"""

import os
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path

from sparksim.host.node import MANAGEMENT_NETDEV, ROCE_DEVICES, NodeInfo, cluster_nodes
from sparksim.host.ping import address_of
from sparksim.host.sysfs import add_traffic, port_active, roce_v2_ipv4_gid_index

CABLE_BUSBW_GBS = 23.3  # both halves of one 200G cable, large buffers
HALF_WINDOW_BYTES = 40 * 1024 * 1024  # small buffers pay a fixed cost: 512 MiB reaches ~93%
SOCKET_BUSBW_GBS = 2.9
PROGRAMS = {"all_reduce_perf": ("sum", "all-reduce"), "all_gather_perf": ("none", "all-gather")}
SIZE_SUFFIXES = {"K": 1024, "M": 1024**2, "G": 1024**3}


@dataclass
class Rank:
    node: NodeInfo
    host: str  # as given to -H
    pid: int


def parse_size(text: str) -> int:
    text = text.strip().upper()
    if text and text[-1] in SIZE_SUFFIXES:
        return int(float(text[:-1]) * SIZE_SUFFIXES[text[-1]])
    return int(text)


def resolve_host(node: NodeInfo, host: str) -> NodeInfo | None:
    for candidate in cluster_nodes(node.root):
        if host in (candidate.name, candidate.address,
                    *(address_of(candidate, netdev) for netdev in [*ROCE_DEVICES.values(), MANAGEMENT_NETDEV])):
            return candidate
    return None


def mpirun(node: NodeInfo, argv: list[str]) -> int:
    """Open MPI's launcher, enough of it: -np, -H host:slots,..., -x VAR[=VALUE], --mca k v."""
    env = dict(os.environ)
    hosts: list[str] = []
    ranks = 0
    index = 0
    while index < len(argv):
        item = argv[index]
        if item in ("-np", "-n"):
            ranks = int(argv[index + 1])
            index += 2
        elif item in ("-H", "--host"):
            hosts = [part.split(":")[0] for part in argv[index + 1].split(",") if part]
            index += 2
        elif item == "-x":
            name, _, value = argv[index + 1].partition("=")
            env[name] = value if "=" in argv[index + 1] else os.environ.get(name, "")
            index += 2
        elif item == "--mca":
            index += 3
        elif item.startswith("-"):
            index += 1
        else:
            break
    program, arguments = (argv[index], argv[index + 1:]) if index < len(argv) else ("", [])
    if not program:
        print("prterun: no application specified", file=sys.stderr)
        return 1
    hosts = hosts or [node.address]
    members: list[Rank] = []
    for rank, host in enumerate(hosts[:ranks or len(hosts)]):
        member = resolve_host(node, host)
        if member is None:
            print(f"ssh: connect to host {host} port 22: No route to host", file=sys.stderr)
            print("--------------------------------------------------------------------------\n"
                  "PRTE has lost communication with a remote daemon.\n"
                  "--------------------------------------------------------------------------",
                  file=sys.stderr)
            return 1
        if not (Path(member.sim_dir) / "bin" / Path(program).name).exists():
            print("--------------------------------------------------------------------------\n"
                  "prterun was unable to launch the specified application as it could not access\n"
                  "or execute an executable:\n\n"
                  f"Executable: {program}\nNode: {member.name}\n\n"
                  f"while attempting to start process rank {rank}.\n"
                  "--------------------------------------------------------------------------",
                  file=sys.stderr)
            return 1
        members.append(Rank(member, host, 40000 + member.host_number * 7 + rank))
    return collective(Path(program).name, members, env, arguments)


def collective_direct(node: NodeInfo, program: str, argv: list[str]) -> int:
    """The test binary started without mpirun: one rank on this node."""
    return collective(program, [Rank(node, node.address, 40000 + node.host_number * 7)], dict(os.environ), argv)


def usable_devices(node: NodeInfo, env: dict[str, str]) -> list[str]:
    wanted = [name.strip().lstrip("^=").split(":")[0] for name in env.get("NCCL_IB_HCA", "").split(",")
              if name.strip()]
    return [device for device in (wanted or list(ROCE_DEVICES)) if device in ROCE_DEVICES
            and port_active(node, device)]


def collective(program: str, ranks: list[Rank], env: dict[str, str], argv: list[str]) -> int:
    if program not in PROGRAMS:
        print(f"{program}: not an nccl-tests collective", file=sys.stderr)
        return 1
    options = {"-b": "8", "-e": "128M", "-f": "2", "-n": "20", "-w": "5", "-g": "1"}
    for position, item in enumerate(argv[:-1]):
        if item in options:
            options[item] = argv[position + 1]
    low, high, factor = parse_size(options["-b"]), parse_size(options["-e"]), max(2, int(options["-f"]))
    print(f"# nThread 1 nGpus 1 minBytes {low} maxBytes {high} step: {factor}(factor) warmup iters: "
          f"{options['-w']} iters: {options['-n']} agg iters: 1 validation: 1 graph: 0\n#\n# Using devices")
    for number, rank in enumerate(ranks):
        print(f"#  Rank {number:2d} Group  0 Pid {rank.pid:6d} on {rank.node.name:>10} device  0 [0x01] NVIDIA GB10")
    head = ranks[0]
    prefix = f"{head.node.name}:{head.pid}:{head.pid} [0]"
    eth_if = env.get("NCCL_SOCKET_IFNAME", "enp1s0f0np0").lstrip("^=").split(",")[0]
    oob = f"{eth_if}:{address_of(head.node, eth_if) if eth_if in ROCE_DEVICES.values() else head.node.address}<0>"
    print(f"{prefix} NCCL INFO Bootstrap : Using {oob}")
    print(f"{prefix} NCCL INFO NCCL version 2.30.7+cuda13.0")
    devices = usable_devices(head.node, env)
    per_rank = [usable_devices(rank.node, env) for rank in ranks]
    paths = min((len(found) for found in per_rank), default=0)
    socket = env.get("NCCL_IB_DISABLE", "0") == "1" or paths == 0
    if not _open_network(prefix, oob, ranks, env, devices, socket=socket):
        return 1
    if len(ranks) > 1:
        for channel in range(max(1, paths) * 2 if not socket else 2):
            via = "NET/Socket/0" if socket else f"NET/IB/{channel % paths}"
            print(f"{prefix} NCCL INFO Channel {channel:02d}/0 : 0[0] -> 1[0] [send] via {via}")
    _print_results(program, ranks, _buffer_sizes(low, high, factor), socket=socket, paths=paths)
    return 0


def _open_network(prefix: str, oob: str, ranks: list[Rank], env: dict[str, str], devices: list[str],
                  *, socket: bool) -> bool:
    """NCCL's network lines; False (after NCCL's failure lines) when the queue pairs never connect."""
    if socket:
        print(f"{prefix} NCCL INFO NET/IB : No device found.")
        print(f"{prefix} NCCL INFO NET/Socket : Using [0]{oob}")
        print(f"{prefix} NCCL INFO Using network Socket")
    else:
        listed = " ".join(f"[{number}]{device}:1/RoCE" for number, device in enumerate(devices))
        print(f"{prefix} NCCL INFO NET/IB : Using {listed} [RO]; OOB {oob}")
        print(f"{prefix} NCCL INFO Using network IB")
        gid = env.get("NCCL_IB_GID_INDEX", "")
        for rank in ranks:
            for device in usable_devices(rank.node, env):
                if gid and int(gid) != roce_v2_ipv4_gid_index(rank.node, device):
                    # A GID that is not the peer's RoCE v2 IPv4 entry: queue pairs never connect.
                    print(f"{rank.node.name}:{rank.pid}:{rank.pid + 55} [0] transport/net_ib.cc:1696 NCCL WARN "
                          f"NET/IB : Got completion from peer {rank.host}<0> with status=IBV_WC_RETRY_EXC_ERR(12) "
                          f"opcode=0 len=0 vendor err 129 (Recv) localGid ::ffff:{rank.host} hca {device}")
                    print(f"{rank.node.name}: Test NCCL failure common.cu:1279 'remote process exited or there "
                          "was a network error'")
                    return False
    return True


def _buffer_sizes(low: int, high: int, factor: int) -> list[int]:
    """-b low -e high -f factor: the buffer sizes nccl-tests runs."""
    sizes = []
    size = low
    while size <= high:
        sizes.append(size)
        size *= factor
    return sizes


def _print_results(program: str, ranks: list[Rank], sizes: list[int], *, socket: bool, paths: int) -> None:
    """nccl-tests' table, one line per size, and its average; each size's traffic lands on the ranks' ports."""
    redop, _ = PROGRAMS[program]
    print("#\n#                                                              out-of-place                       "
          "in-place          \n#       size         count      type   redop    root     time   algbw   busbw "
          "#wrong     time   algbw   busbw #wrong\n#        (B)    (elements)                               (us)  "
          "(GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       ")
    count = len(ranks)
    bus_factor = (2 * (count - 1) / count) if program == "all_reduce_perf" else ((count - 1) / count)
    busbws: list[float] = []
    for size in sizes:
        jitter = (zlib.crc32(f"{program}{size}{count}".encode()) % 20) / 100.0 - 0.1
        if count == 1:
            busbw, algbw = 0.0, 180.0 + jitter
        else:
            full = SOCKET_BUSBW_GBS if socket else CABLE_BUSBW_GBS * min(paths, 2) / 2
            busbw = max(0.01, full * size / (size + HALF_WINDOW_BYTES) + jitter)
            algbw = busbw / bus_factor
        busbws.append(busbw)
        seconds_us = size / (algbw * 1e9) * 1e6
        elements = size // 4 if program == "all_reduce_perf" else size // 4 // count
        print(f"{size:>12d}  {elements:>12d}     float  {redop:>6}      -1  {seconds_us:7.1f}  {algbw:6.2f}  "
              f"{busbw:6.2f}      0  {seconds_us * 0.998:7.1f}  {algbw * 1.002:6.2f}  {busbw * 1.002:6.2f}      0")
        for rank in ranks:
            add_traffic(rank.node, int(size * bus_factor) * 25)
    print("# Out of bounds values : 0 OK")
    print(f"# Avg bus bandwidth    : {sum(busbws) / max(len(busbws), 1):.4f} \n#")
