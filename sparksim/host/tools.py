"""Stand-ins for nvidia-smi, ibdev2netdev and ip, reading the node's fake /sys.

A node's `bin/nvidia-smi` is the sh script sparksim.host.smi writes (no Python per call);
`nvidia_smi` here answers the same for `python -m sparksim tool nvidia-smi`."""

import sys
from pathlib import Path

from sparksim.host.nccl import PROGRAMS, collective_direct, mpirun
from sparksim.host.node import MANAGEMENT_NETDEV, ROCE_DEVICES, NodeInfo, load_node
from sparksim.host.procfs import engines_gib
from sparksim.host.smi import BANNER, engine_app, foreign_app, gpu_fields
from sparksim.host.sysfs import mac_address, netdev_mtu, netdev_up, port_active

NETDEV_INDEX = {MANAGEMENT_NETDEV: 2, **{netdev: 7 + offset for offset, netdev in
                                         enumerate(ROCE_DEVICES.values())}}


def tool_command(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--node-dir":
        print("usage: python -m sparksim tool NAME --node-dir DIR ARGS...", file=sys.stderr)
        return 2
    name, node, rest = argv[0], load_node(argv[2]), argv[3:]
    if name == "nvidia-smi":
        return nvidia_smi(node, rest)
    if name == "ibdev2netdev":
        return ibdev2netdev(node, rest)
    if name == "ip":
        return ip(node, rest)
    if name == "ping":
        from sparksim.host.ping import ping

        return ping(node, rest)
    if name in ("df", "ssh"):
        from sparksim.host import storage

        return storage.df(node, rest) if name == "df" else storage.ssh(node, rest)
    if name == "mpirun":
        return mpirun(node, rest)
    if name in PROGRAMS:
        return collective_direct(node, name, rest)
    if name.startswith("ib_"):
        from sparksim.host.perftest import perftest

        return perftest(node, name, rest)
    print(f"sparksim: no stand-in for {name}", file=sys.stderr)
    return 127


def nvidia_smi(node: NodeInfo, argv: list[str]) -> int:
    query = next((item.split("=", 1)[1] for item in argv if item.startswith("--query-gpu=")), None)
    if query is None and "--query-gpu" in argv:
        query = argv[argv.index("--query-gpu") + 1]
    output_format = next((item.split("=", 1)[1] for item in argv if item.startswith("--format=")),
                         "csv")
    apps = next((item.split("=", 1)[1] for item in argv if item.startswith("--query-compute-apps=")), None)
    if apps is not None:
        return compute_apps(node, apps, output_format)
    if query is None:
        print("\n".join(BANNER))
        return 0
    fields = gpu_fields(node, busy=engines_gib(node) > 0)
    names = [name.strip() for name in query.split(",")]
    unknown = [name for name in names if name not in fields]
    if unknown:
        print(f'Field "{unknown[0]}" is not a valid field to query.', file=sys.stderr)
        return 2
    flags = output_format.split(",")
    if "noheader" not in flags:
        print(", ".join(name + (f" [{fields[name][1].strip()}]" if fields[name][1] and
                                "nounits" not in flags else "") for name in names))
    values = []
    for name in names:
        value, unit = fields[name]
        values.append(value if "nounits" in flags or value == "[N/A]" else value + unit)
    print(", ".join(values))
    return 0


def compute_apps(node: NodeInfo, query: str, output_format: str) -> int:
    """Processes holding the GPU: an engine the shim runs, or a foreign one (`gpu-busy` fault)."""
    apps: list[dict[str, str]] = []
    if engines_gib(node) > 0:
        apps.append(engine_app(node))
    foreign = foreign_app(node)
    if foreign is not None:
        apps.append(foreign)
    names = [name.strip() for name in query.split(",")]
    if "noheader" not in output_format:
        print(", ".join(names))
    for app in apps:
        # Memory is [N/A] on a GB10 (unified memory), also per process.
        print(", ".join(app.get(name, "[N/A]") for name in names))
    return 0


def ibdev2netdev(node: NodeInfo, argv: list[str]) -> int:  # noqa: ARG001 (every tool takes its argv)
    for device, netdev in ROCE_DEVICES.items():
        state = "Up" if port_active(node, device) and netdev_up(node, netdev) else "Down"
        print(f"{device} port 1 ==> {netdev} ({state})")
    return 0


def ip(node: NodeInfo, argv: list[str]) -> int:
    arguments = [item for item in argv if item not in ("-o", "-4", "-br", "-brief")]
    one_line = "-o" in argv
    netdevs = list(NETDEV_INDEX)
    if "dev" in arguments:
        wanted = arguments[arguments.index("dev") + 1]
        if wanted not in NETDEV_INDEX:
            print(f'Device "{wanted}" does not exist.', file=sys.stderr)
            return 1
        netdevs = [wanted]
    if arguments[:1] in (["addr"], ["address"], ["a"]):
        for netdev in netdevs:
            print(address_line(node, netdev, one_line))
        return 0
    if arguments[:1] == ["link"]:
        for netdev in netdevs:
            print(link_line(node, netdev))
        return 0
    print('Object "{}" is unknown, try "ip help".'.format(arguments[0] if arguments else ""),
          file=sys.stderr)
    return 1


def netdev_address(node: NodeInfo, netdev: str) -> str:
    return node.address if netdev == MANAGEMENT_NETDEV else node.fabric_ip(netdev)


def address_line(node: NodeInfo, netdev: str, one_line: bool) -> str:
    prefix = 8 if netdev == MANAGEMENT_NETDEV else 24
    address = netdev_address(node, netdev)
    broadcast = address.rsplit(".", 1)[0] + ".255"
    index = NETDEV_INDEX[netdev]
    line = (f"{index}: {netdev}    inet {address}/{prefix} brd {broadcast} scope global {netdev}"
            "\\       valid_lft forever preferred_lft forever")
    return line if one_line else line.replace("\\", "\n")


def link_line(node: NodeInfo, netdev: str) -> str:
    sysfs = Path(node.sim_dir) / "sys" / "class" / "net" / netdev
    state = (sysfs / "operstate").read_text().strip().upper()
    index = NETDEV_INDEX[netdev]
    mtu = netdev_mtu(node, netdev)
    offset = 9 if netdev == MANAGEMENT_NETDEV else list(NETDEV_INDEX).index(netdev) - 1
    mac = mac_address(node, offset)
    return (f"{index}: {netdev}: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu {mtu} qdisc mq "
            f"state {state} "
            f"mode DEFAULT group default qlen 1000\\    link/ether {mac} brd ff:ff:ff:ff:ff:ff")
